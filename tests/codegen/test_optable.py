"""The op tables: every kernel op has one row per backend, and no row is dead.

A kernel op is used by `ir.ops.POINTWISE`, or emitted by the scheduler itself (the
arithmetic that finishes a mean or a variance, the rounding of a cast to f16/bf16:
`ir.ops.ROUNDING`). `load`, `reduce`, `scan` and `cast` are rendered by each backend's
skeleton, not by the tables. A typed row (Note [Operators that differ from torch's])
overrides a general row of its own backend; tests/codegen/test_dtype_semantics.py
runs every row over every dtype on both backends.
"""

from __future__ import annotations

import importlib
import inspect
import math
import re
import string

import pytest
import torch

from transpiler.codegen import optable, triton
from transpiler.codegen.optable import (
    CPP,
    CPP_TYPED,
    TRITON,
    TRITON_TYPED,
    cpp_literal,
    dtype_kind,
    triton_literal,
)
from transpiler.ir.ops import POINTWISE, ROUNDING, SUPPORTED_DTYPES

SKELETON_OPS = {"load", "reduce", "scan", "cast", "index"}  # rendered by the backends


def scheduler_ops() -> set[str]:
    """Kernel ops the scheduler emits by name (`self.emit("sub", ...)`)."""
    text = inspect.getsource(importlib.import_module("transpiler.passes.schedule"))
    return set(re.findall(r'emit\(\s*"(\w+)"', text)) - SKELETON_OPS


def used_ops() -> set[str]:
    return (
        ({row.op for row in POINTWISE.values()} - SKELETON_OPS)
        | scheduler_ops()
        | set(ROUNDING.values())
    )


def test_scheduler_ops_are_found() -> None:
    assert {"truediv", "sub", "mul"} <= scheduler_ops()


@pytest.mark.parametrize("table", [TRITON, CPP], ids=["triton", "cpp"])
def test_every_used_op_has_a_row(table: dict[str, str]) -> None:
    missing = sorted(used_ops() - set(table))
    assert not missing, f"add rows for {missing}"


@pytest.mark.parametrize("table", [TRITON, CPP], ids=["triton", "cpp"])
def test_no_dead_rows(table: dict[str, str]) -> None:
    dead = sorted(set(table) - used_ops())
    assert not dead, f"rows no lowering uses: {dead}"


def test_backends_have_the_same_ops() -> None:
    assert sorted(TRITON) == sorted(CPP)


def _placeholders(template: str) -> set[int]:
    fields = {f for _, f, _, _ in string.Formatter().parse(template) if f is not None}
    assert all(f.isdigit() for f in fields), template
    return {int(f) for f in fields}


@pytest.mark.parametrize("key", sorted(POINTWISE))
def test_row_uses_exactly_its_operands(key: str) -> None:
    row = POINTWISE[key]
    n = len(row.operands)
    if row.kind == "iota":  # a range: its position, rendered by the skeleton
        assert row.op == "index", key
        return
    for table in (TRITON, CPP):
        assert _placeholders(table[row.op]) == set(range(n)), (key, table[row.op])


def test_rows_agree_on_arity() -> None:
    for op in TRITON:
        assert _placeholders(TRITON[op]) == _placeholders(CPP[op]), op


@pytest.mark.parametrize(
    "table, typed", [(TRITON, TRITON_TYPED), (CPP, CPP_TYPED)], ids=["triton", "cpp"]
)
def test_typed_rows_override_general_rows(table: dict, typed: dict) -> None:
    kinds = {dtype_kind(d) for d in SUPPORTED_DTYPES}
    for (op, kind), text in typed.items():
        assert op in table, f"typed row for {op}, which has no general row"
        assert kind in kinds, (op, kind)
        assert _placeholders(text) == _placeholders(table[op]), (op, kind, text)


def test_triton_helpers_have_source() -> None:
    for helper in optable.TRITON_HELPERS:
        assert helper in triton.HELPER_SOURCE
        assert f"def {helper}(" in triton.HELPER_SOURCE[helper]
    used = {h for text in TRITON.values() for h in re.findall(r"\b(_\w+)\(", text)}
    assert used <= set(optable.TRITON_HELPERS)


def test_dtype_tables_cover_the_supported_dtypes() -> None:
    from transpiler.ir.ops import SUPPORTED_DTYPES

    assert set(SUPPORTED_DTYPES) <= set(optable.TRITON_DTYPES)
    assert set(SUPPORTED_DTYPES) <= set(optable.CPP_TYPES)


@pytest.mark.parametrize(
    "value, dtype, want",
    [
        (1.5, torch.float32, "1.5f"),
        (1.5, torch.float64, "1.5"),
        (2, torch.float32, "2.0f"),
        (math.nan, torch.float32, "NAN"),
        (math.inf, torch.float32, "INFINITY"),
        (-math.inf, torch.float64, "-INFINITY"),
        (True, torch.bool, "true"),
        (0, torch.bool, "false"),
        (3, torch.int32, "3"),
        (-3, torch.int64, "int64_t{-3}"),
    ],
)
def test_cpp_literal(value, dtype: torch.dtype, want: str) -> None:
    assert cpp_literal(value, dtype) == want


@pytest.mark.parametrize(
    "value, dtype, want",
    [
        (1.5, torch.float32, "1.5"),
        (2, torch.float32, "2.0"),
        (math.nan, torch.float32, 'float("nan")'),
        (-math.inf, torch.float32, 'float("-inf")'),
        (True, torch.bool, "1"),
        (-3, torch.int64, "-3"),
        (-0.0, torch.float32, optable._NEGATIVE_ZERO[False]),
        (-0.0, torch.float64, optable._NEGATIVE_ZERO[True]),
        (0.0, torch.float32, "0.0"),
    ],
)
def test_triton_literal(value, dtype: torch.dtype, want: str) -> None:
    assert triton_literal(value, dtype) == want
