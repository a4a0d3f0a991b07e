"""Custom autograd Functions in variants that are not training steps (Note
[Custom autograd functions] in frontend/interpreter.py).

A table of the ways models write them: a forward that saves its input and sets
attributes on ctx (BLOOM's GELU), one with `setup_context` apart (forward without
ctx), one that calls a helper and reads `ctx.needs_input_grad`, one that writes its
input in place (`mark_dirty`). Each compiles with no fallback code on both devices
and matches eager, outputs and inputs after the call. A training step keeps the
call as fallback code: the Function's own backward is eager's.
"""

from __future__ import annotations

import inspect

import pytest
import torch

from tests.control_flow.support import compile_variants
from tests.devices import on_gpu
from tests.helpers import check_call
from transpiler.options import TensorSpec, Variant

SOURCE = """
import torch


def tanh_gelu(x):
    return x * 0.5 * (1.0 + torch.tanh(0.79788456 * x * (1 + 0.044715 * x * x)))


class Gelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        ctx.scale = 2.0
        return tanh_gelu(x) * ctx.scale

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * ctx.scale


class Scaled(torch.autograd.Function):
    @staticmethod
    def forward(x, k):
        return x * k

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.k = inputs[1]

    @staticmethod
    def backward(ctx, g):
        return g * ctx.k, None


class StraightThrough(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, bias):
        if ctx.needs_input_grad[0]:
            ctx.mark_non_differentiable(bias)
        return torch.round(x) + bias

    @staticmethod
    def backward(ctx, g):
        return g, None


class AddOne(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.mark_dirty(x)
        return x.add_(1.0)

    @staticmethod
    def backward(ctx, g):
        return g


def gelu(x):
    return Gelu.apply(x) + 1


def scaled(x):
    return Scaled.apply(x, 3.0).sum(-1)


def straight_through(x, b):
    return StraightThrough.apply(x * 4, b)


def add_one(x):
    y = x * 2
    return AddOne.apply(y) + x
"""

X = torch.randn(4, 8)
CASES = {
    "gelu": {"x": X},
    "scaled": {"x": X},
    "straight_through": {"x": X, "b": torch.randn(8)},
    "add_one": {"x": X},
}


def specs(inputs: dict) -> tuple:
    return tuple((k, TensorSpec(v.dtype, tuple(v.shape))) for k, v in inputs.items())


@pytest.mark.parametrize("name", sorted(CASES))
def test_forward_is_compiled_where_no_gradient_flows(tmp_path, name) -> None:
    inputs = CASES[name]
    variants = [Variant(specs(inputs), "cpu"), Variant(specs(inputs), "cuda")]
    module = compile_variants(SOURCE, name, variants, tmp_path)
    eager = getattr(module._source, name)
    for variant in ("_cpu_0", "_cuda_0"):
        text = inspect.getsource(vars(module)[variant])
        code = [ln for ln in text.splitlines() if not ln.strip().startswith("#")]
        assert not any("_fallback_" in ln or "apply" in ln for ln in code), text
        run = vars(module)[variant]
        run = on_gpu(run) if variant.startswith("_cuda") else run
        check_call(run, eager, inputs, where=f"{name} {variant}")


def test_a_training_step_keeps_the_functions_backward(tmp_path) -> None:
    """Under --train the call is fallback code: eager's backward (g * 2 here,
    which autodiff of the forward would not give)."""
    spec = (("x", TensorSpec(torch.float32, (4, 8), grad=True)),)
    module = compile_variants(
        SOURCE, "gelu", [Variant(spec, "cpu", train=True)], tmp_path
    )
    assert "calls torch.autograd.function.apply" in inspect.getsource(module)
