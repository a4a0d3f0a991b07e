"""Each Triton kernel of pattern cases timed at other launch blocks and warps than
the generated module's: the data a launch heuristic is chosen from.

    python benchmarks/patterns.py --device cuda --build .bench/pw --cases a,b   # here
    python3 benchmarks/launch_sweep.py --prebuilt .bench/pw --cases a,b         # GPU

The generated module runs once with its kernels' launches recorded; each launch
is then repeated alone on the same arguments with XBLOCK and num_warps changed
(RBLOCK stays: it decides the kernel's loops), timed by triton.testing.do_bench.
A kernel's bandwidth counts every tensor argument once (its bytes over the time,
against the copy bandwidth measured in the same run): for reading, a kernel that
reads an input through a broadcast or a window reads it more or less than once.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from pathlib import Path
from types import SimpleNamespace

import torch

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import common, patterns  # noqa: E402
from benchmarks.profile_patterns import contenders  # noqa: E402

# candidates: blocks of a pointwise kernel; rows a program of a reduction takes
POINTWISE_XBLOCKS = (256, 512, 1024, 2048, 4096)
REDUCTION_XBLOCKS = (1, 2, 4, 8, 16, 32, 64)
WARPS = (2, 4, 8, 16, 32)
MAX_ELEMENTS = 1 << 15  # XBLOCK * RBLOCK of a candidate, at most


class Recorder:
    """Stands for a kernel of the generated module: launches it and records how."""

    def __init__(self, name: str, kernel, launches: list):
        self.name, self.kernel, self.launches = name, kernel, launches

    def __getitem__(self, grid):
        def launch(*args, **kwargs):
            self.launches.append((self.name, self.kernel, grid, args, kwargs))
            return self.kernel[grid](*args, **kwargs)

        return launch


def record(call, module) -> list:
    """The Triton launches of one call of the generated module."""
    kernels = importlib.import_module(module.__name__ + "_triton")
    launches: list = []
    saved = module._triton
    module._triton = SimpleNamespace(
        **{
            name: Recorder(name, getattr(kernels, name), launches)
            for name in dir(kernels)
            if name.startswith("triton_")
        }
    )
    try:
        call()
        torch.cuda.synchronize()
    finally:
        module._triton = saved
    return launches


def registers(compiled) -> str:
    """Registers a thread of the compiled kernel takes, and what it spills."""
    regs = getattr(compiled, "n_regs", None)
    spills = getattr(compiled, "n_spills", None)
    return "" if regs is None else f"{regs} regs, {spills} spilled"


def sweep(launch, timer: common.Timer, copy_gbps: float, top: int) -> list[str]:
    name, kernel, grid, args, kwargs = launch
    moved = common.tensor_bytes(args)
    xblock, rblock = kwargs["XBLOCK"], kwargs.get("RBLOCK", 1)
    span = grid[0] * xblock  # rows (or elements) the launch covers
    xblocks = REDUCTION_XBLOCKS if "RBLOCK" in kwargs else POINTWISE_XBLOCKS
    candidates = {(xblock, kwargs["num_warps"])}  # the generated module's first
    for x in xblocks:
        if x * rblock > max(MAX_ELEMENTS, xblock * rblock) or x > 4 * span:
            continue
        candidates |= {(x, w) for w in WARPS if 32 * w <= max(64, x * rblock)}
    results = []
    for x, w in sorted(candidates):
        kw = dict(kwargs, XBLOCK=x, num_warps=w)
        g = ((span + x - 1) // x,)
        try:
            ms = timer(lambda g=g, kw=kw: kernel[g](*args, **kw))
        except Exception as e:  # out of resources: not a candidate
            results.append((float("inf"), x, w, type(e).__name__))
            continue
        results.append((ms, x, w, registers(kernel[g](*args, **kw))))
    chosen, _, _, held = next(
        r for r in results if r[1] == xblock and r[2] == kwargs["num_warps"]
    )
    lines = [
        f"{name}: grid {grid}, XBLOCK={xblock}, RBLOCK={rblock}, "
        f"num_warps={kwargs['num_warps']}: {chosen * 1e3:.1f} us, "
        f"{moved / chosen / 1e6 / copy_gbps:.0%} of copy, {held}"
    ]
    for ms, x, w, note in sorted(results, key=lambda r: r[0])[:top]:
        if ms < float("inf"):
            pct = f"{moved / ms / 1e6 / copy_gbps:.0%}  {note}"
        else:
            pct = note  # the error
        lines.append(f"    XBLOCK={x:5d} warps={w:2d}: {ms * 1e3:8.1f} us  {pct}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--prebuilt", type=Path, required=True, metavar="DIR")
    parser.add_argument("--cases", required=True, help="comma-separated case names")
    parser.add_argument("--top", type=int, default=6, help="fastest configs shown")
    args = parser.parse_args(argv)
    timer, _ = common.cuda_timer(quick=True, rounds=2)
    copy_gbps = common.copy_bandwidth("cuda", 1 << 28, timer)
    print(f"copy bandwidth: {copy_gbps:.0f} GB/s\n")
    by_name = {p.name: p for p in patterns.PATTERNS + patterns.HELDOUT}
    for case in args.cases.split(","):
        pattern = by_name[case]
        print(f"## {case}")
        with torch.no_grad():
            call = contenders(pattern, args.prebuilt, only_generated=True)["generated"]
            module = sys.modules[f"gen_{case}.{pattern.module}"]
            for launch in record(call, module):
                if "XBLOCK" not in launch[4]:  # a matmul's tiles: tuned apart
                    continue
                print("\n".join(sweep(launch, timer, copy_gbps, args.top)))
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
