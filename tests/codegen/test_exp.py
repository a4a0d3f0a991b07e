"""The C++ helper `exp_f32` (runtime_shim/kernels.h) against a float64 reference:
within one ulp from 2.1e-38 (below which it flushes to 0) up to the largest float, and
what `torch.exp` gives at infinities, NaN and past the top of the float range."""

from __future__ import annotations

import math

import pytest
import torch

from tests.compile_helpers import Compiled, compile_source

SOURCE = """
import torch


def exp(x):
    return torch.exp(x)


def exp_special(x):
    return torch.exp(x)
"""

GRID = torch.linspace(-86.98, 88.72, 2_000_001)  # every 8.8e-5
INF, NAN = math.inf, math.nan
SPECIAL = [INF, -INF, NAN, 0.0, -0.0, 1e30, -1e30, 89.0, -88.0, -1000.0]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Compiled]:
    functions = {
        "exp": {"x": GRID},
        "exp_special": {"x": torch.tensor(SPECIAL)},
    }
    return compile_source(SOURCE, functions, tmp_path_factory.mktemp("exp"))


def test_within_one_ulp(compiled: dict[str, Compiled]) -> None:
    kernels = compiled["exp"].cpp_text.split('extern "C"', 1)[1]
    assert "exp_f32(" in kernels
    got = compiled["exp"].cpu(GRID)
    want = torch.exp(GRID.double())
    ulp = torch.nextafter(got, torch.tensor(INF)) - got
    assert ((got.double() - want).abs() / ulp.double()).max().item() < 1.0


def test_special_values(compiled: dict[str, Compiled]) -> None:
    got = compiled["exp_special"].cpu(torch.tensor(SPECIAL)).tolist()
    assert got[:2] == [INF, 0.0]
    assert math.isnan(got[2])
    assert got[3:] == [1.0, 1.0, INF, 0.0, INF, 0.0, 0.0]
