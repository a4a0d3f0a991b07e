"""Per-call overhead of generated modules: guards, dispatch, and the variant's body.

    python benchmarks/overhead.py [--device cpu|cuda] [--target STEM::Name ...]

For each target (default: toy::ToyLinear and gpt_block::Block of the root
`pyproject.toml`, imported from `generated/`) it builds the generated module with
seeded weights, draws inputs for the variant of `--device`, and times under
`torch.no_grad()`, in microseconds per call (the fastest of 25 batches of back-to-back
calls, on `--threads` threads, default 1: overheads, not kernel speed, are measured):

- guards: the guard function of the variant the call runs, alone;
- tried: every guard function `forward` calls before it runs that variant;
- forward: the whole call, `module(x)` (nn.Module's `__call__` included);
- variant: the variant function alone (parameter bindings, allocations, kernels);
- wrapper: forward - variant, the cost of guards and dispatch;
- eager: the source module's own forward, for comparison.

`--lines` also prints the host time of each statement of the variant's function, and
`--profile N` prints, for the generated and the eager forward, the N functions
with the most host time of their own (cProfile, which adds its own cost to every
call: compare counts and relative costs, not absolute times).

On CUDA, forward, variant and eager are medians over batches enqueued behind a GPU
sleep that outlasts the enqueuing (`behind_sleep`): the host times are what the Python
code costs, with no back-pressure from the GPU, and the GPU columns are the device time
of one forward, with no waiting for the host. While host > GPU, the call is
launch-bound. The other host times are taken without waiting for the GPU
(synchronized after each batch, outside the timed region).
"""

from __future__ import annotations

import argparse
import ast
import cProfile
import inspect
import os
import pstats
import re
import statistics
import sys
import textwrap
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script

from examples.compare import (
    ROOT,
    Target,
    build_eager,
    build_generated,
    load_config,
    load_generated,
    load_source,
    make_inputs,
)

DEFAULT_TARGETS = ("toy::ToyLinear", "gpt_block::Block")


@dataclass(frozen=True)
class Row:
    target: str
    variant: str
    guards: float
    tried: float
    forward: float
    variant_us: float
    eager: float
    gpu: float | None
    eager_gpu: float | None

    def cells(self) -> list[str]:
        gpu = "-" if self.gpu is None else f"{self.gpu:.1f}"
        eager_gpu = "-" if self.eager_gpu is None else f"{self.eager_gpu:.1f}"
        wrapper = self.forward - self.variant_us
        return [
            self.target,
            self.variant,
            f"{self.guards:.1f}",
            f"{self.tried:.1f}",
            f"{self.forward:.1f}",
            f"{self.variant_us:.1f}",
            f"{wrapper:.1f}",
            f"{self.eager:.1f}",
            gpu,
            eager_gpu,
        ]


def host_us(fn: Callable[[], object], sync: Callable[[], None]) -> float:
    """Host microseconds per call, best of 25 batches; `sync` runs between batches,
    outside the timed region. Batches are short (about 2 ms) so that the GPU's launch
    queue never fills: a full queue would make the host wait for the GPU."""
    for _ in range(20):
        fn()
    sync()
    calls = 8
    while True:  # calls per batch: about 2 ms
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        elapsed = time.perf_counter() - start
        sync()
        if elapsed > 0.002 or calls >= 512:
            break
        calls *= 2
    per_call = []
    for _ in range(25):
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        per_call.append((time.perf_counter() - start) / calls)
    sync()
    return min(per_call) * 1e6


