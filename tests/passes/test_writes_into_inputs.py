"""Writes through views of the caller's tensors, made where eager makes them.

`x[0].mul_(2)` on an input is, functionally, a copy of x with row 0 replaced,
written back into x at the return. A Triton kernel that reads x only where it
writes the copy may write x itself (Note [Copies of dead buffers]): then neither
the copy nor the write back is made, however many writes the chain holds. Each
case runs on both backends against eager (outputs and the inputs, buffers after
the call); for the GPU code the table gives the copy kernels and the write backs
left, `None` where the kernels read x elsewhere than they write (the copies stay,
the values must still be eager's).
"""

from __future__ import annotations

import re

import pytest
import torch

from tests.compile_helpers import compile_source

SOURCE = """
import torch
from torch import nn


def two_rows(x):
    x[0].mul_(2)
    x[1].mul_(2)
    return x + 1


def loop_rows(x):
    for r in x:
        r.mul_(2)
    return x.sum(0)


def columns_add(x, y):
    x[:, :2] += y
    return x * 3


def view_before(x):
    v = x.t()
    x[0].add_(1)
    return v * 2


def returns_input(x):
    x[0].mul_(2)
    return x


def masked_rows(x, m):
    x[m] = 0.0
    x[0].add_(1)
    return x.sum()


def read_elsewhere(x):
    x[0] = x[1] * 2
    x[1] = x[0] + 1
    return x - 1


def running_sum(x):
    for i in range(1, x.shape[0]):
        x[i] += x[i - 1]
    return x.exp()


def old_value_kept(x):
    before = x * 1
    x[2].sub_(before[3])
    return before + x


class Cache(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(2, 8, 4))

    def forward(self, k):
        self.cache[:, 3] = k
        self.cache[:, 5].add_(k)
        return self.cache.sum(1)
"""

g = torch.Generator().manual_seed(0)
X = torch.randn(4, 6, generator=g)
# name -> (inputs, (copy kernels, write backs) of the GPU code, or None)
CASES = {
    "two_rows": ({"x": X}, (0, 0)),
    "loop_rows": ({"x": X}, (0, 0)),
    "columns_add": ({"x": X, "y": torch.randn(4, 2, generator=g)}, (0, 0)),
    "view_before": ({"x": X}, (0, 0)),
    "returns_input": ({"x": X}, (0, 0)),
    "masked_rows": ({"x": X, "m": torch.tensor([False, True, False, True])}, None),
    "read_elsewhere": ({"x": X}, None),
    "running_sum": ({"x": X}, None),
    "old_value_kept": ({"x": X}, None),
    "Cache": ({"k": torch.randn(2, 4, generator=g)}, (0, 0)),
}
COPY_KERNEL = re.compile(r"triton_fused_copy_\d+\[")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict:
    functions = {name: inputs for name, (inputs, _) in CASES.items()}
    return compile_source(SOURCE, functions, tmp_path_factory.mktemp("writes"))


@pytest.mark.parametrize("name", CASES)
def test_writes_match_eager(compiled: dict, name: str) -> None:
    inputs, expected = CASES[name]
    case = compiled[name]
    for source in (case.cpu_source, case.cuda_source):
        assert "_fallback_" not in source, source
    case.check({k: v.clone() for k, v in inputs.items()})
    if expected is not None:
        found = (
            len(COPY_KERNEL.findall(case.cuda_source)),
            case.cuda_source.count(".copy_("),
        )
        assert found == expected, case.cuda_source


def test_written_in_place_twice_in_a_row(compiled: dict) -> None:
    """The same call twice: the second starts from what the first wrote."""
    case = compiled["two_rows"]
    for variant in (case.cpu, case.cuda):
        x, want = X.clone(), X.clone()
        for _ in range(2):
            out = variant(x)
            expected = case.eager(want)
            torch.testing.assert_close(out, expected)
            torch.testing.assert_close(x, want)
