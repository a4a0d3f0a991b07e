"""Attention over grouped key/value heads calls a fused kernel in f32 too (CUDA).

Before:  sdpa: f32[8,16,512,128] = aten.scaled_dot_product_attention.default(
             q, k, v, is_causal=True, enable_gqa=True)        # k, v: f32[8,4,512,128]
After:   clone: f32[8,4,4,512,128] = aten.clone.default(expand)   # each kv head 4 times
         view: f32[8,16,512,128] = aten.view.default(clone, [8, 16, 512, 128]) ...
         sdpa: f32[8,16,512,128] = aten.scaled_dot_product_attention.default(
             q, view, view_1, is_causal=True)

With `enable_gqa=True` (LLaMA, Mistral, Qwen: fewer key/value heads than query
heads), PyTorch's CUDA dispatch has one fused kernel that reads the shared heads in
place, flash attention, and it computes f16 and bf16 only. In f32 the call takes the
math fallback: a batched matmul that writes every [L, L] score matrix, a softmax over
it and another matmul. Repeating each key/value head for its query heads (one copy
kernel each for K and V, a few percent of the attention's traffic) lets the
memory-efficient kernel run instead, which supports f32, causal masks and masks
alike; this is what torch.compile's graphs end up calling too. Other dtypes keep
`enable_gqa` for flash attention, which needs no copy.
"""

from __future__ import annotations

import torch

from transpiler.ir.graph import Graph, Node, Ref, TensorMeta
from transpiler.passes.retrace import SameOp, retrace

ATTENTION = "aten.scaled_dot_product_attention.default"


def repeat_grouped_heads(graph: Graph) -> Graph:
    nodes = graph.by_name()
    chosen = {n.name for n in graph.nodes if _grouped_f32(n, nodes)}
    if not chosen:
        return graph

    def rewrite(node: Node, args, kwargs):
        if node.name not in chosen:
            return NotImplemented
        q, k, v, *rest = args
        heads = q.shape[-3]
        kwargs = {key: value for key, value in kwargs.items() if key != "enable_gqa"}
        return SameOp((q, _repeat(k, heads), _repeat(v, heads), *rest), kwargs)

    return retrace(graph, rewrites={ATTENTION: rewrite})


def _repeat(t: torch.Tensor, heads: int) -> torch.Tensor:
    """`t` [..., H_kv, L, D] with each head repeated for its H / H_kv query heads,
    as `repeat_interleave(H / H_kv, dim=-3)` lays them out."""
    *batch, groups, length, dim = t.shape
    out = t.unsqueeze(-3).expand(*batch, groups, heads // groups, length, dim)
    return out.reshape(*batch, heads, length, dim)


def _grouped_f32(node: Node, nodes: dict[str, Node]) -> bool:
    if node.target != ATTENTION or not dict(node.kwargs).get("enable_gqa"):
        return False
    refs = node.args[:3]
    if not all(isinstance(r, Ref) for r in refs):
        return False
    q, k, v = (nodes[r.name].meta for r in refs)
    if not all(isinstance(m, TensorMeta) and len(m.shape) >= 3 for m in (q, k, v)):
        return False
    heads, groups = q.shape[-3], k.shape[-3]
    return (
        q.dtype == torch.float32
        and groups != heads
        and heads % groups == 0
        and v.shape[-3] == groups
    )
