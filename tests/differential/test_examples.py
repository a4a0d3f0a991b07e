"""Differential tests: every variant of every `[tool.transpile]` target vs eager.

Uses the checked-in `generated/` modules (the golden test keeps them fresh).

- cpu variants run through the exported class or function (C++ kernels); they must not
  fall back to eager, and the dispatch must reach the variant's own `_cpu_N`.
- cuda variants run their `_cuda_N` function on CPU tensors in Triton's CPU interpreter
  (`TRITON_INTERPRET=1`, set by conftest.py); on a machine with a GPU they run through
  the exported API on the GPU instead.

Each variant is checked on two freshly drawn inputs: one under `torch.no_grad()`, one
with autograd enabled on frozen weights (`requires_grad_(False)`: nothing needs a
gradient, so no variant has a reason to fall back). Module weights are seeded random
(see `helpers.build_pair`). Each call is `helpers.check_call`: outputs, and every
input, parameter, buffer and plain attribute after the call, must agree with eager's.
Tolerances: see `helpers`.

The last section checks what variants must not take: calls needing autograd, and a
model converted to another dtype, run eager (or match it exactly).
"""

from __future__ import annotations

import contextlib
import functools
import os
import warnings
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import torch

import runtime_shim
from tests.helpers import (
    LOW_PRECISION,
    Case,
    assert_close,
    build_pair,
    check_call,
    flatten,
    generated_module,
    load_cases,
    make_inputs,
    reference,
    source_object,
    variant_dtype,
    variant_function,
)

CASES = load_cases()
SEEDS = (0, 1)  # seed 0 runs under torch.no_grad(), seed 1 with autograd enabled


def ids(case: Case) -> str:
    return case.label


@pytest.fixture
def no_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    """Fail on a fallback even when `warn_fallback` already warned in this process."""

    def fallback(target: str, misses: list[tuple[str, str | None]]) -> None:
        raise AssertionError(f"{target} fell back to eager: {misses}")

    monkeypatch.setattr(runtime_shim, "warn_fallback", fallback)


def spy(monkeypatch: pytest.MonkeyPatch, case: Case) -> list[object]:
    """Replace the variant's `_<device>_N` in its module by a wrapper counting calls."""
    fn = variant_function(case)
    calls: list[object] = []

    @functools.wraps(fn)
    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return fn(*args, **kwargs)

    monkeypatch.setattr(generated_module(case), fn.__name__, counted)
    return calls


def grad_mode(seed: int) -> contextlib.AbstractContextManager:
    return torch.no_grad() if seed == SEEDS[0] else torch.enable_grad()


def freeze(*modules: object) -> None:
    for module in modules:
        if isinstance(module, torch.nn.Module):
            module.requires_grad_(False)


@contextlib.contextmanager
def strict(seed: int) -> Iterator[None]:
    """The generated call's context: the seed's grad mode, every warning an error."""
    with grad_mode(seed), warnings.catch_warnings():
        warnings.simplefilter("error")  # a fallback, or a generated-code warning
        # NumPy under Triton's interpreter, on lanes the kernel masks off
        warnings.filterwarnings("ignore", "(divide by zero|invalid value)")
        yield


def check_against_eager(
    case: Case, eager: Callable[..., Any], run: Callable[..., Any], device: str
) -> None:
    """Run `run` and eager on each seed's inputs (`check_call`): outputs, inputs,
    parameters and buffers after the call must agree."""
    dtype = variant_dtype(case.variant.inputs)
    for seed in SEEDS:
        inputs = make_inputs(case.variant.inputs, seed)
        where = f"{case.label} seed {seed}"
        with torch.no_grad():  # eager's; `strict` sets the generated call's mode
            context = functools.partial(strict, seed)
            check_call(run, eager, inputs, dtype, where, device=device, context=context)


@pytest.mark.parametrize("case", [c for c in CASES if c.device == "cpu"], ids=ids)
def test_cpu_variant_matches_eager(
    case: Case, monkeypatch: pytest.MonkeyPatch, no_fallback: None
) -> None:
    calls = spy(monkeypatch, case)
    exported = getattr(generated_module(case), case.name)
    eager, generated = build_pair(source_object(case), exported, dict(case.init))
    freeze(eager, generated)
    check_against_eager(case, eager, generated, "cpu")
    assert len(calls) == len(SEEDS), f"{case.label}: dispatch missed the variant"


