"""decompose: composite ops become the ops kernels fuse, tagged with their origin;
exact GELU, a kernel op of its own, stays whole; ops that alias their input or copy
it, as its layout decides, become the one or the other."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.compile_helpers import assert_same, trace_source
from transpiler.ir.ops import may_copy
from transpiler.ir.program import ExternCall, KernelNames
from transpiler.passes.dce import dce
from transpiler.passes.decompose import decompose
from transpiler.passes.fuse import classify, fuse
from transpiler.pipeline import lower, optimize

SOURCE = """
import torch
import torch.nn.functional as F


def layer_norm(x, w, b):
    return F.layer_norm(x, (x.shape[-1],), w, b)


def softmax(x):
    return torch.softmax(x, -1)


def log_softmax(x):
    return F.log_softmax(x, dim=-1)


def gelu(x):
    return F.gelu(x)


def gelu_none(x):
    return F.gelu(x, approximate="none")


def gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


def silu(x):
    return F.silu(x)


def hardtanh(x):
    return F.hardtanh(x, -0.5, 0.5)


def leaky_relu(x):
    return F.leaky_relu(x, 0.1)


def split(x):
    a, b = x.split(4, dim=-1)
    return a * b


def addcmul(x, w, b):
    return torch.addcmul(x, w, b, value=0.5)


def lerp(x, w):
    return torch.lerp(x, w, 0.25)


def zeros_like(x):
    z = torch.zeros_like(x)
    return z + x


def ones_like(x):
    o = torch.ones_like(x)
    return o * x


def matmul(x, w):
    return x @ w.t()


def softmax_t(x):
    return torch.softmax(x.t(), -1)


def log_softmax_permuted(x):
    return F.log_softmax(x.unsqueeze(0).permute(2, 0, 1), 0)


def reshape_t(x):
    return x.t().reshape(-1) * 2


def contiguous_of_contiguous(x):
    return x.contiguous().exp()


def to_dtype(x):
    return x.to(torch.float64, copy=True)


def hardswish(x):
    return F.hardswish(x) + F.hardsigmoid(x)


def shrink(x):
    return F.hardshrink(x, 0.3) * F.softshrink(x, 0.2) + F.threshold(x, 0.1, -1.0)


def elu(x):
    return F.elu(x) + F.celu(x, 0.5) + F.selu(x)


def softplus(x):
    return F.softplus(x) + F.mish(x)


def glu(x):
    return F.glu(x)


def logit(x):
    p = x.sigmoid()
    return torch.logit(p, 1e-3)


def masked_fill(x, w):
    mask = w > 0
    return x.masked_fill(mask, -1e4)


def lerp_tensor(x, w):
    return torch.lerp(x, w, w.sigmoid())


def addcdiv(x, w, b):
    return torch.addcdiv(x, w, b.abs() + 1, value=0.5)


def xlogy(x, w):
    return torch.xlogy(x.abs(), w.abs()) + torch.heaviside(x, w)


def sinc(x):
    return torch.sinc(x) + torch.isinf(x / 0.0) + torch.frac(x * 3) + torch.rad2deg(x)


def logical_xor(x, w):
    a, b = x > 0, w > 0
    return torch.logical_xor(a, b)


def round_decimals(x):
    return torch.round(x * 10, decimals=2) + torch.round(x * 1000, decimals=-1)


def pow_of_bools(x):
    b = x > 0
    return (b**True) + (b**False)


def integer_remainder(i, j):
    return torch.remainder(i, j) + torch.fmod(i, j) + i // j + i % 3 + i // -4


def float_remainder(x, w):
    return torch.remainder(x, w) + torch.fmod(x, w) + x // w + x % 0.0


def logaddexp(x, w):
    return torch.logaddexp(x, w) + torch.logaddexp2(x, w)


def nan_to_num(x):
    return torch.nan_to_num(x / 0.0, posinf=1e4) + torch.isposinf(x) + torch.isneginf(x)


def clamp_tensor(x, w):
    return torch.clamp(x, min=w, max=w + 1)


def clamp_min_max_tensor(x, w):
    return torch.clamp_min(x, w) + torch.clamp_max(x, w)


def batch_norm_eval(x, m, v, w, b):
    return F.batch_norm(x, m, v, w, b)


