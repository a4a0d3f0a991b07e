"""The sweep report's count of ops in generated kernels, by kind, on hand-built
outcomes: no transpiling, so fast (the sweep itself is in test_opinfo.py)."""

from __future__ import annotations

import torch

from tests.opinfo.cases import Case, make_id
from tests.opinfo.report import (
    BOTH,
    ELEMENTWISE,
    KINDS,
    OPS,
    OTHER,
    REDUCTION,
    KindCount,
    by_kind,
    kind,
    report,
)
from tests.opinfo.sweep import (
    COMPILED,
    FALLBACK_CLASS,
    PARTLY,
    SKIPPED,
    WRONG,
    Outcome,
)

F32, I64, BF16 = torch.float32, torch.int64, torch.bfloat16


def outcome(op: str, dtype: torch.dtype, cpu: str, cuda: str, index: int = 0):
    """A case of `op` whose variants are of classes `cpu` and `cuda`; the case is
    the worse of the two, as `sweep.judge` makes it."""
    rank = [COMPILED, PARTLY, FALLBACK_CLASS, SKIPPED, WRONG]
    worst = max(cpu, cuda, key=rank.index)
    case = Case(make_id(op, dtype, "contiguous", index, False), op, dtype)
    return Outcome(case, worst, "", (("cpu", cpu, ""), ("cuda", cuda, "")))


OUTCOMES = [
    # elementwise
    outcome("abs", F32, COMPILED, COMPILED),  # in kernels
    outcome("abs", F32, PARTLY, COMPILED, 1),  # not every case
    outcome("abs", I64, FALLBACK_CLASS, FALLBACK_CLASS),
    outcome("add", F32, COMPILED, COMPILED),  # every judged case in kernels
    outcome("add", F32, SKIPPED, SKIPPED, 1),  # not judged
    outcome("add", BF16, COMPILED, COMPILED),
    # reductions
    outcome("sum", F32, COMPILED, PARTLY),  # one backend is not enough
    outcome("sum", I64, COMPILED, COMPILED),  # an f32 case is judged: not counted
    outcome("amax", F32, SKIPPED, SKIPPED),  # no judged f32 case: i64 counts
    outcome("amax", I64, COMPILED, COMPILED),
    outcome("prod", F32, SKIPPED, SKIPPED),  # no judged case at all
    outcome("mean", F32, WRONG, COMPILED),
    outcome("mean", F32, COMPILED, COMPILED, 1),  # in kernels, and one wrong
    # other: a ternary elementwise op, a plain OpInfo
    outcome("where", F32, COMPILED, COMPILED),
]


def test_ops_are_kinds_by_their_opinfo_class() -> None:
    assert kind(OPS["abs"]) == ELEMENTWISE  # UnaryUfuncInfo
    assert kind(OPS["add"]) == ELEMENTWISE  # BinaryUfuncInfo
    assert kind(OPS["sum"]) == REDUCTION  # ReductionOpInfo
    assert kind(OPS["where"]) == OTHER
    assert kind(OPS["max.reduction_with_dim"]) == OTHER  # a plain OpInfo


def test_ops_in_kernels_are_counted_per_kind() -> None:
    counts = by_kind(OUTCOMES)
    assert list(counts) == list(KINDS)
    assert counts[ELEMENTWISE] == KindCount(ops=2, some=2, every=1)
    assert counts[REDUCTION] == KindCount(ops=3, some=2, every=1, unjudged=1, wrong=1)
    assert counts[BOTH] == KindCount(ops=5, some=4, every=2, unjudged=1, wrong=1)
    assert counts[OTHER] == KindCount(ops=1, some=1, every=1)


def test_report_prints_the_kinds_after_the_totals() -> None:
    text = report(OUTCOMES)
    assert text.index("total") < text.index("Ops in generated kernels, by kind")
    rows = {ln.split()[0]: ln.split()[1:] for ln in text.splitlines() if ln.strip()}
    assert rows["elementwise+reduction"] == ["5", "4", "80.0", "2", "40.0", "1", "1"]
    assert rows["reduction"] == ["3", "2", "66.7", "1", "33.3", "1", "1"]
    assert "mean: 1 wrong" in text  # wrong cases are still listed
