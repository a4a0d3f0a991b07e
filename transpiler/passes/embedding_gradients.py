"""Accumulate an embedding's gradient into the gradient it is added to.

Before:  e = aten.embedding_dense_backward.default(g, ids, 50257, -1, False)
         wte = aten.add.Tensor(mm, e)
After:   wte = aten.index_put.default(mm, [ids], g, True)

Note [Tied embeddings]
~~~~~~~~~~~~~~~~~~~~~~
A language model's output layer shares its weight with the token embedding, so the
weight's gradient is the output layer's (a matmul) plus the embedding's. PyTorch's
formula computes the embedding's on its own: a zero-filled table of the
vocabulary's size, the rows of the batch's tokens added into it, then the sum of
the two tables: for GPT-2 three passes over a 154 MB table besides the matmul's.
Adding the rows into the matmul's result instead (`index_put` with `accumulate`)
gives the same sum, in another order of its terms, and reads and writes the rows
of the batch's tokens alone once it adds into the matmul's result in place (Note
[Copies of dead buffers] in passes/reuse_buffers.py; Note [Extern calls in place]
where it stays a call). Only where nothing else reads the embedding's gradient,
the sum has the table's shape and dtype, and the rows are not scaled by
frequency; a padding index's rows get nothing, as in eager.

Any other embedding's gradient, not scaled by frequency, is PyTorch's
decomposition: a zero-filled table in the gradient's compute dtype, the rows of
valid tokens other than the padding index added into it (the mask of
`_unsafe_masked_index_put_accumulate`), then cast to the gradient's dtype. The
adding is the kernel of a scatter that adds (Note [Scatters] in
passes/schedule.py), never reading the rows the mask leaves out.
"""

from __future__ import annotations

import torch
from torch._decomp import decomposition_table, get_decompositions

from transpiler.ir.graph import Graph, Node, Ref
from transpiler.passes.decompose import decompose
from transpiler.passes.retrace import retrace

aten = torch.ops.aten
BACKWARD = "aten.embedding_dense_backward.default"
DECOMPOSITION = decomposition_table[aten.embedding_dense_backward.default]


def embedding_gradients(graph: Graph) -> Graph:
    nodes = graph.by_name()
    once = graph.read_once()

    def embedding_of(ref) -> Node | None:
        if not isinstance(ref, Ref) or ref.name not in once:
            return None
        node = nodes[ref.name]
        if node.target != BACKWARD or len(node.args) < 5 or node.kwargs:
            return None
        _, _, _, _, scaled = node.args
        return None if scaled else node

    found = {
        n.name: (i, e)
        for n in graph.nodes
        if n.target == "aten.add.Tensor" and not n.kwargs and len(n.args) == 2
        for i, e in ((1, embedding_of(n.args[1])), (0, embedding_of(n.args[0])))
        if e is not None
    }
    tied = {e.name for _, e in found.values()}
    alone = any(n.target == BACKWARD and n.name not in tied for n in graph.nodes)
    if not found and not alone:
        return graph
    values: dict[str, object] = {}

    def accumulate(node: Node, args, kwargs):
        if node.name not in found:
            return NotImplemented
        i, e = found[node.name]
        table = args[1 - i]
        g, ids = (values[r.name] for r in e.args[:2])
        padding = e.args[3]
        if not isinstance(table, torch.Tensor) or table.shape != args[i].shape:
            return NotImplemented
        if table.dtype != g.dtype or table.dtype != args[i].dtype:
            return NotImplemented
        if padding >= 0:  # eager's rows of the padding index get no gradient
            g = torch.where((ids != padding).unsqueeze(-1), g, 0.0)
        return aten.index_put.default(table, [ids], g, True)

    def decomposed(node: Node, args, kwargs):
        if node.name in tied or node.kwargs or len(args) != 5 or args[4]:
            return NotImplemented
        return DECOMPOSITION(*args)

    rewrites = {"aten.add.Tensor": accumulate, BACKWARD: decomposed}
    # the zero-filled table: `full`, which kernels compute
    zeros = get_decompositions([aten.new_zeros.default])
    graph = retrace(graph, rewrites=rewrites, decompositions=zeros, values=values)
    # what the decomposition calls (a `masked_fill` in some versions of PyTorch)
    return decompose(graph) if alone else graph


__all__ = ["embedding_gradients"]
