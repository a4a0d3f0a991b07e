"""Every pointwise op over every dtype, on both backends, against eager.

A backend operator does not always mean what the torch op means: `+` on Triton's
1-bit bool wraps (torch's bool add is a logical or), signed overflow is undefined in
C++ (torch wraps), `std::floor` of an int64 goes through double (Note [Operators that
differ from torch's] in codegen/optable.py). So each row of `ir.ops.POINTWISE` is
swept, without a hand-written list, over bool, int32, int64, float16, bfloat16 and
float32 (where eager accepts the op), over every pairing of values that tell the
semantics apart (0, ±1, the type's extremes, NaN, ±inf, ±0, values that round), over
mixed dtypes and Python scalars; then chains where undefined overflow or a wrapped
bool would show. Integers and bools must match exactly, floats to within an ulp of
their type (f16/bf16 are computed in f32 and rounded once). All cases are built in
one run; inputs must be unchanged after the call.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch

from tests.compile_helpers import Compiled, compile_source
from transpiler.ir.ops import POINTWISE

pytestmark = [  # masked-off lanes of Triton's interpreter compute log(0) and such
    pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning"),
    pytest.mark.usefixtures("gpu_bf16_rounding"),  # see tests/codegen/conftest.py
]

aten = torch.ops.aten
DTYPES = (
    torch.bool,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
)
INF, NAN = math.inf, math.nan
FLOATS = (NAN, INF, -INF, 0.0, -0.0, 1.5, -2.5, 1 + 2**-10, 0.1, 3.0, -7.0, 6e4, 1e-3)
# (tensor dtype, other tensor dtype): type promotion between kinds and widths
MIXED = (
    (torch.bool, torch.int32),
    (torch.int32, torch.bool),
    (torch.int32, torch.int64),
    (torch.int64, torch.float32),
    (torch.bool, torch.float16),
    (torch.int32, torch.bfloat16),
    (torch.float16, torch.bfloat16),
    (torch.float16, torch.float32),
)
# Python scalars for `op(tensor, scalar)`, of every kind, for every tensor dtype
SCALARS = (True, -2, 2.5)
# Rows covered, dtype by dtype, by another test
ELSEWHERE = {"aten._to_copy.default": "tests/codegen/test_casts.py"}
# Values a row leaves out: C++'s GELU gives 0 at -inf by design, where eager's
# `x * 0.5 * (1 + erf(x / sqrt(2)))` gives NaN (tests/codegen/test_gelu.py); eager's
# own CPU GELU at +inf is NaN in torch 2.11 and inf in 2.13
LEFT_OUT = {"aten.gelu.default": (-INF, INF)}


def values(dtype: torch.dtype) -> list:
    if dtype == torch.bool:
        return [False, True]
    if dtype.is_floating_point:
        return list(FLOATS)
    info = torch.iinfo(dtype)
    return [0, 1, -1, 2, 3, -3, 7, -7, info.max, info.min, info.max - 1]


def tensor(vals: list, dtype: torch.dtype) -> torch.Tensor:
    source = torch.float64 if dtype.is_floating_point else None
    return torch.tensor(vals, dtype=source).to(dtype)


def pairs(a: torch.dtype, b: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Every value of `a` against every value of `b`."""
    va, vb = values(a), values(b)
    return tensor([x for x in va for _ in vb], a), tensor(
        [y for _ in va for y in vb], b
    )


@dataclass(frozen=True)
class Case:
    name: str
    op: str  # the POINTWISE row
    expr: str
    inputs: dict[str, torch.Tensor]


