"""C++ kernels reducing across rows (`x.sum(0)`, a mean over the tokens of
[B, T, C]) walk the widest tile of neighbouring columns that splits their indices,
within a budget of accumulator bytes, and take eight elements of each column per
pass over the tile (Note [Column tiles] in codegen/cpp.py). Each case is checked
against eager, outputs and inputs, and its C++ for the tile it chose.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from tests.compile_helpers import compile_source
from transpiler.codegen import cpp
from transpiler.options import parse_spec

SOURCE = """
import torch


def column_sum(x):
    return x.sum(0)


def column_stats(x):
    return x.sum(0), x.amax(0), x.amin(0), x.argmax(0), x.argmin(0)


def masked_mean(hidden, mask):
    m = mask.unsqueeze(-1).to(hidden.dtype)
    return (hidden * m).sum(1) / m.sum(1).clamp(min=1e-9)


def many_reductions(x):
    return x.sum(0), x.amax(0), x.amin(0), x.argmax(0), x.std(0), x.mean(0)


def batch_mean_bf16(x):
    return x.mean(0)
"""

g = torch.Generator().manual_seed(0)


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g)


def with_specials(x: torch.Tensor) -> torch.Tensor:
    """NaN in column 1 (in a whole group of 8 rows) and column 70 (in the last,
    partial group), -inf down column 2, inf down column 3, and ties in column 4."""
    x = x.clone()
    x[5, 1] = x[-1, 70] = float("nan")
    x[:, 2], x[:, 3] = float("-inf"), float("inf")
    x[:, 4] = 1.0
    return x


CASES = {
    # small values: a sum of 1000 keeps within the f32 tolerance of eager's own
    "column_sum": {"x": randn(1000, 768) / 4},
    "column_stats": {"x": with_specials(randn(1003, 96))},  # 1003 = 125 * 8 + 3
    "masked_mean": {
        "hidden": randn(4, 37, 64),
        "mask": (torch.rand(4, 37, generator=g) > 0.3).long(),
    },
    "many_reductions": {"x": randn(16, 1024)},
    "batch_mean_bf16": {"x": randn(300, 512).bfloat16()},
}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory):
    return compile_source(SOURCE, CASES, tmp_path_factory.mktemp("columns"))


def kernel_texts(c) -> list[str]:
    """The C++ of each kernel `c`'s CPU variant calls, in order."""
    texts = []
    for name in re.findall(r'_cpp\.function\("(\w+)"', c.cpu_source):
        start = c.cpp_text.index(f"void {name}(")
        end = c.cpp_text.find('extern "C"', start)
        texts.append(c.cpp_text[start : end if end != -1 else None])
    return texts


def column_kernel(c) -> str:
    (text,) = [t for t in kernel_texts(c) if "_col[" in t]
    return text


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager(compiled, name: str) -> None:
    compiled[name].check(CASES[name])


@pytest.mark.parametrize(
    ("name", "tile"),
    [
        ("column_sum", 384),  # half the row: two tiles for two threads
        ("column_stats", 48),
        ("masked_mean", 64),  # one batch's tokens at a time
        ("batch_mean_bf16", 256),  # accumulated in float
    ],
)
def test_the_tile_is_the_widest_that_splits(compiled, name: str, tile: int) -> None:
    text = column_kernel(compiled[name])
    assert re.search(rf"float tmp\d+_col\[{tile}\];", text), text
    assert f"for (int64_t x1 = 0; x1 < {tile}; ++x1) {{" in text, text
    assert "x0 *" not in text and "/ " not in text.split("#pragma omp simd")[1], text


def test_a_tile_keeps_its_accumulators_within_budget(compiled) -> None:
    """Six reductions of 1024 columns: sums with their chunk's partial sums,
    maxima with NaN flags, positions with their best values. The tile narrows to
    keep them all in `COLUMN_BYTES`, below the half of the columns that two tiles
    would have."""
    text = column_kernel(compiled["many_reductions"])
    arrays = re.findall(r"^\s*(float|double|int|int64_t) \w+\[(\d+)\]", text, re.M)
    size = {"float": 4, "int": 4, "double": 8, "int64_t": 8}
    total = sum(size[t] * int(n) for t, n in arrays)
    tiles = {int(n) for _, n in arrays}
    assert len(tiles) == 1 and tiles.pop() < 512, text
    assert total <= cpp.COLUMN_BYTES, (total, text)


@pytest.mark.parametrize(
    ("name", "rnumel"), [("column_sum", 1000), ("column_stats", 1003)]
)
def test_eight_elements_of_each_column_per_pass(compiled, name: str, rnumel: int):
    text = column_kernel(compiled[name])
    assert re.search(r"for \(int64_t r1 = (0|r0); r1 < [^;]+; r1 \+= 8\) \{", text)
    assert "#pragma GCC unroll 8" in text, text
    if rnumel % 8:  # the last group is partial
        assert "for (int64_t r = r1; r < std::min<int64_t>(r1 + 8, " in text, text
    else:
        assert "for (int64_t r = r1; r < r1 + 8; ++r) {" in text, text


def test_rows_of_any_dynamic_count(tmp_path: Path, monkeypatch) -> None:
    import runtime_shim

    def no_fallback(target, misses):
        raise AssertionError(f"{target} fell back to eager: {misses}")

    monkeypatch.setattr(runtime_shim, "warn_fallback", no_fallback)
    spec = {"x": parse_spec("f32[N,96]")}
    c = compile_source(SOURCE, {"column_stats": spec}, tmp_path)["column_stats"]
    assert "std::min<int64_t>(r1 + 8, " in c.cpp_text
    for rows in (1, 7, 8, 9, 100, 1003):
        x = with_specials(randn(rows, 96)) if rows > 8 else randn(rows, 96)
        got = c(x)
        want = c.eager(x)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b, equal_nan=True)
