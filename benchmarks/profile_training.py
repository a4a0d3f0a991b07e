"""Where a training step's GPU time goes: eager, torch.compile, generated.

    python benchmarks/training.py --device cuda --build DIR        # transpile (no GPU)
    python benchmarks/profile_training.py --prebuilt DIR [--cases a,b] [--top N]

For each case of `benchmarks/training.py` (cuda), three steps (forward, loss,
backward, AdamW) under `torch.profiler` after two warm ones: the GPU time per step
by kernel, largest first, with the number of launches per step, and the total of
all kernels beside the wall time of a step (their difference: the GPU idle,
waiting for the host).
"""

from __future__ import annotations

import sys
import time
from collections import defaultdict
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script

from benchmarks.training import steps_to_inspect  # noqa: E402

STEPS = 3


def main(argv=None) -> int:
    args, steps = steps_to_inspect(__doc__, 15, argv)
    for case, name, step in steps:
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            start = time.perf_counter()
            for _ in range(STEPS):
                step()
            torch.cuda.synchronize()
            wall = (time.perf_counter() - start) / STEPS * 1e3
        us: dict[str, float] = defaultdict(float)
        count: dict[str, int] = defaultdict(int)
        for e in prof.events():
            if e.device_type == torch.autograd.DeviceType.CUDA:
                us[e.name] += e.device_time / STEPS
                count[e.name] += 1
        total = sum(us.values()) / 1e3
        print(
            f"\n## {case.name}: {name}, kernels {total:.2f} ms of a"
            f" {wall:.2f} ms step (profiled), {sum(count.values()) // STEPS}"
            " launches"
        )
        for kernel, t in sorted(us.items(), key=lambda kv: -kv[1])[: args.top]:
            short = kernel if len(kernel) < 90 else kernel[:87] + "..."
            print(f"  {t / 1e3:7.3f} ms  x{count[kernel] // STEPS:<3d} {short}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
