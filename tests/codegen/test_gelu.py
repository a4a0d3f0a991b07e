"""Exact GELU is one kernel op: the C++ helper `gelu_f32` (a fit, in
runtime_shim/kernels.h) against a float64 reference on a dense grid, and at the values
where eager's `x * 0.5 * (1 + erf(x / sqrt(2)))` is undefined or saturates."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tests.compile_helpers import Compiled, compile_source

SOURCE = """
import torch.nn.functional as F


def gelu(x):
    return F.gelu(x)


def gelu_special(x):
    return F.gelu(x, approximate="none")


def gelu_special_f64(x):
    return F.gelu(x)
"""

GRID = torch.linspace(-10, 10, 2_000_001)  # every 1e-5
INF, NAN = math.inf, math.nan
SPECIAL = [INF, -INF, NAN, 0.0, -0.0, 5.5, -5.5, 1e30, -1e30, 3e38, -3e38, 1e-30]


def special(name: str) -> torch.Tensor:
    dtype = torch.float64 if name.endswith("f64") else torch.float32
    return torch.tensor(SPECIAL, dtype=dtype)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Compiled]:
    functions = {
        "gelu": {"x": GRID},
        "gelu_special": {"x": special("gelu_special")},
        "gelu_special_f64": {"x": special("gelu_special_f64")},
    }
    return compile_source(SOURCE, functions, tmp_path_factory.mktemp("gelu"))


def test_one_kernel_op(compiled: dict[str, Compiled]) -> None:
    kernels = compiled["gelu"].cpp_text.split('extern "C"', 1)[1]
    assert "gelu_f32(" in kernels and "erf_f32(" not in kernels
    for c in compiled.values():
        assert "torch.ops.aten.gelu" not in c.cpu_source, c.cpu_source


def test_error_on_a_dense_grid(compiled: dict[str, Compiled]) -> None:
    got = compiled["gelu"].cpu(GRID).double()
    x = GRID.double()
    error = (got - F.gelu(x)).abs()
    assert (error / x.abs().clamp(min=1)).max().item() < 1.5e-7
    assert (error / x.abs().clamp(min=1e-30)).max().item() < 1.8e-7  # near 0 too


@pytest.mark.parametrize("name", ["gelu_special", "gelu_special_f64"])
def test_special_values(compiled: dict[str, Compiled], name: str) -> None:
    x = special(name)
    got = compiled[name].cpu(x)
    assert got[0].item() == INF
    assert got[1].item() == 0  # -inf * Phi(-inf): 0, not -inf * 0
    assert math.isnan(got[2].item())
    x, got = x[3:].double(), got[3:].double()
    assert ((got - F.gelu(x)).abs() / x.abs().clamp(min=1)).max().item() < 1.5e-7
