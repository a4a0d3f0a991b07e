"""Fold constants and strength-reduce ops whose scalar argument decides the result.

Before:  sq = aten.pow.Tensor_Scalar(x, 2);  y = aten.mul.Tensor(sq, 1)
After:   sq = aten.mul.Tensor(x, x)          (y is sq: multiplying by 1 is dropped)

`clamp(x, lo, hi)` becomes `clamp_min` and `clamp_max`, which have kernels. The
`x.to(dtype)` that decompositions of bf16 layer norms write needs no rule here:
decompose has made it `_to_copy` (a fusable cast) or `x`, by torch's own kernel.

The common exponents of `pow` become the multiplies and roots eager computes for
them: its `x ** 0.5` is `sqrt(x)`, -0.0 at -0.0 where C's pow gives 0.0. Identity
arithmetic is removed only where it changes neither dtype nor shape, and where its
result need not be a copy: fallback code that writes a
tensor in place lists the values computed from it (`_reads`), and `x * 1` among
them must keep its own memory, not become `x`.
"""

from __future__ import annotations

import torch

from transpiler.ir.graph import Graph, Node, Ref, read_before_fallback
from transpiler.passes.retrace import retrace

POW_RULES = {
    1: lambda x: x,
    2: lambda x: x * x,
    3: lambda x: x * x * x,
    0.5: torch.sqrt,
    -0.5: torch.rsqrt,
    -1: torch.reciprocal,
}
IDENTITY_SCALARS = {
    "aten.mul.Tensor": 1,
    "aten.mul.Scalar": 1,
    "aten.div.Tensor": 1,
    "aten.div.Scalar": 1,
    "aten.add.Tensor": 0,
    "aten.add.Scalar": 0,
    "aten.sub.Tensor": 0,
    "aten.sub.Scalar": 0,
}
NO_OPS = ("aten.detach.default", "aten.alias.default", "aten.lift_fresh.default")


def _pow(node: Node, args, kwargs):
    x, exponent = args
    rule = POW_RULES.get(exponent) if not isinstance(exponent, bool) else None
    if rule is None or not x.dtype.is_floating_point:
        return NotImplemented
    return rule(x)


def _identity(node: Node, args, kwargs):
    x, scalar = args[0], args[1]
    if (
        isinstance(x, torch.Tensor)
        and not isinstance(scalar, (torch.Tensor, bool))
        and scalar == IDENTITY_SCALARS[node.target]
        and not kwargs
        and tuple(x.shape) == node.tensor_meta.shape
        and x.dtype == node.tensor_meta.dtype
    ):
        return x
    return NotImplemented


def _no_op(node: Node, args, kwargs):
    return args[0]


def _clamp(node: Node, args, kwargs):
    """clamp(x, lo, hi) is clamp_max(clamp_min(x, lo), hi): both have kernels."""
    x, lo, hi = (*args, None, None)[:3]
    lo, hi = kwargs.get("min", lo), kwargs.get("max", hi)
    if lo is not None:
        x = torch.clamp_min(x, lo)
    if hi is not None:
        x = torch.clamp_max(x, hi)
    return x


REWRITES = {
    "aten.pow.Tensor_Scalar": _pow,
    **{t: _identity for t in IDENTITY_SCALARS},
    **{t: _no_op for t in NO_OPS},
    "aten.clamp.default": _clamp,
}


# the identity ops' operands that may stand first (`0 + x`, `1 * x`)
COMMUTATIVE = ("aten.add.Tensor", "aten.mul.Tensor")


def _identity_tensor(fills: dict):
    """`x + zeros`, `zeros + x`, `x * ones`, ...: `x`, where the other operand is
    a `full` of the identity (a backward's zero gradient of an output the loss
    does not read: Note [The backward of a loss alone] in partition.py) and `x`
    has the result's shape and dtype."""

    def identity(node: Node, args, kwargs):
        if kwargs or len(args) != 2:
            return NotImplemented
        sides = ((0, 1), (1, 0)) if node.target in COMMUTATIVE else ((0, 1),)
        meta = node.tensor_meta
        for keep, drop in sides:
            x, full = args[keep], node.args[drop]
            if (
                isinstance(full, Ref)
                and fills.get(full.name) == IDENTITY_SCALARS[node.target]
                and isinstance(x, torch.Tensor)
                and tuple(x.shape) == meta.shape
                and x.dtype == meta.dtype
            ):
                return x
        return NotImplemented

    return identity


def constant_fold(graph: Graph) -> Graph:
    fills = {
        n.name: n.args[1]
        for n in graph.nodes
        if n.target == "aten.full.default"
        and len(n.args) > 1
        and isinstance(n.args[1], (int, float))
        and not isinstance(n.args[1], bool)
    }
    tensors = _identity_tensor(fills)
    rewrites = dict(REWRITES)
    for target in (
        "aten.add.Tensor",
        "aten.sub.Tensor",
        "aten.mul.Tensor",
        "aten.div.Tensor",
    ):
        scalars = rewrites[target]
        rewrites[target] = lambda node, args, kwargs, s=scalars: _first(
            (s, tensors), node, args, kwargs
        )
    if not any(n.target in rewrites for n in graph.nodes):
        return graph
    copies = read_before_fallback(graph)

    def keep_copies(rewrite):
        def rewritten(node: Node, args, kwargs):
            out = rewrite(node, args, kwargs)
            return NotImplemented if node.name in copies and out is args[0] else out

        return rewritten

    return retrace(graph, rewrites={t: keep_copies(r) for t, r in rewrites.items()})


def _first(rules, node: Node, args, kwargs):
    """The result of the first of `rules` that rewrites the node."""
    for rule in rules:
        out = rule(node, args, kwargs)
        if out is not NotImplemented:
            return out
    return NotImplemented
