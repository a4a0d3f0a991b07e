"""Host cost of one kernel launch on a CUDA device: eager ops, a Triton JIT launch
(`kernel[grid](...)`) and the toy module's variants, in microseconds per call.

    python benchmarks/launch_overhead.py

Each figure is wall-clock time over many back-to-back calls with one synchronize at
the end, so it measures the host side (Python, the launch API) while the GPU keeps up.
A cProfile of the Triton launches follows, for where the time goes.
"""

import cProfile
import io
import pstats
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def per_call_us(fn, n: int = 2000) -> float:
    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            fn()
        torch.cuda.synchronize()
        best = min(best, (time.perf_counter() - start) / n * 1e6)
    return best


def main() -> int:
    import triton

    from benchmarks.generated import toy
    from examples.toy import ToyModule

    x = torch.randn(2, 4, device="cuda")
    y = torch.empty_like(x)
    relu = toy._triton.triton_fused_relu_0  # imports the Triton module

    def empty():
        return torch.empty_strided((2, 4), (4, 1), device="cuda")

    def launch():
        return relu[(1,)](x, y, XBLOCK=16, num_warps=2)

    rows = [
        ("torch.relu(x)", lambda: torch.relu(x)),
        ("torch.empty_strided", empty),
        ("triton relu[(1,)](x, y, XBLOCK=16, num_warps=2)", launch),
    ]
    compiled = relu[(1,)](x, y, XBLOCK=16, num_warps=2)
    if compiled is not None and hasattr(compiled, "__getitem__"):
        runner = compiled[(1, 1, 1)]
        rows.append(("compiled[(1,1,1)](x, y, 16)", lambda: runner(x, y, 16)))
    gen = toy.ToyModule().cuda().eval()
    eager = ToyModule().cuda().eval()
    eager.load_state_dict(gen.state_dict())
    with torch.no_grad():
        rows += [
            ("eager ToyModule", lambda: eager(x)),
            ("generated ToyModule", lambda: gen(x)),
            ("generated guards", lambda: toy._guards_cuda_1(gen, x)),
            ("generated variant", lambda: toy._cuda_1(gen, x)),
        ]
        print(f"triton {triton.__version__}, torch {torch.__version__}")
        for name, fn in rows:
            print(f"{name:55s} {per_call_us(fn):8.1f} us")
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(2000):
            relu[(1,)](x, y, XBLOCK=16, num_warps=2)
        profile.disable()
        torch.cuda.synchronize()
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(15)
        print(out.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
