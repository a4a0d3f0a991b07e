"""Guards on the model's state beyond `self.training` (Note [State guards]).

One test per kind of change after construction: a submodule switched to train mode,
an attribute of a `torch.nn` layer, a tuple attribute or a module-level global, a
submodule replaced (another class, a `Linear` without bias, `Identity`), a hook.
Each builds the model, checks that the variant runs unchanged, makes the change on
an eager copy and on the generated model alike, and checks that two calls of the
generated model give eager's outputs and leave eager's parameters and buffers, with
exactly one fallback warning, which names the guard (CPU variant). The CUDA variant's
guard function is checked on the same model with inputs that pass its input guards
(`on_cuda`): it must name the same guard. Then: no guard function raises, whatever
the model's state.
"""

from __future__ import annotations

import contextlib
import inspect
import math
import os
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import torch
from torch import nn

import runtime_shim.warn
from tests.compile_helpers import Compiled, compile_source, unique_name
from tests.control_flow.support import (
    copy_weights,
    fallback_messages,
    no_fallback,
    recorded_warnings,
    variant_name,
)
from tests.helpers import assert_close

F32 = torch.float32

SOURCE = """
import math

import torch
import torch.nn.functional as F
from torch import nn

SCALE = 2.0
CONFIG = {"act": "relu", "shift": 1.0}
LIMIT = float("inf")


class LibraryLayers(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)
        self.act = nn.LeakyReLU(0.1)
        self.norm = nn.LayerNorm(8)
        self.drop = nn.Dropout(0.5)
        self.bn = nn.BatchNorm1d(8)
        self.relu = nn.ReLU()

    def forward(self, x):
        x = self.norm(self.act(self.fc(x)))
        return self.relu(self.bn(self.drop(x)))


class Conv(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv1d(4, 4, 3, padding=1)

    def forward(self, x):
        return self.conv(x).relu()


class StaticValues(nn.Module):
    def __init__(self):
        super().__init__()
        self.kernel = (2, 2)
        self.fill = float("nan")
        self.limit = float("inf")

    def forward(self, x):
        y = F.avg_pool2d(x, self.kernel) * SCALE
        if CONFIG["act"] == "relu":
            y = y.relu()
        y = y + CONFIG["shift"]
        if math.isnan(self.fill):
            y = y * 3.0
        if self.limit > 100.0 and LIMIT > 100.0:
            y = y - 1.0
        return y


class Inner(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 8)

    def forward(self, x):
        return self.fc(x).relu()


class OtherInner(Inner):
    def forward(self, x):
        return self.fc(x).tanh()


class Structure(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Inner()
        self.layers = nn.ModuleList([nn.Linear(8, 8), nn.Linear(8, 8)])
        self.shared = self.layers[0]
        self.act = nn.GELU()

    def forward(self, x):
        x = self.inner(x)
        for layer in self.layers:
            x = layer(x)
        return self.act(self.shared(x))


class WrittenState(nn.Module):
    # buffers that kernels only write, in place: a cache filled at positions and
    # a step count; neither is read by a kernel
    def __init__(self):
        super().__init__()
        self.register_buffer("keys", torch.zeros(2, 16, 8))
        self.register_buffer("steps", torch.zeros(2, 8))

    def forward(self, k, pos):
        self.keys.index_copy_(1, pos, k)
        self.steps.add_(1.0)
        return k * 2.0
"""
INPUTS = {
    "LibraryLayers": {"x": torch.randn(4, 8)},
    "Conv": {"x": torch.randn(2, 4, 8)},
    "StaticValues": {"x": torch.randn(1, 2, 4, 4)},
    "Structure": {"x": torch.randn(4, 8)},
    "WrittenState": {"k": torch.randn(2, 3, 8), "pos": torch.tensor([4, 0, 9])},
}


