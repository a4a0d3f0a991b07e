"""A generated module fails like its source: wrong number or kind of arguments."""

from __future__ import annotations

import warnings

import pytest
import torch

import generated.add_relu
import generated.toy
from examples import add_relu, toy


def error_of(fn, *args, **kwargs) -> str:
    with pytest.raises(Exception) as info, warnings.catch_warnings():
        warnings.simplefilter("ignore")  # a fallback warning, when guards fail
        fn(*args, **kwargs)
    return f"{type(info.value).__name__}: {info.value}"


X = torch.randn(2, 4)


@pytest.mark.parametrize(
    "args, kwargs",
    [
        ((X,), {}),  # too few
        ((X, X, X), {}),  # too many
        ((X,), {"c": X}),  # unknown keyword
        (("a", X), {}),  # not a tensor
        ((X, torch.randn(3, 5)), {}),  # shapes that do not broadcast
    ],
    ids=["too_few", "too_many", "unknown_keyword", "not_a_tensor", "bad_shapes"],
)
def test_function_raises_what_the_source_raises(args, kwargs) -> None:
    want = error_of(add_relu.f, *args, **kwargs).replace("add_relu.f", "f")
    assert error_of(generated.add_relu.f, *args, **kwargs) == want


@pytest.mark.parametrize(
    "args",
    [(), (X, X), ("x",), (torch.randn(2, 5),)],
    ids=["too_few", "too_many", "not_a_tensor", "wrong_features"],
)
def test_module_raises_what_the_source_raises(args) -> None:
    torch.manual_seed(0)
    eager = toy.ToyLinear().eval()
    gen = generated.toy.ToyLinear().eval()
    gen.load_state_dict(eager.state_dict())
    with torch.no_grad():
        assert error_of(gen, *args) == error_of(eager, *args)
