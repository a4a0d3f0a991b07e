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
them must keep its own memory, not become `x`; nor does `x * 1` of an input,
parameter or buffer become the caller's tensor itself.
"""

from __future__ import annotations

from functools import partial

import torch

from transpiler.ir.graph import Graph, Node, Ref, iter_refs, read_before_fallback
from transpiler.ir.ops import is_view
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


# the identity ops whose identity may stand first (`0 + x`, `1 * x`)
COMMUTATIVE = ("aten.add.Tensor", "aten.mul.Tensor")


def _identity(fills: dict, owned: set[str], returned: set[str], node, args, kwargs):
    """`x + 0`, `x * 1`, ...: `x`, where `x` has the result's shape and dtype. The
    identity is a scalar, or a `full` of it (`fills`: the backward's zero gradient
    of an output the loss does not read, Note [The backward of a loss alone] in
    partition.py). Not where the result is returned (`returned`) and `x` is the
    caller's (`owned`: an input, parameter or buffer): eager returns a new tensor,
    which keeps its value when the call writes into `x` and which the caller may
    write into without changing `x`."""
    if kwargs or len(args) != 2:
        return NotImplemented
    identity = IDENTITY_SCALARS[node.target]
    meta = node.tensor_meta
    for keep, drop in ((0, 1), (1, 0)) if node.target in COMMUTATIVE else ((0, 1),):
        x, other = args[keep], node.args[drop]
        kept = node.args[keep]
        if node.name in returned and isinstance(kept, Ref) and kept.name in owned:
            continue
        if isinstance(other, Ref):
            is_identity = fills.get(other.name) == identity
        else:
            is_identity = not isinstance(other, bool) and other == identity
        if (
            is_identity
            and isinstance(x, torch.Tensor)
            and tuple(x.shape) == meta.shape
            and x.dtype == meta.dtype
        ):
            return x
    return NotImplemented


def _returned(graph: Graph) -> set[str]:
    """The values the graph returns, and those it returns views of."""
    nodes = {n.name: n for n in graph.nodes}
    todo = [r.name for r in iter_refs(graph.outputs)]
    out: set[str] = set()
    while todo:
        name = todo.pop()
        if name in out or name not in nodes:
            continue
        out.add(name)
        node = nodes[name]
        if node.op == "call" and (is_view(node.target) or node.target == "getitem"):
            todo += [r.name for r in node.refs()]
    return out


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
    **{t: _no_op for t in NO_OPS},
    "aten.clamp.default": _clamp,
}


def constant_fold(graph: Graph) -> Graph:
    fills = {  # `full`s of a number, by name
        n.name: n.args[1]
        for n in graph.nodes
        if n.target == "aten.full.default"
        and len(n.args) > 1
        and isinstance(n.args[1], (int, float))
        and not isinstance(n.args[1], bool)
    }
    owned = {n.name for n in graph.nodes if n.op in ("input", "param")}
    identity = partial(_identity, fills, owned, _returned(graph))
    rewrites = REWRITES | {t: identity for t in IDENTITY_SCALARS}
    if not any(n.target in rewrites for n in graph.nodes):
        return graph
    copies = read_before_fallback(graph)

    def keep_copies(rewrite):
        def rewritten(node: Node, args, kwargs):
            out = rewrite(node, args, kwargs)
            returned = any(out is a for a in args)  # an input itself
            return NotImplemented if node.name in copies and returned else out

        return rewritten

    return retrace(graph, rewrites={t: keep_copies(r) for t, r in rewrites.items()})
