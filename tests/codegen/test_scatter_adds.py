"""Scatters that add, in kernels (Note [Scatters] in passes/schedule.py).

`index_put(..., accumulate=True)` with one or several index tensors (neighbours or
apart, broadcasting, negative, repeated), values broadcast over what they index,
`index_add` along each dimension (with `alpha`), `scatter_add` with an index
smaller than its source, integer counts, and an embedding's gradient (with a
padding index, and added into a tied output layer's): compared with eager on both
backends, outputs and inputs after the call. Each adds in a kernel: no call into
PyTorch is left (a bf16 scatter on the GPU, which Triton cannot add atomically,
stays one), a GPU kernel adds atomically, and the copy of a buffer nothing reads
after is not made (Note [Copies of dead buffers]). Indices out of range raise, as
eager's ops do.
"""

from __future__ import annotations

import re

import pytest
import torch

from tests.compile_helpers import aten_calls, check_raises_as_eager, compile_source

SOURCE = """
import torch

aten = torch.ops.aten


def put_rows(x, i, v):
    return x.index_put((i,), v, accumulate=True) * 2


def put_apart(x, i, j, v):
    # index tensors apart: their dimension first
    return aten.index_put(x.relu(), [i, None, j], v, True)


def put_neighbours(x, i, j, v):
    # neighbours broadcasting together ([3, 1] and [1, 4]), values broadcast
    return aten.index_put(x, [None, i, j], v, True) + 1


def unsafe_put(x, i, v):
    # what PyTorch's decompositions call (an embedding's gradient, in some
    # versions): not checked, an index out of range adds nothing
    return aten._unsafe_index_put(x * 1, [i], v, True)


def put_into_input(x, i, v):
    # the copy of an input is made: the caller's tensor is not written
    return x.index_put((i,), v.exp(), accumulate=True), x


def index_adds(x, i, a, b, c):
    return (
        x.index_add(0, i, a),
        x.index_add(1, i, b, alpha=0.5),
        x.index_add(-1, i[:3], c) - x,
    )


def scatter_adds(x, i0, i1, src):
    return (
        torch.zeros(5, 7).scatter_add(0, i0, src),
        x.scatter_add(1, i1, src),  # an index smaller than src
    )


def messages(x, m, dst):
    # PyG's sum of messages: an index expanded along the features
    index = dst[:, None].expand_as(m)
    return x + torch.zeros_like(x).scatter_add_(0, index, m)


def counts(ids, w):
    n = torch.zeros(10, dtype=torch.int32)
    return n.index_add(0, ids, torch.ones_like(ids, dtype=torch.int32)), w * 2


def halves(x, i, v):
    return x.index_put((i,), v, accumulate=True)


def embedding_grad(g, ids):
    return (
        aten.embedding_dense_backward(g, ids, 12, -1, False),
        aten.embedding_dense_backward(g, ids, 12, 3, False) * 2,
    )


def moe_combine(hidden, expert_out, token_idx, weights):
    # the values are computed in the scatter's kernel: never written
    combined = torch.zeros_like(hidden).index_add_(
        0, token_idx, expert_out * weights[:, None]
    )
    return hidden + combined


def embedding_grad_half(g, ids):
    # PyTorch's decomposition adds in float: the cast is the kernel's
    return aten.embedding_dense_backward(g, ids, 12, 3, False)


def positions_grad(g):
    # a position embedding's gradient: the positions are computed where added
    ids = torch.arange(5)[None].expand(2, 5)
    return aten.embedding_dense_backward(g, ids, 12, -1, False)


def tied_grad(g, ids, a, b):
    # the output layer's gradient plus the embedding's: added into the matmul
    return a @ b + aten.embedding_dense_backward(g, ids, 12, -1, False)
"""


