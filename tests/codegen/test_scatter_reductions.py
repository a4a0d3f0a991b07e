"""Scatters that reduce, in kernels (Note [Scatters] in passes/schedule.py).

`scatter_reduce` of means, maxima and minima, and `index_reduce` of the same,
with and without `include_self`, along each dimension (negative ones too), with
an index expanded along the other dimensions (a graph's messages reduced into
their nodes) and one of its own for every element, in f32, f64, int32 and int64:
compared with eager on both backends, outputs and inputs after the call, with no
call into PyTorch for any of them (an integer mean's division by its counts
aside: a division by a tensor of integers stays the op). NaNs and infinities win
and stay as eager's do (Note [Extrema of NaNs]); indices out of range raise.
"""

from __future__ import annotations

import math
import re

import pytest
import torch

from tests.compile_helpers import aten_calls, check_raises_as_eager, compile_source

SOURCE = """
import torch


def means(x, i, src, rows, j):
    return (
        x.scatter_reduce(1, i, src, "mean"),
        x.scatter_reduce(-1, i, src, "mean", include_self=False),
        x.index_reduce(1, j, rows, "mean"),
        x.index_reduce(
            0, j % 4, rows.t().repeat(1, 2)[:, :7], "mean", include_self=False
        ),
    )


def extrema(x, i, src, rows, j):
    return (
        x.scatter_reduce(1, i, src, "amax"),
        x.scatter_reduce(1, i, src, "amin", include_self=False),
        x.scatter_reduce(0, i[:2] % 4, src[:2], "amax", include_self=False),
        x.index_reduce(1, j, rows, "amax"),
        x.index_reduce(-1, j, rows, "amin", include_self=False),
        x.index_reduce(0, j % 4, rows.t().repeat(1, 2)[:, :7], "amin"),
    )


def messages(x, dst, msg):
    # PyTorch Geometric's max and mean aggregations: one index a row, expanded
    index = dst[:, None].expand_as(msg)
    return (
        x.scatter_reduce(0, index, msg, "amax", include_self=False),
        torch.zeros_like(x).scatter_reduce(0, index, msg, "mean", include_self=False),
        x.scatter_reduce(0, index, -msg, "amin"),
    )


def integers(x, i, src):
    return (
        x.scatter_reduce(1, i, src, "amax", include_self=False),
        x.scatter_reduce(1, i, src, "amin"),
        x.scatter_reduce(1, i, src, "mean"),
    )


def integer_extrema(x, i, src):
    # int64: extrema (a GPU adds no int64 atomically: its means stay the op)
    return x.scatter_reduce(1, i, src, "amax", include_self=False) - x.scatter_reduce(
        1, i, src, "amin"
    )


def in_place(x, j, rows):
    x.index_reduce_(1, j, rows, "amax")
    return x * 2


def in_place_transposed(x, i, src):
    # written back into the caller's x, which its last kernel writes in place
    # while a buffer it reads dies there: that buffer is not taken instead
    return x.t().scatter_reduce_(0, i.t(), src.t(), "mean", include_self=False)
"""


def inputs() -> dict:
    gen = torch.Generator().manual_seed(5)

    def randn(*shape, dtype=torch.float32):
        return torch.randn(*shape, generator=gen).to(dtype)

    def randint(high, *shape, low=0):
        return torch.randint(low, high, shape, generator=gen)

    nan, inf = math.nan, math.inf
    x = randn(4, 7)
    x[0, 1], x[2] = nan, -inf  # a NaN held, a row of -inf
    src = randn(4, 5)
    src[1, 2], src[3], src[2, 0] = nan, -inf, inf  # NaN and infinities scattered
    rows = randn(4, 5)
    rows[0, 0], rows[1] = nan, -inf
    j = torch.tensor([6, 0, 6, 2, 1])
    plain = {"x": randn(4, 7), "i": randint(7, 4, 5), "src": randn(4, 5)}
    return {
        "means": {**plain, "rows": randn(4, 5), "j": j},
        "extrema": {"x": x, "i": randint(7, 4, 5), "src": src, "rows": rows, "j": j},
        "extrema_f64": {
            "x": x.double(),
            "i": randint(7, 4, 5),
            "src": src.double(),
            "rows": rows.double(),
            "j": j,
        },
        "messages": {"x": randn(5, 3), "dst": randint(5, 9), "msg": randn(9, 3)},
        "integers": {
            "x": randint(50, 4, 7, low=-50).int(),
            "i": randint(7, 4, 5).int(),
            "src": randint(9, 4, 5, low=-9).int(),
        },
        "integer_extrema": {
            "x": randint(50, 4, 7, low=-50),
            "i": randint(7, 4, 5),
            "src": randint(9, 4, 5, low=-9),
        },
        "in_place": {"x": randn(4, 7), "j": j, "rows": rows.clone()},
        "in_place_transposed": {
            "x": randn(5, 10),
            "i": randint(10, 2, 10),
            "src": randn(2, 10),
        },
    }


