"""Reductions over any dimensions, in generated kernels on both backends.

A sweep: for inputs of rank 2 to 4, every set of dimensions that is not the last
ones (leading: a column reduction; middle: a batch norm's (0, 2, 3); several; all
but one), each function reducing one input several ways at once (sum, amax, amin,
mean with keepdim, var) with a pointwise prologue computed in the kernel and an
epilogue that reads the per-row results back per element (`x - mean`), and a
second reduction of values shifted by a first's result read back through a
reshape to the kept shape (a softmax's sum, written by hand). Each is
compared with eager on outputs and inputs after the call (`Compiled.check`), and
must run every reduction in a generated kernel: no extern call.

Trailing reductions are covered by the examples and the op cases; a few stay here
as controls, in the same kernels as reordered ones where the shapes allow it.
"""

from __future__ import annotations

import re

import pytest
import torch

from tests.compile_helpers import compile_source
from transpiler.codegen import triton as triton_codegen

SOURCE = """
import torch


def several(x, dims: tuple):
    y = x * 1.5 + 0.25
    centered = y - y.mean(dims, keepdim=True)
    kept = [1 if d in dims else n for d, n in enumerate(y.shape)]
    return (
        y.sum(dims),
        y.amax(dims),
        y.amin(dims),
        y.var(dims, keepdim=True),
        centered * 2.0,
        torch.exp(y - y.amax(dims).reshape(kept)).sum(dims),
    )
"""

SWEEP = [
    ((24, 40), (0,)),
    ((6, 10, 16), (0,)),
    ((6, 10, 16), (1,)),
    ((6, 10, 16), (0, 1)),
    ((6, 10, 16), (0, 2)),
    ((4, 6, 5, 7), (0, 2, 3)),
    ((4, 6, 5, 7), (1,)),
    ((4, 6, 5, 7), (1, 3)),
    ((4, 6, 5, 7), (0, 1, 2)),
    ((4, 1, 5, 7), (0, 2)),
    ((3, 5, 1), (1,)),  # trailing once the 1 is left out
    ((6, 10, 16), (2,)),  # trailing: a control
]


def _source(cases) -> tuple[str, dict]:
    lines, functions = [SOURCE], {}
    for i, (shape, dims) in enumerate(cases):
        lines.append(f"def case_{i}(x):\n    return several(x, {dims!r})\n")
        functions[f"case_{i}"] = {"x": torch.randn(shape)}
    return "\n".join(lines), functions


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    source, functions = _source(SWEEP)
    return compile_source(source, functions, tmp_path_factory.mktemp("reductions"))


@pytest.mark.slow
@pytest.mark.parametrize("i", range(len(SWEEP)), ids=lambda i: f"{SWEEP[i]}")
def test_reduction_sweep(compiled, i: int) -> None:
    shape, _ = SWEEP[i]
    case = compiled[f"case_{i}"]
    gen = torch.Generator().manual_seed(i)
    x = torch.randn(shape, generator=gen) * 3 + 10  # a mean away from zero
    case.check({"x": x})
    assert "extern" not in case.cpu_source and "torch.ops" not in case.cpu_source


@pytest.mark.slow
def test_every_variant_is_kernels_only(compiled) -> None:
    doc = next(iter(compiled.values())).module.__doc__
    counts = re.findall(r"(\d+) kernels?, (\d+) extern calls?", doc)
    assert len(counts) == 2 * len(SWEEP), doc
    assert all(externs == "0" for _, externs in counts), doc


NAN_SOURCE = """
import torch


def column_max(x):
    return x.amax(0), x.amin(0), x.sum(0)
"""


def test_column_max_propagates_nan(tmp_path) -> None:
    x = torch.randn(33, 20)
    x[5, 3] = float("nan")
    x[:, 7] = float("-inf")
    case = compile_source(NAN_SOURCE, {"column_max": {"x": x}}, tmp_path)["column_max"]
    case.check({"x": x})


BF16_SOURCE = """
import torch


def column_mean(x, w):
    return (x * w).mean(0), x.float().sum((0, 2))
"""


def test_column_reductions_in_bf16(tmp_path) -> None:
    x = torch.randn(64, 12, 9).to(torch.bfloat16)
    w = torch.randn(12, 9).to(torch.bfloat16)
    case = compile_source(BF16_SOURCE, {"column_mean": {"x": x, "w": w}}, tmp_path)
    case["column_mean"].check({"x": x, "w": w})


SPLIT_SOURCE = """
import torch
import torch.nn.functional as F


def column_sums(x):
    return x.sum(0), x.amax(0), x.mean(0, keepdim=True)


def totals(x):
    return (x * x).sum(), x.mean(), x.amin()


def low_precision(x):
    return x.sum(0), x.mean()


def variances(x):
    return torch.var_mean(x, 0), x.var(0, correction=0), x.std()


def group_norm(x, w, b):
    return F.silu(F.group_norm(x, 4, w, b))
"""


