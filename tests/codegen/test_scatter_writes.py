"""Scatters that write, in kernels (Note [Scatters] in passes/schedule.py).

`x[idx] = v` (`index_put` without `accumulate`) with one or several index tensors
and broadcast values, `index_copy` along each dimension, `index_fill` with a
number or a 0-d tensor, `scatter` of a tensor or a number with several indices a
row, `scatter_reduce` of sums with and without `include_self`, `masked_scatter`
(Note [Masked scatters] in passes/decompose.py), `x[mask] = value` (a select),
`x[mask] = rows` (a masked scatter, its rows counted first), in
dtypes atomics do not hold (bool, int8, int64, bf16): compared with eager on both
backends, outputs and inputs after the call, each without a call into PyTorch. A
key/value cache updated in place (`cache.index_copy_(2, pos, k)`, a slice
assigned, a buffer or an input) is written where it is: no copy of it, its
version counter moved. Indices out of range raise, as eager's ops do.
"""

from __future__ import annotations

import re

import pytest
import torch

from tests.compile_helpers import aten_calls, check_raises_as_eager, compile_source

SOURCE = """
import torch
from torch import nn

aten = torch.ops.aten


def set_rows(x, i, v):
    x = x * 2
    x[i] = v
    return x


def put_apart(x, i, j, v):
    # index tensors apart, values broadcast over the middle dimension
    return aten.index_put(x.relu(), [i, None, j], v) + 1


def index_copies(x, i, a, b):
    return (
        x.index_copy(0, i, a),
        x.index_copy(1, i, b),
        x.index_copy(-1, i[:2], b[:, :2]),
    )


def index_fills(x, i, v):
    return x.index_fill(1, i, -1.5), x.index_fill(0, i[:2], v), x.index_fill(-1, i, 2.0)


def scatters(x, i, src):
    return x.scatter(1, i, src), x.scatter(0, i[:3] % 4, 7.0) * x


def scatter_sums(x, i, src):
    return (
        x.scatter_reduce(1, i, src, "sum"),
        x.scatter_reduce(1, i, src, "sum", include_self=False),
    )


def bool_mask(mask, i):
    mask = mask.clone()
    mask[i] = True
    return mask


def int_tokens(tokens, pos, new):
    return tokens.index_copy(1, pos, new)


def int8_rows(q, i, v):
    return q.index_fill(0, i, 3)


def bf16_rows(x, i, v):
    # no atomics needed: a kernel on the GPU too
    return x.index_copy(0, i, v) * 2


def cache_input(cache, pos, k, q):
    # a cache passed in: written where it is, read after
    cache.index_copy_(2, pos, k)
    return (cache * q).sum(-1)


def returned_cache(cache, pos, k):
    # the new value is returned as a tensor of its own: the cache is copied
    cache.index_copy_(2, pos, k)
    return cache * 1


def image_features(embeds, ids, features):
    # LLaVA: the image features in place of the image tokens' embeddings
    mask = (ids == 7)[..., None].expand_as(embeds)
    return embeds.masked_scatter(mask, features.to(embeds.dtype))


def masked_scatters(x, mask, source):
    # a mask of its own along every dimension, one broadcast along the rows
    return x.masked_scatter(mask, source), x.masked_scatter(mask[:1], source)


def masked_puts(x, m, rows, cols, v):
    # `x[mask] = value`: a select, no `nonzero`
    y = x * 2
    y[m] = 0.0
    return (
        y,
        aten.index_put(x, [rows], v),  # the mask over the first dimension
        aten.index_put(x, [None, cols], v.view(1)),  # over the second
        aten.index_put(x, [rows, None], v, True),  # added
    )


def masked_rows(x, m, v, row, m2):
    # a row for each selected token (older LLaVA's `embeds[mask] = features`),
    # one row for every selected token, one value where a full-shape mask holds
    y = x.clone()
    y[m] = v
    z = x * 2
    z[m] = row
    w = x.clone()
    w[m2] = 3.0
    return y, z, w


def strided_scatters(x, a, b):
    # a 2 x 2 window at offset 5, and one element (size (): the op, a call)
    return (
        aten.as_strided_scatter(x, a, (2, 2), (4, 1), 5),
        aten.as_strided_scatter(x, b, (), (), 3),
    )


class SliceCache(nn.Module):
    # a slice assigned into a buffer (the LLaMA reference's cache), and a strided
    # one into an input: written where they are
    def __init__(self):
        super().__init__()
        self.register_buffer("keys", torch.zeros(2, 4, 16, 8))

    def forward(self, k, q, other):
        self.keys[:, :, 5:7] = k
        other[:, ::4] = -q[:, :3]
        return q @ self.keys.transpose(-1, -2)


class StaticCache(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("keys", torch.zeros(2, 4, 16, 8))
        self.register_buffer("values", torch.zeros(2, 4, 16, 8))

    def forward(self, pos, k, q):
        self.keys.index_copy_(2, pos, k)
        self.values.index_copy_(2, pos, -k)
        return (q @ self.keys.transpose(-1, -2)) @ self.values
"""


