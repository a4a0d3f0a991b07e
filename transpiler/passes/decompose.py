"""Decompose composite ops into the ops our kernels fuse, using PyTorch's own rules.

Before:  ln: f32[8,64] = aten.native_layer_norm.default(x, [64], w, b, 1e-05)
After:   var_mean = aten.var_mean.correction(x, [1], correction=0, keepdim=True)
         add = aten.add.Tensor(getitem_1, 1e-05); rsqrt = aten.rsqrt.default(add)
         sub = aten.sub.Tensor(x, getitem_0) ... (all tagged origin="native_layer_norm")

The table is `torch._decomp`'s entry for each op in `DECOMPOSE`; nothing here
re-derives an op by hand. Ops not listed stay whole (matmuls, attention: extern calls),
and so does exact GELU, a kernel op of its own: only `approximate="tanh"` decomposes.

Composite ops that alias their input where its layout allows and copy otherwise
(`contiguous`, `reshape`, `to`: Note [Views and copies that may alias] in ir/ops.py)
decompose by their own composite kernel, wherever they appear, decompositions'
insides included: softmax's `x.contiguous()` of a transposed `x` becomes
`clone(x, memory_format=torch.contiguous_format)`, which kernels compute, and of a
contiguous `x` becomes `x` itself.
"""

from __future__ import annotations

import torch
from torch._decomp import get_decompositions

from transpiler.ir.graph import Graph, Node
from transpiler.ir.ops import POINTWISE, copies_that_may_alias, may_copy
from transpiler.passes.retrace import retrace

aten = torch.ops.aten
DECOMPOSE = (
    aten.native_layer_norm.default,
    aten._softmax.default,
    aten._log_softmax.default,
    aten._safe_softmax.default,
    aten.gelu.default,
    aten.silu.default,
    aten.hardtanh.default,
    aten.leaky_relu.default,
    aten.split.Tensor,
    aten.addcmul.default,
    aten.lerp.Scalar,
    aten.zeros_like.default,
    aten.ones_like.default,
)


def decompose(graph: Graph) -> Graph:
    if not any(_decomposes(n) for n in graph.nodes):
        return graph
    table = get_decompositions(list(DECOMPOSE))
    for op in DECOMPOSE:
        if str(op) in POINTWISE:
            table[op] = _unless_kernel_op(str(op), table[op])
    table.update({op: op.decompose for op in copies_that_may_alias()})
    return retrace(graph, decompositions=table)


def _decomposes(node: Node) -> bool:
    if not node.target.startswith("aten."):
        return False
    if may_copy(node.target):
        return True
    if _op(node.target) not in DECOMPOSE:
        return False
    return not _kernel_op(node.target, dict(node.kwargs))


def _kernel_op(target: str, kwargs: dict) -> bool:
    """Whether kernels compute the op whole: a `POINTWISE` row accepts these keyword
    arguments (exact GELU does; tanh GELU decomposes)."""
    row = POINTWISE.get(target)
    return row is not None and all((k, v) in row.keywords for k, v in kwargs.items())


def _unless_kernel_op(target: str, decomposition):
    """The decomposition, but NotImplemented (keep the op whole) for a kernel op."""

    def decompose_unless_kernel_op(*args, **kwargs):
        if _kernel_op(target, kwargs):
            return NotImplemented
        return decomposition(*args, **kwargs)

    return decompose_unless_kernel_op


def _op(target: str):
    from transpiler.frontend.recorder import resolve_op

    return resolve_op(target)
