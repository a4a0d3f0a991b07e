"""Batch norms that normalize by the batch's own statistics and write nothing:
instance norms (functional and modules, with and without affine weights, over 1-3
spatial dimensions) and batch norms with `track_running_stats=False`, in train and
eval mode. Each decomposes into kernels (Note [Batch norm in eval] in
passes/decompose.py): no call into PyTorch on either backend, one kernel where
nothing else is computed, and outputs and inputs as eager's after the call. An
instance norm that updates running statistics still writes them (a case of
tests/control_flow/test_call_time_semantics.py)."""

from __future__ import annotations

import pytest
import torch

from tests.compile_helpers import Compiled, compile_source

SOURCE = """
import torch
import torch.nn.functional as F
from torch import nn


def instance_relu(x):
    return F.relu(F.instance_norm(x, eps=1e-5))


def instance_affine(x, w, b):
    return F.instance_norm(x, weight=w, bias=b, eps=1e-3)


def instance_1d(x):
    return F.instance_norm(x) * 2


def instance_3d(x):
    return F.instance_norm(x)


class InstanceModule(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.InstanceNorm2d(8, affine=True)
        with torch.no_grad():
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.5, 0.5)

    def forward(self, x):
        return torch.sigmoid(self.norm(x))


class BatchNoStats(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.BatchNorm2d(8, track_running_stats=False)

    def forward(self, x):
        return self.norm(x) + x


class BatchNoStatsEval(nn.Module):
    def __init__(self):
        super().__init__()
        self.norm = nn.BatchNorm1d(8, track_running_stats=False).eval()

    def forward(self, x):
        return self.norm(x)
"""

G = torch.Generator().manual_seed(0)
X = torch.randn(4, 8, 12, 10, generator=G) * 3 + 1
CASES = {
    "instance_relu": {"x": X},
    "instance_affine": {"x": X, "w": torch.randn(8, generator=G), "b": torch.randn(8)},
    "instance_1d": {"x": torch.randn(3, 8, 40, generator=G)},
    "instance_3d": {"x": torch.randn(2, 4, 5, 6, 7, generator=G)},
    "InstanceModule": {"x": X},
    "BatchNoStats": {"x": X},
    "BatchNoStatsEval": {"x": torch.randn(16, 8, generator=G)},
}
ALONE = ("instance_3d", "BatchNoStatsEval")  # nothing but the norm: one kernel


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Compiled]:
    return compile_source(SOURCE, CASES, tmp_path_factory.mktemp("norms"))


@pytest.mark.parametrize("name", CASES)
def test_in_kernels(compiled: dict[str, Compiled], name: str) -> None:
    case = compiled[name]
    for source in (case.cpu_source, case.cuda_source):
        assert "torch.ops" not in source and "_fallback_" not in source, source
    if name in ALONE:
        assert case.cpu_source.count("_cpp.function(") == 1, case.cpu_source
    case.check(CASES[name])
