"""Recompute small pointwise values inside the larger kernels that read them broadcast.

Before:  add: f32[8] = aten.add.Tensor(v, 1e-05);  rsqrt: f32[8] = aten.rsqrt(add)
         unsqueeze: f32[8,1,1] = aten.unsqueeze.default(rsqrt, -1) ...
         mul: f32[2,8,6,6] = aten.mul.Tensor(sub, unsqueeze)
After:   unsqueeze_1: f32[8,1,1] = aten.unsqueeze.default(v, -1) ...
         expand: f32[2,8,6,6] = aten.expand.default(unsqueeze_1, [2, 8, 6, 6])
         add_1: f32[2,8,6,6] = aten.add.Tensor(expand, 1e-05);  rsqrt_1 = rsqrt(add_1)
         mul: f32[2,8,6,6] = aten.mul.Tensor(sub, rsqrt_1)

A value computed from parameters alone (batch norm's per-channel scale, Gemma's
`1 + weight`, a mask built from a padding mask) is small next to the activations
that read it, and computed on its own it is a kernel launch and a store for a few
elements. Recomputed where it is read, at the reader's shape, its operands become
broadcast loads (stride-0 views) in the reader's kernel: a few more arithmetic
instructions per element of a memory-bound kernel instead of a launch. This is the
"inline pointwise producers into consumers" decision of TorchInductor's scheduler,
made here on the graph so that fusion sees same-shape pointwise chains.

A value is recomputable ("cheap") when it is a pointwise kernel op whose shape is
the broadcast of its tensor operands' (not a factory), draws no random numbers, and
each operand is a buffer (input, parameter, extern result, or a view of one), a
range kernels compute in place (`torch.arange`) or another cheap value, at most
`MAX_NODES` distinct ops in all. It stays as it is where recomputing would change
its dtype (a 0-dim operand of a wider dtype takes part in type promotion once
broadcast) or its reader's strides, where a view between it and its reader cannot
be taken of a broadcast operand (`view` merging a dimension that one of them is
broadcast along), and where fallback code writes what it reads after it was
computed (`read_before_fallback`). The original stays in the graph for any reader
that does not broadcast it; `dce` drops it when none is left.

A gather's index computed from positions alone is computed again too, at its own
shape, with the views between its ops applied to its ranges instead, so that
kernels compute it where the gather reads it (Note [Positions as indices] in
schedule.py).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from transpiler.ir.graph import Graph, Node, Ref, read_before_fallback
from transpiler.ir.ops import GATHERS, MOVEMENT, RANGES, is_random, resolve_op
from transpiler.passes.fuse import (
    KERNEL_KINDS,
    classify,
    gather_indices,
    position_values,
    resolve,
)
from transpiler.passes.retrace import retrace

MAX_NODES = 16  # ops recomputed for one operand, views not counted
# ... for a value of positions alone, which reads no memory and whose ops its
# readers share (the windows of an adaptive pool: Note [Positions as indices])
POSITION_NODES_MAX = 64
KERNEL_VALUES = (*KERNEL_KINDS, "item")


class _KeepOperand(Exception):
    """Recomputing this operand would not compute the same values."""


def recompute_broadcasts(graph: Graph) -> Graph:
    nodes = graph.by_name()
    kinds = {n.name: classify(n, nodes) for n in graph.nodes}
    positions = position_values(graph, nodes, kinds)
    cheap = _cheap(graph, nodes, kinds, positions)

    def broadcast(node: Node, arg) -> bool:
        if not isinstance(arg, Ref):
            return False
        root = nodes[_views(arg, nodes, kinds)[1]]
        return root.name in cheap and root.tensor_meta.numel < node.tensor_meta.numel

    def position(arg) -> bool:  # Note [Positions as indices]
        if not isinstance(arg, Ref):
            return False
        name = _views(arg, nodes, kinds)[1]
        return name in cheap and name in positions

    chosen = {
        n.name
        for n in graph.nodes
        if kinds[n.name] == "pointwise"
        and n.target not in MOVEMENT + GATHERS  # smaller inputs are not broadcast
        and any(broadcast(n, a) for a in n.args)
    }
    indexed = {
        n.name
        for n in graph.nodes
        if kinds[n.name] == "pointwise"
        and n.target in GATHERS
        and any(position(i) for i in gather_indices(n))
    }
    chosen |= indexed
    if not chosen:
        return graph
    values: dict[str, object] = {}

    def recompute(ref: Ref, transform: Callable) -> torch.Tensor:
        """transform(value of `ref`), with cheap values computed after `transform`."""
        views, name = _views(ref, nodes, kinds)
        if name not in cheap:
            return transform(values[ref.name])
        root = nodes[name]
        shape = root.tensor_meta.shape

        def through(t: torch.Tensor) -> torch.Tensor:
            for view in views:
                op = resolve_op(view.target)
                try:
                    t = op(t, *view.args[1:], **dict(view.kwargs))
                except RuntimeError as e:  # `view` merging a broadcast dimension
                    raise _KeepOperand(name) from e
            return transform(t)

        def operand(t: torch.Tensor) -> torch.Tensor:
            return through(_expand(t, shape))

        args = [recompute(a, operand) if isinstance(a, Ref) else a for a in root.args]
        out = resolve_op(root.target)(*args, **dict(root.kwargs))
        if out.dtype != root.tensor_meta.dtype:
            raise _KeepOperand(name)
        return out

    def rewrite(node: Node, args, kwargs):
        if node.name not in chosen:
            return NotImplemented
        if node.name in indexed:
            return _recomputed_indices(node, args, kwargs, position, recompute)
        shape = node.tensor_meta.shape
        args = list(args)
        for i, a in enumerate(node.args):
            if broadcast(node, a):
                try:
                    args[i] = recompute(a, lambda t: _expand(t, shape))
                except _KeepOperand:
                    pass  # ops recorded on the way are dead: dce drops them
        out = resolve_op(node.target)(*args, **kwargs)
        if out.stride() != node.tensor_meta.stride:
            return NotImplemented  # laid out otherwise: keep the node as it was
        return out

    rewrites = {n.target: rewrite for n in graph.nodes if n.name in chosen}
    return retrace(graph, rewrites=rewrites, values=values)


def _recomputed_indices(node: Node, args, kwargs, position, recompute):
    """Gather `node` with the positions it indexes by computed again, views
    applied to their ranges (Note [Positions as indices])."""
    args = list(args)
    indices = gather_indices(node)
    new = list(args[2:3] if node.target == "aten.gather.default" else args[1])
    for i, ref in enumerate(indices):
        if position(ref):
            try:
                new[i] = recompute(ref, lambda t: t)
            except _KeepOperand:
                pass
    if node.target == "aten.gather.default":
        args[2] = new[0]
    else:
        args[1] = new
    return resolve_op(node.target)(*args, **kwargs)


def _expand(t: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    return t if tuple(t.shape) == tuple(shape) else t.expand(shape)


def _views(ref: Ref, nodes: dict[str, Node], kinds) -> tuple[list[Node], str]:
    """The views from the value `ref` reads to `ref` (outermost last), and that
    value's name. Views that cannot be replayed on another tensor end the walk."""
    chain, name = [], ref.name
    while kinds[name] == "view" and _replayable(nodes[name]):
        chain.append(nodes[name])
        name = nodes[name].args[0].name
    return chain[::-1], name


