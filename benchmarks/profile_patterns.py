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


def contenders(pattern, work: Path) -> dict:
    """The calls of eager, torch.compile and the generated module on the case's
    inputs."""
    eager = patterns.build_eager(pattern, "cuda")
    inputs = patterns.make_inputs(pattern, "cuda")
    stem = Path(patterns.SOURCE).stem
    sys.path.insert(0, str(work))
    module = importlib.import_module(f"gen_{pattern.name}.{stem}")
    gen = patterns.generated_like(module, pattern, eager)
    compiled = torch.compile(eager)
    return {
        "eager": lambda: eager(**inputs),
        "compile": lambda: compiled(**inputs),
        "generated": lambda: gen(**inputs),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prebuilt", type=Path, required=True, metavar="DIR")
    parser.add_argument("--cases", required=True, help="comma-separated case names")
    args = parser.parse_args(argv)
    by_name = {p.name: p for p in patterns.PATTERNS}
    for name in args.cases.split(","):
        pattern = by_name[name]
        print(f"## {name}\n")
        with torch.no_grad():
            for who, call in contenders(pattern, args.prebuilt).items():
                rows = kernel_times(call)
                total = sum(us for _, us, _ in rows)
                print(f"{who}: {total:.1f} us of kernels per call")
                for kernel, us, launches in rows:
                    print(f"  {us:9.1f} us  x{launches}  {kernel[:100]}")
                print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
