"""Read an expanded value by broadcasting it, in the pointwise op that reads it.

Before:  n = aten.clamp_min.default(norm, 1e-12)                    # f32[B, 1]
         e = aten.expand.default(n, [B, D]);  y = aten.div.Tensor(x, e)
After:   y = aten.div.Tensor(x, n)

`F.normalize` and user code spell a broadcast as `expand`: the same values at the
same positions, but a view of a value computed in a kernel is one that kernel must
write to memory (fuse.resolve), where a broadcast operand is read in the kernel of
its reader, per row (Note [Kernel iteration]). A pointwise op whose result has the
expanded shape anyway reads the unexpanded value instead.
"""

from __future__ import annotations

import torch

from transpiler.ir.graph import Graph, Node, Ref, TensorMeta
from transpiler.ir.ops import POINTWISE
from transpiler.passes.retrace import SameOp, retrace

EXPAND = "aten.expand.default"


def drop_expands(graph: Graph) -> Graph:
    nodes = graph.by_name()
    chosen = {n.name: _dropped(n, nodes) for n in graph.nodes if n.target in POINTWISE}
    chosen = {name: drop for name, drop in chosen.items() if drop}
    if not chosen:
        return graph

    def rewrite(node: Node, args, kwargs):
        drop = chosen.get(node.name)
        if drop is None:
            return NotImplemented
        args = tuple(
            values[nodes[node.args[i].name].args[0].name] if i in drop else a
            for i, a in enumerate(args)
        )
        return SameOp(args, kwargs)

    values: dict[str, object] = {}
    targets = {nodes[name].target for name in chosen}
    return retrace(graph, rewrites={t: rewrite for t in targets}, values=values)


def _dropped(node: Node, nodes: dict[str, Node]) -> set[int]:
    """Positions of `node`'s arguments that are expands it can broadcast."""
    meta = node.meta
    if not isinstance(meta, TensorMeta):
        return set()
    shapes = []
    drop = set()
    for i, a in enumerate(node.args):
        if not isinstance(a, Ref):
            continue
        source = nodes[a.name]
        if source.target == EXPAND and isinstance(source.args[0], Ref):
            inner = nodes[source.args[0].name].meta
            # a 0-dim value takes part in type promotion as a number would: kept
            if isinstance(inner, TensorMeta) and inner.shape:
                drop.add(i)
                shapes.append(inner.shape)
                continue
        shapes.append(nodes[a.name].meta.shape)
    if not drop:
        return set()
    try:
        broadcast = tuple(torch.broadcast_shapes(*shapes))
    except RuntimeError:
        return set()
    return drop if broadcast == tuple(meta.shape) else set()


__all__ = ["drop_expands"]
