"""Reductions in the forms models write them, in kernels: `x.max(dim)` (the
extreme and its position), a reduction with `dtype=`, the extrema of bools, and
reductions of one element (a 0-d loss summed, an argmax along a dimension of one).

Each case runs on both backends against eager (outputs, and the inputs after the
call) with NaN and ties in the float inputs, and leaves no call into PyTorch for
its reduction (`decompose.py`: `_extreme_at`, `_one_element`, `_one_position`).
"""

from __future__ import annotations

import pytest
import torch

from tests.compile_helpers import aten_calls, compile_source

SOURCE = """
import torch


def accuracy(logits, labels):
    values, predicted = logits.max(dim=-1)
    return values, predicted, (predicted == labels).float().mean()


def nearest(d):
    return torch.min(d, 1, keepdim=True)


def max_of_one(x):
    return torch.max(x, 1)


def loss_sum(x):
    loss = (x * x).mean()
    return loss.sum() + loss.mean(), loss.amax()


def wide_sum(x):
    return x.sum(-1, dtype=torch.float64), torch.sum(x, dtype=torch.float64)


def narrow_sum(x):
    return x.sum(0, dtype=torch.int32), x.prod(1, dtype=torch.int16)


def mean_of_counts(x):
    return x.mean(1, dtype=torch.float32)


def any_all(m):
    return m.amax(-1), m.amin((0, 2), keepdim=True), torch.max(m), torch.min(m)


def position_of_one(x):
    return x.argmax(1), x.argmin(1, keepdim=True), x[:1, :1].argmax(keepdim=True)
"""

g = torch.Generator().manual_seed(0)


def randn(*shape: int, dtype: torch.dtype = torch.float32) -> torch.Tensor:
    x = torch.randn(*shape, generator=g).to(dtype)
    flat = x.view(-1)
    flat[1] = float("nan")
    flat[-3:] = flat[-4]  # ties
    return x


def randint(*shape: int, high: int = 5, dtype: torch.dtype = torch.int64):
    return torch.randint(-high, high, shape, generator=g).to(dtype)


def labels(logits: torch.Tensor) -> torch.Tensor:
    """The positions of the largest logits (NaN the largest), two of them off."""
    out = logits.float().nan_to_num(nan=float("inf")).argmax(-1)
    out[:2] = (out[:2] + 1) % logits.shape[-1]
    return out


LOGITS = randn(6, 10)
LOGITS_BF16 = randn(4, 9, dtype=torch.bfloat16)
# name -> (inputs, the ops that must not be calls into PyTorch)
CASES = {
    "accuracy": ({"logits": LOGITS, "labels": labels(LOGITS)}, ("max",)),
    "accuracy_bf16": (
        {"logits": LOGITS_BF16, "labels": labels(LOGITS_BF16)},
        ("max",),
    ),
    "nearest": ({"d": randn(5, 7).abs()}, ("min",)),
    "nearest_int": ({"d": randint(5, 7, high=3)}, ("min",)),
    "max_of_one": ({"x": randn(4, 1, 3)}, ("max", "argmax")),
    "loss_sum": ({"x": randn(8)}, ("sum", "mean", "amax")),
    "wide_sum": ({"x": randn(3, 33)}, ("sum",)),
    "narrow_sum": ({"x": randint(9, 6, high=1 << 40)}, ("sum", "prod")),
    "mean_of_counts": ({"x": randint(4, 9)}, ("mean",)),
    "any_all": ({"m": torch.rand(3, 4, 5, generator=g) > 0.3}, ("amax", "amin")),
    "position_of_one": ({"x": randn(6, 1)}, ("argmax", "argmin")),
}
FUNCTION = {"accuracy_bf16": "accuracy", "nearest_int": "nearest"}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict:
    out = {}
    for case, (inputs, _) in CASES.items():
        fn = FUNCTION.get(case, case)
        root = tmp_path_factory.mktemp(case)
        out[case] = compile_source(SOURCE, {fn: inputs}, root)[fn]
    return out


@pytest.mark.parametrize("case", CASES)
def test_reduction_matches_eager_in_kernels(case: str, compiled: dict) -> None:
    inputs, ops = CASES[case]
    c = compiled[case]
    c.check(inputs)
    for side in (c.cpu_source, c.cuda_source):
        assert not aten_calls(side, ops), side
