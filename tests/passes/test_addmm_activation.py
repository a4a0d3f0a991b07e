"""addmm_activation: on CUDA, a linear layer's bias and its tanh-GELU (f16, bf16) or
ReLU become one `_addmm_activation` call, through `runtime_shim.addmm_activation`."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import runtime_shim
from tests.compile_helpers import assert_same, compile_source, trace_source
from transpiler.pipeline import optimize

pytestmark = [  # masked-off lanes of Triton's interpreter compute 0 / 0 and such
    pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning"),
]

SOURCE = """
import torch
import torch.nn.functional as F


def tanh_gelu(x, w, b):
    return F.gelu(F.linear(x, w, b), approximate="tanh")


def exact_gelu(x, w, b):
    return F.gelu(F.linear(x, w, b))


def relu(x, w, b):
    return F.linear(x, w, b).relu()


def also_returned(x, w, b):
    y = F.linear(x, w, b)
    return y, F.gelu(y, approximate="tanh")


def scaled(x, w, b):
    return F.gelu(F.linear(x, w, b), approximate="tanh") * 0.5 + 1
"""

g = torch.Generator().manual_seed(0)


def inputs(dtype, shape=(2, 5)):
    return {
        "x": torch.randn(*shape, 16, generator=g).to(dtype),
        "w": (torch.randn(32, 16, generator=g) / 4).to(dtype),
        "b": torch.randn(32, generator=g).to(dtype),
    }


def activations(name: str, example: dict, device: str, tmp_path: Path) -> list:
    graph = optimize(trace_source(SOURCE, name, example, tmp_path).graph, device)
    return [
        dict(n.kwargs)["use_gelu"]
        for n in graph.nodes
        if n.target == "aten._addmm_activation.default"
    ]


@pytest.mark.parametrize(
    ("name", "dtype", "want"),
    [
        ("tanh_gelu", torch.bfloat16, [True]),
        ("tanh_gelu", torch.float16, [True]),
        ("relu", torch.bfloat16, [False]),
        ("relu", torch.float32, [False]),
        ("tanh_gelu", torch.float32, []),  # f32's GELU epilogue costs a pass too
        ("exact_gelu", torch.bfloat16, []),  # cuBLAS's GELU is the tanh form
        ("also_returned", torch.bfloat16, []),  # the product itself is needed
    ],
)
def test_which_activations_cublas_applies(name, dtype, want, tmp_path: Path) -> None:
    assert activations(name, inputs(dtype), "cuda", tmp_path) == want


def test_a_short_matmul_stays_a_kernel(tmp_path: Path) -> None:
    example = {
        "x": torch.randn(3, 4, generator=g),
        "w": torch.randn(5, 4, generator=g),
        "b": torch.randn(5, generator=g),
    }
    assert activations("relu", example, "cuda", tmp_path) == []


def test_the_cpu_keeps_its_fused_kernel(tmp_path: Path) -> None:
    assert activations("tanh_gelu", inputs(torch.bfloat16), "cpu", tmp_path) == []


@pytest.mark.parametrize("shape", [(2, 5), (7,)], ids=["3d", "2d"])
def test_generated_calls_the_shim_and_matches_eager(shape, tmp_path: Path) -> None:
    example = inputs(torch.bfloat16, shape)
    c = compile_source(SOURCE, {"scaled": example}, tmp_path)["scaled"]
    assert "runtime_shim.addmm_activation(" in c.cuda_source
    assert "runtime_shim.addmm_activation(" not in c.cpu_source
    # the source's arithmetic in f32 from the same bf16 values; each result rounds
    # it to bf16 once or twice (2 ulp: 1.6e-2 relative)
    want = c.eager(**{k: v.float() for k, v in example.items()})
    assert_same(c.cuda(**example).float(), want, 1.6e-2, 1e-2)
    assert_same(c.cpu(**example).float(), want, 1.6e-2, 1e-2)


@pytest.mark.parametrize("use_gelu", [True, False])
def test_shim_computes_the_cuda_activation_on_the_cpu(use_gelu: bool) -> None:
    b, x, w = torch.randn(6), torch.randn(4, 5), torch.randn(6, 5)
    got = runtime_shim.addmm_activation(b, x, w.t(), use_gelu=use_gelu)
    y = torch.addmm(b, x, w.t())
    want = torch.nn.functional.gelu(y, approximate="tanh") if use_gelu else y.relu()
    torch.testing.assert_close(got, want)
