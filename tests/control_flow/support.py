"""Helpers for the control-flow tests: the checked-in examples' variants, the one-time
fallback warning of generated modules, and builds with hand-picked variants.

Generated modules warn once per process and message (`runtime_shim.warn`); the
`fresh_warnings` fixture (conftest.py) forgets what was warned so each test sees its
own warning.
"""

from __future__ import annotations

import contextlib
import functools
import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch

from tests.compile_helpers import import_generated, unique_name
from tests.devices import on_gpu
from tests.helpers import Case, generated_module, load_cases, variant_function
from transpiler.api import build
from transpiler.options import Options, Target, Variant

FALLBACK_TEXT = "running the source (eager) code"


# ---------------------------------------------------------------- checked-in examples


@functools.cache
def _cases() -> tuple[Case, ...]:
    return load_cases()


def example_case(source: str, device: str, position: int = 0) -> Case:
    """The `position`-th `device` variant of a `[tool.transpile]` target."""
    found = [c for c in _cases() if c.source == source and c.device == device]
    assert len(found) > position, f"no {device} variant {position} of {source}"
    return found[position]


def exported(case: Case) -> Any:
    """The generated module's drop-in replacement (class or function)."""
    return getattr(generated_module(case), case.name)


def variant_of(case: Case) -> Callable[..., Any]:
    """The case's `_cpu_N` / `_cuda_N` function (a `_cuda_N` runs its Triton kernels
    in Triton's interpreter when called with CPU tensors, on the GPU in GPU mode:
    tests/devices.py)."""
    fn = variant_function(case)
    return on_gpu(fn) if case.device == "cuda" else fn


def spy_on(
    monkeypatch: pytest.MonkeyPatch, module: ModuleType, name: str
) -> list[tuple]:
    """Count calls of `module.<name>` (a variant function the dispatch looks up)."""
    fn = getattr(module, name)
    calls: list[tuple] = []

    @functools.wraps(fn)
    def counted(*args: Any, **kwargs: Any) -> Any:
        calls.append(args)
        return fn(*args, **kwargs)

    monkeypatch.setattr(module, name, counted)
    return calls


def copy_weights(eager: torch.nn.Module, generated: torch.nn.Module) -> None:
    generated.load_state_dict(eager.state_dict())
    eager.eval()
    generated.eval()


# -------------------------------------------------------------------- fallback warnings


@contextlib.contextmanager
def recorded_warnings() -> Iterator[list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        yield record


def fallback_messages(record: Sequence[warnings.WarningMessage]) -> list[str]:
    """The generated modules' fallback warnings among `record`."""
    return [
        str(w.message)
        for w in record
        if issubclass(w.category, RuntimeWarning) and FALLBACK_TEXT in str(w.message)
    ]


def assert_one_fallback(
    record: Sequence[warnings.WarningMessage], variant: str, guard: str
) -> str:
    """Exactly one fallback warning, saying that `variant` needs `guard`."""
    messages = fallback_messages(record)
    assert len(messages) == 1, messages
    (message,) = messages
    assert f"variant {variant} needs {guard}" in message, message
    return message


@contextlib.contextmanager
def no_fallback() -> Iterator[None]:
    """Fail on any warning, a fallback to eager included."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        yield


def variant_name(fn: Callable[..., Any]) -> str:
    """`_cpu_3` -> `cpu_3`: the name guards and warnings use."""
    return fn.__name__.lstrip("_")


# ------------------------------------------------------------------------------ builds


def compile_variants(
    source: str, name: str, variants: Sequence[Variant], root: Path
) -> ModuleType:
    """Build one target of `source` with exactly `variants` (any devices) and import
    the generated module."""
    root.mkdir(parents=True, exist_ok=True)
    stem = unique_name("src")
    (root / f"{stem}.py").write_text(source)
    target = Target(f"{stem}.py::{name}", tuple(variants))
    return import_generated(build(Options(targets=(target,), root=root)), root, stem)


def line_of(source: str, needle: str, after: str | None = None) -> int:
    """The 1-based line of `source` holding `needle`: the only one, or with `after`,
    the first one after the (only) line holding `after`."""
    lines = source.splitlines()
    start = 0 if after is None else line_of(source, after)
    hits = [i for i, line in enumerate(lines, 1) if needle in line and i > start]
    assert hits and (after is not None or len(hits) == 1), (needle, after, hits)
    return hits[0]


def count_calls(pattern: str, text: str) -> dict[str, int]:
    """How often each name matching `pattern` (one group) occurs in `text`."""
    counts: dict[str, int] = {}
    for name in re.findall(pattern, text):
        counts[name] = counts.get(name, 0) + 1
    return counts
