"""Split a long reduction into few outputs in two: partial results, then their total.

Before:  sum: f32[4096] = aten.sum.dim_IntList(x, [0])          x: f32[16384, 4096]
After:   view: f32[16, 1024, 4096] = aten.view.default(x, [16, 1024, 4096])
         sum_1: f32[16, 1, 4096] = aten.sum.dim_IntList(view, [1], True)
         sum: f32[4096] = aten.sum.dim_IntList(sum_1, [0, 1])

Note [Split reductions]
~~~~~~~~~~~~~~~~~~~~~~~
A reduction kernel shares its rows out among programs (GPU) or threads (CPU): a
reduction with few rows and long ones, `x.sum(0)` of a tall matrix or a full
`x.sum()`, would keep most of the machine idle while a few programs walk whole
columns. Splitting one reduced dimension of size n into (s, n / s) and reducing
the n / s part first gives s times as many rows, each s times shorter, writing
s partial results per output, which a second, small kernel reduces. `s` is the
smallest power of two that gives the device enough units of work (`UNITS`), where
a unit is a row of a kernel reducing trailing dimensions and a tile of
neighbouring rows of one reading across them (Note [Reduction order] in fuse.py),
while each partial still reduces `PART_MIN` elements. Sums, means (of equal
parts), maxima and minima split exactly that way; a mean or sum of f16/bf16 is
summed in f32 throughout and rounded once at the end, as eager's is.

A variance (`var_mean`: a group norm's statistics) splits into each part's mean
and variance, which combine as Chan et al.'s parallel algorithm does for parts of
`k` elements each: the mean is the parts' mean, and the sum of squared deviations
is `k * sum(var_i) + k * sum((mean_i - mean)^2)`. Stable Diffusion's first group
norm has 64 rows of 40960: one program a row left half of an H100 idle.

Where the reduction runs over several dimensions, one of them whole can be the
parts: a batch norm's statistics over (0, 2, 3) of NCHW reduce (2, 3) first, one
row per image and channel, then the images. No view stands between the reduction
and its input, so the pointwise values it reduces (a batch norm backward's
products) are computed in the kernel of the partials, never stored; a split view
of a value computed in another kernel would have to store that value. Such a
split is taken where it gives the device enough units of work, each part reducing
`WHOLE_PART_MIN` elements; on the CPU from `WHOLE_NUMEL_MIN` elements, fewer
than a reshaped split needs: the unsplit kernel walks the reduced dimensions of
NCHW with a division per element, and there the batch norm's backward joins
both its statistics in one kernel of 64 rows; the partials read contiguous rows.
A ResNet block's training step at [4, 64, 28, 28] spent 5.6 ms in its kernels
on two threads, 1.7 ms split.

Decided at transpile time for the declared shapes; a dynamic size is never split.
"""

from __future__ import annotations

import functools
import math

import torch

from transpiler.ir.graph import Graph, Node
from transpiler.ir.ops import bind_args, correction
from transpiler.passes.fuse import (
    reduced_dims,
    reduction_ok,
    reduction_order,
    reduction_spec,
    trailing,
)
from transpiler.passes.retrace import retrace

NUMEL_MIN = {"cuda": 1 << 20, "cpu": 1 << 18}  # elements below which no split pays
# ... no split at a whole dimension: on the CPU it pays from fewer, its partials
# reading contiguous rows where the unsplit kernel divides to walk the dimensions
WHOLE_NUMEL_MIN = {"cuda": 1 << 20, "cpu": 1 << 16}
WHOLE_PART_MIN = {"cuda": 256, "cpu": 512}  # ... and the elements of its partials
UNITS = {"cuda": 1024, "cpu": 32}  # units of work that keep the device busy
PART_MIN = {"cuda": 256, "cpu": 1024}  # elements each partial result reduces
TILE = {"cuda": 64, "cpu": 1024}  # neighbouring rows a kernel reading across rows
# reads together, at most (on the CPU: Note [Column tiles] in codegen/cpp.py)
SPLITS = {  # reduction -> how its parts combine
    "aten.sum.dim_IntList": torch.sum,
    "aten.sum.default": torch.sum,
    "aten.mean.dim": torch.mean,
    "aten.mean.default": torch.mean,
    "aten.amax.default": torch.amax,
    "aten.amin.default": torch.amin,
    "aten.max.default": torch.amax,
    "aten.min.default": torch.amin,
}
LOW_PRECISION = (torch.float16, torch.bfloat16)
VARIANCES = (
    "aten.var_mean.correction",
    "aten.var_mean.dim",
    "aten.var.correction",
    "aten.var.dim",
)