def inputs() -> dict:
    gen = torch.Generator().manual_seed(3)

    def randn(*shape):
        return torch.randn(*shape, generator=gen)

    return {
        "set_rows": {"x": randn(6, 5), "i": torch.tensor([4, 0, -1]), "v": randn(3, 5)},
        "put_apart": {
            "x": randn(6, 3, 5),
            "i": torch.tensor([0, 2, -1]),
            "j": torch.tensor([1, 4, 0]),
            "v": randn(3, 1),
        },
        "index_copies": {
            "x": randn(5, 5),
            "i": torch.tensor([4, 0, 2]),
            "a": randn(3, 5),
            "b": randn(5, 3),
        },
        "index_fills": {
            "x": randn(4, 6),
            "i": torch.tensor([3, -1, 3]),  # repeated: the same value twice
            "v": torch.tensor(9.0),
        },
        "scatters": {
            "x": randn(4, 7),
            # distinct within each row: any order of the writes gives eager's
            "i": torch.tensor([[0, 3], [1, 2], [6, 5], [0, 1]]),
            "src": randn(4, 7),
        },
        "scatter_sums": {
            "x": randn(4, 7),
            "i": torch.randint(0, 7, (4, 5), generator=gen),
            "src": torch.randint(-4, 4, (4, 5), generator=gen).float(),
        },
        "bool_mask": {
            "mask": torch.rand(5, 4, generator=gen) > 0.5,
            "i": torch.tensor([1, 3]),
        },
        "int_tokens": {
            "tokens": torch.randint(0, 100, (2, 8), generator=gen),
            "pos": torch.tensor([5, 6]),
            "new": torch.randint(0, 100, (2, 2), generator=gen),
        },
        "int8_rows": {
            "q": torch.randint(-100, 100, (5, 8), generator=gen).to(torch.int8),
            "i": torch.tensor([0, 4]),
            "v": torch.tensor(0),
        },
        "bf16_rows": {
            "x": randn(5, 6).bfloat16(),
            "i": torch.tensor([3, 1]),
            "v": randn(2, 6).bfloat16(),
        },
        "cache_input": {
            "cache": randn(2, 4, 16, 8),
            "pos": torch.tensor([3, 4]),
            "k": randn(2, 4, 2, 8),
            "q": randn(2, 4, 16, 8),
        },
        "returned_cache": {
            "cache": randn(2, 4, 16, 8),
            "pos": torch.tensor([9]),
            "k": randn(2, 4, 1, 8),
        },
        "image_features": {
            "embeds": randn(2, 6, 8),
            "ids": torch.tensor([[1, 7, 7, 3, 7, 2], [7, 0, 0, 7, 7, 7]]),
            "features": randn(4, 2, 8),  # more than the 7 tokens take
        },
        "masked_scatters": {
            "x": randn(4, 5),
            "mask": torch.rand(4, 5, generator=gen) > 0.5,
            "source": randn(25),
        },
        "masked_puts": {
            "x": randn(4, 5),
            "m": torch.rand(4, 5, generator=gen) > 0.5,
            "rows": torch.tensor([True, False, False, True]),
            "cols": torch.tensor([False, True, True, False, True]),
            "v": torch.tensor(-3.0),
        },
        "masked_rows": {
            "x": randn(2, 3, 4),
            "m": torch.tensor([[True, False, True], [False, False, True]]),
            "v": randn(3, 4),
            "row": randn(4),
            "m2": torch.rand(2, 3, 4, generator=gen) > 0.5,
        },
        "strided_scatters": {"x": randn(4, 4), "a": randn(2, 2), "b": randn(())},
        "SliceCache": {
            "k": randn(2, 4, 2, 8),
            "q": randn(2, 4, 1, 8),
            "other": randn(2, 10, 1, 8),
        },
        "StaticCache": {
            "pos": torch.tensor([7]),
            "k": randn(2, 4, 1, 8),
            "q": randn(2, 4, 1, 8),
        },
    }


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return compile_source(SOURCE, inputs(), tmp_path_factory.mktemp("scatter_writes"))


CALLS = (
    "index_put",
    "index_copy",
    "index_fill",
    "scatter",
    "masked_scatter",
    "as_strided_scatter",
)


def _calls(side: str) -> list[str]:
    return aten_calls(side, CALLS)


@pytest.mark.parametrize("name", list(inputs()))
def test_scatters_write_in_kernels(compiled, name: str) -> None:
    case = compiled[name]
    case.check(inputs()[name], dtype=torch.float32)
    if name == "strided_scatters":  # the one element's stays a call
        assert len(_calls(case.cpu_source)) == len(_calls(case.cuda_source)) == 1
        return
    for side in (case.cpu_source, case.cuda_source):
        assert not _calls(side), side
        views = ("_assert_async", "as_strided.default", "expand.default")  # views
        calls = side.split("torch.ops.aten.")[1:]
        assert all(c.startswith(views) for c in calls), side


