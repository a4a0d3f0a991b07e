"""Split `addmm` into `mm` + bias add when a pointwise op consumes its result.

Before:  addmm = aten.addmm.default(b, x, wt);  v = aten.view(addmm);  g = gelu(v)
After:   mm = aten.mm.default(x, wt);  add = aten.add.Tensor(mm, b);  v = view(add) ...

The matmul stays an extern call; the bias add then fuses with the epilogue (GELU, a
residual add), costing no extra pass over memory, instead of a separate kernel.
Not where the graph returns the sum (a training forward saving a GELU's input for
the backward): stored anyway, it is best stored by cuBLAS, which adds the bias as it
writes the product; split, the epilogue's kernel would write it a second time.
"""

from __future__ import annotations

import torch

from transpiler.ir.graph import Graph, Node
from transpiler.ir.ops import POINTWISE, is_view
from transpiler.passes.retrace import retrace


def split_addmm(graph: Graph) -> Graph:
    users = graph.users()
    nodes = graph.by_name()

    def feeds_pointwise(name: str) -> bool:
        for u in users[name]:
            if u == "<output>":
                continue
            n = nodes[u]
            if n.target in POINTWISE or (is_view(n.target) and feeds_pointwise(u)):
                return True
        return False

    def returned(name: str) -> bool:
        return any(
            u == "<output>" or (is_view(nodes[u].target) and returned(u))
            for u in users[name]
        )

    chosen = {
        n.name
        for n in graph.nodes
        if n.target == "aten.addmm.default"
        and not n.kwargs
        and feeds_pointwise(n.name)
        and not returned(n.name)
    }
    if not chosen:
        return graph

    def rewrite(node: Node, args, kwargs):
        if node.name not in chosen:
            return NotImplemented
        bias, a, b = args
        return torch.mm(a, b) + bias

    return retrace(graph, rewrites={"aten.addmm.default": rewrite})
