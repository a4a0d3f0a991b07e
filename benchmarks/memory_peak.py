"""What is alive at the peak of a training step: eager, torch.compile, generated.

    python benchmarks/training.py --device cuda --build DIR        # transpile (no GPU)
    python benchmarks/memory_peak.py --prebuilt DIR [--cases a,b] [--top N]

For each case of `benchmarks/training.py` (cuda), one step (forward, loss, backward,
AdamW) after two warm ones, with the CUDA caching allocator's history recorded. The
allocations and frees of the step give the memory allocated over time; at its peak,
the live blocks allocated during the step are listed, largest first, each with the
line that allocated it: of the generated module, of Inductor's output code, or of
the model's source. Memory held before the step (parameters, optimizer state,
inputs) is not in the figures: they are what the step adds on top.
"""

from __future__ import annotations

import sys
from collections import Counter
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script

from benchmarks.training import steps_to_inspect  # noqa: E402


def _where(frames: list[dict]) -> str:
    """The first frame outside torch and this script: the line that allocated."""
    for f in frames:
        name = f.get("filename", "")
        if "/torch/" in name and "torchinductor" not in name:
            continue
        if name.endswith("memory_peak.py") or name.startswith("<"):
            continue
        return f"{Path(name).name}:{f.get('line')} {f.get('name', '')}"
    return "?"


def _peak(trace: list[dict]) -> tuple[int, list[tuple[int, str]]]:
    """The peak of the memory allocated during the trace, and the blocks live
    then (size, where)."""
    live: dict[int, tuple[int, str]] = {}
    now = peak = 0
    at_peak: list[tuple[int, str]] = []
    for e in trace:
        action = e.get("action")
        if action == "alloc":
            live[e["addr"]] = (e["size"], _where(e.get("frames", [])))
            now += e["size"]
            if now > peak:
                peak = now
                at_peak = list(live.values())
        elif action == "free_completed" and e["addr"] in live:
            now -= live.pop(e["addr"])[0]
    return peak, at_peak


def main(argv=None) -> int:
    args, steps = steps_to_inspect(__doc__, 12, argv)
    for case, name, step in steps:
        start = torch.cuda.memory_allocated()
        torch.cuda.memory._record_memory_history(max_entries=200_000, stacks="python")
        step()
        torch.cuda.synchronize()
        snapshot = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        trace = snapshot["device_traces"][torch.cuda.current_device()]
        peak, live = _peak(trace)
        print(
            f"\n## {case.name}: {name}, peak {peak / 2**20:.0f} MiB above the"
            f" {start / 2**20:.0f} MiB allocated at the start"
        )
        by_line = Counter()
        for size, where in live:
            by_line[where] += size
        for where, size in by_line.most_common(args.top):
            print(f"  {size / 2**20:8.1f} MiB  {where}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
