"""Compute a matmul with a short inner dimension as a sum of products in a kernel.

Before:  addmm: f32[2,4] = aten.addmm.default(b, x, wt)       # x: f32[2,4], K = 4
After:   mul = x[:, 0:1] * wt[0];  mul_1 = x[:, 1:2] * wt[1];  add = mul + mul_1
         ...;  addmm = add_2 + b                               (origin "addmm")

With K of a few elements, each output element is a few multiply-adds: the BLAS call
costs more host time than the arithmetic, and it stores a result for the next kernel
to read back. As pointwise ops, the products fuse with what reads them (the bias, an
activation, the sum that a branch tests): `nn.Linear(4, 4)` followed by
`if y.sum() > 0` becomes one kernel, where eager PyTorch launches three (`addmm`,
`sum`, `gt`). The slices of `x` and the rows of `wt` are views, read through strided
loads. The products are added in order of k, in the kernel's compute dtype (f32 for
f16 and bf16 too), so results differ from the library's only by rounding order.
"""

from __future__ import annotations

from transpiler.ir.graph import Graph, Node, Ref, TensorMeta
from transpiler.ir.ops import FLOAT_TYPES
from transpiler.passes.retrace import retrace

SMALL_K = 8  # the longest inner dimension computed as products
MATMULS = {"aten.mm.default": (0, 1), "aten.addmm.default": (1, 2)}


def unroll_small_matmuls(graph: Graph) -> Graph:
    nodes = graph.by_name()
    chosen = {n.name for n in graph.nodes if _small(n, nodes)}
    if not chosen:
        return graph

    def rewrite(node: Node, args, kwargs):
        if node.name not in chosen:
            return NotImplemented
        bias, (a, b) = (args[0], args[1:]) if len(args) == 3 else (None, args)
        acc = a[:, 0:1] * b[0]
        for k in range(1, a.shape[1]):
            acc = acc + a[:, k : k + 1] * b[k]
        return acc if bias is None else acc + bias

    return retrace(graph, rewrites=dict.fromkeys(MATMULS, rewrite))


def _small(node: Node, nodes: dict[str, Node]) -> bool:
    """A float matmul (`mm`, or `addmm` with its default scales) with K <= SMALL_K."""
    if node.target not in MATMULS or node.kwargs:
        return False
    operands = [node.args[i] for i in MATMULS[node.target]]
    if node.target == "aten.addmm.default":
        operands.append(node.args[0])
    metas = [nodes[r.name].meta if isinstance(r, Ref) else None for r in operands]
    if not all(isinstance(m, TensorMeta) for m in metas):
        return False
    dtypes = {m.dtype for m in metas}
    if len(dtypes) != 1 or not dtypes <= set(FLOAT_TYPES):
        return False
    k = metas[0].shape[1]
    return isinstance(k, int) and 1 <= k <= SMALL_K
