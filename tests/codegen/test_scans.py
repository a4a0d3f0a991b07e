"""Scans (`cumsum`, `cumprod`) in generated kernels on both backends (Note [Scans]
in passes/schedule.py).

A table of the ways models use them: position ids from an attention mask, running
sums along a sequence or down columns, a running product, a scan of a softmax
(top-p sampling) and reductions of a scan in the same kernel; over rows shorter
than a group, rows with a partial last group, rows longer than a Triton block,
integer, bool and bf16 inputs, and values that are not finite. Each case is checked
against eager, outputs and inputs after the call, and must compute everything in
kernels: no extern call.
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


def rows(x):
    return torch.cumsum(x, dim=-1)


def position_ids(attention_mask):
    position_ids = attention_mask.long().cumsum(-1) - 1
    position_ids.masked_fill_(attention_mask == 0, 1)
    return position_ids


def make_positions(tokens, padding_idx: int = 1):
    mask = tokens.ne(padding_idx).int()
    return (torch.cumsum(mask, dim=1).type_as(mask) * mask).long() + padding_idx


def columns(x):
    return torch.cumsum(x * 2, dim=0) + 1


def middle(x):
    return x.cumsum(1)


def running_product(x):
    return torch.cumprod(x, 1)


def bools(m):
    return m.cumsum(1)


def in_double(x):
    return x.cumsum(-1, dtype=torch.float64)


def top_p(logits):
    probs = torch.softmax(logits, -1)
    return probs.cumsum(-1) > 0.9


def scan_then_reduce(x):
    c = x.cumsum(-1)
    return c / c.sum(-1, keepdim=True), c.amax(-1)


def decay(dt, A, b):
    # Mamba's discretization: softplus step, decay, cumulative log decay
    dt = torch.nn.functional.softplus(dt + b)
    return torch.exp(torch.cumsum(dt * A[:, None], dim=-1))


def read_around(x):
    y = x.exp()
    return y.cumsum(-1) / y, y.cumprod(-1)


def scan_of_scan(x):
    return x.cumsum(-1).cumsum(-1)
"""

g = torch.Generator().manual_seed(0)


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g)


def not_finite(x: torch.Tensor) -> torch.Tensor:
    """inf in row 1 (then inf - inf further on: NaN), NaN in row 2, 0 in row 3."""
    x = x.clone()
    x[1, 3] = float("inf")
    x[1, 7] = float("-inf")
    x[2, 5] = float("nan")
    x[3, 2] = 0.0
    return x


