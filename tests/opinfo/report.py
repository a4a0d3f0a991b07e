"""The sweep's report: totals per class (cases, and each backend's variants), how
many ops of each kind run inside generated kernels (`by_kind`), what runs eagerly
and why, and every wrong or error case grouped by op, each with the call it makes
and the one command that reruns it."""

from __future__ import annotations

import json
from collections import Counter, defaultdict
from dataclasses import dataclass

import torch
from torch.testing._internal.opinfo.core import (
    BinaryUfuncInfo,
    OpInfo,
    ReductionOpInfo,
    UnaryUfuncInfo,
)

from tests.opinfo.cases import full_name, op_db
from tests.opinfo.sweep import (
    CLASSES,
    COMPILED,
    ERROR,
    PARTLY,
    SKIPPED,
    WRONG,
    Outcome,
)

DEVICES = ("cpu", "cuda")
ELEMENTWISE, REDUCTION, OTHER = "elementwise", "reduction", "other"
BOTH = "elementwise+reduction"  # the two kinds together
KINDS = (ELEMENTWISE, REDUCTION, BOTH, OTHER)  # the rows of `by_kind`
OPS = {full_name(op): op for op in op_db}


def totals(outcomes: list[Outcome]) -> dict[str, Counter]:
    """Per class: how many cases, and how many cpu and cuda variants."""
    out = {"cases": Counter(o.cls for o in outcomes)}
    for device in DEVICES:
        out[device] = Counter(
            next((cls for d, cls, _ in o.variants if d == device), o.cls)
            for o in outcomes
        )
    return out


def report(outcomes: list[Outcome], header: str = "", per_op: int = 6) -> str:
    t = totals(outcomes)
    lines = [header] if header else []
    lines += [f"{'class':<14}{'cases':>8}{'cpu':>8}{'cuda':>8}"]
    for cls in CLASSES:
        counts = [t[k][cls] for k in ("cases", *DEVICES)]
        lines.append(f"{cls:<14}" + "".join(f"{n:>8}" for n in counts))
    lines.append(f"{'total':<14}{len(outcomes):>8}")
    lines += ["", *kinds_table(outcomes)]
    skips = Counter(reason(o.detail) for o in outcomes if o.cls == SKIPPED)
    lines += ["", "Skipped, why:"] + [f"  {n:>6}  {w}" for w, n in skips.most_common()]
    lines += ["", "Extern calls in partly eager cases (top 15):"]
    externs = Counter(ext for o in outcomes if o.cls == PARTLY for ext in externs_of(o))
    lines += [f"  {n:>6}  {e}" for e, n in externs.most_common(15)]
    lines += ["", "Graph breaks in fallback cases (top 10):"]
    breaks = Counter(b for o in outcomes if o.cls == "fallback" for b in breaks_of(o))
    lines += [f"  {n:>6}  {b}" for b, n in breaks.most_common(10)]
    lines += ["", *failures(outcomes, per_op)]
    return "\n".join(lines)


def kind(op: OpInfo) -> str:
    """The op's kind, by its OpInfo class: `UnaryUfuncInfo` and `BinaryUfuncInfo`
    are elementwise, `ReductionOpInfo` a reduction, everything else other. Ternary
    elementwise ops (`where`, `lerp`, `addcmul`, `clamp`) are plain `OpInfo`s, with
    nothing that marks them elementwise, so they count as other."""
    if isinstance(op, (UnaryUfuncInfo, BinaryUfuncInfo)):
        return ELEMENTWISE
    return REDUCTION if isinstance(op, ReductionOpInfo) else OTHER


def in_kernels(o: Outcome) -> bool:
    """Every op of the case inside generated kernels (or views), on both backends:
    the case and each of its variants is class compiled."""
    return o.cls == COMPILED and all(cls == COMPILED for _, cls, _ in o.variants)


@dataclass
class KindCount:
    """Ops of one kind, each named as the sweep names it (`max.reduction_with_dim`)."""

    ops: int = 0  # with at least one judged case (class other than skipped)
    some: int = 0  # of those, in kernels by `by_kind`'s definition
    every: int = 0  # of those, every judged case in kernels
    unjudged: int = 0  # swept, but no judged case: not in `ops`
    wrong: int = 0  # with a wrong or error case