# the cases of each function of SOURCE
FUNCTIONS = {"extrema_f64": "extrema"}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    cases = inputs()
    out = {}
    for name, args in cases.items():
        fn = FUNCTIONS.get(name, name)
        source = SOURCE.replace(f"def {fn}(", f"def {name}(") if fn != name else SOURCE
        root = tmp_path_factory.mktemp(f"scatter_reductions_{name}")
        out[name] = compile_source(source, {name: args}, root)[name]
    return out


CALLS = ("scatter_reduce", "index_reduce", "index_put", "scatter")


@pytest.mark.parametrize("name", list(inputs()))
def test_scatters_reduce_in_kernels(compiled, name: str) -> None:
    case = compiled[name]
    case.check(inputs()[name], dtype=torch.float32)
    for side in (case.cpu_source, case.cuda_source):
        assert not aten_calls(side, CALLS), side
        divisions = aten_calls(side, ("div.", "floor_divide"))
        # an integer mean's quotient: a division by a tensor of integers
        assert len(divisions) == (name == "integers"), side


def test_extrema_are_atomic_on_a_gpu_and_compared_in_cpp(compiled) -> None:
    """Triton keeps extrema atomically, where a value beats the element as a
    load first reads it (Note [Extrema checked first]), NaNs given the sign its
    integer order needs; C++ keeps them with `max_nan`/`min_nan`, in order."""
    case = compiled["extrema"]
    assert "tl.atomic_max(" in case.triton_text and "tl.atomic_min(" in case.triton_text
    for op, than in (("max", ">"), ("min", "<")):
        atomic = re.search(rf"tl\.atomic_{op}\((.*?)\)\n", case.triton_text, re.S)
        held = re.search(rf"\((tmp\d+) {than} (tmp\d+_held)\)", atomic.group(1))
        assert held and f"{held.group(2)} = tl.load(" in case.triton_text, atomic[0]
    # amin's NaN: its sign bit set, from its bits
    assert "tl.full([], -4194304, tl.int32).to(tl.float32, bitcast=True)" in (
        case.triton_text
    )
    assert "= max_nan(out_ptr" in case.cpp_text and "= min_nan(out_ptr" in case.cpp_text


def test_an_index_expanded_along_rows_reduces_rows(compiled) -> None:
    """`dst[:, None].expand_as(msg)` is one index a row: the kernel loads it once
    a row and reduces the row's values into the node's row, no address
    computed for every element."""
    text = compiled["messages"].triton_text
    assert "dst_ptr + xindex // 3" in text, text


@pytest.mark.parametrize(
    ("name", "bad"),
    [
        ("extrema", {"i": torch.full((4, 5), 7)}),
        ("extrema", {"j": torch.tensor([6, 0, -1, 2, 1])}),  # index_reduce: no wrap
        ("means", {"i": torch.full((4, 5), -1)}),
        ("messages", {"dst": torch.full((9,), 5)}),
    ],
)
def test_index_out_of_range_raises(compiled, name: str, bad: dict) -> None:
    check_raises_as_eager(compiled[name], {**inputs()[name], **bad})