def _kernel_launches(source: str) -> int:
    return source.count("_cpp.function(") + source.count("_triton.")


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    """Reductions with few results and long rows: split in two kernels each side
    (Note [Split reductions] in passes/split_reductions.py)."""
    functions = {
        "column_sums": {"x": torch.randn(2048, 160)},
        "totals": {"x": torch.randn(512, 1024)},
        "low_precision": {"x": torch.randn(4096, 96).to(torch.bfloat16)},
        "variances": {"x": torch.randn(4096, 96)},
        "group_norm": {
            "x": torch.randn(1, 16, 128, 128),
            "w": torch.randn(16),
            "b": torch.randn(16),
        },
    }
    root = tmp_path_factory.mktemp("split")
    return compile_source(SPLIT_SOURCE, functions, root), functions


@pytest.mark.slow
@pytest.mark.parametrize(
    "name", ["column_sums", "totals", "low_precision", "variances", "group_norm"]
)
def test_split_reductions(split, name: str) -> None:
    """Checked on inputs far from 0 (a mean of 3), where a variance's parts must
    combine around the whole mean, not their own."""
    compiled, functions = split
    case = compiled[name]
    inputs = dict(functions[name])
    gen = torch.Generator().manual_seed(7)
    x = inputs["x"]
    inputs["x"] = (torch.randn(x.shape, generator=gen) + 3).to(x.dtype)
    case.check(inputs)
    # partial results, then their totals: more kernels than unsplit (`variances`
    # has two then, `group_norm` one)
    least = {"variances": 3}.get(name, 2)
    assert _kernel_launches(case.cpu_source) >= least, case.cpu_source


SIBLINGS_SOURCE = """
import torch
import torch.nn.functional as F


def siblings(a, b):
    return a.sum(-1), b.amax(-1)


def column_totals(x):
    return x.sum(0), x.amax(0)


def group_norm(x, w, b):
    return F.silu(F.group_norm(x, 4, w, b))


def after_extern(a, w):
    total = a.sum(-1)
    m = (a * total[:, None]) @ w
    return total, m.amax(-1)
"""


def test_sibling_reductions_share_a_kernel(tmp_path) -> None:
    """Reductions over the same rows share a kernel though they share no input
    (Note [Sibling reductions] in passes/fuse.py): two inputs' sums and maxima;
    the totals of a split column sum and max, each over its own partials; a split
    group norm's statistics, within and between its parts. A reduction of what an
    extern call computes from the other's result cannot share its kernel."""
    gen = torch.Generator().manual_seed(3)
    functions = {
        "siblings": {"a": torch.randn(64, 48, generator=gen), "b": torch.randn(64, 48)},
        "column_totals": {"x": torch.randn(2048, 160, generator=gen)},
        "group_norm": {
            "x": torch.randn(1, 16, 128, 128, generator=gen) + 3,
            "w": torch.randn(16, generator=gen),
            "b": torch.randn(16, generator=gen),
        },
        "after_extern": {
            "a": torch.randn(64, 48, generator=gen),
            "w": torch.randn(48, 48, generator=gen),
        },
    }
    compiled = compile_source(SIBLINGS_SOURCE, functions, tmp_path)
    for name, inputs in functions.items():
        compiled[name].check(inputs)
    cpu = {name: _kernel_launches(compiled[name].cpu_source) for name in functions}
    # one kernel; partials then totals; partials, statistics, normalized values
    assert (
        cpu["siblings"] == 1 and _kernel_launches(compiled["siblings"].cuda_source) == 1
    )
    assert cpu["column_totals"] == 2 and cpu["group_norm"] == 3, cpu
    assert cpu["after_extern"] >= 2, cpu


DISTILLATION_SOURCE = """
import torch
import torch.nn.functional as F


def kd_loss(student, teacher):
    T = 4.0
    return F.kl_div(
        F.log_softmax(student / T, dim=-1),
        F.softmax(teacher / T, dim=-1),
        reduction="batchmean",
    ) * (T * T)
"""


def test_a_row_kernel_read_by_two_kernels_joins_the_first(tmp_path) -> None:
    """A distillation loss: the teacher's softmax, a row reduction's kernel, is
    read by the kernel of the student's log-softmax and by the kernel of the
    loss's terms. It joins the student's kernel (`fuse._mergeable`): one kernel
    reads both rows, computes the terms and sums them, and a second one totals
    the sums; no softmax is written."""
    gen = torch.Generator().manual_seed(4)
    inputs = {
        "student": torch.randn(64, 1000, generator=gen),
        "teacher": torch.randn(64, 1000, generator=gen),
    }
    compiled = compile_source(DISTILLATION_SOURCE, {"kd_loss": inputs}, tmp_path)
    compiled["kd_loss"].check(inputs)
    for source in (compiled["kd_loss"].cpu_source, compiled["kd_loss"].cuda_source):
        assert _kernel_launches(source) == 2, source


FORMULAS_SOURCE = """
import torch
import torch.nn.functional as F


def spreads(x):
    return x.std(-1), x.std(0, correction=0), torch.std_mean(x, 1, keepdim=True)


def log_sum_exp(x):
    return torch.logsumexp(x, -1), torch.logsumexp(x, (0, 1))


def norms(x):
    v = torch.linalg.vector_norm
    return v(x, dim=-1), v(x, ord=1, dim=0), v(x, ord=float("inf"), dim=-1), x.norm()


def group_norm(x, w, b):
    return F.group_norm(x, 4, w, b), F.group_norm(x, 2)


def any_all(m, x):
    return m.any(-1), m.all(0), m.any(), x.any(-1), x.all(0), (x > 0).all()
"""


