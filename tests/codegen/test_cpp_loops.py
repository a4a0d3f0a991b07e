"""C++ pointwise kernels loop over two indices where one flat index would need `%` or
`/` to read a broadcast or transposed input: integer division in the inner loop stops
it vectorizing. Loops over a row multiply by the reciprocal of a per-row divisor,
reduce a long row into lanes and a chunk at a time, and fetch the next row while
computing on this one. Each case is checked against eager, and its loops for being
free of divisions.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from tests.compile_helpers import compile_source, specs
from tests.helpers import check_call, variant_dtype
from transpiler.codegen.indexing import inner_split, split_index
from transpiler.ir.program import Index, Term
from transpiler.options import parse_spec

SOURCE = """
import torch


def bias_gelu(x, b):
    return torch.nn.functional.gelu(x + b, approximate="tanh")


def transpose_add(x, y):
    return x.t() + y


def row_scale(x, s):
    return x * s


def flat(x):
    return x.exp()


def cat_channels(a, b):
    return torch.cat([a, b], 1).relu()


def pad_channels(x):
    return torch.nn.functional.pad(x, (0, 0, 0, 0, 1, 2)) * 2


def roll_channels(x):
    return torch.roll(x, 2, 1) + 1


def shift_pairs(x):
    return torch.fft.fftshift(x, dim=(0, 2))


def roll_outer_and_pairs(x):
    return torch.roll(x, (1, 1), (0, 2)) * 2


def cat_rows_of_pairs(a, b):
    return torch.cat([a, b.flip(-1)]) + 1


def pad_rows_of_pairs(x):
    return torch.nn.functional.pad(x, (0, 0, 0, 0, 2, 1)) - x.sum()


def rotate_every_two(x):
    return torch.stack((-x[..., 1::2], x[..., ::2]), -1).flatten(-2) * 3


def scaled_twice(x):
    y = x / x.abs().sum(-1, keepdim=True)
    return y - y.amax(-1, keepdim=True)


def row_sum(x):
    return x.sum(-1)


def row_sum_whole_chunks(x):
    return x.sum(-1)


def row_sum_short(x):
    return x.sum(-1)


def row_sum_tiny(x):
    return x.sum(-1)


def row_sum_long(x):
    return x.sum(-1)


def row_sum_int(x):
    return x.sum(-1)


def row_sum_f64(x):
    return x.sum(-1)


def row_any_all(x):
    return (x > 2).any(-1), (x > -3).all(-1)


def row_positions(x):
    return x.argmax(-1), x.argmin(-1)


def row_positions_int(x):
    return x.argmax(-1), x.argmin(-1)


def row_group_norm(x, w, b):
    return torch.nn.functional.group_norm(x, 4, w, b)


def row_softmax_by_group(x, w):
    y = torch.softmax(x.flatten(1), -1).view(x.shape)
    return y * w


def row_max_then_min(x):
    m = x.amax(-1, keepdim=True)
    return (x - m).amin(-1)


def row_amax(x):
    return x.amax(-1)


def row_amin(x):
    return x.amin(-1)


def row_norm(x):
    return torch.nn.functional.layer_norm(x, (x.shape[-1],))


def row_softmax(x):
    return torch.softmax(x, dim=-1)


def row_softmax_bf16(x):
    return torch.softmax(x, dim=-1)


def long_softmax(x):
    return torch.softmax(x, dim=-1)


def long_softmax_f64(x):
    return torch.softmax(x, dim=-1)


def long_softmax_bf16(x):
    return torch.softmax(x, dim=-1)


def long_softmax_too_long(x):
    return torch.softmax(x, dim=-1)


def long_softmax_and_its_exp(x):
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return e / e.sum(-1, keepdim=True), e


def long_softmax_into_input(x):
    x.copy_(torch.softmax(x, dim=-1))
    return x.sum()


def long_gelu_share(x):
    g = torch.nn.functional.gelu(x)
    return g / g.sum(-1, keepdim=True)


def long_abs_share(x):
    a = x.abs()
    return a / a.sum(-1, keepdim=True)


def short_rows(x):
    return x.sum(-1), x.amax(-1), x.amin(-1), x.mean(-1)


