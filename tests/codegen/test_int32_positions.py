"""Positions computed in 32 bits in C++ kernels (Note [Integers in 32 bits] in
codegen/cpp.py).

A table of kernels that compute source positions from their own: interpolation
of every mode that has a kernel, pads that reflect, replicate and wrap, `roll`
and `flip`, gathers at positions scaled through floats, positions stored into
int64 outputs, and positions whose products leave int32 (kept in int64, where
their values would otherwise wrap). Each is compared with eager on both backends
(outputs and inputs after the call), with no call into PyTorch left. The C++
kernels of the cases whose positions fit compute no `int64_t` value; those that
convert positions to float and back gather with 32-bit addresses; an int64
result reads its positions converted back; the wide case keeps its products in
int64 on both backends (Note [Positions past int32] in codegen/triton.py).
"""

from __future__ import annotations

import re

import pytest
import torch

from tests.compile_helpers import compile_source

SOURCE = """
import torch
import torch.nn.functional as F


def bilinear(x, y):
    return F.interpolate(x, size=y.shape[-2:], mode="bilinear") + y  # case: bilinear


def bilinear_corners(x):
    return F.interpolate(x, None, 2, "bilinear", True)  # case: bilinear_corners


def bilinear_odd(x):
    return F.interpolate(x, size=(37, 53), mode="bilinear")  # case: bilinear_odd


def linear(x):
    return F.interpolate(x, scale_factor=3, mode="linear") * 2.0  # case: linear


def nearest(x):
    return F.interpolate(x, size=(29, 41), mode="nearest")  # case: nearest


def nearest_exact(x):
    return F.interpolate(x, None, 1.7, "nearest-exact")  # case: nearest_exact


def bicubic(x):
    return F.interpolate(x, size=(19, 23), mode="bicubic")  # case: bicubic


def reflect(x):
    return F.pad(x, (3, 2, 1, 4), mode="reflect").relu()  # case: reflect


def replicate(x):
    return F.pad(x, (2, 5), mode="replicate") + 1.0  # case: replicate


def circular(x):
    return F.pad(x, (4, 1), mode="circular") * 3.0  # case: circular


def roll_flip(x):
    return torch.roll(x, 5, -1) + torch.flip(x, (-2,))  # case: roll_flip


def scaled_gather(x):
    at = (torch.arange(50) * 0.61).long()
    return x[..., at].sigmoid()  # case: scaled_gather


def stored(x):
    n = x.shape[-1]
    return x.long() + torch.arange(n) * 3, torch.arange(n) % 7 + x  # case: stored


def wide(x):
    n = x.shape[-1]
    far = torch.arange(n) * 2**20
    return far + x.long(), (far % 1000).float() + x  # case: wide
"""

g = torch.Generator().manual_seed(0)


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g)


CASES = {
    "bilinear": {"x": randn(2, 3, 16, 20), "y": randn(2, 3, 32, 40)},
    "bilinear_corners": {"x": randn(2, 3, 9, 13)},
    "bilinear_odd": {"x": randn(1, 4, 16, 20)},
    "linear": {"x": randn(3, 4, 11)},
    "nearest": {"x": randn(2, 3, 10, 14)},
    "nearest_exact": {"x": randn(2, 3, 10, 14)},
    "bicubic": {"x": randn(1, 2, 9, 12)},
    "reflect": {"x": randn(2, 3, 12, 17)},
    "replicate": {"x": randn(3, 4, 21)},
    "circular": {"x": randn(3, 4, 21)},
    "roll_flip": {"x": randn(2, 6, 33)},
    "scaled_gather": {"x": randn(4, 5, 31)},
    "stored": {"x": randn(5, 70)},
    "wide": {"x": randn(3, 4096)},
}
# the cases that convert positions to float and back: their loads are gathers
GATHERS_IN_INT32 = {"bilinear", "bilinear_corners", "bilinear_odd", "linear"}
GATHERS_IN_INT32 |= {"nearest", "nearest_exact", "bicubic"}
WIDE = {"wide"}  # products of positions past int32


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory):
    return compile_source(SOURCE, CASES, tmp_path_factory.mktemp("int32_positions"))


def kernels_of(compiled, name: str) -> str:
    """The C++ kernels of case `name`."""
    cpp = compiled[name].cpp_text
    kernels = [k for k in re.split(r"\n(?=// )", cpp) if f"# case: {name}\n" in k]
    assert kernels, cpp
    return "\n".join(kernels)


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager(compiled, name: str) -> None:
    compiled[name].check(CASES[name])
    assert "torch.ops" not in compiled[name].cpu_source


@pytest.mark.parametrize("name", sorted(set(CASES) - WIDE - {"stored"}))
def test_no_position_is_computed_in_int64(compiled, name: str) -> None:
    assert not re.search(r"int64_t tmp\d+ = ", kernels_of(compiled, name))


def test_int64_results_read_positions_widened(compiled) -> None:
    """`x.long() + arange(n) * 3`: the position and its product in int32, the
    product converted to int64 for the sum with the input's values."""
    text = kernels_of(compiled, "stored")
    assert re.search(r"int32_t (tmp\d+) = x1;", text), text
    assert re.search(r"int64_t tmp\d+_i64 = static_cast<int64_t>\(tmp\d+\);", text)
    assert re.search(r"int32_t tmp\d+ = floor_mod\(tmp\d+, 7\);", text), text


@pytest.mark.parametrize("name", sorted(GATHERS_IN_INT32))
def test_gathers_add_their_addresses_in_int32(compiled, name: str) -> None:
    text = kernels_of(compiled, name)
    assert re.search(r"_ptr\[static_cast<int32_t>\(", text), text
    assert "static_cast<float>(static_cast<int64_t>" not in text


def test_positions_past_int32_stay_int64(compiled) -> None:
    text = kernels_of(compiled, "wide")
    assert re.search(r"int64_t tmp\d+ = .*1048576", text), text
    triton = compiled["wide"].triton_text
    assert re.search(r"tmp\d+ = \(xindex % 4096\)\.to\(tl\.int64\)", triton), triton