def _short(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _scalar_name(s) -> str:
    return repr(s).replace("-", "m").replace(".", "p")


def _defined(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The pairs where converting `b` to `a`'s dtype is defined: a float into an
    integer type only where finite and in range (torch leaves the rest to the
    hardware: x86 gives the smallest integer, a GPU saturates)."""
    if a.dtype.is_floating_point or a.dtype == torch.bool:
        return a, b
    if not b.dtype.is_floating_point:
        return a, b
    keep = b.double().abs() < 2.0 ** (torch.iinfo(a.dtype).bits - 1)  # not NaN
    return a[keep], b[keep]


# Rows whose operand is a constant: how a case calls them, `{s}` the fill value
FILLS = {
    "aten.full.default": "aten.full.default([3, 2], {s}, dtype=a.dtype)",
    "aten.full_like.default": "aten.full_like.default(a, {s})",
    "aten.new_full.default": "aten.new_full.default(a, [2, 3], {s})",
    "aten.scalar_tensor.default": "aten.scalar_tensor.default({s}, dtype=a.dtype) + a",
}


def _row_cases(target: str) -> list[Case]:
    """Cases for one row: its operands as tensors of each dtype, mixed dtypes, and
    (for a binary op) Python scalars; a fill value of every kind into each dtype."""
    row = POINTWISE[target]
    base = target.removeprefix("aten.").replace(".", "_")
    out = []
    for dtype in DTYPES:
        left_out = LEFT_OUT.get(target, ())
        a = tensor([v for v in values(dtype) if v not in left_out], dtype)
        name = f"{base}_{_short(dtype)}"
        if target in FILLS:
            for s in (True, 3, -2.5, 0.1):
                expr = FILLS[target].format(s=repr(s))
                out.append(Case(f"{name}_{_scalar_name(s)}", target, expr, {"a": a}))
        elif row.kind == "where":
            a, b = pairs(dtype, dtype)
            c = torch.arange(a.numel()) % 3 == 0
            expr = f"{target}(c, a, b)"
            out.append(Case(name, target, expr, {"c": c, "a": a, "b": b}))
        elif row.operands == (0,):
            out.append(Case(name, target, f"{target}(a)", {"a": a}))
        else:
            out += _binary_cases(target, dtype, a)
    return out


def _binary_cases(target: str, dtype: torch.dtype, a: torch.Tensor) -> list[Case]:
    base = f"{target.removeprefix('aten.').replace('.', '_')}_{_short(dtype)}"
    out = []
    if not target.endswith(".Scalar"):
        for other in [dtype] + [b for x, b in MIXED if x == dtype]:
            x, y = pairs(dtype, other)
            if POINTWISE[target].kind == "cast":  # `b`'s values into `a`'s dtype
                x, y = _defined(x, y)
            name = base + ("" if other == dtype else f"_{_short(other)}")
            out.append(Case(name, target, f"{target}(a, b)", {"a": x, "b": y}))
    for s in SCALARS:
        expr = f"{target}(a, {s!r})"
        out.append(Case(f"{base}_s{_scalar_name(s)}", target, expr, {"a": a}))
    return out


# Chains where an operator's semantics would show past a single op: undefined signed
# overflow folded by the C++ compiler, a bool sum reused.
CHAINS = {
    "add_overflow_compare": ("(a + 1) > a", (torch.int32, torch.int64)),
    "sub_overflow_compare": ("(a - 1) < a", (torch.int32, torch.int64)),
    "neg_overflow_compare": ("(-a) < 0", (torch.int32, torch.int64)),
    "abs_overflow_compare": ("a.abs() >= 0", (torch.int32, torch.int64)),
    "mul_overflow": ("(a * 65536) * 65536 + a", (torch.int32,)),
    "bool_sum_scaled": ("(a + a.logical_not()) * 2 + (a + a)", (torch.bool,)),
    "bool_sum_compared": ("(a + a) == a", (torch.bool,)),
    "bool_sum_to_float": ("(a + ~a).float() * 3", (torch.bool,)),
    "bool_product_sum": ("a * ~a + a", (torch.bool,)),
}


def _chain_cases() -> list[Case]:
    out = []
    for name, (expr, dtypes) in CHAINS.items():
        for dtype in dtypes:
            inputs = {"a": tensor(values(dtype), dtype)}
            out.append(Case(f"{name}_{_short(dtype)}", "chain", expr, inputs))
    return out


def _eager_accepts(case: Case) -> bool:
    try:
        eval(case.expr, {"aten": aten, "torch": torch}, dict(case.inputs))
    except (RuntimeError, TypeError):
        return False
    return True


ALL = [c for t in POINTWISE if t not in ELSEWHERE for c in _row_cases(t)]
CASES = [c for c in ALL + _chain_cases() if _eager_accepts(c)]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Compiled]:
    lines = ["import torch", "", "aten = torch.ops.aten", ""]
    for c in CASES:
        lines += ["", f"def {c.name}({', '.join(c.inputs)}):", f"    return {c.expr}"]
    functions = {c.name: c.inputs for c in CASES}
    root = tmp_path_factory.mktemp("dtype_semantics")
    return compile_source("\n".join(lines) + "\n", functions, root)


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """Exact for bools and integers; an ulp of the type for floats."""
    if not dtype.is_floating_point:
        return 0.0, 0.0
    return {torch.float16: (2**-10, 1e-5), torch.bfloat16: (2**-7, 1e-5)}.get(
        dtype, (1e-5, 1e-6)
    )


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_op_matches_eager_for_its_dtypes(
    case: Case, compiled: dict[str, Compiled]
) -> None:
    c = compiled[case.name]
    if case.op != "chain":  # computed in a kernel, not left to an extern call
        packet = case.op.split(".")[1]
        for text in (c.cpu_source, c.cuda_source):
            assert f"torch.ops.aten.{packet}." not in text, text
    want = c.eager(**case.inputs)
    for backend, fn in (("cpu", c.cpu), ("triton", c.cuda)):
        args = {k: v.clone() for k, v in case.inputs.items()}
        got = fn(**args)
        where = f"{case.name} ({backend}): {case.expr}"
        assert (got.dtype, got.shape) == (want.dtype, want.shape), where
        rtol, atol = tolerance(want.dtype)
        torch.testing.assert_close(
            got,
            want,
            rtol=rtol,
            atol=atol,
            equal_nan=True,
            msg=lambda m, w=where: f"{w}\n{m}",
        )
        for k, v in case.inputs.items():
            torch.testing.assert_close(args[k], v, rtol=0, atol=0, equal_nan=True)


def test_every_pointwise_row_is_swept() -> None:
    """A row added to the tables is swept here with no edit; one that no case
    reaches (eager takes it for no dtype here) would go unchecked."""
    missing = sorted(set(POINTWISE) - {c.op for c in CASES} - set(ELSEWHERE))
    assert not missing, f"rows no case reaches: {missing}"