def test_cpu_writes_in_order_one_row_at_a_time(compiled) -> None:
    """Two positions may write one element: the C++ kernel writes one after
    another, on one thread (no `omp parallel`); where the index is loaded once
    per row, each row is an `omp simd` loop."""
    text = compiled["set_rows"].cpp_text
    kernel = next(k for k in text.split("\n// ") if "x[i] = v" in k and "v_ptr" in k)
    assert "omp parallel" not in kernel, kernel
    assert re.search(r"omp simd\n\s*for \(int64_t x1", kernel), kernel


@pytest.mark.parametrize(
    ("line", "address"),
    [
        ("self.keys[:, :, 5:7] = k", "128 * x0 + x1 + 40"),
        ("other[:, ::4] = -q[:, :3]", "80 * (x0 / 3) + 32 * (x0 % 3) + x1"),
    ],
)
def test_a_slice_is_written_at_its_address(compiled, line: str, address: str) -> None:
    """A slice's positions are ranges summed: the kernel stores at their address
    terms, as it reads a view, with no index computed in statements."""
    cpp = compiled["SliceCache"].cpp_text
    kernel = next(k for k in cpp.split("\n// ") if k.startswith("src_") and line in k)
    assert f"out_ptr[{address}] = " in kernel, kernel
    assert "int64_t tmp" not in kernel, kernel
    triton = compiled["SliceCache"].triton_text.split("@triton.jit")
    kernel = next(k for k in triton if line in k)
    store = kernel[kernel.index("tl.store(") :]
    assert "tmp" not in store.split(",")[0], kernel


def test_repeated_indices_leave_the_last_value_on_the_cpu(compiled) -> None:
    """PyTorch leaves the value written at a repeated index undefined; eager's
    CPU kernel writes in order below its grain size, and so does ours."""
    args = {
        "x": torch.randn(6, 5),
        "i": torch.tensor([2, 0, 2]),
        "v": torch.arange(15.0).view(3, 5),
    }
    expected = compiled["set_rows"].eager(**args)
    assert torch.equal(expected[2], args["v"][2])
    assert torch.equal(compiled["set_rows"].cpu(**args), expected)


@pytest.mark.parametrize("name", ["cache_input", "StaticCache", "SliceCache"])
def test_a_cache_is_written_where_it_is(compiled, name: str) -> None:
    """The cache's new value goes back to the caller's tensor and nothing reads
    its old value after the copy: the scatter writes into it, no copy kernel, no
    `copy_` back, and its version counter moves as eager's in-place op moves it."""
    for side in (compiled[name].cpu_source, compiled[name].cuda_source):
        assert not re.search(r"fused_copy_\d", side), side  # a copy kernel's name
        assert ".copy_(" not in side, side
        assert "increment_version" in side, side
        # keys and values written at one position: its check is made once
        assert side.count("check_index(") == (name != "SliceCache"), side
    case = compiled["cache_input"]
    args = {k: v.clone() for k, v in inputs()["cache_input"].items()}
    version = args["cache"]._version
    case.cpu(**args)
    assert args["cache"]._version > version


def test_a_cache_whose_new_value_is_returned_is_copied(compiled) -> None:
    """`cache * 1` returns a tensor of its own, which the caller's cache must
    not be: the copy is made and written back."""
    for side in (
        compiled["returned_cache"].cpu_source,
        compiled["returned_cache"].cuda_source,
    ):
        assert "fused_copy" in side and "cache.copy_(" in side, side


@pytest.mark.parametrize(
    ("name", "bad"),
    [
        ("set_rows", {"i": torch.tensor([4, 0, 6])}),
        ("set_rows", {"i": torch.tensor([4, -7, 1])}),
        ("index_copies", {"i": torch.tensor([4, 0, 5])}),
        ("index_copies", {"i": torch.tensor([4, -1, 2])}),
        ("index_fills", {"i": torch.tensor([3, -7, 3])}),
        ("index_fills", {"i": torch.tensor([3, 6, 3])}),
        ("scatters", {"i": torch.tensor([[0, 3], [1, 7], [6, 5], [0, 1]])}),
        ("scatter_sums", {"i": torch.full((4, 5), -1)}),
        ("cache_input", {"pos": torch.tensor([3, 16])}),
        ("image_features", {"ids": torch.full((2, 6), 7)}),  # 12 rows of 8 > 64
        # 4 rows selected for 3 values, 2 for 3: eager's "shape mismatch"
        (
            "masked_rows",
            {"m": torch.tensor([[True, True, True], [False, False, True]])},
        ),
        (
            "masked_rows",
            {"m": torch.tensor([[True, False, False], [False, False, True]])},
        ),
    ],
)
def test_index_out_of_range_raises(compiled, name: str, bad: dict) -> None:
    """Eager raises (an IndexError, or scatter's RuntimeError); so does each
    variant, the same type."""
    check_raises_as_eager(compiled[name], {**inputs()[name], **bad})