def split_reductions(graph: Graph, device: str) -> Graph:
    nodes = graph.by_name()
    split = {
        n.name: s
        for n in graph.nodes
        if n.target in SPLITS and (s := _split(n, nodes, device)) is not None
    }
    split |= {
        n.name: s
        for n in graph.nodes
        if n.target in VARIANCES and (s := _split(n, nodes, device)) is not None
    }
    if not split:
        return graph
    rewrites = {
        target: functools.partial(_rewrite, split, SPLITS[target]) for target in SPLITS
    }
    rewrites |= {
        target: functools.partial(_split_variance, split) for target in VARIANCES
    }
    return retrace(graph, rewrites=rewrites)


def _split(node: Node, nodes: dict[str, Node], device: str) -> tuple | None:
    """(dimension split, parts, dimensions reduced) of a reduction worth
    splitting, or None. `parts` is None where dimension split is reduced whole
    in the second kernel (Note [Split reductions])."""
    if not reduction_ok(node, nodes):
        return None
    shape = nodes[node.args[0].name].tensor_meta.shape
    if not all(isinstance(n, int) for n in shape):
        return None
    rows, rnumel = reduction_spec(node, nodes)
    if rows * rnumel < WHOLE_NUMEL_MIN[device]:
        return None
    tile = TILE[device]
    units = max(rows // tile if reduction_order(node, nodes) else rows, 1)
    if units >= UNITS[device]:
        return None
    reduced = reduced_dims(node, nodes)
    for d in reduced:  # a whole dimension as the parts
        rest = [e for e in reduced if e != d]
        if not rest or rnumel // shape[d] < WHOLE_PART_MIN[device]:
            continue
        parted = rows * shape[d] // (1 if trailing(shape, rest) else tile)
        if parted >= UNITS[device]:
            return d, None, reduced
    if rows * rnumel < NUMEL_MIN[device]:
        return None
    parts = 2
    while units * parts < UNITS[device]:
        parts *= 2
    while parts > 1:
        if rnumel // parts >= PART_MIN[device]:
            for d in reduced:
                if shape[d] % parts == 0 and shape[d] > parts:
                    return d, parts, reduced
        parts //= 2
    return None


def _rewrite(split: dict, combine, node: Node, args: tuple, kwargs: dict):
    if node.name not in split:
        return NotImplemented
    d, parts, reduced = split[node.name]
    x = args[0]
    keepdim = bool(bind_args(node.target, node.args, node.kwargs).get("keepdim"))
    view, first = _parts(x, d, parts, reduced)
    low = x.dtype in LOW_PRECISION and combine in (torch.sum, torch.mean)
    if low:  # after the view: the kernel of the partials computes it
        view = view.float()
    partial = combine(view, first, keepdim=True)
    total = combine(partial, sorted(first + [d]), keepdim=False)
    if keepdim:
        total = total.view(_kept_shape(x.shape, reduced))
    return total.to(args[0].dtype) if low else total


def _split_variance(split: dict, node: Node, args: tuple, kwargs: dict):
    """`var_mean` (or `var`) from the variance and mean of each part (Note
    [Split reductions])."""
    if node.name not in split:
        return NotImplemented
    d, parts, reduced = split[node.name]
    x = args[0]
    keepdim = bool(bind_args(node.target, node.args, node.kwargs).get("keepdim"))
    dof = correction(node.target, node.args, node.kwargs)
    shape = list(x.shape)
    n = parts or shape[d]
    count = math.prod(shape[e] for e in reduced) // n  # elements in each part
    if count * n - dof <= 0:
        return NotImplemented
    view, first = _parts(x, d, parts, reduced)
    if x.dtype in LOW_PRECISION:
        view = view.float()
    every = sorted(first + [d])
    part_var, part_mean = torch.var_mean(view, first, correction=0, keepdim=True)
    mean = part_mean.mean(every, keepdim=True)
    spread = ((part_mean - mean) * (part_mean - mean)).sum(every, keepdim=True)
    squares = part_var.sum(every, keepdim=True) * count + spread * count
    var = squares / (count * n - dof)
    out = (
        _kept_shape(shape, reduced)
        if keepdim
        else [n for e, n in enumerate(shape) if e not in reduced]
    )
    var, mean = var.view(out).to(x.dtype), mean.view(out).to(x.dtype)
    return (var, mean) if "var_mean" in node.target else var


def _parts(x, d: int, parts: int | None, reduced: list[int]):
    """`x` with dimension `d` split into (parts, rest), and the dimensions of that
    view reduced first: all reduced ones but the parts. Parts None: `x` itself,
    dimension `d` the parts."""
    if parts is None:
        return x, [e for e in reduced if e != d]
    shape = list(x.shape)
    view = x.view(shape[:d] + [parts, shape[d] // parts] + shape[d + 1 :])
    return view, sorted([e + (e > d) for e in reduced if e != d] + [d + 1])


def _kept_shape(shape, reduced: list[int]) -> list[int]:
    return [1 if d in reduced else n for d, n in enumerate(shape)]


__all__ = ["split_reductions"]