def inputs() -> dict:
    gen = torch.Generator().manual_seed(5)

    def randn(*shape):
        return torch.randn(*shape, generator=gen)

    return {
        "put_rows": {
            "x": randn(6, 5),
            "i": torch.tensor([0, 2, 2, -1, 5, 0, -6]),
            "v": randn(7, 5),
        },
        "put_apart": {
            "x": randn(6, 3, 5),
            "i": torch.tensor([0, 2, 2, -1]),
            "j": torch.tensor([1, 1, 4, 0]),
            "v": randn(4, 3),
        },
        "put_neighbours": {
            "x": randn(2, 4, 5),
            "i": torch.tensor([[0], [3], [0]]),
            "j": torch.tensor([[1, -1, 4, 1]], dtype=torch.int32),
            "v": randn(3, 4),
        },
        "unsafe_put": {
            "x": randn(4, 3),
            "i": torch.tensor([3, 3, 3, 0, -1]),
            "v": randn(5, 3),
        },
        "put_into_input": {
            "x": randn(4, 3),
            "i": torch.tensor([3, 3, 3, 0, 1]),
            "v": randn(5, 3),
        },
        "index_adds": {
            "x": randn(5, 5),
            "i": torch.tensor([4, 0, 4, 2, 1]),
            "a": randn(5, 5),
            "b": randn(5, 5),
            "c": randn(5, 3),
        },
        "scatter_adds": {
            "x": randn(4, 7),
            "i0": torch.randint(0, 5, (3, 7), generator=gen),
            "i1": torch.randint(0, 7, (4, 5), generator=gen),
            "src": randn(4, 7),
        },
        "messages": {
            "x": randn(50, 8),
            "m": randn(3000, 8),
            "dst": torch.randint(0, 50, (3000,), generator=gen),
        },
        "counts": {
            "ids": torch.tensor([1, 3, 3, 9, 0, 3, 1, 1]),
            "w": randn(3),
        },
        # whole numbers: exact in any order of the adds
        "halves": {
            "x": torch.randint(-8, 8, (4, 6), generator=gen).half(),
            "i": torch.tensor([1, 1, 3, 0, 1]),
            "v": torch.randint(-8, 8, (5, 6), generator=gen).half(),
        },
        "embedding_grad": {
            "g": randn(2, 5, 4),
            "ids": torch.tensor([[3, 1, 1, 11, 0], [3, 7, 1, 0, 3]]),
        },
        "moe_combine": {
            "hidden": randn(6, 8),
            "expert_out": randn(12, 8),
            "token_idx": torch.tensor([0, 1, 2, 3, 4, 5, 5, 4, 3, 2, 0, 1]),
            "weights": torch.rand(12, generator=gen),
        },
        "embedding_grad_half": {
            "g": torch.randint(-8, 8, (2, 5, 4), generator=gen).half(),
            "ids": torch.tensor([[3, 1, 1, 11, 0], [3, 7, 1, 0, 3]]),
        },
        "positions_grad": {"g": randn(2, 5, 4)},
        "tied_grad": {
            "g": randn(2, 5, 4),
            "ids": torch.tensor([[3, 1, 1, 11, 0], [3, 7, 1, 0, 3]]),
            "a": randn(12, 6),
            "b": randn(6, 4),
        },
    }


BF16 = {  # whole numbers: exact in any order of the adds
    "x": torch.arange(-12, 12).view(4, 6).bfloat16(),
    "i": torch.tensor([1, 1, 3, 0, 1]),
    "v": torch.arange(30).view(5, 6).bfloat16() - 14,
}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    cases = {**inputs(), "halves_bf16": BF16}
    source = SOURCE + "\n\nhalves_bf16 = halves\n"
    return compile_source(source, cases, tmp_path_factory.mktemp("scatter_adds"))


CALLS = (
    "index_put",
    "_unsafe_index_put",
    "index_add",
    "scatter_add",
    "embedding_dense_backward",
)


def _calls(side: str) -> list[str]:
    return aten_calls(side, CALLS)


@pytest.mark.parametrize("name", list(inputs()))
def test_scatters_add_in_kernels(compiled, name: str) -> None:
    case = compiled[name]
    case.check(inputs()[name], dtype=torch.float32)  # halves: whole numbers
    assert not _calls(case.cpu_source), case.cpu_source
    assert not _calls(case.cuda_source), case.cuda_source
    assert "tl.atomic_add(" in _kernels(case, "triton"), case.triton_text
    # C++ adds each value into its element, in order
    adds = r"(\w+)\[([^\]]+)\] (\+= |= .*\1\[\2\])"
    assert re.search(adds, _kernels(case, "cpp")), case.cpp_text


def _kernels(case, backend: str) -> str:
    """The text of the kernels `case`'s variant for `backend` calls."""
    if backend == "triton":
        text, source, start = case.triton_text, case.cuda_source, "@triton.jit\n"
    else:
        text, source, start = case.cpp_text, case.cpu_source, "\n// "
    pieces = text.split(start)
    return "\n".join(
        piece
        for piece in pieces
        if any(
            re.search(rf"\b{name}\b", source)
            for name in re.findall(r"(?:def|void) (\w+)\(", piece)
        )
    )


def test_bf16_adds_in_a_cpu_kernel_and_calls_on_the_gpu(compiled) -> None:
    """Triton adds no bf16 atomically: the GPU calls PyTorch, the CPU kernel
    adds in float, rounding each sum to bf16 as eager does."""
    case = compiled["halves_bf16"]
    case.check(BF16, dtype=torch.float32)
    assert not _calls(case.cpu_source), case.cpu_source
    assert _calls(case.cuda_source), case.cuda_source


