"""Tensors made on a device the source names: a factory on the variant's own device
(`torch.zeros(n, device="cpu")` in a CPU variant) is traced as any other, and the
variant computes it; on another device (the same line in a CUDA variant) it is a
graph break, its tensor made where the source says. Outputs and inputs after the
call are compared with eager (`check_call`)."""

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


def shifted(x):
    z = torch.zeros(x.shape[-1], device="cpu")
    r = torch.arange(4, device=torch.device("cpu"))
    ones = torch.ones(3, 4, dtype=torch.float64, device="cpu")
    return (x + z) * 2 + r[-1], ones + x.sum()


def made_where_told(x):
    like = torch.zeros_like(x, device="cpu") + 1
    return x * 3, torch.full((2, 2), 7.0, device="cpu"), like
"""

SPECS = (("x", TensorSpec(torch.float32, (3, 4))),)


@pytest.mark.parametrize("name", ["shifted", "made_where_told"])
def test_factories_on_the_variants_device_are_compiled(tmp_path, name) -> None:
    module = compile_variants(SOURCE, name, [Variant(SPECS, "cpu")], tmp_path)
    variant = vars(module)["_cpu_0"]
    text = inspect.getsource(variant)
    assert "_fallback_" not in text, text
    x = torch.randn(3, 4)
    check_call(variant, getattr(module._source, name), {"x": x}, where=name)
    for out in variant(x.clone()):
        assert out.device.type == "cpu"


def test_a_factory_on_another_device_is_a_graph_break(tmp_path) -> None:
    """In a CUDA variant, `device="cpu"` makes a CPU tensor: the source makes it."""
    module = compile_variants(
        SOURCE, "made_where_told", [Variant(SPECS, "cuda")], tmp_path
    )
    assert "uses a real (non-meta) tensor constant" in inspect.getsource(module)


def test_a_cuda_factory_in_a_cuda_variant_is_compiled(tmp_path) -> None:
    """`device="cuda"` in a CUDA variant is the variant's device: no tensor is made
    while tracing, and the variant makes it on its inputs' device."""
    source = SOURCE + (
        "\n\ndef biased(x):\n" '    return x + torch.ones(x.shape[-1], device="cuda")\n'
    )
    module = compile_variants(source, "biased", [Variant(SPECS, "cuda")], tmp_path)
    text = inspect.getsource(vars(module)["_cuda_0"])
    assert "_fallback_" not in text and "x.device" in text, text


# Note [The variant's device] in frontend/interpreter.py: what the source asks a
# tensor about its device is the variant's answer, as eager's is on that device.
QUERIES = """
import contextlib
import torch
from functools import lru_cache


def by_type(x):
    device = x.device
    if device.type in ("cpu", "mps"):  # transformers' histogram dtype
        return x.float() * 2
    return x.int() * 3


def by_flag(x):
    return x * 5 if x.is_cuda else x * 7


def by_cpu_flag(x, w):
    return x @ w if w.is_cpu and not x.is_meta else x + 1


def moved_home(x, mask):
    mask = mask.to(x.device)  # the same device: the tensor itself
    scale = torch.arange(4, device=x.device)
    return x.to(x.device, torch.float64) * mask + scale


def moved_by_name(x):
    return x.cpu() * 2 + x.to(device=torch.device("cpu"))


@torch._dynamo.assume_constant_result
def threshold():
    return 4


@lru_cache
def _cached():
    return 0.25


_cached._dynamo_marked_constant = True


def constants(x):
    return x.clamp(max=threshold()) + _cached()


def autocast_off(x):
    # timm's efficientvit: attention outside autocast, unless tracing on meta
    if x.device.type != "meta":
        with torch.autocast(device_type=x.device.type, enabled=False):
            y = x.float() @ x.t()
    else:
        y = x
    with contextlib.nullcontext():
        return y * 2
"""

X = torch.randn(3, 4)
# name -> (inputs, what eager computes on the CPU, on a GPU)
ON_EACH = {
    "by_type": ({"x": X}, lambda x: x.float() * 2, lambda x: x.int() * 3),
    "by_flag": ({"x": X}, lambda x: x * 7, lambda x: x * 5),
    "by_cpu_flag": (
        {"x": X, "w": torch.randn(4, 4)},
        lambda x, w: x @ w,
        lambda x, w: x + 1,
    ),
    "moved_home": (
        {"x": X, "mask": torch.rand(3, 4) > 0.5},
        lambda x, mask: x.double() * mask + torch.arange(4),
        lambda x, mask: x.double() * mask + torch.arange(4),
    ),
    "autocast_off": (
        {"x": X},
        lambda x: (x @ x.t()) * 2,
        lambda x: (x @ x.t()) * 2,
    ),
    "constants": (
        {"x": X * 9},
        lambda x: x.clamp(max=4) + 0.25,
        lambda x: x.clamp(max=4) + 0.25,
    ),
}


@pytest.mark.parametrize("name", sorted(ON_EACH))
def test_device_queries_answer_for_the_variants_device(tmp_path, name) -> None:
    inputs, cpu_result, cuda_result = ON_EACH[name]
    specs = tuple((k, TensorSpec(v.dtype, tuple(v.shape))) for k, v in inputs.items())
    variants = [Variant(specs, "cpu"), Variant(specs, "cuda")]
    module = compile_variants(QUERIES, name, variants, tmp_path)
    for variant, want in (("_cpu_0", cpu_result), ("_cuda_0", cuda_result)):
        text = inspect.getsource(vars(module)[variant])
        assert "_fallback_" not in text, text
        given = {k: v.clone() for k, v in inputs.items()}
        run = vars(module)[variant]
        got = (on_gpu(run) if variant.startswith("_cuda") else run)(**given)
        expected = want(**inputs)
        assert got.dtype == expected.dtype, (variant, got.dtype)
        torch.testing.assert_close(got, expected)
        for k, v in inputs.items():
            assert torch.equal(given[k], v), (variant, k)


def test_a_move_off_the_variants_device_is_a_graph_break(tmp_path) -> None:
    """`x.cpu()` in a CPU variant is `x`; in a CUDA variant it makes a CPU tensor:
    the source makes it."""
    specs = (("x", TensorSpec(torch.float32, (3, 4))),)
    module = compile_variants(
        QUERIES, "moved_by_name", [Variant(specs, "cpu")], tmp_path / "cpu"
    )
    assert "_fallback_" not in inspect.getsource(vars(module)["_cpu_0"])
    check_call(
        vars(module)["_cpu_0"], module._source.moved_by_name, {"x": X}, where="cpu"
    )
    module = compile_variants(
        QUERIES, "moved_by_name", [Variant(specs, "cuda")], tmp_path / "cuda"
    )
    assert "_fallback_" in inspect.getsource(vars(module)["_cuda_0"])