def by_kind(outcomes: list[Outcome]) -> dict[str, KindCount]:
    """Per kind (`kind`, and elementwise and reduction ops together as BOTH), how
    many ops run inside generated kernels.

    A case is judged if its class is not skipped. An op runs inside generated
    kernels when at least one of its judged float32 cases (for an op with no judged
    float32 case, of its judged cases in any dtype) is class compiled on both
    backends (`in_kernels`). The stricter count (`every`): ops all of whose judged
    cases, in every dtype, layout and in-place form, are compiled on both backends.
    Ops with no judged case are counted apart (`unjudged`), in neither figure."""
    per_op: dict[str, list[Outcome]] = defaultdict(list)
    for o in outcomes:
        per_op[o.case.op].append(o)
    out = {k: KindCount() for k in KINDS}
    for name, cases in per_op.items():
        k = kind(OPS[name])
        counts = [out[k]] + ([out[BOTH]] if k != OTHER else [])
        judged = [o for o in cases if o.cls != SKIPPED]
        single = [o for o in judged if o.case.dtype == torch.float32] or judged
        for c in counts:
            if not judged:
                c.unjudged += 1
                continue
            c.ops += 1
            c.some += any(in_kernels(o) for o in single)
            c.every += all(in_kernels(o) for o in judged)
            c.wrong += any(o.cls in (WRONG, ERROR) for o in judged)
    return out


def kinds_table(outcomes: list[Outcome]) -> list[str]:
    counts = by_kind(outcomes)
    lines = [
        "Ops in generated kernels, by kind (elementwise: Unary/BinaryUfuncInfo;",
        "reduction: ReductionOpInfo; ternary elementwise ops are plain OpInfos, so",
        "other). ops: ops with a judged (not skipped) case. in kernels: ops with at",
        "least one judged f32 case (no f32 case: any judged case) compiled on both",
        "backends, every op in generated kernels; all cases: ops every judged case",
        "of which is compiled on both backends. wrong: ops with a wrong or error",
        "case. unjudged: ops with no judged case, not counted.",
        f"  {'kind':<22}{'ops':>6}{'in kernels':>12}{'%':>7}"
        f"{'all cases':>11}{'%':>7}{'wrong':>7}{'unjudged':>10}",
    ]
    for name, c in counts.items():
        lines.append(
            f"  {name:<22}{c.ops:>6}{c.some:>12}{percent(c.some, c.ops):>7}"
            f"{c.every:>11}{percent(c.every, c.ops):>7}{c.wrong:>7}{c.unjudged:>10}"
        )
    return lines


def percent(n: int, of: int) -> str:
    return f"{100 * n / of:.1f}" if of else "-"


def reason(detail: str) -> str:
    return detail.split(":")[0] if detail.startswith("not expressible") else detail


def externs_of(o: Outcome) -> set[str]:
    return {e for v in o.lowered for e in v.externs}


def breaks_of(o: Outcome) -> set[str]:
    return {b[:120] for v in o.lowered for b in v.breaks}


def failures(outcomes: list[Outcome], per_op: int = 6) -> list[str]:
    """Wrong and error cases grouped by op, `per_op` shown for each."""
    bad = defaultdict(list)
    for o in outcomes:
        if o.cls in (WRONG, ERROR):
            bad[o.case.op].append(o)
    if not bad:
        return ["Wrong and error cases: none"]
    n = sum(len(v) for v in bad.values())
    lines = [f"Wrong and error cases ({n}, in {len(bad)} ops):"]
    for op, cases in sorted(bad.items()):
        kinds = Counter(o.cls for o in cases)
        lines.append(f"  {op}: " + ", ".join(f"{v} {k}" for k, v in kinds.items()))
        for o in cases[:per_op]:
            lines += ["    " + line for line in describe(o)]
        if len(cases) > per_op:
            lines.append(f"    ... and {len(cases) - per_op} more")
    return lines


def describe(o: Outcome) -> list[str]:
    """Three lines: the verdict, the call, the command that reruns the case."""
    return [
        f"{o.cls} {o.case.id}: {o.detail}",
        f"  {o.case.call}  # {o.case.signature()}",
        f"  python -m tests.opinfo.sweep --case '{o.case.id}' -v",
    ]


def to_json(o: Outcome) -> str:
    return json.dumps(
        {
            "id": o.case.id,
            "op": o.case.op,
            "class": o.cls,
            "detail": o.detail,
            "call": o.case.call,
            "signature": o.case.signature(),
            "variants": [list(v) for v in o.variants],
            "externs": sorted(externs_of(o)),
            "breaks": sorted(breaks_of(o)),
        }
    )
