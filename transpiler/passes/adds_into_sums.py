"""Add a scatter into zeros into the tensor the result is added to.

Before:  zeros = aten.full.default([8192, 4096], 0.0, ...)
         put = aten.index_put.default(zeros, [token_idx], scaled, True)
         out = aten.add.Tensor(hidden, put)
After:   out = aten.index_put.default(hidden, [token_idx], scaled, True)

Note [Scatters added to a tensor]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
`hidden + torch.zeros_like(hidden).index_add_(0, idx, v)` (an MoE layer combining
its experts' outputs, PyG summing messages into nodes, a gradient summed from two
uses) fills a table with zeros, adds the values into it (a scatter that adds,
Note [Scatters] in schedule.py), then reads it and `hidden` to write the sum: three
passes over the table besides the values. Adding the values into a copy of
`hidden` gives the same sums, in another order of their terms (one that already
varies from run to run on a GPU, whose adds are atomic), in one copy and the
adds; none where `hidden` is dead after (Note [Copies of dead buffers]). Only
where nothing else reads the scatter's result, the sum has its shape and dtype,
and the table is a fill of zeros. An element nothing adds into keeps `hidden`'s,
where the sum gave `hidden + 0` (-0.0 becomes 0.0 there, as `x + 0` dropped by
constant_fold does not).
"""

from __future__ import annotations

import torch

from transpiler.ir.graph import Graph, Node, Ref
from transpiler.ir.ops import MASKED_PUT, resolve_op
from transpiler.passes.dce import dce
from transpiler.passes.fuse import put_adds, put_parts
from transpiler.passes.retrace import retrace

ADD = "aten.add.Tensor"
# fills whose value is their last argument
FILLS = ("aten.full.default", "aten.full_like.default", "aten.new_full.default")
ZEROS = ("aten.zeros.default", "aten.zeros_like.default", "aten.new_zeros.default")
WHOLE_VIEWS = ("aten.detach.default", "aten.alias.default")


def adds_into_sums(graph: Graph) -> Graph:
    graph = dce(graph)  # views of an in-place op's result no one reads
    nodes = graph.by_name()
    once = graph.read_once()

    def scatter_into_zeros(ref) -> Node | None:
        if not isinstance(ref, Ref) or ref.name not in once:
            return None
        node = nodes[ref.name]
        parts = put_parts(node)
        if parts is None or not put_adds(node) or not _zeros(parts[0], nodes):
            return None
        return node

    found = {}
    for n in graph.nodes:
        if n.target != ADD or n.kwargs or len(n.args) != 2:
            continue
        for i in (1, 0):
            put = scatter_into_zeros(n.args[i])
            if put is not None and isinstance(n.args[1 - i], Ref):
                found[n.name] = (i, put)
                break
    if not found:
        return graph
    values: dict[str, object] = {}

    def add_into(node: Node, args, kwargs):
        if node.name not in found:
            return NotImplemented
        i, put = found[node.name]
        other, scattered = args[1 - i], args[i]
        if not isinstance(other, torch.Tensor) or other.shape != scattered.shape:
            return NotImplemented
        if other.dtype != scattered.dtype:
            return NotImplemented
        _, indices, v, mask = put_parts(put)
        indices = [None if r is None else values[r.name] for r in indices]
        v = values[v.name]
        if put.target == MASKED_PUT:
            return resolve_op(MASKED_PUT)(other, values[mask.name], indices, v)
        return resolve_op(put.target)(other, indices, v, True)

    return retrace(graph, rewrites={ADD: add_into}, values=values)


def _zeros(ref, nodes: dict[str, Node]) -> bool:
    """Whether `ref` is a tensor filled with zeros by a factory (or a view of
    all of one: `zeros_like`'s `detach`)."""
    if not isinstance(ref, Ref):
        return False
    node = nodes[ref.name]
    while node.target in WHOLE_VIEWS:
        node = nodes[node.args[0].name]
    if node.target in ZEROS:
        return True
    return node.target in FILLS and len(node.args) >= 2 and node.args[-1] == 0


__all__ = ["adds_into_sums"]
