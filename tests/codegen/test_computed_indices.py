"""Pads, interpolations and adaptive pools as gathers at positions kernels compute.

Reflect, replicate and circular pads of 1 to 3 dimensions (batched and not,
cropping ones too), linear, bilinear, trilinear and bicubic interpolation (with
and without `align_corners`, up and down, by sizes and by scales), nearest
interpolation by factors that are not whole numbers and adaptive average pools
whose windows differ in length, each followed by a pointwise op, are
compared with eager on both backends, in f32, f64 and bf16. Each is one kernel
launch that reads only the input: the source positions are computed where the
gather reads them (Note [Positions as indices] in passes/schedule.py), never
written, never checked at run time, and no call into PyTorch remains (Note [Pads
and interpolation as gathers] in passes/decompose.py).
"""

from __future__ import annotations

import re

import pytest
import torch

from tests.compile_helpers import compile_source
from tests.devices import REAL_GPU

# (expression over x, shape of x)
CASES = [
    ('F.pad(x, (2, 3), mode="reflect") * 2', (2, 3, 9)),
    ('F.pad(x, (2, 3, 1, 2), mode="reflect").relu()', (2, 3, 8, 9)),
    ('F.pad(x, (3, 3, 7, 0), mode="reflect") + 1', (3, 8, 4)),  # unbatched, n - 1
    ('F.pad(x, (1, 0, 2, 1, 1, 1), mode="reflect") - x.mean()', (1, 2, 3, 4, 5)),
    ('F.pad(x, (-1, 2, 2, -2), mode="reflect").exp()', (2, 2, 6, 7)),  # crops
    ('F.pad(x, (4, 1), mode="replicate").sigmoid()', (2, 3, 5)),
    ('F.pad(x, (2, 3, 9, 1), mode="replicate") * x.sum()', (1, 2, 4, 3)),
    ('F.pad(x, (1, 2, 0, 1, 3, 0), mode="replicate")', (2, 1, 2, 3, 4)),
    ('F.pad(x, (0, -2, -1, 3), mode="replicate") / 3', (2, 5, 6)),
    ('F.interpolate(x, scale_factor=2, mode="linear") + 1', (2, 3, 7)),
    ('F.interpolate(x, size=5, mode="linear", align_corners=True)', (2, 3, 7)),
    ('F.interpolate(x, scale_factor=2, mode="bilinear").relu()', (2, 3, 8, 9)),
    (
        "F.interpolate(x, size=(11, 7), mode='bilinear', align_corners=True)",
        (1, 2, 8, 9),
    ),
    ("F.interpolate(x, scale_factor=1.5, mode='bilinear') * 2", (2, 2, 5, 6)),
    ("F.interpolate(x, scale_factor=0.6, mode='bilinear')", (2, 2, 10, 11)),
    ("F.interpolate(x, size=(3, 4, 5), mode='trilinear')", (1, 2, 4, 3, 6)),
    ("F.interpolate(x, scale_factor=2, mode='bicubic') - 1", (1, 2, 5, 6)),
    ("F.interpolate(x, size=(9, 4), mode='bicubic', align_corners=True)", (2, 1, 5, 6)),
    ("F.interpolate(x, size=(11, 5), mode='nearest') + x.amax()", (2, 3, 8, 9)),
    ("F.interpolate(x, scale_factor=1.7, mode='nearest')", (1, 2, 5, 6)),
    ("F.interpolate(x, size=(12, 7), mode='nearest-exact')", (1, 2, 5, 6)),
    ("F.interpolate(x, size=13, mode='nearest') * 3", (2, 3, 5)),
    # adaptive average pools whose windows differ in length
    ("F.adaptive_avg_pool2d(x, (5, 3)) * 2", (2, 3, 12, 7)),
    ("F.adaptive_avg_pool2d(x, 5)", (1, 4, 7, 9)),
    ("F.adaptive_avg_pool1d(x, 4).relu()", (2, 3, 10)),
    ("F.adaptive_avg_pool3d(x, (2, 3, 2))", (1, 2, 3, 5, 5)),
    # circular pads: positions wrapped around (`p mod n`)
    ('F.pad(x, (4, 1), mode="circular") * 2', (2, 3, 5)),
    ('F.pad(x, (2, 3, 1, 2), mode="circular").relu()', (2, 3, 8, 9)),
    ('F.pad(x, (5, 5), mode="circular") + 1', (3, 5)),  # unbatched, all of n
    ('F.pad(x, (1, 0, 2, 1, 1, 1), mode="circular") - x.mean()', (1, 2, 3, 4, 5)),
    ('F.pad(x, (-1, 2, 3, -2), mode="circular").exp()', (2, 2, 6, 7)),  # crops
]
DTYPES = (torch.float32, torch.float64, torch.bfloat16)


