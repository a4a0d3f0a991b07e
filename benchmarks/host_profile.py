"""Where a training step's host time goes: eager, torch.compile, generated.

    python benchmarks/training.py --device cuda --build DIR     # transpile (no GPU)
    python benchmarks/host_profile.py --prebuilt DIR [--cases a,b] [--top N]

A step whose kernels take less time than the host takes to launch them is bound by
the host: its time is Python and the launches. For each case of
`benchmarks/training.py` (cuda), the wall time of a step unprofiled (median of
rounds, synchronized after each step), then `cProfile` over 20 steps: the functions
with the most time of their own, per step.
"""

from __future__ import annotations

import cProfile
import pstats
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script

from benchmarks.training import steps_to_inspect  # noqa: E402

STEPS = 20


def _wall(step) -> float:
    times = []
    for _ in range(STEPS):
        torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e3


def main(argv=None) -> int:
    args, steps = steps_to_inspect(__doc__, 15, argv)
    for case, name, step in steps:
        wall = _wall(step)
        profiler = cProfile.Profile()
        profiler.enable()
        for _ in range(STEPS):
            step()
        torch.cuda.synchronize()
        profiler.disable()
        stats = pstats.Stats(profiler)
        total = stats.total_tt / STEPS * 1e3
        print(
            f"\n## {case.name}: {name}, {wall:.2f} ms a step,"
            f" {total:.2f} ms profiled"
        )
        rows = sorted(stats.stats.items(), key=lambda kv: -kv[1][2])
        for (path, line, function), (_, calls, own, cumulative, _) in rows[: args.top]:
            where = f"{Path(path).name}:{line}({function})"
            print(
                f"  {own / STEPS * 1e3:7.3f} ms own  {cumulative / STEPS * 1e3:7.3f}"
                f" ms with callees  x{calls // STEPS:<4d} {where[-80:]}"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
