"""What a training variant's `torch.autograd.Function` calls."""

from __future__ import annotations

import torch

from runtime_shim.layout import as_layout

__all__ = ["take_saved", "tangents"]


def take_saved(ctx) -> list[torch.Tensor]:
    """The tensors `ctx` saved, as a list the generated backward empties, and the
    node's own references to them released where autograd allows it (no
    `retain_graph`): each is then freed after the backward's last use of it, as
    torch.compile's backward frees them, not when the backward returns."""
    saved = list(ctx.saved_tensors)
    release = getattr(ctx, "maybe_clear_saved_tensors", None)
    if release is not None:
        release()
    return saved


def tangents(grads: tuple, layouts: tuple) -> tuple[torch.Tensor, ...]:
    """The outputs' gradients a backward takes, each in the layout it was traced
    with, `(shape, stride, dtype)`: one autograd passes in of another layout is
    copied to it (`.sum().backward()` passes an expanded one), and one it passes
    as None (an output the loss does not read) is zeros, on the others' device."""
    out = []
    for g, (shape, stride, dtype) in zip(grads, layouts):
        if g is None:
            device = next(other.device for other in grads if other is not None)
            g = torch.empty_strided(shape, stride, dtype=dtype, device=device).zero_()
        out.append(as_layout(g, stride))
    return tuple(out)
