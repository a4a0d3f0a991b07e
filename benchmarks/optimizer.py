"""Optimizer steps: runtime_shim's fused AdamW and SGD against torch.optim's.

    python benchmarks/optimizer.py [--rounds N] [--device cpu|cuda]

The parameters of a GPT (examples/gpt.py) at two sizes, with random gradients; one
step of each optimizer timed in interleaved rounds (the median), after a check
that ours leaves the same parameters as torch.optim's after three steps. On CPU
torch.optim runs with `foreach=True` (its fastest there) and as a plain loop; on
cuda with `fused=True` and `foreach=True` (its default there).
"""

from __future__ import annotations

import argparse
import copy
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script

import runtime_shim
from examples.gpt import GPT

SIZES = {
    "gpt 4x256 (5.3M)": dict(vocab_size=4096, block_size=128, n_layer=4, n_embd=256),
    "gpt-2 124M": dict(vocab_size=50304, block_size=1024, n_layer=12, n_embd=768),
}


def _params(init: dict, device: str) -> list[torch.Tensor]:
    torch.manual_seed(0)
    model = GPT(n_head=4, **init).to(device)
    params = [p.detach().clone().requires_grad_(True) for p in model.parameters()]
    for p in params:
        p.grad = torch.randn_like(p) * 1e-2
    return params


def _contestants(device: str) -> dict:
    adam = {"lr": 1e-3, "weight_decay": 0.1}
    sgd = {"lr": 1e-2, "momentum": 0.9}
    if device == "cuda":
        return {
            "AdamW torch fused": (torch.optim.AdamW, adam | {"fused": True}),
            "AdamW torch foreach": (torch.optim.AdamW, adam | {"foreach": True}),
            "AdamW ours": (runtime_shim.AdamW, adam),
            "SGD torch fused": (torch.optim.SGD, sgd | {"fused": True}),
            "SGD torch foreach": (torch.optim.SGD, sgd | {"foreach": True}),
            "SGD ours": (runtime_shim.SGD, sgd),
        }
    return {
        "AdamW torch foreach": (torch.optim.AdamW, adam | {"foreach": True}),
        "AdamW torch loop": (torch.optim.AdamW, adam | {"foreach": False}),
        "AdamW ours": (runtime_shim.AdamW, adam),
        "SGD torch foreach": (torch.optim.SGD, sgd | {"foreach": True}),
        "SGD torch loop": (torch.optim.SGD, sgd | {"foreach": False}),
        "SGD ours": (runtime_shim.SGD, sgd),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=7)
    p.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    args = p.parse_args(argv)
    sync = torch.cuda.synchronize if args.device == "cuda" else (lambda: None)
    print("| parameters | optimizer | ms per step | vs torch's best | max diff |")
    print("|---|---|---|---|---|")
    for size, init in SIZES.items():
        base = _params(init, args.device)
        runs = {}
        for name, (cls, kwargs) in _contestants(args.device).items():
            params = [copy.deepcopy(p) for p in base]
            for q, p in zip(params, base):
                q.grad = p.grad.clone()
            runs[name] = (params, cls(params, **kwargs))
        reference = {}
        for name, (params, opt) in runs.items():  # three steps: the check
            for _ in range(3):
                opt.step()
            reference[name] = [p.detach().clone() for p in params]
        times = {name: [] for name in runs}
        for _ in range(args.rounds):
            for name, (_, opt) in runs.items():
                sync()
                start = time.perf_counter()
                opt.step()
                sync()
                times[name].append((time.perf_counter() - start) * 1e3)
        ms = {name: statistics.median(t) for name, t in times.items()}
        for kind in ("AdamW", "SGD"):
            theirs = [n for n in ms if n.startswith(kind) and "ours" not in n]
            best = min(ms[n] for n in theirs)
            first = reference[theirs[0]]
            for name in (n for n in ms if n.startswith(kind)):
                diff = max(
                    float((a - b).abs().max()) for a, b in zip(reference[name], first)
                )
                print(
                    f"| {size} | {name} | {ms[name]:.2f} | {best / ms[name]:.2f}x"
                    f" | {diff:.1e} |"
                )
    return 0


if __name__ == "__main__":
    sys.exit(main())