def _name(i: int, dtype: torch.dtype) -> str:
    return f"case_{i}_{str(dtype).split('.')[1]}"


def source() -> str:
    lines = ["import torch", "import torch.nn.functional as F", ""]
    for i, (expr, _) in enumerate(CASES):
        for dtype in DTYPES:
            lines += [f"def {_name(i, dtype)}(x):", f"    return {expr}", ""]
    return "\n".join(lines)


def inputs(i: int, dtype: torch.dtype) -> dict:
    shape = CASES[i][1]
    n = 1
    for s in shape:
        n *= s
    # distinct values, each position's own: a wrong source position shows
    x = torch.linspace(-3, 4, n, dtype=torch.float64).view(shape)
    return {"x": (x.sin() * 2 + x).to(dtype)}


PARAMS = [(i, dtype) for i in range(len(CASES)) for dtype in DTYPES]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    functions = {_name(i, d): inputs(i, d) for i, d in PARAMS}
    return compile_source(source(), functions, tmp_path_factory.mktemp("indices"))


@pytest.mark.parametrize(("i", "dtype"), PARAMS, ids=[_name(i, d) for i, d in PARAMS])
def test_pads_and_interpolations_in_one_kernel(compiled, i, dtype) -> None:
    case = compiled[_name(i, dtype)]
    case.check(inputs(i, dtype))
    for side, launch in (
        (case.cpu_source, "_cpp.function("),
        (case.cuda_source, "_triton.triton_"),
    ):
        assert "torch.ops.aten" not in side, side  # no call, no run-time check
        assert launch in side, side
    # the pad or interpolation is one kernel reading x alone (a mean, sum or max
    # of x beside it is a reduction kernel of its own)
    expr = CASES[i][0]
    extra = any(f in expr for f in ("mean()", "sum()", "amax()"))
    launches = case.cuda_source.count("_triton.triton_")
    assert launches == 1 + extra, case.cuda_source


def test_positions_are_computed_not_loaded(compiled) -> None:
    """The bilinear kernel's only loads are of x, at computed positions; nothing
    masks them beyond the kernel's own range."""
    text = compiled[_name(11, torch.float32)].triton_text
    kernel = text[text.index("def triton_fused_upsample_bilinear2d") :]
    kernel = kernel[: kernel.index("\n\n\n")]
    loads = re.findall(r"tl\.load\((\w+)_ptr .*?, (\w+)", kernel)
    assert loads and all(ptr == "x" and mask == "xmask" for ptr, mask in loads), kernel


def test_loads_at_computed_positions_are_masked_past_the_last_row(positions) -> None:
    """Where a block overhangs the kernel's rows (`xmask` defined), its lanes past
    the last row compute positions too, and those address anything (a reflect
    pad's row -7): every load is masked there, those at positions known in
    range included. On a GPU an unmasked one read unmapped memory."""
    case = positions["reflected"]
    case.check({"x": torch.arange(49.0).view(1, 7, 7)})
    kernels = case.triton_text.split("@triton.jit\n")[1:]
    overhanging = [k for k in kernels if "xmask = " in k]
    assert overhanging, case.triton_text
    for kernel in overhanging:
        loads = [_call(kernel, at) for at in _starts(kernel, "tl.load(")]
        varying = [load for load in loads if re.search(r"xindex|tmp\d", load)]
        assert varying, kernel  # (one address for all, `mean_ptr + 0`: there)
        assert all("mask" in load or "!= 0" in load for load in varying), kernel


