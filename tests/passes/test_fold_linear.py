"""fold_linear: a linear layer's view, transpose, matmul and view back become one
`linear` call, computing the same values."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.compile_helpers import assert_same, trace_source
from transpiler.passes.dce import dce
from transpiler.passes.decompose import decompose
from transpiler.passes.fold_linear import fold_linear
from transpiler.passes.split_addmm import split_addmm

g = torch.Generator().manual_seed(0)
X = torch.randn(4, 8, generator=g)
X3 = torch.randn(2, 3, 8, generator=g)
W = torch.randn(16, 8, generator=g)
B = torch.randn(16, generator=g)

SOURCE = """
import torch
import torch.nn.functional as F


def returned(x, w, b):
    return F.linear(x, w, b)


def epilogue(x, w, b):
    return F.linear(x, w, b).relu()


def transposed(x, w, b):
    return F.linear(x.transpose(0, 1), w, b)


def alpha_beta(x, w, b):
    return torch.addmm(b, x, w.t(), beta=0.5)
"""


def calls(graph) -> list[str]:
    return [n.target for n in graph.nodes if n.op == "call"]


def fold(name: str, inputs: dict, tmp_path: Path):
    result = trace_source(SOURCE, name, inputs, tmp_path)
    before = split_addmm(decompose(result.graph))
    after = dce(fold_linear(before))
    after.lint()
    want = result.eager(inputs)
    assert_same(result.run(after, inputs), want, 1e-5, 1e-5)
    return before, after


@pytest.mark.parametrize("x", [X, X3], ids=["2d", "3d"])
def test_returned_linear_is_one_call(x: torch.Tensor, tmp_path: Path) -> None:
    _, after = fold("returned", {"x": x, "w": W, "b": B}, tmp_path)
    assert calls(after) == ["aten.linear.default"]
    (linear,) = after.nodes[-1:]
    assert [a.name for a in linear.args] == ["x", "w", "b"]
    assert after.outputs.name == linear.name  # no view back to its own shape


@pytest.mark.parametrize("x", [X, X3], ids=["2d", "3d"])
def test_bias_stays_with_the_epilogue(x: torch.Tensor, tmp_path: Path) -> None:
    _, after = fold("epilogue", {"x": x, "w": W, "b": B}, tmp_path)
    linear = next(n for n in after.nodes if n.target == "aten.linear.default")
    assert [a.name for a in linear.args] == ["x", "w"]  # the bias add is pointwise
    assert "aten.mm.default" not in calls(after)
    assert "aten.t.default" not in calls(after)


def test_a_non_contiguous_input_is_folded_as_it_is_laid_out(tmp_path: Path) -> None:
    inputs = {"x": torch.randn(3, 2, 8, generator=g), "w": W, "b": B}
    _, after = fold("transposed", inputs, tmp_path)
    assert "aten.mm.default" not in calls(after)


def test_addmm_with_beta_stays(tmp_path: Path) -> None:
    """`linear` has no beta: the matmul keeps its own call."""
    _, after = fold("alpha_beta", {"x": X, "w": W, "b": B}, tmp_path)
    assert "aten.addmm.default" in calls(after)
    assert "aten.linear.default" not in calls(after)
