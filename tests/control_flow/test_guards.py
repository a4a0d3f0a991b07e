"""Static conditions become guards; a failed guard falls back to eager, warning once.

`func(x, multiplier)` (the reference's Dynamo example) has a variant per multiplier;
each call picks its own, and an undeclared multiplier runs eager with one warning.
Then one test per guard kind violates exactly that guard and checks (a) the result is
eager's, (b) exactly one RuntimeWarning, naming the guard, over two identical calls.
Guards on the rest of the model's state (submodules, their classes, attributes and
hooks, globals): test_state_guards.py.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from examples.dynamo import func
from tests.compile_helpers import Compiled, compile_source, specs
from tests.control_flow.support import (
    assert_one_fallback,
    compile_variants,
    copy_weights,
    example_case,
    exported,
    fallback_messages,
    no_fallback,
    recorded_warnings,
    spy_on,
    variant_name,
    variant_of,
)
from tests.helpers import assert_close, generated_module
from transpiler.options import Variant

F32 = torch.float32
GRAD_GUARD = "not torch.is_grad_enabled() or not (x.requires_grad)"

# ---------------------------------------------------------------- func(x, multiplier)

FUNC = "examples/dynamo.py::func"


def test_each_multiplier_picks_its_variant(monkeypatch: pytest.MonkeyPatch) -> None:
    module = generated_module(example_case(FUNC, "cpu"))
    x = torch.randn(10, generator=torch.Generator().manual_seed(0))
    for position, multiplier in enumerate((2, 3)):
        variant = variant_of(example_case(FUNC, "cpu", position)).__name__
        calls = spy_on(monkeypatch, module, variant)
        with torch.no_grad(), no_fallback():
            actual = module.func(x, multiplier)
        assert len(calls) == 1, f"multiplier={multiplier} did not run {variant}"
        assert_close(actual, func(x, multiplier), F32, f"multiplier={multiplier}")


def test_other_multiplier_runs_eager_and_warns_once() -> None:
    module = generated_module(example_case(FUNC, "cpu"))
    x = torch.randn(10, generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), recorded_warnings() as record:
        first = module.func(x, 4)
        second = module.func(x, 4)
    assert_close(first, func(x, 4), F32, "multiplier=4")
    assert_close(second, func(x, 4), F32, "multiplier=4, again")
    two, three = (variant_of(example_case(FUNC, "cpu", i)) for i in (0, 1))
    guard = "type(multiplier) is int and multiplier == {}"
    message = assert_one_fallback(record, variant_name(two), guard.format(2))
    assert f"variant {variant_name(three)} needs {guard.format(3)}" in message


# ------------------------------------------------------------- one test per guard kind

SOURCE = """
import torch
from torch import nn


def pointwise(x):
    return (x * 2.0).relu()


def scaled(x, k):
    return x * k + 1.0


def with_bias(x, bias=None):
    if bias is None:
        return x.relu()
    return x.relu() + bias


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 2.0
        self.w = nn.Parameter(torch.ones(8))

    def forward(self, x):
        return (x * self.w).relu() * self.scale


class Tied(nn.Module):
    def __init__(self):
        super().__init__()
        self.a = nn.Linear(8, 8, bias=False)
        self.b = nn.Linear(8, 8, bias=False)
        self.b.weight = self.a.weight

    def forward(self, x):
        return self.b(self.a(x).relu())
"""
X = torch.randn(4, 8)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Compiled]:
    return compile_source(
        SOURCE,
        {
            "pointwise": {"x": X},
            "scaled": {"x": X, "k": 3},
            "with_bias": {"x": X, "bias": None},
            "Net": {"x": X},
            "Tied": {"x": X},
        },
        tmp_path_factory.mktemp("guards"),
    )


def randn(*shape: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def check_fallback(
    run: Callable[[], object],
    eager: Callable[[], object],
    variant: str,
    guard: str,
    grad: bool = False,
) -> None:
    """Two identical calls: eager's result both times, one warning naming `guard`."""
    expected = eager()
    with torch.set_grad_enabled(grad), recorded_warnings() as record:
        results = [run(), run()]
    for result in results:
        assert_close(result, expected, expected.dtype, guard)
    assert_one_fallback(record, variant, guard)


# each: target, the arguments (violating one guard of the cpu variant), that guard
LAYOUT = "x.shape == (4, 8) and x.is_contiguous()"
ON_CUDA = "isinstance(x, torch.Tensor) and x.is_cuda"
FUNCTION_CASES = {
    "dtype": (
        "pointwise",
        lambda: {"x": randn(4, 8).double()},
        "x.dtype == torch.float32",
    ),
    # an input's layout is one guard: its shape, and contiguous
    "shape": ("pointwise", lambda: {"x": randn(4, 9)}, LAYOUT),
    "stride": ("pointwise", lambda: {"x": randn(8, 4).t()}, LAYOUT),
    "scalar value": (
        "scaled",
        lambda: {"x": randn(4, 8), "k": 4},
        "type(k) is int and k == 3",
    ),
    "scalar type": (
        "scaled",
        lambda: {"x": randn(4, 8), "k": 3.0},
        "type(k) is int and k == 3",
    ),
    "None vs tensor": (
        "with_bias",
        lambda: {"x": randn(4, 8), "bias": randn(8, seed=1)},
        "bias is None",
    ),
}


