"""constant_fold: pow by common exponents is strength-reduced, identities dropped."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.compile_helpers import assert_same, trace_source
from transpiler.ir.graph import iter_refs
from transpiler.passes.constant_fold import constant_fold
from transpiler.passes.dce import dce

g = torch.Generator().manual_seed(0)
X = torch.rand(4, 8, generator=g) + 0.5  # positive: roots are defined
XI = torch.randint(-4, 5, (4, 8), generator=g)

POW = [  # exponent, the ops the pow becomes
    (1, []),
    (2, ["aten.mul.Tensor"]),
    (3, ["aten.mul.Tensor", "aten.mul.Tensor"]),
    (0.5, ["aten.sqrt.default"]),
    (-0.5, ["aten.rsqrt.default"]),
    (-1, ["aten.reciprocal.default"]),
]


def calls(graph) -> list[str]:
    return [n.target for n in graph.nodes if n.op == "call"]


def folded(source: str, inputs: dict, tmp_path: Path):
    result = trace_source(source, "f", inputs, tmp_path)
    before = result.graph
    after = constant_fold(before)
    after.lint()
    want = result.eager(inputs)
    assert_same(result.run(before, inputs), want)
    assert_same(result.run(after, inputs), want)
    return before, after


@pytest.mark.parametrize("exponent, ops", POW, ids=[str(p[0]) for p in POW])
def test_pow_is_strength_reduced(exponent, ops: list[str], tmp_path: Path) -> None:
    source = f"def f(x):\n    return x ** {exponent}\n"
    before, after = folded(source, {"x": X}, tmp_path)
    assert calls(before) == ["aten.pow.Tensor_Scalar"]
    assert calls(dce(after)) == ops, str(after)


@pytest.mark.parametrize(
    "source, inputs",
    [
        ("def f(x):\n    return x ** 2.5\n", {"x": X}),
        ("def f(x):\n    return x ** 2\n", {"x": XI}),  # integers: kept whole
        ("def f(x):\n    return x ** True\n", {"x": X}),
    ],
    ids=["other-exponent", "integer-base", "bool-exponent"],
)
def test_other_pows_stay(source: str, inputs: dict, tmp_path: Path) -> None:
    _, after = folded(source, inputs, tmp_path)
    assert "aten.pow.Tensor_Scalar" in calls(after)


@pytest.mark.parametrize(
    "expr", ["x * 1", "x + 0", "x - 0", "x / 1", "1 * x", "x.detach()", "x * 1.0 + 0.0"]
)
def test_identity_arithmetic_is_dropped(expr: str, tmp_path: Path) -> None:
    source = f"def f(x):\n    return ({expr}).exp()\n"
    _, after = folded(source, {"x": X}, tmp_path)
    assert calls(dce(after)) == ["aten.exp.default"], str(after)


@pytest.mark.parametrize(
    "expr, inputs",
    [
        ("x * 1.0", {"x": XI}),  # int * 1.0 is float: the dtype changes
        ("x + 0.5", {"x": X}),
        ("x * 2", {"x": X}),
        ("x + y * 0", {"x": X, "y": X}),  # not a scalar identity
        ("x * torch.ones(1, 4, 8)", {"x": X}),  # a tensor one broadcasts up
    ],
    ids=["int-to-float", "add-half", "mul-two", "mul-zero", "broadcast"],
)
def test_non_identities_stay(expr: str, inputs: dict, tmp_path: Path) -> None:
    params = ", ".join(inputs)
    source = f"import torch\n\n\ndef f({params}):\n    return {expr}\n"
    before, after = folded(source, inputs, tmp_path)
    kept = [t for t in calls(dce(before)) if t != "aten.detach.default"]
    assert calls(dce(after)) == kept, str(after)


def test_result_dtype_and_shape_are_kept(tmp_path: Path) -> None:
    source = "def f(x):\n    y = x.exp()\n    return y * 1, y + 0\n"
    before, after = folded(source, {"x": X}, tmp_path)
    out = after.by_name()
    for ref, old in zip(after.outputs, before.outputs):
        assert out[ref.name].meta == before.by_name()[old.name].meta
    assert all(out[r.name].target == "aten.exp.default" for r in after.outputs)


@pytest.mark.parametrize(
    "body",
    [
        "return x * 1, x + 0",  # the caller's tensor itself, twice
        "return (x * 1).view(-1)",  # a view of it
        "return [x * i for i in range(2)]",  # x * 1 beside x * 0
        "return w - 0, x",  # another input's, beside x itself
    ],
)
def test_returned_identities_of_the_callers_tensors_stay_new(
    body: str, tmp_path: Path
) -> None:
    """Eager returns a new tensor for `x * 1`: the result must not be the
    caller's `x` (an input, parameter or buffer), which the call may write into
    and the caller may write into through it."""
    source = f"def f(x, w):\n    {body}\n"
    _, after = folded(source, {"x": X, "w": X + 1}, tmp_path)
    nodes = after.by_name()
    for ref in iter_refs(after.outputs):
        base = nodes[ref.name]
        while base.op == "call" and base.target == "aten.view.default":
            base = nodes[base.args[0].name]
        if body.endswith(", x") and ref == after.outputs[-1]:
            continue  # `x` returned as itself, as eager does
        assert base.op == "call", (body, str(after))


def test_spans_are_kept(tmp_path: Path) -> None:
    source = "def f(x):\n    y = x.exp()\n    return y ** 2\n"
    _, after = folded(source, {"x": X}, tmp_path)
    spans = {n.target: n.span.line for n in after.nodes if n.op == "call"}
    assert spans == {"aten.exp.default": 2, "aten.mul.Tensor": 3}


def test_graph_without_rewrites_is_returned_unchanged(tmp_path: Path) -> None:
    result = trace_source(
        "def f(x):\n    return x.exp().relu()\n", "f", {"x": X}, tmp_path
    )
    assert constant_fold(result.graph) is result.graph
