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
