"""Decompose composite ops into the ops our kernels fuse, using PyTorch's own rules.

Before:  ln: f32[8,64] = aten.native_layer_norm.default(x, [64], w, b, 1e-05)
After:   var_mean = aten.var_mean.correction(x, [1], correction=0, keepdim=True)
         add = aten.add.Tensor(getitem_1, 1e-05); rsqrt = aten.rsqrt.default(add)
         sub = aten.sub.Tensor(x, getitem_0) ... (all tagged origin="native_layer_norm")

The table is `torch._decomp`'s entry for each op in `DECOMPOSE`; nothing here
re-derives an op by hand. Ops not listed stay whole (matmuls, attention: extern calls),
and so does exact GELU, a kernel op of its own: only `approximate="tanh"` decomposes.
"""

from __future__ import annotations

import torch
from torch._decomp import get_decompositions

from transpiler.ir.graph import Graph, Node
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
    table[aten.gelu.default] = _tanh_gelu_only(table[aten.gelu.default])
    return retrace(graph, decompositions=table)


def _decomposes(node: Node) -> bool:
    if not node.target.startswith("aten.") or _op(node.target) not in DECOMPOSE:
        return False
    return node.target != "aten.gelu.default" or _approximate(dict(node.kwargs))


def _approximate(kwargs: dict) -> bool:
    return kwargs.get("approximate", "none") != "none"


def _tanh_gelu_only(decomposition):
    """Exact GELU stays one op (NotImplemented keeps it whole); tanh decomposes."""

    def gelu(*args, **kwargs):
        return (
            decomposition(*args, **kwargs) if _approximate(kwargs) else NotImplemented
        )

    return gelu


def _op(target: str):
    from transpiler.frontend.recorder import resolve_op

    return resolve_op(target)
