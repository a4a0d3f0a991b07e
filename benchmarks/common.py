"""Shared by `benchmarks/cpu.py` and `benchmarks/gpu.py`: cases, timing, correctness,
and
the markdown table.

Cases are the targets of `benchmarks/pyproject.toml`, one variant per device. Each case
runs eager, `torch.compile` (default mode) and the generated module from
`benchmarks.generated.<stem>`, checks compile and generated against eager in the same
run,
and times all three. TYPE-spec parsing, seeded inputs and the tolerances come from
`examples.compare`, so the report and the benchmarks judge correctness the same way.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from examples.compare import (
    Check,
    Target,
    Variant,
    build_eager,
    build_generated,
    call_watching,
    compare_outputs,
    fallback_note,
    flatten,
    load_config,
    load_generated,
    load_source,
    make_inputs,
    reference,
)

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "benchmarks" / "pyproject.toml"
COMPUTE_BOUND = frozenset({"gpt_block"})  # no GB/s column: matmuls dominate

Timer = Callable[[Callable[[], object]], float]  # runs fn repeatedly, returns median ms

# -------------------------------------------------------------------------- timing


def cuda_timer(quick: bool) -> tuple[Timer, str]:
    """`triton.testing.do_bench` if importable, else CUDA events."""
    warmup_ms, rep_ms = (10, 50) if quick else (25, 200)
    try:
        from triton.testing import do_bench
    except ImportError:
        reps = 20 if quick else 100
        return (
            lambda fn: _cuda_events_median(fn, warmup=reps // 4, reps=reps),
            f"CUDA events, median of {reps} reps after {reps // 4} warmup, L2 flushed",
        )

    def time_ms(fn: Callable[[], object]) -> float:
        return float(do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))

    how = f"triton.testing.do_bench median (warmup {warmup_ms} ms, rep {rep_ms} ms)"
    return time_ms, how


def _cuda_events_median(fn: Callable[[], object], warmup: int, reps: int) -> float:
    flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")  # > L2
    for _ in range(warmup):
        fn()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(reps)]
    for start, end in zip(starts, ends):
        flush.zero_()
        start.record()
        fn()
        end.record()
    torch.cuda.synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def cpu_timer(quick: bool) -> tuple[Timer, str]:
    """perf_counter: warmup, then at least `min_reps` runs or `budget_s` seconds."""
    warmup, min_reps, budget_s = (1, 3, 0.2) if quick else (3, 10, 2.0)

    def time_ms(fn: Callable[[], object]) -> float:
        for _ in range(warmup):
            fn()
        times: list[float] = []
        deadline = time.perf_counter() + budget_s
        while len(times) < min_reps or (
            time.perf_counter() < deadline and len(times) < 1000
        ):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return statistics.median(times) * 1e3

    threads = torch.get_num_threads()
    how = f"time.perf_counter median (>= {min_reps} reps or {budget_s} s)"
    return time_ms, f"{how}, torch threads {threads}"


def copy_bandwidth(device: str, numel: int, timer: Timer) -> float:
    """GB/s of `y.copy_(x)` on float32: bytes read + written over the median time."""
    x = torch.ones(numel, dtype=torch.float32, device=device)
    y = torch.empty_like(x)
    ms = timer(lambda: y.copy_(x))
    return 2 * x.numel() * x.element_size() / (ms * 1e-3) / 1e9


# --------------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Case:
    target: Target
    variant: Variant

    @property
    def name(self) -> str:
        return self.target.label

    @property
    def memory_bound(self) -> bool:
        return self.target.stem not in COMPUTE_BOUND


@dataclass
class Result:
    case: Case
    eager_ms: float | None = None
    compile_ms: float | None = None
    generated_ms: float | None = None
    nbytes: int = 0
    compile_ok: str = "-"
    generated_ok: str = "-"
    generated_missing: bool = False


def load_cases(device: str) -> tuple[str, list[Case]]:
    package, targets = load_config(CONFIG)
    cases = [
        Case(target, variant)
        for target in targets
        for variant in target.variants
        if device in variant.devices
    ]
    return package, cases


def tensor_bytes(*values: object) -> int:
    """Bytes of the distinct tensors among `values` (nested), counted once each."""
    seen: dict[int, int] = {}
    for value in values:
        for leaf in flatten(value):
            if isinstance(leaf, torch.Tensor):
                seen[leaf.data_ptr()] = leaf.numel() * leaf.element_size()
    return sum(seen.values())


def verdict(check: Check) -> str:
    if check.ok:
        return "yes"
    return f"no ({check.note or f'max abs {check.max_abs:.1e}'})"


def run_case(package: str, case: Case, device: str, timer: Timer) -> Result:
    """Eager, compile and generated for one case; never raises for a broken one."""
    result = Result(case)
    torch._dynamo.reset()
    target, low = case.target, case.variant.low_precision
    inputs = make_inputs(case.variant, device)
    eager = build_eager(load_source(target), dict(target.init), device)
    with torch.no_grad():
        expected = reference(eager, inputs, low)
        out = eager(**inputs)
        weights = eager.state_dict() if isinstance(eager, torch.nn.Module) else {}
        result.nbytes = tensor_bytes(inputs, list(weights.values()), out)
        result.eager_ms = timer(lambda: eager(**inputs))

        compiled = torch.compile(eager)
        try:
            check = compare_outputs(compiled(**inputs), expected, low)
            result.compile_ok = verdict(check)
            result.compile_ms = timer(lambda: compiled(**inputs))
        except Exception as e:
            result.compile_ok = f"no (raised {type(e).__name__}: {e})"

        try:
            gen = build_generated(
                load_generated(package, target), eager, dict(target.init), device
            )
            actual, warned = call_watching(gen, inputs)
        except ImportError as e:
            result.generated_missing, result.generated_ok = True, str(e)
            return result
        except Exception as e:
            result.generated_ok = f"no (raised {type(e).__name__}: {e})"
            return result
        note = fallback_note(warned, call_watching(eager, inputs)[1])
        if note:  # a generated module without this variant falls back to eager
            result.generated_missing, result.generated_ok = True, note
            return result
        result.generated_ok = verdict(compare_outputs(actual, expected, low))
        result.generated_ms = timer(lambda: gen(**inputs))
    return result


# --------------------------------------------------------------------------- table


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def _ratio(num: float | None, den: float | None) -> str:
    return "-" if num is None or den is None else f"{num / den:.2f}x"


def markdown_table(results: list[Result], copy_gbps: float) -> str:
    """The table, then a note per case whose generated or compiled run is not right."""
    header = (
        "case", "shape", "eager ms", "compile ms", "generated ms",
        "gen vs eager", "gen vs compile", "gen GB/s", "% of copy BW",
        "correct (gen / compile)",
    )  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    notes = []
    for r in results:
        gbps = None
        if r.case.memory_bound and r.generated_ms is not None:
            gbps = r.nbytes / (r.generated_ms * 1e-3) / 1e9
        gen_ok = "not generated" if r.generated_missing else r.generated_ok[:3].strip()
        cells = (
            r.case.name,
            r.case.variant.describe(),
            _ms(r.eager_ms),
            _ms(r.compile_ms),
            "not generated" if r.generated_missing else _ms(r.generated_ms),
            _ratio(r.eager_ms, r.generated_ms),  # speedup: > 1 means generated wins
            _ratio(r.compile_ms, r.generated_ms),
            "-" if gbps is None else f"{gbps:.0f}",
            "-" if gbps is None else f"{100 * gbps / copy_gbps:.0f}%",
            f"{gen_ok} / {r.compile_ok[:3].strip()}",
        )
        lines.append("| " + " | ".join(cells) + " |")
        for what, verdict_ in (
            ("generated", r.generated_ok),
            ("compile", r.compile_ok),
        ):
            if verdict_ != "yes":
                notes.append(f"- {r.case.name}, {what}: {verdict_}")
    return "\n".join(lines + ([""] + notes if notes else []))


REGENERATE = "transpile --config benchmarks/pyproject.toml"


# ---------------------------------------------------------------------------- main


def environment(device: str) -> str:
    versions = f"torch {torch.__version__}"
    try:
        import triton

        versions += f", triton {triton.__version__}"
    except ImportError:
        versions += ", no triton"
    if device == "cuda":
        name = torch.cuda.get_device_name()
    else:
        cpu = platform.processor() or platform.machine()
        name = f"{cpu}, {torch.get_num_threads()} threads"
    return f"{name}; {versions}; Python {platform.python_version()}"


def main(
    device: str,
    make_timer: Callable[[bool], tuple[Timer, str]],
    copy_numel: tuple[int, int],  # (full, --quick)
    argv: list[str] | None = None,
    note: str = "",
) -> int:
    parser = argparse.ArgumentParser(
        description=f"eager vs torch.compile vs generated on {device}"
    )
    parser.add_argument("--quick", action="store_true", help="fewer reps, less time")
    parser.add_argument("--out", type=Path, help="also write the report to FILE.md")
    args = parser.parse_args(argv)

    timer, timing = make_timer(args.quick)
    numel = copy_numel[1] if args.quick else copy_numel[0]
    copy_gbps = copy_bandwidth(device, numel, timer)
    package, cases = load_cases(device)
    results = []
    for case in cases:
        print(f"running {case.name} on {device} ...", file=sys.stderr, flush=True)
        results.append(run_case(package, case, device, timer))
        if device == "cuda":
            torch.cuda.empty_cache()

    copied = f"`y.copy_(x)`, {numel / 2**20:.0f}M float32, bytes read + written"
    legend = (
        "gen vs eager / gen vs compile: speedup of generated (> 1 is faster); GB/s"
        " counts inputs + weights + outputs once, memory-bound cases only"
    )
    report = "\n".join([
        f"# transpile benchmark ({device}{', quick' if args.quick else ''})",
        "",
        f"- machine: {environment(device)}",
        f"- copy bandwidth: {copy_gbps:.0f} GB/s ({copied})",
        f"- timing: {timing}{'; ' + note if note else ''}",
        f"- {legend}",
        "",
        markdown_table(results, copy_gbps),
    ])  # fmt: skip
    print(report)
    if args.out:
        args.out.write_text(report + "\n")
    if any(r.generated_missing for r in results):
        print(
            "\nSome generated modules are missing. Produce benchmarks/generated/ where"
            f" `transpile` is installed, from the repository root:\n  {REGENERATE}",
            file=sys.stderr,
        )
    wrong = [r for r in results if r.compile_ok.startswith("no")]
    wrong += [r for r in results if r.generated_ok.startswith("no")]
    return 1 if wrong else 0