def _replayable(view: Node) -> bool:
    rest = list(view.args[1:]) + [v for _, v in view.kwargs]
    return (
        view.target.startswith("aten.")
        and isinstance(view.args[0], Ref)
        and not any(isinstance(a, Ref) for a in rest)
    )


def _cheap(graph: Graph, nodes, kinds, positions: set[str]) -> dict[str, int]:
    """Recomputable values, with the number of ops recomputing each takes (each
    distinct op once: the kernel computes a value read twice once)."""
    pinned = read_before_fallback(graph)
    ops: dict[str, frozenset[str]] = {}
    for node in graph.nodes:
        if kinds[node.name] != "pointwise" or node.name in pinned:
            continue
        if node.target in MOVEMENT + GATHERS:
            continue  # not a function of each position's operands alone
        if not any(isinstance(a, Ref) for a in node.args):
            continue  # a factory: its size is an argument, not a broadcast
        if any(isinstance(v, Ref) for _, v in node.kwargs) or is_random(node.target):
            continue
        shapes = [nodes[r.name].tensor_meta.shape for r in node.refs()]
        if torch.broadcast_shapes(*shapes) != node.tensor_meta.shape:
            continue  # `new_full(x, size)`: its shape is an argument
        computed, ok = {node.name}, True
        for r in node.refs():
            _, name = _views(r, nodes, kinds)
            if name in ops:
                computed |= ops[name]
            elif nodes[name].target in RANGES:
                pass  # read in place, a leaf (Note [Ranges in kernels])
            elif kinds[resolve(r, nodes, kinds)[2]] in KERNEL_VALUES:
                ok = False
        limit = POSITION_NODES_MAX if node.name in positions else MAX_NODES
        if ok and len(computed) <= limit:
            ops[node.name] = frozenset(computed)
    return {name: len(computed) for name, computed in ops.items()}
