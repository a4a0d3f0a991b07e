"""Each public spelling the wrapper prints for an extern call runs the ATen overload it
stands for: under a dispatch mode, the call reaches the same ops as calling the
overload itself, and gives the same result."""

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from transpiler.codegen.wrapper import FUNCTIONS, METHODS, _extern_call
from transpiler.ir.graph import Ref


class Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.ops: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.ops.append(str(func))
        return func(*args, **(kwargs or {}))


def _t(*shape):
    return torch.randn(*shape)


# target -> (positional args, keyword args) of one call
SAMPLES = {
    "aten.mm.default": ((_t(2, 3), _t(3, 4)), {}),
    "aten.addmm.default": ((_t(4), _t(2, 3), _t(3, 4)), {}),
    "aten.bmm.default": ((_t(2, 2, 3), _t(2, 3, 4)), {}),
    "aten.baddbmm.default": ((_t(2, 2, 4), _t(2, 2, 3), _t(2, 3, 4)), {}),
    "aten.linear.default": ((_t(2, 5, 3), _t(4, 3), _t(4)), {}),
    "aten.embedding.default": ((_t(10, 3), torch.tensor([[1, 2]])), {}),
    "aten.arange.start": ((0, 5), {"dtype": torch.int64}),
    "aten.convolution.default": (
        (
            _t(1, 3, 6, 6),
            _t(4, 3, 3, 3),
            None,
            [1, 1],
            [1, 1],
            [1, 1],
            False,
            [0, 0],
            1,
        ),
        {},
    ),
    "aten.scaled_dot_product_attention.default": (
        (_t(1, 2, 4, 8), _t(1, 2, 4, 8), _t(1, 2, 4, 8)),
        {"is_causal": True},
    ),
    "aten.view.default": ((_t(2, 6), [3, 4]), {}),
    "aten._unsafe_view.default": ((_t(2, 6), [12]), {}),
    "aten.t.default": ((_t(2, 3),), {}),
    "aten.transpose.int": ((_t(2, 3, 4), 1, 2), {}),
    "aten.permute.default": ((_t(2, 3, 4), [2, 0, 1]), {}),
    "aten.unsqueeze.default": ((_t(2, 3), 1), {}),
    "aten.squeeze.dim": ((_t(2, 1, 3), 1), {}),
    "aten.split_with_sizes.default": ((_t(2, 6), [2, 4], 1), {}),
}


SAME = {"aten._unsafe_view.default": "aten.view.default"}


def test_every_spelling_has_a_sample():
    assert set(SAMPLES) == set(FUNCTIONS) | set(METHODS)


@pytest.mark.parametrize("target", sorted(SAMPLES))
def test_spelling_reaches_its_overload(target):
    args, kwargs = SAMPLES[target]
    names = {f"a{i}": a for i, a in enumerate(args)}
    # the wrapper prints tensors by name (`Ref`s) and the rest as literals
    printed = [Ref(n) if isinstance(a, torch.Tensor) else a for n, a in names.items()]
    text = _extern_call(target, printed, [f"{k}={v}" for k, v in kwargs.items()])
    assert not text.startswith("torch.ops."), text
    spelled, called = Ops(), Ops()
    with spelled:
        got = eval(text, {"torch": torch, **names})
    overload = getattr(
        getattr(torch.ops.aten, target.split(".")[1]), target.split(".")[2]
    )
    with called:
        expected = overload(*args, **kwargs)
    # `_unsafe_view` is `view` without alias tracking, which kernels never need
    ops = [SAME.get(op, op) for op in called.ops]
    assert spelled.ops == ops, (text, spelled.ops, called.ops)
    for a, b in zip(_flat(got), _flat(expected)):
        assert a.shape == b.shape and torch.equal(a, b)


def _flat(value):
    return list(value) if isinstance(value, (list, tuple)) else [value]
