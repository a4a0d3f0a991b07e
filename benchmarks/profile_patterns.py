"""Where the GPU time of pattern cases goes: each kernel's time per call, for eager,
torch.compile and the generated module, from torch.profiler.

    python benchmarks/patterns.py --device cuda --build .bench/pw --cases a,b   # here
    python3 benchmarks/profile_patterns.py --prebuilt .bench/pw --cases a,b     # GPU

For reading, not for ratios: the profiler adds its own time to every launch, so the
pattern suite (benchmarks/patterns.py) is what measures speed.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections import defaultdict
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import patterns  # noqa: E402

CALLS = 20


def kernel_times(call, calls: int = CALLS) -> list[tuple[str, float, int]]:
    """(kernel name, microseconds per call, launches per call), longest first."""
    for _ in range(3):
        call()
    torch.cuda.synchronize()
    activities = [torch.profiler.ProfilerActivity.CUDA]
    with torch.profiler.profile(activities=activities) as prof:
        for _ in range(calls):
            call()
        torch.cuda.synchronize()
    total: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            total[event.name] += event.device_time_total
            count[event.name] += 1
    rows = [(name, us / calls, count[name] // calls) for name, us in total.items()]
    return sorted(rows, key=lambda row: -row[1])


def contenders(pattern, work: Path, only_generated: bool = False) -> dict:
    """The calls of eager, torch.compile and the generated module on the case's
    inputs (of the generated module alone, with `only_generated`)."""
    eager = patterns.build_eager(pattern, "cuda")
    inputs = patterns.make_inputs(pattern, "cuda")
    stem = pattern.module
    sys.path.insert(0, str(work))
    for name in [m for m in sys.modules if m.startswith(f"gen_{pattern.name}")]:
        del sys.modules[name]  # another --prebuilt DIR's module of the same name
    module = importlib.import_module(f"gen_{pattern.name}.{stem}")
    sys.path.remove(str(work))
    gen = patterns.generated_like(module, pattern, eager)
    if only_generated:
        return {"generated": lambda: gen(**inputs)}
    compiled = torch.compile(eager)
    return {
        "eager": lambda: eager(**inputs),
        "compile": lambda: compiled(**inputs),
        "generated": lambda: gen(**inputs),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--prebuilt",
        type=Path,
        required=True,
        nargs="+",
        metavar="DIR",
        help="directories of generated code (several: variants of one build)",
    )
    parser.add_argument("--cases", required=True, help="comma-separated case names")
    parser.add_argument(
        "--only-generated",
        action="store_true",
        help="profile the generated modules alone (comparing variants)",
    )
    args = parser.parse_args(argv)
    by_name = {p.name: p for p in patterns.PATTERNS + patterns.HELDOUT}
    for name in args.cases.split(","):
        pattern = by_name[name]
        for work in args.prebuilt:
            print(f"## {name} ({work})\n")
            with torch.no_grad():
                calls = contenders(pattern, work, args.only_generated)
                for who, call in calls.items():
                    rows = kernel_times(call)
                    total = sum(us for _, us, _ in rows)
                    print(f"{who}: {total:.1f} us of kernels per call")
                    for kernel, us, launches in rows:
                        print(f"  {us:9.1f} us  x{launches}  {kernel[:100]}")
                    print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
