"""Branches on tensor data: every branch is compiled, the taken one runs.

The examples with `if <tensor>:` (ToyModule, fn_branch, my_function) are run, from the
checked-in `generated/`, on inputs constructed to take EACH branch: through the
exported API on the CPU (C++ kernels, no fallback warning, the variant itself runs)
and through the `_cuda_N` variant in Triton's interpreter. Each must equal eager:
outputs, inputs, parameters and buffers after the call (`helpers.check_call`).
The reference's trace-vs-script case shows where `torch.jit.trace` is wrong and the
generated module is not.
"""

from __future__ import annotations

import functools
import warnings

import pytest
import torch

from examples.dynamo import my_function
from examples.script_vs_trace import fn_branch
from examples.toy import ToyModule
from tests.control_flow.support import (
    copy_weights,
    example_case,
    exported,
    no_fallback,
    spy_on,
    variant_of,
)
from tests.helpers import check_call, generated_module

F32 = torch.float32
BRANCHES = ("taken", "not_taken")  # the `if` body runs / the code after or `else`


def toy_models(branch: str) -> tuple[torch.nn.Module, torch.nn.Module]:
    """Eager and generated ToyModule whose `y.sum()` has the sign the branch needs:
    small random weights, a bias of +-5 on each of the 4 outputs."""
    torch.manual_seed(0)
    eager = ToyModule()
    with torch.no_grad():
        eager.linear.weight.copy_(torch.randn(4, 4) * 0.1)
        eager.linear.bias.fill_(5.0 if branch == "taken" else -5.0)
    generated = exported(example_case("examples/toy.py::ToyModule", "cpu"))()
    copy_weights(eager, generated)
    return eager, generated


def signed(shape: tuple[int, ...], branch: str, seed: int = 0) -> torch.Tensor:
    """Random values, all positive for "taken", all negative otherwise."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(seed)).abs() + 0.1
    return x if branch == "taken" else -x


@pytest.mark.parametrize("branch", BRANCHES)
def test_toy_module_each_branch(
    branch: str, monkeypatch: pytest.MonkeyPatch, triton_interpreter: None
) -> None:
    eager, generated = toy_models(branch)
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        assert bool(eager.linear(x).sum() > 0) == (branch == "taken")
        cpu = example_case("examples/toy.py::ToyModule", "cpu")
        calls = spy_on(monkeypatch, generated_module(cpu), variant_of(cpu).__name__)
        where = f"ToyModule cpu, {branch}"
        actual = check_call(generated, eager, {"x": x}, F32, where, context=no_fallback)
        assert len(calls) == 1, "the dispatch did not reach the CPU variant"
        # relu on the taken branch, tanh otherwise: the branch really differs
        assert bool((actual >= 0).all()) == (branch == "taken")
        cuda = variant_of(example_case("examples/toy.py::ToyModule", "cuda"))
        run = functools.partial(cuda, generated)
        check_call(run, eager, {"x": x}, F32, f"ToyModule triton, {branch}")


@pytest.mark.parametrize("branch", BRANCHES)
@pytest.mark.parametrize(
    ("source", "eager", "shape"),
    [
        ("examples/script_vs_trace.py::fn_branch", fn_branch, (2,)),
        ("examples/dynamo.py::my_function", my_function, (10,)),
    ],
    ids=["fn_branch", "my_function"],
)
def test_function_each_branch(
    source: str, eager, shape: tuple[int, ...], branch: str, triton_interpreter: None
) -> None:
    cpu_case = example_case(source, "cpu")
    generated = exported(cpu_case)
    cuda = variant_of(example_case(source, "cuda"))
    for seed in (0, 1):
        x = {"x": signed(shape, branch, seed)}
        with torch.no_grad():
            where = f"{source} cpu {branch}"
            check_call(generated, eager, x, F32, where, context=no_fallback)
        check_call(cuda, eager, x, F32, f"{source} triton {branch}")
        # with autograd enabled (nothing requires grad) the variant still runs
        where = f"{source} cpu grad {branch}"
        check_call(generated, eager, x, F32, where, context=no_fallback)


def test_jit_trace_is_wrong_where_generated_is_right(triton_interpreter: None) -> None:
    """The reference's example: tracing with [1, 2] bakes in the `x * 2` branch."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # TracerWarning: converting a tensor to bool
        traced = torch.jit.trace(fn_branch, torch.tensor([1.0, 2.0]))
    x = torch.tensor([-1.0, -2.0])
    expected = fn_branch(x)
    assert torch.equal(expected, torch.tensor([1.0, 2.0]))
    assert not torch.equal(traced(x), expected), "torch.jit.trace got it right?"
    source = "examples/script_vs_trace.py::fn_branch"
    cpu = exported(example_case(source, "cpu"))
    with torch.no_grad():
        actual = check_call(cpu, fn_branch, {"x": x}, F32, "cpu", context=no_fallback)
    assert torch.equal(actual, expected)
    cuda = variant_of(example_case(source, "cuda"))
    assert torch.equal(check_call(cuda, fn_branch, {"x": x}, F32, "triton"), expected)