def test_values_are_computed_where_they_are_added(compiled) -> None:
    """The scaled expert outputs and the f32 copy of an f16 gradient are
    computed in the scatter's kernel, not written: no [12, 8] or [2, 5, 4]
    buffer; nor is a range of positions it adds at."""
    for name, shape in (("moe_combine", (12, 8)), ("embedding_grad_half", (2, 5, 4))):
        for side in (compiled[name].cpu_source, compiled[name].cuda_source):
            assert f"empty({shape}" not in side, side
    # nor are positions, which the kernel computes (Note [Ranges in kernels])
    for side in (
        compiled["positions_grad"].cpu_source,
        compiled["positions_grad"].cuda_source,
    ):
        assert "int64)" not in side, side


def test_cpu_adds_rows_one_after_another_each_as_a_vector(compiled) -> None:
    """Where an index is loaded once per row (a token's expert output), the C++
    kernel adds the row in an inner `omp simd` loop, the rows in order; where
    an index varies along the last dimension (`scatter_add`'s), one add at a
    time, no `simd` (two adds of a vector could meet at one element)."""
    # (`messages`: scatter_add's positions along the features are addresses)
    for name in ("moe_combine", "put_apart", "embedding_grad", "messages"):
        text = _kernels(compiled[name], "cpp").split("void ")
        adds = [k for k in text if "] += " in k]
        assert adds and all("omp parallel" not in k for k in adds), text
        vector = r"omp simd\n\s*for \(int64_t x1 .*\n(.*\n)*.*\] \+= "
        assert all(re.search(vector, k) for k in adds), adds
    text = _kernels(compiled["scatter_adds"], "cpp").split("void ")
    adds = [k for k in text if "] += " in k]
    assert len(adds) == 2 and not any("simd" in k for k in adds), adds


def test_an_expanded_index_is_checked_once_per_index(compiled) -> None:
    """The check reads the 3000 destinations, not their 24000 copies along the
    features (which it would check in parts, through an int8 buffer of the
    parts' results: Note [Indirect loads in range])."""
    for side in (compiled["messages"].cpu_source, compiled["messages"].cuda_source):
        assert "check_index" in side and "torch.int8" not in side, side


def test_copies_of_dead_buffers_are_not_made(compiled) -> None:
    """The relu and the matmul are not read after the scatter: it adds into
    them (Note [Copies of dead buffers]); an input is copied first."""
    for name in ("put_apart", "tied_grad"):
        for side in (compiled[name].cpu_source, compiled[name].cuda_source):
            assert "fused_copy" not in side, side
    for side in (
        compiled["put_into_input"].cpu_source,
        compiled["put_into_input"].cuda_source,
    ):
        assert "fused_copy" in side, side


@pytest.mark.parametrize(
    ("name", "bad"),
    [
        ("put_rows", {"i": torch.tensor([0, 2, 2, -1, 6, 0, 1])}),
        ("put_rows", {"i": torch.tensor([0, 2, 2, -7, 5, 0, 1])}),
        ("put_neighbours", {"j": torch.tensor([[1, -1, 5, 1]], dtype=torch.int32)}),
        ("index_adds", {"i": torch.tensor([4, 0, 5, 2, 1])}),
        ("index_adds", {"i": torch.tensor([4, 0, -1, 2, 1])}),
        ("scatter_adds", {"i1": torch.full((4, 5), 7)}),
        ("scatter_adds", {"i0": torch.full((3, 7), -1)}),
        ("messages", {"dst": torch.full((3000,), 50)}),
        ("counts", {"ids": torch.tensor([1, 3, 3, 10, 0, 3, 1, 1])}),
    ],
)
def test_index_out_of_range_raises(compiled, name: str, bad: dict) -> None:
    """Eager raises (an IndexError, or scatter_add's RuntimeError); so does each
    variant, the same type, before anything is added outside the tensor."""
    check_raises_as_eager(compiled[name], {**inputs()[name], **bad})


def test_a_scatter_into_zeros_adds_into_what_it_is_added_to(compiled) -> None:
    """`hidden + zeros.index_add_(...)` adds the values into a copy of `hidden`
    (Note [Scatters added to a tensor] in passes/adds_into_sums.py): no table of
    zeros, no kernel reading it to add."""
    for name in ("moe_combine", "messages"):
        for side in (compiled[name].cpu_source, compiled[name].cuda_source):
            assert "full_like = " not in side and "fused_zeros" not in side, side
            assert "fused_copy" in side and "fused_add" not in side, side
