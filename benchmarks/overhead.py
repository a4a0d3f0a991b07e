"""Per-call overhead of generated modules: guards, dispatch, and the variant's body.

    python benchmarks/overhead.py [--device cpu|cuda] [--target STEM::Name ...]

For each target (default: toy::ToyLinear and gpt_block::Block of the root
`pyproject.toml`, imported from `generated/`) it builds the generated module with
seeded weights, draws inputs for the variant of `--device`, and times under
`torch.no_grad()`, in microseconds per call (the fastest of 15 batches of back-to-back
calls, on `--threads` threads, default 1: overheads, not kernel speed, are measured):

- guards: the guard function of the variant the call runs, alone;
- tried: every guard function `forward` calls before it runs that variant;
- forward: the whole call, `module(x)` (nn.Module's `__call__` included);
- variant: the variant function alone (parameter bindings, allocations, kernels);
- wrapper: forward - variant, the cost of guards and dispatch.

On CUDA the host times are taken without waiting for the GPU (synchronized after each
batch, outside the timed region), so they are what the Python code costs; the GPU
column is the device time of one forward, from CUDA events. While host > GPU, the
call is launch-bound.
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import sys
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
    gpu: float | None

    def cells(self) -> list[str]:
        gpu = "-" if self.gpu is None else f"{self.gpu:.1f}"
        wrapper = self.forward - self.variant_us
        return [
            self.target,
            self.variant,
            f"{self.guards:.1f}",
            f"{self.tried:.1f}",
            f"{self.forward:.1f}",
            f"{self.variant_us:.1f}",
            f"{wrapper:.1f}",
            gpu,
        ]


def host_us(fn: Callable[[], object], sync: Callable[[], None]) -> float:
    """Host microseconds per call, best of 15 batches; `sync` runs between batches,
    outside the timed region."""
    for _ in range(20):
        fn()
    sync()
    calls = 8
    while True:  # calls per batch: about 20 ms (at most 512, to stay off full queues)
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        elapsed = time.perf_counter() - start
        sync()
        if elapsed > 0.02 or calls >= 512:
            break
        calls *= 2
    per_call = []
    for _ in range(15):
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        per_call.append((time.perf_counter() - start) / calls)
    sync()
    return min(per_call) * 1e6


def gpu_us(fn: Callable[[], object]) -> float:
    """Device microseconds of one call: CUDA events around 100 back-to-back calls."""
    for _ in range(10):
        fn()
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


def measure(target: Target, package: str, device: str) -> Row:
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
        return Row(
            target.label,
            name,
            guards=host_us(lambda: guard(*args), sync),
            tried=host_us(try_all, sync),
            forward=host_us(lambda: instance(**inputs), sync),
            variant_us=host_us(lambda: body(*args), sync),
            gpu=gpu_us(lambda: instance(**inputs)) if device == "cuda" else None,
        )


def table(rows: list[Row]) -> str:
    head = [
        "target",
        "variant",
        "guards",
        "tried",
        "forward",
        "variant",
        "wrapper",
        "GPU",
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
    rows = [measure(by_label[label], package, args.device) for label in wanted]
    print(
        f"Per-call microseconds, {args.device}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads; wrapper = forward - variant.\n"
    )
    print(table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
