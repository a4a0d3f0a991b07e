"""runtime_shim.libdevice: Triton's libdevice when kernels are compiled, NumPy
stand-ins in Triton's CPU interpreter, with C's values at the edges and libdevice's
signatures (one float dtype, float32 or float64). On a GPU the generated kernels'
calls are checked by tests/codegen/test_op_cases.py (benchmarks/gpu_tests.sh)."""

from __future__ import annotations

import math

import pytest
import torch

from runtime_shim import libdevice

triton = pytest.importorskip("triton")
tl = pytest.importorskip("triton.language")

pytestmark = pytest.mark.skipif(
    not libdevice.interpreting(), reason="the stand-ins serve Triton's interpreter"
)

LIBDEVICE = libdevice.load()
EDGES = [math.nan, math.inf, -math.inf, 0.0, -0.0, 1.5, -2.0, 7.0, -1e30, 3.0]


def edge_pairs(dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    a = torch.tensor([x for x in EDGES for _ in EDGES], dtype=dtype)
    b = torch.tensor([y for _ in EDGES for y in EDGES], dtype=dtype)
    return a, b


@triton.jit
def _binary(a_ptr, b_ptr, out_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    mask = i < n
    a = tl.load(a_ptr + i, mask, other=1)
    b = tl.load(b_ptr + i, mask, other=1)
    if OP == "pow":
        y = LIBDEVICE.pow(a, b)
    elif OP == "atan2":
        y = LIBDEVICE.atan2(a, b)
    elif OP == "copysign":
        y = LIBDEVICE.copysign(a, b)
    else:
        y = LIBDEVICE.fmod(a, b)
    tl.store(out_ptr + i, y, mask)


@triton.jit
def _unary(a_ptr, out_ptr, n, OP: tl.constexpr, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    mask = i < n
    a = tl.load(a_ptr + i, mask, other=1)
    if OP == "signbit":
        y = LIBDEVICE.signbit(a) != 0
    elif OP == "log1p":
        y = LIBDEVICE.log1p(a)
    elif OP == "expm1":
        y = LIBDEVICE.expm1(a)
    else:
        y = LIBDEVICE.lgamma(a)
    tl.store(out_ptr + i, y, mask)


@triton.jit
def _scalar_operand(a_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    mask = i < n
    a = tl.load(a_ptr + i, mask, other=1)
    tl.store(out_ptr + i, LIBDEVICE.pow(tl.full([], 2.0, a.dtype), a), mask)


@triton.jit
def _mixed(a_ptr, out_ptr, n, BLOCK: tl.constexpr):
    i = tl.arange(0, BLOCK)
    mask = i < n
    a = tl.load(a_ptr + i, mask, other=1)
    tl.store(out_ptr + i, LIBDEVICE.fmod(a, a.to(tl.float64)), mask)


EAGER = {
    "pow": torch.pow,
    "atan2": torch.atan2,
    "copysign": torch.copysign,
    "fmod": torch.fmod,
}


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("op", EAGER)
def test_binary_stand_ins_give_eagers_values(op: str, dtype: torch.dtype) -> None:
    a, b = edge_pairs(dtype)
    out = torch.empty_like(a)
    _binary[(1,)](a, b, out, a.numel(), OP=op, BLOCK=128)
    want = EAGER[op](a, b)
    torch.testing.assert_close(out, want, equal_nan=True, rtol=1e-6, atol=0)
    zero = want == 0
    assert torch.equal(out[zero].signbit(), want[zero].signbit()), op


def test_signbit_and_lgamma() -> None:
    a = torch.tensor(EDGES + [-1.0, -2.5, 0.5, 1.0, 2.0, 1e38])
    out = torch.empty_like(a, dtype=torch.bool)
    _unary[(1,)](a, out, a.numel(), OP="signbit", BLOCK=16)
    assert torch.equal(out, a.signbit())
    out = torch.empty_like(a)
    _unary[(1,)](a, out, a.numel(), OP="lgamma", BLOCK=16)
    torch.testing.assert_close(out, torch.lgamma(a), equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("op", ["log1p", "expm1"])
def test_log1p_and_expm1_near_zero_and_at_the_edges(op: str, dtype) -> None:
    """Where `log(1 + x)` and `exp(x) - 1` lose every digit (|x| below eps),
    the stand-ins keep them, as eager and CUDA's libdevice do."""
    tiny = [1e-30, -1e-30, 1e-10, -1e-10, 1e-7, -1e-7, 1e-3, -0.5, 50.0, -1.0]
    a = torch.tensor(EDGES + tiny, dtype=dtype)
    out = torch.empty_like(a)
    _unary[(1,)](a, out, a.numel(), OP=op, BLOCK=32)
    want = getattr(torch, op)(a)
    torch.testing.assert_close(out, want, equal_nan=True, rtol=1e-6, atol=0)


def test_a_zero_dimensional_operand_broadcasts() -> None:
    a = torch.tensor([3.0, -1.0, 0.5])
    out = torch.empty_like(a)
    _scalar_operand[(1,)](a, out, 3, BLOCK=4)
    torch.testing.assert_close(out, torch.pow(2.0, a))


def test_operands_of_two_dtypes_are_refused_as_libdevice_refuses_them() -> None:
    a = torch.tensor([3.0, -1.0])
    with pytest.raises(Exception, match="float32 or of float64"):
        _mixed[(1,)](a, torch.empty_like(a), 2, BLOCK=2)