def behind_sleep(fn: Callable[[], object], calls: int = 8) -> tuple[float, float]:
    """(host, GPU) microseconds of one call on CUDA, medians over 15 batches.

    Each batch of `calls` calls is enqueued behind a GPU sleep that outlasts the
    enqueuing, so the host time is the Python cost alone (the GPU never pushes back
    through a full launch queue) and the GPU time is the kernels' alone (the GPU never
    waits for the host). A call that waits for the GPU itself (a branch on tensor
    data) cannot be measured so: then the host time is `host_us`'s and the GPU time
    is the wall time of back-to-back calls between CUDA events."""
    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    if _waits_for_gpu(fn):
        return host_us(fn, torch.cuda.synchronize), _events_us(fn)
    cycles = 10_000_000
    hosts: list[float] = []
    gpus: list[float] = []
    while len(hosts) < 15:
        start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        torch.cuda._sleep(cycles)
        start.record()
        began = time.perf_counter()
        for _ in range(calls):
            fn()
        host = time.perf_counter() - began
        early = start.query()  # the GPU reached the batch before it was all enqueued
        end.record()
        torch.cuda.synchronize()
        if early:
            cycles *= 2
            continue
        hosts.append(host / calls * 1e6)
        gpus.append(start.elapsed_time(end) / calls * 1e3)
    return statistics.median(hosts), statistics.median(gpus)


def _waits_for_gpu(fn: Callable[[], object]) -> bool:
    """Whether one call returns only after the GPU has caught up with it."""
    start = torch.cuda.Event()
    torch.cuda._sleep(200_000_000)  # about 0.1 s
    start.record()
    fn()
    waited = start.query()
    torch.cuda.synchronize()
    return waited


def _events_us(fn: Callable[[], object]) -> float:
    """Microseconds a call between CUDA events around 100 back-to-back calls."""
    start, end = (torch.cuda.Event(enable_timing=True) for _ in range(2))
    start.record()
    for _ in range(100):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e3 / 100


def dispatch_order(cls_or_fn: object) -> list[str]:
    """The variant names `forward` (or the exported function) tries, in order."""
    fn = cls_or_fn.forward if isinstance(cls_or_fn, type) else cls_or_fn
    return list(dict.fromkeys(re.findall(r"_guards_(\w+)\(", inspect.getsource(fn))))


def profile(fn: Callable[[], object], sync: Callable[[], None], top: int) -> str:
    """The `top` functions by own host time over 200 calls, in microseconds a call."""
    for _ in range(20):
        fn()
    sync()
    profiler = cProfile.Profile()
    profiler.enable()
    for _ in range(200):
        fn()
    profiler.disable()
    sync()
    stats = pstats.Stats(profiler).stats
    rows = sorted(stats.items(), key=lambda kv: -kv[1][2])[:top]
    lines = ["| calls a call | own us a call | function |", "|---|---|---|"]
    for (file, line, func), (_, calls, own, _, _) in rows:
        where = func if file == "~" else f"{Path(file).name}:{line} {func}"
        lines.append(f"| {calls / 200:g} | {own / 200 * 1e6:.1f} | `{where}` |")
    return "\n".join(lines)


def statement_costs(
    function: Callable[..., object], args: tuple, sync: Callable[[], None]
) -> str:
    """Host microseconds of each top-level statement of a straight-line variant
    function, run one at a time in the order of the source, each repeated in place
    (variant statements bind fresh names and write fresh buffers, so repeating one is
    harmless). The cost of running an empty statement the same way is subtracted."""
    tree = ast.parse(textwrap.dedent(inspect.getsource(function)))
    definition = tree.body[0]
    assert isinstance(definition, ast.FunctionDef)
    names = {a.arg: value for a, value in zip(definition.args.args, args)}
    scope = function.__globals__

    def timed(statement: ast.stmt) -> float:
        if isinstance(statement, ast.Return):
            statement = ast.Expr(statement.value)
        module = ast.fix_missing_locations(ast.Module([statement], []))
        code = compile(module, "<variant>", "exec")
        return host_us(lambda: exec(code, scope, names), sync)

    empty = timed(ast.Pass())
    rows = ["| line | us | statement |", "|---|---|---|"]
    total = 0.0
    for statement in definition.body:
        text = ast.unparse(statement).splitlines()[0][:90]
        nested = list(ast.walk(statement))[1:]
        if any(isinstance(n, ast.Return) for n in nested):  # a branch that returns
            rows.append(f"| {statement.lineno} | - | `{text}` (not timed) |")
            continue
        cost = max(0.0, timed(statement) - empty)
        total += cost
        rows.append(f"| {statement.lineno} | {cost:.1f} | `{text}` |")
    rows.append(f"| | {total:.1f} | total of the timed statements |")
    return "\n".join(rows)


