"""What the training tests check of a step: the generated module's against
eager's, from the same weights, inputs and seed."""

from __future__ import annotations

import torch


def leaves(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    return [t for v in value for t in leaves(v)]


def assert_step_matches(
    name: str, want, got, theirs: dict, inputs: dict, eager_mod=None, mine_mod=None
) -> None:
    """The outputs `got` (from `inputs`) equal `want` (eager's, from `theirs`, the
    same values); then, after a backward of both from the same random gradients
    of the differentiable outputs, the gradients of the inputs and (of modules)
    of every parameter, the parameters and the buffers."""
    want_t, got_t = leaves(want), leaves(got)
    assert len(want_t) == len(got_t)
    for g, w in zip(got_t, want_t):
        torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5)
    differentiable = [(g, w) for g, w in zip(got_t, want_t) if w.requires_grad]
    assert differentiable and all(g.requires_grad for g, _ in differentiable)
    gen = torch.Generator().manual_seed(2)
    tangents = [
        torch.randn(w.shape, generator=gen).to(w.device) for _, w in differentiable
    ]
    torch.autograd.backward([w for _, w in differentiable], tangents)
    torch.autograd.backward([g for g, _ in differentiable], tangents)
    for n, t in inputs.items():
        if t.requires_grad:
            torch.testing.assert_close(t.grad, theirs[n].grad, rtol=1e-4, atol=1e-5)
    if mine_mod is not None:
        for (p, a), (_, b) in zip(
            mine_mod.named_parameters(), eager_mod.named_parameters()
        ):
            assert a.grad is not None, f"{name}: {p} has no gradient"
            torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5, msg=p)
            torch.testing.assert_close(a, b)
        for (p, a), (_, b) in zip(mine_mod.named_buffers(), eager_mod.named_buffers()):
            torch.testing.assert_close(a, b, msg=p)
