"""Pointwise values read only through the slices of windows are computed in each
window, not written (Note [Windows of computed values] in passes/schedule.py).

A table of producers and the windows that read them: ResNet's stem (batch norm,
ReLU, a padded 3 x 3 max pool), an average pool of a SiLU, strided slices of a
sigmoid added together, a pad of a strided slice of an exp. Each is checked
against eager (outputs, inputs and the batch norm's buffers after the call), on
both backends, and counted in kernels: one each on GPUs. The cases where the value
must be written stay two kernels and still match: the value is also read where it
is, or computing it again in every window would cost more than `WINDOW_OPS_MAX`
ops.
"""

from __future__ import annotations

import re

import pytest
import torch

from tests.compile_helpers import compile_source

SOURCE = """
import torch
import torch.nn as nn
import torch.nn.functional as F


class Stem(nn.Module):
    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm2d(4)

    def forward(self, x):
        return F.max_pool2d(F.relu(self.bn(x)), 3, 2, 1)


def silu_pool(x):
    return F.avg_pool2d(F.silu(x), 2)


def halves(x):
    y = torch.sigmoid(x)
    return y[..., ::2] + y[..., 1::2]


def padded_slice(x):
    return F.pad(torch.exp(x)[:, ::3], (1, 1), value=2.0) * 0.5


def also_whole(x):
    y = torch.tanh(x)
    return F.max_pool2d(y, 2), y


def wide_window(x):
    y = x
    for _ in range(6):
        y = torch.sin(y) * 1.5
    return F.max_pool2d(y, 5, 1, 2)
"""

g = torch.Generator().manual_seed(0)


def randn(*shape: int) -> torch.Tensor:
    x = torch.randn(*shape, generator=g)
    x.view(-1)[7] = float("nan")
    return x


CASES = {
    "Stem": {"x": randn(2, 4, 13, 12)},
    "silu_pool": {"x": randn(2, 3, 8, 10)},
    "halves": {"x": randn(3, 5, 16)},
    "padded_slice": {"x": randn(4, 12)},
    "also_whole": {"x": randn(2, 3, 6, 6)},
    "wide_window": {"x": randn(1, 2, 9, 9)},
}
WRITTEN = {"also_whole", "wide_window"}  # the value is written: two kernels
# each element read once, through slices or windows that part it: computed where
# it is read on CPUs too (Note [Places] in passes/places.py)
READ_ONCE = {"padded_slice", "halves", "silu_pool"}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory):
    return compile_source(SOURCE, CASES, tmp_path_factory.mktemp("windows"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager(compiled, name: str) -> None:
    compiled[name].check(CASES[name])


@pytest.mark.parametrize("name", sorted(CASES))
def test_kernels(compiled, name: str) -> None:
    """One kernel on GPUs; the C++ backend writes the value (two kernels), which
    its vector units compute faster than nine windows of it, unless each element
    is read once."""
    for source, windows in (
        (compiled[name].cpu_source, False),
        (compiled[name].cuda_source, True),
    ):
        assert "torch.ops" not in source and "extern" not in source, source
        launches = re.findall(r"_cpp\.function\(|triton_\w+\[", source)
        one = name not in WRITTEN and (windows or name in READ_ONCE)
        assert len(launches) == (1 if one else 2), source
