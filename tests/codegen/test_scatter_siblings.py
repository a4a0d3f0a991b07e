"""Scatters over as many positions in one kernel (Note [Sibling scatters] in
passes/fuse.py).

A table of pairs of scatters: a static cache's keys and values written at one
step's positions (in place, on inputs), adds at different indices, a write and
an add, a scatter joining the kernel that computes another's values. And pairs
that stay apart: one whose values read the other's result, two into the same
tensor, one reading the tensor the other writes into, and one whose own values
are computed in its kernel (that kernel is its group).
Each is compared with eager on both backends (outputs and inputs after the
call), with no call into PyTorch left, and counted: the kernels that scatter.
An index out of range in the second scatter raises as eager's does.
"""

from __future__ import annotations

import re

import pytest
import torch

from tests.compile_helpers import check_raises_as_eager, compile_source

SOURCE = """
import torch


def kv_cache(keys, values, pos, k, v, q):
    keys.index_copy_(2, pos, k)
    values.index_copy_(2, pos, v)
    return (keys * q).sum(-1) + values.sum(-1)


def adds_apart(a, b, i, j, u, w):
    return a.index_add(0, i, u), b.index_add(0, j, w)


def write_and_add(a, b, i, u, w):
    return a.index_copy(0, i, u), b.index_add(0, i, w)


def computed_values(a, b, i, u):
    # the first's values computed in its kernel, which the second joins
    return a.index_copy(0, i, u.sigmoid()), b.index_copy(0, i, u)


def computed_second(a, b, i, u):
    # the second's values computed in a kernel of their own, its scatter with them
    return a.index_copy(0, i, u), b.index_copy(0, i, u * 3)


def chained(a, b, i, u):
    # the second's values read the first's result: after it
    c = a.index_copy(0, i, u)
    return c, b.index_copy(0, i, c[:3] + 1)


def same_tensor(a, i, j, u, w):
    # both write into copies of a: kernels of their own
    return a.index_copy(0, i, u), a.index_copy(0, j, w)


def reads_the_other(a, b, i, u):
    # the second's values read the tensor the first writes into
    a.index_copy_(0, i, u)
    b.index_copy_(0, i, a[:3] * 2)
    return a, b
"""

g = torch.Generator().manual_seed(0)


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g)


def idx(*values: int) -> torch.Tensor:
    return torch.tensor(values)


CASES = {
    "kv_cache": {
        "keys": randn(2, 4, 16, 8),
        "values": randn(2, 4, 16, 8),
        "pos": idx(5),
        "k": randn(2, 4, 1, 8),
        "v": randn(2, 4, 1, 8),
        "q": randn(2, 4, 16, 8),
    },
    "adds_apart": {
        "a": randn(6, 5),
        "b": randn(7, 5),
        "i": idx(0, 2, 2),
        "j": idx(6, 0, 3),
        "u": randn(3, 5),
        "w": randn(3, 5),
    },
    "write_and_add": {
        "a": randn(6, 5),
        "b": randn(6, 5),
        "i": idx(4, 1, 0),
        "u": randn(3, 5),
        "w": randn(3, 5),
    },
    "computed_values": {
        "a": randn(6, 5),
        "b": randn(8, 5),
        "i": idx(1, 3, 5),
        "u": randn(3, 5),
    },
    "chained": {
        "a": randn(6, 5),
        "b": randn(6, 5),
        "i": idx(2, 0, 5),
        "u": randn(3, 5),
    },
    "same_tensor": {
        "a": randn(6, 5),
        "i": idx(0, 1, 2),
        "j": idx(3, 4, 5),
        "u": randn(3, 5),
        "w": randn(3, 5),
    },
    "reads_the_other": {
        "a": randn(6, 5),
        "b": randn(6, 5),
        "i": idx(1, 0, 4),
        "u": randn(3, 5),
    },
}
SCATTER_KERNELS = {
    "kv_cache": 1,
    "adds_apart": 1,
    "write_and_add": 1,
    "computed_values": 1,
    "computed_second": 2,
    "chained": 2,
    "same_tensor": 2,
    "reads_the_other": 2,
}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory):
    return compile_source(SOURCE, CASES, tmp_path_factory.mktemp("siblings"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager(compiled, name: str) -> None:
    compiled[name].check(CASES[name])
    assert "torch.ops" not in compiled[name].cpu_source
    assert "torch.ops" not in compiled[name].cuda_source


ARGS = r"\(((?:[^()]|\(\))*)\)"  # a call's arguments, `x.data_ptr()` among them
LAUNCHES = (
    re.compile(r'_cpp\.function\("cpp_(\w+)", "\w*"\)' + ARGS),
    re.compile(r"_triton\.triton_(\w+)\[[^\]]*\]" + ARGS),
)


def scatter_kernels(source: str, launch: re.Pattern) -> list[tuple[int, str]]:
    """(where, name) of each launch of a kernel that scatters: named after the
    scatter, neither a copy of what one writes into nor an index check (which
    writes a flag, `ne`)."""
    return [
        (m.start(), m[1])
        for m in launch.finditer(source)
        if re.search(r"index_(copy|add|put)", m[1])
        and not re.search(r"\bne(_\d+)?\b", m[2])
    ]


@pytest.mark.parametrize("name", sorted(CASES))
def test_siblings_share_a_kernel(compiled, name: str) -> None:
    case = compiled[name]
    for side, launch in zip((case.cpu_source, case.cuda_source), LAUNCHES):
        kernels = scatter_kernels(side, launch)
        assert len(kernels) == SCATTER_KERNELS[name], side


def test_checks_run_before_the_kernels_that_scatter(compiled) -> None:
    """Every index check comes before the kernel of its scatter, though it may
    read nothing the kernel writes: all of them before the last such kernel,
    one at least before the first."""
    for name in CASES:
        for side, launch in zip(
            (compiled[name].cpu_source, compiled[name].cuda_source), LAUNCHES
        ):
            checks = [m.start() for m in re.finditer(r"check_index\(", side)]
            at = [where for where, _ in scatter_kernels(side, launch)]
            assert checks and all(c < max(at) for c in checks), side
            assert min(checks) < min(at), side


def test_the_second_index_is_checked_before_either_writes(compiled) -> None:
    """`adds_apart` with `j` out of range raises as eager does, before its
    kernel runs (on the CPU; a GPU's check is asynchronous)."""
    bad = dict(CASES["adds_apart"], j=idx(0, 7, 1))
    check_raises_as_eager(compiled["adds_apart"], bad)