@pytest.mark.parametrize("case", [c for c in CASES if c.device == "cuda"], ids=ids)
def test_triton_variant_matches_eager(
    case: Case, monkeypatch: pytest.MonkeyPatch, no_fallback: None
) -> None:
    pytest.importorskip("triton")
    on_gpu = torch.cuda.is_available()
    if not on_gpu and os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("no GPU, and TRITON_INTERPRET is not 1")
    device = "cuda" if on_gpu else "cpu"
    calls = spy(monkeypatch, case)
    exported = getattr(generated_module(case), case.name)
    eager, generated = build_pair(source_object(case), exported, dict(case.init))
    freeze(eager, generated)
    if isinstance(generated, torch.nn.Module):
        generated = generated.to(device)
    if on_gpu:
        run = generated  # through the guards, like a user
    else:  # the guards want cuda tensors: call the variant with CPU ones
        fn = variant_function(case)  # the spy
        is_module = isinstance(generated, torch.nn.Module)
        run = functools.partial(fn, generated) if is_module else fn
    check_against_eager(case, eager, run, device)
    assert len(calls) == len(SEEDS), f"{case.label}: the variant did not run"


# ------------------------------------------ autograd and converted models: eager


def is_module_case(case: Case) -> bool:
    source = source_object(case)
    return isinstance(source, type) and issubclass(source, torch.nn.Module)


@pytest.fixture
def fallbacks(monkeypatch: pytest.MonkeyPatch) -> list[object]:
    """Record fallbacks (the correct answer to a call no variant can take)."""
    seen: list[object] = []
    monkeypatch.setattr(runtime_shim, "warn_fallback", lambda *args: seen.append(args))
    return seen


def gradients(fn: Callable[..., Any], inputs: dict[str, object]) -> list[object]:
    """d(sum of outputs)/d(each float input, then each parameter)."""
    leaves = {
        name: value.detach().clone().requires_grad_()
        for name, value in inputs.items()
        if isinstance(value, torch.Tensor) and value.is_floating_point()
    }
    outputs = flatten(fn(**{**inputs, **leaves}))
    sum(
        out.float().sum() for out in outputs if isinstance(out, torch.Tensor)
    ).backward()
    params = list(fn.parameters()) if isinstance(fn, torch.nn.Module) else []
    return [leaf.grad for leaf in leaves.values()] + [p.grad for p in params]


@pytest.mark.parametrize("case", [c for c in CASES if c.device == "cpu"], ids=ids)
def test_autograd_is_exact_or_falls_back(case: Case, fallbacks: list[object]) -> None:
    exported = getattr(generated_module(case), case.name)
    eager, generated = build_pair(source_object(case), exported, dict(case.init))
    inputs = make_inputs(case.variant.inputs, seed=0)
    expected = gradients(eager, inputs)
    actual = gradients(generated, inputs)
    if fallbacks:
        return
    for i, (a, e) in enumerate(zip(actual, expected)):
        assert (a is None) == (e is None), f"gradient {i}: {a} vs eager {e}"
        if e is not None:
            dtype = variant_dtype(case.variant.inputs)
            assert_close(a.float(), e.float(), dtype, f"gradient {i}")


@pytest.mark.parametrize(
    "case",
    [
        c
        for c in CASES
        if c.device == "cpu"
        and variant_dtype(c.variant.inputs) in LOW_PRECISION
        and is_module_case(c)
    ],
    ids=ids,
)
def test_converted_model_is_exact_or_falls_back(
    case: Case, fallbacks: list[object]
) -> None:
    dtype = variant_dtype(case.variant.inputs)
    exported = getattr(generated_module(case), case.name)
    eager, generated = build_pair(source_object(case), exported, dict(case.init))
    eager, generated = eager.to(dtype), generated.to(dtype)
    inputs = make_inputs(case.variant.inputs, seed=0)
    with torch.no_grad():
        expected = reference(eager, inputs, dtype)
        actual = generated(**inputs)
    assert_close(actual, expected, dtype, case.label)
