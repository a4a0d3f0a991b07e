"""A circular pad as one gather at wrapped positions (`trace.CircularPadAsGather`).

Every pad of one and of two dimensions from -4 to 7 on each side, cropping and
wrapping, is compared with eager's `F.pad(..., mode="circular")`: the gather
gives the same elements wherever eager pads, and it is not used (eager's pad
runs, and raises as eager does) wherever eager refuses. End to end, circular
pads are compiled in tests/codegen/test_computed_indices.py.
"""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from transpiler.frontend.trace import _circular_pad

X = torch.randn(2, 3, 6, 7, generator=torch.Generator().manual_seed(0))


def eager(x: torch.Tensor, pad: tuple) -> torch.Tensor | None:
    try:
        return F.pad(x, pad, mode="circular")
    except (RuntimeError, NotImplementedError, ValueError):
        return None


PADS = [
    *((X[0], pad) for pad in itertools.product(range(-4, 8), repeat=2)),
    *((X, pad) for pad in itertools.product((-3, -1, 0, 2, 6), repeat=4)),
]


@pytest.mark.parametrize("i", range(0, len(PADS), 64))
def test_circular_pads_match_eager(i: int) -> None:
    used = 0
    for x, pad in PADS[i : i + 64]:
        mine, theirs = _circular_pad(x, pad), eager(x, pad)
        if mine is None:
            continue
        used += 1
        assert theirs is not None, f"{pad}: eager refuses it"
        assert torch.equal(mine, theirs), pad
    assert used, "no pad of the chunk was compiled"