def measure(
    target: Target, package: str, device: str, top: int = 0, lines: bool = False
) -> tuple[Row, str]:
    variant = next((v for v in target.variants if device in v.devices), None)
    if variant is None:
        raise LookupError(f"{target.label} has no {device} variant")
    generated = load_generated(package, target)
    module = sys.modules[generated.__module__]
    init = dict(target.init)
    eager = build_eager(load_source(target), init, device)
    instance = build_generated(generated, eager, init, device)
    inputs = make_inputs(variant, device)
    self_ = (instance,) if isinstance(instance, torch.nn.Module) else ()
    args = (*self_, *inputs.values())
    tried = []
    for name in dispatch_order(generated):
        tried.append(getattr(module, f"_guards_{name}"))
        with torch.no_grad():
            if tried[-1](*args) is None:
                break
    else:
        raise LookupError(f"{target.label}: no variant accepts the {device} inputs")
    guard, body = tried[-1], getattr(module, f"_{name}")
    sync = torch.cuda.synchronize if device == "cuda" else lambda: None

    def try_all() -> None:
        for g in tried:
            g(*args)

    with torch.no_grad():
        if device == "cuda":
            forward, gpu = behind_sleep(lambda: instance(**inputs))
            variant_us, _ = behind_sleep(lambda: body(*args))
            eager_us, eager_gpu = behind_sleep(lambda: eager(**inputs))
        else:
            forward = host_us(lambda: instance(**inputs), sync)
            variant_us = host_us(lambda: body(*args), sync)
            eager_us = host_us(lambda: eager(**inputs), sync)
            gpu = eager_gpu = None
        row = Row(
            target.label,
            name,
            guards=host_us(lambda: guard(*args), sync),
            tried=host_us(try_all, sync),
            forward=forward,
            variant_us=variant_us,
            eager=eager_us,
            gpu=gpu,
            eager_gpu=eager_gpu,
        )
        report = ""
        if lines:
            report += f"\n### {target.label}: statements of _{name}\n\n"
            report += statement_costs(body, args, sync)
        if top:
            report += (
                f"\n### {target.label}: generated forward\n\n"
                + profile(lambda: instance(**inputs), sync, top)
                + f"\n\n### {target.label}: eager forward\n\n"
                + profile(lambda: eager(**inputs), sync, top)
            )
    return row, report


def table(rows: list[Row]) -> str:
    head = [
        "target",
        "variant",
        "guards",
        "tried",
        "forward",
        "variant",
        "wrapper",
        "eager",
        "GPU",
        "eager GPU",
    ]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(r.cells()) + " |" for r in rows]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument(
        "--target",
        action="append",
        metavar="STEM::Name",
        help=f"a target of pyproject.toml (default: {', '.join(DEFAULT_TARGETS)})",
    )
    parser.add_argument("--config", type=Path, default=ROOT / "pyproject.toml")
    parser.add_argument(
        "--threads", type=int, default=1, help="CPU threads (default 1)"
    )
    parser.add_argument(
        "--profile",
        type=int,
        default=0,
        metavar="N",
        help="also print the N costliest functions of each forward (cProfile)",
    )
    parser.add_argument(
        "--lines",
        action="store_true",
        help="also print the host time of each statement of the variant",
    )
    args = parser.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)  # before C++ kernels load
    torch.set_num_threads(args.threads)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: no CUDA device", file=sys.stderr)
        return 2
    package, targets = load_config(args.config)
    by_label = {t.label: t for t in targets}
    wanted = args.target or list(DEFAULT_TARGETS)
    unknown = [label for label in wanted if label not in by_label]
    if unknown:
        print(f"error: no target {unknown[0]} in {args.config}", file=sys.stderr)
        return 2
    measured = [
        measure(by_label[label], package, args.device, args.profile, args.lines)
        for label in wanted
    ]
    rows = [row for row, _ in measured]
    print(
        f"Per-call microseconds, {args.device}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; wrapper = forward - variant.\n"
    )
    print(table(rows))
    for _, report in measured:
        print(report)
    return 0


if __name__ == "__main__":
    sys.exit(main())
