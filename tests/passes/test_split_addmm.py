"""split_addmm: a linear layer's bias moves into the pointwise epilogue's kernel."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.compile_helpers import assert_same, trace_source
from transpiler.passes.dce import dce
from transpiler.passes.decompose import decompose
from transpiler.passes.fuse import fuse
from transpiler.passes.split_addmm import split_addmm

g = torch.Generator().manual_seed(0)
X = torch.randn(4, 8, generator=g)
X3 = torch.randn(2, 3, 8, generator=g)
W = torch.randn(16, 8, generator=g)
B = torch.randn(16, generator=g)

SOURCE = """
import torch
import torch.nn.functional as F


def gelu_epilogue(x, w, b):
    return F.gelu(F.linear(x, w, b))


def residual(x, w, b, r):
    return F.linear(x, w, b) + r


def through_view(x, w, b):
    return F.linear(x, w, b).relu()


def returned(x, w, b):
    return F.linear(x, w, b)


def matmul_user(x, w, b):
    y = F.linear(x, w, b)
    return y @ w


def alpha_beta(x, w, b):
    return torch.addmm(b, x, w.t(), beta=0.5).relu()


def returned_and_pointwise(x, w, b):
    h = F.linear(x, w, b)
    return h, F.gelu(h)


def returned_view_and_pointwise(x, w, b):
    h = F.linear(x, w, b)
    return h.view(2, 3, 16), h.relu()
"""


def calls(graph) -> list[str]:
    return [n.target for n in graph.nodes if n.op == "call"]


def split(name: str, inputs: dict, tmp_path: Path):
    result = trace_source(SOURCE, name, inputs, tmp_path)
    before = decompose(result.graph)  # as in the pipeline: gelu is pointwise by now
    after = split_addmm(before)
    after.lint()
    want = result.eager(inputs)
    assert_same(result.run(before, inputs), want, 1e-5, 1e-5)
    assert_same(result.run(after, inputs), want, 1e-5, 1e-5)
    return before, after


@pytest.mark.parametrize(
    "name, inputs",
    [
        ("gelu_epilogue", {"x": X, "w": W, "b": B}),
        ("residual", {"x": X, "w": W, "b": B, "r": torch.randn(4, 16)}),
        ("through_view", {"x": X3, "w": W, "b": B}),  # 3-d input: addmm then a view
    ],
)
def test_addmm_feeding_pointwise_is_split(
    name: str, inputs: dict, tmp_path: Path
) -> None:
    before, after = split(name, inputs, tmp_path)
    assert "aten.addmm.default" in calls(before)
    targets = calls(after)
    assert "aten.addmm.default" not in targets
    assert "aten.mm.default" in targets
    # the bias add is a node of the epilogue's kernel, not a separate one
    mm = next(n for n in after.nodes if n.target == "aten.mm.default")
    bias_add = next(
        n
        for n in after.nodes
        if n.target == "aten.add.Tensor" and any(r.name == "b" for r in n.refs())
    )
    assert (
        mm.span
        == bias_add.span
        == next(n.span for n in before.nodes if n.target == "aten.addmm.default")
    )
    fusion = fuse(dce(after))
    gid = fusion.group_of[bias_add.name]
    assert len(fusion.groups[gid].nodes) > 1, fusion.groups


@pytest.mark.parametrize(
    "name",
    [
        "returned",
        "matmul_user",
        "alpha_beta",
        # stored anyway: cuBLAS adds the bias as it writes the product
        "returned_and_pointwise",
        "returned_view_and_pointwise",
    ],
)
def test_addmm_without_pointwise_user_or_returned_stays(
    name: str, tmp_path: Path
) -> None:
    inputs = {"x": X, "w": W, "b": B}
    if name == "returned_view_and_pointwise":
        inputs = {"x": torch.randn(6, 8), "w": W, "b": B}
    if name == "matmul_user":  # y @ w needs a square weight
        inputs = {"x": torch.randn(4, 16), "w": torch.randn(16, 16), "b": B}
    before, after = split(name, inputs, tmp_path)
    assert "aten.addmm.default" in calls(before), str(before)
    if name == "alpha_beta":  # beta is a keyword: the split would lose it
        assert calls(after) == calls(before)
    else:
        assert after is before
