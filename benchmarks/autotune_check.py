"""`transpile --autotune` on a CUDA machine: is it correct, and is it faster?

    python benchmarks/autotune_check.py [--quick] [--out FILE.md] [--keep DIR]

Transpiles `benchmarks/pyproject.toml` twice into a temporary directory, once as is
(heuristic launch configs) and once with `--autotune`, timing the autotuned run. Then,
for each cuda case, it runs eager, the heuristic module and the autotuned module on the
same seeded inputs, checks both against eager, times both, and prints a markdown table
with the kernels autotune changed. Exit status: 1 if a module is wrong or falls back to
eager, 2 without a CUDA device or when transpile fails, else 0.
"""

from __future__ import annotations

import argparse
import importlib
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from unittest import mock

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script

import runtime_shim
from benchmarks import common
from examples.compare import (
    build_eager,
    build_generated,
    compare_outputs,
    load_generated,
    load_source,
    make_inputs,
    reference,
)

FLAVORS = ("heuristic", "autotuned")
PACKAGE = "_transpile_{}"  # the generated package of each flavor, in the temp dir


def transpile(out: Path, autotune: bool) -> tuple[float, str]:
    """Run the CLI on the benchmark config; (seconds, its stderr: autotune's log)."""
    command = [sys.executable, "-m", "transpiler.cli", "--config"]
    command += [str(common.CONFIG.relative_to(common.ROOT)), "--out", str(out)]
    command += ["--autotune"] if autotune else []
    start = time.perf_counter()
    done = subprocess.run(command, cwd=common.ROOT, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        raise SystemExit(f"error: {' '.join(command[2:])} failed:\n{done.stderr}")
    return seconds, done.stderr


def retuned(triton_file: Path) -> tuple[int, int]:
    """(kernels whose config autotune changed, kernels timed) in one Triton module."""
    text = triton_file.read_text() if triton_file.exists() else ""
    notes = re.findall(r"^# autotuned on .*\n#   (.*)\n", text, re.MULTILINE)
    changed = [line for line in notes if not line.startswith("heuristic ")]
    return len(changed), len(notes)


def check_flavor(package: str, case: common.Case, eager, inputs, expected):
    """(the generated module's callable or None, verdict) on one case."""
    target, low = case.target, case.variant.low_precision
    fallbacks: list[object] = []
    try:
        gen = build_generated(
            load_generated(package, target), eager, dict(target.init), "cuda"
        )
        with mock.patch.object(runtime_shim, "warn_fallback", fallbacks.append):
            actual = gen(**inputs)
    except Exception as e:
        return None, f"no (raised {type(e).__name__}: {e})"
    if fallbacks:
        return None, "no (fell back to eager)"
    return gen, common.verdict(compare_outputs(actual, expected, low))


def time_flavors(gens: dict, inputs, timer) -> dict[str, float | None]:
    """Each flavor's time: the lower of two medians, timed in turns (h, a, h, a) so
    neither gains from going first."""
    times: dict[str, list[float]] = {flavor: [] for flavor in gens}
    for _ in range(2):
        for flavor, gen in gens.items():
            if gen is not None:
                times[flavor].append(timer(lambda gen=gen: gen(**inputs)))
    return {flavor: min(ms) if ms else None for flavor, ms in times.items()}


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _speedup(heuristic: float | None, autotuned: float | None) -> str:
    if heuristic is None or autotuned is None:
        return "-"
    return f"{heuristic / autotuned:.2f}x"


def check_case(case: common.Case, root: Path, timer) -> tuple[tuple, list[str]]:
    """One row of the table, and a note for each flavor that is not right."""
    target = case.target
    inputs = make_inputs(case.variant, "cuda")
    eager = build_eager(load_source(target), dict(target.init), "cuda")
    with torch.no_grad():
        expected = reference(eager, inputs, case.variant.low_precision)
        checked = {
            flavor: check_flavor(PACKAGE.format(flavor), case, eager, inputs, expected)
            for flavor in FLAVORS
        }
        ms = time_flavors({f: gen for f, (gen, _) in checked.items()}, inputs, timer)
    h_ms, a_ms = ms["heuristic"], ms["autotuned"]
    h_ok, a_ok = checked["heuristic"][1], checked["autotuned"][1]
    wrong = [f"- {case.name}, {f}: {v}" for f, (_, v) in checked.items() if v != "yes"]
    triton_file = root / PACKAGE.format("autotuned") / f"{target.stem}_triton.py"
    changed, timed = retuned(triton_file)
    row = (
        case.name,
        case.variant.describe(),
        _ms(h_ms),
        _ms(a_ms),
        _speedup(h_ms, a_ms),
        f"{changed} of {timed}",
        f"{h_ok[:3].strip()} / {a_ok[:3].strip()}",
    )
    return row, wrong


HEADER = (
    "case", "shape", "heuristic ms", "autotuned ms", "speedup",
    "kernels retuned", "correct (heuristic / autotuned)",
)  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer reps, less time")
    parser.add_argument("--out", type=Path, help="also write the report to FILE.md")
    parser.add_argument("--keep", type=Path, help="generate into DIR and keep it")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: no CUDA device: --autotune times kernels on one", file=sys.stderr)
        return 2

    root = (args.keep or Path(tempfile.mkdtemp(prefix="autotune-check-"))).absolute()
    seconds, logs = {}, {}
    for flavor in FLAVORS:
        print(f"transpiling ({flavor}) ...", file=sys.stderr, flush=True)
        out = root / PACKAGE.format(flavor)
        seconds[flavor], logs[flavor] = transpile(out, flavor == "autotuned")
    sys.path.insert(0, str(root))
    importlib.invalidate_caches()

    timer, timing = common.cuda_timer(args.quick)
    rows, wrong = [], []
    for case in common.load_cases("cuda")[1]:
        print(f"running {case.name} ...", file=sys.stderr, flush=True)
        row, notes = check_case(case, root, timer)
        rows.append(row)
        wrong += notes
        torch.cuda.empty_cache()

    table = ["| " + " | ".join(HEADER) + " |", "|" + "---|" * len(HEADER)]
    table += ["| " + " | ".join(row) + " |" for row in rows]
    report = "\n".join([
        "# transpile --autotune check (cuda)",
        "",
        f"- machine: {common.environment('cuda')}",
        f"- timing: {timing}",
        f"- transpile: {seconds['heuristic']:.0f} s; with --autotune:"
        f" {seconds['autotuned']:.0f} s",
        "- speedup: heuristic ms / autotuned ms (> 1: autotuned is faster); a row"
        " with 0 kernels retuned runs the same kernels twice, so its speedup is the"
        " timing noise",
        "",
        *table,
        *([""] + wrong if wrong else []),
        "",
        "autotune's log:",
        "",
        *(f"    {line}" for line in logs["autotuned"].splitlines()),
    ])  # fmt: skip
    print(report)
    if args.out:
        args.out.write_text(report + "\n")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())
