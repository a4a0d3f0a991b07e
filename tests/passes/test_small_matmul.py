"""small_matmul: a matmul with K <= 8 becomes products and adds that fuse with their
readers; results match eager PyTorch on both backends."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.compile_helpers import assert_same, compile_source, trace_source
from transpiler.passes.small_matmul import SMALL_K
from transpiler.pipeline import optimize

pytestmark = [  # masked-off lanes of Triton's interpreter compute 0 / 0 and such
    pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning"),
]

SOURCE = """
import torch
import torch.nn.functional as F


def linear(x, w, b):
    return F.linear(x, w, b)


def no_bias_gelu(x, w):
    return F.gelu(F.linear(x, w))


def branch(x, w, b):
    y = F.linear(x, w, b)
    if y.sum() > 0:
        return y.relu()
    return y.tanh()


def scaled(x, w, b):
    return torch.addmm(b, x, w.t(), beta=0.5)


def transposed_input(x, w):
    return x.t() @ w
"""

g = torch.Generator().manual_seed(0)


def inputs(shape, k: int, n: int = 4, dtype=torch.float32, bias: bool = True):
    out = {
        "x": torch.randn(*shape, k, generator=g).to(dtype),
        "w": torch.randn(n, k, generator=g).to(dtype),
    }
    if bias:
        out["b"] = torch.randn(n, generator=g).to(dtype)
    return out


def matmul_calls(name: str, example: dict, tmp_path: Path) -> list[str]:
    graph = optimize(trace_source(SOURCE, name, example, tmp_path).graph)
    matmuls = ("aten.mm.default", "aten.addmm.default", "aten.linear.default")
    return [n.target for n in graph.nodes if n.target in matmuls]


@pytest.mark.parametrize(
    "shape, k",
    [((2,), 4), ((3, 5), 3), ((6,), SMALL_K), ((1,), 1)],
    ids=["2d", "3d", "k_max", "k1"],
)
def test_short_matmuls_become_kernels_and_match_eager(
    shape, k: int, tmp_path: Path
) -> None:
    example = inputs(shape, k)
    assert matmul_calls("linear", example, tmp_path) == []
    c = compile_source(SOURCE, {"linear": example}, tmp_path / "gen")["linear"]
    want = c.eager(**example)
    assert_same(c.cpu(**example), want, 1e-5, 1e-5)
    assert_same(c.cuda(**example), want, 1e-5, 1e-5)
    assert "torch.nn.functional.linear" not in c.cpu_source


def test_a_longer_matmul_stays_a_library_call(tmp_path: Path) -> None:
    assert matmul_calls("linear", inputs((2,), SMALL_K + 1), tmp_path) == [
        "aten.linear.default"
    ]


def test_addmm_with_its_own_scales_stays(tmp_path: Path) -> None:
    example = inputs((2,), 4)
    assert matmul_calls("scaled", example, tmp_path) == ["aten.addmm.default"]


def test_strided_operands_are_read_in_place(tmp_path: Path) -> None:
    """`x.t() @ w`: the transposed operand's slices are strided loads, no copy."""
    example = {
        "x": torch.randn(3, 5, generator=g),
        "w": torch.randn(3, 4, generator=g),
    }
    assert matmul_calls("transposed_input", example, tmp_path) == []
    c = compile_source(SOURCE, {"transposed_input": example}, tmp_path / "gen")
    c = c["transposed_input"]
    assert_same(c.cpu(**example), c.eager(**example), 1e-5, 1e-5)
    assert_same(c.cuda(**example), c.eager(**example), 1e-5, 1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_products_are_added_in_f32(dtype, tmp_path: Path) -> None:
    example = inputs((4,), 8, n=6, dtype=dtype, bias=False)
    c = compile_source(SOURCE, {"no_bias_gelu": example}, tmp_path / "gen")
    c = c["no_bias_gelu"]
    want = torch.nn.functional.gelu(
        torch.nn.functional.linear(example["x"].float(), example["w"].float())
    )
    tol = 1e-2 if dtype == torch.bfloat16 else 2e-3
    assert_same(c.cpu(**example).float(), want, tol, tol)
    assert_same(c.cuda(**example).float(), want, tol, tol)
    (kernel,) = [line for line in c.cpp_text.splitlines() if "extern" in line]
    assert "gelu" in kernel  # the products, the bias-free sum and GELU: one kernel


@pytest.mark.parametrize("positive", [True, False])
def test_a_branch_on_a_small_linear_is_one_kernel_before_the_sync(
    positive: bool, tmp_path: Path
) -> None:
    """`nn.Linear(4, 4)` then `if y.sum() > 0`: the products, the bias, the sum and
    the comparison are one kernel, which also stores `y` for the branch."""
    example = inputs((2,), 4)
    if not positive:
        example["b"] = example["b"] - 100
    c = compile_source(SOURCE, {"branch": example}, tmp_path / "gen")["branch"]
    want = c.eager(**example)
    assert_same(c.cpu(**example), want, 1e-5, 1e-5)
    assert_same(c.cuda(**example), want, 1e-5, 1e-5)
    before_sync = c.cuda_source.split("# sync:")[0]
    assert before_sync.count("_triton.") == 1
    assert "torch.nn.functional.linear" not in before_sync