# the CPU variant, and on a machine with a GPU the CUDA one with real kernels
DEVICES = [
    "cpu",
    pytest.param(
        "cuda",
        marks=pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU"),
    ),
]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Compiled]:
    return compile_source(SOURCE, INPUTS, tmp_path_factory.mktemp("state_guards"))


# ------------------------------------------------------------------------- helpers


class OnCuda(torch.Tensor):
    """A CPU tensor that passes a CUDA variant's input guards (with
    `torch.cuda.current_device()` patched to -1, a CPU tensor's `get_device()`)."""

    @property
    def is_cuda(self) -> bool:
        return True


def randn(*shape: int, seed: int) -> torch.Tensor:
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def inputs_of(name: str, seed: int = 3) -> dict[str, torch.Tensor]:
    """Random floats of the example's shapes; integer inputs (positions) as given."""
    return {
        k: randn(*v.shape, seed=seed) if v.is_floating_point() else v.clone()
        for k, v in INPUTS[name].items()
    }


def pair(c: Compiled) -> tuple[nn.Module, nn.Module]:
    """The source model and the generated one, with the same (seeded) weights."""
    torch.manual_seed(0)
    eager = c.eager()
    generated = getattr(c.module, c.name)()
    copy_weights(eager, generated)
    return eager, generated


def needs(message: str, variant: str) -> str:
    """What the fallback warning says `variant` needs."""
    pattern = rf"variant {variant} needs (.*?)(?:; variant \w+ needs |$)"
    found = re.search(pattern, message)
    assert found, message
    return found.group(1)


def cuda_guard(
    c: Compiled, model: nn.Module, inputs: dict, monkeypatch: pytest.MonkeyPatch
) -> str | None:
    """The CUDA variant's guard function on `model`, its input guards passing."""
    guards = getattr(c.module, f"_guards_{variant_name(c.cuda)}")
    with monkeypatch.context() as patch:
        patch.setattr(torch.cuda, "current_device", lambda: -1)
        args = {k: v.as_subclass(OnCuda) for k, v in inputs.items()}
        with torch.no_grad():
            return guards(model, **args)


@dataclass(frozen=True)
class Change:
    """A change of state after construction, and the guard that catches it."""

    target: str  # the class in SOURCE
    guard: str  # a part of the guard the fallback warning names
    each: Callable[[nn.Module], Any] | None = None  # made on both models alike
    once: Callable[[ModuleType, contextlib.ExitStack], Any] | None = None  # globals
    # what the CUDA variant's guards name instead, where it differs: the model's
    # tensors stay on the CPU (`cuda_guard` passes only its inputs as CUDA ones)
    on_cuda: str | None = None


