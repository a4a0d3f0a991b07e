"""`helpers.check_call` fails when a "generated" callable does not do what eager does.

Each fake below is a hand-written stand-in for generated code: one that mutates like
eager passes; one that forgets (or adds) an in-place update of an input, a buffer, a
parameter or a plain attribute fails, and the failure names what differs.
"""

from __future__ import annotations

import functools
import types

import pytest
import torch
from torch import nn

from tests.compile_helpers import Compiled
from tests.helpers import check_call

X = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))


def bumps_input(x):
    x.add_(1.0)
    return x * 2


def forgets_input_update(x):
    return (x + 1.0) * 2


def writes_input(x):
    y = bumps_input(x)
    x.sub_(1.0)  # a stray write: eager leaves x as `bumps_input` did
    return y


def test_same_in_place_update_passes() -> None:
    out = check_call(bumps_input, bumps_input, {"x": X}, where="f")
    torch.testing.assert_close(out, (X + 1) * 2)


def test_caller_inputs_are_not_touched() -> None:
    x = X.clone()
    check_call(bumps_input, bumps_input, {"x": x})
    assert torch.equal(x, X)


@pytest.mark.parametrize("fake", [forgets_input_update, writes_input])
def test_input_updated_otherwise_than_eager_fails(fake) -> None:
    with pytest.raises(AssertionError, match=r"f input 'x'"):
        check_call(fake, bumps_input, {"x": X}, where="f")


def test_the_failure_names_the_input_that_differs() -> None:
    def eager(x, y):
        y.mul_(2)
        return x + y

    def fake(x, y):
        return x + y * 2

    with pytest.raises(AssertionError, match=r"^f input 'y': "):
        check_call(fake, eager, {"x": X, "y": X.clone()}, where="f")


def test_both_sides_draw_the_same_random_numbers() -> None:
    def noisy(x):
        return x + torch.rand(x.shape)

    check_call(noisy, noisy, {"x": X})


def test_wrong_output_fails() -> None:
    with pytest.raises(AssertionError, match=r"f output 0"):
        check_call(lambda x: x + 1e-3, lambda x: x.clone(), {"x": X}, where="f")


def test_output_structure_must_match() -> None:
    with pytest.raises(AssertionError, match="output structure"):
        check_call(lambda x: [x, x], lambda x: (x, x), {"x": X})


def test_compiled_check_runs_each_variant() -> None:
    module = types.SimpleNamespace(f=bumps_input)
    module._source = module  # the source function and the exported one
    Compiled("f", module, bumps_input, bumps_input, "", "", "", "").check({"x": X})
    bad = Compiled("f", module, bumps_input, forgets_input_update, "", "", "", "")
    with pytest.raises(AssertionError, match=r"f triton input 'x'"):
        bad.check({"x": X})


def test_low_precision_input_update_is_compared_at_low_precision() -> None:
    x = X.bfloat16()
    check_call(bumps_input, bumps_input, {"x": x}, torch.bfloat16)
    with pytest.raises(AssertionError, match=r"input 'x'"):
        check_call(forgets_input_update, bumps_input, {"x": x}, torch.bfloat16)


# ---------------------------------------------------------------------------- modules


class Counter(nn.Module):
    """Updates a buffer, a parameter and a plain attribute on each call."""

    def __init__(self) -> None:
        super().__init__()
        self.fc = nn.Linear(4, 4)
        self.register_buffer("seen", torch.zeros(4))
        self.steps = 0

    def forward(self, x):
        self.seen.add_(x.sum(0))
        self.fc.bias.data.mul_(0.5)
        self.steps += 1
        return self.fc(x) * self.steps


class Generated(Counter):
    """A correct stand-in for generated code: same effects, computed another way."""

    def forward(self, x):
        self.seen.copy_(self.seen + x.sum(0))
        self.fc.bias.data.copy_(self.fc.bias * 0.5)
        self.steps = self.steps + 1
        return (x @ self.fc.weight.t() + self.fc.bias) * self.steps


class ForgetsBuffer(Generated):
    def forward(self, x):
        seen = self.seen.clone()
        out = Generated.forward(self, x)
        self.seen.copy_(seen)
        return out


class ForgetsParameter(Generated):
    def forward(self, x):
        bias = self.fc.bias.detach().clone()
        out = Generated.forward(self, x)
        self.fc.bias.data.copy_(bias)
        return out


class ForgetsAttribute(Generated):
    def forward(self, x):
        out = Generated.forward(self, x)
        self.steps -= 1
        return out


def pair(cls: type[Counter]) -> tuple[Counter, Counter]:
    torch.manual_seed(0)
    eager = Counter()
    mine = cls()
    mine.load_state_dict(eager.state_dict())
    return mine, eager


def test_module_with_the_same_effects_passes_call_after_call() -> None:
    mine, eager = pair(Generated)
    with torch.no_grad():
        for call in range(3):
            check_call(mine, eager, {"x": X}, where=f"call {call}")
    assert mine.steps == eager.steps == 3


@pytest.mark.parametrize(
    ("cls", "what"),
    [
        (ForgetsBuffer, "buffer 'seen'"),
        (ForgetsParameter, "parameter 'fc.bias'"),
        (ForgetsAttribute, "attribute 'steps'"),
    ],
)
def test_module_state_differing_from_eager_fails(cls: type, what: str) -> None:
    mine, eager = pair(cls)
    with torch.no_grad(), pytest.raises(AssertionError, match=f"m {what}"):
        check_call(mine, eager, {"x": X}, where="m")


def variant(self: Counter, x: torch.Tensor) -> torch.Tensor:
    """Like a generated `_cpu_N`: the module comes first."""
    return Generated.forward(self, x)


def test_module_is_found_in_a_partial_of_a_variant() -> None:
    mine, eager = pair(Counter)
    with torch.no_grad():
        check_call(functools.partial(variant, mine), eager, {"x": X})
        with pytest.raises(AssertionError, match="buffer 'seen'"):
            check_call(functools.partial(ForgetsBuffer.forward, mine), eager, {"x": X})


def test_modules_can_be_named() -> None:
    mine, eager = pair(ForgetsBuffer)
    with torch.no_grad(), pytest.raises(AssertionError, match="buffer 'seen'"):
        check_call(lambda x: mine(x), eager, {"x": X}, modules=(mine, eager))


def test_modules_must_be_two_instances() -> None:
    _, eager = pair(Counter)
    with pytest.raises(AssertionError, match="one module on both sides"):
        check_call(eager, eager, {"x": X})
    with pytest.raises(AssertionError, match="pass modules="):
        check_call(lambda x: eager(x), eager, {"x": X})