def short_rows_bf16(x):
    return x.sum(-1), x.amax(-1), x.amin(-1), x.mean(-1)


def short_rows_f64(x):
    return x.sum(-1), x.amax(-1), x.amin(-1), x.mean(-1)


def short_rows_int(x):
    return x.sum(-1), x.amax(-1), x.amin(-1)


def short_rows_tiny(x):
    return x.sum(-1), x.amax(-1), x.amin(-1), x.mean(-1)


def short_rows_whole(x):
    return x.sum(-1), x.amax(-1), x.amin(-1), x.mean(-1)
"""

g = torch.Generator().manual_seed(0)


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g)


def with_specials(x: torch.Tensor) -> torch.Tensor:
    """NaN in the first chunk of row 1, the middle one of row 2, the last (partial)
    one of row 3; row 4 all -inf, row 5 all inf."""
    x = x.clone()
    x[1, 3] = x[2, 600] = x[3, -1] = float("nan")
    x[4], x[5] = float("-inf"), float("inf")
    return x


def with_ties(x: torch.Tensor) -> torch.Tensor:
    """`with_specials`, and rows whose largest and smallest values, or NaNs, lie
    in several lanes, the later lane holding the earlier position: 37 before 70
    (lanes 5 and 6 of 32), 38 before 45 (lanes 6 and 13)."""
    x = torch.cat([with_specials(x), x[:3]])
    x[7, 70] = x[7, 37] = 1e3
    x[8, 70] = x[8, 37] = -1e3
    x[9, 45] = x[9, 38] = float("nan")
    return x


def short_specials(x: torch.Tensor) -> torch.Tensor:
    """Rows of a 7 x 7 window: NaN in the vectorized part of row 1 and in the last
    element of row 2 (reduced after the vectorized loop), the largest and smallest
    values last in rows 3 and 4, row 5 all -inf, row 6 all inf."""
    x = x.clone()
    x[1, 3] = x[2, -1] = float("nan")
    x[3, -1], x[4, -1] = 1e3, -1e3
    x[5], x[6] = float("-inf"), float("inf")
    return x


CASES = {
    "bias_gelu": {"x": randn(96, 80), "b": randn(80)},
    "transpose_add": {"x": randn(64, 48), "y": randn(48, 64)},
    "row_scale": {"x": randn(40, 96), "s": randn(40, 1)},
    "flat": {"x": randn(128, 64)},
    # pieces along channels: `x % (channels * 64)` wraps at a multiple of 64
    "cat_channels": {"a": randn(2, 3, 8, 8), "b": randn(2, 5, 8, 8)},
    "pad_channels": {"x": randn(2, 3, 8, 8)},
    "roll_channels": {"x": randn(2, 5, 8, 8)},
    "scaled_twice": {"x": randn(4, 20000)},  # rows too long to keep: recomputed
    "row_sum": {"x": randn(6, 1000)},  # 31 groups of 32 lanes and 8 more
    "row_sum_whole_chunks": {"x": randn(6, 8192)},  # two chunks of 4096
    "row_sum_long": {"x": randn(6, 10000)},  # 4096, 4096 and 1808: 56 groups, 16
    "row_sum_short": {"x": randn(6, 512)},  # one chunk: one loop
    "row_sum_tiny": {"x": randn(6, 100)},  # fewer than 4 groups: one accumulator
    "row_sum_int": {
        "x": torch.randint(
            -(2**31), 2**31 - 1, (6, 999), generator=g, dtype=torch.int32
        )
    },
    "row_sum_f64": {"x": randn(6, 1000).double()},
    "row_any_all": {"x": randn(6, 1000)},
    "row_max_then_min": {"x": with_specials(randn(7, 1500))},
    "row_positions": {"x": with_ties(randn(7, 1500))},
    # rows of 2 channels of 256: each channel's weight read once per 256
    "row_group_norm": {"x": 3 + randn(2, 8, 16, 16), "w": randn(8), "b": randn(8)},
    # rows of 8 groups of 64; exp(x - max) kept in the row buffer for the last loop
    "row_softmax_by_group": {"x": randn(4, 8, 64), "w": randn(8, 1)},
    "row_positions_int": {"x": torch.randint(-5, 5, (6, 999), generator=g)},
    "row_amax": {"x": with_specials(randn(7, 1500))},
    "row_amin": {"x": with_specials(randn(7, 1500))},
    "row_norm": {"x": 3 + randn(6, 1000)},
    "row_softmax": {"x": randn(40, 1024)},
    # rows longer than the stack's row buffer (Note [Rows kept in an output])
    "long_softmax": {"x": with_specials(randn(6, 20000))},
    "long_softmax_f64": {"x": randn(4, 20000).double()},
    "long_softmax_bf16": {"x": randn(4, 20000).bfloat16()},
    "long_softmax_too_long": {"x": randn(2, 300000)},
    "long_softmax_and_its_exp": {"x": randn(4, 20000)},
    "long_softmax_into_input": {"x": randn(4, 20000)},
    "long_gelu_share": {"x": randn(4, 20000)},
    "long_abs_share": {"x": randn(4, 20000)},
    "row_softmax_bf16": {"x": randn(40, 1024).bfloat16()},
    # an innermost dimension of 2 and pieces along an outer one (Note [Short
    # inner loops] in codegen/cpp.py); the pairs read in either order
    "shift_pairs": {"x": randn(5, 6, 2)},
    "roll_outer_and_pairs": {"x": randn(64, 4, 2)},
    "cat_rows_of_pairs": {"a": randn(40, 5, 2), "b": randn(30, 5, 2)},
    "pad_rows_of_pairs": {"x": randn(50, 3, 2)},
    "rotate_every_two": {"x": randn(64, 128)},  # pieces along x1 alone
    # rows shorter than lanes, split into whole vectors and the rest (Note
    # [Remainders of short rows] in codegen/cpp.py): 48 + 1 for f32 and f64,
    # 32 + 17 for bf16; a row of 9 is shorter than a group, one of 64 is whole
    "short_rows": {"x": short_specials(randn(300, 49))},
    "short_rows_bf16": {"x": short_specials(randn(300, 49)).bfloat16()},
    "short_rows_f64": {"x": short_specials(randn(300, 49)).double()},
    "short_rows_int": {
        "x": torch.randint(-(2**31), 2**31 - 1, (300, 49), generator=g).int()
    },
    "short_rows_tiny": {"x": short_specials(randn(300, 9))},
    "short_rows_whole": {"x": short_specials(randn(300, 64))},
}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory):
    return compile_source(SOURCE, CASES, tmp_path_factory.mktemp("loops"))


def kernel_text(c) -> str:
    """The C++ of the one kernel `c`'s CPU variant calls."""
    (name,) = re.findall(r'_cpp\.function\("(\w+)"', c.cpu_source)
    return _kernel(c, name)


