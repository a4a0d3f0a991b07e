"""runtime_shim.TensorLayouts: the layouts a variant's kernels assume of parameters
and buffers, checked in one call; after a pass, through torch's C++ check first
(Note [Layouts checked in C++])."""

from __future__ import annotations

import pytest
import torch

from runtime_shim import guards

ROWS = (
    ("self.a.weight", torch.float32, (4, 3), (3, 1)),
    ("self.a.bias", torch.float32, (4,), (1,)),
)


def tensors() -> list[torch.Tensor]:
    return [torch.nn.Parameter(torch.randn(4, 3)), torch.zeros(4)]


def swap_data(index: int, make):
    """The same tensor object with other metadata (as `module.to(...)` does)."""

    def change(ts: list[torch.Tensor]) -> None:
        ts[index].data = make(ts[index].data)

    return change


def replace(ts: list[torch.Tensor]) -> None:
    ts[0] = ts[0].detach().to("meta")


CHANGES = {
    "dtype": (swap_data(1, torch.Tensor.double), "self.a.bias.dtype == torch.float32"),
    "shape": (swap_data(1, lambda t: t[:2]), "self.a.bias.shape == (4,)"),
    "strides": (swap_data(0, lambda t: t.t().contiguous().t()),
                "self.a.weight.stride() == (3, 1)"),
    "device": (replace, "self.a.weight.is_cpu"),
}  # fmt: skip


@pytest.fixture(params=["torch's check", "python alone"])
def layouts(request, monkeypatch: pytest.MonkeyPatch) -> guards.TensorLayouts:
    if request.param == "python alone":
        monkeypatch.setattr(guards, "_snapshot", lambda tensors: None)
    return guards.TensorLayouts("cpu", ROWS)


@pytest.mark.parametrize("change", CHANGES)
def test_a_change_after_passing_calls_fails(change, layouts) -> None:
    make, text = CHANGES[change]
    ts = tensors()
    for _ in range(3):
        assert layouts.mismatch(*ts) is None
    make(ts)
    assert layouts.mismatch(*ts) == text
    assert layouts.mismatch(*ts) == text  # and keeps failing


def test_passes_again_once_restored(layouts) -> None:
    ts = tensors()
    assert layouts.mismatch(*ts) is None
    original = ts[1].data
    ts[1].data = original.double()
    assert layouts.mismatch(*ts) is not None
    ts[1].data = original
    assert layouts.mismatch(*ts) is None


def test_later_calls_ask_torchs_check_first(monkeypatch: pytest.MonkeyPatch) -> None:
    layouts = guards.TensorLayouts("cpu", ROWS)
    ts = tensors()
    assert layouts.mismatch(*ts) is None
    if layouts.snapshot is None:
        pytest.skip("this torch has no torch._C._dynamo.guards.TensorGuards")
    python_checks = []
    monkeypatch.setattr(layouts, "check", lambda t: python_checks.append(t))
    for _ in range(3):
        assert layouts.mismatch(*ts) is None
    assert python_checks == []


def test_snapshots_that_do_not_last_stop_being_taken() -> None:
    """Calls alternating between two states that both pass (requires_grad on and
    off: the C++ check compares it, the table does not) end in Python checks."""
    layouts = guards.TensorLayouts("cpu", ROWS)
    ts = tensors()
    for i in range(2 * guards.RETAKES + 4):
        ts[0].requires_grad_(i % 2 == 0)
        assert layouts.mismatch(*ts) is None
    assert layouts.retakes == 0
