"""Indices that several ops read are checked once (`_elements_of` in
passes/check_indices.py).

A table of graphs whose ops read the same indices: PyG's max and mean
aggregations (a scatter_reduce, a count and a sum at the same destinations,
through `dst[:, None].expand_as(messages)` and `dst` itself), two gathers of one
index, and a transposed copy of it. And graphs whose checks differ: tables of
other sizes, a slice of the index, `embedding` beside `x[ids]` (which counts a
negative index from the end). Each is compared with eager on both backends, its
checks counted, and an index out of range raises as eager's does, with the
message of the first op that reads it.
"""

from __future__ import annotations

import re

import pytest
import torch

from tests.compile_helpers import check_raises_as_eager, compile_source
from tests.devices import REAL_GPU

SOURCE = """
import torch
import torch.nn.functional as F


def max_and_mean(messages, dst):
    index = dst[:, None].expand_as(messages)
    size = (6, messages.shape[1])
    top = messages.new_zeros(size).scatter_reduce_(
        0, index, messages, "amax", include_self=False
    )
    count = messages.new_zeros(6).scatter_add_(0, dst, messages.new_ones(dst.shape))
    total = messages.new_zeros(size).scatter_add_(0, index, messages)
    return top, total / count.clamp(min=1)[:, None]


def two_gathers(a, b, i):
    return a.gather(1, i) + b.gather(1, i)


def transposed(a, b, i):
    return a.gather(1, i) * b.gather(0, i.t())


def other_sizes(a, b, i, u):
    return a.index_add(0, i, u), b.index_add(0, i, u)


def sliced(a, b, i, u):
    return a.index_add(0, i, u), b.index_add(0, i[:2], u[:2])


def embedding_and_index(w, ids):
    return F.embedding(ids, w) + w[ids]
"""

g = torch.Generator().manual_seed(0)


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g)


# name -> (inputs, checks in the generated code, the index and a value out of range)
CASES = {
    "max_and_mean": (
        {"messages": randn(10, 4), "dst": torch.tensor([0, 2, 2, 5, 1, 0, 2, 5, 5, 3])},
        1,
        ("dst", 6),
    ),
    "two_gathers": (
        {
            "a": randn(3, 5),
            "b": randn(3, 5),
            "i": torch.tensor([0, 4, 2, 1]).reshape(2, 2),
        },
        1,
        ("i", 5),
    ),
    "transposed": (
        {
            "a": randn(3, 5),
            "b": randn(5, 3),
            "i": torch.tensor([0, 4, 2, 1]).reshape(2, 2),
        },
        1,
        ("i", 5),
    ),
    "other_sizes": (
        {
            "a": randn(6, 3),
            "b": randn(4, 3),
            "i": torch.tensor([0, 3, 1]),
            "u": randn(3, 3),
        },
        2,
        ("i", 5),
    ),
    "sliced": (
        {
            "a": randn(6, 3),
            "b": randn(6, 3),
            "i": torch.tensor([0, 3, 1]),
            "u": randn(3, 3),
        },
        2,
        ("i", 6),
    ),
    "embedding_and_index": (
        {"w": randn(7, 4), "ids": torch.tensor([1, 6, 0, 2]).reshape(2, 2)},
        2,
        ("ids", 7),
    ),
}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory):
    inputs = {name: case[0] for name, case in CASES.items()}
    return compile_source(SOURCE, inputs, tmp_path_factory.mktemp("checks"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager(compiled, name: str) -> None:
    compiled[name].check(CASES[name][0])
    for side in (compiled[name].cpu_source, compiled[name].cuda_source):
        assert "torch.ops" not in side
        assert len(re.findall(r"check_index\(", side)) == CASES[name][1], side


@pytest.mark.parametrize("name", sorted(CASES))
def test_out_of_range_raises_as_eager(compiled, name: str) -> None:
    inputs, _, (index, bad) = CASES[name]
    wrong = inputs[index].clone()
    wrong.view(-1)[1] = bad
    check_raises_as_eager(compiled[name], dict(inputs, **{index: wrong}))


def test_the_first_op_names_the_error(compiled) -> None:
    """The shared check raises with scatter_reduce's message: the first op that
    reads the destinations, where eager raises."""
    inputs, _, (index, bad) = CASES["max_and_mean"]
    wrong = dict(inputs, **{index: inputs[index].clone().fill_(bad)})
    variants = [compiled["max_and_mean"].cpu]
    if not REAL_GPU:
        variants.append(compiled["max_and_mean"].cuda)
    for variant in variants:
        with pytest.raises(RuntimeError, match=r"^scatter_reduce: index out of"):
            variant(**{k: v.clone() for k, v in wrong.items()})
