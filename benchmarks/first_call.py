"""First-call latency: import + first call of the generated module and of
`torch.compile`, each in a fresh process, with empty and with warm caches.

    python benchmarks/first_call.py [--device cuda|cpu] [--case LABEL ...]
                                    [--out FILE.md] [--timeout SECONDS]

For each case (default: `DEFAULT_CASES`, at their `benchmarks/pyproject.toml` shapes for
the device) it starts one fresh Python process per row below, in this order:

- eager: the source module's first call, what every approach pays (cuBLAS handles,
  lazily loaded library kernels);
- generated, empty cache: import of `benchmarks.generated.<stem>` and its first call,
  with an empty Triton cache (`TRITON_CACHE_DIR`; cuda: the kernels are compiled) and
  an empty C++ kernel cache (`TRANSPILE_CACHE_DIR`; cpu: `runtime_shim` compiles the
  module's .cpp);
- generated, warm cache: the same in a second process, reusing those caches;
- torch.compile, empty cache: `torch.compile(model)` and its first call, with empty
  `TORCHINDUCTOR_CACHE_DIR` and `TRITON_CACHE_DIR` (a cold compile);
- torch.compile, warm cache: the same in a second process, reusing them (inductor's
  FX graph cache and compiled kernels).

Each process times itself with `time.perf_counter` and prints its figures as one JSON
line, so interpreter start-up, `import torch` and building the model (seeded weights,
on the device) and its inputs are not counted; the import of the generated module, or
the `torch.compile` call, is. The first call is synchronized. Then the process times
the steady state (wall clock per call, as `benchmarks/common.py` times overhead-bound
cases) and checks the first call's output against eager. The caches live in a new
temporary folder per case, removed at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script

from benchmarks import common
from examples.compare import (
    build_eager,
    build_generated,
    call_watching,
    compare_outputs,
    fallback_note,
    load_generated,
    load_source,
    make_inputs,
    reference,
)

DEFAULT_CASES = ("gpt_block::Block", "gpt::GPT", "toy::ToyModule")
PREBUILT = common.ROOT / "benchmarks" / "generated" / "__prebuilt__"
CACHE_VARS = ("TRITON_CACHE_DIR", "TRANSPILE_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR")


@dataclass(frozen=True)
class Run:
    """One row: which approach, and whether its caches are empty or warm."""

    approach: str  # "eager", "generated" or "compile"
    warm: bool = False

    @property
    def label(self) -> str:
        return "torch.compile" if self.approach == "compile" else self.approach

    @property
    def caches(self) -> str:
        if self.approach == "eager":
            return "-"
        return "warm" if self.warm else "empty"


RUNS = (
    Run("eager"),
    Run("generated"),
    Run("generated", warm=True),
    Run("compile"),
    Run("compile", warm=True),
)


@dataclass(frozen=True)
class Figures:
    """What one child process measured (seconds, except steady_ms)."""

    import_s: float | None = None
    first_s: float | None = None
    steady_ms: float | None = None
    ok: str = "-"
    error: str = ""


# ---------------------------------------------------------------------------- child


def child(case_name: str, device: str, approach: str) -> dict[str, object]:
    """Build the case, then time import + first call of `approach` in this process."""
    package, cases = common.load_cases(device, [case_name])
    case = cases[0]
    target, low = case.target, case.variant.low_precision
    sync: Callable[[], object] = (
        torch.cuda.synchronize if device == "cuda" else lambda: None
    )
    inputs = make_inputs(case.variant, device)
    eager = build_eager(load_source(target), dict(target.init), device)
    sync()
    with torch.no_grad():
        import_s = 0.0
        if approach == "eager":
            fn = eager
        elif approach == "generated":
            start = time.perf_counter()
            generated = load_generated(package, target)
            import_s = time.perf_counter() - start
            fn = build_generated(generated, eager, dict(target.init), device)
        else:
            start = time.perf_counter()
            fn = torch.compile(eager)
            import_s = time.perf_counter() - start
        start = time.perf_counter()
        out, warned = call_watching(fn, inputs)
        sync()
        first_s = time.perf_counter() - start

        latency, _ = common.latency_timer(False, sync)
        steady_ms = latency(lambda: fn(**inputs))
        ok = "-"
        if approach != "eager":
            note = ""
            if approach == "generated":
                note = fallback_note(warned, call_watching(eager, inputs)[1])
            expected = reference(eager, inputs, low)
            check = compare_outputs(out, expected, low)
            ok = f"no ({note})" if note else common.verdict(check)
    return {
        "import_s": import_s,
        "first_s": first_s,
        "steady_ms": steady_ms,
        "ok": ok,
    }


# --------------------------------------------------------------------------- parent


def cache_env(root: Path, run: Run) -> dict[str, str]:
    """The environment of `run`'s process: its own cache folders under `root`.

    The warm run of an approach reuses the folders its empty-cache run filled.
    """
    env = dict(os.environ)
    for var in CACHE_VARS:
        env[var] = str(root / run.approach / var.lower())
    return env


def run_child(case: str, device: str, run: Run, root: Path, timeout: float) -> Figures:
    command = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        run.approach,
        "--device",
        device,
        "--case",
        case,
    ]
    try:
        done = subprocess.run(
            command,
            cwd=common.ROOT,
            env=cache_env(root, run),
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return Figures(error=f"timed out after {timeout:.0f} s")
    return parse_child_output(done.returncode, done.stdout, done.stderr)


def parse_child_output(returncode: int, stdout: str, stderr: str) -> Figures:
    """The child's JSON line (its last line starting with `{`), or why there is none."""
    lines = [line for line in stdout.splitlines() if line.startswith("{")]
    if returncode != 0 or not lines:
        tail = (stderr.strip().splitlines() or ["no output"])[-1]
        return Figures(error=f"exit status {returncode}: {tail}")
    data = json.loads(lines[-1])
    return Figures(
        data["import_s"], data["first_s"], data["steady_ms"], str(data["ok"])
    )


