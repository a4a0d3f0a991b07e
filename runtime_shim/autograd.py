"""What a training variant's `torch.autograd.Function` calls."""

from __future__ import annotations

import torch

__all__ = ["take_saved"]


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
