"""`python -m tests.opinfo.sweep`: the whole sweep, some ops, or one case.

    python -m tests.opinfo.sweep --all                     # ~25 min on 2 cores
    python -m tests.opinfo.sweep --all --every 4           # a quarter of the ops
    python -m tests.opinfo.sweep --ops '^(softmax|add)$' --dtypes f32,bool
    python -m tests.opinfo.sweep --case 'softmax/f32/transposed/s2' -v

Prints totals per class, how many ops of each kind (elementwise, reduction, other)
run inside generated kernels (`report.by_kind`), and the wrong and error cases
grouped by op; exits 1 if there are any. `--json FILE` writes one line per case.
"""

from __future__ import annotations

import argparse
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from pathlib import Path

from tests.devices import interpreter_as_gpu
from tests.opinfo import report
from tests.opinfo.cases import (
    SHORT,
    Case,
    case_by_id,
    full_name,
    op_db,
    sweep_cases,
)
from tests.opinfo.sweep import ERROR, WRONG, run_cases
from transpiler.options import DTYPES


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m tests.opinfo.sweep",
        description="Transpile PyTorch's OpInfo samples and compare with eager.",
    )
    which = p.add_mutually_exclusive_group(required=True)
    which.add_argument("--all", action="store_true", help="every op of op_db")
    which.add_argument("--ops", metavar="REGEX", help="ops whose name matches")
    which.add_argument("--case", metavar="ID", help="one case, e.g. add/f32/s0")
    p.add_argument("--dtypes", default="f32,i64,bf16,f16,bool", help="%(default)s")
    p.add_argument("--per-op", type=int, default=3, help="samples per op and dtype")
    p.add_argument("--per-layout", type=int, default=1, help="samples per other layout")
    p.add_argument("--no-inplace", action="store_true", help="no in-place methods")
    p.add_argument("--every", type=int, default=1, help="every Nth op (a sample)")
    p.add_argument("--time-limit", type=float, help="start no op after S seconds")
    p.add_argument("--batch", type=int, default=48, help="cases per build")
    p.add_argument("--json", metavar="FILE", help="one JSON line per case")
    p.add_argument("--keep", metavar="DIR", help="build into DIR and keep it")
    p.add_argument("-v", "--verbose", action="store_true")
    return p


def main(argv: list[str] | None = None) -> int:
    with interpreter_as_gpu():  # as under pytest (tests/conftest.py)
        return _main(argv)


def _main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    root = Path(args.keep or tempfile.mkdtemp(prefix="opinfo-sweep-"))
    if args.case:
        return one_case(args.case, root, args.verbose)
    dtypes = [DTYPES[d] for d in args.dtypes.split(",")]
    ops = [op for op in op_db if args.all or re.search(args.ops, full_name(op))]
    ops = ops[:: args.every]
    start = time.monotonic()
    limit = Limit(start, args.time_limit)
    cases = sweep_cases(
        limit.ops(ops), dtypes, args.per_op, args.per_layout, not args.no_inplace
    )

    def progress(text: str) -> None:
        print(f"[{time.monotonic() - start:6.0f}s] {text}", file=sys.stderr)

    outcomes = run_cases(cases, root, args.batch, progress)
    seconds = time.monotonic() - start
    if not args.keep:
        shutil.rmtree(root, ignore_errors=True)
    if args.json:
        Path(args.json).write_text("".join(report.to_json(o) + "\n" for o in outcomes))
    header = (
        f"OpInfo sweep: {limit.started} of {len(ops)} ops, dtypes "
        f"{', '.join(SHORT[d] for d in dtypes)}; {args.per_op} samples per op and "
        f"dtype, {args.per_layout} per other layout; {len(outcomes)} cases in "
        f"{seconds:.0f} s"
        + (" (stopped at the time limit)" if limit.started < len(ops) else "")
    )
    print(report.report(outcomes, header + "\n"))
    return 1 if any(o.cls in (WRONG, ERROR) for o in outcomes) else 0


class Limit:
    """Hands out ops until a time limit; counts how many it handed out."""

    def __init__(self, start: float, seconds: float | None) -> None:
        self.start, self.seconds, self.started = start, seconds, 0

    def ops(self, ops: Iterable) -> Iterator:
        for op in ops:
            if self.seconds and time.monotonic() - self.start > self.seconds:
                return
            self.started += 1
            yield op


def one_case(case_id: str, root: Path, verbose: bool) -> int:
    case = case_by_id(case_id)
    if case is None:
        print(f"{case_id}: the layout changes none of the sample's tensors")
        return 2
    print(f"# {case.id}  ({case.signature()})\n{case.source('f')}")
    (outcome,) = run_cases([case], root)
    print("\n".join(report.describe(outcome)[:1]))
    for device, cls, detail in outcome.variants:
        print(f"  {device}: {cls}: {detail}")
    if verbose:
        show(case, outcome, root)
    return 1 if outcome.cls in (WRONG, ERROR) else 0


def show(case: Case, outcome, root: Path) -> None:
    for v in outcome.lowered:
        print(f"\n{v.source}")
    print(f"generated code (kept): {root}")
