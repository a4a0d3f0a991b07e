"""Give an extern result the memory layout the generated kernels were compiled for."""

from __future__ import annotations

import torch

__all__ = ["as_layout"]


def as_layout(t: torch.Tensor, stride: tuple[int, ...]) -> torch.Tensor:
    """`t` itself when it has `stride` already (the usual case), else a copy that
    has it: attention, say, lays its output out by the backend it picks."""
    if t.stride() == stride:
        return t
    out = torch.empty_strided(t.shape, stride, dtype=t.dtype, device=t.device)
    return out.copy_(t)