def check_change(
    c: Compiled, change: Change, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The variant of `device` runs on the model as built, and after `change` the
    model runs eager, with eager's outputs and state and one warning naming the
    guard. On the CPU, the CUDA variant runs too (Triton's interpreter), and its
    guard function names the guard as well."""
    eager, generated = (m.to(device) for m in pair(c))

    def inputs(seed: int = 3) -> dict[str, torch.Tensor]:
        return {k: v.to(device) for k, v in inputs_of(c.name, seed).items()}

    with torch.no_grad(), no_fallback():  # unchanged: the variant runs
        assert_close(generated(**inputs()), eager(**inputs()), F32, "as built")
        if device == "cpu" and os.environ.get("TRITON_INTERPRET") == "1":
            assert_close(c.cuda(generated, **inputs()), eager(**inputs()), F32, "cuda")
    with contextlib.ExitStack() as stack:
        for model in (eager, generated):
            torch.manual_seed(5)  # a new submodule gets the same weights in both
            if change.each is not None:
                change.each(model)
            model.to(device)
        if change.once is not None:
            change.once(c.module._source, stack)
        with torch.no_grad():
            expected = [eager(**inputs(seed)) for seed in (3, 4)]
            with recorded_warnings() as record:
                got = [generated(**inputs(seed)) for seed in (3, 4)]
        for i, (g, e) in enumerate(zip(got, expected)):
            assert_close(g, e, F32, f"call {i} after {change.guard}")
        state_e, state_g = eager.state_dict(), generated.state_dict()
        assert state_e.keys() == state_g.keys()
        for k in state_e:
            assert_close(state_g[k], state_e[k], state_e[k].dtype, f"{k} after")
        messages = fallback_messages(record)
        assert len(messages) == 1, messages
        variant = variant_name(c.cpu if device == "cpu" else c.cuda)
        # a class of the source is named by its module (`{source}` in the text)
        guard = change.guard.replace("{source}", c.module._source.__name__)
        assert guard in needs(messages[0], variant), messages[0]
        if device == "cpu":
            on_cuda = cuda_guard(c, generated, inputs(), monkeypatch)
            assert on_cuda is not None and (change.on_cuda or guard) in on_cuda


# ------------------------------------------------------------------------- the cases

LAYER_CHANGES = {
    "submodule train mode": Change(
        "LibraryLayers", "not self.bn.training", lambda m: m.bn.train()
    ),
    "LeakyReLU.negative_slope": Change(
        "LibraryLayers",
        "self.act.negative_slope == 0.1",
        lambda m: setattr(m.act, "negative_slope", 0.3),
    ),
    "LayerNorm.eps": Change(
        "LibraryLayers", "self.norm.eps == 1e-05", lambda m: setattr(m.norm, "eps", 0.5)
    ),
    "Dropout.p": Change(
        "LibraryLayers", "self.drop.p == 0.5", lambda m: setattr(m.drop, "p", 0.1)
    ),
    "ReLU.inplace": Change(
        "LibraryLayers",
        "not self.relu.inplace",
        lambda m: setattr(m.relu, "inplace", True),
    ),
    "Conv1d.padding": Change(
        "Conv", "self.conv.padding == (1,)", lambda m: setattr(m.conv, "padding", (2,))
    ),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", LAYER_CHANGES)
def test_library_layer_state_is_guarded(
    kind: str,
    device: str,
    compiled: dict[str, Compiled],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    change = LAYER_CHANGES[kind]
    check_change(compiled[change.target], change, device, monkeypatch)


def set_global(
    name: str, value: Any
) -> Callable[[ModuleType, contextlib.ExitStack], Any]:
    """A module-level global of the source changed (and restored after the test)."""

    def change(source: ModuleType, stack: contextlib.ExitStack) -> None:
        stack.callback(setattr, source, name, getattr(source, name))
        setattr(source, name, value)

    return change


def set_item(name: str, key: str, value: Any) -> Callable[..., Any]:
    """An entry of a global dict changed in place (and restored after the test)."""

    def change(source: ModuleType, stack: contextlib.ExitStack) -> None:
        table = getattr(source, name)
        stack.callback(table.__setitem__, key, table[key])
        table[key] = value

    return change


VALUE_CHANGES = {
    "tuple attribute": Change(
        "StaticValues", "self.kernel == (2, 2)", lambda m: setattr(m, "kernel", (1, 1))
    ),
    "NaN attribute": Change(
        "StaticValues", "math.isnan(self.fill)", lambda m: setattr(m, "fill", 0.0)
    ),
    "infinite attribute": Change(
        "StaticValues",
        'self.limit == float("inf")',
        lambda m: setattr(m, "limit", 5.0),
    ),
    "float global": Change(
        "StaticValues", "_source.SCALE == 2.0", once=set_global("SCALE", 3.0)
    ),
    "infinite global": Change(
        "StaticValues", '_source.LIMIT == float("inf")', once=set_global("LIMIT", 1.0)
    ),
    "dict global": Change(
        "StaticValues",
        '_source.CONFIG == {"act": "relu", "shift": 1.0}',
        once=set_item("CONFIG", "act", "none"),
    ),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", VALUE_CHANGES)
def test_attribute_and_global_values_are_guarded(
    kind: str,
    device: str,
    compiled: dict[str, Compiled],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Tuples, NaN and infinities of the model, and module-level globals of the
    source: all compared by value, each by a guard that evaluates (an infinity is
    `float("inf")`, a NaN is tested as NaN)."""
    change = VALUE_CHANGES[kind]
    check_change(compiled[change.target], change, device, monkeypatch)


def replace(name: str, make: Callable[[], nn.Module]) -> Callable[[nn.Module], Any]:
    """Submodule `name` replaced by a new one, in eval mode like the rest."""

    def change(m: nn.Module) -> None:
        owner, _, leaf = name.rpartition(".")
        setattr(m.get_submodule(owner), leaf, make().eval())

    return change


def other_inner(m: nn.Module) -> None:
    from_source = type(m.inner).__module__
    other = __import__(from_source, fromlist=["x"]).OtherInner()
    other.load_state_dict(m.inner.state_dict())
    m.inner = other


STRUCTURE_CHANGES = {
    "torch.nn layer replaced": Change(
        "Structure", "type(self.act) is torch.nn.GELU", replace("act", nn.Tanh)
    ),
    "Linear replaced by one without bias": Change(
        "LibraryLayers",
        "self.fc.bias is not None",
        replace("fc", lambda: nn.Linear(8, 8, bias=False)),
    ),
    "Linear replaced by Identity": Change(
        "LibraryLayers", "type(self.fc) is torch.nn.Linear", replace("fc", nn.Identity)
    ),
    "user module replaced": Change(
        "Structure", "type(self.inner) is {source}.Inner", other_inner
    ),
    "ModuleList appended to": Change(
        "Structure",
        "len(self.layers) == 2",
        lambda m: m.layers.append(nn.Linear(8, 8)),
    ),
    "shared module split": Change(
        "Structure",
        "self.shared is self.layers[0]",
        replace("shared", lambda: nn.Linear(8, 8)),
    ),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", STRUCTURE_CHANGES)
def test_submodule_identity_is_guarded(
    kind: str,
    device: str,
    compiled: dict[str, Compiled],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The class of every submodule the variant calls (a type, not an identity:
    the generated module runs on new instances), and the structure leading to it,
    checked before anything is read from it."""
    change = STRUCTURE_CHANGES[kind]
    check_change(compiled[change.target], change, device, monkeypatch)


def written(guard: str, name: str, make: Callable[[], torch.Tensor]) -> Change:
    """Buffer `name` of `WrittenState` replaced by another tensor."""
    return Change(
        "WrittenState",
        guard,
        lambda m: setattr(m, name, make()),
        on_cuda="self.keys.is_cuda",
    )


WRITTEN_CHANGES = {
    "written buffer longer": written(
        "self.keys.shape == (2, 16, 8)", "keys", lambda: torch.zeros(2, 32, 8)
    ),
    "written buffer transposed": written(
        "self.keys.stride() == (128, 8, 1)",
        "keys",
        lambda: torch.zeros(2, 8, 16).transpose(1, 2),
    ),
    # dense, so `.to("cuda")` keeps its strides (a slice would arrive contiguous)
    "written buffer permuted": written(
        "self.keys.stride() == (128, 8, 1)",
        "keys",
        lambda: torch.zeros(16, 2, 8).permute(1, 0, 2),
    ),
    "written buffer in double": written(
        "self.steps.dtype == torch.float32",
        "steps",
        lambda: torch.zeros(2, 8, dtype=torch.float64),
    ),
    "written buffer broadcast": written(
        "self.steps.shape == (2, 8)", "steps", lambda: torch.zeros(2, 1)
    ),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", WRITTEN_CHANGES)
def test_layouts_of_buffers_written_in_place_are_guarded(
    kind: str,
    device: str,
    compiled: dict[str, Compiled],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A buffer that kernels only write (`self.cache.index_copy_(...)`,
    `self.count.add_(1)`) is written at the positions of the layout it was
    compiled for: replaced by a longer, strided or double one, the variant would
    write past it or misplace its values, so its layout is guarded like that of a
    tensor a kernel reads. Two cases fail the same guard: each gets its warning."""
    monkeypatch.setattr(runtime_shim.warn, "_SEEN", set())
    change = WRITTEN_CHANGES[kind]
    check_change(compiled[change.target], change, device, monkeypatch)


def double_output(m: nn.Module, args: tuple, output: torch.Tensor) -> torch.Tensor:
    return output * 2


def double_input(m: nn.Module, args: tuple) -> tuple:
    return (args[0] * 2,)


def global_hook(source: ModuleType, stack: contextlib.ExitStack) -> None:
    handle = nn.modules.module.register_module_forward_hook(double_output)
    stack.callback(handle.remove)


HOOK_CHANGES = {
    "forward hook on a layer": Change(
        "Structure",
        "self.inner.fc has no hooks",
        lambda m: m.inner.fc.register_forward_hook(double_output),
    ),
    "forward pre-hook on a layer": Change(
        "Structure",
        "self.act has no hooks",
        lambda m: m.act.register_forward_pre_hook(double_input),
    ),
    "forward hook on a user module": Change(
        "Structure",
        "self.inner has no hooks",
        lambda m: m.inner.register_forward_hook(double_output),
    ),
    "backward hook on a layer": Change(
        "Structure",
        "self.layers[1] has no hooks",
        lambda m: m.layers[1].register_full_backward_hook(lambda *args: None),
    ),
    "global forward hook": Change(
        "Structure", "no global module hooks", once=global_hook
    ),
}


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("kind", HOOK_CHANGES)
def test_hooks_are_guarded(
    kind: str,
    device: str,
    compiled: dict[str, Compiled],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Eager calls the hooks of every module it calls; the variant calls none."""
    change = HOOK_CHANGES[kind]
    check_change(compiled[change.target], change, device, monkeypatch)


def test_hooks_on_the_model_itself_need_no_fallback(
    compiled: dict[str, Compiled],
) -> None:
    """`nn.Module.__call__` runs the model's own hooks around the generated forward
    as around the source's."""
    eager, generated = pair(compiled["Structure"])
    for m in (eager, generated):
        m.register_forward_hook(double_output)
        m.register_forward_pre_hook(double_input)
    x = inputs_of("Structure")["x"]
    with torch.no_grad(), no_fallback():
        assert_close(generated(x), eager(x), F32, "hooked model")


def test_guards_never_raise(compiled: dict[str, Compiled]) -> None:
    """Whatever state the model is in, each guard function returns the text of a
    guard that fails; it does not raise."""
    states: list[tuple[str, Callable[[nn.Module], Any]]] = [
        ("LibraryLayers", lambda m: m._modules.pop("fc")),
        ("LibraryLayers", lambda m: setattr(m, "fc", None)),
        ("LibraryLayers", lambda m: m.fc._parameters.pop("bias")),
        ("LibraryLayers", lambda m: delattr(m.norm, "eps")),
        ("LibraryLayers", lambda m: setattr(m.norm, "eps", torch.ones(3))),
        ("Structure", lambda m: setattr(m, "layers", nn.ModuleList())),
        ("Structure", lambda m: m.layers._modules.pop("1")),
        ("Structure", lambda m: setattr(m, "inner", nn.Identity())),
        ("StaticValues", lambda m: setattr(m, "kernel", None)),
        ("StaticValues", lambda m: delattr(m, "limit")),
        ("StaticValues", lambda m: setattr(m, "limit", torch.ones(2))),
    ]
    for name, change in states:
        c = compiled[name]
        _, model = pair(c)
        change(model)
        for fn in (c.cpu, c.cuda):
            guards = getattr(c.module, f"_guards_{variant_name(fn)}")
            with torch.no_grad():
                failed = guards(model, **inputs_of(name))
            assert isinstance(failed, str), (name, inspect.getsource(change))


def test_guards_read_each_module_once(
    compiled: dict[str, Compiled], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model's modules are checked by one table, which reads each through its
    parent's `_modules`, once: no `nn.Module.__getattr__` per check (a microsecond
    each), and nothing of the model read in the guard function itself."""
    c = compiled["Structure"]
    name = variant_name(c.cpu)
    text = inspect.getsource(getattr(c.module, f"_guards_{name}"))
    assert "_modules" not in text and "self.inner" not in text, text
    assert f"return _MODEL_{name}.mismatch(self, x)" in text, text
    table = getattr(c.module, f"_MODULES_{c.name}")
    names = [row.name for row in table.rows]
    assert names.count("layers") == 1 and names.index("layers") < names.index(
        "layers.0"
    )
    model = getattr(c.module, c.name)().eval()
    reads = []
    get = dict.get

    class Counted(dict):
        def get(self, key, default=None):
            reads.append(key)
            return get(self, key, default)

    model._modules = Counted(model._modules)
    guards = getattr(c.module, f"_guards_{name}")
    with torch.no_grad():
        failed = guards(model, inputs_of(c.name, 3)["x"])
    assert failed is None, failed
    assert reads.count("layers") == 1, reads
    assert not math.isnan(0.0)  # `math` is used by the guard texts, not the tests


OTHER_MODULE = """
import torch
from torch import nn

FACTOR = 3.0


class Scale(nn.Module):
    def forward(self, x):
        return x * FACTOR
"""
USES_OTHER_MODULE = """
import torch
from torch import nn

from {other} import Scale

SHIFT = 1.0


def shifted(x):
    return x + SHIFT


class UsesOther(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = Scale()

    def forward(self, x):
        return self.scale(x).relu()
"""


def test_globals_of_other_modules_and_functions_are_guarded(tmp_path: Path) -> None:
    """A global of the target's own module reads as `_source.SHIFT`, and so does a
    class it imports; a global of another module reads through that module, which
    the guard function imports."""
    other = unique_name("other")
    (tmp_path / f"{other}.py").write_text(OTHER_MODULE)
    x = randn(4, 8, seed=3)
    compiled = compile_source(
        USES_OTHER_MODULE.format(other=other),
        {"shifted": {"x": x}, "UsesOther": {"x": x}},
        tmp_path,
    )
    c, f = compiled["UsesOther"], compiled["shifted"]
    text = inspect.getsource(getattr(c.module, f"_guards_{variant_name(c.cpu)}"))
    assert f"import {other}\n" in text, text
    assert f"{other}.FACTOR == 3.0" in text, text
    table = getattr(c.module, f"_MODULES_{c.name}")  # classes, by identity
    assert [row.cls for row in table.rows if row.name == "scale"] == [
        c.module._source.Scale
    ]
    model = getattr(c.module, c.name)().eval()
    with torch.no_grad(), no_fallback():
        assert_close(model(x), (x * 3.0).relu(), F32, "as built")
        assert_close(f(x), x + 1.0, F32, "as built")
    helper = sys.modules[other]
    for module, name, value, call, expected in (
        (helper, "FACTOR", 5.0, lambda: model(x), (x * 5.0).relu()),
        (c.module._source, "SHIFT", 2.0, lambda: f(x), x + 2.0),
    ):
        with contextlib.ExitStack() as stack:
            stack.callback(setattr, module, name, getattr(module, name))
            setattr(module, name, value)
            with torch.no_grad(), recorded_warnings() as record:
                assert_close(call(), expected, F32, f"{name} = {value}")
            (message,) = fallback_messages(record)
            where = other if module is helper else "_source"
            assert f"{where}.{name} == " in message, message
