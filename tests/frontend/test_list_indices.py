"""Lists of ints in an index (`trace.ListIndices`): `v[:, [-1]]`, `x[[0, 2]] = y`.

PyTorch turns such a list into an index tensor of its own, which no op the
recorder sees makes: each of these was a graph break. A list that is the index's
only advanced part and an arithmetic progression is the slice it selects, read as
a copy (a write into the result must not reach the tensor indexed); any other list
is a constant tensor. Each case runs on both backends against eager (outputs and
inputs after the call), with no graph break and no call into PyTorch but views (a
top 3 of rows of 16 is computed in kernels: Note [Top-k in rounds]); out of range,
both raise as eager does.
"""

from __future__ import annotations

import re

import pytest
import torch

from tests.compile_helpers import Compiled, check_raises_as_eager, compile_source
from transpiler.frontend.trace import _progression

SOURCE = """
import torch


def last_column(v):
    y = v[:, [-1]]
    y.mul_(2)  # the result is a copy: v keeps its values
    return y


def rows_stepped(v):
    y = v[[0, 2, 4]]
    y += 1
    return y


def trailing(v):
    return v[..., [1]] * 3


def new_axis_reversed(v):
    return v[None, :, [3, 1]] - 1


def repeated(v):
    return v[[1, 1, 2]].sum(0)


def with_int(v):
    return v[0, [1, 2]] + v[1, [5, 6]]


def two_lists(v):
    return v[[0, 1], [2, 3]]


def after_none(v):
    return v[:, [0, 2], None].exp()


def write_columns(v, w):
    v[:, [0, 3, 6]] = w
    return v * 2


def add_into_row(v, w):
    v[[1]] += w
    return v


def topk_filter(logits):
    top, _ = torch.topk(logits, 3)
    return logits.masked_fill(logits < top[:, [-1]], float("-inf")).softmax(-1)


def out_of_range(v):
    return v[:, [16]] + 1
"""

V = torch.randn(6, 16, generator=torch.Generator().manual_seed(0))
CASES = {
    "last_column": {"v": V},
    "rows_stepped": {"v": V},
    "trailing": {"v": V},
    "new_axis_reversed": {"v": V},
    "repeated": {"v": V},
    "with_int": {"v": V},
    "two_lists": {"v": V},
    "after_none": {"v": V},
    "write_columns": {"v": V, "w": torch.randn(6, 3)},
    "add_into_row": {"v": V, "w": torch.randn(1, 16)},
    "topk_filter": {"logits": V},
}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Compiled]:
    functions = CASES | {"out_of_range": {"v": V}}
    return compile_source(SOURCE, functions, tmp_path_factory.mktemp("lists"))


@pytest.mark.parametrize("name", CASES)
def test_matches_eager(compiled: dict[str, Compiled], name: str) -> None:
    case = compiled[name]
    for source in (case.cpu_source, case.cuda_source):
        assert "_fallback_" not in source, source
        calls = re.findall(r"torch\.ops\.aten\.(\w+)", source)
        assert set(calls) <= {"as_strided"}, source  # a view
    case.check({k: v.clone() for k, v in CASES[name].items()})


def test_out_of_range_raises(compiled: dict[str, Compiled]) -> None:
    check_raises_as_eager(compiled["out_of_range"], {"v": V})


def test_progressions() -> None:
    assert _progression([-1], 16) == slice(15, 16, 1)
    assert _progression([0, 2, 4], 6) == slice(0, 5, 2)
    assert _progression([1, 2, 3], 3) is None  # out of range: eager raises
    for values in ([3, 1], [1, 1], [0, 1, 3], [-17]):
        assert _progression(values, 16) is None, values
