"""Generated code reads parameters and buffers through the module's registration
dicts (`self._modules["lin"]._parameters["weight"]`) where attribute access would
find them there, and through attributes where a class could answer otherwise."""

from __future__ import annotations

import torch
from torch import nn

from transpiler.frontend.trace import direct_reads


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.register_buffer("scale", torch.ones(4))


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([Inner(), Inner()])
        self.head = nn.Linear(4, 2, bias=False)


class Forwarding(nn.Module):
    """A class with its own `__getattr__`: attribute access may not reach the dicts."""

    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def __getattr__(self, name):
        return super().__getattr__(name)


class Holder(nn.Module):
    def __init__(self):
        super().__init__()
        self.plain = nn.Linear(4, 4)
        self.forwarding = Forwarding()


def test_every_registered_tensor_is_read_as_attribute_access_finds_it():
    model = Outer()
    reads = direct_reads(model)
    names = [n for n, _ in model.named_parameters()] + [
        n for n, _ in model.named_buffers()
    ]
    assert len(reads) == len(names) == 7
    assert reads["self.blocks[1].lin.weight"] == (
        'self._modules["blocks"]._modules["1"]._modules["lin"]._parameters["weight"]'
    )
    assert reads["self.blocks[0].scale"] == (
        'self._modules["blocks"]._modules["0"]._buffers["scale"]'
    )
    for path, expr in reads.items():
        assert eval(expr, {"self": model}) is eval(path, {"self": model}), path


def test_reads_follow_reassignment():
    """The expressions are evaluated on every call: a new parameter is seen."""
    model = Outer()
    expr = direct_reads(model)["self.head.weight"]
    model.head.weight = nn.Parameter(torch.zeros(2, 4))
    assert eval(expr, {"self": model}) is model.head.weight


def test_a_class_with_its_own_getattr_keeps_attribute_access():
    reads = direct_reads(Holder())
    assert reads["self.plain.weight"] == 'self._modules["plain"]._parameters["weight"]'
    assert not any(path.startswith("self.forwarding") for path in reads)
