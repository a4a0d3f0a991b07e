"""Data movement in kernels (Note [Data movement in kernels] in passes/schedule.py).

cat, stack, pad, roll and flip, each read by a pointwise consumer so that the moved
tensor is never written: compared with eager on both backends, with every op of
every variant in generated kernels (no extern call). The table covers each op
along every dimension, more than one dimension at once, pieces of length 1,
negative shifts and pads (cropping), inputs that are views (a transpose, a
slice, chunks of one tensor), mixed dtypes promoted by cat, and bf16.
"""

from __future__ import annotations

import re

import pytest
import torch

from tests.compile_helpers import compile_source

SOURCE = """
import torch
import torch.nn.functional as F


def cat_dims(a, b):
    return (
        torch.cat([a, b], 0).relu(),
        torch.cat([a, b[:2].flip(1)[:, :, :3], a[:, :, :1]], 2) * 2,
        torch.cat([a.transpose(1, 2), b.transpose(1, 2)], 0) + 1,
    )


def cat_rotate_half(x, cos, sin):
    x1, x2 = x.chunk(2, -1)
    return x * cos + torch.cat((-x2, x1), -1) * sin


def stacked(a, b, c):
    return torch.stack([a, b, c], 1) * 0.5, torch.stack([a, b], -1).exp()


def padded(x):
    return (
        F.pad(x, (1, 2)) + 1,
        F.pad(x, (0, 0, 2, 1), value=-3.5) * 2,
        F.pad(x, (-1, 2, 1, -2)).abs(),
        F.pad(x, (-1, -2)) * 3,  # cropping only: one piece, everywhere
    )


def rolled(x):
    return torch.roll(x, 2, 1) + 1, torch.roll(x, (-3, 1), (1, 2)) * x


def flipped(x):
    return x.flip(0) + x, x.flip((1, 2)).neg()


def promoted(a, i):
    return torch.cat([a, i], 1) * 2


def computed_pieces(x, w):
    x1, x2 = x.chunk(2, -1)
    shared = x1.exp()
    return (
        torch.cat(((x2 * w[:4]).sigmoid(), shared, x1 - 1), -1) * 2,
        F.pad((x + 1).abs(), (2, 1)),
        torch.roll(x * w, 3, -1),
        shared.sum(-1),
    )


def one_piece(x):
    # `torch.cat(states)` of a list that holds one layer's: a copy, returned
    return torch.cat([x.amax(0, keepdim=True)], 0), torch.cat([x * 2], 1)
"""

INPUTS = {
    "cat_dims": {"a": torch.randn(2, 3, 5), "b": torch.randn(4, 3, 5)},
    "cat_rotate_half": {
        "x": torch.randn(2, 6, 8),
        "cos": torch.randn(6, 8),
        "sin": torch.randn(6, 8),
    },
    "stacked": {"a": torch.randn(3, 4), "b": torch.randn(3, 4), "c": torch.randn(3, 4)},
    "padded": {"x": torch.randn(2, 5, 6)},
    "rolled": {"x": torch.randn(2, 7, 5)},
    "flipped": {"x": torch.randn(3, 4, 5)},
    "promoted": {"a": torch.randn(3, 2), "i": torch.randint(-5, 5, (3, 4))},
    "computed_pieces": {"x": torch.randn(3, 5, 8), "w": torch.randn(8)},
    "one_piece": {"x": torch.randn(4, 5)},
}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    return compile_source(SOURCE, INPUTS, tmp_path_factory.mktemp("movement"))


@pytest.mark.parametrize("name", list(INPUTS))
def test_movement_in_kernels(compiled, name: str) -> None:
    case = compiled[name]
    case.check(INPUTS[name])
    counts = re.findall(r"(\d+) kernels?, (\d+) extern calls?", case.module.__doc__)
    assert counts and all(e == "0" for _, e in counts), case.module.__doc__


def test_moved_values_are_never_written(compiled) -> None:
    """cat then relu: one kernel reading a and b, writing only the relu."""
    source = compiled["cat_dims"].cuda_source
    assert "cat" not in re.findall(r"(\w+) = empty\(", source)


def test_pieces_computed_where_they_are_read(compiled) -> None:
    """Pointwise values read only by data movement (`sigmoid(x2 * w)`, `x + 1`)
    are computed in its kernel at the positions it reads; one also read by a
    sum (`exp(x1)`) is computed in both kernels, each reading x, and never
    written (passes/rematerialize.py)."""
    for side in ("cpu_source", "cuda_source"):
        source = getattr(compiled["computed_pieces"], side)
        written = re.findall(r"(\w+) = empty\(", source)
        assert not {"sigmoid", "abs", "mul", "add", "sub", "exp"} & set(written)


BF16_SOURCE = """
import torch


def rotate_half(x):
    x1, x2 = x.chunk(2, -1)
    return torch.cat(((-x2.float() * 1.5).to(torch.bfloat16), x1), -1) + x
"""


def test_bf16_cat(tmp_path) -> None:
    """A piece computed in f32 and rounded to bf16 where it is read."""
    x = torch.randn(4, 6, 16).to(torch.bfloat16)
    case = compile_source(BF16_SOURCE, {"rotate_half": {"x": x}}, tmp_path)
    case["rotate_half"].check({"x": x})
