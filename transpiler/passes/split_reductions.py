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

Note [Parts of a whole tensor]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
On a GPU, a part is a row of one program, held in a block of a power of two: a
part of 5824 elements (a mean over [65536, 91], split at its first dimension into
1024 parts of 64 x 91) takes a block of 8192, a third of its lanes idle, and
torchvision's focal loss over it, a dozen ops per element, ran at 0.87x
torch.compile on the H100. Where a reduction of a whole tensor splits at no
dimension into parts a power of two long, it is split in memory order: its
elements as (parts, n / parts), each part the largest power of two that still
gives `UNITS` parts and divides n (1456 parts of 4096 there). Sums, maxima and
variances do not depend on how the elements are grouped.

A view of the value reduced would have its producers written to memory (their
positions no longer split into a row's), so the elementwise producers of its
shape that nothing else reads are computed again, each from views (parts, n /
parts) of what it reads, which must then be numbers, tensors of one element, or
tensors of the same shape in memory order: a weight that broadcasts along a
dimension cannot be read so, and the split stays at a dimension. On the CPU,
which has no blocks to fill, the split stays at a dimension.

Note [Split softmax]
~~~~~~~~~~~~~~~~~~~
A softmax, log-softmax, logsumexp or cross-entropy over few long rows (a top-k
filter's 256 rows of a 32K vocabulary) reduces each row twice: `m = max(x)`,
then `s = sum(exp(x - m))`. Split one at a time, that is two kernels of partials
and two of totals, and the second partials read the row again after the first
totals. Where the sum is of `exp(x - m)` for the split maximum of the same `x`
over the same dimensions, each part's partials are its own maximum `m_p` and
`s_p = sum(exp(x - m_p))`, both in one kernel (one pass over the part where it
does not fit a block: Note [Online softmax] in codegen/triton.py), and the
totals, in one kernel, are `m = max(m_p)` and `s = sum(s_p * exp(m_p - m))`,
a part whose values are all -inf adding nothing (its `s_p` is NaN). A row of
-inf alone sums to 0 instead of NaN, as the online loop's does; what the ops
after it compute from the maximum then gives eager's result (NaN for softmax,
-inf for logsumexp).

Decided at transpile time for the declared shapes; a dynamic size is never split.
"""

from __future__ import annotations

import functools
import math

import torch

from transpiler.ir.graph import Graph, Node, Ref, TensorMeta, leaves, map_refs
from transpiler.ir.ops import POINTWISE, bind_args, correction, resolve_op
from transpiler.passes.fuse import (
    reduced_dims,
    reduction_ok,
    reduction_order,
    reduction_spec,
    trailing,
)
from transpiler.passes.retrace import computed_again, retrace

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
# Note [Parts of a whole tensor]: the devices that part a whole tensor in memory
# order where its dimensions give no parts of a power of two; FLAT is the
# dimension such a split names
FLAT_DEVICES = ("cuda",)
FLAT = -1
OPTIONS = (torch.dtype, torch.device, torch.layout, torch.memory_format)
VARIANCES = (
    "aten.var_mean.correction",
    "aten.var_mean.dim",
    "aten.var.correction",
    "aten.var.dim",
)


def split_reductions(graph: Graph, device: str) -> Graph:
    nodes = graph.by_name()
    users = graph.users()
    split = {
        n.name: s
        for n in graph.nodes
        if n.target in SPLITS and (s := _split(n, nodes, users, device)) is not None
    }
    split |= {
        n.name: s
        for n in graph.nodes
        if n.target in VARIANCES and (s := _split(n, nodes, users, device)) is not None
    }
    if not split:
        return graph
    values: dict[str, object] = {}
    flat = functools.partial(_flat, nodes=nodes, users=users, values=values)
    partials: dict[str, tuple] = {}
    rewrites = {
        target: functools.partial(_rewrite, split, SPLITS[target], flat, partials)
        for target in SPLITS
    }
    shifted = _shifted_sums(graph, nodes, split)
    if shifted:
        sums = "aten.sum.dim_IntList"
        rewrites[sums] = functools.partial(
            _shifted_sum, shifted, partials, rewrites[sums]
        )
    rewrites |= {
        target: functools.partial(_split_variance, split, flat) for target in VARIANCES
    }
    return retrace(graph, rewrites=rewrites, values=values)


def _split(node: Node, nodes: dict[str, Node], users, device: str) -> tuple | None:
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
    split = _dimension_parts(shape, reduced, units, rnumel, device)
    if split is None or split[1] & (split[1] - 1):  # parts not a power of two long
        flat = _flat_parts(node, nodes, users, device)
        if flat is not None:  # Note [Parts of a whole tensor]
            return FLAT, flat, reduced
    return None if split is None else (split[0], rnumel // split[1], reduced)


def _dimension_parts(shape, reduced, units: int, rnumel: int, device: str):
    """(dimension, elements of each part) of the fewest parts, a power of two,
    that give the device enough units of work, split from one reduced dimension;
    None where no dimension splits so."""
    parts = 2
    while units * parts < UNITS[device]:
        parts *= 2
    while parts > 1:
        if rnumel // parts >= PART_MIN[device]:
            for d in reduced:
                if shape[d] % parts == 0 and shape[d] > parts:
                    return d, rnumel // parts
        parts //= 2
    return None


def _flat_parts(node: Node, nodes: dict[str, Node], users, device: str) -> int | None:
    """Parts of a reduction of a whole tensor, each a power of two of its elements
    in memory order, where its elementwise producers can compute it in that
    shape (`_flat_reads`); None where another split is taken (Note [Parts of a
    whole tensor])."""
    rows, rnumel = reduction_spec(node, nodes)
    if device not in FLAT_DEVICES or rows != 1:
        return None
    if _flat_reads(nodes[node.args[0].name], nodes, users) is None:
        return None
    length = 1 << (rnumel // UNITS[device]).bit_length() - 1
    while length >= PART_MIN[device] and rnumel % length:
        length //= 2
    return rnumel // length if length >= PART_MIN[device] else None


def _flat_reads(src: Node, nodes: dict[str, Node], users) -> list[str] | None:
    """The elementwise producers of `src` of its shape that only `src`'s chain
    reads, `src` first, where each reads only those, numbers, tensors of one
    element, and tensors of `src`'s shape laid out in memory order; else None."""
    shape = src.tensor_meta.shape
    chain: list[str] = []

    def visit(name: str, top: bool) -> bool:
        n = nodes[name]
        meta = n.tensor_meta
        if not isinstance(meta, TensorMeta):
            return False
        if meta.numel == 1 and not top:
            return True
        if meta.shape != shape:
            return False
        ok = _elementwise(n) and (top or all(u in chain for u in users[name]))
        if not ok:  # read as it lies in memory
            return meta.is_contiguous() and not top
        chain.append(name)
        return all(
            isinstance(a, (int, float, bool, str, type(None), *OPTIONS))
            or (isinstance(a, Ref) and visit(a.name, False))
            for a in leaves((n.args, n.kwargs))
        )

    return chain if visit(src.name, True) else None


def _elementwise(n: Node) -> bool:
    """Whether `n` computes each element from the elements at its position alone,
    whatever the shape its operands have."""
    row = POINTWISE.get(n.target)
    return (
        n.op == "call"
        and row is not None
        and row.kind != "iota"
        and not any(isinstance(a, (list, tuple)) for a in n.args)
    )


def _flat(node: Node, parts: int, nodes, users, values) -> torch.Tensor:
    """The value `node` reduces as (parts, rest), in memory order: its elementwise
    producers (`_flat_reads`) computed again from such views of what they read,
    so that the kernel of the partial results computes them, where a view of
    their result would have them written to memory (Note [Parts of a whole
    tensor])."""
    chain = _flat_reads(nodes[node.args[0].name], nodes, users)
    done: dict[str, torch.Tensor] = {}

    def read(ref: Ref):
        if ref.name in done:
            return done[ref.name]
        v = values[ref.name]
        return v if nodes[ref.name].tensor_meta.numel == 1 else v.view(parts, -1)

    order = {name: i for i, name in enumerate(nodes)}
    for name in sorted(chain, key=order.__getitem__):  # in the source's order
        n = nodes[name]
        args, kwargs = map_refs((n.args, dict(n.kwargs)), read)
        with computed_again(n):
            done[name] = resolve_op(n.target)(*args, **kwargs)
    return done[chain[0]]


def _rewrite(
    split: dict, combine, flat, partials: dict, node: Node, args: tuple, kwargs: dict
):
    if node.name not in split:
        return NotImplemented
    d, parts, reduced = split[node.name]
    x = args[0]
    keepdim = bool(bind_args(node.target, node.args, node.kwargs).get("keepdim"))
    view, first, every = _parts(x, d, parts, reduced, flat, node)
    low = x.dtype in LOW_PRECISION and combine in (torch.sum, torch.mean)
    if low:  # after the view: the kernel of the partials computes it
        view = view.float()
    partial = combine(view, first, keepdim=True)
    total = combine(partial, every, keepdim=False)
    partials[node.name] = (view, first, every, partial, total)
    if keepdim:
        total = total.view(_kept_shape(x.shape, reduced))
    return total.to(args[0].dtype) if low else total


def _shifted_sums(graph: Graph, nodes: dict[str, Node], split: dict) -> dict:
    """{sum: (maximum, dimensions reduced)} for each `sum(exp(x - m))` whose `m`
    is the split maximum of the same `x` over the same dimensions, kept to
    broadcast against it (Note [Split softmax])."""
    out = {}
    for s in graph.nodes:
        if s.target != "aten.sum.dim_IntList":
            continue
        e = _operand(s, nodes, "aten.exp.default")
        d = e and _operand(e, nodes, "aten.sub.Tensor")
        if d is None or dict(d.kwargs).get("alpha", 1) != 1 or len(d.args) != 2:
            continue
        x, k = d.args
        if not isinstance(x, Ref) or not isinstance(k, Ref):
            continue
        m = nodes[k.name]
        if m.target in ("aten.view.default", "aten.unsqueeze.default"):
            m = nodes[m.args[0].name]
        if m.target not in ("aten.amax.default", "aten.max.default"):
            continue
        meta = nodes[x.name].tensor_meta
        reduced = reduced_dims(s, nodes)
        if (
            m.name in split
            and m.args[0] == x
            and meta.dtype in (torch.float32, torch.float64)
            and e.tensor_meta.shape == meta.shape
            and reduced == reduced_dims(m, nodes)
            and nodes[k.name].tensor_meta.shape
            == tuple(_kept_shape(meta.shape, reduced))
        ):
            out[s.name] = m.name, reduced
    return out


def _operand(node: Node, nodes: dict[str, Node], target: str) -> Node | None:
    """`node`'s first operand where `target` computes it, else None."""
    a = node.args[0] if node.args else None
    n = nodes[a.name] if isinstance(a, Ref) else None
    return n if n is not None and n.target == target else None


def _shifted_sum(shifted: dict, partials: dict, other, node, args, kwargs):
    """`sum(exp(x - m))` from each part's maximum and the sum shifted by it
    (Note [Split softmax])."""
    if node.name not in shifted:
        return other(node, args, kwargs)
    maximum, reduced = shifted[node.name]  # rewritten before: it is an operand
    view, first, every, m_part, m = partials[maximum]
    m = m.view(_kept_shape(m_part.shape, every))
    s_part = torch.exp(view - m_part).sum(first, keepdim=True)
    lanes = torch.where(m_part == float("-inf"), 0.0, s_part * torch.exp(m_part - m))
    total = lanes.sum(every)
    keepdim = bool(bind_args(node.target, node.args, node.kwargs).get("keepdim"))
    return total.view(_kept_shape(args[0].shape, reduced)) if keepdim else total


def _split_variance(split: dict, flat, node: Node, args: tuple, kwargs: dict):
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
    view, first, every = _parts(x, d, parts, reduced, flat, node)
    if x.dtype in LOW_PRECISION:
        view = view.float()
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


def _parts(x, d: int, parts: int | None, reduced: list[int], flat, node: Node):
    """`x` with dimension `d` split into (parts, rest), the dimensions of that
    view reduced first (all reduced ones but the parts), and those its partial
    results are reduced over. Parts None: `x` itself, dimension `d` the parts;
    `d` FLAT: the whole of `x` as (parts, rest), by `flat`."""
    if parts is None:
        first = [e for e in reduced if e != d]
    elif d == FLAT:  # Note [Parts of a whole tensor]
        return flat(node, parts), [1], [0, 1]
    else:
        shape = list(x.shape)
        x = x.view(shape[:d] + [parts, shape[d] // parts] + shape[d + 1 :])
        first = sorted([e + (e > d) for e in reduced if e != d] + [d + 1])
    return x, first, sorted(first + [d])


def _kept_shape(shape, reduced: list[int]) -> list[int]:
    return [1 if d in reduced else n for d, n in enumerate(shape)]


__all__ = ["split_reductions"]
