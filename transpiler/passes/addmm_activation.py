"""On CUDA, let cuBLAS apply a linear layer's bias and activation to the product.

Before:  addmm = aten.addmm.default(b, view, t);  view_1 = aten.view.default(addmm)
         gelu = aten.gelu.default(view_1, approximate="tanh")
After:   addmm = aten._addmm_activation.default(b, view, t, use_gelu=True)
         view_1 = aten.view.default(addmm)         (readers of `gelu` read view_1)

cuBLASLt runs a GEMM's epilogue on the accumulator before storing it: the bias add and
a tanh-form GELU or a ReLU cost neither a kernel launch nor a pass over the product.
For GPT-2's MLP in bf16 on an H100 (8192x768 by 768x3072), `linear` and the fused
bias-GELU kernel take 61 + 38 us, one `_addmm_activation` 70 us. In f32 the GELU
epilogue costs as much as the pass it saves (851 us both ways), so f32 takes only
ReLU's. `_addmm_activation` computes the same function whichever path it takes:
where cuBLASLt cannot (a shape it does not take), ATen runs `addmm` and then the same
activation, in place.

The bias and activation are applied to the f32 accumulator and rounded once, where
eager rounds the product, the biased sum and the activation each in turn: results
differ by the output dtype's rounding. On the CPU `_addmm_activation` is `addmm`
followed by a separate pass, slower than the C++ kernel that fuses bias and
activation, so the pass runs for CUDA variants only (`passes.optimize`).

Applies to `addmm` with its default scales, a 1-D bias, a result that only the
activation reads (through at most one view, as `F.linear` flattens a 3-D input), and
K > SMALL_K (shorter matmuls become kernels: passes/small_matmul.py).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from transpiler.ir.graph import Graph, Node, Ref, TensorMeta
from transpiler.ir.ops import HALF_TYPES
from transpiler.passes.small_matmul import SMALL_K

VIEW = "aten.view.default"
ADDMM = "aten.addmm.default"
ACTIVATION_OP = "aten._addmm_activation.default"
# op -> (use_gelu, its keyword arguments, dtypes whose epilogue is cheaper than a pass)
ACTIVATIONS = {
    "aten.gelu.default": (True, {"approximate": "tanh"}, HALF_TYPES),
    "aten.relu.default": (False, {}, (*HALF_TYPES, torch.float32)),
}


def addmm_activation(graph: Graph) -> Graph:
    nodes = graph.by_name()
    users = graph.users()
    epilogue: dict[str, bool] = {}  # addmm -> use_gelu
    alias: dict[str, str] = {}  # an activation -> the value now holding its result
    for node in graph.nodes:
        found = _match(node, nodes, users)
        if found is not None:
            addmm, value = found
            epilogue[addmm] = ACTIVATIONS[node.target][0]
            alias[node.name] = value
    if not epilogue:
        return graph

    out = [
        (
            replace(n, target=ACTIVATION_OP, kwargs=(("use_gelu", epilogue[n.name]),))
            if n.name in epilogue
            else n
        )
        for n in graph.nodes
        if n.name not in alias
    ]
    return graph.with_nodes(out).renamed(alias)  # readers of an activation: its value


def _match(node: Node, nodes: dict[str, Node], users) -> tuple[str, str] | None:
    """(addmm, the value the activation reads) when `node` is an activation that
    cuBLAS can apply to that addmm."""
    if node.target not in ACTIVATIONS or not isinstance(node.meta, TensorMeta):
        return None
    if len(node.args) != 1 or not isinstance(node.args[0], Ref):
        return None
    _, kwargs, dtypes = ACTIVATIONS[node.target]
    if dict(node.kwargs) != kwargs:
        return None
    value = addmm = nodes[node.args[0].name]
    reader = node.name  # the one reader the product may have
    if value.target == VIEW and isinstance(value.args[0], Ref):
        addmm, reader = nodes[value.args[0].name], value.name
        if users[value.name] != [node.name]:
            return None
    if addmm.target != ADDMM or addmm.kwargs or users[addmm.name] != [reader]:
        return None
    if not all(isinstance(a, Ref) for a in addmm.args):
        return None
    bias, mat1, mat2 = (nodes[a.name].meta for a in addmm.args)
    if not all(isinstance(m, TensorMeta) for m in (bias, mat1, mat2)):
        return None
    used = {m.dtype for m in (bias, mat1, mat2, node.meta)}
    if len(used) != 1 or used.pop() not in dtypes:
        return None
    if bias.shape != (mat2.shape[1],):
        return None
    if isinstance(mat1.shape[1], int) and mat1.shape[1] <= SMALL_K:
        return None  # products in a kernel, fused with more than the activation
    return addmm.name, value.name
