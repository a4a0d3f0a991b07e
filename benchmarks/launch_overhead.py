"""Host cost of one kernel launch on a CUDA device: eager ops, a Triton JIT launch
(`kernel[grid](...)`) and the toy module's variants, in microseconds per call.

    python benchmarks/launch_overhead.py

Each figure is wall-clock time over batches of back-to-back calls, synchronized once
per batch (`common.latency_timer`), so it measures the host side (Python, the launch
API) while the GPU keeps up. A cProfile of the generated module's calls follows, for
where the time goes.
"""

import cProfile
import importlib
import io
import pstats
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script

from benchmarks import common
from runtime_shim.triton_launch import TritonKernel


def per_call_us(fn) -> float:
    """Microseconds per call: benchmarks/common.py's wall-clock latency timer."""
    time_ms, _ = common.latency_timer(False, torch.cuda.synchronize)
    return time_ms(fn) * 1e3


def main() -> int:
    import triton

    from benchmarks.generated import toy
    from examples.toy import ToyModule

    x = torch.randn(2, 4, device="cuda")
    y = torch.empty_like(x)
    jit = importlib.import_module(f"{toy.__package__}.toy_triton").triton_fused_relu_0
    relu = TritonKernel(jit)

    def empty():
        return torch.empty_strided((2, 4), (4, 1), device="cuda")

    def launch_jit():
        return jit[(1,)](x, y, XBLOCK=16, num_warps=2)

    def launch_shim():
        return relu[(1,)](x, y, XBLOCK=16, num_warps=2)

    rows = [
        ("torch.relu(x)", lambda: torch.relu(x)),
        ("torch.empty_strided", empty),
        ("Triton JIT: relu[(1,)](x, y, XBLOCK=16, num_warps=2)", launch_jit),
        ("runtime_shim.TritonKernel: the same", launch_shim),
    ]
    guards, variant = (getattr(toy, name) for name in ("_guards_cuda_0", "_cuda_0"))
    gen = toy.ToyModule().cuda().eval()
    eager = ToyModule().cuda().eval()
    eager.load_state_dict(gen.state_dict())
    with torch.no_grad():
        rows += [
            ("eager ToyModule", lambda: eager(x)),
            ("generated ToyModule", lambda: gen(x)),
            ("generated guards", lambda: guards(gen, x)),
            ("generated variant", lambda: variant(gen, x)),
        ]
        launch_shim()  # compiles, through the JIT
        y.zero_()
        launch_shim()  # the direct launch
        torch.testing.assert_close(y, torch.relu(x))
        torch_launcher = all(hit[-1] is not None for hit in relu.compiled.values())
        print(f"direct launches: {relu.fast}, {len(relu.compiled)} compiled")
        print(f"through torch's launcher (Note [torch's launcher]): {torch_launcher}")
        print(f"triton {triton.__version__}, torch {torch.__version__}")
        for name, fn in rows:
            print(f"{name:55s} {per_call_us(fn):8.1f} us")
        profile = cProfile.Profile()
        profile.enable()
        for _ in range(2000):
            gen(x)
        profile.disable()
        torch.cuda.synchronize()
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(15)
        print(out.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