def kernels_text(c) -> str:
    """The C++ of every kernel `c`'s CPU variant calls."""
    names = re.findall(r'_cpp\.function\("(\w+)"', c.cpu_source)
    return "".join(_kernel(c, name) for name in names)


def _kernel(c, name: str) -> str:
    start = c.cpp_text.index(f"void {name}(")
    end = c.cpp_text.find('extern "C"', start)
    return c.cpp_text[start : end if end != -1 else None]


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager(compiled, name: str) -> None:
    """Outputs, and inputs after the call, against eager."""
    inputs = CASES[name]
    c = compiled[name]
    check_call(c.cpu, c.eager, inputs, variant_dtype(specs(inputs)))


@pytest.mark.parametrize(
    ("name", "kept"),
    [
        ("long_softmax", "out_ptr"),
        ("long_softmax_f64", "out_ptr"),
        ("long_softmax_and_its_exp", "out_exp_ptr"),
        ("long_softmax_into_input", "out_ptr"),  # then copied into x
        ("long_gelu_share", "out_ptr"),
        ("long_softmax_bf16", None),  # exp in f32, the output bf16: not exact
        ("long_softmax_too_long", None),  # the row and its input would not stay in L2
        ("long_abs_share", None),  # as cheap to compute again as to read
    ],
)
def test_long_rows_keep_costly_values_in_an_output(
    compiled, name: str, kept: str | None
) -> None:
    """Note [Rows kept in an output] in codegen/cpp.py: a costly value computed in
    two loops over a row too long for the stack is written into the row of an
    output the last loop overwrites, and read from there; computed once."""
    cpp = kernels_text(compiled[name])
    rows = re.findall(r"\b\w+_row = (\w+_ptr)\b", cpp)
    if kept is None:
        assert not rows, cpp
        return
    assert rows == [kept], cpp
    costly = "gelu" if "gelu" in name else "exp"
    assert len(re.findall(rf"\b{costly}\w*\(", cpp)) == 1, cpp


