"""Writes into the caller's tensors: in-place ops on inputs, parameters and buffers
(Note [Writes into the caller's tensors] in frontend/recorder.py) are compiled as
their functional ops, and the generated code copies each written tensor's new
value back before it returns. Each case runs twice on both backends against eager:
outputs, inputs, parameters and buffers after each call (`check_call`), with no
fallback code in the variant."""

from __future__ import annotations

import copy
import inspect
import re

import pytest
import torch

from tests.compile_helpers import compile_source
from tests.control_flow.support import compile_variants
from tests.devices import on_gpu
from tests.helpers import check_call
from transpiler.options import ScalarSpec, TensorSpec, Variant

FUNCTIONS = """
import torch


def scale_input(x):
    x.mul_(2)
    return x + 1


def write_a_column(x):
    x[:, 0] = 0.0
    y = x.sum(1)
    x[:, 1:3] += y[:, None]
    return x.exp()


def clamp_negatives(x, y):
    x.masked_fill_(x < 0, 0.0)
    y.copy_(x * 3)
    return (x + y).sum()


def returns_it(x):
    return x.add_(1)


def compares_into(x, y):
    z = x[:, ::2].eq_(y[:, ::2])  # a bool stored in x's dtype
    h = x * 1
    return h.lt_(y)[:, ::2] + z
"""

F32 = {"x": torch.randn(6, 8), "y": torch.randn(6, 8)}
CASES = {
    "scale_input": {"x": F32["x"]},
    "write_a_column": {"x": F32["x"]},
    "clamp_negatives": F32,
    "returns_it": {"x": F32["x"]},
    "compares_into": {"x": F32["x"].round(), "y": F32["y"].round()},
}

MODULES = """
import torch
from torch import nn


class Stats(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros((), dtype=torch.long))
        self.register_buffer("ema", torch.zeros(8))
        self.scale = nn.Parameter(torch.ones(8))

    def forward(self, x):
        self.count += 1
        self.ema.mul_(0.9).add_(x.mean(0), alpha=0.1)
        with torch.no_grad():
            self.scale.mul_(0.5)
        return (x - self.ema) * self.scale


class Cache(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("keys", torch.zeros(2, 16, 8))

    def forward(self, x, pos: int):
        end = pos + x.shape[1]
        self.keys[:, pos:end] = x
        return self.keys[:, :end].softmax(-1)
"""


def _no_fallback(fn) -> None:
    text = inspect.getsource(fn)
    assert "_fallback_" not in text, text
    # the writes, copied back, or written in place with the version counter moved
    assert ".copy_(" in text or "increment_version(" in text, text


@pytest.mark.parametrize("name", sorted(CASES))
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_functions_write_their_inputs(tmp_path, name: str, device: str) -> None:
    inputs = CASES[name]
    compiled = compile_source(FUNCTIONS, {name: inputs}, tmp_path)[name]
    fn = compiled.cpu if device == "cpu" else compiled.cuda
    _no_fallback(compiled.cpu)
    eager = getattr(compiled.module._source, name)
    for _ in range(2):
        check_call(fn, eager, inputs, where=f"{name} {device}")


def test_a_written_input_returned_is_the_input(tmp_path) -> None:
    compiled = compile_source(FUNCTIONS, {"returns_it": CASES["returns_it"]}, tmp_path)
    x = torch.randn(6, 8)
    assert compiled["returns_it"].cpu(x.clone()) is not None
    x0 = x.clone()
    assert compiled["returns_it"].cpu(x) is x  # as eager's `add_` returns it
    torch.testing.assert_close(x, x0 + 1)


MODULE_CASES = {
    "Stats": (
        (("x", TensorSpec(torch.float32, (4, 8))),),
        {"x": torch.randn(4, 8)},
    ),
    "Cache": (
        (("x", TensorSpec(torch.float32, (2, 4, 8))), ("pos", ScalarSpec(4))),
        {"x": torch.randn(2, 4, 8), "pos": 4},
    ),
}


@pytest.mark.parametrize("name", sorted(MODULE_CASES))
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_modules_write_their_buffers(tmp_path, name: str, device: str) -> None:
    specs, inputs = MODULE_CASES[name]
    module = compile_variants(MODULES, name, [Variant(specs, device)], tmp_path)
    fn = vars(module)[f"_{device}_0"]
    _no_fallback(fn)
    torch.manual_seed(0)
    eager = getattr(module._source, name)().eval().requires_grad_(False)
    with torch.no_grad():
        for b in eager.buffers():
            if b.dtype.is_floating_point:
                b.copy_(torch.randn(b.shape))
    mine = copy.deepcopy(eager)
    run = on_gpu(fn) if device == "cuda" else fn
    for _ in range(3):  # what a call wrote, the next one reads
        check_call(
            lambda **kw: run(mine, **kw),
            eager,
            inputs,
            modules=(mine, eager),
            where=f"{name} {device}",
        )


def test_a_variant_writing_an_input_replays_no_cuda_graph(tmp_path) -> None:
    """A CUDA graph copies the inputs into buffers of its own: a write into one
    would not reach the caller's tensor, so such a variant is compiled without."""
    specs = (("x", TensorSpec(torch.float32, (6, 8))),)
    wanted = Variant(specs, "cuda", cuda_graphs=True)
    source = FUNCTIONS + "\n\ndef reads_it(x):\n    return x * 2\n"
    writes = compile_variants(source, "scale_input", [wanted], tmp_path / "a")
    reads = compile_variants(source, "reads_it", [wanted], tmp_path / "b")
    assert "runtime_shim.cuda_graph" in inspect.getsource(reads)
    assert "runtime_shim.cuda_graph" not in inspect.getsource(writes)


RESIZES = """
import torch


def accumulate_products(s, a, b):
    return s.addbmm_(a, b, beta=0.5) * 2


def add_a_larger(x, y):
    x.add_(y)
    return x
"""


@pytest.mark.parametrize(
    ("name", "inputs"),
    [
        # eager resizes `s` to the product's [5, 10]
        (
            "accumulate_products",
            (torch.randn(()), torch.randn(3, 5, 4), torch.randn(3, 4, 10)),
        ),
        # eager raises: `x` cannot hold the broadcast [4, 6]
        ("add_a_larger", (torch.randn(6), torch.randn(4, 6))),
    ],
)
def test_an_in_place_op_of_another_shape_runs_the_source(tmp_path, name, inputs):
    """An in-place op whose result has another shape than its input (eager resizes
    the input, or raises) is a graph break: the source runs it, as eager does."""
    specs = tuple(
        (p, TensorSpec(t.dtype, tuple(t.shape)))
        for p, t in zip(("s", "a", "b") if len(inputs) == 3 else ("x", "y"), inputs)
    )
    module = compile_variants(RESIZES, name, [Variant(specs, "cpu")], tmp_path)
    text = inspect.getsource(module)
    assert "computes [" in text, text  # the reason, in the module's docstring
    mine = [t.clone() for t in inputs]
    theirs = [t.clone() for t in inputs]
    try:
        expected = getattr(module._source, name)(*theirs)
    except RuntimeError as e:
        with pytest.raises(RuntimeError, match=re.escape(str(e))):
            getattr(module, name)(*mine)
        return
    check_call(
        getattr(module, name),
        getattr(module._source, name),
        dict(zip([p for p, _ in specs], inputs)),
    )
    assert expected.shape == (5, 10) and theirs[0].shape == (5, 10)
