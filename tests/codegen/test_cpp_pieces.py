"""C++ inner loops split between the pieces of a `cat` of computed values (Note
[Pieces along the inner loop] in codegen/cpp.py), and kernels that compute sines
near zero first (Note [Sines near zero]).

A table of kernels whose inner loop picks among computed values by a condition on
`x1`: cats of two and three pieces of unequal widths, a cat read through slices
that swap its halves (diffusers' timestep embedding), a pad of a computed value,
a cat along an outer dimension, and a select by a condition that changes at every
element. Each is checked against eager (outputs and inputs after the call, with
NaNs and infinities among the inputs); where the note applies, no loop over many
`x1` chooses between two computed values, and the parts cover the row once; a
condition on the outer index versions the loop instead.
Kernels with a sine are called with arguments near zero alone and with some
beyond 2^17, inf and NaN, where the kernel runs a second time.
"""

from __future__ import annotations

import re

import pytest
import torch

from tests.codegen.test_cpp_edges import kernel_of, randn, x1_loops
from tests.compile_helpers import compile_source

SOURCE = """
import math

import torch
import torch.nn.functional as F


def timestep(t):
    f = torch.exp(-math.log(10000) * torch.arange(0, 40, dtype=torch.float32) / 40)
    e = t[:, None].float() * f[None, :]
    e = torch.cat([torch.sin(e), torch.cos(e)], dim=-1)
    return torch.cat([e[:, 40:], e[:, :40]], dim=-1)  # case: timestep


def two(x, y):
    return torch.cat([x.exp(), torch.tanh(y)], -1)  # case: two


def three(x):
    return torch.cat([x.sigmoid(), x * 2.0, torch.log1p(x.abs())], -1)  # case: three


def padded(x):
    return F.pad(torch.sin(x), (3, 5), value=0.5)  # case: padded


def rows(x, y):
    return torch.cat([x.exp(), y.cos()], 0)  # case: rows


def alternate(x):
    odd = torch.arange(x.shape[-1]) % 2 == 1
    return torch.where(odd, x.exp(), x.sin())  # case: alternate
"""

g = torch.Generator().manual_seed(0)
CASES = {
    # small steps: an argument of 1000 turns exp's last bit into sin's fourth digit
    "timestep": {"t": torch.randint(0, 50, (16,), generator=g)},
    "two": {"x": randn(4, 6, 24), "y": randn(4, 6, 40)},
    "three": {"x": randn(8, 33)},
    "padded": {"x": randn(5, 7, 30)},
    "rows": {"x": randn(3, 40), "y": randn(5, 40)},
    "alternate": {"x": randn(6, 48)},
}
# a condition on x1 changing at every element: one loop over the row
ONE_LOOP = {"alternate"}
# a condition on x0: the loop is written once where it holds, once where not
# (Note [Edges of windows]), each copy one piece
VERSIONED = {"rows"}
SINES = {"timestep", "padded", "rows", "alternate"}
# a select of two statements (`tmp7 ? tmp3 : tmp6`), not a masked load's
PICK = re.compile(r"= tmp\d+ \? tmp\d+ : tmp\d+;")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory):
    return compile_source(SOURCE, CASES, tmp_path_factory.mktemp("pieces"))


def near_loops(kernel: str) -> str:
    """The kernel's first run, before `if (!far)` where it computes sines."""
    return kernel.split("if (!far)")[0]


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager(compiled, name: str) -> None:
    compiled[name].check(CASES[name])
    assert "torch.ops" not in compiled[name].cpu_source


@pytest.mark.parametrize("name", sorted(set(CASES) - ONE_LOOP))
def test_each_part_computes_its_own_piece(compiled, name: str) -> None:
    loops = x1_loops(near_loops(kernel_of(compiled, name)))
    assert len(loops) >= 2, loops
    for first, end, body in loops:
        if end - first > 1:
            assert not PICK.search(body), body
    if name in VERSIONED:
        return
    ranges = [(first, end) for first, end, _ in loops]
    assert ranges[0][0] == 0
    assert [r[0] for r in ranges[1:]] == [r[1] for r in ranges[:-1]], ranges


@pytest.mark.parametrize("name", sorted(ONE_LOOP))
def test_other_selects_stay_one_loop(compiled, name: str) -> None:
    text = near_loops(kernel_of(compiled, name))
    assert len(x1_loops(text)) <= 1 and PICK.search(text), text


@pytest.mark.parametrize("name", sorted(SINES))
def test_sines_near_zero_then_anywhere(compiled, name: str) -> None:
    kernel = kernel_of(compiled, name)
    near, anywhere = kernel.split("if (!far)")
    assert re.search(r"(sin|cos)_near\(", near)
    assert not re.search(r"(sin|cos)_f32\(", near)
    assert re.search(r"(sin|cos)_f32\(", anywhere) and "_near(" not in anywhere
    assert near.count("far |= far_trig(") == len(re.findall(r"_near\(", near))


# arguments that are inputs (not products, whose last bit is eager's or ours),
# some far enough that sin_near's reduction is off by whole radians
FAR = {
    "padded": {"x": randn(5, 7, 30) * 1e10},
    "rows": {"x": randn(3, 40), "y": randn(5, 40) * 3e9},
    "alternate": {"x": randn(6, 48) * 1e9},
}


@pytest.mark.parametrize("name", sorted(FAR))
def test_arguments_beyond_the_near_range(compiled, name: str) -> None:
    inputs = FAR[name]
    compiled[name].check(inputs)
    assert any(bool((t.abs() >= 2**17).any()) for t in inputs.values())
