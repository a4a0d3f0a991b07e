"""runtime_shim.SeenTensors: a guard function's tensor inputs, as on the last call
that passed their checks, compared in one C++ call (Note [Inputs seen before]).
It may only say "the same" where every Python check of the inputs would pass."""

from __future__ import annotations

import pytest
import torch

from runtime_shim import guards


def inputs() -> list[torch.Tensor]:
    return [torch.randn(4, 8), torch.arange(3), torch.randn(2, 1, 5)]


def replace(index: int, make):
    def change(ts: list) -> None:
        ts[index] = make(ts[index])

    return change


class Marked(torch.Tensor):
    pass


# each: a change of one input that a guard function's checks would see
CHANGES = {
    "dtype": replace(0, torch.Tensor.double),
    "integer dtype": replace(1, lambda t: t.int()),
    "shape": replace(0, lambda t: torch.randn(4, 9)),
    "rank": replace(0, lambda t: torch.randn(4, 8, 1)),
    "strides": replace(0, lambda t: torch.randn(8, 4).t()),
    "a slice": replace(0, lambda t: torch.randn(4, 16)[:, ::2]),
    "device": replace(2, lambda t: t.to("meta")),
    "requires grad": replace(0, lambda t: t.clone().requires_grad_()),
    "subclass": replace(0, lambda t: t.as_subclass(Marked)),
    "not a tensor": replace(1, lambda t: [0, 1, 2]),
    "a number": replace(1, lambda t: 3),
}


@pytest.mark.parametrize("change", CHANGES)
def test_a_change_is_not_the_same(change) -> None:
    seen = guards.SeenTensors("cpu")
    ts = inputs()
    assert not seen.same(*ts)  # nothing seen yet
    seen.seen(*ts)
    if seen.last is None:
        pytest.skip("this torch has no torch._C._dynamo.guards.TensorGuards")
    for _ in range(3):
        assert seen.same(*inputs())  # new tensors, the same metadata
    ts = inputs()
    CHANGES[change](ts)
    assert not seen.same(*ts)


def test_same_only_where_the_checks_would_pass() -> None:
    """A sweep of inputs against one seen: `same` implies dtype, shape,
    contiguity and device equal to the seen ones (what the checks compare)."""
    seen = guards.SeenTensors("cpu")
    base = torch.randn(3, 4)
    seen.seen(base)
    if seen.last is None:
        pytest.skip("this torch has no torch._C._dynamo.guards.TensorGuards")
    candidates = [
        torch.randn(3, 4),
        torch.randn(4, 3).t(),
        torch.randn(3, 8)[:, :4],
        torch.randn(3, 4, dtype=torch.float64),
        torch.randn(3, 4).half(),
        torch.randn(12).view(3, 4),
        torch.randn(1, 3, 4)[0],
        torch.randn(2, 3, 4)[1],
        torch.randn(3, 1, 4)[:, 0],
        torch.randn(3, 4).expand(3, 4),
        torch.randn(1, 4).expand(3, 4),
        torch.empty(3, 4, device="meta"),
    ]
    for t in candidates:
        if seen.same(t):
            assert t.dtype == base.dtype and t.shape == base.shape, t
            assert t.is_contiguous() and t.is_cpu, t


def test_without_torchs_check_nothing_is_the_same(monkeypatch) -> None:
    monkeypatch.setattr(guards, "_snapshot", lambda tensors: None)
    seen = guards.SeenTensors("cpu")
    ts = inputs()
    seen.seen(*ts)
    assert not seen.same(*ts)


def test_stops_taking_snapshots_that_do_not_last() -> None:
    """Shapes that change on every call: after `RETAKES` snapshots, none is kept
    (each call would ask it in vain)."""
    seen = guards.SeenTensors("cpu")
    for n in range(guards.RETAKES):
        t = torch.randn(n + 1)
        assert not seen.same(t)
        seen.seen(t)
        if seen.last is None:
            pytest.skip("this torch has no torch._C._dynamo.guards.TensorGuards")
        assert seen.same(torch.randn(n + 1))
    seen.seen(torch.randn(100))
    assert seen.last is None
    assert not seen.same(torch.randn(100))


def test_on_a_gpu_the_current_device_is_kept(monkeypatch) -> None:
    """A CUDA variant launches on the current device: a snapshot taken with one
    current device does not pass under another."""
    current = [0]
    monkeypatch.setattr(torch.cuda, "current_device", lambda: current[0])
    seen = guards.SeenTensors("cuda")
    ts = inputs()
    seen.seen(*ts)
    if seen.last is None:
        pytest.skip("this torch has no torch._C._dynamo.guards.TensorGuards")
    assert seen.same(*inputs())
    current[0] = 1
    assert not seen.same(*inputs())