# arguments that pass every guard of each function's variant
PASSING = {
    "pointwise": lambda: {"x": randn(4, 8, seed=2)},
    "scaled": lambda: {"x": randn(4, 8, seed=2), "k": 3},
    "with_bias": lambda: {"x": randn(4, 8, seed=2), "bias": None},
}


@pytest.mark.parametrize("kind", FUNCTION_CASES)
def test_function_guard(kind: str, compiled: dict[str, Compiled]) -> None:
    """Called first with arguments that pass, on new tensors each time (so the
    inputs' metadata is kept: Note [Inputs seen before]); then the arguments that
    fail one guard still fail it."""
    name, make_args, guard = FUNCTION_CASES[kind]
    c = compiled[name]
    with no_fallback():
        for _ in range(3):
            passing = PASSING[name]()
            assert_close(c(**passing), c.eager(**passing), F32, "passing")
    args = make_args()
    check_fallback(
        lambda: c(**args), lambda: c.eager(**args), variant_name(c.cpu), guard
    )


def test_autograd_guard(compiled: dict[str, Compiled]) -> None:
    """An input needing a gradient, with grad enabled: eager, so backward works."""
    c = compiled["pointwise"]
    x = randn(4, 8).requires_grad_()
    x_eager = x.detach().clone().requires_grad_()
    check_fallback(
        lambda: c(x), lambda: c.eager(x_eager), variant_name(c.cpu), GRAD_GUARD, True
    )
    c(x).sum().backward()
    c.eager(x_eager).sum().backward()
    assert_close(x.grad, x_eager.grad, F32, "gradient")
    with torch.no_grad(), no_fallback():  # under no_grad the variant may run
        c(x)


def net_pair(c: Compiled) -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    eager = c.eager()
    with torch.no_grad():
        eager.w.copy_(randn(8, seed=2))
    generated = c.module.Net()
    copy_weights(eager, generated)
    return eager, generated


MODULE_CASES = {
    "training": (lambda m: m.train(), "not self.training"),
    "module attribute": (lambda m: setattr(m, "scale", 3.0), "self.scale == 2.0"),
    "parameter layout": (
        lambda m: m.to(torch.float64),
        "self.w.dtype == torch.float32",
    ),
    # the same Parameter object, its data swapped after calls that passed
    "parameter data of another dtype": (
        lambda m: setattr(m.w, "data", m.w.data.double()),
        "self.w.dtype == torch.float32",
    ),
    "parameter data of another shape": (
        lambda m: setattr(m.w, "data", m.w.data[:1].clone()),
        "self.w.shape == (8,)",
    ),
    "parameter data with other strides": (
        lambda m: setattr(m.w, "data", m.w.data.repeat_interleave(2)[::2]),
        "self.w.stride() == (1,)",
    ),
}


@pytest.mark.parametrize("kind", MODULE_CASES)
def test_module_guard(kind: str, compiled: dict[str, Compiled]) -> None:
    change, guard = MODULE_CASES[kind]
    c = compiled["Net"]
    eager, generated = net_pair(c)
    x = randn(4, 8, seed=3)
    with torch.no_grad(), no_fallback():  # unchanged: the variant runs
        for _ in range(2):  # the second call checks what the first one saw
            assert_close(generated(x), eager(x), F32, "unchanged Net")
    change(eager)
    change(generated)
    check_fallback(lambda: generated(x), lambda: eager(x), variant_name(c.cpu), guard)


def test_tied_weights_guard(compiled: dict[str, Compiled]) -> None:
    """The variant reads a tied weight through one of its names; untying them
    (a fresh parameter for the other name) runs eager."""
    c = compiled["Tied"]
    torch.manual_seed(0)
    eager = c.eager()
    generated = c.module.Tied()
    copy_weights(eager, generated)
    x = randn(4, 8, seed=3)
    with torch.no_grad(), no_fallback():
        assert_close(generated(x), eager(x), F32, "tied")
    for m in (eager, generated):
        m.b.weight = torch.nn.Parameter(randn(8, 8, seed=4))
    guard = "self.b.weight is self.a.weight"
    check_fallback(lambda: generated(x), lambda: eager(x), variant_name(c.cpu), guard)


