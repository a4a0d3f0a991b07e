"""Bounds of a kernel's values computed from positions and constants.

A kernel's statements that read no memory (a coordinate, a position scaled to
a source pixel, a clamp of it) take values that depend on the iteration range
alone, and those values lie within bounds found by interval arithmetic over the
statements in order. The C++ code uses them to compute integers that fit in 32
bits as `int32_t` (Note [Integers in 32 bits] in codegen/cpp.py).

Integer bounds are exact for what each op can produce. Float bounds are widened
at every op by `FLOAT_SLACK` epsilons of their dtype (of bfloat16 for a rounding
to it) times their magnitude, so that the op's rounding, or a fused multiply-add
in its place, stays inside them: they bound the values, not tightly. A
value that could be NaN or infinite, or that anything read from memory reaches,
has no bounds.
"""

from __future__ import annotations

import math

import torch

from transpiler.ir.dynamic import Dim
from transpiler.ir.program import Const, Index, Kernel, Stmt

Bounds = tuple[float, float]  # (least, greatest), both included

FLOAT_SLACK = 4  # a float result's widening at each op, in its dtype's epsilons
ROUNDINGS = {"round_bf16": torch.bfloat16, "round_f16": torch.float16}
FLOAT_MAX = 2.0**100  # beyond this a float bound is not kept (overflow, inf)
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1
INT_LIMITS = {
    torch.int64: (-(2**63), 2**63 - 1),
    torch.int32: (-(2**31), 2**31 - 1),
    torch.int16: (-(2**15), 2**15 - 1),
    torch.int8: (-(2**7), 2**7 - 1),
    torch.uint8: (0, 2**8 - 1),
    torch.bool: (0, 1),
}
_BOOLEAN = {"eq", "ne", "lt", "le", "gt", "ge", "logical_and", "logical_or"}
_BOOLEAN |= {"logical_not", "isnan", "signbit"}
_MONOTONE = {"identity", "floor", "ceil", "trunc", "round", "round_f16", "round_bf16"}


def kernel_bounds(k: Kernel) -> dict[str, Bounds]:
    """The bounds of each of `k`'s statements that has them (see the module's
    docstring), by name."""
    loops = {"x": k.xnumel, "r": k.rnumel}
    known: dict[str, Bounds] = {}
    dtypes = {s.name: s.dtype for s in k.body if isinstance(s, Stmt)}
    for s in k.body:
        if isinstance(s, Stmt):
            b = _stmt_bounds(s, known, loops, dtypes)
            if b is not None:
                known[s.name] = b
    return known


def fits_int32(b: Bounds | None) -> bool:
    """Whether integer bounds `b` (None: none known) lie within int32."""
    if b is None or not all(isinstance(v, int) for v in b):
        return False
    return INT32_MIN <= b[0] and b[1] <= INT32_MAX


