"""Drop copies that change nothing: `clone` or `_to_copy` of a value already laid
out as asked (a decomposition's `running_mean.to(torch.float32)` of a float32 buffer).

Before:  t = aten.transpose.int(attn, 1, 2)      # contiguous: attention's layout
         c = aten.clone.default(t, memory_format=torch.contiguous_format)
         v = aten.view.default(c, [B, T, C]);  mm = aten.mm.default(v, w)
After:   v = aten.view.default(t, [B, T, C]);  mm = aten.mm.default(v, w)

The graph is functional, so an internal value and its copy can be the same memory.
A copy the function returns stays: the caller may write into it. So does one read
before fallback code writes what it copies.
"""

from __future__ import annotations

from transpiler.ir.graph import (
    Graph,
    Node,
    TensorMeta,
    iter_refs,
    read_before_fallback,
)
from transpiler.ir.ops import is_view
from transpiler.passes.retrace import retrace

COPIES = ("aten.clone.default", "aten._to_copy.default")
# what a `_to_copy` may be asked for and still copy nothing: the same dtype and
# layout (checked on the metas), no device given
SAME_PLACE = {"dtype", "layout", "memory_format", "pin_memory"}


def drop_copies(graph: Graph) -> Graph:
    nodes = graph.by_name()
    returned = _returned(graph, nodes) | read_before_fallback(graph)
    chosen = {
        n.name
        for n in graph.nodes
        if n.target in COPIES
        and n.name not in returned
        and {k for k, _ in n.kwargs} <= SAME_PLACE
        and dict(n.kwargs).get("pin_memory") in (None, False)
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
