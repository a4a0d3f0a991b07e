"""Kernels read each input through its real strides and write the layout its meta
tensor says, whatever view the function takes and whatever layout an op makes.

Decompositions write `x.contiguous()` (softmax, log_softmax); `reshape`, `flatten`
and `contiguous(memory_format=...)` copy where a view cannot do: composite ops whose
schema says they alias their input, though they copy a transposed one (Note [Views
and copies that may alias] in ir/ops.py). Each row below is a normalization or a
reduction over one view (transposed, permuted, expanded, sliced, or none), along each
dim, or such a copy; all rows are built in one run and compared with eager on both
backends: values, strides, and the inputs after the call.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import pytest
import torch

from tests.compile_helpers import Compiled, compile_source
from transpiler.ir.ops import copies_that_may_alias, is_view, may_copy

pytestmark = [  # masked-off lanes of Triton's interpreter compute log(0) and such
    pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning"),
]

# view of the input x -> (its text, the shape of x)
VIEWS = {
    "none": ("x", (3, 5, 7)),
    "t": ("x.t()", (6, 9)),
    "transpose01": ("x.transpose(0, 1)", (5, 3, 7)),
    "transpose02": ("x.transpose(0, 2)", (7, 5, 3)),
    "permute": ("x.permute(2, 0, 1)", (7, 3, 5)),
    "expand": ("x.expand(4, 5, 7)", (1, 5, 7)),
    "slice": ("x[1:, ::2, 2:]", (3, 5, 7)),
}
# op over `{v}` (the view) along `{d}`
ALONG_DIM = {
    "softmax": "torch.softmax({v}, {d})",
    "log_softmax": "torch.log_softmax({v}, {d})",
    "sum": "{v}.sum({d})",
    "mean": "{v}.mean({d}, keepdim=True)",
    "amax": "{v}.amax({d})",
    "var": "{v}.var({d})",
    "sub_mean": "{v} - {v}.mean({d}, keepdim=True)",
}
# ops whose result has a layout of its own (over the view, whatever its rank)
NEW_LAYOUT = {
    "layer_norm": "torch.nn.functional.layer_norm({v}, {v}.shape[-1:])",
    "contiguous": "{v}.contiguous()",
    "contiguous_exp": "{v}.contiguous().exp()",
    "reshape": "{v}.reshape(-1)",
    "reshape_rows": "{v}.reshape(-1, {v}.shape[-1]).exp()",
    "flatten": "{v}.flatten(1) * 2",
    "channels_last": "{v}.unsqueeze(0).contiguous(memory_format=torch.channels_last)",
    "clone_channels_last": "{v}.unsqueeze(0).clone(memory_format=torch.channels_last)",
    "to_channels_last": (
        "({v}.unsqueeze(0) + 1).to(memory_format=torch.channels_last).sigmoid()"
    ),
}
TOL = (1e-4, 1e-5)


@dataclass(frozen=True)
class Case:
    name: str
    expr: str
    shape: tuple[int, ...]


def _cases() -> list[Case]:
    cases = []
    for (view, (v, shape)), (op, text) in itertools.product(
        VIEWS.items(), ALONG_DIM.items()
    ):
        for d in range(len(shape)):
            cases.append(Case(f"{op}_{view}_{d}", text.format(v=v, d=d), shape))
    for (view, (v, shape)), (op, text) in itertools.product(
        VIEWS.items(), NEW_LAYOUT.items()
    ):
        if "unsqueeze" in text and len(shape) != 3:
            continue  # channels_last is for 4-d tensors
        cases.append(Case(f"{op}_{view}", text.format(v=v), shape))
    return cases


CASES = _cases()


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Compiled]:
    lines = ["import torch", ""]
    for c in CASES:
        lines += ["", f"def {c.name}(x):", f"    return {c.expr}", ""]
    gen = torch.Generator().manual_seed(0)
    inputs = {c.name: {"x": torch.randn(c.shape, generator=gen)} for c in CASES}
    root = tmp_path_factory.mktemp("layouts")
    return compile_source("\n".join(lines), inputs, root)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_kernels_read_and_write_real_layouts(
    case: Case, compiled: dict[str, Compiled]
) -> None:
    c = compiled[case.name]
    x = torch.randn(case.shape, generator=torch.Generator().manual_seed(1))
    want = c.eager(x.clone())
    for backend, fn in (("cpu", c.cpu), ("triton", c.cuda)):
        arg = x.clone()
        got = fn(arg)
        where = f"{case.name} ({backend}): {case.expr}"
        assert got.shape == want.shape and got.dtype == want.dtype, where
        torch.testing.assert_close(
            got, want, rtol=TOL[0], atol=TOL[1], msg=lambda m, w=where: f"{w}\n{m}"
        )
        assert got.stride() == want.stride(), (where, got.stride(), want.stride())
        assert torch.equal(arg, x), f"{where}: wrote into its input"


def test_composite_aliases_are_not_views() -> None:
    """`contiguous` and friends may copy: never read as a view of their input."""
    ops = {str(op) for op in copies_that_may_alias()}
    assert {"aten.contiguous.default", "aten.reshape.default"} <= ops
    assert "aten.to.dtype" in ops and "aten.flatten.using_ints" in ops
    for op in ops:
        assert may_copy(op) and not is_view(op), op
    for op in ("aten.view.default", "aten.t.default", "aten.permute.default"):
        assert is_view(op) and not may_copy(op), op


def test_a_copy_to_contiguous_is_computed_in_the_kernel(
    compiled: dict[str, Compiled],
) -> None:
    """Softmax of a transposed input: one kernel reads `x` by its strides (no
    extern `contiguous` call, no copy in the wrapper)."""
    c = compiled["softmax_t_1"]
    assert "torch.ops.aten" not in c.cpu_source, c.cpu_source
    assert c.cpu_source.count("_cpp.function(") == 1, c.cpu_source


# Extern ops whose result on the CPU is laid out otherwise than their meta kernel
# says, each read by a kernel (Note [Extern layouts] in passes/extern_layouts.py),
# and a matmul, whose layout is the same everywhere (no check)
EXTERN_RESULTS = {
    # transposed on meta, contiguous on the CPU
    "isin": ("torch.isin(x.t(), x[0, :3]) * x.t()", (6, 9)),
    # channels first on meta, as the input's on the CPU (a batch norm whose
    # statistics are read stays whole; otherwise it decomposes into kernels)
    "batch_norm": (
        "torch.native_batch_norm(x.transpose(-2, -1), None, None, None, None, "
        "True, 0.1, 1e-5)[0] + torch.native_batch_norm(x.transpose(-2, -1), None, "
        "None, None, None, True, 0.1, 1e-5)[1].mean()",
        (3, 2, 4, 3),
    ),
    "matmul": ("(x @ x.t()).relu()", (6, 9)),
}


@pytest.fixture(scope="module")
def extern_results(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Compiled]:
    lines = ["import torch", ""]
    for name, (expr, _) in EXTERN_RESULTS.items():
        lines += ["", f"def {name}(x):", f"    return {expr}", ""]
    inputs = {
        name: {"x": torch.empty(shape)} for name, (_, shape) in EXTERN_RESULTS.items()
    }
    root = tmp_path_factory.mktemp("extern_results")
    return compile_source("\n".join(lines), inputs, root)


@pytest.mark.parametrize("name", EXTERN_RESULTS)
def test_kernels_read_extern_results_by_their_traced_layout(
    name: str, extern_results: dict[str, Compiled]
) -> None:
    """An extern result that a kernel reads has its traced strides at run time:
    the wrapper copies it into them where the op laid it out otherwise."""
    c = extern_results[name]
    shape = EXTERN_RESULTS[name][1]
    checked = "runtime_shim.as_layout(" in c.cpu_source
    assert checked == (name != "matmul"), c.cpu_source
    c.check({"x": torch.randn(shape, generator=torch.Generator().manual_seed(0))})