def _s(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def markdown_table(rows: list[tuple[common.Case, Run, Figures]]) -> str:
    """One row per process; a case's name and shape only on its first row; then a
    note per process that failed."""
    header = (
        "case", "shape", "run", "caches", "import s", "first call s",
        "import + first call s", "steady ms/call", "correct",
    )  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    notes = []
    previous = None
    for case, run, fig in rows:
        first_row = case is not previous
        previous = case
        total = None
        if fig.import_s is not None and fig.first_s is not None:
            total = fig.import_s + fig.first_s
        cells = (
            case.name if first_row else "",
            case.variant.describe() if first_row else "",
            run.label,
            run.caches,
            "-" if run.approach == "eager" else _s(fig.import_s),
            _s(fig.first_s),
            _s(total),
            common.number_cell(fig.steady_ms),
            "failed" if fig.error else fig.ok[:3].strip(),
        )
        lines.append("| " + " | ".join(cells) + " |")
        why = fig.error or (fig.ok if fig.ok not in ("yes", "-") else "")
        if why:
            notes.append(f"- {case.name}, {run.label} ({run.caches} caches): {why}")
    return "\n".join(lines + ([""] + notes if notes else []))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="first-call latency of generated modules and torch.compile"
    )
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    parser.add_argument(
        "--case",
        action="append",
        default=[],
        metavar="LABEL",
        help=f"a case, e.g. gpt::GPT (repeatable; default: {', '.join(DEFAULT_CASES)})",
    )
    parser.add_argument("--out", type=Path, help="also write the report to FILE.md")
    parser.add_argument(
        "--timeout", type=float, default=900, help="seconds per process (900)"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)  # run one process's part
    args = parser.parse_args(argv)

    if args.child:
        figures = child(args.case[0], args.device, args.child)
        print(json.dumps(figures), flush=True)
        return 0
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA device (use --device cpu)", file=sys.stderr)
        return 2
    try:
        _, cases = common.load_cases(args.device, args.case or DEFAULT_CASES)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2

    start = time.perf_counter()
    rows = []
    for case in cases:
        root = Path(tempfile.mkdtemp(prefix="first_call-"))
        try:
            for run in RUNS:
                common.progress(f"{case.name}: {run.label}, {run.caches} caches", start)
                figures = run_child(case.name, args.device, run, root, args.timeout)
                rows.append((case, run, figures))
        finally:
            shutil.rmtree(root, ignore_errors=True)
    common.progress("done", start)

    lines = [
        f"# first-call latency ({args.device})",
        "",
        f"- machine: {common.environment(args.device)}",
        "- one fresh process per row; its own clock starts after `import torch` and"
        " building the model and inputs, so `import s` is the import of the generated"
        " module (or the `torch.compile` call) and `first call s` the synchronized"
        " first call",
        "- caches: empty = new TRITON_CACHE_DIR, TRANSPILE_CACHE_DIR (C++ kernels) and"
        " TORCHINDUCTOR_CACHE_DIR; warm = a second process reusing them",
        "- steady ms/call: wall clock per call after the first, median of batches of"
        " back-to-back calls",
    ]
    if args.device == "cpu" and PREBUILT.is_dir():
        lines.append(
            f"- note: {PREBUILT.relative_to(common.ROOT)} holds prebuilt C++ kernels,"
            " which are used instead of compiling, also with an empty cache"
        )
    report = "\n".join([*lines, "", markdown_table(rows)])
    print(report)
    if args.out:
        args.out.write_text(report + "\n")
    failed = any(fig.error or fig.ok.startswith("no") for _, _, fig in rows)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