def _formula_inputs() -> dict:
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(12, 40, generator=gen) * 4
    lse = x.clone()
    lse[1] = float("-inf")  # a row of -inf: logsumexp is -inf there
    lse[2, 5] = float("inf")
    m = torch.rand(12, 40, generator=gen) > 0.1
    m[3] = True
    m[4] = False
    y = torch.randn(12, 40, generator=gen).round()  # zeros among the values
    y[5, 7] = float("nan")  # nan != 0: any is true, all stays true
    return {
        "spreads": {"x": x},
        "log_sum_exp": {"x": lse},
        "norms": {"x": x},
        "group_norm": {
            "x": torch.randn(3, 8, 5, 6, generator=gen) * 2 + 1,
            "w": torch.randn(8, generator=gen),
            "b": torch.randn(8, generator=gen),
        },
        "any_all": {"m": m, "x": y},
    }


@pytest.fixture(scope="module")
def formulas(tmp_path_factory):
    root = tmp_path_factory.mktemp("formulas")
    return compile_source(FORMULAS_SOURCE, _formula_inputs(), root)


@pytest.mark.parametrize("name", list(_formula_inputs()))
def test_reductions_by_formula_run_in_kernels(formulas, name: str) -> None:
    """std, logsumexp, vector norms, group norm, any and all: formulas of the
    reductions kernels compute (passes/decompose.py), equal to eager, edge values
    included, with no extern call."""
    case = formulas[name]
    case.check(_formula_inputs()[name])
    counts = re.findall(r"(\d+) kernels?, (\d+) extern calls?", case.module.__doc__)
    assert counts and all(e == "0" for _, e in counts), case.module.__doc__


LONG_ROWS_SOURCE = """
import torch
import torch.nn.functional as F


def long_rows(x):
    return torch.softmax(x, -1), F.log_softmax(x, -1), torch.logsumexp(x, -1)
"""


@pytest.mark.slow
@pytest.mark.parametrize("held", [True, False])
def test_long_rows(tmp_path, held: bool) -> None:
    """Rows longer than a block (Note [Online softmax] in codegen/triton.py): the
    max and the sum of exponentials in one pass, the sum rescaled as the max grows
    (values rising along the row), with rows of -inf, +inf (twice in a lane) and
    NaN, and of one value; and rows that long held in registers whole
    (`LONG_ROW_MAX`)."""
    gen = torch.Generator().manual_seed(5)
    n = 9000 if held else triton_codegen.LONG_ROW_MAX + 1000
    x = torch.randn(9, n, generator=gen) * 3
    x[1] = float("-inf")
    x[2, 100] = float("inf")
    x[3, n - 1] = float("nan")
    x[4] = torch.linspace(-50, 80, n)  # a new max in every block
    x[5, :4000] = float("-inf")  # lanes that see only -inf at first
    x[6] += 1e4
    x[7, 100] = x[7, 100 + triton_codegen.LOOPED_RBLOCK] = float("inf")  # one lane
    x[8] = 2.5  # every value the lane's max
    case = compile_source(LONG_ROWS_SOURCE, {"long_rows": {"x": x}}, tmp_path)
    case["long_rows"].check({"x": x})
    assert ("online softmax" in case["long_rows"].triton_text) != held


ROW_FORMS_SOURCE = """
import torch
import torch.nn.functional as F


def lse(x):
    return torch.logsumexp(x, -1)


def nll(x, t):
    return F.cross_entropy(x, t, reduction="none")


def soft(x):
    return torch.softmax(x, -1)


def best(x):
    return torch.argmax(x, -1)


def embed_norm(ids, table):
    return F.layer_norm(table[ids], (table.shape[-1],))


def columns(x):
    return x.sum(0), x.amax(0)
"""