def _starts(text: str, what: str) -> list[int]:
    return [m.start() for m in re.finditer(re.escape(what), text)]


def _call(text: str, at: int) -> str:
    """The call starting at `at`, to its closing parenthesis."""
    depth = 0
    for i in range(text.index("(", at), len(text)):
        depth += {"(": 1, ")": -1}.get(text[i], 0)
        if depth == 0:
            return text[at : i + 1]
    raise AssertionError(text[at:])


@pytest.mark.parametrize("i", [1, 7])  # a reflect pad and a replicate pad
def test_cpp_pads_read_runs_of_columns(compiled, i) -> None:
    """The C++ pad's inner loop is split into runs where the source column is
    affine in x1, each loaded at that expression, not at a computed index
    (Note [Positions along the inner loop] in codegen/cpp.py)."""
    case = compiled[_name(i, torch.float32)]
    name = re.search(r'_cpp\.function\("(\w+)"', case.cpu_source).group(1)
    kernel = case.cpp_text[case.cpp_text.index(f"void {name}(") :]
    kernel = kernel[: kernel.index("\n}\n")]
    loads = re.findall(r"x_ptr\[([^\]]*)\]", kernel)
    assert loads and kernel.count("for (int64_t x1 =") == 3, kernel
    assert not any(re.search(r"tmp\d+\]?$", a.split("+")[-1].strip()) for a in loads)
    assert any(re.search(r"\+ x1 - \d+$", a) for a in loads), kernel


POSITIONS = """
import torch


def shifted(x):
    # positions 2..5 of 8, known when the program is built
    return x[:, torch.arange(4) + 2] * 2


def beyond(x):
    # positions 6..9 of 8: checked at run time, raising as eager raises
    return x[:, torch.arange(4) + 6] * 2


def reflected(x):
    # positions known in range in the kernel's 130 rows, not past them
    return torch.nn.functional.pad(x, (2, 1, 6, 0), mode="reflect")
"""


@pytest.fixture(scope="module")
def positions(tmp_path_factory):
    x = {"x": torch.arange(24.0).view(3, 8)}
    functions = {"shifted": x, "beyond": x, "reflected": {"x": torch.randn(1, 7, 7)}}
    return compile_source(POSITIONS, functions, tmp_path_factory.mktemp("positions"))


def test_positions_known_in_range_are_not_checked(positions) -> None:
    """A gather by `arange(4) + 2` into 8 columns: its positions are evaluated when
    the program is built (ir/positions.py), so no check runs and nothing masks
    the load; one kernel computes them and gathers."""
    case = positions["shifted"]
    case.check({"x": torch.arange(24.0).view(3, 8)})
    for side in (case.cpu_source, case.cuda_source):
        assert "check_index" not in side and "torch.ops.aten" not in side, side
    text = case.triton_text
    kernel = text[text.index("def triton_fused") :]
    assert "tl.load(x_ptr" in kernel and ", xmask)" in kernel, kernel


def test_positions_out_of_range_raise(positions) -> None:
    case = positions["beyond"]
    x = torch.arange(24.0).view(3, 8)
    with pytest.raises(IndexError):
        case.eager(x)
    assert "check_index" in case.cpu_source and "check_index" in case.cuda_source
    # on a GPU the check is a device-side assert, as eager's is: it ends the
    # process's CUDA context, so there the Triton variant is not called here
    variants = (case.cpu,) if REAL_GPU else (case.cpu, case.cuda)
    for variant in variants:
        with pytest.raises(IndexError):
            variant(x.clone())