@pytest.mark.parametrize(
    ("name", "inner"),
    [
        ("bias_gelu", 80),
        ("transpose_add", 48),
        ("row_scale", 96),
        ("cat_channels", 64),
        ("pad_channels", 64),
        ("roll_channels", 64),
    ],
)
def test_inner_loop_has_no_division(compiled, name: str, inner: int) -> None:
    cpp = kernel_text(compiled[name])
    start = cpp.index(f"for (int64_t x1 = 0; x1 < {inner}; ++x1)")
    body = cpp[start : cpp.index("}", start)]
    # x1 never divided: what depends on x0 alone is fixed along the inner loop
    assert not re.search(r"\bx1\s*[%/]|\([^()]*\bx1\b[^()]*\)\s*[%/]", body), body


def test_flat_loop_stays_flat(compiled) -> None:
    assert "x1" not in kernel_text(compiled["flat"])


@pytest.mark.parametrize(
    "name",
    ["shift_pairs", "roll_outer_and_pairs", "cat_rows_of_pairs", "pad_rows_of_pairs"],
)
def test_short_inner_loops_with_outer_pieces_are_flat(compiled, name: str) -> None:
    """Note [Short inner loops] in codegen/cpp.py: no loop of an element or two
    under a condition on the outer index, which GCC 12 vectorizes wrongly."""
    c = compiled[name]
    for kernel in re.findall(r'_cpp\.function\("(\w+)"', c.cpu_source):
        cpp = _kernel(c, kernel)
        short = re.search(r"for \(int64_t x1 = \d+; x1 < [12];", cpp)
        assert not (short and " ? " in cpp), cpp


def test_short_inner_loops_split_by_their_own_pieces(compiled) -> None:
    """A `stack` along the last dimension: its pieces are constants in each part
    of the split loop, and the split stays."""
    assert "x1 < 2;" in kernels_text(compiled["rotate_every_two"])


@pytest.mark.parametrize(
    ("name", "whole", "end"),
    [
        ("short_rows", 48, 49),
        ("short_rows_bf16", 32, 49),
        ("short_rows_f64", 48, 49),
        ("short_rows_int", 48, 49),
        ("short_rows_tiny", None, 9),
        ("short_rows_whole", None, 64),
    ],
)
def test_short_rows_reduce_their_remainder_in_order(
    compiled, name: str, whole: int | None, end: int
) -> None:
    """Note [Remainders of short rows]: the vectorized loop stops at whole
    vectors, and the rest of the row follows in a loop of its own."""
    cpp = kernel_text(compiled[name])
    loops = re.findall(
        r"(#pragma omp simd[^\n]*\n\s*)?for \(int64_t r = (\d+); r < (\d+);", cpp
    )
    if whole is None:
        assert [(int(a), int(b)) for _, a, b in loops] == [(0, end)], cpp
        assert loops[0][0], cpp  # vectorized
    else:
        assert [(bool(v), int(a), int(b)) for v, a, b in loops] == [
            (True, 0, whole),
            (False, whole, end),
        ], cpp


