"""Run a function on clones of a case's inputs, and compare two runs.

A run is its result and its inputs after the call (in-place updates show there). Two
runs agree when both raised, or when neither did and their results and inputs after
the call agree: same structure (a named tuple stays one), same tensor dtypes and
shapes, integers and bools exactly, floats within a tolerance of the result's dtype
(NaN equal to NaN), complex numbers as pairs of floats. Low-precision results are
compared with eager's in the same dtype (the sweep may also compare them with an
eager run in float32, rounded: `like`). A case's `precision` picks the tolerance:
"pointwise", "loose" (reductions), "exact" (casts) or "uninitialized" (`torch.empty`:
dtypes and shapes only).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

# (rtol, atol) for pointwise ops; other ops (reductions, norms, matmul) get twice that
# for low precision and ten times for float32, whose sums reassociate; casts none
TOLERANCE = {
    torch.float32: (1e-5, 1e-5),
    torch.float64: (1e-7, 1e-7),
    torch.bfloat16: (1.6e-2, 1e-2),
    torch.float16: (1e-2, 1e-3),
}
LOOSER = {torch.float32: 10, torch.float64: 10, torch.bfloat16: 2, torch.float16: 2}
LOW_PRECISION = (torch.float16, torch.bfloat16)


@dataclass
class Ran:
    out: Any
    after: dict[str, torch.Tensor]  # the inputs after the call
    exc: BaseException | None


def call(fn: Callable, inputs: tuple[tuple[str, torch.Tensor], ...], seed: int = 0):
    args = {name: t.clone() for name, t in inputs}
    torch.default_generator.manual_seed(seed)  # the CPU's; torch.manual_seed is slow
    try:
        return Ran(fn(**args), args, None)
    except Exception as e:  # the op's own error is a result
        return Ran(None, args, e)


def upcast_inputs(
    inputs: tuple[tuple[str, torch.Tensor], ...],
    kinds: tuple[torch.dtype, ...] = LOW_PRECISION,
    to: torch.dtype = torch.float32,
) -> tuple[tuple[str, torch.Tensor], ...]:
    """The inputs with tensors of `kinds` (f16/bf16) in `to` (float32)."""
    return tuple((name, t.to(to) if t.dtype in kinds else t) for name, t in inputs)


def on_meta(
    inputs: tuple[tuple[str, torch.Tensor], ...],
) -> tuple[tuple[str, torch.Tensor], ...]:
    return tuple((name, t.to("meta")) for name, t in inputs)


def like(run: Ran, model: Ran) -> Ran:
    """`run`'s results and inputs after the call in the dtypes of `model`'s (the
    same structure), wherever the shapes agree."""
    return Ran(_like(run.out, model.out), _like(run.after, model.after), run.exc)


def _like(value: Any, model: Any) -> Any:
    if isinstance(value, torch.Tensor) and isinstance(model, torch.Tensor):
        same = value.shape == model.shape and value.layout == torch.strided
        return value.to(model.dtype) if same else value
    if isinstance(value, dict) and isinstance(model, dict):
        return {k: _like(v, model.get(k)) for k, v in value.items()}
    if isinstance(value, (tuple, list)) and isinstance(model, (tuple, list)):
        if len(value) != len(model):
            return value
        items = [_like(v, m) for v, m in zip(value, model)]
        return value._make(items) if hasattr(value, "_make") else type(value)(items)
    return value


def difference(got: Ran, want: Ran, precision: str) -> str | None:
    """How `got` differs from `want`, or None. Both must not have raised."""
    d = diff(got.out, want.out, precision, "result")
    for name, t in want.after.items():
        d = d or diff(got.after[name], t, precision, f"input {name} after the call")
    return d


def tolerance(dtype: torch.dtype, precision: str) -> tuple[float, float]:
    if precision == "exact":
        return 0.0, 0.0
    rtol, atol = TOLERANCE[dtype]
    k = LOOSER[dtype] if precision == "loose" else 1
    return rtol * k, atol * k


def diff(got: Any, want: Any, precision: str, where: str) -> str | None:
    if isinstance(want, torch.Tensor):
        return tensor_diff(got, want, precision, where)
    if isinstance(want, (tuple, list)):
        if not isinstance(got, (tuple, list)) or len(got) != len(want):
            return f"{where}: {short(got)}, eager {short(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            d = diff(g, w, precision, f"{where}[{i}]")
            if d:
                return d
        if sequence_kind(got) != sequence_kind(want):  # after the values: those first
            return f"{where}: {type(got).__name__}, eager {type(want).__name__}"
        return None
    if type(got) is not type(want):
        return f"{where}: {type(got).__name__}, eager {type(want).__name__}"
    if isinstance(want, float):
        same = math.isclose(got, want, rel_tol=1e-5, abs_tol=1e-6) or (
            math.isnan(got) and math.isnan(want)
        )
        return None if same else f"{where}: {got!r}, eager {want!r}"
    return None if got == want else f"{where}: {got!r}, eager {want!r}"


def short(v: Any) -> str:
    n = f" of {len(v)}" if isinstance(v, (tuple, list)) else ""
    return type(v).__name__ + n


def sequence_kind(v: Any) -> type:
    """torch.Size passes for a tuple; a plain tuple does not pass for a named one
    (`torch.return_types.max`), nor a tuple for a list."""
    return tuple if type(v) is torch.Size else type(v)


def tensor_diff(got: Any, want: torch.Tensor, precision: str, where: str):
    if not isinstance(got, torch.Tensor):
        return f"{where}: {type(got).__name__}, eager a tensor"
    if got.dtype != want.dtype or got.shape != want.shape:
        return (
            f"{where}: {got.dtype} {tuple(got.shape)}, "
            f"eager {want.dtype} {tuple(want.shape)}"
        )
    if precision == "uninitialized":
        return None
    if want.layout != torch.strided:  # sparse: as dense, once the layouts agree
        if got.layout != want.layout:
            return f"{where}: {got.layout}, eager {want.layout}"
        got, want = got.to_dense(), want.to_dense()
    got, want = got.detach().cpu(), want.detach()
    if want.is_complex():  # as pairs of reals, within the reals' tolerance
        got, want = real_view(got), real_view(want)
    if not want.is_floating_point():
        if torch.equal(got, want):
            return None
        bad = (got != want).nonzero()[0].tolist() if got.dim() else []
        return f"{where}: at {bad}: {value_at(got, bad)}, eager {value_at(want, bad)}"
    rtol, atol = tolerance(want.dtype, precision)
    try:
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)
    except AssertionError as e:
        lines = [ln.strip() for ln in str(e).splitlines() if ln.strip()]
        return f"{where}: " + "; ".join(lines[1:4])
    return None


def real_view(t: torch.Tensor) -> torch.Tensor:
    if t.dtype == torch.complex32:  # no view_as_real for it
        return torch.view_as_real(t.to(torch.complex64)).half()
    return torch.view_as_real(t.resolve_conj())


def value_at(t: torch.Tensor, index: list[int]):
    return t[tuple(index)].item() if t.dim() else t.item()
