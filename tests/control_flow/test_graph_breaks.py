"""Graph breaks: code the compiler does not capture runs eagerly as fallback code.

The reference's examples (`problematic` with its `print`, the layer loop printing at
layer 5) print exactly what eager prints and return eager's result. More constructs
(live-outs of fallback code used later, NumPy, `try`, an unknown `with`, a `print` in
a submodule, in-place updates of an input, `assert` on tensor data, `.tolist()`
feeding Python) are compiled in one batch by `compile_source`, which must not raise,
and each runs on both backends (C++ kernels through the exported API, and the
`_cuda_N` variant in Triton's interpreter) like eager: same result, same output on
stdout, same in-place update of the caller's tensors, same exception.

The last section holds regressions: a `return` whose value comes from fallback code,
a compiled read of a tensor before fallback code writes it in place, and several
fallback calls in one region after rewritten arithmetic.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from examples.dynamo import problematic
from examples.layer_loop import LayerLoop
from tests.compile_helpers import Compiled, compile_source
from tests.control_flow.support import (
    copy_weights,
    example_case,
    exported,
    line_of,
    no_fallback,
    variant_of,
)
from tests.devices import REAL_GPU
from tests.helpers import check_call, randomize_parameters

F32 = torch.float32

# ------------------------------------------------------------- the reference's examples


def test_problematic_prints_like_eager(
    capsys: pytest.CaptureFixture[str], triton_interpreter: None
) -> None:
    source = "examples/dynamo.py::problematic"
    x = torch.randn(8, 16, generator=torch.Generator().manual_seed(0))
    problematic(x)
    printed = capsys.readouterr().out
    assert printed == "Shape: torch.Size([8, 16])\n"
    runs = {
        "cpu": exported(example_case(source, "cpu")),
        "triton": variant_of(example_case(source, "cuda")),
    }
    for backend, run in runs.items():
        with torch.no_grad():
            where = f"problematic {backend}"
            check_call(run, problematic, {"x": x}, F32, where, context=no_fallback)
        assert capsys.readouterr().out == printed * 2, backend  # generated's, eager's


def test_layer_loop_prints_once_per_call_between_layers(
    capsys: pytest.CaptureFixture[str], triton_interpreter: None
) -> None:
    source = "examples/layer_loop.py::LayerLoop"
    torch.manual_seed(0)
    eager = LayerLoop()
    randomize_parameters(eager, 0)
    generated = exported(example_case(source, "cpu"))()
    copy_weights(eager, generated)
    cuda = variant_of(example_case(source, "cuda"))
    for seed in (0, 1):
        x = torch.randn(4, 32, generator=torch.Generator().manual_seed(seed))
        with torch.no_grad():
            eager(x)
            printed = capsys.readouterr().out
            # what layer 5 (of 0..7) gave: the print runs between the layers
            h = x
            for layer in eager.layers[:6]:
                h = layer(h)
            assert printed == f"{h.mean()!s}\n"
            where = "LayerLoop cpu"
            check_call(generated, eager, {"x": x}, F32, where, context=no_fallback)
            assert capsys.readouterr().out == printed * 2  # generated's, eager's
            run = functools.partial(cuda, generated)
            check_call(run, eager, {"x": x}, F32, "LayerLoop triton")
            # a tensor printed on the GPU (GPU mode) names its device
            out = capsys.readouterr().out.replace(", device='cuda:0'", "")
            assert out == printed * 2


# ------------------------------------------------------------ more graph-break cases

SOURCE = """
import warnings

import numpy as np
import torch
from torch import nn


def live_out(x):
    y = x.relu()
    n = y.sum().item()
    if n > 4.0:
        scale = 2.0
    else:
        scale = -1.0
    y.mul_(scale)
    return y.tanh()


def numpy_on_tensor(x):
    y = x.relu()
    z = np.cos(y.numpy())
    y.add_(torch.from_numpy(z))
    return y.tanh()


def try_except(x):
    y = x.relu()
    try:
        y.add_(torch.ones(3))
    except RuntimeError:
        y.mul_(3.0)
    return y.tanh()