def index_bounds(
    index: Index, known: dict[str, Bounds], loops: dict[str, int | Dim]
) -> Bounds | None:
    """The bounds of an address or coordinate `index` as the C++ code computes
    it: `(v / div) % mod` of a loop variable of range `loops[v]` (the `%` left
    out where the range never reaches it), `v / div` of a statement."""
    lo = hi = index.offset
    if not isinstance(lo, int):
        return None
    for t in index.terms:
        if not all(isinstance(n, int) for n in (t.div, t.mod, t.stride)):
            return None
        if t.var in known:
            a, b = known[t.var]
            if t.div != 1:  # C's division truncates toward zero: monotone
                a, b = int(a / t.div), int(b / t.div)
        elif isinstance(loops.get(t.var), int):
            a, b = 0, max((loops[t.var] - 1) // t.div, 0)
            if b >= t.mod:
                b = t.mod - 1
        else:
            return None
        ends = (t.stride * a, t.stride * b)
        lo, hi = lo + min(ends), hi + max(ends)
    return lo, hi


def _stmt_bounds(
    s: Stmt,
    known: dict[str, Bounds],
    loops: dict[str, int | Dim],
    dtypes: dict[str, torch.dtype],
) -> Bounds | None:
    if s.op == "index":
        return index_bounds(s.args[0], known, loops)
    if s.op in ("load", "reduce", "scan"):
        return None
    if s.op in _BOOLEAN or s.dtype == torch.bool:
        return 0, 1
    args = []
    for a in s.args:
        if isinstance(a, Const):
            if isinstance(a.value, bool | int | float) and math.isfinite(a.value):
                args.append((a.value, a.value))
            else:
                return None
        elif a in known:
            args.append(known[a])
        else:
            return None
    b = _op_bounds(s.op, args, s.dtype)
    if b is None:
        return None
    lo, hi = b
    if s.dtype.is_floating_point:
        rounded = ROUNDINGS.get(s.op, s.dtype)
        slack = FLOAT_SLACK * torch.finfo(rounded).eps * max(abs(lo), abs(hi))
        lo, hi = lo - slack, hi + slack
        return (lo, hi) if max(-lo, hi) < FLOAT_MAX else None
    if s.dtype not in INT_LIMITS:
        return None
    least, greatest = INT_LIMITS[s.dtype]
    lo, hi = math.floor(lo), math.ceil(hi)  # a float's bounds cast to an int
    src = s.args[0] if s.op == "cast" else None
    src_dtype = src.dtype if isinstance(src, Const) else dtypes.get(src)
    if src_dtype is not None and src_dtype.is_floating_point:
        lo, hi = int(b[0]), int(b[1])  # a float converted: truncated
    return (lo, hi) if least <= lo and hi <= greatest else None  # else it wraps


def _op_bounds(op: str, args: list[Bounds], dtype: torch.dtype) -> Bounds | None:
    """Interval arithmetic: the bounds of `op` over operands within `args`."""
    if op in _MONOTONE or op == "cast":
        (a,) = args
        if op in ("floor", "ceil", "trunc", "round") and dtype.is_floating_point:
            return math.floor(a[0]), math.ceil(a[1])
        return a
    if op == "neg":
        return -args[0][1], -args[0][0]
    if op == "abs":
        lo, hi = args[0]
        return (0 if lo <= 0 <= hi else min(abs(lo), abs(hi))), max(abs(lo), abs(hi))
    if op == "relu":
        return max(args[0][0], 0), max(args[0][1], 0)
    if op == "sign":
        return -1, 1
    if op in ("add", "sub", "rsub"):
        a, b = args if op != "rsub" else args[::-1]
        if op == "add":
            return a[0] + b[0], a[1] + b[1]
        return a[0] - b[1], a[1] - b[0]
    if op == "mul":
        a, b = args
        ends = [x * y for x in a for y in b]
        return min(ends), max(ends)
    if op in ("maximum", "minimum"):
        pick = max if op == "maximum" else min
        a, b = args
        return pick(a[0], b[0]), pick(a[1], b[1])
    if op == "where":
        _, a, b = args
        return min(a[0], b[0]), max(a[1], b[1])
    if op == "truediv" and dtype.is_floating_point:
        a, b = args
        if b[0] <= 0 <= b[1]:
            return None
        ends = [x / y for x in a for y in b]
        return min(ends), max(ends)
    if op == "floor_divide" and not dtype.is_floating_point:
        a, b = args
        if b[0] != b[1] or b[0] <= 0:
            return None
        return a[0] // b[0], a[1] // b[0]
    if op == "remainder" and not dtype.is_floating_point:
        a, b = args
        if b[0] != b[1] or b[0] <= 0:
            return None
        d = b[0]
        if a[0] // d == a[1] // d:  # one period: the values themselves, shifted
            return a[0] % d, a[1] % d
        return 0, d - 1
    return None


__all__ = [
    "FLOAT_SLACK",
    "INT32_MAX",
    "INT32_MIN",
    "Bounds",
    "fits_int32",
    "index_bounds",
    "kernel_bounds",
]
