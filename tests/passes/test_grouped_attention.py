"""grouped_attention: on CUDA, f32 attention over grouped key/value heads repeats
the heads and calls attention without `enable_gqa` (a fused kernel instead of the
math fallback); results match eager PyTorch, which keeps `enable_gqa`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.compile_helpers import assert_same, compile_source, trace_source
from transpiler.pipeline import optimize

pytestmark = [  # masked-off lanes of Triton's interpreter compute 0 / 0 and such
    pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning"),
]

SOURCE = """
import torch
import torch.nn.functional as F


def causal(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)


def masked(q, k, v, mask):
    y = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    return y.transpose(1, 2).flatten(2)


def same_heads(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
"""

g = torch.Generator().manual_seed(0)


def qkv(heads: int, groups: int, dtype=torch.float32) -> dict:
    shape = (2, heads, 8, 16)
    kv = (2, groups, 8, 16)
    return {
        "q": torch.randn(*shape, generator=g).to(dtype),
        "k": torch.randn(*kv, generator=g).to(dtype),
        "v": torch.randn(*kv, generator=g).to(dtype),
    }


MASK = torch.randn(2, 1, 8, 8, generator=g)
CASES = {  # name -> (inputs, whether the CUDA variant repeats the heads)
    "causal": (qkv(4, 2), True),
    "masked": ({**qkv(6, 2), "mask": MASK}, True),
    "same_heads": (qkv(4, 4), False),
}


def _attention_calls(graph):
    return [
        n
        for n in graph.nodes
        if n.target == "aten.scaled_dot_product_attention.default"
    ]


@pytest.mark.parametrize("name", sorted(CASES))
def test_cuda_repeats_grouped_heads_in_f32(name: str, tmp_path: Path) -> None:
    inputs, repeats = CASES[name]
    graph = trace_source(SOURCE, name, inputs, tmp_path).graph
    nodes = optimize(graph, "cuda").by_name()
    (call,) = _attention_calls(optimize(graph, "cuda"))
    k = nodes[call.args[1].name].tensor_meta
    assert k.shape[1] == (inputs["q"] if repeats else inputs["k"]).shape[1]
    assert (call.args[1].name == "k") == (not repeats)
    assert bool(dict(call.kwargs).get("enable_gqa")) == (not repeats)
    (cpu_call,) = _attention_calls(optimize(graph, "cpu"))
    assert dict(cpu_call.kwargs).get("enable_gqa")  # CPU variants keep it


def test_half_precision_keeps_grouped_heads(tmp_path: Path) -> None:
    """flash attention reads grouped heads in place in f16 and bf16: no copy."""
    inputs = qkv(4, 2, torch.float16)
    graph = trace_source(SOURCE, "causal", inputs, tmp_path).graph
    (call,) = _attention_calls(optimize(graph, "cuda"))
    assert dict(call.kwargs).get("enable_gqa")


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager(name: str, tmp_path: Path) -> None:
    inputs = CASES[name][0]
    c = compile_source(SOURCE, {name: inputs}, tmp_path)[name]
    want = c.eager(**inputs)
    assert_same(c.cpu(**inputs), want, 1e-5, 1e-5)
    assert_same(c.cuda(**inputs), want, 1e-5, 1e-5)
    code = [line for line in c.cuda_source.splitlines() if "#" not in line]
    assert any("enable_gqa" in line for line in code) == (not CASES[name][1]), code
