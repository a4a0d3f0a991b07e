"""Cost of a variant's guard function on the GPT model, in microseconds per call.

    python benchmarks/guard_cost.py [--generated] [--layers N] [--grad]

Builds `examples/gpt.py::GPT` (n_embd=64, n_head=4, `--layers` blocks, default 2: the
root `pyproject.toml` target) for idx=i64[2,16] on the CPU into a temporary directory
with the transpiler of this checkout, or, with `--generated`, imports the checked-in
`generated/gpt.py` instead (what was built before a change to the guards). Then it
times `_guards_cpu_0(model, idx)` on an instance with seeded weights in eval mode:
the fastest of 300 batches of 200 back-to-back calls, under `torch.no_grad()` (as
inference runs; `--grad` times it with grad enabled and parameters frozen, where the
guard also checks that nothing the variant reads requires grad). It prints the
number of guards (`if not (...)` checks) and the time.
"""

from __future__ import annotations

import argparse
import importlib
import inspect
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script


def build_gpt(layers: int, out: Path):
    """The generated module of GPT, built by this checkout into `out`."""
    from transpiler.api import build, write
    from transpiler.options import Options, Target, TensorSpec, Variant

    variant = Variant((("idx", TensorSpec(torch.int64, (2, 16))),), "cpu")
    init = (("n_layer", layers), ("n_embd", 64), ("n_head", 4))
    target = Target("examples/gpt.py::GPT", (variant,), init=init)
    package = f"guard_cost_gpt_{layers}"
    write(build(Options(targets=(target,), root=ROOT)), out / package)
    sys.path.insert(0, str(out))
    return importlib.import_module(f"{package}.gpt")


def per_call_us(fn, batches: int = 300, calls: int = 200) -> float:
    best = float("inf")
    for _ in range(batches):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, time.perf_counter() - start)
    return best / calls * 1e6


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--generated", action="store_true")
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--grad", action="store_true")
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        if args.generated:
            module = importlib.import_module("generated.gpt")
        else:
            module = build_gpt(args.layers, Path(tmp))
        torch.manual_seed(0)
        layers = 2 if args.generated else args.layers
        model = module.GPT(n_layer=layers, n_embd=64, n_head=4).eval()
        idx = torch.randint(0, 256, (2, 16))
        model.requires_grad_(False)
        guards = module._guards_cpu_0
        checks = inspect.getsource(guards).count("if not (")
        with torch.set_grad_enabled(args.grad):
            failed = guards(model, idx)
            assert failed is None, f"the variant does not run: {failed}"
            us = per_call_us(lambda: guards(model, idx))
    which = "generated/gpt.py" if args.generated else "built now"
    grad = "grad enabled" if args.grad else "no_grad"
    print(f"GPT n_layer={layers} ({which}, {grad}): {checks} guards, {us:.2f} us")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
