"""A generated module fails like its source: wrong number or kind of arguments."""

from __future__ import annotations

import warnings

import pytest
import torch

import generated.add_relu
import generated.toy
from examples import add_relu, toy
from tests.compile_helpers import compile_source
from tests.devices import REAL_GPU


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


# Ops that check tensor data and return nothing (`_linalg_check_errors` after
# `linalg_inv_ex`, `_assert_async`): the checks run, and raise what eager raises
DATA_CHECKS = {
    "inv": "return torch.linalg.inv(a) * 2",
    "solve": "return torch.linalg.solve(a, b)",
    "tensorinv": "return torch.linalg.tensorinv(a.reshape(2, 2, 4), ind=2)",
    "cholesky": "return torch.linalg.cholesky(a)",
    "assert_async": "torch._assert_async(a.sum() != 0)\n    return a + 1",
}

DEVICE_ASSERTS = {"assert_async"}  # on CUDA: an assert in a kernel, not an exception


@pytest.fixture(scope="module")
def data_checks(tmp_path_factory: pytest.TempPathFactory) -> dict:
    lines = ["import torch", ""]
    for name, body in DATA_CHECKS.items():
        lines += ["", f"def {name}(a, b):", f"    {body}", ""]
    inputs = {"a": torch.empty(4, 4), "b": torch.empty(4)}
    functions = dict.fromkeys(DATA_CHECKS, inputs)
    root = tmp_path_factory.mktemp("data_checks")
    return compile_source("\n".join(lines), functions, root)


@pytest.mark.parametrize("name", DATA_CHECKS)
def test_checks_of_tensor_data_raise_what_the_source_raises(
    name: str, data_checks: dict
) -> None:
    c = data_checks[name]
    gen = torch.Generator().manual_seed(0)
    a = torch.randn(4, 4, generator=gen)
    good = a @ a.T + 4 * torch.eye(4)  # invertible, positive definite, sum != 0
    b = torch.randn(4, generator=gen)
    bad = torch.zeros(4, 4)  # singular, not positive definite, sum == 0
    for backend, fn in (("cpu", c.cpu), ("triton", c.cuda)):
        where = f"{name} ({backend})"
        torch.testing.assert_close(fn(good, b), c.eager(good, b), msg=where)
        if backend == "triton" and REAL_GPU and name in DEVICE_ASSERTS:
            continue  # a device-side assert ends the process's CUDA context
        assert error_of(fn, bad, b) == error_of(c.eager, bad, b), where
