"""reuse_buffers: a Triton kernel's output takes the memory of an input that
nothing reads after it (Note [Writing over a dead input]). A table of cases, each
with the number of outputs written over an input; every case checked against
eager PyTorch on both backends (outputs and inputs after the call), the C++
kernels never written over (their pointers are `__restrict__`)."""

from __future__ import annotations

import re

import pytest
import torch

from tests.compile_helpers import compile_source

pytestmark = [  # masked-off lanes of Triton's interpreter compute 0 / 0 and such
    pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning"),
]

SOURCE = """
import torch
import torch.nn.functional as F


def chain(x, w):
    return (x @ w).relu() * 2


def row_statistics(x, w, g, b):
    return F.layer_norm(x @ w, (16,), g, b)


def seen_at_another_shape(x, w):
    a = (x @ w).view(256).sigmoid()
    return a.view(16, 16) @ w


def read_after(x, w, y):
    h = x @ w
    a = h.relu()
    return (y @ a) + h


def view_read_after(x, w, y):
    h = x @ w
    v = h.t()
    a = h.relu()
    return (y @ a) * v


def returned(x, w):
    h = x @ w
    return h, h.relu()


def read_elsewhere(x, w):
    h = x @ w
    return h + h.t()


def reduction_not_needed(x, w):
    h = x @ w
    return h.exp(), h.sum(-1)


def an_input(x, y):
    return (x * y).relu()
"""

g = torch.Generator().manual_seed(0)


def randn(*shape):
    return torch.randn(*shape, generator=g)


def square():
    return randn(16, 16)


# name -> (inputs, [(output, the buffer whose memory it takes)])
CASES = {
    # the product read once, where it is written: its memory taken
    "chain": ({"x": square(), "w": square()}, [("mul", "mm")]),
    # the row's reductions come before the normalized row is stored
    "row_statistics": (
        {"x": square(), "w": square(), "g": randn(16), "b": randn(16)},
        [("native_layer_norm_0", "mm")],
    ),
    # a [256] result in the memory of a [16, 16] product, as a view of it
    "seen_at_another_shape": ({"x": square(), "w": square()}, [("sigmoid", "mm")]),
    # the first product read again after relu: relu's output is its own; the
    # sum takes the second product's memory
    "read_after": ({"x": square(), "w": square(), "y": square()}, [("add", "mm_1")]),
    # a view of the first product read later: the same
    "view_read_after": (
        {"x": square(), "w": square(), "y": square()},
        [("mul", "mm_1")],
    ),
    # the product is returned
    "returned": ({"x": square(), "w": square()}, []),
    # read at positions other than those written
    "read_elsewhere": ({"x": square(), "w": square()}, []),
    # an output stored before the row's sum is done, the product still read by it
    "reduction_not_needed": ({"x": square(), "w": square()}, []),
    # the caller's tensors are never written over
    "an_input": ({"x": square(), "y": square()}, []),
}
WRITTEN_OVER = re.compile(r"(\w+) = (?:runtime_shim\.view\()?(\w+).*# written over")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict:
    functions = {name: inputs for name, (inputs, _) in CASES.items()}
    return compile_source(SOURCE, functions, tmp_path_factory.mktemp("reuse"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_outputs_written_over_dead_inputs(compiled, name: str) -> None:
    inputs, expected = CASES[name]
    c = compiled[name]
    c.check(inputs)
    assert WRITTEN_OVER.findall(c.cuda_source) == expected, c.cuda_source
    assert "written over" not in c.cpu_source
    for source in (c.cpu_source, c.cuda_source):
        assert "_fallback_" not in source, source


def test_a_view_where_the_shapes_differ(compiled) -> None:
    source = compiled["seen_at_another_shape"].cuda_source
    line = next(s for s in source.splitlines() if "written over" in s)
    assert "runtime_shim.view(" in line and "(256,), (1,), 0)" in line, line
