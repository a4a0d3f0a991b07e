"""Loops over static iterables are unrolled; identical kernels are emitted once.

A 4-layer `nn.ModuleList` (Linear -> LayerNorm -> GELU, same shapes in each layer)
defines each distinct kernel once in the generated C++ and Triton files while its
variants launch each 4 times, and matches eager on both backends (`check_call`:
outputs, inputs, parameters and buffers after the call). `fn_loop` (a loop
over `x.dim()`) is unrolled for the declared rank; its shape guard keeps an input of
another rank off that variant.
"""

from __future__ import annotations

import functools

import pytest
import torch

from examples.script_vs_trace import fn_loop
from tests.compile_helpers import Compiled, compile_source
from tests.control_flow.support import (
    assert_one_fallback,
    copy_weights,
    count_calls,
    example_case,
    exported,
    no_fallback,
    recorded_warnings,
    variant_name,
    variant_of,
)
from tests.helpers import check_call, randomize_parameters

F32 = torch.float32
DEPTH = 4

SOURCE = """
from torch import nn


class Layer(nn.Module):
    def __init__(self, width):
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.norm = nn.LayerNorm(width)
        self.act = nn.GELU()

    def forward(self, x):
        return self.act(self.norm(self.fc(x)))


class Stack(nn.Module):
    def __init__(self, width=32, depth=4):
        super().__init__()
        self.layers = nn.ModuleList(Layer(width) for _ in range(depth))

    def forward(self, x):
        for layer in self.layers:
            x = layer(x)
        return x
"""


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Compiled:
    compiled = compile_source(
        SOURCE, {"Stack": {"x": torch.randn(8, 32)}}, tmp_path_factory.mktemp("loop")
    )
    return compiled["Stack"]


def test_each_distinct_kernel_is_defined_once(stack: Compiled) -> None:
    cpp_defs = count_calls(r'extern "C" void (cpp_\w+)\(', stack.cpp_text)
    cpp_launches = count_calls(r'_cpp\.function\("(cpp_\w+)"', stack.cpu_source)
    triton_defs = count_calls(r"@triton\.jit\s*\ndef (triton_\w+)\(", stack.triton_text)
    triton_launches = count_calls(r"_triton\.(triton_\w+)\[", stack.cuda_source)
    assert stack.triton_text.count("@triton.jit") == sum(triton_defs.values())
    for backend, defs, launches in (
        ("C++", cpp_defs, cpp_launches),
        ("Triton", triton_defs, triton_launches),
    ):
        assert launches, f"{backend}: the variant launches no kernel"
        assert set(defs) == set(launches), (backend, defs, launches)
        assert all(n == 1 for n in defs.values()), f"{backend}: {defs}"
        assert all(n == DEPTH for n in launches.values()), f"{backend}: {launches}"


def test_module_list_matches_eager(stack: Compiled, triton_interpreter: None) -> None:
    torch.manual_seed(0)
    eager = stack.eager()
    randomize_parameters(eager, 0)
    generated = stack.module.Stack()
    copy_weights(eager, generated)
    x = {"x": torch.randn(8, 32, generator=torch.Generator().manual_seed(1))}
    with torch.no_grad():
        check_call(generated, eager, x, F32, "Stack cpu", context=no_fallback)
        run = functools.partial(stack.cuda, generated)
        check_call(run, eager, x, F32, "Stack triton")


FN_LOOP = "examples/script_vs_trace.py::fn_loop"


def test_loop_over_dim_squares_once_per_dimension(triton_interpreter: None) -> None:
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(0))
    torch.testing.assert_close(fn_loop(x), x**4)
    cpu = exported(example_case(FN_LOOP, "cpu"))
    with torch.no_grad():
        check_call(cpu, fn_loop, {"x": x}, F32, "cpu", context=no_fallback)
    cuda = variant_of(example_case(FN_LOOP, "cuda"))
    check_call(cuda, fn_loop, {"x": x}, F32, "triton")


def test_other_rank_is_kept_off_the_variant() -> None:
    """A 3-D input would square three times: the 2-D variant's guard refuses it."""
    generated = exported(example_case(FN_LOOP, "cpu"))
    variant = variant_name(variant_of(example_case(FN_LOOP, "cpu")))
    x = torch.randn(3, 4, 2, generator=torch.Generator().manual_seed(0)) * 0.5
    torch.testing.assert_close(fn_loop(x), x**8)
    with torch.no_grad(), recorded_warnings() as record:
        check_call(generated, fn_loop, {"x": x}, F32, "3-D input")
    assert_one_fallback(record, variant, "x.shape == (3, 4)")