def test_device_guard(tmp_path: Path) -> None:
    """A variant for `--device cuda` only, called with CPU tensors: eager."""
    source = "def pointwise(x):\n    return (x * 2.0).relu()\n"
    module = compile_variants(
        source, "pointwise", [Variant(specs({"x": X}), "cuda")], tmp_path
    )
    assert hasattr(module, "_cuda_0") and not hasattr(module, "_cpu_0")
    # on the GPU, a tensor on another device than the current one fails too: the
    # kernels would launch on the current device
    guards = inspect.getsource(module._guards_cuda_0)
    assert guards.index("x.is_cuda") < guards.index(
        "x.get_device() == torch.cuda.current_device()"
    )
    x = randn(4, 8)
    check_fallback(
        lambda: module.pointwise(x),
        lambda: module._source.pointwise(x),
        "cuda_0",
        ON_CUDA,
    )


def test_warning_names_every_variant(compiled: dict[str, Compiled]) -> None:
    """The one warning says, per variant, the first guard that failed."""
    c = compiled["pointwise"]
    with torch.no_grad(), recorded_warnings() as record:
        c(randn(3, 8))
    (message,) = fallback_messages(record)
    cpu, cuda = variant_name(c.cpu), variant_name(c.cuda)
    assert f"variant {cpu} needs {LAYOUT}" in message, message
    assert f"variant {cuda} needs {ON_CUDA}" in message, message


def test_exported_example_guard_on_shape() -> None:
    """The checked-in ToyModule too: a batch of 3 is not the declared [2, 4]."""
    from examples.toy import ToyModule

    case = example_case("examples/toy.py::ToyModule", "cpu")
    torch.manual_seed(0)
    eager = ToyModule()
    generated = exported(case)()
    copy_weights(eager, generated)
    x = randn(3, 4)
    check_fallback(
        lambda: generated(x),
        lambda: eager(x),
        variant_name(variant_of(case)),
        "x.shape == (2, 4)",
    )


CONFIG_SOURCE = """
from dataclasses import dataclass

import torch
from torch import nn


@dataclass
class Config:
    scale: float = 2.0
    use_relu: bool = True


class Configured(nn.Module):
    def __init__(self):
        super().__init__()
        self.config = Config()

    def forward(self, x):
        y = x * self.config.scale
        if self.config.use_relu:
            y = y.relu()
        return y
"""


def test_config_object_attributes_are_guarded(tmp_path: Path) -> None:
    from tests.compile_helpers import compile_source

    c = compile_source(
        CONFIG_SOURCE, {"Configured": {"x": torch.randn(4, 8)}}, tmp_path
    )
    module = c["Configured"].module
    text = Path(module.__file__).read_text()
    # the model's table: its `config`'s values, as read (runtime_shim/modules.py)
    assert '"config.scale": 2.0' in text and '"config.use_relu": True' in text
    model = module.Configured().eval()
    x = torch.randn(4, 8)
    with torch.no_grad():
        model.config.use_relu = False  # the compiled path no longer applies
        with pytest.warns(RuntimeWarning, match=r"self\.config\.use_relu"):
            got = model(x)
    torch.testing.assert_close(got, x * 2.0)


FRESH_VIEW_SOURCE = """
import torch
from torch import nn


class View:
    def __init__(self, scale):
        self.scale = scale


class Box:
    def __init__(self, scale):
        self.scale = scale
        self.ready = True


class Settings:
    @property
    def view(self):  # a fresh object on every read
        return View(2.0)


class ReadsFreshViews(nn.Module):
    def __init__(self):
        super().__init__()
        self.config = Settings()

    def forward(self, x):
        for _ in range(ROUNDS):
            scale = self.config.view.scale  # the view dies after this line
            box = Box(scale)  # likely at the address the view had
            if box.ready:
                x = x * box.scale
        return x
"""


@pytest.mark.parametrize("rounds", [1, 4, 16])
def test_objects_made_in_the_call_are_never_read_as_model_state(
    rounds: int, tmp_path: Path
) -> None:
    """A property that gives a fresh object on each read (transformers'
    `config.per_layer_config`) is guarded as a path of the model; an object the
    call makes afterwards may take its address, and must not be mistaken for it:
    its attributes are the call's own values, never guards on the model."""
    source = FRESH_VIEW_SOURCE.replace("ROUNDS", str(rounds))
    c = compile_source(source, {"ReadsFreshViews": {"x": torch.randn(4, 8)}}, tmp_path)
    module = c["ReadsFreshViews"].module
    text = Path(module.__file__).read_text()
    assert ".ready" not in text and '"config.view.scale": 2.0' in text
    model = module.ReadsFreshViews().eval()
    x = torch.randn(4, 8)
    with torch.no_grad(), no_fallback():
        got = model(x)
    torch.testing.assert_close(got, x * 2.0**rounds)
