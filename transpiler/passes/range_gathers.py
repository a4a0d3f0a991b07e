"""A gather whose index is a range of positions is a slice.

Before:  pos: i64[16] = aten.arange.start(0, 16)
         emb: f32[16,64] = aten.index.Tensor(wpe, [pos])
After:   s: f32[16,64] = aten.slice.Tensor(wpe, 0, 0, 16, 1)
         emb: f32[16,64] = aten.clone.default(s)

Note [Gathers by a range]
~~~~~~~~~~~~~~~~~~~~~~~~~
`table[torch.arange(a, b, s)]` (GPT's position embedding, `wpe(pos)`) reads rows
a, a + s, ... of the table: `table[a:b:s]`, a view. As a gather, a kernel loads
each index, wraps a negative one, checks it against the table's size, and loads
the row at the computed address; as a slice, it reads the rows at addresses
known from the position alone, with no check, and where a kernel adds the rows
to something (`wte(idx) + wpe(pos)`), the add reads the table itself. Only for
a range of ints with a positive step whose every value lies within the table
(below its size along the dimension, not negative): others gather as before,
raising where eager raises.

Note [Picks of one element a row]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
`logp[torch.arange(n), target]` (a loss written by hand: the log-probability of
each row's target) picks one element a row: it is `logp.gather(1,
target[:, None])[:, 0]`, with a negative target counted from the row's end as
indexing counts it. As a gather along the row it is read where the row's
kernel computes the row's statistics (`row_gather` in fuse.py) or from the
operands of the log-softmax (Note [Gathered values]), and the whole log-softmax
is never written; as an index of two tensors, it was written for the pick. The
indices were checked against the table (passes/check_indices.py runs first),
so the wrapped one lies in the row.
"""

from __future__ import annotations

import torch

from transpiler.ir.graph import Graph, Node, Ref
from transpiler.ir.ops import INDEX_TYPES, arange_of
from transpiler.passes.retrace import retrace

aten = torch.ops.aten
SAME_VALUES = ("aten.detach.default", "aten.alias.default")


def range_gathers(graph: Graph) -> Graph:
    nodes = graph.by_name()
    found = {n.name: s for n in graph.nodes if (s := _slice_of(n, nodes)) is not None}
    picks = {n.name for n in graph.nodes if _row_picks(n, nodes)}
    if not found and not picks:
        return graph

    def as_slice(node: Node, args, kwargs):
        if node.name in picks:  # Note [Picks of one element a row]
            table, (_, index) = args
            size = table.shape[1]
            index = aten.where.self(index < 0, index + size, index)
            return aten.gather.default(table, 1, index.unsqueeze(1)).squeeze(1)
        if node.name not in found:
            return NotImplemented
        dim, start, end, step = found[node.name]
        # a gather's result is memory of its own: a copy of the slice, which
        # kernels compute where they read it and drop_copies drops unless the
        # function returns it
        return aten.clone.default(aten.slice.Tensor(args[0], dim, start, end, step))

    return retrace(graph, rewrites={"aten.index.Tensor": as_slice})


def _row_picks(node: Node, nodes: dict[str, Node]) -> bool:
    """Whether `node` is `x[torch.arange(n), t]` of a matrix `x` of n rows and
    integer indices `t` of n elements."""
    if node.target != "aten.index.Tensor" or node.kwargs:
        return False
    table, indices = node.args
    shape = nodes[table.name].tensor_meta.shape
    if len(shape) != 2 or len(indices) != 2:
        return False
    if not all(isinstance(i, Ref) for i in indices):
        return False
    rows, index = (nodes[i.name] for i in indices)
    while rows.target in SAME_VALUES and isinstance(rows.args[0], Ref):
        rows = nodes[rows.args[0].name]
    if arange_of(rows) != (0, 1, shape[0]):
        return False
    meta = index.tensor_meta
    return meta.shape == (shape[0],) and meta.dtype in INDEX_TYPES


def _slice_of(node: Node, nodes: dict[str, Node]) -> tuple[int, int, int, int] | None:
    """(dim, start, end, step) of the slice that gather `node` is, if it is one."""
    if node.target != "aten.index.Tensor" or node.kwargs:
        return None
    table, indices = node.args
    given = [(d, i) for d, i in enumerate(indices) if i is not None]
    if len(given) != 1 or not isinstance(given[0][1], Ref):
        return None
    dim, index = given[0]
    source = nodes[index.name]
    while source.target in SAME_VALUES and isinstance(source.args[0], Ref):
        source = nodes[source.args[0].name]  # `embedding` detaches its ids
    values = arange_of(source)
    if values is None:
        return None
    start, step, count = values
    size = nodes[table.name].tensor_meta.shape[dim]
    if step <= 0 or start < 0 or count == 0 or start + step * (count - 1) >= size:
        return None
    return dim, start, start + step * count, step


__all__ = ["range_gathers"]
