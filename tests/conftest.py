"""Shared test setup: the repo root importable, Triton's CPU interpreter without a GPU.

Runs before any test module is imported, so before anything imports `triton`: Triton
reads `TRITON_INTERPRET` when its kernels are built, and then runs them on CPU tensors.
The C++ kernel cache is runtime_shim's default one on purpose, so reruns are fast.

`gpu_bf16_rounding` (every test): Triton's CPU interpreter converts f32 to bf16 by
cutting off the low 16 bits (`InterpreterBuilder.cast_impl` passes no rounding mode,
whatever `fp_downcast_rounding` says), where a GPU (`cvt.rn.bf16.f32`, what
`x.to(tl.bfloat16)` compiles to) rounds to nearest even, as torch does. The fixture
makes the interpreter convert as the GPU does, so bf16 results compare exactly with
eager, and a kernel that forgets to round still fails.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `import generated.<stem>`, `examples`, `tests.helpers`
    sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402
import torch  # noqa: E402  (after sys.path; torch itself does not import triton)

from tests.devices import REAL_GPU, interpreter_rounds_like_gpu  # noqa: E402

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True, scope="session")
def f32_without_tf32():
    """On a real GPU, float32 means float32, as the CPU references compute it:
    cuDNN's default TF32 convolutions (and TF32 matmuls where enabled) round
    operands to 10 mantissa bits."""
    if not REAL_GPU:
        yield
        return
    cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    saved = matmul.allow_tf32
    matmul.allow_tf32 = False
    with cudnn.flags(
        enabled=cudnn.enabled,
        benchmark=cudnn.benchmark,
        deterministic=cudnn.deterministic,
        allow_tf32=False,
    ):
        yield
    matmul.allow_tf32 = saved


@pytest.fixture(autouse=True, scope="session")
def gpu_bf16_rounding():
    """In Triton's interpreter, f32 -> bf16 rounds as a GPU does (see above)."""
    with interpreter_rounds_like_gpu():
        yield
