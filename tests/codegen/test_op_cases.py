"""Every lowered op, compiled through both backends and compared with eager.

One `Case` row per use: each key of `ir.ops.POINTWISE` and `ir.ops.REDUCTIONS` needs at
least one row (a test checks), so adding an op means adding a row here. All rows are
functions of one source file, built in one run: one C++ compile for the whole table.
Each case checks that the op became kernel code (no `torch.ops.aten.<op>` extern call
in the generated variant) and that the C++ and the Triton (interpreter) variants give
eager's values: float32 at ~1e-5, reductions a little looser, bf16 at 2e-2 against a
float32 reference computed from the same bf16 inputs. Ops whose zeros carry a sign
torch defines (`SIGNED_ZEROS`) must give those signs too. Ops without a row that
decompose into kernel ops have cases of their own (`DECOMPOSED_CASES`).
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field, replace
from pathlib import Path

import pytest
import torch

from tests.compile_helpers import Compiled, assert_same, compile_source
from transpiler.ir.graph import Graph
from transpiler.ir.ops import POINTWISE, REDUCTIONS

pytestmark = [  # masked-off lanes of Triton's interpreter compute log(0) and such
    pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning"),
]

F32_TOL = (1e-5, 1e-6)
RED_TOL = (1e-4, 1e-5)
BF16_TOL = (2e-2, 2e-2)

_gen = torch.Generator().manual_seed(0)


def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    return torch.randn(*shape, generator=_gen).to(dtype)


def positive(*shape: int) -> torch.Tensor:
    return torch.rand(*shape, generator=_gen) + 0.1


def ints(*shape: int, dtype: torch.dtype = torch.int64) -> torch.Tensor:
    return torch.randint(-5, 6, shape, generator=_gen).to(dtype)


def bools(*shape: int) -> torch.Tensor:
    return torch.rand(*shape, generator=_gen) > 0.5


# Special values: every pairing of NaN, ±inf, ±0 and ordinary numbers, both ways.
SPECIAL = [float("nan"), float("inf"), float("-inf"), 0.0, -0.0, 1.5, -2.0]
EDGE_A = torch.tensor([a for a in SPECIAL for _ in SPECIAL]).reshape(7, 7)
EDGE_B = torch.tensor([b for _ in SPECIAL for b in SPECIAL]).reshape(7, 7)
# Where GELU's fit ends (5.5) and beyond; not ±inf, which eager's float GELU makes NaN.
GELU_EDGES = torch.tensor(
    [float("nan"), 0.0, -0.0, 5.49, 5.5, 5.51, -5.49, -5.5, -5.51, 40.0, -40.0, 1e30]
)
ZEROS_DIV = torch.tensor([[1.0, -1.0, 0.0, 0.0, 3.0], [2.0, 0.0, -0.0, 5.0, 0.0]])
ZEROS_DEN = torch.tensor([[0.0, 0.0, 0.0, -0.0, 2.0], [-0.0, 4.0, 0.0, 0.0, -3.0]])
EDGES = {"a": EDGE_A, "b": EDGE_B}
SIGNED_INTS = {"a": torch.arange(-10, 11).view(3, 7)}  # both signs, multiples or not
# halves and their neighbours, both signs, and floats too large to have a fraction
HALVES = torch.tensor(
    [0.5, 1.5, 2.5, -0.5, -1.5, -2.5, 0.49999997, -0.49999997, 0.3, -0.3, -0.7]
    + [2.0**23 + 1, -(2.0**23) - 1, 2.0**24 + 2, 1e30]
)
ERFC_TAIL = torch.tensor([0.4, 0.6, 1.0, 2.5, 4.0, 6.0, 9.0, 9.9, -3.0, -0.6])
POW_EDGES = {
    "a": torch.tensor(
        [-2.0, -2.0, -2.0, -0.5, 0.0, -0.0, -0.0, 0.0, -1.0, -1.0, 1.0]
    ).repeat(2),
    "b": torch.tensor(
        [3.0, 2.0, 0.5, -3.0, 0.0, 3.0, -3.0, -2.0, 1e30, -1e30, 7.0]
    ).repeat(2)
    * torch.tensor([1.0] * 11 + [-1.0] * 11),
}
HUGE = {
    "a": torch.tensor([3e30, -1e-30, 0.0, 1e38]),
    "b": torch.tensor([4e30, 2e-30, 0.0, 1e38]),
}
# every sign of dividend and divisor, exact multiples, quotients near a half
SIGNS = {
    "a": torch.tensor([7.0, -7.0, 7.0, -7.0, 6.0, -6.0, 0.0, -0.0, 1e30, 5.5, -0.1]),
    "b": torch.tensor([2.0, 2.0, -2.0, -2.0, 3.0, -3.0, -3.0, 3.0, 3.0, 1e-30, 0.2]),
}
INEXACT = {
    "a": torch.tensor([1.0, 1.0, 7.0, 3.0, -1.0, 0.3, 2.0, 1.0, -7.0, 0.7]),
    "b": torch.tensor([0.1, 0.2, 0.7, 0.3, 0.1, 0.1, 0.4, -0.1, 0.7, 0.1]),
}
NONZERO = torch.tensor([1, -1, 2, -2, 3, -3, 7, -5] * 4 + [4])
# integer powers: negative exponents (1, -1 and 0 for the other bases, 0 ** -1
# too), zero exponents, powers that wrap around
INT_POWERS = {
    "a": torch.tensor([0, 0, 1, -1, -1, 2, -2, 3, 0, 7, -3, 2, 5, -7]),
    "b": torch.tensor([-1, -2, -5, -3, -4, -1, -2, 40, 0, 0, 63, 62, 31, 23]),
}
# inverse trigonometric and hyperbolic functions: their domains' ends and beyond
UNIT = torch.tensor(
    [1.0, -1.0, 0.0, -0.0, 0.5, -0.5, 0.999, -0.999, 1e-30, -1e-30, 1.5, -1.5]
    + [float("nan"), float("inf"), float("-inf")]
)
WIDE = torch.tensor(
    [0.0, -0.0, 1e-30, -1e-30, 0.3, -0.3, 1.0, 2.5, -2.5, 20.0, -20.0, 88.0, 100.0]
    + [-100.0, float("nan"), float("inf"), float("-inf")]
)
# lgamma: its zeros (1, 2), poles (0, negative integers), negative non-integers
GAMMA = torch.tensor(
    [1.0, 2.0, 0.0, -0.0, -1.0, -2.0, 0.5, 1.5, 3.7, 1e-3, 30.0, 1e30, -0.5, -1.5]
    + [-2.5, float("nan"), float("inf"), float("-inf")]
)
# shift counts: negative, within the width and past it, for int32 and int64
SHIFTS = {
    "a": torch.tensor([5, -5, 1, -1, 3, -7, 2**40 + 3, -(2**40), 9, -9, 6, -6] * 2),
    "b": torch.tensor([0, 1, 31, 32, 33, 63, 64, 65, -1, -64, 2, 30] * 2),
}


@dataclass(frozen=True)
class Case:
    op: str  # the POINTWISE / REDUCTIONS key this row covers
    expr: str  # the function body's returned expression, over the inputs
    inputs: dict[str, torch.Tensor]
    tol: tuple[float, float] = F32_TOL
    name: str = field(default="", compare=False)  # set below: the function's name

    @property
    def packet(self) -> str:
        return self.op.split(".")[1]

    @property
    def is_bf16(self) -> bool:
        return any(t.dtype == torch.bfloat16 for t in self.inputs.values())


X = (4, 33)  # rows, and a row length that is not a power of two (masking)


def binary(op: str, expr: str) -> list[Case]:
    """f32 tensors, a broadcast row, and integer tensors."""
    return [
        Case(op, expr, {"a": randn(*X), "b": randn(*X)}),
        Case(op, expr, {"a": randn(*X), "b": randn(33)}),
        Case(op, expr, {"a": ints(*X), "b": ints(*X)}),
    ]


def compare(op: str, expr: str) -> list[Case]:
    """Floats (with ties), ints, bools, and int against float (promoted)."""
    a = randn(*X).round()
    return [
        Case(op, expr, {"a": a, "b": randn(*X).round()}),
        Case(op, expr, {"a": ints(*X), "b": ints(*X)}),
        Case(op, expr, {"a": bools(*X), "b": bools(*X)}),
        Case(op, expr, {"a": ints(*X, dtype=torch.int32), "b": randn(33).round()}),
        Case(op, expr, {"a": EDGE_A, "b": EDGE_B}),
    ]


def compare_scalar(op: str, expr: str) -> list[Case]:
    return [
        Case(op, expr, {"a": randn(*X).round()}),
        Case(op, expr.replace("1.0", "1"), {"a": ints(*X)}),
        Case(op, expr, {"a": EDGE_A}),
    ]


UNARY_INPUTS = {
    "log": positive,
    "sqrt": positive,
    "rsqrt": positive,
    "reciprocal": positive,
}

CASES: list[Case] = [
    # unary ops, each on floats in its domain
    *(
        Case(
            f"aten.{op}.default",
            f"aten.{op}.default(a)",
            {"a": UNARY_INPUTS.get(op, lambda *s: 3 * randn(*s))(*X)},
            (1e-5, 1e-5) if op in ("erf", "tanh", "sigmoid") else F32_TOL,
        )
        for op in (
            "abs",
            "neg",
            "relu",
            "exp",
            "log",
            "sqrt",
            "rsqrt",
            "sin",
            "cos",
            "tanh",
            "sigmoid",
            "erf",
            "floor",
            "ceil",
            "reciprocal",
        )
    ),
    # exact GELU, one op: a call may name its default, approximate="none"
    Case("aten.gelu.default", "aten.gelu.default(a)", {"a": 3 * randn(*X)}),
    Case(
        "aten.gelu.default",
        'aten.gelu.default(a, approximate="none")',
        {"a": GELU_EDGES},
    ),
    Case(
        "aten.gelu.default",
        "aten.gelu.default(a)",
        {"a": randn(*X, dtype=torch.bfloat16)},
        BF16_TOL,
    ),
    Case("aten.gelu.default", "aten.gelu.default(a)", {"a": 3 * randn(*X).double()}),
    Case("aten.abs.default", "aten.abs.default(a)", {"a": ints(*X)}),
    Case("aten.neg.default", "aten.neg.default(a)", {"a": ints(*X)}),
    Case("aten.relu.default", "aten.relu.default(a)", {"a": EDGE_A}),
    Case("aten.relu.default", "aten.relu.default(a)", {"a": ints(*X)}),
    Case("aten.exp.default", "aten.exp.default(a)", {"a": EDGE_A}),
    Case(
        "aten.tanh.default",
        "aten.tanh.default(a)",
        {"a": torch.tensor([0.0, 1e-4, -0.3, 0.62, 0.63, -5.0, 20.0, -20.0])},
    ),
    Case("aten.floor.default", "aten.floor.default(a)", {"a": EDGE_A}),
    Case("aten.reciprocal.default", "aten.reciprocal.default(a)", {"a": ZEROS_DEN}),
    Case(
        "aten.exp.default",
        "aten.exp.default(a)",
        {"a": randn(*X, dtype=torch.bfloat16)},
        BF16_TOL,
    ),
    Case(
        "aten.sigmoid.default",
        "aten.sigmoid.default(a)",
        {"a": randn(*X, dtype=torch.bfloat16)},
        BF16_TOL,
    ),
    Case("aten.logical_not.default", "aten.logical_not.default(a)", {"a": bools(*X)}),
    Case("aten.neg.default", "aten.neg.default(a)", {"a": EDGE_A}),
    Case("aten.neg.default", "-a", {"a": randn(*X).double()}),
    Case("aten.neg.default", "-a", {"a": EDGE_A.to(torch.bfloat16)}, BF16_TOL),
    # inverse trigonometric and hyperbolic functions, lgamma: libdevice on a GPU
    *(
        Case(f"aten.{op}.default", f"aten.{op}.default(a)", {"a": a})
        for op in ("asin", "acos", "atanh")
        for a in (torch.rand(*X, generator=_gen) * 2 - 1, UNIT)
    ),
    *(
        Case(f"aten.{op}.default", f"aten.{op}.default(a)", {"a": a})
        for op in ("atan", "sinh", "cosh", "asinh")
        for a in (3 * randn(*X), WIDE)
    ),
    Case("aten.acosh.default", "aten.acosh.default(a)", {"a": 1 + 5 * positive(*X)}),
    Case("aten.acosh.default", "aten.acosh.default(a)", {"a": WIDE}),
    Case("aten.lgamma.default", "aten.lgamma.default(a)", {"a": 5 * positive(*X)}),
    Case("aten.lgamma.default", "aten.lgamma.default(a)", {"a": GAMMA}, (1e-5, 1e-5)),
    Case(
        "aten.asin.default",
        "aten.asin.default(a)",
        {"a": UNIT.double()},
    ),
    Case(
        "aten.sinh.default",
        "aten.sinh.default(a)",
        {"a": randn(*X, dtype=torch.bfloat16)},
        BF16_TOL,
    ),
    Case("aten.atan.default", "aten.atan.default(a)", {"a": ints(*X)}),
    Case("aten.lgamma.default", "aten.lgamma.default(a)", {"a": WIDE.double()}),
    Case("aten.signbit.default", "aten.signbit.default(a)", {"a": EDGE_A}),
    Case("aten.signbit.default", "aten.signbit.default(a)", {"a": WIDE.double()}),
    Case(
        "aten.signbit.default",
        "aten.signbit.default(a)",
        {"a": EDGE_A.to(torch.bfloat16)},
    ),
    Case("aten.signbit.default", "aten.signbit.default(a)", {"a": ints(*X)}),
    Case("aten.signbit.default", "aten.signbit.default(a)", {"a": bools(*X)}),
    # log1p and expm1 near 0, where log(1 + x) and exp(x) - 1 lose every digit
    *(
        Case(f"aten.{op}.default", f"aten.{op}.default(a)", {"a": a}, (1e-5, 1e-7))
        for op in ("log1p", "expm1")
        for a in (
            torch.tensor([1e-8, -1e-8, 3e-6, -2e-5, 1e-3, 0.5, -0.9, 2.0, 40.0]),
            randn(*X).abs() * 0.01,
            torch.tensor([0.0, -0.0, -1.0, float("inf"), float("-inf"), float("nan")]),
        )
    ),
    *(
        Case(f"aten.{op}.default", f"aten.{op}.default(a)", {"a": 4 * randn(*X)})
        for op in ("log2", "exp2", "trunc", "sign")
    ),
    Case("aten.log2.default", "aten.log2.default(a)", {"a": positive(*X)}),
    Case("aten.trunc.default", "aten.trunc.default(a)", {"a": EDGE_A}),
    Case("aten.sign.default", "aten.sign.default(a)", {"a": EDGE_A}),
    Case("aten.sign.default", "aten.sign.default(a)", {"a": ints(*X)}),
    Case("aten.sgn.default", "aten.sgn.default(a)", {"a": EDGE_A}),
    Case("aten.isnan.default", "aten.isnan.default(a)", {"a": EDGE_A}),
    Case("aten.isnan.default", "aten.isnan.default(a)", {"a": ints(*X)}),
    Case("aten.logical_not.default", "aten.logical_not.default(a)", {"a": ints(*X)}),
    Case("aten.logical_not.default", "aten.logical_not.default(a)", {"a": EDGE_A}),
    # round half to even; tan, erfc (into its tail, where 1 - erf has no digits)
    Case("aten.round.default", "aten.round.default(a)", {"a": HALVES}),
    Case("aten.round.default", "aten.round.default(a)", {"a": EDGE_A}),
    Case("aten.round.default", "aten.round.default(a)", {"a": ints(*X)}),
    Case("aten.round.default", "torch.round(a, decimals=2)", {"a": 3 * randn(*X)}),
    Case("aten.round.default", "torch.round(a, decimals=-1)", {"a": 300 * randn(*X)}),
    Case("aten.tan.default", "aten.tan.default(a)", {"a": 3 * randn(*X)}),
    Case("aten.tan.default", "aten.tan.default(a)", {"a": EDGE_A}),
    Case("aten.erfc.default", "aten.erfc.default(a)", {"a": 3 * randn(*X)}),
    Case("aten.erfc.default", "aten.erfc.default(a)", {"a": ERFC_TAIL}, (1e-5, 0)),
    Case("aten.erfc.default", "aten.erfc.default(a)", {"a": EDGE_A}),
    # arithmetic
    *binary("aten.add.Tensor", "aten.add.Tensor(a, b)"),
    *binary("aten.true_divide.Tensor", "aten.true_divide.Tensor(a, b)")[:2],
    Case(
        "aten.__and__.Tensor",
        "aten.__and__.Tensor(a, b)",
        {"a": ints(*X), "b": ints(33)},
    ),
    Case(
        "aten.__or__.Tensor",
        "aten.__or__.Tensor(a, b)",
        {"a": bools(*X), "b": bools(*X)},
    ),
    Case(
        "aten.__xor__.Tensor",
        "aten.__xor__.Tensor(a, b)",
        {"a": ints(*X), "b": ints(*X)},
    ),
    Case(
        "aten.add.Tensor",
        "aten.add.Tensor(a, b)",
        {"a": randn(*X, dtype=torch.bfloat16), "b": randn(33, dtype=torch.bfloat16)},
        BF16_TOL,
    ),
    Case("aten.add.Tensor", "aten.add.Tensor(a, b)", {"a": ints(*X), "b": randn(*X)}),
    Case("aten.add.Tensor", "a + 2.5", {"a": randn(*X)}),
    Case("aten.add.Tensor", "a + b", {"a": randn(200, 201), "b": randn(201)}),
    Case("aten.add.Scalar", "aten.add.Scalar(a, 2.5)", {"a": randn(*X)}),
    Case("aten.add.Scalar", "aten.add.Scalar(a, 3)", {"a": ints(*X)}),
    *binary("aten.sub.Tensor", "aten.sub.Tensor(a, b)"),
    Case("aten.sub.Scalar", "aten.sub.Scalar(a, 2.5)", {"a": randn(*X)}),
    Case("aten.rsub.Scalar", "aten.rsub.Scalar(a, 2.5)", {"a": randn(*X)}),
    Case("aten.rsub.Scalar", "1 - a", {"a": ints(*X)}),
    *binary("aten.mul.Tensor", "aten.mul.Tensor(a, b)"),
    Case(
        "aten.mul.Tensor",
        "aten.mul.Tensor(a, b)",
        {"a": randn(*X, dtype=torch.bfloat16), "b": randn(*X, dtype=torch.bfloat16)},
        BF16_TOL,
    ),
    Case("aten.mul.Tensor", "aten.mul.Tensor(a, b)", {"a": bools(*X), "b": bools(*X)}),
    Case("aten.mul.Scalar", "aten.mul.Scalar(a, 3.0)", {"a": randn(*X)}),
    Case("aten.mul.Scalar", "aten.mul.Scalar(a, -3)", {"a": ints(*X)}),
    *binary("aten.div.Tensor", "aten.div.Tensor(a, b)"),
    Case("aten.div.Tensor", "aten.div.Tensor(a, b)", {"a": ZEROS_DIV, "b": ZEROS_DEN}),
    Case("aten.div.Tensor", "aten.div.Tensor(a, b)", {"a": EDGE_A, "b": EDGE_B}),
    Case("aten.div.Scalar", "aten.div.Scalar(a, 3.0)", {"a": randn(*X)}),
    Case("aten.div.Scalar", "aten.div.Scalar(a, 0.0)", {"a": ZEROS_DIV}),
    Case("aten.div.Scalar", "aten.div.Scalar(a, 4)", {"a": ints(*X)}),
    # pow: negative bases with integer exponents, 0 ** 0, NaN and inf
    *binary("aten.pow.Tensor_Tensor", "aten.pow.Tensor_Tensor(a, b)")[:2],
    Case("aten.pow.Tensor_Tensor", "aten.pow.Tensor_Tensor(a, b)", POW_EDGES),
    Case("aten.pow.Tensor_Tensor", "aten.pow.Tensor_Tensor(a, b)", EDGES),
    Case("aten.pow.Tensor_Tensor", "a ** b", {"a": ints(*X), "b": ints(*X).abs()}),
    Case("aten.pow.Tensor_Tensor", "a ** b", {"a": ints(*X), "b": ints(*X)}),
    Case("aten.pow.Tensor_Tensor", "a ** b", {"a": ints(*X), "b": randn(*X)}),
    Case("aten.pow.Tensor_Tensor", "a ** b", INT_POWERS),
    Case(
        "aten.pow.Tensor_Tensor",
        "a ** b",
        {k: v.to(torch.int32) for k, v in INT_POWERS.items()},
    ),
    Case("aten.pow.Tensor_Scalar", "a ** 2.5", {"a": positive(*X)}),
    Case("aten.pow.Tensor_Scalar", "a ** -3", {"a": EDGE_A}),
    Case("aten.pow.Tensor_Scalar", "a ** 0.3", {"a": EDGE_A}),
    Case("aten.pow.Tensor_Scalar", "a ** 5", {"a": ints(*X)}),
    Case("aten.pow.Scalar", "2.5 ** a", {"a": randn(*X)}),
    Case("aten.pow.Scalar", "(-2.0) ** a", {"a": EDGE_A}),
    Case("aten.pow.Scalar", "aten.pow.Scalar(-2, a)", {"a": ints(*X)}),
    Case("aten.pow.Tensor_Tensor", "a ** b", {"a": EDGE_A.double(), "b": EDGE_B}),
    Case(
        "aten.pow.Tensor_Scalar",
        "a ** 1.5",
        {"a": positive(*X).to(torch.bfloat16)},
        BF16_TOL,
    ),
    # exponents eager computes as roots (sqrt(-0.0) = -0.0, pow(-0.0, 0.5) = 0.0)
    Case("aten.pow.Tensor_Scalar", "a ** 0.5", {"a": EDGE_A}),
    Case("aten.pow.Tensor_Scalar", "a ** -0.5", {"a": EDGE_A}),
    # two-argument functions of floats
    Case(
        "aten.atan2.default",
        "aten.atan2.default(a, b)",
        {"a": randn(*X), "b": randn(*X)},
    ),
    Case("aten.atan2.default", "aten.atan2.default(a, b)", EDGES),
    Case(
        "aten.atan2.default",
        "aten.atan2.default(a, b)",
        {"a": EDGE_A.double(), "b": EDGE_B.double()},
    ),
    Case("aten.atan2.default", "aten.atan2.default(a, -a)", {"a": EDGE_A}),
    Case(
        "aten.atan2.default", "aten.atan2.default(a, b)", {"a": ints(*X), "b": ints(33)}
    ),
    Case(
        "aten.hypot.default",
        "aten.hypot.default(a, b)",
        {"a": randn(*X), "b": randn(33)},
    ),
    Case("aten.hypot.default", "aten.hypot.default(a, b)", EDGES),
    Case("aten.hypot.default", "aten.hypot.default(a, b)", HUGE),
    Case("aten.copysign.Tensor", "aten.copysign.Tensor(a, b)", EDGES),
    Case(
        "aten.copysign.Tensor",
        "aten.copysign.Tensor(a, b)",
        {"a": ints(*X), "b": randn(*X)},
    ),
    Case("aten.copysign.Scalar", "aten.copysign.Scalar(a, -0.0)", {"a": EDGE_A}),
    Case("aten.copysign.Scalar", "aten.copysign.Scalar(a, 2)", {"a": randn(*X)}),
    Case(
        "aten.copysign.Tensor",
        "aten.copysign.Tensor(a, b)",
        {"a": EDGE_A.to(torch.bfloat16), "b": EDGE_B.to(torch.bfloat16)},
        BF16_TOL,
    ),
    # divisions rounded toward zero (fmod) and negative infinity (remainder,
    # floor_divide); integer tensors divide in eager (Note [Integer division by
    # zero] in passes/decompose.py), integers by a nonzero Scalar in kernels
    *(
        c
        for op, packet in (("fmod", "fmod"), ("remainder", "remainder"))
        for c in (
            Case(
                f"aten.{op}.Tensor",
                f"aten.{op}.Tensor(a, b)",
                {"a": 5 * randn(*X), "b": randn(33)},
            ),
            Case(f"aten.{op}.Tensor", f"aten.{op}.Tensor(a, b)", EDGES),
            Case(f"aten.{op}.Tensor", f"aten.{op}.Tensor(a, b)", SIGNS),
            Case(
                f"aten.{op}.Tensor",
                f"aten.{op}.Tensor(a, b)",
                {"a": ints(*X), "b": NONZERO},
            ),
            Case(f"aten.{op}.Scalar", f"aten.{op}.Scalar(a, -1.5)", {"a": EDGE_A}),
            Case(f"aten.{op}.Scalar", f"aten.{op}.Scalar(a, 3)", {"a": ints(*X)}),
            Case(f"aten.{op}.Scalar", f"aten.{op}.Scalar(a, -4)", {"a": ints(*X)}),
            Case(
                f"aten.{op}.Tensor",
                f"aten.{op}.Tensor(a, b)",
                {k: v.double() for k, v in SIGNS.items()},
            ),
            Case(
                f"aten.{op}.Tensor",
                f"aten.{op}.Tensor(a, b)",
                {"a": 5 * randn(*X, dtype=torch.bfloat16), "b": randn(33)},
                BF16_TOL,
            ),
        )
    ),
    Case(
        "aten.remainder.Scalar_Tensor",
        "aten.remainder.Scalar_Tensor(2.5, a)",
        {"a": EDGE_A},
    ),
    Case("aten.remainder.Scalar_Tensor", "7 % a", {"a": NONZERO}),
    Case("aten.floor_divide.default", "a // b", {"a": 5 * randn(*X), "b": randn(33)}),
    Case("aten.floor_divide.default", "aten.floor_divide.default(a, b)", EDGES),
    Case("aten.floor_divide.default", "aten.floor_divide.default(a, b)", SIGNS),
    Case(
        "aten.floor_divide.Scalar", "aten.floor_divide.Scalar(a, -0.75)", {"a": EDGE_A}
    ),
    Case("aten.floor_divide.Scalar", "aten.floor_divide.Scalar(a, 0.0)", {"a": EDGE_A}),
    Case("aten.floor_divide.Scalar", "a // 3", {"a": ints(*X)}),
    Case(
        "aten.floor_divide.Scalar", "aten.floor_divide.Scalar(a, -4)", {"a": ints(*X)}
    ),
    # min / max: NaN propagates, infinities order
    *binary("aten.maximum.default", "aten.maximum.default(a, b)"),
    Case(
        "aten.maximum.default", "aten.maximum.default(a, b)", {"a": EDGE_A, "b": EDGE_B}
    ),
    *binary("aten.minimum.default", "aten.minimum.default(a, b)"),
    Case(
        "aten.minimum.default", "aten.minimum.default(a, b)", {"a": EDGE_A, "b": EDGE_B}
    ),
    Case("aten.clamp_min.default", "aten.clamp_min.default(a, 0.25)", {"a": randn(*X)}),
    Case("aten.clamp_min.default", "aten.clamp_min.default(a, 0.25)", {"a": EDGE_A}),
    Case("aten.clamp_min.default", "aten.clamp_min.default(a, 1)", {"a": ints(*X)}),
    Case("aten.clamp_max.default", "aten.clamp_max.default(a, 0.25)", {"a": randn(*X)}),
    Case("aten.clamp_max.default", "aten.clamp_max.default(a, 0.25)", {"a": EDGE_A}),
    Case("aten.clamp_max.default", "aten.clamp_max.default(a, -1)", {"a": ints(*X)}),
    # a bound of zero meets -0.0 and 0.0, NaN and the infinities; a constant first
    Case("aten.clamp_min.default", "aten.clamp_min.default(a, 0.0)", {"a": EDGE_A}),
    Case("aten.clamp_max.default", "aten.clamp_max.default(a, -0.0)", {"a": EDGE_A}),
    Case("aten.maximum.default", "torch.maximum(torch.zeros(()), a)", {"a": EDGE_A}),
    Case("aten.minimum.default", "torch.minimum(torch.zeros(()), a)", {"a": EDGE_A}),
    # comparisons
    *(
        c
        for op in ("eq", "ne", "lt", "le", "gt", "ge")
        for c in compare(f"aten.{op}.Tensor", f"aten.{op}.Tensor(a, b)")
    ),
    *(
        c
        for op in ("eq", "ne", "lt", "le", "gt", "ge")
        for c in compare_scalar(f"aten.{op}.Scalar", f"aten.{op}.Scalar(a, 1.0)")
    ),
    # bitwise ops: booleans and integers (with negatives: two's complement)
    *(
        c
        for op in ("bitwise_and", "bitwise_or", "bitwise_xor")
        for c in (
            Case(
                f"aten.{op}.Tensor",
                f"aten.{op}.Tensor(a, b)",
                {"a": bools(*X), "b": bools(*X)},
            ),
            Case(
                f"aten.{op}.Tensor",
                f"aten.{op}.Tensor(a, b)",
                {"a": ints(*X), "b": ints(*X) - 3},
            ),
        )
    ),
    *(
        Case(f"aten.{op}.Scalar", f"aten.{op}.Scalar(a, {s})", {"a": a})
        for op in ("bitwise_and", "bitwise_or", "bitwise_xor")
        for s, a in (("-3", ints(*X)), ("6", ints(*X, dtype=torch.int32)))
    ),
    Case("aten.bitwise_xor.Scalar", "a ^ True", {"a": bools(*X)}),
    Case("aten.bitwise_not.default", "~a", {"a": ints(*X)}),
    Case("aten.bitwise_not.default", "~a", {"a": bools(*X)}),
    Case("aten.bitwise_not.default", "~a", {"a": ints(*X, dtype=torch.int32)}),
    # shifts: negative counts and counts past the width (eager: 0 for <<, the sign
    # bit for >>), int64 and int32
    *(
        c
        for op, spelled in (("bitwise_left_shift", "<<"), ("bitwise_right_shift", ">>"))
        for c in (
            Case(f"aten.{op}.Tensor", f"aten.{op}.Tensor(a, b)", SHIFTS),
            Case(
                f"aten.{op}.Tensor",
                f"aten.{op}.Tensor(a, b)",
                {k: v.to(torch.int32) for k, v in SHIFTS.items()},
            ),
            Case(f"aten.{op}.Tensor_Scalar", f"aten.{op}(a, 3)", {"a": SHIFTS["a"]}),
            Case(f"aten.{op}.Scalar_Tensor", f"aten.{op}(-5, b)", {"b": SHIFTS["b"]}),
        )
    ),
    Case("aten.__lshift__.Tensor", "a << b", SHIFTS),
    Case("aten.__lshift__.Scalar", "a << 40", {"a": SHIFTS["a"].to(torch.int32)}),
    Case("aten.__rshift__.Tensor", "a >> b", SHIFTS),
    Case("aten.__rshift__.Scalar", "a >> 2", {"a": SHIFTS["a"]}),
    # logical ops: any dtype, nonzero is true
    *(
        c
        for op in ("logical_and", "logical_or")
        for c in (
            Case(
                f"aten.{op}.default",
                f"aten.{op}.default(a, b)",
                {"a": bools(*X), "b": bools(*X)},
            ),
            Case(
                f"aten.{op}.default",
                f"aten.{op}.default(a, b)",
                {"a": ints(*X), "b": randn(*X).round()},
            ),
            Case(
                f"aten.{op}.default",
                f"aten.{op}.default(a, b)",
                {"a": EDGE_A, "b": EDGE_B},
            ),
        )
    ),
    Case(
        "aten.where.self",
        "aten.where.self(c, a, b)",
        {"c": bools(*X), "a": randn(*X), "b": randn(33)},
    ),
    Case(
        "aten.where.ScalarSelf",
        "aten.where.ScalarSelf(c, -1.5, b)",
        {"c": bools(*X), "b": randn(33)},
    ),
    Case(
        "aten.where.ScalarOther",
        "aten.where.ScalarOther(c, a, 7)",
        {"c": bools(*X), "a": ints(*X)},
    ),
    Case("aten.where.Scalar", "aten.where.Scalar(c, 2.5, 0)", {"c": bools(*X)}),
    Case(
        "aten.where.ScalarSelf",
        "aten.where.ScalarSelf(c, -0.0, b)",
        {"c": bools(7, 7), "b": EDGE_B},
    ),
    Case(
        "aten.where.ScalarOther",
        "aten.where.ScalarOther(c, a, -0.0)",
        {"c": bools(7, 7), "a": EDGE_A.double()},
    ),
    Case(
        "aten.where.ScalarOther",
        "a.masked_fill(c, -3.0)",
        {"c": bools(33), "a": randn(*X)},
    ),
    Case(
        "aten.where.self",
        "aten.where.self(c, a, b)",
        {"c": bools(33), "a": ints(*X), "b": randn(4, 1)},
    ),
    Case(
        "aten.where.self",
        "aten.where.self(c, a, b)",
        {"c": bools(7, 7), "a": EDGE_A, "b": EDGE_B},
    ),
    # copies and casts
    Case("aten.clone.default", "aten.clone.default(a)", {"a": randn(*X)}),
    Case("aten.clone.default", "aten.clone.default(a.t())", {"a": randn(*X)}),
    Case("aten.clone.default", "aten.clone.default(a[:, 1::2])", {"a": randn(*X)}),
    Case("aten._to_copy.default", "a.to(torch.float64)", {"a": randn(*X)}),
    Case("aten._to_copy.default", "a.to(torch.int64)", {"a": 5 * randn(*X)}),
    Case("aten._to_copy.default", "a.to(torch.int32)", {"a": ints(*X)}),
    Case("aten._to_copy.default", "a.to(torch.bool)", {"a": EDGE_A}),
    Case("aten._to_copy.default", "a.to(torch.float32)", {"a": bools(*X)}),
    Case("aten._to_copy.default", "a.to(torch.bfloat16)", {"a": randn(*X)}, BF16_TOL),
    Case(
        "aten._to_copy.default",
        "a.to(torch.float32)",
        {"a": randn(*X, dtype=torch.bfloat16)},
    ),
    Case(
        "aten.copy.default",
        "aten.copy.default(a, b)",
        {"a": randn(*X), "b": randn(33, dtype=torch.float64)},
    ),
    Case(
        "aten.copy.default",
        "aten.copy.default(a, b)",
        {"a": ints(*X), "b": 5 * randn(*X)},
    ),
    # constants filling a tensor
    Case("aten.full.default", "torch.full((3, 5), 2.5)", {"a": randn(1)}),
    Case("aten.full_like.default", "torch.full_like(a, 7)", {"a": randn(*X)}),
    Case("aten.new_full.default", "a.new_full((2, 3), -1.5)", {"a": randn(*X)}),
    Case("aten.scalar_tensor.default", "torch.scalar_tensor(3.0) + a", {"a": randn(4)}),
    # ranges: each position's own value (Note [Ranges in kernels])
    Case("aten.arange.default", "a * torch.arange(33)", {"a": randn(*X)}),
    Case(
        "aten.arange.start", "torch.arange(-4, 29, dtype=a.dtype) - a", {"a": randn(*X)}
    ),
    Case("aten.arange.start_step", "torch.arange(70, 4, -2) + a", {"a": ints(*X)}),
    # reductions over trailing dims
    Case(
        "aten.sum.dim_IntList",
        "aten.sum.dim_IntList(a, [-1])",
        {"a": randn(*X)},
        RED_TOL,
    ),
    Case(
        "aten.sum.dim_IntList",
        "a.sum((1, 2), keepdim=True)",
        {"a": randn(3, 5, 7)},
        RED_TOL,
    ),
    Case(
        "aten.sum.dim_IntList",
        "aten.sum.dim_IntList(a, [])",
        {"a": randn(6, 7)},
        RED_TOL,
    ),
    Case("aten.sum.dim_IntList", "a.sum(-1)", {"a": randn(3, 5000)}, (1e-4, 1e-4)),
    # wide rows: Triton loops over RBLOCK chunks; many rows: OpenMP threads
    Case("aten.sum.dim_IntList", "a.sum(-1)", {"a": randn(3, 10000)}, (1e-4, 1e-3)),
    Case("aten.sum.dim_IntList", "a.sum(0)", {"a": randn(*X)}, RED_TOL),
    Case("aten.argmax.default", "a.argmax(-1)", {"a": randn(*X).round()}),
    Case("aten.sum.dim_IntList", "a.sum(-1)", {"a": ints(*X)}),  # in int64
    Case("aten.argmin.default", "a.argmin(0)", {"a": randn(*X).round()}),
    Case("aten.amax.default", "a.amax(-1)", {"a": randn(3, 9000)}, RED_TOL),
    Case(
        "aten.var_mean.correction",
        "torch.var_mean(a, -1)",
        {"a": randn(2, 9000)},
        (1e-4, 1e-4),
    ),
    Case("aten.mean.dim", "a.mean(-1)", {"a": randn(300, 130)}, RED_TOL),
    Case("aten.sum.default", "a.sum()", {"a": randn(5, 7)}, RED_TOL),
    Case("aten.max.default", "a.max()", {"a": randn(5, 7)}, RED_TOL),
    Case("aten.min.default", "a.min()", {"a": randn(4, 9)}, RED_TOL),
    Case("aten.mean.default", "a.mean()", {"a": randn(3, 11)}, RED_TOL),
    Case(
        "aten.sum.dim_IntList",
        "a.sum(-1)",
        {"a": randn(*X, dtype=torch.bfloat16)},
        BF16_TOL,
    ),
    Case("aten.mean.dim", "aten.mean.dim(a, [-1])", {"a": randn(*X)}, RED_TOL),
    Case("aten.mean.dim", "a.mean(-1, keepdim=True)", {"a": randn(2, 3, 9)}, RED_TOL),
    Case("aten.amax.default", "aten.amax.default(a, [-1])", {"a": randn(*X)}, RED_TOL),
    Case("aten.amax.default", "aten.amax.default(a, [-1])", {"a": EDGE_A}, RED_TOL),
    Case(
        "aten.amax.default",
        "aten.amax.default(a, [-1])",
        {"a": torch.tensor([[float("-inf")] * 5, [float("inf"), 1, 2, 3, 4]])},
        RED_TOL,
    ),
    Case(
        "aten.amax.default",
        "a.amax(-1)",
        {"a": randn(*X, dtype=torch.bfloat16)},
        BF16_TOL,
    ),
    Case("aten.amin.default", "aten.amin.default(a, [-1])", {"a": randn(*X)}, RED_TOL),
    Case("aten.amin.default", "aten.amin.default(a, [-1])", {"a": EDGE_A}, RED_TOL),
    Case(
        "aten.var.correction", "aten.var.correction(a, [-1])", {"a": randn(*X)}, RED_TOL
    ),
    Case(
        "aten.var.correction",
        "a.var(-1, correction=0, keepdim=True)",
        {"a": randn(*X)},
        RED_TOL,
    ),
    Case("aten.var.dim", "aten.var.dim(a, [-1], False)", {"a": randn(*X)}, RED_TOL),
    Case(
        "aten.var.dim", "aten.var.dim(a, [-1], True, True)", {"a": randn(*X)}, RED_TOL
    ),
    Case(
        "aten.var_mean.correction",
        "aten.var_mean.correction(a, [-1], correction=0)",
        {"a": randn(*X)},
        RED_TOL,
    ),
    Case(
        "aten.var_mean.correction",
        "torch.var_mean(a, -1, keepdim=True)",
        {"a": randn(2, 3, 9)},
        RED_TOL,
    ),
    Case(
        "aten.var_mean.dim",
        "aten.var_mean.dim(a, [-1], False)",
        {"a": randn(*X)},
        RED_TOL,
    ),
    Case("aten.var_mean.dim", "aten.var_mean.dim(a, [-1])", {"a": randn(*X)}, RED_TOL),
    Case("aten.fill.Scalar", "torch.fill(a, 2.5) + a", {"a": randn(*X)}),
    Case(
        "aten.fill.Tensor", "a.clone().fill_(b) * a", {"a": randn(*X), "b": randn(())}
    ),
    # fmax and fmin: a NaN loses to a number (maximum's wins)
    Case("aten.fmax.default", "torch.fmax(a, b)", EDGES),
    Case("aten.fmin.default", "torch.fmin(a, b)", EDGES),
    Case("aten.fmax.default", "torch.fmax(a, a.flip(0))", SIGNED_INTS),
    Case(
        "aten.fmin.default",
        "torch.fmin(a, b)",
        {"a": EDGE_A.to(torch.bfloat16), "b": EDGE_B.to(torch.bfloat16)},
    ),
    Case("aten.log10.default", "torch.log10(a)", {"a": EDGE_A.abs() * 1e3}),
    Case("aten.log10.default", "torch.log10(a)", {"a": EDGE_A}),
    Case("aten.log10.default", "torch.log10(a)", SIGNED_INTS),
    Case("aten.prod.dim_int", "torch.prod(a, -1)", {"a": EDGE_A}),
    Case("aten.prod.dim_int", "a.prod(0, keepdim=True)", SIGNED_INTS),
    Case("aten.prod.default", "torch.prod(a)", {"a": EDGE_A[2:, 2:] + 0.5}),
    Case("aten.prod.default", "torch.prod(a != 0)", SIGNED_INTS),
    # divisors a float does not hold exactly, whose quotient rounds to a whole
    # number (1 / 0.1 is 10.0 in float32, 1 // 0.1 is 9)
    Case("aten.floor_divide.default", "a // b", INEXACT),
    Case("aten.remainder.Tensor", "a % b", INEXACT),
    Case("aten.fmod.Tensor", "torch.fmod(a, b)", INEXACT),
]
CASES = [replace(c, name=f"case_{i}_{c.packet}") for i, c in enumerate(CASES)]
# Ops that are not kernel ops yet (ir/ops.py says why): their cases check values
# on both backends, wherever the op runs
NO_ROW_YET: set[str] = set()
PENDING = [c for c in CASES if c.packet in NO_ROW_YET]
CASES = [c for c in CASES if c.packet not in NO_ROW_YET]

# Calls of a table op that the tables do not lower (arguments beyond the operands):
# they stay extern calls, and must still compute the right values.
EXTERN_CASES = [
    # integer floor division by a tensor: eager's, which raises on a zero divisor
    # (Note [Integer division by zero] in passes/decompose.py)
    Case("aten.div.Tensor_mode", "a // b", {"a": ints(*X), "b": NONZERO}),
    # of halves, eager's own steps (Note [Steps in halves] in passes/decompose.py)
    Case(
        "aten.binary_cross_entropy_with_logits.default",
        "torch.nn.functional.binary_cross_entropy_with_logits(a, b.sigmoid())",
        {"a": EDGE_A[:, 3:].to(torch.bfloat16), "b": EDGE_B[:, 3:].to(torch.bfloat16)},
        BF16_TOL,
    ),
]
EXTERN_CASES = [
    replace(c, name=f"extern_{i}_{c.packet}") for i, c in enumerate(EXTERN_CASES)
]

# Ops without a row that decompose into kernel ops (passes/decompose.py): they run
# in kernels, with eager's values at the edges
DECOMPOSED_CASES = [
    # `alpha` scales the second operand first (`_scaled_second`)
    Case("aten.add.Tensor", "aten.add.Tensor(a, b, alpha=2)", EDGES),
    Case("aten.sub.Tensor", "torch.sub(a, b, alpha=0.5).relu()", EDGES),
    Case("aten.add.Tensor", "torch.add(a, b, alpha=3)", {"a": ints(*X), "b": ints(33)}),
    Case("aten.logaddexp.default", "torch.logaddexp(a, b)", EDGES),
    Case(
        "aten.logaddexp.default",
        "torch.logaddexp(a, b)",
        {"a": 30 * randn(*X), "b": randn(33)},
    ),
    Case("aten.logaddexp2.default", "torch.logaddexp2(a, b)", EDGES),
    Case("aten.nan_to_num.default", "torch.nan_to_num(a)", {"a": EDGE_A}),
    Case("aten.nan_to_num.default", "a.nan_to_num(1.0, 2.0, -3.0)", {"a": EDGE_A}),
    Case("aten.nan_to_num.default", "a.nan_to_num()", {"a": EDGE_A.double()}),
    Case("aten.clamp.Tensor", "torch.clamp(a, min=b)", EDGES),
    Case(
        "aten.clamp.Tensor",
        "torch.clamp(a, b, b + 1)",
        {"a": 3 * randn(*X), "b": randn(33)},
    ),
    Case("aten.clamp_min.Tensor", "torch.clamp_min(a, b)", EDGES),
    Case("aten.clamp_max.Tensor", "torch.clamp_max(a, b)", EDGES),
    Case("aten.isposinf.default", "torch.isposinf(a)", {"a": EDGE_A}),
    Case("aten.isneginf.default", "torch.isneginf(a)", {"a": EDGE_A}),
    Case("aten.isfinite.default", "torch.isfinite(a)", {"a": EDGE_A}),
    # Note [Rounded divisions]: floats by tensors and scalars, integers by scalars
    Case("aten.div.Tensor_mode", "torch.div(a, b, rounding_mode='floor')", EDGES),
    Case("aten.div.Tensor_mode", "torch.div(a, b, rounding_mode='trunc')", EDGES),
    Case("aten.div.Scalar_mode", "torch.div(a, -2.5, rounding_mode='floor')", EDGES),
    Case("aten.div.Scalar_mode", "torch.div(a, 0.75, rounding_mode='trunc')", EDGES),
    Case("aten.div.Scalar_mode", "torch.div(a, 3, rounding_mode='floor')", SIGNED_INTS),
    Case(
        "aten.div.Scalar_mode", "torch.div(a, -3, rounding_mode='trunc')", SIGNED_INTS
    ),
    Case("aten.deg2rad.default", "torch.deg2rad(a)", {"a": EDGE_A * 90}),
    Case("aten.deg2rad.default", "torch.deg2rad(a)", SIGNED_INTS),
    Case("aten.rsub.Tensor", "torch.rsub(a, b, alpha=2)", EDGES),
    Case("aten.rsub.Tensor", "torch.rsub(a, b)", EDGES),
    Case(
        "aten.log_sigmoid_forward.default",
        "torch.nn.functional.logsigmoid(a)",
        {"a": EDGE_A * 30},
    ),
    Case(
        "aten._prelu_kernel.default",
        "torch.nn.functional.prelu(a, b[0])",
        EDGES,
    ),
    Case("aten.special_xlog1py.default", "torch.special.xlog1py(a, b)", EDGES),
    Case("aten.special_entr.default", "torch.special.entr(a)", {"a": EDGE_A}),
    Case(
        "aten.ldexp.Tensor",
        "torch.ldexp(a, b)",
        {"a": EDGE_A, "b": SIGNED_INTS["a"][:, :7].reshape(-1)[:7]},
    ),
    # constants: `full`, in the consumer's kernel
    Case("aten.zeros.default", "torch.zeros(7, 7) + a", {"a": EDGE_A}),
    Case("aten.ones.default", "torch.ones(7, dtype=torch.int64) * a", SIGNED_INTS),
    Case("aten.new_zeros.default", "a.new_zeros(7) - a", {"a": EDGE_A}),
    Case("aten.new_ones.default", "a.new_ones((7, 7)) / a", {"a": EDGE_A}),
    # losses: pointwise formulas and a mean, a sum or neither
    Case("aten.mse_loss.default", "torch.nn.functional.mse_loss(a, b)", EDGES),
    Case(
        "aten.mse_loss.default",
        "torch.nn.functional.mse_loss(a, b, reduction='none')",
        EDGES,
    ),
    Case(
        "aten.huber_loss.default",
        "torch.nn.functional.huber_loss(a, b, reduction='sum', delta=0.5)",
        EDGES,
    ),
    Case(
        "aten.soft_margin_loss.default",
        "torch.nn.functional.soft_margin_loss(a, b.detach())",  # no target gradient
        {"a": EDGE_A[3:, 3:].contiguous(), "b": EDGE_B[3:, 3:].sign()},
    ),
    Case(
        "aten.binary_cross_entropy.default",
        "torch.nn.functional.binary_cross_entropy(a.sigmoid(), b.sigmoid())",
        {"a": torch.linspace(-120, 6, 49).view(7, 7), "b": EDGE_A.nan_to_num(0.0)},
    ),
    Case(
        "aten.binary_cross_entropy_with_logits.default",
        "torch.nn.functional.binary_cross_entropy_with_logits("
        "a, b.sigmoid(), b[0].detach().abs(), pos_weight=a[1].abs(), reduction='none')",
        {"a": EDGE_A[:, 3:].contiguous(), "b": EDGE_B[:, 3:].contiguous()},
    ),
    Case("aten.tril.default", "torch.tril(a, -1)", {"a": EDGE_A}),
    Case("aten.triu.default", "a.t().triu(2)", SIGNED_INTS),
    Case("aten.repeat.default", "a.repeat(2, 1, 3).relu()", {"a": EDGE_A}),
    # gathers at positions kernels compute (Note [Pads and interpolation as gathers])
    Case(
        "aten.reflection_pad2d.default",
        "torch.nn.functional.pad(a, (2, 1, 6, 0), mode='reflect')",
        {"a": EDGE_A.view(1, 7, 7)},
    ),
    Case(
        "aten.replication_pad1d.default",
        "torch.nn.functional.pad(a, (3, 2), mode='replicate') * 2",
        {"a": EDGE_B},
    ),
    Case(
        "aten.upsample_bilinear2d.default",
        "torch.nn.functional.interpolate(a, scale_factor=1.5, mode='bilinear')",
        {"a": torch.linspace(-3, 3, 98).view(1, 2, 7, 7)},
    ),
    Case(
        "aten.upsample_nearest2d.default",
        "torch.nn.functional.interpolate(a, size=(9, 5), mode='nearest').exp()",
        {"a": torch.linspace(-3, 3, 98).view(2, 1, 7, 7)},
    ),
]
DECOMPOSED_CASES = [
    replace(c, name=f"decomposed_{i}_{c.packet}")
    for i, c in enumerate(DECOMPOSED_CASES)
]
ALL_CASES = CASES + EXTERN_CASES + PENDING + DECOMPOSED_CASES


def source() -> str:
    lines = ["import torch", "", "aten = torch.ops.aten", ""]
    for c in ALL_CASES:
        lines += [
            "",
            f"def {c.name}({', '.join(c.inputs)}):",
            f"    return {c.expr}",
            "",
        ]
    return "\n".join(lines)


# `aten.var.dim` and `aten.var_mean.dim` are CompositeImplicitAutograd: PyTorch turns
# them into the `.correction` overloads before any dispatch mode sees them, so the
# recorder never produces them. The rows for them put the overload the source line
# names back into the traced graph, so their lowering is still checked end to end.
def restore_dim_overloads(graph: Graph) -> Graph:
    nodes = []
    for n in graph.nodes:
        overload = n.target.replace(".correction", ".dim")
        if (
            n.target in ("aten.var.correction", "aten.var_mean.correction")
            and n.span is not None
            and f"aten.{overload[5:]}(" in n.span.text
        ):
            kwargs = dict(n.kwargs)
            correction = kwargs.pop("correction", 1)
            assert correction in (0, 1) and set(kwargs) <= {"keepdim"}, n
            args = (*n.args[:2], bool(correction), kwargs.get("keepdim", False))
            n = replace(n, target=overload, args=args, kwargs=())
        nodes.append(n)
    return graph.with_nodes(nodes)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Compiled]:
    root: Path = tmp_path_factory.mktemp("op_cases")
    functions = {c.name: c.inputs for c in ALL_CASES}
    return compile_source(source(), functions, root, restore_dim_overloads)


def test_every_pointwise_and_reduction_op_has_a_case() -> None:
    covered = {c.op for c in CASES}
    missing = sorted((set(POINTWISE) | set(REDUCTIONS)) - covered)
    assert not missing, f"add a Case row for each of: {missing}"
    unknown = sorted(covered - set(POINTWISE) - set(REDUCTIONS))
    assert not unknown, f"rows for ops neither pointwise nor reductions: {unknown}"


def _reference(case: Case, c: Compiled):
    """Eager result; bf16 inputs are computed in f32 (the precision kernels use)."""
    inputs = {
        k: v.float() if v.dtype == torch.bfloat16 else v for k, v in case.inputs.items()
    }
    return c.eager(**inputs)


def _flat(value) -> list[torch.Tensor]:
    return list(value) if isinstance(value, (tuple, list)) else [value]


def _check(got, want, case: Case, backend: str) -> None:
    got, want = _flat(got), _flat(want)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape, (backend, g.shape, w.shape)
        if (case.is_bf16 and w.dtype.is_floating_point) or g.dtype == torch.bfloat16:
            assert g.dtype in (torch.bfloat16, torch.float32), g.dtype
            g = g.float()
            w = w.float()
        else:
            assert g.dtype == w.dtype, (backend, g.dtype, w.dtype)
        rtol, atol = case.tol
        torch.testing.assert_close(
            g,
            w,
            rtol=rtol,
            atol=atol,
            equal_nan=True,
            msg=lambda m: f"{case.name} ({backend}): {case.expr}" f"\n{m}",
        )


# ops whose zeros carry a sign torch defines (-0.0 ** 3, fmod(-6, 3), round(-0.3))
SIGNED_ZEROS = {
    "neg",
    "asin",
    "atan",
    "sinh",
    "asinh",
    "atanh",
    "round",
    "where",
    "pow",
    "atan2",
    "copysign",
    "fmod",
    "remainder",
    "floor_divide",
}


def _check_signed_zeros(got, want, case: Case, backend: str) -> None:
    if case.packet not in SIGNED_ZEROS or not want.dtype.is_floating_point:
        return
    zero = want == 0
    assert torch.equal(
        got[zero].signbit(), want[zero].signbit()
    ), f"{case.name} ({backend}): {case.expr}: signs of zeros differ"


def _check_both(case: Case, c: Compiled) -> None:
    want = _reference(case, c)
    args = [t.clone() for t in case.inputs.values()]
    for backend, fn in (("cpu", c.cpu), ("triton", c.cuda)):
        got = fn(*args)
        _check(got, want, case, backend)
        for g, w in zip(_flat(got), _flat(want)):
            _check_signed_zeros(g, w, case, backend)
    for before, after in zip(case.inputs.values(), args):  # inputs are not written
        torch.testing.assert_close(before, after, equal_nan=True, rtol=0, atol=0)


def _check_in_kernels(case: Case, c: Compiled) -> None:
    """Lowered into a kernel, not left to an extern ATen call."""
    for backend, text, launch in (
        ("cpu", c.cpu_source, "_cpp.function("),
        ("cuda", c.cuda_source, "_triton.triton_"),
    ):
        assert f"torch.ops.aten.{case.packet}." not in text, f"{backend}:\n{text}"
        assert launch in text, f"{backend}: no kernel launched:\n{text}"


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_op_case(case: Case, compiled: dict[str, Compiled]) -> None:
    c = compiled[case.name]
    _check_in_kernels(case, c)
    _check_both(case, c)


@pytest.mark.parametrize("case", DECOMPOSED_CASES, ids=lambda c: c.name)
def test_decomposed_op_case(case: Case, compiled: dict[str, Compiled]) -> None:
    c = compiled[case.name]
    _check_in_kernels(case, c)
    _check_both(case, c)


@pytest.mark.parametrize("case", PENDING, ids=lambda c: c.name)
def test_op_without_a_row_computes_eagers_values(
    case: Case, compiled: dict[str, Compiled]
) -> None:
    _check_both(case, compiled[case.name])


@pytest.mark.parametrize("case", EXTERN_CASES, ids=lambda c: c.name)
def test_unlowered_call_stays_extern(case: Case, compiled: dict[str, Compiled]) -> None:
    c = compiled[case.name]
    assert f"torch.ops.aten.{case.packet}." in c.cpu_source, c.cpu_source
    _check_both(case, c)


def test_each_exported_function_runs_its_own_variant(
    compiled: dict[str, Compiled], monkeypatch: pytest.MonkeyPatch
) -> None:
    """All cases are targets of one module: their variants must not share names."""
    import runtime_shim

    def no_fallback(target, misses):
        raise AssertionError(f"{target} fell back to eager: {misses}")

    monkeypatch.setattr(runtime_shim, "warn_fallback", no_fallback)
    for case in ALL_CASES:
        c = compiled[case.name]
        args = list(case.inputs.values())
        assert_same(c(*args), c.cpu(*args))


# Rows of values far from their mean: 1000 + 1e-3 * randn, a row reduced in registers
# (Triton's persistent reduction) and one reduced in a loop (Note [Variance])
FAR_FROM_MEAN = {
    "var_mean": "torch.var_mean(x, -1)",
    "var": "x.var(-1, correction=0)",
    "layer_norm_rstd": "torch.native_layer_norm(x, x.shape[-1:], None, None, 0.0)[2]",
}
FAR_SHAPES = ((4, 1024), (2, 9000))


@pytest.fixture(scope="module")
def far_from_mean(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Compiled]:
    lines = ["import torch", ""]
    functions = {}
    for (name, expr), shape in itertools.product(FAR_FROM_MEAN.items(), FAR_SHAPES):
        fn = f"{name}_{shape[1]}"
        lines += ["", f"def {fn}(x):", f"    return {expr}", ""]
        functions[fn] = {"x": torch.empty(shape)}
    root = tmp_path_factory.mktemp("far_from_mean")
    return compile_source("\n".join(lines), functions, root)


@pytest.mark.parametrize("shape", FAR_SHAPES, ids=lambda s: str(s[1]))
@pytest.mark.parametrize("name", FAR_FROM_MEAN)
def test_variance_of_values_far_from_their_mean(
    name: str, shape: tuple[int, int], far_from_mean: dict[str, Compiled]
) -> None:
    """The variance of values whose mean is large against their spread loses no
    digits (E[x^2] - E[x]^2 loses all, a plain two-pass form a few): relative to
    the variance, not to the mean, like eager's Welford reductions."""
    c = far_from_mean[f"{name}_{shape[1]}"]
    x = 1000 + 1e-3 * torch.randn(shape, generator=torch.Generator().manual_seed(0))
    want = _flat(c.eager(x.double()))
    for backend, fn in (("cpu", c.cpu), ("triton", c.cuda)):
        got = _flat(fn(x.clone()))
        for g, w in zip(got, want):
            torch.testing.assert_close(
                g.double(),
                w,
                rtol=1e-6,
                atol=0,
                msg=lambda m, b=backend: f"{name} of {shape} ({b}): {m}",
            )
