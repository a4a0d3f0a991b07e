"""In-place view ops (`squeeze_`, `unsqueeze_`, `t_`: torch.Tag.inplace_view) change
the sizes and strides of the tensor they are called on. The code after them sees
the new ones, shapes read in Python included; `F.linear` of a vector does
`squeeze_` inside. Each case against eager on both backends."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.compile_helpers import compile_source

SOURCE = """
import torch
import torch.nn.functional as F


def linear_of_a_vector(x, w):
    y = F.linear(x, w)
    return y * 2, y.shape[0], y.sum(0)


def loss_of_one_sample(x, w, t):
    return F.cross_entropy(F.linear(x, w), t)


def chain(x):
    y = x * 2
    y.squeeze_(0)
    z = y + 1
    z.unsqueeze_(-1)
    z.t_()
    return z * 3, z.shape[0], z.shape[1], y.shape[0]


def then_written(x):
    y = x + 1
    y.unsqueeze_(0)
    y.mul_(2)
    return y, y.size(0)
"""

g = torch.Generator().manual_seed(4)
CASES = {
    "linear_of_a_vector": {
        "x": torch.randn(8, generator=g),
        "w": torch.randn(5, 8, generator=g),
    },
    "loss_of_one_sample": {
        "x": torch.randn(8, generator=g),
        "w": torch.randn(40, 8, generator=g),
        "t": torch.tensor(7),
    },
    "chain": {"x": torch.randn(1, 6, generator=g)},
    "then_written": {"x": torch.randn(3, 4, generator=g)},
}  # fmt: skip


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    root: Path = tmp_path_factory.mktemp("inplace_views")
    return compile_source(SOURCE, CASES, root)


@pytest.mark.parametrize("name", CASES)
def test_inplace_views_change_what_follows(compiled, name: str) -> None:
    compiled[name].check(CASES[name])
