"""Kernels that read each other through calls into PyTorch (`_producers` in
passes/fuse.py).

Each graph computes two or three branches whose kernels read one another's
values through a convolution or a matmul, as HRNet's fuse layers do: a kernel
that took in one branch's values and the sum reading the other's convolution
made a cycle between kernels, and `transpile` failed. Each is compared with
eager on both backends, outputs and inputs after the call.
"""

from __future__ import annotations

import pytest
import torch

from tests.compile_helpers import compile_source

SOURCE = """
import torch
import torch.nn.functional as F


def exchange(x, y, wa, wb):
    # HRNet's fuse layers: each branch adds the other's convolved output
    a = torch.relu(x * 2 + 1)
    b = torch.relu(y * 3 - 1)
    to_a = F.interpolate(F.conv2d(b, wb), scale_factor=2.0, mode="nearest")
    to_b = F.conv2d(a, wa, stride=2, padding=1)
    return torch.relu(a + to_a), torch.relu(b + to_b)


def three_branches(x, y, z, w):
    a, b, c = x.sigmoid(), y.tanh(), z.relu()
    return a + b @ w, b + c @ w, c + a @ w


def chained(x, w):
    # a kernel's value through two calls, back into a sum with it
    a = x.exp()
    b = (a @ w) @ w
    return a * 2 + b, (a + 1).sum(-1)
"""

g = torch.Generator().manual_seed(0)


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g)


CASES = {
    "exchange": {
        "x": randn(2, 4, 8, 8),
        "y": randn(2, 4, 4, 4),
        "wa": randn(4, 4, 3, 3),
        "wb": randn(4, 4, 1, 1),
    },
    "three_branches": {
        "x": randn(6, 5),
        "y": randn(6, 5),
        "z": randn(6, 5),
        "w": randn(5, 5),
    },
    "chained": {"x": randn(6, 5), "w": randn(5, 5)},
}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory):
    return compile_source(SOURCE, CASES, tmp_path_factory.mktemp("cycles"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_kernels_read_through_calls_without_a_cycle(compiled, name: str) -> None:
    compiled[name].check(CASES[name])
