"""C++ inner loops split at the edges of windows (Note [Edges of windows] in
codegen/cpp.py).

A table of kernels whose inner loop reads an input under a mask: pools of 1 to 3
dimensions, dilated and average pools, a pad and a `cat` of strided slices, a
window as wide as the output, a pad read contiguously before a sigmoid. Each is
checked against eager (outputs and inputs after the call, with NaNs and
infinities in the windows), and where the note applies, the loop that does the
work reads without masks, which is what lets it vectorize: every masked load is
in a loop over one `x1`.
"""

from __future__ import annotations

import re

import pytest
import torch

from tests.compile_helpers import compile_source

SOURCE = """
import torch
import torch.nn.functional as F


def stem(x):
    return F.max_pool2d(x, 3, 2, 1)  # case: stem


def pool1d(x):
    return F.max_pool1d(x, 3, 2, 1) * 2.0  # case: pool1d


def pool3d(x):
    return F.max_pool3d(x, 3, 2, 1)  # case: pool3d


def avg_strided(x):
    return F.avg_pool2d(x, 3, 2, 1)  # case: avg_strided


def dilated(x):
    return F.max_pool2d(x, 3, 2, 1, dilation=2)  # case: dilated


def min_pool(x):
    return -F.max_pool2d(-x, 3, 2, 1)  # case: min_pool


def pad_strided(x):
    return F.pad(x[..., ::2], (1, 2), value=-1.0) + 1.0  # case: pad_strided


def cat_strided(x, y):
    return torch.cat([x[..., ::2], y[..., ::3]], -1).relu()  # case: cat_strided


def cat_many(x):
    pieces = [x[..., ::2], x[..., 1::2], x[..., ::4], x[..., 1::4], x[..., 2::4]]
    return torch.cat(pieces, -1) * 3.0  # case: cat_many


def narrow(x):
    return F.max_pool2d(x, 3, 2, 1)  # case: narrow


def contiguous(x):
    return F.avg_pool2d(x, 3, 1, 1)  # case: contiguous


def padded_sigmoid(x):
    return torch.sigmoid(F.pad(x, (1, 1, 1, 1)))  # case: padded_sigmoid
"""

g = torch.Generator().manual_seed(0)


def randn(*shape: int) -> torch.Tensor:
    x = torch.randn(*shape, generator=g)
    flat = x.view(-1)
    flat[3], flat[17], flat[-5] = float("nan"), float("inf"), float("-inf")
    return x


CASES = {
    "stem": {"x": randn(2, 3, 15, 40)},
    "pool1d": {"x": randn(2, 3, 33)},
    "pool3d": {"x": randn(1, 2, 7, 6, 40)},
    "avg_strided": {"x": randn(2, 3, 12, 41)},
    "dilated": {"x": randn(2, 2, 11, 44)},
    "min_pool": {"x": randn(2, 3, 10, 40)},
    "pad_strided": {"x": randn(3, 4, 20)},
    "cat_strided": {"x": randn(3, 4, 20), "y": randn(3, 4, 21)},
    "cat_many": {"x": randn(3, 4, 16)},
    "narrow": {"x": randn(2, 3, 6, 4)},
    "contiguous": {"x": randn(2, 3, 9, 24)},
    "padded_sigmoid": {"x": randn(2, 3, 9, 24)},
}
# more parts than PEELED_LOOPS_MAX
KEPT_WHOLE = {"cat_many"}
# a row of 2 outputs, its edge parts of one element each under the window's row
# conditions: one flat loop (Note [Short inner loops] in codegen/cpp.py)
FLAT = {"narrow"}
# a 3-d window's edges make more conditions on the row than VERSIONS_MAX copies take
VERSIONS_SPENT = {"pool3d"}
MASKED = re.compile(r"\? \w+_ptr\[")  # a masked load, strided or contiguous


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory):
    return compile_source(SOURCE, CASES, tmp_path_factory.mktemp("edges"))


def kernel_of(compiled, name: str) -> str:
    """The last C++ kernel of case `name` (the one with the window: `min_pool`'s
    negation of its input is a kernel of its own)."""
    cpp = compiled[name].cpp_text
    kernels = [k for k in re.split(r"\n(?=// )", cpp) if f"# case: {name}\n" in k]
    assert kernels, cpp
    return kernels[-1]


def x1_loops(kernel: str) -> list[tuple[int, int, str]]:
    """(first, end, body) of each loop over x1."""
    loops = []
    for m in re.finditer(r"for \(int64_t x1 = (\d+); x1 < (\d+); \+\+x1\) \{", kernel):
        depth, i = 1, m.end()
        while depth:
            depth += {"{": 1, "}": -1}.get(kernel[i], 0)
            i += 1
        loops.append((int(m.group(1)), int(m.group(2)), kernel[m.end() : i]))
    return loops


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager(compiled, name: str) -> None:
    compiled[name].check(CASES[name])
    assert "torch.ops" not in compiled[name].cpu_source


@pytest.mark.parametrize("name", sorted(set(CASES) - KEPT_WHOLE - FLAT))
def test_loops_over_many_x1_read_without_masks(compiled, name: str) -> None:
    loops = x1_loops(kernel_of(compiled, name))
    assert len(loops) >= 2, loops
    for first, end, body in loops:
        if end - first > 1 and name not in VERSIONS_SPENT:
            assert not MASKED.search(body), body
    # every element is written once: the parts cover the row, in order
    ranges = sorted({(first, end) for first, end, _ in loops})
    assert [r[0] for r in ranges[1:]] == [r[1] for r in ranges[:-1]], ranges


@pytest.mark.parametrize("name", sorted(KEPT_WHOLE))
def test_other_loops_stay_one_loop(compiled, name: str) -> None:
    assert len(x1_loops(kernel_of(compiled, name))) == 1


@pytest.mark.parametrize("name", sorted(FLAT))
def test_short_rows_with_window_conditions_are_flat(compiled, name: str) -> None:
    assert not x1_loops(kernel_of(compiled, name))
