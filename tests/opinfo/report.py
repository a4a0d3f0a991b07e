"""The sweep's report: totals per class (cases, and each backend's variants), what
runs eagerly and why, and every wrong or error case grouped by op, each with the
call it makes and the one command that reruns it."""

from __future__ import annotations

import json
from collections import Counter, defaultdict

from tests.opinfo.sweep import CLASSES, ERROR, PARTLY, SKIPPED, WRONG, Outcome

DEVICES = ("cpu", "cuda")


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
