"""Shared by `benchmarks/cpu.py` and `benchmarks/gpu.py`: cases, timing, correctness,
and the markdown table.

Cases are the targets of `benchmarks/pyproject.toml`, one variant per device. Each case
runs eager, `torch.compile` (default mode; on the GPU also
`mode="max-autotune-no-cudagraphs"`) and the generated module from
`benchmarks.generated.<stem>`, checks each compiled and the generated result against
eager in the same run, and times them all. Overhead-bound cases (`OVERHEAD_BOUND`) are
timed as per-call wall-clock latency instead of the device's own timer. TYPE-spec
parsing, seeded inputs and the tolerances come from `examples.compare`, so the report
and the benchmarks judge correctness the same way.
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
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
COMPUTE_BOUND = frozenset({"gpt_block", "gpt"})  # no GB/s column: matmuls dominate
# microseconds of work per call: launch and Python overhead dominate, so these are
# timed as wall-clock latency per call (`latency_race`), with no GB/s column
OVERHEAD_BOUND = frozenset({"toy"})

Timer = Callable[[Callable[[], object]], float]  # runs fn repeatedly, returns median ms
# times several functions together (interleaved), returns each one's median ms
Race = Callable[[dict[str, Callable[[], object]]], dict[str, float]]
ROUNDS = 5  # of `interleaved` timing


@dataclass(frozen=True)
class Compiler:
    """A `torch.compile` configuration: its column name and `mode`."""

    name: str
    mode: str | None = None


COMPILE = Compiler("compile")
MAX_AUTOTUNE = Compiler("max-autotune", "max-autotune-no-cudagraphs")

# -------------------------------------------------------------------------- timing


def cuda_timer(quick: bool, rounds: int = 1) -> tuple[Timer, str]:
    """`triton.testing.do_bench` if importable, else CUDA events; `rounds`: the
    timer is one of that many rounds (`interleaved`), and takes its share of the time.
    """
    warmup_ms, rep_ms = (10, 50) if quick else (25, 200)
    warmup_ms, rep_ms = max(warmup_ms // rounds, 5), max(rep_ms // rounds, 20)
    try:
        from triton.testing import do_bench
    except ImportError:
        reps = max((20 if quick else 100) // rounds, 10)
        return (
            lambda fn: _cuda_events_median(fn, warmup=reps // 4, reps=reps),
            f"CUDA events, median of {reps} reps after {reps // 4} warmup, L2 flushed",
        )

    def time_ms(fn: Callable[[], object]) -> float:
        return float(do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))

    how = f"triton.testing.do_bench median (warmup {warmup_ms} ms, rep {rep_ms} ms)"
    return time_ms, how


def interleaved(timer: Timer, rounds: int) -> Race:
    """Time several functions with `timer` in `rounds` rounds: each round times every
    function once, starting one further along the list than the round before; each
    function's time is its median over the rounds.

    A host's speed drifts over seconds (other processes, clock changes): timed one
    after another, each function would meet a different host. Interleaved, they all
    meet the same spells."""

    def race(fns: dict[str, Callable[[], object]]) -> dict[str, float]:
        names = list(fns)
        samples: dict[str, list[float]] = {name: [] for name in names}
        for i in range(rounds):
            k = i % len(names)
            for name in names[k:] + names[:k]:
                samples[name].append(timer(fns[name]))
        return {name: statistics.median(t) for name, t in samples.items()}

    return race


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


def cpu_timer(quick: bool, rounds: int = 1) -> tuple[Timer, str]:
    """perf_counter: warmup, then at least `min_reps` runs or `budget_s` seconds;
    `rounds` as for `cuda_timer`."""
    warmup, min_reps, budget_s = (1, 3, 0.2) if quick else (3, 10, 2.0)
    min_reps, budget_s = max(min_reps // rounds, 3), budget_s / rounds

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
    how = f"time.perf_counter median (>= {min_reps} reps or {budget_s:.2g} s)"
    return time_ms, f"{how}, torch threads {threads}"


def latency_timer(quick: bool, sync: Callable[[], object]) -> tuple[Timer, str]:
    """Wall-clock latency per call: batches of back-to-back calls, `sync()` at the end
    of each batch only; the median over batches of batch time / calls."""
    race, how = latency_race(quick, sync)
    return (lambda fn: race({"fn": fn})["fn"]), how


def latency_race(quick: bool, sync: Callable[[], object]) -> tuple[Race, str]:
    """`latency_timer` for several functions at once, their batches interleaved.

    A host's speed drifts over seconds (other processes, clock changes), and a batch
    is a tenth of a second: timed one function after another, the later function
    meets a different host. Here each round runs one batch of every function, in an
    order that rotates from round to round, so each median is over the same spells."""
    batches, batch_s = (5, 0.02) if quick else (15, 0.1)

    def calls_for(fn: Callable[[], object]) -> int:
        for _ in range(10):
            fn()
        sync()
        calls = 1
        while True:  # calls per batch: enough for batch_s, doubling from 1
            start = time.perf_counter()
            for _ in range(calls):
                fn()
            sync()
            if time.perf_counter() - start >= batch_s or calls >= 2**16:
                return calls
            calls *= 2

    def race(fns: dict[str, Callable[[], object]]) -> dict[str, float]:
        calls = {name: calls_for(fn) for name, fn in fns.items()}
        per_call: dict[str, list[float]] = {name: [] for name in fns}
        names = list(fns)
        for i in range(batches):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                fn, n = fns[name], calls[name]
                start = time.perf_counter()
                for _ in range(n):
                    fn()
                sync()
                per_call[name].append((time.perf_counter() - start) / n)
        return {name: statistics.median(t) * 1e3 for name, t in per_call.items()}

    how = (
        f"time.perf_counter over back-to-back calls, synchronized once per batch,"
        f" median of {batches} batches of >= {batch_s * 1e3:.0f} ms, the batches of"
        " eager, each compiled and generated interleaved"
    )
    return race, how


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
    def overhead_bound(self) -> bool:
        return self.target.stem in OVERHEAD_BOUND

    @property
    def memory_bound(self) -> bool:
        return not (self.target.stem in COMPUTE_BOUND or self.overhead_bound)


@dataclass
class Timed:
    """One compiled configuration of a case: median ms, and whether it is right."""

    ms: float | None = None
    ok: str = "-"
    first_s: float | None = None  # the first call: compile, check and run


@dataclass
class Result:
    case: Case
    eager_ms: float | None = None
    compiled: dict[str, Timed] = field(default_factory=dict)  # by Compiler.name
    generated_ms: float | None = None
    nbytes: int = 0
    generated_ok: str = "-"
    generated_missing: bool = False
    latency: bool = False  # timed by the latency timer, not the device's own


def load_cases(device: str, only: Sequence[str] = ()) -> tuple[str, list[Case]]:
    """The cases of `device`; `only`: just those labels (ValueError for unknown)."""
    package, targets = load_config(CONFIG)
    cases = [
        Case(target, variant)
        for target in targets
        for variant in target.variants
        if device in variant.devices
    ]
    unknown = sorted(set(only) - {case.name for case in cases})
    if unknown:
        known = ", ".join(dict.fromkeys(case.name for case in cases))
        raise ValueError(f"no {device} case {unknown[0]!r} (cases: {known})")
    return package, [case for case in cases if not only or case.name in only]


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


def progress(message: str, since: float) -> None:
    """One line on stderr, with the seconds elapsed since `since`."""
    elapsed = time.perf_counter() - since
    print(f"[{elapsed:6.1f} s] {message}", file=sys.stderr, flush=True)


def run_case(
    package: str,
    case: Case,
    device: str,
    race: Race,
    compilers: Sequence[Compiler] = (COMPILE,),
    latency: Race | None = None,
    since: float | None = None,
) -> Result:
    """Eager, each compiler and generated for one case; never raises for a broken one.

    Each is built and checked against eager first; then `race` times them all
    together (`interleaved`), or `latency` does for the overhead-bound cases, if
    given. Progress goes to stderr, with the seconds elapsed since `since` (default:
    now).
    """
    start = time.perf_counter() if since is None else since
    result = Result(case, latency=latency is not None and case.overhead_bound)
    timed: dict[str, Callable[[], object]] = {}

    def later(name: str) -> Callable[[Callable[[], object]], None]:
        def defer(fn: Callable[[], object]) -> None:
            timed[name] = fn

        return defer

    torch._dynamo.reset()
    target, low = case.target, case.variant.low_precision
    inputs = make_inputs(case.variant, device)
    eager = build_eager(load_source(target), dict(target.init), device)
    with torch.no_grad():
        expected = reference(eager, inputs, low)
        out = eager(**inputs)
        weights = eager.state_dict() if isinstance(eager, torch.nn.Module) else {}
        result.nbytes = tensor_bytes(inputs, list(weights.values()), out)
        del out
        timed["eager"] = lambda: eager(**inputs)

        for compiler in compilers:
            run = run_compiled(
                compiler, eager, inputs, expected, low, later(compiler.name)
            )
            result.compiled[compiler.name] = run
            first = "-" if run.first_s is None else f"{run.first_s:.1f} s"
            progress(f"{case.name}: {compiler.name} first call {first}", start)

        try:
            gen = build_generated(
                load_generated(package, target), eager, dict(target.init), device
            )
            actual, warned = call_watching(gen, inputs)
        except ImportError as e:
            result.generated_missing, result.generated_ok = True, str(e)
            gen = None
        except Exception as e:
            result.generated_ok = f"no (raised {type(e).__name__}: {e})"
            gen = None
        if gen is not None:
            note = fallback_note(warned, call_watching(eager, inputs)[1])
            if note:  # a generated module without this variant falls back to eager
                result.generated_missing, result.generated_ok = True, note
            else:
                result.generated_ok = verdict(compare_outputs(actual, expected, low))
                del actual
                timed["generated"] = lambda: gen(**inputs)

        ms = (latency if result.latency else race)(timed)
        each = ", ".join(f"{name} {value:.3f}" for name, value in ms.items())
        progress(f"{case.name}: {each} ms, timed together", start)
        result.eager_ms = ms.pop("eager")
        result.generated_ms = ms.pop("generated", None)
        for name, value in ms.items():
            result.compiled[name].ms = value
    torch._dynamo.reset()  # drop the compiled code (and its memory)
    return result


def run_compiled(
    compiler: Compiler,
    eager: Callable[..., object],
    inputs: dict[str, object],
    expected: object,
    low: bool,
    time_later: Callable[[Callable[[], object]], None],
) -> Timed:
    """`torch.compile(eager, mode=...)`: checked against `expected`, then handed to
    `time_later` (its time is filled in by the caller)."""
    timed = Timed()
    compiled = torch.compile(eager, mode=compiler.mode)
    try:
        first = time.perf_counter()
        check = compare_outputs(compiled(**inputs), expected, low)
        timed.first_s = time.perf_counter() - first
        timed.ok = verdict(check)
        time_later(lambda: compiled(**inputs))
    except Exception as e:
        timed.ok = f"no (raised {type(e).__name__}: {e})"
    return timed


# --------------------------------------------------------------------------- table


def number_cell(value: float | None, digits: int = 3) -> str:
    """A table cell for a figure (`-` when there is none)."""
    return "-" if value is None else f"{value:.{digits}f}"


def ratio_cell(num: float | None, den: float | None) -> str:
    """A table cell for `num / den` as a speedup, `1.23x` (`-` without both)."""
    return "-" if num is None or den is None else f"{num / den:.2f}x"


def _short(verdict_: str) -> str:
    """`yes`, `no` or `-`: the verdict without its reason."""
    return verdict_[:3].strip()


LATENCY_MARK = "†"


def speedups(results: Iterable[Result], baseline: str) -> list[float]:
    """baseline ms / generated ms of each case where both ran and are correct.

    `baseline` is "eager" or a `Compiler.name`.
    """
    ratios = []
    for r in results:
        if r.generated_ms is None or r.generated_ok != "yes":
            continue
        if baseline == "eager":
            ms, ok = r.eager_ms, "yes"
        else:
            timed = r.compiled.get(baseline, Timed())
            ms, ok = timed.ms, timed.ok
        if ms is not None and ok == "yes":
            ratios.append(ms / r.generated_ms)
    return ratios


def geomean(values: Sequence[float]) -> float | None:
    """The geometric mean, or None for no values."""
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def geomean_cell(ratios: Sequence[float], cases: int) -> str:
    """`1.23x`, or `1.23x (4 of 5)` when only some of the cases count."""
    mean = geomean(ratios)
    if mean is None:
        return "-"
    counted = "" if len(ratios) == cases else f" ({len(ratios)} of {cases})"
    return f"{mean:.2f}x{counted}"


def markdown_table(
    results: list[Result], copy_gbps: float, compilers: Sequence[str] = ("compile",)
) -> str:
    """The table, a geometric-mean row, then a note per case whose generated or
    compiled run is not right. `compilers`: the `Compiler.name` columns, in order."""
    header = (
        "case", "shape", "eager ms", *(f"{c} ms" for c in compilers), "generated ms",
        "gen vs eager", *(f"gen vs {c}" for c in compilers), "gen GB/s",
        "% of copy BW", f"correct (gen / {' / '.join(compilers)})",
    )  # fmt: skip
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    notes = []
    for r in results:
        gbps = None
        if r.case.memory_bound and r.generated_ms is not None:
            gbps = r.nbytes / (r.generated_ms * 1e-3) / 1e9
        gen_ok = "not generated" if r.generated_missing else _short(r.generated_ok)
        compiled = [r.compiled.get(c, Timed()) for c in compilers]
        cells = (
            r.case.name + (f" {LATENCY_MARK}" if r.latency else ""),
            r.case.variant.describe(),
            number_cell(r.eager_ms),
            *(number_cell(t.ms) for t in compiled),
            "not generated" if r.generated_missing else number_cell(r.generated_ms),
            ratio_cell(r.eager_ms, r.generated_ms),  # speedup: > 1 means generated wins
            *(ratio_cell(t.ms, r.generated_ms) for t in compiled),
            "-" if gbps is None else f"{gbps:.0f}",
            "-" if gbps is None else f"{100 * gbps / copy_gbps:.0f}%",
            " / ".join([gen_ok, *(_short(t.ok) for t in compiled)]),
        )
        lines.append("| " + " | ".join(cells) + " |")
        verdicts = [("generated", r.generated_ok)]
        verdicts += [(c, t.ok) for c, t in zip(compilers, compiled)]
        for what, verdict_ in verdicts:
            if verdict_ != "yes":
                notes.append(f"- {r.case.name}, {what}: {verdict_}")
    if results:
        n = len(results)
        cells = (
            "geomean", f"{n} cases", "", *("" for _ in compilers), "",
            geomean_cell(speedups(results, "eager"), n),
            *(geomean_cell(speedups(results, c), n) for c in compilers),
            "", "", "",
        )  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
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
    make_timer: Callable[[bool, int], tuple[Timer, str]],
    copy_numel: tuple[int, int],  # (full, --quick)
    argv: list[str] | None = None,
    note: str = "",
    make_latency_race: Callable[[bool], tuple[Race, str]] | None = None,
    max_autotune: bool = False,
) -> int:
    """Run the cases of `device` and print the report.

    `make_latency_race`: times the overhead-bound cases (None: `make_timer`'s timer);
    `max_autotune`: also compile with `MAX_AUTOTUNE` (unless --skip-max-autotune).
    """
    parser = argparse.ArgumentParser(
        description=f"eager vs torch.compile vs generated on {device}"
    )
    parser.add_argument("--quick", action="store_true", help="fewer reps, less time")
    parser.add_argument("--out", type=Path, help="also write the report to FILE.md")
    parser.add_argument(
        "--case",
        action="append",
        default=[],
        metavar="LABEL",
        help="run only this case, e.g. gpt::GPT (repeatable)",
    )
    parser.add_argument(
        "--commands",
        action="store_true",
        help="print the commands that produce benchmarks/generated/ and this report",
    )
    if max_autotune:
        parser.add_argument(
            "--skip-max-autotune",
            action="store_true",
            help=f'no mode="{MAX_AUTOTUNE.mode}" column (its compiles take minutes)',
        )
    args = parser.parse_args(argv)
    if args.commands:
        name = "gpu" if device == "cuda" else "cpu"
        print(f"{REGENERATE}\npython benchmarks/{name}.py --out {name}.md")
        return 0
    try:
        package, cases = load_cases(device, args.case)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    compilers = [COMPILE]
    if max_autotune and not args.skip_max_autotune:
        compilers.append(MAX_AUTOTUNE)

    start = time.perf_counter()
    rounds = 3 if args.quick else ROUNDS
    timer, timing = make_timer(args.quick, rounds)
    race = interleaved(timer, rounds)
    latency, latency_how = None, ""
    if make_latency_race is not None:
        latency, latency_how = make_latency_race(args.quick)
    numel = copy_numel[1] if args.quick else copy_numel[0]
    copy_gbps = copy_bandwidth(device, numel, lambda fn: race({"copy": fn})["copy"])
    results = []
    for i, case in enumerate(cases, 1):
        progress(f"case {i}/{len(cases)}: {case.name} on {device} ...", start)
        case_start = time.perf_counter()
        results.append(run_case(package, case, device, race, compilers, latency, start))
        if device == "cuda":
            torch.cuda.empty_cache()
        took = time.perf_counter() - case_start
        progress(f"case {i}/{len(cases)}: {case.name} took {took:.1f} s", start)

    copied = f"`y.copy_(x)`, {numel / 2**20:.0f}M float32, bytes read + written"
    names = [c.name for c in compilers]
    legend = (
        f"gen vs eager / {' / '.join(f'gen vs {n}' for n in names)}: speedup of"
        " generated (> 1 is faster); geomean over the cases where both are timed and"
        " correct; GB/s counts inputs + weights + outputs once, memory-bound cases only"
    )
    modes = ", ".join(
        f"{c.name}: {f'mode={c.mode!r}' if c.mode else 'default mode'}"
        for c in compilers
    )
    lines = [
        f"# transpile benchmark ({device}{', quick' if args.quick else ''})",
        "",
        f"- machine: {environment(device)}",
        f"- copy bandwidth: {copy_gbps:.0f} GB/s ({copied})",
        f"- timing: {timing}, median of {rounds} rounds, each timing eager, each"
        f" compiled and generated once, interleaved{'; ' + note if note else ''}",
    ]
    if any(r.latency for r in results):
        lines.append(f"- {LATENCY_MARK} overhead-bound, timed per call: {latency_how}")
    lines += [f"- torch.compile: {modes}", f"- {legend}", ""]
    report = "\n".join([*lines, markdown_table(results, copy_gbps, names)])
    print(report)
    if args.out:
        args.out.write_text(report + "\n")
    if any(r.generated_missing for r in results):
        print(
            "\nSome generated modules are missing. Produce benchmarks/generated/ where"
            f" `transpile` is installed, from the repository root:\n  {REGENERATE}",
            file=sys.stderr,
        )
    wrong = [
        r for r in results if any(t.ok.startswith("no") for t in r.compiled.values())
    ]
    wrong += [r for r in results if r.generated_ok.startswith("no")]
    return 1 if wrong else 0
