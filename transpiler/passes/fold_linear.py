"""Put a linear layer's matmul back into one `linear` call.

Before:  v = aten.view.default(x, [8192, 768]);  wt = aten.t.default(w)
         mm = aten.mm.default(v, wt);  y = aten.view.default(mm, [8, 1024, 768])
After:   linear = aten.linear.default(x, w)
         mm = aten.view.default(linear, [8192, 768])
         y = linear

`F.linear` reaches the dispatcher as a view, a transpose, a matmul and a view back,
and each of those would be a Python call in the generated code. On a GPU, the host
time of those calls can be longer than the matmul itself. `torch.nn.functional.linear`
makes the same cuBLAS (or CPU BLAS) call from one Python call. The view to 2D is kept
(named as the matmul was), for the kernels that read it; a view back to the shape of
`linear` becomes `linear` itself, and so does the matmul when `x` was 2D.

Applies when `x` is contiguous (or 2D already), `w` is 2D, and a bias is 1D:
exactly the cases where `linear` flattens `x` by a view and calls `mm` or `addmm`.
"""

from __future__ import annotations

import math
from dataclasses import replace

from transpiler.frontend.recorder import GraphBuilder
from transpiler.ir.graph import (
    Graph,
    Node,
    Ref,
    TensorMeta,
    contiguous_strides,
    map_refs,
)

VIEW = "aten.view.default"
MATMULS = {"aten.mm.default": (0, 1, None), "aten.addmm.default": (1, 2, 0)}


def fold_linear(graph: Graph) -> Graph:
    nodes = graph.by_name()
    names = GraphBuilder()
    names.reserve(nodes)
    out: list[Node] = []
    alias: dict[str, str] = {}  # a view back to a linear's shape -> the linear

    def ref(r: Ref) -> Ref:
        return Ref(alias.get(r.name, r.name))

    for node in graph.nodes:
        node = replace(
            node,
            args=map_refs(node.args, ref),
            kwargs=tuple((k, map_refs(v, ref)) for k, v in node.kwargs),
        )
        linear = _linear(node, nodes)
        if linear is not None:
            name = names.fresh("linear")
            out.append(replace(linear, name=name))
            nodes[name] = out[-1]
            shape = node.tensor_meta.shape
            if shape == linear.tensor_meta.shape:  # x was 2D: nothing to view
                alias[node.name] = name
                continue
            node = replace(node, target=VIEW, args=(Ref(name), list(shape)), kwargs=())
        elif _views_back(node, nodes):
            alias[node.name] = nodes[node.args[0].name].args[0].name
        nodes[node.name] = node
        out.append(node)
    return graph.with_nodes(out, map_refs(graph.outputs, ref))


def _linear(node: Node, nodes: dict[str, Node]) -> Node | None:
    """`aten.linear.default(x, w[, b])` computing what `node` (a matmul) computes."""
    if node.target not in MATMULS or node.kwargs:
        return None
    a, b, bias = MATMULS[node.target]
    if not all(isinstance(node.args[i], Ref) for i in (a, b)):
        return None
    x = _flattened(nodes[node.args[a].name], nodes)
    wt = nodes[node.args[b].name]
    if x is None or wt.target != "aten.t.default" or not isinstance(wt.args[0], Ref):
        return None
    w = nodes[wt.args[0].name]
    if not isinstance(w.meta, TensorMeta) or len(w.meta.shape) != 2:
        return None
    args = [Ref(x.name), Ref(w.name)]
    if bias is not None:
        b_node = (
            nodes[node.args[bias].name] if isinstance(node.args[bias], Ref) else None
        )
        if b_node is None or b_node.meta.shape != (w.meta.shape[0],):
            return None
        args.append(Ref(b_node.name))
    shape = (*x.tensor_meta.shape[:-1], w.meta.shape[0])
    meta = TensorMeta(shape, contiguous_strides(shape), 0, node.tensor_meta.dtype)
    return Node("", "call", "aten.linear.default", tuple(args), (), meta, node.span)


def _flattened(node: Node, nodes: dict[str, Node]) -> Node | None:
    """The tensor `linear` would flatten to this matmul operand, if any: the operand
    itself when 2D, or the contiguous tensor it views as [rows, features]."""
    meta = node.meta
    if not isinstance(meta, TensorMeta) or len(meta.shape) != 2:
        return None
    if node.target != VIEW or not isinstance(node.args[0], Ref):
        return node
    source = nodes[node.args[0].name]
    m = source.meta
    if not isinstance(m, TensorMeta) or not m.is_contiguous() or len(m.shape) < 2:
        return node
    if meta.shape != (math.prod(m.shape[:-1]), m.shape[-1]):
        return node
    return source


def _views_back(node: Node, nodes: dict[str, Node]) -> bool:
    """Whether `node` views a folded matmul's result back to its linear's shape."""
    if node.target != VIEW or not isinstance(node.args[0], Ref):
        return False
    flat = nodes[node.args[0].name]
    if flat.target != VIEW or not isinstance(flat.args[0], Ref):
        return False
    linear = nodes[flat.args[0].name]
    return (
        linear.target == "aten.linear.default"
        and node.tensor_meta.shape == linear.tensor_meta.shape
    )