def test_split_index_rewrites_each_kind_of_term() -> None:
    numel = 12 * 8
    index = Index(
        5,
        (
            Term("x", 1, 8, 3),  # x % 8: inner only
            Term("x", 8, 12, 100),  # x // 8: outer only
            Term("x", 1, numel, 1),  # x itself: both
        ),
    )
    split = split_index(index, 8, numel)
    assert split == Index(
        5,
        (
            Term("x1", 1, 8, 3),
            Term("x0", 1, 12, 100),
            Term("x0", 1, 12, 8),
            Term("x1", 1, 8, 1),
        ),
    )
    for x in range(numel):  # the same address for every x = x0 * 8 + x1
        x0, x1 = divmod(x, 8)
        flat = index.offset + sum(
            t.stride * ((x // t.div) % t.mod) for t in index.terms
        )
        env = {"x0": x0, "x1": x1}
        assert flat == split.offset + sum(
            t.stride * ((env[t.var] // t.div) % t.mod) for t in split.terms
        )


def test_no_split_when_a_term_straddles() -> None:
    # (x // 3) % 4 over x < 24 neither divides nor is divided by any inner length
    # that also keeps x % 8 whole
    index = Index(0, (Term("x", 3, 4, 1), Term("x", 1, 8, 10)))
    assert inner_split([index], 24) is None
    assert inner_split([Index(0, (Term("x", 1, 24, 1),))], 24) is None  # flat


def test_generated_module_runs(tmp_path: Path) -> None:
    """A split kernel in a module with parameters: bias broadcast over rows."""
    src = (
        "import torch\n"
        "class M(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.lin = torch.nn.Linear(32, 48)\n"
        "    def forward(self, x):\n"
        "        return torch.relu(self.lin(x)) * 2\n"
    )
    x = randn(4, 16, 32)
    c = compile_source(src, {"M": {"x": x}}, tmp_path)["M"]
    torch.manual_seed(0)
    model = c.module.M().eval()
    with torch.no_grad():
        want = type(model).__mro__[1].forward(model, x)
        torch.testing.assert_close(c.cpu(model, x), want)
    assert "x1 < 48" in kernel_text(c)


def test_division_by_a_row_value_is_one_reciprocal(compiled) -> None:
    """`y = x / s` is needed in two loops over the row; `1 / s` is computed once."""
    cpp = kernel_text(compiled["scaled_twice"])
    (inverse,) = re.findall(r"float (\w+)_inv = float\(1\) / \1;", cpp)
    assert cpp.count(f"* {inverse}_inv;") == 2
    assert not re.search(r" / tmp", cpp.replace(f"float(1) / {inverse}", ""))


@pytest.mark.parametrize(
    ("name", "rnumel", "last", "tail"),
    [
        ("row_sum_long", 10000, "std::min<int64_t>(r0 + 4096, 10000)", True),
        ("row_sum_whole_chunks", 8192, "r0 + 4096", False),
    ],
)
def test_long_rows_are_reduced_in_chunks(
    compiled, name: str, rnumel: int, last: str, tail: bool
) -> None:
    """A sum of more than 128 values per lane goes a chunk of 4096 at a time, its
    lanes joining the row's after each (Note [Lanes])."""
    cpp = kernel_text(compiled[name])
    assert cpp.count(f"for (int64_t r0 = 0; r0 < {rnumel}; r0 += 4096) {{") == 1, cpp
    assert "float tmp1_part[32];" in cpp and "tmp1_lane[l] += tmp1_part[l];" in cpp
    if tail:
        assert f"int64_t tmp1_whole = r0 + ({last} - r0) / 32 * 32;" in cpp, cpp
        assert f"for (int64_t r = tmp1_whole; r < {last}; ++r) {{" in cpp, cpp
    else:
        assert f"for (int64_t r1 = r0; r1 < {last}; r1 += 32) {{" in cpp, cpp
        assert "whole" not in cpp, cpp


@pytest.mark.parametrize(
    ("name", "accumulators", "lanes"),
    [
        ("row_sum", ["float tmp1_lane"], 32),
        ("row_sum_short", ["float tmp1_lane"], 32),
        ("row_amax", ["float tmp1_lane"], 32),
        ("row_amin", ["float tmp1_lane"], 32),
        ("row_norm", ["float tmp1_lane", "float tmp5_lane"], 32),
        ("row_sum_int", ["int64_t tmp2_lane"], 16),
        ("row_sum_f64", ["double tmp1_lane"], 16),
        ("row_max_then_min", ["float tmp1_lane", "float tmp3_lane"], 32),
        ("row_positions", ["float tmp1_best", "int64_t tmp1_at"], 32),
        ("row_positions_int", ["int64_t tmp1_best", "int64_t tmp1_at"], 16),
    ],
)
def test_long_rows_reduce_into_lanes(
    compiled, name: str, accumulators: list[str], lanes: int
) -> None:
    """Sums, maxima, minima and positions of a row longer than 4 groups keep a
    vector's worth of accumulators several times over: independent chains (Note
    [Lanes]); a position has no branch, so that it vectorizes."""
    cpp = kernel_text(compiled[name])
    for acc in accumulators:
        assert f"{acc}[{lanes}];" in cpp, cpp
    assert f"for (int64_t l = 0; l < {lanes}; ++l) {{" in cpp, cpp
    assert not re.search(r"reduction\((\+|max|min):", cpp), cpp
    assert "if (" not in cpp.split("#pragma omp simd")[1], cpp


@pytest.mark.parametrize(
    ("name", "groups", "inner", "loads"),
    [("row_group_norm", 2, 256, 2), ("row_softmax_by_group", 8, 64, 1)],
)
def test_a_row_loop_splits_where_an_index_divides_it(
    compiled, name: str, groups: int, inner: int, loads: int
) -> None:
    """A loop over the row whose index needs `r / n` runs as `groups` groups of
    `inner` elements, the group's weights read once per group, before the
    vectorized loop; what reads the row buffer finds `r` again."""
    cpp = kernel_text(compiled[name])
    head = f"for (int64_t r0 = 0; r0 < {groups}; ++r0) {{"
    assert head in cpp, cpp
    group = cpp[cpp.index(head) : cpp.index(f"for (int64_t r1 = 0; r1 < {inner}; ")]
    assert len(re.findall(r"= \w+_ptr\[[^\]]*\br0\b", group)) == loads, group
    assert not re.search(r"\br\s*[/%]", cpp), cpp
    if "_row[" in cpp:
        assert f"int64_t r = r0 * {inner} + r1;" in cpp, cpp


def test_a_short_row_keeps_one_accumulator(compiled) -> None:
    cpp = kernel_text(compiled["row_sum_tiny"])
    assert "_lane" not in cpp, cpp
    assert "#pragma omp simd reduction(+:tmp1)" in cpp, cpp


def test_a_row_of_one_chunk_is_one_loop(compiled) -> None:
    cpp = kernel_text(compiled["row_sum_short"])
    assert "int64_t r0" not in cpp and "whole" not in cpp, cpp
    assert "for (int64_t r1 = 0; r1 < 512; r1 += 32) {" in cpp, cpp


def test_rows_of_any_dynamic_length(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import runtime_shim

    def no_fallback(target, misses):
        raise AssertionError(f"{target} fell back to eager: {misses}")

    monkeypatch.setattr(runtime_shim, "warn_fallback", no_fallback)
    spec = {"x": parse_spec("f32[7,D]")}
    cases = {"row_amax": spec, "row_norm": spec}
    compiled = compile_source(SOURCE, cases, tmp_path)
    assert "int64_t tmp1_whole = D / 32 * 32;" in compiled["row_amax"].cpp_text
    assert "std::min<int64_t>(r0 + 4096, D)" in compiled["row_norm"].cpp_text
    for length in (1, 2, 31, 32, 33, 511, 512, 513, 1500, 4096, 4097, 9000):
        x = randn(7, length)
        if length > 600:
            x = with_specials(x)
        want = x.amax(-1)
        torch.testing.assert_close(compiled["row_amax"](x), want, equal_nan=True)
        x = 3 + randn(7, length)
        want = torch.nn.functional.layer_norm(x, (length,))
        torch.testing.assert_close(compiled["row_norm"](x), want)


@pytest.mark.parametrize(
    ("name", "step"), [("row_softmax", 16), ("row_softmax_bf16", 32)]
)
def test_the_exp_loop_prefetches_the_next_row(compiled, name: str, step: int) -> None:
    """Softmax reads its row for the max, then again for `exp`: while the `exp` loop
    computes, the next row's cache lines, one prefetch per 64 bytes, are asked for."""
    cpp = kernel_text(compiled[name])
    prefetches = re.findall(
        r"for \(int64_t r = r0; r < r0 \+ 512; r \+= (\d+)\) \{\n"
        r"\s*__builtin_prefetch\(&x_ptr\[1024 \* \(x \+ 1\) \+ r\]\);\n"
        r"\s*\}\n\s*for \(int64_t r1 = r0; r1 < r0 \+ 512; r1 \+= 32\) \{\n"
        r"\s*#pragma omp simd\n[^}]*exp_f32",
        cpp,
    )
    assert prefetches == [str(step)], cpp


def test_rows_too_long_for_l1_are_not_prefetched(compiled) -> None:
    assert "__builtin_prefetch" not in kernel_text(compiled["scaled_twice"])
    assert "__builtin_prefetch" in kernel_text(compiled["row_norm"])


def test_a_loop_reading_kept_values_computes_nothing_else(compiled) -> None:
    """Softmax's last loop reads `exp(x - max)` from the row buffer the sum loop
    filled: it loads no `x` and subtracts nothing, it only scales and stores."""
    cpp = kernel_text(compiled["row_softmax"])
    last = cpp[cpp.rindex("#pragma omp simd") :]
    body = last[last.index("{") + 1 : last.index("}")]
    lines = [line.strip() for line in body.strip().splitlines()]
    assert len(lines) == 3, body
    assert re.fullmatch(r"float (\w+) = \1_row\[r\];", lines[0]), body
    assert "x_ptr" not in body and " - " not in body, body
    x = CASES["row_softmax"]["x"]
    torch.testing.assert_close(compiled["row_softmax"].cpu(x), torch.softmax(x, -1))


BOOL_SOURCE = """
import torch


def where_scalar(x, m):
    return torch.where(m, x, -1e9)


def masked_scale(x, m):
    return x * m


def masked_fill(x, m):
    return x.masked_fill(m, 0.0) + 1.0
"""


def test_loops_reading_bools_vectorize(tmp_path: Path) -> None:
    """A kernel that selects or converts floats by a mask read from memory: GCC
    vectorizes none that loads `bool` (a scalar loop branching on each element),
    so a bool input is read as its byte. Checked on GCC's own report of the loops
    it vectorized, one in each kernel."""
    import platform
    import shutil
    import subprocess

    from runtime_shim.cpp import INCLUDE_FLAGS, PORTABLE_CXX_FLAGS

    gcc = shutil.which("g++")
    if gcc is None or platform.machine() != "x86_64":
        pytest.skip("g++ for x86-64 (AVX2) reports what it vectorized here")
    gen = torch.Generator().manual_seed(9)
    x = torch.randn(64, 96, generator=gen)
    m = torch.rand(1, 96, generator=gen) > 0.5
    names = ("where_scalar", "masked_scale", "masked_fill")
    compiled = compile_source(
        BOOL_SOURCE, {name: {"x": x, "m": m} for name in names}, tmp_path
    )
    for name in names:
        compiled[name].check({"x": x, "m": m})
    text = compiled[names[0]].cpp_text
    source = tmp_path / "kernels.cpp"
    source.write_text(text)
    flags = [f for f in PORTABLE_CXX_FLAGS if f != "-shared"] + [*INCLUDE_FLAGS]
    report = subprocess.run(
        [gcc, *flags, "-march=x86-64-v3", "-fopt-info-vec-optimized", "-c"]
        + [str(source), "-o", str(tmp_path / "kernels.o")],
        capture_output=True,
        text=True,
        check=True,
    ).stderr
    vectorized = {
        int(n) for n in re.findall(r":(\d+):\d+: optimized: loop vectorized", report)
    }
    starts = [
        i + 1
        for i, line in enumerate(text.splitlines())
        if line.startswith('extern "C"')
    ]
    ends = starts[1:] + [len(text.splitlines()) + 1]
    assert len(starts) == len(names), text
    for start, end in zip(starts, ends):
        assert any(start <= n < end for n in vectorized), (start, end, report)
