"""A computed value read through a view that moves its positions is computed
where it is read, not written and read back (Note [Places] in passes/places.py).

A table of real models' patterns: a transpose of a biased activation, a head
split of a scaled projection, Swin's cyclic shift and window partition (a roll
read through a split and a permute), diffusers' timestep embedding (a cat of the
slices of a cat), DETR's box conversion (a stack of computed columns), a value
added to its own transpose, a reduction over a transposed value, a GLU over the
halves of a computed value, a pad read transposed, a gate broadcast over the
positions of its channel, literal tables (`torch.tensor([...])`: a grey
conversion's weights, ImageNet's means and deviations), each element chosen by
position where it is read. Each is checked against eager (outputs and inputs
after the call) on both backends and counted in kernels: one kernel each, and no
call into PyTorch.

Where computing it again would cost more, the value is written (two kernels) and
still matches: a flat view's steps that cross rows of its base (no affine map of
coordinates), and on CPUs a value read at more positions than it has (a value
added to its transpose computes it twice; overlapping slices).
"""

from __future__ import annotations

import re

import pytest
import torch

from tests.compile_helpers import compile_source

SOURCE = """
import math

import torch
import torch.nn.functional as F


def transpose_act(x, b):
    return torch.relu(x + b).transpose(1, 2).contiguous()


def head_split(x):
    return (x * 0.125).view(2, 6, 4, 8).permute(0, 2, 1, 3).contiguous()


def swin_partition(x):
    B, H, W, C = x.shape
    ws = 3
    x = torch.roll(x, shifts=(-1, -1), dims=(1, 2))
    x = x.view(B, H // ws, ws, W // ws, ws, C)
    return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, ws * ws, C)


def timestep_embedding(t):
    half = 6
    exponent = -math.log(10000) * torch.arange(half, dtype=torch.float32) / half
    emb = t[:, None].float() * torch.exp(exponent)[None, :]
    emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=-1)
    return torch.cat([emb[:, half:], emb[:, :half]], dim=-1)


def box_corners(x):
    x_c, y_c, w, h = x.unbind(-1)
    b = [(x_c - 0.5 * w), (y_c - 0.5 * h), (x_c + 0.5 * w), (y_c + 0.5 * h)]
    return torch.stack(b, dim=-1)


def plus_transpose(x):
    y = torch.tanh(x) * 2.0
    return y + y.t()


def transposed_sum(x):
    return torch.exp(x - 1.0).t().sum(-1)


def glu_of_computed(x, w):
    a, b = (x * w).chunk(2, dim=-1)
    return a * torch.sigmoid(b)


def pad_transposed(x):
    return F.pad(torch.sin(x), (1, 2)).transpose(-1, -2).contiguous() + 1.0


def grey(x):
    w = torch.tensor([0.299, 0.587, 0.114])
    return (x * w[:, None, None]).sum(0)


def imagenet_normalize(x):
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    return (x - mean) / std


def flat_steps(x):
    return (x * 2.0).view(-1)[::5] + 1.0


def broadcast_gate(x, s):
    return x * torch.sigmoid(s * 2.0)[:, :, None, None]


def overlapping(x):
    y = torch.exp(x)
    return y[:, :-1] + y[:, 1:]
"""

g = torch.Generator().manual_seed(0)


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g)


CASES = {
    "transpose_act": {"x": randn(3, 5, 7), "b": randn(7)},
    "head_split": {"x": randn(2, 24, 8)},
    "swin_partition": {"x": randn(2, 6, 6, 4)},
    "timestep_embedding": {"t": torch.randint(0, 1000, (5,), generator=g)},
    "box_corners": {"x": randn(9, 4)},
    "plus_transpose": {"x": randn(6, 6)},
    "transposed_sum": {"x": randn(5, 12)},
    "glu_of_computed": {"x": randn(4, 10), "w": randn(10)},
    "pad_transposed": {"x": randn(3, 4, 5)},
    "grey": {"x": randn(3, 5, 6)},
    "imagenet_normalize": {"x": randn(2, 3, 4, 5)},
    "flat_steps": {"x": randn(4, 6)},
    "broadcast_gate": {"x": randn(2, 3, 4, 4), "s": randn(2, 3)},
    "overlapping": {"x": randn(3, 8)},
}
# written on both backends: the view's steps cross the rows of its base
WRITTEN = {"flat_steps"}
# written on CPUs only: computed more than once per element (Note [Windows of
# computed values] in passes/schedule.py)
WRITTEN_ON_CPU = {"plus_transpose", "overlapping"}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory):
    return compile_source(SOURCE, CASES, tmp_path_factory.mktemp("views"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager(compiled, name: str) -> None:
    compiled[name].check(CASES[name])


@pytest.mark.parametrize("name", sorted(CASES))
def test_kernels(compiled, name: str) -> None:
    for source, cpu in (
        (compiled[name].cpu_source, True),
        (compiled[name].cuda_source, False),
    ):
        assert "torch.ops" not in source and "extern" not in source, source
        launches = re.findall(r"_cpp\.function\(|triton_\w+\[", source)
        written = name in WRITTEN or (cpu and name in WRITTEN_ON_CPU)
        assert len(launches) == (2 if written else 1), source
