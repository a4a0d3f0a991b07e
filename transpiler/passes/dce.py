"""Dead-code elimination: drop nodes whose values nothing uses.

Before:  a = aten.exp.default(x);  b = aten.relu.default(x);  return b
After:   b = aten.relu.default(x);  return b

Every op in the graph is functional (the frontend functionalizes in-place ops), so an
unused node has no effect but the errors it may raise. Inputs stay: they are the
variant's signature. Fallback code stays too: it is the user's code, run for its
effects (a `print`), and so do loops on tensor data, whose bodies may hold some, and
ops that check tensor data (`x[idx]` raises for an index out of range: `CHECKS_DATA`).
"""

from __future__ import annotations

from transpiler.ir.graph import Graph, iter_refs
from transpiler.ir.ops import CHECKS_DATA


def dce(graph: Graph) -> Graph:
    live = {r.name for r in iter_refs(graph.outputs)}
    keep = []
    for node in reversed(graph.nodes):
        if (
            node.name in live
            or node.op == "input"
            or node.is_fallback
            or node.is_loop
            or node.target in CHECKS_DATA
        ):
            keep.append(node)
            live.update(r.name for r in node.refs())
    return graph.with_nodes(reversed(keep))
