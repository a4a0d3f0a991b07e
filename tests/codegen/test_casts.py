"""A cast to a narrower type rounds (or truncates, or wraps) exactly as eager's does,
wherever it sits in a fused chain.

Kernels compute f16/bf16 in f32, so `x.to(torch.bfloat16).float()` is a cast whose
computed dtype does not change: it must still round, by an explicit conversion in the
kernel (Note [Rounding casts] in passes/schedule.py). Every (from, to) pair of the
supported dtypes is cast as the last op, in the middle of a chain (cast back), with
the rounding error computed in the kernel, and feeding a reduction; the values tell
rounding apart (1 + 2**-10, ties, integers past a float's mantissa, values past
int32, out of f16's range, NaN and ±inf into bool). All compared exactly with eager
on both backends, inputs unchanged after the call.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass

import pytest
import torch

from tests.compile_helpers import Compiled, compile_source
from transpiler.ir.ops import SUPPORTED_DTYPES

pytestmark = [
    pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning"),
    pytest.mark.usefixtures("gpu_bf16_rounding"),  # see tests/codegen/conftest.py
]

INF, NAN = math.inf, math.nan
FLOATS = (
    1 + 2**-10,  # not in f16's or bf16's mantissa
    1 + 2**-8 + 2**-9,  # rounds up in bf16 (truncation would not)
    1 + 2**-7 + 2**-8,  # a tie in bf16: to even
    -2.7,
    3.5,
    -3.5,
    0.1,
    65504.0,  # f16's largest
    7e4,  # past it: inf in f16
    1e-8,  # below f16's smallest subnormal
    2.0**24 + 1,  # not in f32's mantissa
    1e39,  # past f32's range: inf
    -0.0,
    0.0,
    NAN,
    INF,
    -INF,
    # int64's halves (Note [Conversions of int64] in codegen/cpp.py)
    2.0**32 + 0.5,
    -(2.0**32) - 0.5,
    -(2.0**62) * 1.5,
    9.2233715e18,  # f32's largest below 2^63
    -(2.0**63),
)
INTS = (0, 1, -1, 7, -7, 257, 2049, 2**24 + 1, 2**31 - 1, -(2**31), 2**32 + 5)
INTS += (-(2**31) - 1, 2**40 + 1, 2**53 + 1)  # past int32; past f32's and f64's
# mantissa; f32's ties (to even), and a tie only after rounding to f64 first
INTS += (2**25 + 2, 2**25 + 6, 2**53 + 2**29 + 1, -(2**53 + 2**29 + 1))
INTS += (2**63 - 1, -(2**63), -(2**32) + 3)


def source_values(src: torch.dtype, dst: torch.dtype) -> torch.Tensor:
    """Values of `src` to cast to `dst`; float to int only where torch defines it
    (finite and in range)."""
    if src == torch.bool:
        return torch.tensor([False, True])
    if not src.is_floating_point:
        info = torch.iinfo(src)
        return torch.tensor([v for v in INTS if info.min <= v <= info.max], dtype=src)
    x = torch.tensor(FLOATS, dtype=torch.float64).to(src)
    if dst.is_floating_point or dst == torch.bool:
        return x
    limit = 2.0 ** (torch.iinfo(dst).bits - 1)
    return x[x.isfinite() & (x.abs() < limit)]


# where the cast sits: `{t}` the target dtype
POSITIONS = {
    "last": "x.to({t})",
    "middle": "x.to({t}).float()",
    "error": "x.to({t}).to(torch.float64) - x.to(torch.float64)",
    "reduced": "x.to({t}).float().sum(-1)",
}


@dataclass(frozen=True)
class Case:
    name: str
    expr: str
    x: torch.Tensor


def _short(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _cases() -> list[Case]:
    out = []
    for src, dst in itertools.product(SUPPORTED_DTYPES, SUPPORTED_DTYPES):
        if src == dst:
            continue
        x = source_values(src, dst)
        for position, text in POSITIONS.items():
            name = f"{position}_{_short(src)}_to_{_short(dst)}"
            value = _summable(x) if position == "reduced" else x
            out.append(Case(name, text.format(t=dst), value))
    return out


def _summable(x: torch.Tensor) -> torch.Tensor:
    """Two rows of the values small enough that their sum still shows how each
    was rounded."""
    if x.dtype != torch.bool:
        x = x[x.double().abs() < 1e4]  # not NaN, not inf
    return x.reshape(1, -1).repeat(2, 1)


CASES = _cases()


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Compiled]:
    lines = ["import torch", ""]
    for c in CASES:
        lines += ["", f"def {c.name}(x):", f"    return {c.expr}"]
    functions = {c.name: {"x": c.x} for c in CASES}
    root = tmp_path_factory.mktemp("casts")
    return compile_source("\n".join(lines) + "\n", functions, root)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_cast_matches_eager(case: Case, compiled: dict[str, Compiled]) -> None:
    c = compiled[case.name]
    for text in (c.cpu_source, c.cuda_source):
        assert "torch.ops.aten._to_copy" not in text, text  # in a kernel
    want = c.eager(case.x)
    # a sum adds in its own order
    rtol = 1e-6 if case.name.startswith("reduced") else 0.0
    for backend, fn in (("cpu", c.cpu), ("triton", c.cuda)):
        x = case.x.clone()
        got = fn(x)
        where = f"{case.name} ({backend}): {case.expr}"
        assert (got.dtype, got.shape) == (want.dtype, want.shape), where
        torch.testing.assert_close(
            got,
            want,
            rtol=rtol,
            atol=0,
            equal_nan=True,
            msg=lambda m, w=where: f"{w}\n{m}",
        )
        torch.testing.assert_close(x, case.x, rtol=0, atol=0, equal_nan=True)


@pytest.mark.parametrize(
    "dtype, triton, cpp",
    [
        (
            "bfloat16",
            ".to(tl.bfloat16).to(tl.float32)",
            "bf16_to_float(float_to_bf16(",
        ),
        (
            "float16",
            ".to(tl.float16).to(tl.float32)",
            "static_cast<float>(static_cast<_Float16>(",
        ),
    ],
)
def test_rounding_is_written_out(
    dtype: str, triton: str, cpp: str, compiled: dict[str, Compiled]
) -> None:
    """`x.to(half).float()`: one kernel, rounding in the middle of it."""
    c = compiled[f"middle_float32_to_{dtype}"]
    (name,) = re.findall(r"_triton\.(triton_\w+)\[", c.cuda_source)
    assert triton in _kernel(c.triton_text, f"def {name}(")
    (name,) = re.findall(r'_cpp\.function\("(cpp_\w+)"', c.cpu_source)
    assert cpp in _kernel(c.cpp_text, f"void {name}(")


def _kernel(text: str, head: str) -> str:
    """One kernel's source out of a generated file: from its head to the next
    blank line."""
    start = text.index(head)
    return text[start : text.find("\n\n", start)]


DECOMPOSED = """
import torch
import torch.nn.functional as F