def rebinds_in_fallback(x):
    y = x.relu()
    z = x.tanh()
    try:
        y = y.sum(dim=0)
        y.add_(y.max().item())
    except RuntimeError:
        pass
    w = y.exp() * 2.0
    z.add_(w)
    return z.sin()


def unknown_context(x):
    y = x.relu()
    with warnings.catch_warnings():
        y.mul_(2.0)
    return y.tanh()


def in_place_input(x):
    x.add_(1.0)
    return x * 2.0


def augmented_input(x):
    x += 1.0
    return x.exp()


def assert_positive(x):
    assert (x > 0).all(), "x must be positive"
    return x.sqrt()


def tolist_feeds_python(x):
    y = x.relu()
    rows = y.tolist()
    best = max(range(len(rows)), key=lambda i: sum(rows[i]))
    y[best] = 0.0
    return y.tanh()


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        print("inner", self.lin.out_features, y.shape)
        return y.relu()


class Outer(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()

    def forward(self, x):
        return self.inner(x) * 2.0
"""

X = torch.randn(2, 4)
TARGETS = {
    "live_out": {"x": X},
    "numpy_on_tensor": {"x": X},
    "try_except": {"x": X},
    "rebinds_in_fallback": {"x": X},
    "unknown_context": {"x": X},
    "in_place_input": {"x": X},
    "augmented_input": {"x": X},
    "assert_positive": {"x": X},
    "tolist_feeds_python": {"x": X},
    "Outer": {"x": X},
}
# the statement of each target that is fallback code, as the source shows it
BREAKS = {
    "live_out": ["n = y.sum().item()", "if n > 4.0:", "y.mul_(scale)"],
    "numpy_on_tensor": ["z = np.cos(y.numpy())", "y.add_(torch.from_numpy(z))"],
    "try_except": [],  # the body raises for these inputs: the handler is compiled
    "rebinds_in_fallback": ["try:", "w = y.exp() * 2.0", "z.add_(w)"],
    "unknown_context": ["with warnings.catch_warnings():"],
    # written back at the return (Note [Writes into the caller's tensors])
    "in_place_input": [],
    "augmented_input": [],
    "assert_positive": ["assert (x > 0).all()"],
    "tolist_feeds_python": ["rows = y.tolist()", "best = max(", "y[best] = 0.0"],
    "Outer": ['print("inner"'],
}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Compiled]:
    """All targets in one build (transpile must not raise on any of them)."""
    return compile_source(SOURCE, TARGETS, tmp_path_factory.mktemp("breaks"))


def inputs(name: str, seed: int) -> torch.Tensor:
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(seed))
    if name == "live_out":  # n = relu(x).sum() on both sides of 4.0
        return x.abs() + 1.0 if seed % 2 else x.abs() * 0.1
    if name == "assert_positive":
        return x.abs() + 0.1
    return x


# Sources that only run on the CPU: NumPy reads host memory, so eager raises for
# a CUDA tensor as the generated code does (GPU mode: tests/devices.py)
HOST_ONLY = {"numpy_on_tensor"}


def runners(c: Compiled) -> dict[str, Callable[..., object]]:
    """The exported API (CPU, C++ kernels) and the Triton variant, for a function."""
    if REAL_GPU and c.name in HOST_ONLY:
        return {"cpu": c}
    return {"cpu": c, "triton": c.cuda}


FUNCTIONS = [name for name in TARGETS if name != "Outer"]


@pytest.mark.parametrize("name", FUNCTIONS)
def test_function_matches_eager(
    name: str, compiled: dict[str, Compiled], triton_interpreter: None
) -> None:
    c = compiled[name]
    for backend, run in runners(c).items():
        for seed in (0, 1):
            x = {"x": inputs(name, seed)}
            where = f"{name} {backend} seed {seed}"
            # in-place updates of the caller's tensor happen as in eager
            with torch.no_grad():
                check_call(run, c.eager, x, F32, where, context=no_fallback)


@pytest.mark.parametrize("name", FUNCTIONS + ["Outer"])
def test_statements_become_fallback_code(
    name: str, compiled: dict[str, Compiled]
) -> None:
    """Each listed statement is a graph break of the header, at its file:line, and
    the variant calls its fallback function; a target that lists none has none."""
    c = compiled[name]
    header = c.module.__doc__
    file = Path(c.module._source.__file__).name
    for needle in BREAKS[name]:
        scope = "class Inner(" if name == "Outer" else f"def {name}("
        line = line_of(SOURCE, needle, after=scope)
        where = f"{file}:{line}: "
        assert re.search(
            rf"^ +{re.escape(where)}.+\[_fallback_\d+\]$", header, re.M
        ), f"{name}: no graph break at {where}\n{header}"
    for source in (c.cpu_source, c.cuda_source):
        assert source.count("_fallback_") >= len(BREAKS[name]), source
        assert BREAKS[name] or "_fallback_" not in source, source


@pytest.mark.parametrize(
    "name",
    ["live_out", "numpy_on_tensor", "rebinds_in_fallback", "tolist_feeds_python"],
)
def test_compiled_code_runs_after_the_breaks(
    name: str, compiled: dict[str, Compiled]
) -> None:
    """A tensor that fallback code updates in place keeps its meta (one it rebinds
    does not: `y = y.sum(dim=0)` in a `try`), so the code after is compiled."""
    src = compiled[name].cpu_source
    assert src.rindex("_cpp.function(") > src.rindex("_fallback_"), src


def test_assert_on_tensor_data_is_checked_at_run_time(
    compiled: dict[str, Compiled], triton_interpreter: None
) -> None:
    c = compiled["assert_positive"]
    bad = torch.tensor([[1.0, -1.0, 2.0, 3.0], [1.0, 1.0, 1.0, 1.0]])
    with pytest.raises(AssertionError, match="x must be positive"):
        c.eager(bad)
    for backend, run in runners(c).items():
        with torch.no_grad(), pytest.raises(AssertionError, match="x must be positive"):
            run(bad)
        assert backend


def test_print_in_submodule(
    compiled: dict[str, Compiled],
    capsys: pytest.CaptureFixture[str],
    triton_interpreter: None,
) -> None:
    c = compiled["Outer"]
    torch.manual_seed(0)
    eager = c.eager()
    randomize_parameters(eager, 0)
    generated = c.module.Outer()
    copy_weights(eager, generated)
    # the fallback function receives the submodule whose forward printed
    for source in (c.cpu_source, c.cuda_source):
        assert re.search(r"_fallback_\d+\(self\.inner, ", source), source
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        eager(x)
        printed = capsys.readouterr().out
        assert printed == "inner 4 torch.Size([2, 4])\n"
        check_call(generated, eager, {"x": x}, F32, "Outer cpu", context=no_fallback)
        assert capsys.readouterr().out == printed * 2  # generated's, eager's
        run = functools.partial(c.cuda, generated)
        check_call(run, eager, {"x": x}, F32, "Outer triton")
        assert capsys.readouterr().out == printed * 2


# ------------------------------------------------------------------------ regressions

BUGS = """
def returns_fallback_value(x):
    n = x.sum().item()
    return x.relu() * n


def reads_before_in_place_write(x):
    y = x.relu()
    x.add_(1.0)
    return y + x
"""


@pytest.fixture(scope="module")
def bugs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Compiled]:
    targets = {
        "returns_fallback_value": {"x": X},
        "reads_before_in_place_write": {"x": X},
    }
    return compile_source(BUGS, targets, tmp_path_factory.mktemp("bugs"))


def test_return_of_a_value_from_fallback_code(bugs: dict[str, Compiled]) -> None:
    c = bugs["returns_fallback_value"]
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        check_call(c.cpu, c.eager, {"x": x}, F32, "cpu")


def test_read_before_in_place_write_sees_the_old_value(
    bugs: dict[str, Compiled],
) -> None:
    c = bugs["reads_before_in_place_write"]
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        check_call(c.cpu, c.eager, {"x": x}, F32, "cpu")


def test_two_breaks_after_arithmetic_compile(tmp_path: Path) -> None:
    source = 'def two_prints(x):\n    y = x * 2.0\n    print("a")\n    print("b")\n'
    source += "    return y\n"
    compile_source(source, {"two_prints": {"x": X}}, tmp_path)
