"""Shared test setup: the repo root importable, Triton's CPU interpreter without a GPU.

Runs before any test module is imported, so before anything imports `triton`: Triton
reads `TRITON_INTERPRET` when its kernels are built, and then runs them on CPU tensors.
The C++ kernel cache is runtime_shim's default one on purpose, so reruns are fast.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `import generated.<stem>`, `examples`, `tests.helpers`
    sys.path.insert(0, str(ROOT))

import torch  # noqa: E402  (after sys.path; torch itself does not import triton)

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
