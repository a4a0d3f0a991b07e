"""`pixel_shuffle`, `pixel_unshuffle` and `channel_shuffle` decompose into reshapes and
a permutation, which the next kernel reads through index arithmetic: on the GPU a
super-resolution head's shuffle and GELU are one kernel, where the shuffle was a call
into PyTorch and a second pass. On the CPU pixel shuffles stay PyTorch's
(`decompose.GPU_ONLY`). Each case on both backends against eager (outputs, their
strides, and inputs after the call); no call into PyTorch but those."""

from __future__ import annotations

import pytest
import torch

from tests.compile_helpers import Compiled, compile_source

SOURCE = """
import torch
import torch.nn.functional as F


def shuffle_gelu(x):
    return F.gelu(F.pixel_shuffle(x, 2))


def unshuffle_scale(x):
    return F.pixel_unshuffle(x, 4) * 2


def channels_add(x):
    return F.channel_shuffle(x, 4) + 1


def shuffle_alone(x):
    return F.pixel_shuffle(x, 3)
"""

G = torch.Generator().manual_seed(0)
CASES = {
    "shuffle_gelu": {"x": torch.randn(2, 16, 6, 10, generator=G)},
    "unshuffle_scale": {"x": torch.randn(2, 3, 16, 8, generator=G)},
    "channels_add": {"x": torch.randn(2, 12, 5, 5, generator=G)},
    "shuffle_alone": {"x": torch.randn(1, 18, 4, 7, generator=G)},
}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Compiled]:
    return compile_source(SOURCE, CASES, tmp_path_factory.mktemp("shuffles"))


@pytest.mark.parametrize("name", CASES)
def test_one_kernel(compiled: dict[str, Compiled], name: str) -> None:
    case = compiled[name]
    assert "torch.ops" not in case.cuda_source, case.cuda_source
    assert case.cuda_source.count("_triton.triton_") == 1, case.cuda_source
    pixels = name != "channels_add"
    assert ("torch.ops.aten.pixel_" in case.cpu_source) == pixels, case.cpu_source
    if not pixels:
        assert case.cpu_source.count("_cpp.function(") == 1, case.cpu_source
    for source in (case.cpu_source, case.cuda_source):
        assert "_fallback_" not in source, source
    case.check(CASES[name])
    got, want = case.cpu(**CASES[name]), case.eager(**CASES[name])
    assert got.stride() == want.stride()
