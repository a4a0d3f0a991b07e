"""Matmul epilogues under `transpile --autotune`, end to end without a GPU.

A linear layer and the pointwise kernel reading its result become one Triton matmul
kernel when a tile config is timed faster than cuBLAS plus that kernel (Note [Matmul
epilogues]). The kernels run in Triton's interpreter on CPU tensors; only the timer
is fake. f16, because the interpreter's `tl.dot` mishandles bf16.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
import torch

from tests.compile_helpers import import_generated, unique_name
from transpiler.api import build
from transpiler.autotune import MATMUL_CONFIGS, Bench, Candidate
from transpiler.ir.program import MatmulConfig
from transpiler.options import Options, Target, TensorSpec, Variant

SOURCE = """\
import torch
import torch.nn.functional as F


def mlp(x, w1, b1, w2, b2):
    h = F.gelu(F.linear(x, w1, b1))  # exact: cuBLAS's epilogue GELU is the tanh form
    return x + F.linear(h, w2, b2)


def returned(x, w1):
    y = F.linear(x, w1)
    return y, torch.relu(y)
"""
F16 = torch.float16
M, D, H = 80, 48, 96  # rows (2 x 40), model width, hidden width
MLP = (
    ("x", TensorSpec(F16, (2, 40, D))),
    ("w1", TensorSpec(F16, (H, D))),
    ("b1", TensorSpec(F16, (H,))),
    ("w2", TensorSpec(F16, (D, H))),
    ("b2", TensorSpec(F16, (D,))),
)
RETURNED = MLP[:2]
WINNER = MatmulConfig(64, 64, 32, 8, 4, 3)


@pytest.fixture(autouse=True)
def interpreter() -> None:
    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("TRITON_INTERPRET is not 1 (set by tests/conftest.py without GPU)")


class Timer:
    """cuBLAS plus the consumer takes `cublas` ms, the WINNER tile `fast`, other
    tiles 9 ms; elementwise launch configs all tie, so they keep the heuristic."""

    def __init__(self, cublas: float, fast: float):
        self.cublas, self.fast = cublas, fast
        self.timed: list[Candidate] = []

    def __call__(self, candidate: Candidate, launch) -> float:
        self.timed.append(candidate)
        if candidate.kernel.startswith("linear + "):
            return self.cublas
        if isinstance(candidate.config, MatmulConfig):
            return self.fast if candidate.config == WINNER else 9.0
        return 1.0


def transpile(root: Path, name: str, inputs, timer: Timer | None):
    stem = unique_name("mm")
    (root / f"{stem}.py").write_text(SOURCE)
    options = Options(
        targets=(Target(f"{stem}.py::{name}", (Variant(inputs, "cuda"),)),),
        root=root,
        autotune=timer is not None,
    )
    log: list[str] = []
    bench = None if timer is None else Bench("cpu", "Test GPU", timer, log=log.append)
    files = build(options, bench)
    module = import_generated(files, root, stem)
    return files[f"{stem}.py"], files[f"{stem}_triton.py"], module, log


def fitting(n: int) -> list[MatmulConfig]:
    """The tile configs for an [80, n] result (n = 48 or 96): tiles no larger than
    the next powers of two of its sides, 128 x 64 or 128 x 128."""
    side = {48: 64, 96: 128}[n]
    return [c for c in MATMUL_CONFIGS if c.block_m <= 128 and c.block_n <= side]


def inputs(seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, 40, D, generator=g)
    w1, b1 = torch.randn(H, D, generator=g) / D**0.5, torch.randn(H, generator=g)
    w2, b2 = torch.randn(D, H, generator=g) / H**0.5, torch.randn(D, generator=g)
    return [t.to(F16) for t in (x, w1, b1, w2, b2)]


def eager(x, w1, b1, w2, b2) -> torch.Tensor:
    """The source's arithmetic in f32, the way the f16 code rounds: each linear's
    result rounded to f16, the epilogue computed in f32 and rounded once."""
    lin1 = (x.float() @ w1.float().T).half().float() + b1.float()
    h = torch.nn.functional.gelu(lin1).half()
    lin2 = (h.float() @ w2.float().T).half().float() + b2.float()
    return (x.float() + lin2).half()


def test_a_faster_tile_replaces_linear_and_its_epilogue(tmp_path: Path) -> None:
    timer = Timer(cublas=1.0, fast=0.5)
    wrapper, kernels, module, log = transpile(tmp_path, "mlp", MLP, timer)

    assert "torch.nn.functional.linear" not in wrapper
    launches = re.findall(r"_triton\.(triton_matmul_\w+)\[\((\d+),\)\]", wrapper)
    assert [grid for _, grid in launches] == ["4", "2"]  # ceil(80/64) x ceil(n/64)
    one_line = " ".join(wrapper.split())
    assert "BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, GROUP_M=8, num_warps=4" in one_line
    for (name, _), n in zip(launches, (H, D)):
        head = kernels[: kernels.index(f"def {name}(")].splitlines()
        assert head[-4:-1] == [
            f"# autotuned on Test GPU, {len(fitting(n))} tile configs timed:",
            "#   BLOCK_M=64, BLOCK_N=64, BLOCK_K=32, num_warps=4, num_stages=3:"
            " 0.500 ms (chosen)",
            f"#   cuBLAS linear, then {name.replace('matmul', 'fused')}:" " 1.000 ms",
        ]
    assert "acc = tl.dot(a, w, acc)" in kernels
    assert kernels.count("acc.to(tl.float16).to(tl.float32)") == 2
    assert sum("(chosen)" in line for line in log) == 2
    # each linear: cuBLAS once, every tile config that fits once
    assert sum(c.kernel.startswith("linear + ") for c in timer.timed) == 2
    assert sum(isinstance(c.config, MatmulConfig) for c in timer.timed) == len(
        fitting(H)
    ) + len(fitting(D))

    args = inputs()
    got = module._cuda_0(*args)
    torch.testing.assert_close(got, eager(*args), atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(
        got, module._source.mlp(*(a.float() for a in args)).half(), atol=5e-2, rtol=5e-2
    )


def test_cublas_stays_unless_a_tile_beats_it_by_the_margin(tmp_path: Path) -> None:
    wrapper, kernels, module, log = transpile(
        tmp_path, "mlp", MLP, Timer(cublas=1.0, fast=0.95)
    )
    assert wrapper.count("torch.nn.functional.linear(") == 2
    assert "triton_matmul" not in wrapper + kernels
    assert sum("(kept cuBLAS)" in line for line in log) == 2
    args = inputs()
    torch.testing.assert_close(
        module._cuda_0(*args), eager(*args), atol=2e-2, rtol=2e-2
    )


def test_without_autotune_linear_stays_cublas(tmp_path: Path) -> None:
    wrapper, kernels, _, _ = transpile(tmp_path, "mlp", MLP, None)
    assert wrapper.count("torch.nn.functional.linear(") == 2
    assert "tl.dot" not in kernels


def test_a_returned_product_is_not_fused(tmp_path: Path) -> None:
    """`y` is returned as well as read by the relu kernel: it must reach memory."""
    timer = Timer(cublas=1.0, fast=0.1)
    wrapper, kernels, _, _ = transpile(tmp_path, "returned", RETURNED, timer)
    assert "torch.nn.functional.linear(" in wrapper
    assert "tl.dot" not in kernels
    assert not any(isinstance(c.config, MatmulConfig) for c in timer.timed)