def silu_mul(g, up):
    return F.silu(g) * up


def softmax_mul(x, y):
    return torch.softmax(x, -1) * y
"""


def test_an_ops_own_cast_rounds_where_it_is_stored(tmp_path) -> None:
    """`F.silu(g) * up` in bf16: silu's decomposition computes in f32 and casts
    its result to bf16; in a fused kernel that cast does not round, as no op's
    result does before it is stored (Note [Rounding casts]). The kernel's result
    is then eager's computed in f32 and rounded once, where eager itself rounds
    twice: the two differ in many elements, so the comparison tells them apart."""
    torch.manual_seed(0)
    a = torch.randn(64, 64, dtype=torch.bfloat16) * 3
    b = torch.randn(64, 64, dtype=torch.bfloat16)
    inputs = {"silu_mul": {"g": a, "up": b}, "softmax_mul": {"x": a, "y": b}}
    compiled = compile_source(DECOMPOSED, inputs, tmp_path)
    for name, (x, y) in (("silu_mul", (a, b)), ("softmax_mul", (a, b))):
        c = compiled[name]
        once = c.eager(x.float(), y.float()).to(torch.bfloat16)
        twice = c.eager(x, y)
        assert (once != twice).float().mean() > 0.01, name  # the case discriminates
        for backend, fn in (("cpu", c.cpu), ("triton", c.cuda)):
            xs, ys = x.clone(), y.clone()
            got = fn(xs, ys)
            # kernels' exp is not eager's to the last bit: a rare f32 result on a
            # bf16 rounding boundary may round the other way
            differ = (got != once).float().mean().item()
            assert differ < 0.002, (name, backend, differ)
            torch.testing.assert_close(got, twice, rtol=2**-7, atol=2**-7)
            assert torch.equal(xs, x) and torch.equal(ys, y)


SPELLINGS = """
import torch


def to_dtype(x, y):
    return x.to(torch.bfloat16).float() * y


def to_keyword(x, y):
    return x.to(dtype=torch.bfloat16).float() * y


def bfloat16_method(x, y):
    return x.bfloat16().float() * y


def type_method(x, y):
    return x.type(torch.bfloat16).float() * y


def to_other(x, y):
    return x.to(y.bfloat16()).float() * y


def type_as(x, y):
    return x.type_as(y.bfloat16()).float() * y
"""


def test_every_spelling_of_a_programs_own_cast_rounds(tmp_path) -> None:
    """However the program writes its cast to bf16, the kernel rounds there: the
    result equals eager's bit for bit on values that bf16 cannot hold."""
    x = torch.tensor([1 + 2**-8 + 2**-9, 1 + 2**-7 + 2**-8, 0.1, -2.7, 3.3e38])
    y = torch.full_like(x, 3.0)
    names = re.findall(r"^def (\w+)", SPELLINGS, re.M)
    compiled = compile_source(SPELLINGS, {n: {"x": x, "y": y} for n in names}, tmp_path)
    for name in names:
        c = compiled[name]
        want = c.eager(x, y)
        assert not torch.equal(want, x * y), name  # the cast rounds in eager
        for fn in (c.cpu, c.cuda):
            torch.testing.assert_close(fn(x.clone(), y.clone()), want, rtol=0, atol=0)


