"""Drop copies that change nothing: `clone` of a value already laid out as asked.

Before:  t = aten.transpose.int(attn, 1, 2)      # contiguous: attention's layout
         c = aten.clone.default(t, memory_format=torch.contiguous_format)
         v = aten.view.default(c, [B, T, C]);  mm = aten.mm.default(v, w)
After:   v = aten.view.default(t, [B, T, C]);  mm = aten.mm.default(v, w)

The graph is functional, so an internal value and its copy can be the same memory.
A copy the function returns stays: the caller may write into it.
"""

from __future__ import annotations

from transpiler.ir.graph import Graph, Node, TensorMeta, iter_refs
from transpiler.ir.ops import is_view
from transpiler.passes.retrace import retrace

COPIES = ("aten.clone.default",)


def drop_copies(graph: Graph) -> Graph:
    nodes = graph.by_name()
    returned = _returned(graph, nodes)
    chosen = {
        n.name
        for n in graph.nodes
        if n.target in COPIES
        and n.name not in returned
        and _same_layout(nodes[n.args[0].name].meta, n.meta)
    }
    if not chosen:
        return graph

    def rewrite(node: Node, args, kwargs):
        return args[0] if node.name in chosen else NotImplemented

    return retrace(graph, rewrites={t: rewrite for t in COPIES})


def _same_layout(a, b) -> bool:
    return (
        isinstance(a, TensorMeta)
        and isinstance(b, TensorMeta)
        and (a.shape, a.stride, a.dtype) == (b.shape, b.stride, b.dtype)
    )


def _returned(graph: Graph, nodes) -> set[str]:
    """Nodes whose memory the function returns: outputs and the bases of views."""
    out: set[str] = set()
    stack = [r.name for r in iter_refs(graph.outputs)]
    while stack:
        name = stack.pop()
        if name in out:
            continue
        out.add(name)
        node = nodes[name]
        if node.op == "call" and is_view(node.target) and node.args:
            stack.append(node.args[0].name)
    return out