@pytest.mark.slow
def test_rows_read_once_loop_others_held(tmp_path) -> None:
    """Rows between PERSISTENT_MAX and LONG_ROW_MAX (Note [Rows read once] in
    codegen/triton.py): a log-sum-exp or a cross-entropy reads its row once in an
    online loop; a softmax, which reads the row again after its reductions, and
    an argmax, reduced once, hold it in registers; a row read once asks L2 to keep
    none of it (Note [Passes over a row]). An argmax launches at most
    POSITION_WARPS warps; a row gathered by an index of int64 launches warps by its
    table's f32, not the index's bytes; a tile of columns ACROSS_ROWS_WARPS."""
    gen = torch.Generator().manual_seed(11)
    n = triton_codegen.PERSISTENT_MAX + 3000
    x = torch.randn(5, n, generator=gen) * 4
    x[1, 7] = float("inf")
    x[2] = torch.linspace(-30, 60, n)  # a new max in every block
    x[3, n - 2] = float("nan")
    t = torch.tensor([0, n - 1, 5, 17, n // 2])
    ids = torch.randint(0, 50, (6, 4), generator=gen)
    table = torch.randn(50, 768, generator=gen)
    inputs = {
        "lse": {"x": x},
        "nll": {"x": x, "t": t},
        "soft": {"x": x},
        "best": {"x": x},
        "embed_norm": {"ids": ids, "table": table},
        "columns": {"x": torch.randn(300, 96, generator=gen)},
    }
    case = compile_source(ROW_FORMS_SOURCE, inputs, tmp_path)
    for name, example in inputs.items():
        case[name].check(example)
    launches = {
        name: re.findall(r"RBLOCK=(\d+), num_warps=(\d+)", case[name].cuda_source)
        for name in inputs
    }
    for name in ("lse", "nll"):  # the row's one pass is a loop
        assert any(int(r) < n for r, _ in launches[name]), launches[name]
        # read once: no hint to keep it in L2 (a target's gather is not a pass)
        assert "evict_last" not in case[name].triton_text
    for name in ("soft", "best"):  # the row in registers
        assert all(int(r) >= n for r, _ in launches[name]), launches[name]
    (argmax,) = launches["best"]
    assert int(argmax[1]) <= triton_codegen.POSITION_WARPS
    # 768 f32 (a block of 1024) at 16 a thread: 2 warps
    assert ("1024", "2") in launches["embed_norm"], launches["embed_norm"]
    # a tile of rows read side by side
    warps = str(triton_codegen.ACROSS_ROWS_WARPS)
    assert ("32", warps) in launches["columns"], launches["columns"]


CHANNELS_SOURCE = """
import torch
import torch.nn.functional as F


def normalize_channels(x):
    return F.normalize(x, dim=1)


def channels_first_norm(x, w, b):
    u = x.mean(1, keepdim=True)
    s = (x - u).pow(2).mean(1, keepdim=True)
    return w[:, None, None] * ((x - u) / torch.sqrt(s + 1e-6)) + b[:, None, None]


def channel_sums(x):
    return x.sum(1)
"""


def test_rows_read_side_by_side_twice_are_held(tmp_path) -> None:
    """A normalization over the channels of NCHW reads its rows side by side
    (the channels of neighbouring positions) twice, for the statistics and for
    the elements: rows of at most ACROSS_ROWS_HELD elements are held in
    registers, ACROSS_ROWS_BLOCK's rows side by side, and read once; a sum
    over the channels, one pass, keeps the tile of ACROSS_ROWS_BLOCK."""
    gen = torch.Generator().manual_seed(12)
    inputs = {
        "normalize_channels": {"x": torch.randn(2, 256, 8, 8, generator=gen)},
        "channels_first_norm": {
            "x": torch.randn(2, 96, 5, 7, generator=gen) * 3 + 1,
            "w": torch.randn(96, generator=gen),
            "b": torch.randn(96, generator=gen),
        },
        "channel_sums": {"x": torch.randn(2, 256, 8, 8, generator=gen)},
    }
    case = compile_source(CHANNELS_SOURCE, inputs, tmp_path)
    for name, example in inputs.items():
        case[name].check(example)
    rows = triton_codegen.ACROSS_ROWS_BLOCK[0]
    for name, rblock in (("normalize_channels", 256), ("channels_first_norm", 128)):
        launch = re.findall(
            r"XBLOCK=(\d+), RBLOCK=(\d+), num_warps=(\d+)", case[name].cuda_source
        )
        assert launch == [(str(rows), str(rblock), str(rows * rblock // 512))], launch
        (kernel,) = re.findall(r"_triton\.(\w+)\[", case[name].cuda_source)
        text = case[name].triton_text.split(f"def {kernel}(")[1].split("@triton.jit")[0]
        assert "for roffset" not in text, text
    (launch,) = re.findall(
        r"XBLOCK=(\d+), RBLOCK=(\d+)", case["channel_sums"].cuda_source
    )
    assert launch == tuple(map(str, triton_codegen.ACROSS_ROWS_BLOCK)), launch


VARIANCE_SOURCE = """
import torch
import torch.nn.functional as F


def variances(x):
    var, mean = torch.var_mean(x, -1)
    std = x.std(-1, correction=0, keepdim=True)
    normed = F.group_norm(x.view(3, 2, -1), 1)
    return var, mean, std, normed
"""


@pytest.mark.slow
@pytest.mark.parametrize("rows", ["long", "held", "short"])
def test_variance_of_rows_longer_than_a_block(tmp_path, rows: str) -> None:
    """Rows longer than a block (Note [Welford] in codegen/triton.py): the mean
    and the sum of squared deviations in one pass, lanes joined pairwise, against
    eager and against float64: rows far from zero (where E[x^2] - E[x]^2 would
    lose every digit), constant rows (variance exactly 0), a NaN and an inf, rows
    that end inside a block; group norm normalizes with them, reading its rows
    twice. Rows held in registers whole are reduced twice there (the control).
    Short rows: the C++ kernel computes the corrected statistics with one helper
    (`row_spread` in runtime_shim/kernels.h) over the row's buffer."""
    gen = torch.Generator().manual_seed(7)
    n = {"long": triton_codegen.LONG_ROW_MAX + 1000, "held": 3000, "short": 100}[rows]
    long = rows == "long"
    x = torch.randn(6, n, generator=gen)
    x[1] = 1000 + 1e-3 * torch.randn(n, generator=gen)  # far from zero
    x[2] = 3.25  # constant
    x[3, 17] = float("nan")
    x[4, n - 1] = float("inf")
    x[5] = torch.linspace(1e3, 1e4, n)  # the mean moves along the row
    case = compile_source(VARIANCE_SOURCE, {"variances": {"x": x}}, tmp_path)
    case["variances"].check({"x": x})
    text = case["variances"].triton_text
    assert ("Welford" in text) == long
    # the group norm's second loop reads the row again: L2 keeps it for that one
    # (Note [Passes over a row] in codegen/triton.py)
    assert ('eviction_policy="evict_last"' in text) == long
    assert ('eviction_policy="evict_first"' in text) == long
    if rows == "short":  # a row read whole, not a chunk at a time
        assert "row_spread<float>(" in case["variances"].cpp_text
    exact = x[[0, 1, 5]].double()
    for variant in (case["variances"].cpu, case["variances"].cuda):
        var, mean, _, _ = variant(x)
        # to f32's accuracy; the row far from zero gets 1e-6, where Welford's
        # updates of the values themselves get 7e-3 and E[x^2] - E[x]^2 nothing
        close = torch.testing.assert_close
        close(var[[0, 1, 5]].double(), exact.var(-1), rtol=1e-4, atol=0)
        close(mean[[0, 1, 5]].double(), exact.mean(-1), rtol=1e-5, atol=1e-6)
        assert var[2] == 0 and var[3].isnan() and var[4].isnan()
        assert mean[2] == 3.25 and mean[3].isnan() and mean[4] == float("inf")


POSITIONS_SOURCE = """
import torch


def positions(x):
    return (
        x.argmax(-1),
        x.argmin(-1, keepdim=True),
        x.argmax(0),
        x.argmin(),
        (x * 2).argmax(1) + 1,
    )
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    "n, dtype",
    [(3000, torch.float32), (1024, torch.float32), (1024, torch.bfloat16)],
)
def test_argmax_and_argmin(tmp_path, n, dtype) -> None:
    """The first position of the max or min: ties, NaN (the largest and the
    smallest, as torch's are), rows of -inf, along rows, across them and over
    all, in rows a block overhangs (3000) and rows a block fits exactly (1024:
    no mask, Note [Blocks that never overhang])."""
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(6, n, generator=gen).round().to(dtype)  # many ties
    x[1] = float("-inf")
    x[2, 17] = float("nan")
    x[2, n // 2] = float("nan")
    x[3, :] = 2.0
    x[4, n - 1] = 100.0
    x[5, 0] = -100.0
    case = compile_source(POSITIONS_SOURCE, {"positions": {"x": x}}, tmp_path)
    # positions are exact whatever the dtype: against eager's own, not f32's
    case["positions"].check({"x": x}, dtype=torch.float32)
    counts = re.findall(
        r"(\d+) kernels?, (\d+) extern calls?", case["positions"].module.__doc__
    )
    assert counts and all(e == "0" for _, e in counts)


INTEGER_SOURCE = """
import torch


def counts(m, i):
    return m.sum(-1), m.sum(0), i.sum(), (i > 0).sum(1, keepdim=True), i.sum(0)


def extremes(i, j, k):
    ends = j.amax(), j.amin(), k.amin(-1), k.amax(-1), k.amax(0), k.amin(0)
    positions = i.argmax(-1), k.argmin(-1), k.argmax(-1), j.argmin(-1)
    return i.amax(-1), i.amin(0), (i * 3).amin(1), *ends, *positions
"""


def test_integer_sums(tmp_path) -> None:
    """Sums of bools and integers, in int64 as eager's (wrapping past its range
    is eager's too): counts of a mask, along and across rows; maxima and minima
    of integers, their types' extremes among the values."""
    gen = torch.Generator().manual_seed(2)
    m = torch.rand(40, 300, generator=gen) > 0.3
    i = torch.randint(-(2**31), 2**31 - 1, (40, 300), generator=gen, dtype=torch.int32)
    # the extremes of each integer type are reached: a max or min starts from them
    j = torch.randint(-(2**62), 2**62, (40, 300), generator=gen, dtype=torch.int64)
    j[3, 4], j[5, 6] = torch.iinfo(torch.int64).min, torch.iinfo(torch.int64).max
    k = torch.randint(-128, 128, (40, 300), generator=gen, dtype=torch.int8)
    k[7], k[:, 9] = (
        -128,
        127,
    )  # a row's max is the lowest int8, a column's min the highest
    inputs = {"counts": {"m": m, "i": i}, "extremes": {"i": i, "j": j, "k": k}}
    case = compile_source(INTEGER_SOURCE, inputs, tmp_path)
    for name, values in inputs.items():
        case[name].check(values)
        counts = re.findall(
            r"(\d+) kernels?, (\d+) extern calls?", case[name].module.__doc__
        )
        assert counts and all(e == "0" for _, e in counts), name


PIECES_SOURCE = """
import torch


def stacked_sum(a, b, c):
    return torch.stack([a, b, c]).sum(0)


def stacked_stats(a, b, c, d):
    s = torch.stack([a, b, c, d])
    return s.amax(0), s.mean(0), s.amin(0)


def cat_then_sum(a, b):
    return torch.cat([a, b], 1).sum(1)


def contiguous_quads(x):
    return x.view(-1, 4).sum(-1)


def broadcast_rows(x, w):
    return x.expand(3, -1, -1).sum(0), torch.nn.functional.layer_norm(
        x.unsqueeze(-1).expand(-1, -1, 4), (4,), w.expand(4)
    )
"""


@pytest.fixture(scope="module")
def pieces(tmp_path_factory):
    gen = torch.Generator().manual_seed(5)
    r = lambda *shape: torch.randn(*shape, generator=gen)  # noqa: E731
    functions = {
        "stacked_sum": {"a": r(33, 40), "b": r(33, 40), "c": r(33, 40)},
        "stacked_stats": {k: r(7, 50) for k in "abcd"},
        "cat_then_sum": {"a": r(6, 2, 30), "b": r(6, 3, 30)},
        "contiguous_quads": {"x": r(64, 4)},
        "broadcast_rows": {"x": r(16, 30), "w": r(1)},
    }
    functions["stacked_stats"]["c"][3, 5] = float("nan")
    root = tmp_path_factory.mktemp("pieces")
    return compile_source(PIECES_SOURCE, functions, root), functions


@pytest.mark.parametrize(
    ("name", "rblock"),
    [
        ("stacked_sum", 1),
        ("stacked_stats", 1),
        ("cat_then_sum", 8),  # pieces of 2 and 3 elements: runs along the row
        ("contiguous_quads", 4),  # a run of memory: read together, as before
        ("broadcast_rows", 4),  # one value per row, unmasked: not pieces
    ],
)
def test_a_row_of_pieces_is_reduced_a_piece_at_a_time(pieces, name, rblock) -> None:
    """A reduction over the pieces of a `stack` or `cat` reads each piece at the
    same address for every element of its row: a Triton block of [rows, 1] steps
    through the pieces, each load a contiguous run of rows, as torch.compile's
    pointwise kernel reads them; a row that is a run of memory keeps its block, and
    so does one that repeats a value (a broadcast)."""
    compiled, functions = pieces
    case = compiled[name]
    case.check(functions[name])
    blocks = re.findall(r"RBLOCK=(\d+)", case.cuda_source)
    assert blocks and {int(b) for b in blocks} == {rblock}, case.cuda_source


WHOLE_SOURCE = """
import torch


def channel_statistics(x, m):
    h = (x - m[:, None, None]).relu()
    return h.sum((0, 2, 3)), torch.var_mean(x * 2, (0, 2, 3))
"""


def test_split_over_a_whole_dimension(tmp_path) -> None:
    """A batch norm's statistics over (0, 2, 3) of NCHW split at the batch
    dimension: partials over (2, 3) per image and channel, then their totals
    (Note [Split reductions]). No view stands between the reductions and the
    values they reduce, which are computed in the partials' kernel, not stored."""
    gen = torch.Generator().manual_seed(5)
    inputs = {
        "x": torch.randn(32, 16, 32, 32, generator=gen) + 3,
        "m": torch.randn(16, generator=gen),
    }
    case = compile_source(WHOLE_SOURCE, {"channel_statistics": inputs}, tmp_path)[
        "channel_statistics"
    ]
    case.check(inputs)
    source = case.cpu_source
    assert _kernel_launches(source) == 2, source
    assert "empty((32, 16, 32, 32)" not in source, source  # neither h nor x * 2
    assert "empty((32, 16, 1, 1)" in source, source  # the partials


NARROW_SOURCE = """
import torch


def loss_mean(x, t):
    return (torch.sigmoid(x) * t + x).mean()


def last_two(x):
    return x.amax((2, 3))
"""


def test_a_whole_dimension_kept_last_is_no_split(tmp_path) -> None:
    """Parts at a whole dimension are a split only where the partials then reduce
    trailing dimensions: a full mean of [8192, 91] (a detection loss) split at its
    91 columns reduced columns of 8192, two tiles of columns for two threads (one
    with 27 of them); it splits its rows instead, into contiguous parts. A max
    over (2, 3) of NCHW splits at H, whose partials over W are rows."""
    gen = torch.Generator().manual_seed(6)
    cases = {
        "loss_mean": {
            "x": torch.randn(8192, 91, generator=gen),
            "t": torch.rand(8192, 91),
        },
        "last_two": {"x": torch.randn(2, 4, 96, 1024, generator=gen)},
    }
    compiled = compile_source(NARROW_SOURCE, cases, tmp_path)
    for name, inputs in cases.items():
        compiled[name].check(inputs)
    source = compiled["loss_mean"].cpu_source
    assert _kernel_launches(source) == 2, source
    assert "empty((1, 91)" not in source, source  # no partials per column
    assert re.search(r"empty\(\(32, 1, 1\)", source), source  # 32 contiguous parts
    assert "empty((2, 4, 96, 1)" in compiled["last_two"].cpu_source


FLAT_SOURCE = """
import torch


def focal_mean(x, t):
    p = torch.sigmoid(x)
    return (t * (1 - p) ** 2 * x + 0.25).mean()


def powers_of_two(x):
    return (x * 3).sum()


def broadcast_weight(x, w):
    return (x * w).mean()


def transposed(x):
    return (x.t() * 2).sum()


def whole_variance(x):
    return (x - 1).var()


def low_precision(x):
    return (x * x).mean()


def shared(x):
    y = torch.sigmoid(x)
    return y.sum(), y * 2
"""


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "inputs", "taken"),
    [
        # 91 * 2^14 elements: 1456 parts of 1024, none of them padded
        ("focal_mean", {"x": (16384, 91), "t": (16384, 91)}, True),
        ("whole_variance", {"x": (16384, 91)}, True),
        ("low_precision", {"x": (16384, 91, torch.bfloat16)}, True),
        # a producer the result reads too: computed again from x by the kernel
        # that writes the result, never stored itself (a sum: Triton's
        # interpreter takes two minutes over a maximum of these)
        ("shared", {"x": (16384, 91)}, True),
        # an operand that broadcasts, or one not in memory order: not in parts
        ("broadcast_weight", {"x": (16384, 91), "w": (91,)}, False),
        ("transposed", {"x": (91, 16384)}, False),
        # rows of a power of two as the parts: 2048 of 512, split there
        ("powers_of_two", {"x": (2048, 512)}, False),
    ],
)
def test_whole_tensors_split_in_memory_order(tmp_path, name, inputs, taken) -> None:
    """Note [Parts of a whole tensor] in passes/split_reductions.py: on the GPU,
    the reduction of a whole tensor whose dimensions give no parts of a power of
    two is split in memory order into parts that are, its elementwise producers
    computed in the partials' kernel from views of what they read. Against eager
    on both backends; the CPU's split is by dimensions."""
    gen = torch.Generator().manual_seed(9)
    example = {
        k: (torch.randn(v[:2], generator=gen) + 2).to(*v[2:]) for k, v in inputs.items()
    }
    case = compile_source(FLAT_SOURCE, {name: example}, tmp_path)[name]
    case.check(example)
    numel = example["x"].numel()
    length = 1 << (numel // 1024).bit_length() - 1  # the split's UNITS on a GPU
    flat = f"xnumel = {numel // length}\n    rnumel = {length}\n"
    assert (flat in case.triton_text) == taken, case.triton_text
    if not taken:
        return
    partials = case.triton_text.split("@triton.jit")[-2]
    assert flat in partials and "rmask" not in partials, partials  # none padded
    # the producers are computed in the partials' kernel, never written; of
    # `shared`, only its result `y * 2` is
    stored = case.cuda_source.count("empty((16384, 91)")
    assert stored == (name == "shared"), case.cuda_source


LANES_SOURCE = """
import torch


def batch_statistics(x):
    return x.sum((0, 2)), x.amax((0, 2))


def two_apart(x):
    return x.mean((1, 3))


def spatial_and_batch(x):
    return x.var((0, 2, 3)), x.sum((0, 2, 3))
"""
# rows long enough to be walked in lanes (Note [Lanes]), made of several
# dimensions that are not neighbours in memory
LANES_CASES = {
    "batch_statistics": torch.randn(16, 24, 512),
    "two_apart": torch.randn(4, 8, 6, 256),
    "spatial_and_batch": torch.randn(8, 16, 32, 32),
}


def test_lanes_walk_several_dimensions_without_dividing(tmp_path) -> None:
    """A row over several dimensions read in lanes: the part of each address that
    depends on the group of lanes is computed from the group's start, the lane's
    part is `+ l` (a vector load), not `r / n` and `r % n` for every element."""
    functions = {name: {"x": x} for name, x in LANES_CASES.items()}
    compiled = compile_source(LANES_SOURCE, functions, tmp_path)
    for name, x in LANES_CASES.items():
        case = compiled[name]
        case.check({"x": x})
        assert "torch.ops" not in case.cpu_source
    loops = re.findall(
        r"for \(int64_t l = 0; l < \d+; \+\+l\) \{\n(.*?)\n\s*\}",
        next(iter(compiled.values())).cpp_text,
        re.S,
    )
    loads = [line for body in loops for line in body.splitlines() if "_ptr[" in line]
    assert any(re.search(r"\+ l\]", line) for line in loads), loads
    for line in loads:  # a contiguous row's `x_ptr[512 * x + r]` stays as it is
        assert not re.search(r"\br [/%]", line), line


SKIPPING_NANS_SOURCE = """
import torch


def skipping_nans(x):
    return (
        torch.nansum(x, -1),
        torch.nansum(x),
        torch.nanmean(x, 0),
        torch.count_nonzero(x, -1),
        torch.count_nonzero(x),
    )
"""


def test_sums_that_skip_nans_and_counts(tmp_path) -> None:
    """nansum, nanmean and count_nonzero are sums kernels compute (their
    decompositions): NaN counts as 0 (or not at all, for the mean), a row of NaN
    only sums to 0 and its mean is NaN, -0.0 is not a nonzero. No extern call."""
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(7, 300, generator=gen)
    x[0, ::3] = float("nan")
    x[1] = float("nan")
    x[2, :100] = 0.0
    x[3, :50] = -0.0
    case = compile_source(SKIPPING_NANS_SOURCE, {"skipping_nans": {"x": x}}, tmp_path)
    case["skipping_nans"].check({"x": x})
    counts = re.findall(
        r"(\d+) kernels?, (\d+) extern calls?", case["skipping_nans"].module.__doc__
    )
    assert counts and all(e == "0" for _, e in counts), counts


PER_BLOCK_SOURCE = """
import torch
import torch.nn.functional as F


def per_block(x, w, b):
    y = F.group_norm(x, 4, w, b)
    n, c = x.shape[0], x.shape[1]
    spread = w[:, None].expand(c, x.shape[2] * x.shape[3]).reshape(1, -1)
    return y, (x.reshape(n, -1) * spread).sum(-1), spread.amax(-1), spread.argmax(-1)
"""


@pytest.mark.slow
@pytest.mark.parametrize("hw", [(64, 64), (60, 70)])
def test_values_per_block(tmp_path, hw) -> None:
    """A looped row's term `rindex // d` with d a multiple of the block is taken at
    the block's start (Note [Values per block] in codegen/triton.py): a group norm's
    weight and bias over channels of 64 x 64, and a weight spread over a row and
    reduced alone (sum, max and the first position of the max, ties everywhere
    within a channel). Channels of 60 x 70 keep `rindex`."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(2, 40, *hw, generator=gen)  # groups of 10 channels: looped
    w = torch.randn(40, generator=gen)
    w[7] = w.max() + 1  # the max at the eighth channel
    b = torch.randn(40, generator=gen)
    inputs = {"x": x, "w": w, "b": b}
    case = compile_source(PER_BLOCK_SOURCE, {"per_block": inputs}, tmp_path)
    case["per_block"].check(inputs)
    text = case["per_block"].triton_text
    assert "for roffset" in text
    per_block = re.findall(r"tl\.load\([^\n]*roffset // \d+", text)
    assert bool(per_block) == (hw == (64, 64)), per_block


PRODUCTS_SOURCE = """
import torch


def products(x, n, flags):
    return (
        x.prod(-1),
        x.prod(0),
        x[:, :40].prod(),
        (x + 0.001).prod(-1, keepdim=True).to(torch.bfloat16),
        n.prod(-1),
        n.prod(0),
        flags.prod(-1),
    )
"""


@pytest.mark.slow
@pytest.mark.parametrize("n", [96, 20000])
def test_products(tmp_path, n: int) -> None:
    """`prod` in kernels: along rows (looped past a block on a GPU, in lanes on a
    CPU), along columns (a tile of rows side by side), over all elements; of
    floats with zeros, NaN and inf, of integers (into int64, wrapping as eager's)
    and of bools."""
    gen = torch.Generator().manual_seed(17)
    x = 1 + 0.01 * torch.randn(6, n, generator=gen)
    x[1, 5] = 0.0
    x[2, 7] = float("nan")
    x[3, 9] = float("inf")
    x[4, 11] = float("-inf")
    x[4, 12] = 0.0  # inf * 0: NaN
    ints = torch.randint(-3, 4, (6, n), generator=gen, dtype=torch.int32)
    flags = torch.rand(6, n, generator=gen) < 0.9999
    inputs = {"x": x, "n": ints, "flags": flags}
    case = compile_source(PRODUCTS_SOURCE, {"products": inputs}, tmp_path)
    case["products"].check(inputs)
    for source in (case["products"].cpu_source, case["products"].cuda_source):
        assert "aten.prod" not in source, source


ONE_ELEMENT_SOURCE = """
import torch


def one_element(x, n):
    return (
        x.mean((-1, -2), keepdim=True).flatten(1) * 2,
        x.amax(-1).squeeze(-1) - x.amin((2, 3)),
        x.sum((2, 3)),
        n.sum(1),
        n.prod(-1, keepdim=True),
    )


def zero_d(s):
    return s.prod(0, keepdim=True), s.sum(0), torch.logsumexp(s, (0,), True)
"""


def test_reductions_of_one_element(tmp_path) -> None:
    """A sum, mean, max, min or product over dimensions of size 1 is a copy into
    the result's dtype (Note [Reductions of one element] in passes/decompose.py):
    a global average pool of a 1 x 1 map, integer sums into int64, NaN kept.
    No extern call. A 0-d input keeps eager's op, whatever `dim` it names."""
    gen = torch.Generator().manual_seed(2)
    x = torch.randn(2, 8, 1, 1, generator=gen)
    x[1, 3] = float("nan")
    n = torch.randint(-3, 3, (3, 1, 2), generator=gen, dtype=torch.int32)
    inputs = {"x": x, "n": n}
    functions = {"one_element": inputs, "zero_d": {"s": torch.tensor(1.5)}}
    case = compile_source(ONE_ELEMENT_SOURCE, functions, tmp_path)
    case["one_element"].check(inputs)
    case["zero_d"].check(functions["zero_d"])  # a 0-d input: eager's ops
    for source in (case["one_element"].cpu_source, case["one_element"].cuda_source):
        assert "torch.ops.aten." not in source, source