CASES = {
    # small values: f32 sums of a thousand elements within eager's tolerance
    "rows": {"x": not_finite(randn(37, 1003) / 8)},  # 1003 = 125 * 8 + 3
    "rows_short": {"x": randn(5, 6)},  # shorter than a group
    "position_ids": {"attention_mask": (torch.rand(4, 77, generator=g) > 0.2).int()},
    "make_positions": {"tokens": torch.randint(0, 6, (3, 40), generator=g)},
    "columns": {"x": randn(300, 96) / 4},  # across rows: a tile of columns
    "middle": {"x": randn(4, 50, 33)},
    "running_product": {"x": not_finite(1 + 0.01 * randn(5, 200))},
    "bools": {"m": torch.rand(6, 30, generator=g) > 0.5},
    "in_double": {"x": randn(4, 500)},
    "bf16": {"x": randn(8, 300).bfloat16() / 4},
    "top_p": {"logits": randn(8, 5000)},
    "scan_then_reduce": {"x": randn(6, 700).abs()},
    # longer than a Triton block: a loop over the row with a carry between blocks
    "long_rows": {"x": randn(2, 40000) / 64},
    # in stages (Note [Scans in stages]): math before and after the scan
    "decay": {"dt": randn(16, 300), "A": -randn(16).abs(), "b": randn(300)},
    "read_around": {"x": not_finite(randn(6, 130) / 16)},
    "scan_of_scan": {"x": randn(3, 150) / 8},
}
FUNCTION = {"rows_short": "rows", "bf16": "rows", "long_rows": "rows"}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory):
    source, functions = SOURCE, {}
    for case, inputs in CASES.items():
        fn = FUNCTION.get(case, case)
        if fn != case:
            source += f"\n\ndef {case}(x):\n    return {fn}(x)\n"
        functions[case] = inputs
    return compile_source(source, functions, tmp_path_factory.mktemp("scans"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager(compiled, name: str) -> None:
    c = compiled[name]
    c.check(CASES[name])
    for source in (c.cpu_source, c.cuda_source):
        assert "torch.ops" not in source and "extern" not in source, source


def test_every_variant_is_kernels_only(compiled) -> None:
    doc = next(iter(compiled.values())).module.__doc__
    counts = re.findall(r"(\d+) kernels?, (\d+) extern calls?", doc)
    assert len(counts) == 2 * len(CASES), doc
    assert all(externs == "0" for _, externs in counts), doc


def cpp_kernel(c, word: str) -> str:
    for name in re.findall(r'_cpp\.function\("(\w+)"', c.cpu_source):
        start = c.cpp_text.index(f"void {name}(")
        end = c.cpp_text.find('extern "C"', start)
        text = c.cpp_text[start : end if end != -1 else None]
        if word in text:
            return text
    raise AssertionError(f"no kernel with {word!r}:\n{c.cpp_text}")


def test_cpp_rows_go_in_stages(compiled) -> None:
    """Note [Scans in stages]: with math before or after the scan, stages of 64
    elements, each a vectorized loop of the scan's inputs, the running values in
    order, a group at a time (in double, as eager's), and a vectorized loop of the
    rest; the last 44 elements of 300 one by one."""
    step = cpp.SCAN_STAGE
    for name, reads in (("decay", 1), ("read_around", 2)):
        text = cpp_kernel(compiled[name], "_carry")
        assert text.count("#pragma omp simd") == 2, text
        assert re.search(rf"double tmp\d+_val\[{step}\];", text), text
        assert len(re.findall(r"tmp\d+_run [+*]= tmp\d+_in\[l\];", text)) == reads
    decay = cpp_kernel(compiled["decay"], "_carry")
    assert f"for (int64_t r1 = 0; r1 < 256; r1 += {step}) {{" in decay, decay
    assert "for (int64_t r = 256; r < 300; ++r) {" in decay, decay
    # the exp and log1p before the scan and the exp after it are in the loops
    # that are vectorized
    first, _, last = decay.partition("_val[")
    assert "log1p_f32(" in first and "exp_f32(" in last.split("_val[")[-1], decay
    assert "_kept[" in cpp_kernel(compiled["read_around"], "_carry")  # exp(x), kept


def test_cpp_groups_where_stages_do_not_apply(compiled) -> None:
    """A scan of loaded values, a scan read by reductions of the same loop, or
    one feeding another scan, adds a group of eight on its own, then joins the
    carry: one add per group waits for the one before, and no `omp simd` on a
    loop whose elements depend on each other; the last three elements of 1003
    go into the carry one by one."""
    step = cpp.SCAN_GROUP
    for name in ("rows", "scan_then_reduce", "scan_of_scan"):
        text = cpp_kernel(compiled[name], "_carry")
        assert re.search(rf"r1 \+= {step}\) {{", text), text
        assert re.search(r"double tmp\d+_run = 0;", text), text
        assert re.search(r"tmp\d+_carry \+= tmp\d+_run;", text), text
        assert "_val[" not in text, text
    rows = cpp_kernel(compiled["rows"], "_carry")
    assert f"for (int64_t r1 = 0; r1 < 1000; r1 += {step}) {{" in rows, rows
    assert "for (int64_t r = 1000; r < 1003; ++r) {" in rows, rows
    assert "omp simd" not in rows, rows
    short = cpp_kernel(compiled["rows_short"], "_carry")
    assert "r1" not in short and "for (int64_t r = 0; r < 6; ++r) {" in short, short


def test_cpp_columns_carry_one_value_per_column(compiled) -> None:
    text = cpp_kernel(compiled["columns"], "_carry")
    assert re.search(r"double tmp\d+_carry\[\d+\];", text), text
    assert re.search(r"tmp\d+_carry\[x1\] \+= tmp\d+;", text), text
    assert "#pragma omp simd" in text, text  # across the columns


def test_a_scan_joins_its_producers_and_consumers(compiled) -> None:
    """`mask.long().cumsum(-1) - 1` with its `masked_fill_` is one kernel, and so
    is a softmax with the running sum of its result and the comparison."""
    for name in ("position_ids", "top_p", "scan_then_reduce"):
        c = compiled[name]
        for source in (c.cpu_source, c.cuda_source):
            calls = re.findall(r"_cpp\.function|triton_\w+\[", source)
            assert len(calls) == 1, source


def test_triton_scans_a_block_and_carries_between_blocks(compiled) -> None:
    text = compiled["long_rows"].triton_text
    assert re.search(r"tmp\d+ = tmp\d+_carry \+ tl\.cumsum\(tmp\d+, 1\)", text), text
    assert "tl.cumprod(" in compiled["running_product"].triton_text


def test_rows_of_any_dynamic_length(tmp_path: Path, monkeypatch) -> None:
    import runtime_shim

    def no_fallback(target, misses):
        raise AssertionError(f"{target} fell back to eager: {misses}")

    monkeypatch.setattr(runtime_shim, "warn_fallback", no_fallback)
    spec = {"x": parse_spec("f32[3,N]")}
    c = compile_source(SOURCE, {"rows": spec}, tmp_path)["rows"]
    for n in (1, 7, 8, 9, 100, 1003):
        x = randn(3, n)
        torch.testing.assert_close(c(x), c.eager(x))
