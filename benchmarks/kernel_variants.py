"""Kernels of pattern cases timed against other versions of themselves: the data a
change to code generation is decided from, before the change is made.

    python benchmarks/patterns.py --device cuda --build .bench/kv --cases a,b    # here
    python3 benchmarks/kernel_variants.py --prebuilt .bench/kv --variants DIR    # GPU

DIR holds a folder for each case, of Triton modules: each defines kernels named as
the generated module's (its variant's name is the file's stem), and may define
`LAUNCH = {kernel name: {launch keyword: value}}` to launch them otherwise. The
generated module runs once with its kernels' launches recorded; each launch is
then repeated alone, as generated and as each variant that defines its kernel,
every tensor argument cloned, timed by triton.testing.do_bench. A variant's
tensors after the launch are compared with the generated kernel's (`max diff`):
a probe that computes something else (a kernel without its activation, to see
what the activation costs) says so there. Bandwidth counts every tensor argument
once, against the copy bandwidth measured in the same run.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import common, patterns  # noqa: E402
from benchmarks.launch_sweep import record  # noqa: E402
from benchmarks.profile_patterns import contenders  # noqa: E402


def load_variants(folder: Path) -> dict:
    """{variant name: module} of the Triton modules in `folder`."""
    variants = {}
    for path in sorted(folder.glob("*.py")):
        spec = importlib.util.spec_from_file_location(f"variant_{path.stem}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        variants[path.stem] = module
    return variants


def run_alone(kernel, grid, args, kwargs) -> list:
    """The launch on clones of its tensor arguments; the clones after it."""
    cloned = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
    kernel[grid](*cloned, **kwargs)
    torch.cuda.synchronize()
    return cloned


def max_diff(got: list, want: list) -> float:
    diffs = [0.0]
    for g, w in zip(got, want):
        if isinstance(w, torch.Tensor):
            if g.dtype == torch.bool:
                diffs.append(float((g != w).sum()))
            else:
                d = (g.double() - w.double()).abs().nan_to_num(0.0)
                diffs.append(float(d.max()) if d.numel() else 0.0)
    return max(diffs)


def compare(launch, variants: dict, timer, copy_gbps: float) -> list[str]:
    name, kernel, grid, args, kwargs = launch
    moved = common.tensor_bytes(args)
    want = run_alone(kernel, grid, args, kwargs)
    ms = timer(lambda: kernel[grid](*args, **kwargs))
    pct = moved / ms / 1e6 / copy_gbps
    lines = [
        f"{name}: grid {grid} {kwargs}",
        f"    {'generated':24s} {ms * 1e3:8.1f} us  {pct:5.0%}",
    ]
    for label, module in variants.items():
        other = getattr(module, name, None)
        if other is None:
            continue
        kw = dict(kwargs, **getattr(module, "LAUNCH", {}).get(name, {}))
        g = grid
        if "XBLOCK" in kw and kw["XBLOCK"] != kwargs["XBLOCK"]:
            span = grid[0] * kwargs["XBLOCK"]
            g = ((span + kw["XBLOCK"] - 1) // kw["XBLOCK"],)
        try:
            diff = max_diff(run_alone(other, g, args, kw), want)
            t = timer(lambda other=other, g=g, kw=kw: other[g](*args, **kw))
        except Exception as e:  # a variant that does not compile or run
            lines.append(f"    {label:24s} {type(e).__name__}: {str(e)[:200]}")
            continue
        pct = moved / t / 1e6 / copy_gbps
        lines.append(
            f"    {label:24s} {t * 1e3:8.1f} us  {pct:5.0%}  {ms / t:5.2f}x"
            f"  max diff {diff:.1e}"
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prebuilt", type=Path, required=True, metavar="DIR")
    parser.add_argument("--variants", type=Path, required=True, metavar="DIR")
    parser.add_argument("--cases", help="comma-separated case names (default: DIR's)")
    args = parser.parse_args(argv)
    timer, how = common.cuda_timer(quick=True, rounds=2)
    copy_gbps = common.copy_bandwidth("cuda", 1 << 28, timer)
    print(f"{torch.cuda.get_device_name()}; {how}")
    print(f"copy bandwidth: {copy_gbps:.0f} GB/s\n")
    by_name = {p.name: p for p in patterns.PATTERNS + patterns.HELDOUT}
    cases = args.cases.split(",") if args.cases else None
    cases = cases or sorted(p.name for p in args.variants.iterdir() if p.is_dir())
    for case in cases:
        variants = load_variants(args.variants / case)
        print(f"## {case}")
        with torch.no_grad():
            call = contenders(by_name[case], args.prebuilt, only_generated=True)
            module = sys.modules[f"gen_{case}.{by_name[case].module}"]
            for launch in record(call["generated"], module):
                print("\n".join(compare(launch, variants, timer, copy_gbps)))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