def batch_norm_train(x):
    return F.batch_norm(x, None, None, training=True)


def batch_norm_statistics(x, m, v):
    return torch.native_batch_norm(x, None, None, m, v, False, 0.1, 1e-5)
"""

g = torch.Generator().manual_seed(0)
X = torch.randn(4, 8, generator=g)
W = torch.randn(8, generator=g)
B = torch.randn(8, generator=g)
M = torch.randn(8, 8, generator=g)

CASES = [  # function, inputs, the composite op the trace records
    ("layer_norm", {"x": X, "w": W, "b": B}, "aten.native_layer_norm.default"),
    ("softmax", {"x": X}, "aten._softmax.default"),
    ("log_softmax", {"x": X}, "aten._log_softmax.default"),
    ("gelu_tanh", {"x": X}, "aten.gelu.default"),
    ("silu", {"x": X}, "aten.silu.default"),
    ("hardtanh", {"x": X}, "aten.hardtanh.default"),
    ("leaky_relu", {"x": X}, "aten.leaky_relu.default"),
    ("split", {"x": X}, "aten.split.Tensor"),
    ("addcmul", {"x": X, "w": W, "b": B}, "aten.addcmul.default"),
    ("lerp", {"x": X, "w": W}, "aten.lerp.Scalar"),
    ("zeros_like", {"x": X}, "aten.zeros_like.default"),
    ("ones_like", {"x": X}, "aten.ones_like.default"),
    ("hardswish", {"x": X}, "aten.hardswish.default"),
    ("shrink", {"x": X}, "aten.hardshrink.default"),
    ("elu", {"x": X}, "aten.elu.default"),
    ("softplus", {"x": X}, "aten.softplus.default"),
    ("glu", {"x": X}, "aten.glu.default"),
    ("logit", {"x": X}, "aten.logit.default"),
    ("masked_fill", {"x": X, "w": W}, "aten.masked_fill.Scalar"),
    ("lerp_tensor", {"x": X, "w": W}, "aten.lerp.Tensor"),
    ("addcdiv", {"x": X, "w": W, "b": B}, "aten.addcdiv.default"),
    ("xlogy", {"x": X, "w": W}, "aten.xlogy.Tensor"),
    ("sinc", {"x": X}, "aten.sinc.default"),
    ("logical_xor", {"x": X, "w": W}, "aten.logical_xor.default"),
    ("round_decimals", {"x": X}, "aten.round.decimals"),
    ("pow_of_bools", {"x": X}, "aten.pow.Tensor_Scalar"),
    ("logaddexp", {"x": X, "w": W}, "aten.logaddexp.default"),
    ("nan_to_num", {"x": X}, "aten.nan_to_num.default"),
    ("clamp_tensor", {"x": X, "w": W}, "aten.clamp.Tensor"),
    ("clamp_min_max_tensor", {"x": X, "w": W}, "aten.clamp_min.Tensor"),
    (
        "batch_norm_eval",
        {"x": X, "m": B, "v": W.abs() + 0.5, "w": W, "b": B},
        "aten.native_batch_norm.default",
    ),
]


@pytest.mark.parametrize("name, inputs, composite", CASES, ids=[c[0] for c in CASES])
def test_composite_is_decomposed(
    name: str, inputs: dict, composite: str, tmp_path: Path
) -> None:
    result = trace_source(SOURCE, name, inputs, tmp_path)
    before = result.graph
    assert composite in {n.target for n in before.nodes}
    after = decompose(before)
    after.lint()
    targets = {n.target for n in after.nodes}
    assert composite not in targets, str(after)
    # the new nodes keep the user's line and name the op they came from
    origin = composite.split(".")[1].lstrip("_")
    span = next(n.span for n in before.nodes if n.target == composite)
    new = [n for n in after.nodes if n.op == "call" and n.span == span]
    assert new, str(after)
    assert all(n.span is not None for n in after.nodes if n.op == "call")
    tagged = [n for n in after.nodes if n.origin == origin]
    assert all(n.span == span for n in tagged), str(after)
    assert tagged or len(new) == 1, str(after)  # one op for one: no tag needed
    # differential: before == after == eager
    want = result.eager(inputs)
    assert_same(result.run(before, inputs), want)
    assert_same(result.run(after, inputs), want)


@pytest.mark.parametrize("name, inputs, composite", CASES, ids=[c[0] for c in CASES])
def test_decomposition_lowers_to_kernels(
    name: str, inputs: dict, composite: str, tmp_path: Path
) -> None:
    """Decomposing is worth it only when what comes out fuses (no extern call)."""
    graph = optimize(trace_source(SOURCE, name, inputs, tmp_path).graph)
    kinds = fuse(graph).kinds
    externs = [n.target for n in graph.nodes if kinds[n.name].startswith("extern")]
    assert not externs, str(graph)


def test_integer_division_by_a_tensor_divides_in_eager(tmp_path: Path) -> None:
    """On integers, fmod, remainder and floor_divide by a tensor (which may hold
    a zero: eager raises) divide in eager's `div`, and the rest is kernel code; by
    a nonzero Scalar, and on floats, they are kernel ops (Note [Integer division
    by zero] in passes/decompose.py)."""
    i = torch.randint(-9, 9, (4, 6))
    j = torch.randint(1, 5, (4, 6)) * torch.tensor([1, -1]).repeat(3)
    inputs = {"i": i, "j": j}
    result = trace_source(SOURCE, "integer_remainder", inputs, tmp_path)
    graph = optimize(result.graph)
    kinds = fuse(graph).kinds
    externs = [n.target for n in graph.nodes if kinds[n.name].startswith("extern")]
    assert externs == ["aten.div.Tensor_mode"] * 3, str(graph)
    assert_same(result.run(graph, inputs), result.eager(inputs))
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        result.run(graph, {"i": i, "j": j * 0})
    inputs = {"x": X, "w": W}
    graph = trace_source(SOURCE, "float_remainder", inputs, tmp_path).graph
    assert decompose(graph) is graph


@pytest.mark.parametrize("name", ["gelu", "gelu_none"])
def test_exact_gelu_stays_one_kernel_op(name: str, tmp_path: Path) -> None:
    graph = trace_source(SOURCE, name, {"x": X}, tmp_path).graph
    assert decompose(graph) is graph
    graph = optimize(graph)
    (gelu,) = [n for n in graph.nodes if n.target == "aten.gelu.default"]
    assert fuse(graph).kinds[gelu.name] == "pointwise"


def test_tanh_gelu_is_never_the_exact_op(tmp_path: Path) -> None:
    """Left whole, `approximate="tanh"` is an extern call: the `gelu` kernel op
    computes the exact function only."""
    graph = trace_source(SOURCE, "gelu_tanh", {"x": X}, tmp_path).graph
    (gelu,) = [n for n in graph.nodes if n.target == "aten.gelu.default"]
    assert dict(gelu.kwargs) == {"approximate": "tanh"}
    assert classify(gelu, graph.by_name()) == "extern"


def test_layer_norm_becomes_var_mean_and_pointwise(tmp_path: Path) -> None:
    inputs = {"x": X, "w": W, "b": B}
    after = decompose(trace_source(SOURCE, "layer_norm", inputs, tmp_path).graph)
    targets = [n.target for n in after.nodes if n.op == "call"]
    assert any(t.startswith("aten.var_mean.") for t in targets)
    assert "aten.rsqrt.default" in targets
    assert not any(t.startswith("aten.native_layer_norm") for t in targets)


def test_softmax_becomes_amax_exp_sum_div(tmp_path: Path) -> None:
    after = decompose(trace_source(SOURCE, "softmax", {"x": X}, tmp_path).graph)
    targets = [n.target for n in after.nodes if n.op == "call"]
    for op in (
        "aten.amax.default",
        "aten.exp.default",
        "aten.sum.dim_IntList",
        "aten.div.Tensor",
    ):
        assert op in targets, targets


def test_bf16_softmax_keeps_values(tmp_path: Path) -> None:
    x = X.to(torch.bfloat16)
    result = trace_source(SOURCE, "softmax", {"x": x}, tmp_path)
    after = decompose(result.graph)
    after.lint()
    assert_same(result.run(after, {"x": x}), result.eager({"x": x}), 2e-2, 2e-2)


def test_graph_without_composites_is_returned_unchanged(tmp_path: Path) -> None:
    graph = trace_source(SOURCE, "matmul", {"x": X, "w": M}, tmp_path).graph
    assert decompose(graph) is graph


def test_decompose_is_deterministic(tmp_path: Path) -> None:
    graph = trace_source(SOURCE, "layer_norm", {"x": X, "w": W, "b": B}, tmp_path).graph
    assert str(decompose(graph)) == str(decompose(graph))


# Note [Views and copies that may alias] in ir/ops.py: (function, inputs, what the
# composite op becomes: the targets it leaves, and those it must not)
MAY_ALIAS = [
    ("softmax_t", {"x": X}, {"aten.clone.default"}),
    ("log_softmax_permuted", {"x": X}, {"aten.clone.default"}),
    ("reshape_t", {"x": X}, {"aten.clone.default", "aten._unsafe_view.default"}),
    ("contiguous_of_contiguous", {"x": X}, set()),
    ("to_dtype", {"x": X}, {"aten._to_copy.default"}),
]


@pytest.mark.parametrize(
    "name, inputs, copies", MAY_ALIAS, ids=[c[0] for c in MAY_ALIAS]
)
def test_copies_that_may_alias_become_views_or_copies(
    name: str, inputs: dict, copies: set, tmp_path: Path
) -> None:
    """`contiguous`, `reshape`, `to`: a copy where the layout asks for one, else
    the input or a view of it; never a node read as a view that is not one."""
    result = trace_source(SOURCE, name, inputs, tmp_path)
    after = decompose(result.graph)
    after.lint()
    targets = {n.target for n in after.nodes if n.op == "call"}
    assert not [t for t in targets if t != "getitem" and may_copy(t)], str(after)
    assert copies <= targets, str(after)
    if not copies:
        assert "aten.clone.default" not in targets, str(after)
    want = result.eager(inputs)
    assert_same(result.run(after, inputs), want)
    graph = optimize(result.graph)
    kinds = fuse(graph).kinds
    made = [n.name for n in graph.nodes if n.target in copies]
    assert all(kinds[m] in ("pointwise", "view") for m in made), str(graph)


def test_to_dtype_from_a_decomposition_becomes_a_fusable_cast(tmp_path: Path) -> None:
    """bf16 layer_norm decomposes into f32 math bracketed by `x.to(dtype)`: both
    become `_to_copy` (a pointwise cast), so the norm is one kernel. (The casts of
    its statistics to the CPU's bf16, Note [Device outputs], go: nothing reads
    them.)"""
    source = (
        "import torch\n\n\n"
        "def f(x, w, b):\n"
        "    return torch.nn.functional.layer_norm(x, (8,), w, b)\n"
    )
    inputs = {
        "x": X.to(torch.bfloat16),
        "w": W.to(torch.bfloat16),
        "b": B.to(torch.bfloat16),
    }
    result = trace_source(source, "f", inputs, tmp_path)
    after = dce(decompose(result.graph))
    after.lint()
    targets = [n.target for n in after.nodes if n.op == "call"]
    assert "aten.to.dtype" not in targets
    assert targets.count("aten._to_copy.default") == 2
    want = result.eager(inputs)
    assert_same(result.run(after, inputs), want)
    program = lower(optimize(result.graph), KernelNames())
    assert not [s for s in program.steps if isinstance(s, ExternCall)], str(program)


@pytest.mark.parametrize(
    "name, inputs, whole",
    [
        ("batch_norm_train", {"x": X}, False),  # no running statistics to write
        ("batch_norm_statistics", {"x": X, "m": B, "v": W.abs() + 0.5}, True),
    ],
)
def test_batch_norm_stays_whole_only_when_its_statistics_are_read(
    name: str, inputs: dict, whole: bool, tmp_path: Path
) -> None:
    """The statistics a batch norm returns differ between devices (Note [Batch
    norm in eval]); in training without running statistics it writes nothing and
    decomposes."""
    result = trace_source(SOURCE, name, inputs, tmp_path)
    after = decompose(result.graph)
    targets = {n.target for n in after.nodes}
    assert any("batch_norm" in t for t in targets) == whole, str(after)
    assert_same(result.run(after, inputs), result.eager(inputs))