ROUND_TRIP = """
import torch


def round_trip(x):
    return x.to(torch.float32).double() - x
"""


@pytest.mark.parametrize("n", [5, 6, 7, 22, 131])
def test_doubles_rounded_to_float_at_every_length(tmp_path, n: int) -> None:
    """`x.to(torch.float32).double() - x` over n doubles, each of them rounded:
    GCC 12 left the last two unrounded at lengths 4k + 2 and 4k + 3 (Note
    [Doubles to float] in codegen/cpp.py)."""
    x = torch.full((n,), 0.1, dtype=torch.float64)
    x[-1] = 9.2233715e18
    compiled = compile_source(ROUND_TRIP, {"round_trip": {"x": x}}, tmp_path)
    c = compiled["round_trip"]
    want = c.eager(x)
    assert bool((want != 0).all())  # every element tells rounding from none
    assert "torch.ops" not in c.cpu_source  # all in the kernel
    for backend, fn in (("cpu", c.cpu), ("triton", c.cuda)):
        xs = x.clone()
        assert torch.equal(fn(xs), want), backend
        assert torch.equal(xs, x)


INT64_CONVERSIONS = """
import torch


def int64_to_float(v):
    return v.float(), v.double()


def float_to_int64(x, y):
    return x.long(), y.long()
"""


def _int64s(n: int, g: torch.Generator) -> torch.Tensor:
    """int64s of every magnitude: random bits shifted right by 0..62, so each
    power of two has as many, and near ties of float (bits past its mantissa)."""
    bits = torch.randint(-(2**63), 2**63 - 1, (n,), generator=g, dtype=torch.int64)
    shifts = torch.randint(0, 63, (n,), generator=g, dtype=torch.int64)
    v = bits >> shifts
    v[:4] = torch.tensor([-(2**63), 2**63 - 1, 2**53 + 2**29 + 1, 2**36 + 1])
    v[4:8] = -v[:4].clamp(min=-(2**63) + 1)
    return v


def test_int64_conversions_of_every_magnitude(tmp_path) -> None:
    """int64 to float and double and back (Note [Conversions of int64] in
    codegen/cpp.py), exactly as eager over 2^18 values of every magnitude: each
    rounded to nearest (ties to even, in one rounding), each float truncated."""
    g = torch.Generator().manual_seed(0)
    n = 1 << 18
    v = _int64s(n, g)
    x = torch.randn(n, generator=g) * torch.exp2(
        torch.randint(0, 63, (n,), generator=g)
    )
    y = x.double() * (1 + torch.rand(n, generator=g, dtype=torch.float64))
    y = y.clamp(-(2.0**63), 2.0**63 - 1024)  # in int64: torch defines no other
    compiled = compile_source(
        INT64_CONVERSIONS,
        {"int64_to_float": {"v": v}, "float_to_int64": {"x": x, "y": y}},
        tmp_path,
    )
    for name, args in (("int64_to_float", (v,)), ("float_to_int64", (x, y))):
        c = compiled[name]
        assert "i64" in c.cpp_text.split('extern "C"', 1)[1]
        assert "torch.ops" not in c.cpu_source  # all in the kernel
        want = c.eager(*args)
        cloned = [a.clone() for a in args]
        got = c.cpu(*cloned)
        for w, r in zip(want, got):
            assert torch.equal(w, r), (name, (w != r).nonzero()[:5])
        assert all(torch.equal(a, b) for a, b in zip(cloned, args))  # inputs kept


def test_bf16_rounding_of_every_exponent(tmp_path) -> None:
    """float to bf16 in a C++ kernel, bit for bit as eager over 2^18 random float
    bit patterns of every exponent (subnormals, values that round up into the
    next binade or to inf, ties) and NaNs of every payload and sign, which stay
    NaN (eager's vectorized and scalar conversions give NaNs of different bits)."""
    g = torch.Generator().manual_seed(0)
    bits = torch.randint(-(2**31), 2**31 - 1, (1 << 18,), generator=g)
    bits[:1024] = (bits[:1024] & ~0xFFFF) | 0x8000  # ties
    bits[1024:2048] |= 0x7FFF  # just below a tie, or past it after the carry
    x = bits.to(torch.int32).view(torch.float32)
    c = compile_source(
        "import torch\n\n\ndef to_bf16(x):\n    return (x * 2).bfloat16()\n",
        {"to_bf16": {"x": x}},
        tmp_path,
    )["to_bf16"]
    assert "float_to_bf16(" in c.cpp_text and "torch.ops" not in c.cpu_source
    want, got = c.eager(x), c.cpu(x.clone())
    nan = want.isnan()
    assert torch.equal(got.isnan(), nan)
    assert torch.equal(got[~nan].view(torch.int16), want[~nan].view(torch.int16))
