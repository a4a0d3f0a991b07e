"""C++ kernels multiply by a constant's reciprocal instead of dividing by it.

A vector division costs about as much as twenty multiplies, and a hard swish
(`x * relu6(x + 3) / 6`) divides each element. `x / 6` is computed as
`x * (1.0f / 6.0f)`, the constant folded by the compiler: within an ulp of the
division, as Inductor computes it. A power of two is left a division (the
compiler multiplies by it already, exactly), and so is a divisor whose
reciprocal is not a normal number (0, 1e-39 in f32). Each function runs on both
backends against eager on random values and the edges (+-0, +-inf, NaN, large).
"""

from __future__ import annotations

import re

import pytest
import torch

from tests.compile_helpers import compile_source

pytestmark = [  # Triton's interpreter computes the edges with NumPy, which warns
    pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value encountered:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:divide by zero encountered:RuntimeWarning"),
]

SOURCE = """
import torch
import torch.nn.functional as F


def hard_swish(x):
    return x * F.relu6(x + 3.0) / 6.0


def hardswish_op(x):
    return F.hardswish(x) + F.hardsigmoid(x)


def by_power_of_two(x):
    return x / 64.0


def by_negative(x):
    return x / -3.0


def by_zero(x):
    return x / 0.0


def by_tiny(x):
    return x / 1e-39


def in_double(x):
    return x.double() / 7.0


def bf16_input(x):
    return x.bfloat16() / 3.0
"""

EDGES = torch.tensor(
    [0.0, -0.0, float("inf"), float("-inf"), float("nan"), 3e38, -1e-30]
)
X = torch.cat([torch.randn(57, generator=torch.Generator().manual_seed(0)) * 10, EDGES])
# name -> the C++ divides (True) or multiplies by the reciprocal (False)
DIVIDES = {
    "hard_swish": False,
    "hardswish_op": False,
    "by_power_of_two": True,
    "by_negative": False,
    "by_zero": True,
    "by_tiny": True,
    "in_double": False,
    "bf16_input": False,
}
DIVISION = re.compile(r"= [^;]*\w / [-\d.e]+f?;")
RECIPROCAL = re.compile(r"\* \(1\.0f? / -?[\d.e]+f?\)")


def kernels_of(case) -> str:
    """The C++ of the kernels the CPU variant calls."""
    names = re.findall(r'_cpp\.function\("(\w+)"', case.cpu_source)
    parts = re.split(r'(?=extern "C")', case.cpp_text)
    return "".join(p for p in parts if any(f" {n}(" in p for n in names))


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict:
    functions = {name: {"x": X} for name in DIVIDES}
    return compile_source(SOURCE, functions, tmp_path_factory.mktemp("divisors"))


@pytest.mark.parametrize("name", DIVIDES)
def test_constant_divisors(compiled: dict, name: str) -> None:
    case = compiled[name]
    kernels = kernels_of(case)
    assert bool(DIVISION.search(kernels)) == DIVIDES[name], kernels
    assert bool(RECIPROCAL.search(kernels)) != DIVIDES[name], kernels
    case.check({"x": X.clone()})
