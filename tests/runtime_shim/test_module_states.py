"""runtime_shim.ModuleStates and ModelState: each kind of row passes on the model it
describes, and after each kind of change fails with the guard's text, as the checks
generated code used to write out would have (runtime_shim/modules.py)."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import runtime_shim
from runtime_shim.modules import ModelState, ModuleStates, self_path

ODD = "a'b\nc"  # a module's name that is no Python name, nor a safe string literal


class Config:
    def __init__(self) -> None:
        self.eps = 1e-5
        self.limit = math.nan
        self.act = None


class Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.ln = nn.LayerNorm(4)
        self.layers = nn.ModuleList([nn.Linear(4, 4), nn.Linear(4, 4)])
        self.shared = self.layers[0]
        self.config = Config()
        self.n_head = 2
        self.register_buffer("scale", torch.ones(4))
        # a module under a name that is no Python name, and one held as a plain
        # attribute only
        self.add_module(ODD, nn.ReLU())
        object.__setattr__(self, "side", nn.GELU())


ROWS = (
    (
        "",
        None,
        False,
        {"n_head": 2, "config.eps": 1e-5, "config.limit": math.nan, "config.act": None},
        {"children": ("ln", "layers", "shared", ODD)},
    ),
    (
        "ln",
        nn.LayerNorm,
        True,
        {"training": False, "eps": 1e-5, "elementwise_affine": True},
    ),
    ("layers", nn.ModuleList, False, {}, {"children": 2}),
    ("layers.0", "torch.nn.modules.linear:Linear", True, {"in_features": 4}),
    ("layers.1", "Linear", True, {}),
    ("shared", None, False, {}, {"same_as": "layers.0"}),
    (ODD, nn.ReLU, True, {}),
    ("side", nn.GELU, False, {}, {"held": "getattr"}),
)


def model() -> Block:
    return Block().eval()


CHANGES = {
    "n_head": (lambda m: setattr(m, "n_head", 3), "self.n_head == 2"),
    "config value": (
        lambda m: setattr(m.config, "eps", 1e-6),
        "self.config.eps == 1e-05",
    ),
    "NaN kept NaN": (
        lambda m: setattr(m.config, "limit", 1.0),
        "math.isnan(self.config.limit)",
    ),
    "None kept None": (
        lambda m: setattr(m.config, "act", "gelu"),
        "self.config.act is None",
    ),
    "children": (
        lambda m: m.add_module("extra", nn.Identity()),
        'tuple(self._modules) == ("ln", "layers", "shared", "a\'b\\nc")',
    ),
    "train mode": (lambda m: m.ln.train(), "not self.ln.training"),
    "truth value": (
        lambda m: setattr(m.ln, "elementwise_affine", False),
        "self.ln.elementwise_affine",
    ),
    "class replaced": (
        lambda m: setattr(m, "ln", nn.Identity()),
        "type(self.ln) is torch.nn.LayerNorm",
    ),
    "list length": (
        lambda m: m.layers.append(nn.Linear(4, 4)),
        "len(self.layers) == 2",
    ),
    "class imported when first checked": (
        lambda m: m.layers.__setitem__(0, nn.Identity()),
        "type(self.layers[0]) is torch.nn.modules.linear.Linear",
    ),
    "class by qualname": (
        lambda m: m.layers.__setitem__(1, nn.Identity()),
        'type(self.layers[1]).__qualname__ == "Linear"',
    ),
    "one module under two names": (
        lambda m: setattr(m, "shared", nn.Linear(4, 4)),
        "self.shared is self.layers[0]",
    ),
    "hooks": (
        lambda m: m.ln.register_forward_hook(lambda *a: None),
        "self.ln has no hooks",
    ),
    "a name that is no Python name": (
        lambda m: m.add_module(ODD, nn.Tanh()),
        f"type({self_path(ODD)}) is torch.nn.ReLU",
    ),
    "held as an attribute": (
        lambda m: object.__setattr__(m, "side", nn.ReLU()),
        "type(self.side) is torch.nn.GELU",
    ),
}


def test_the_model_as_described_passes() -> None:
    assert ModuleStates(*ROWS).mismatch(model()) is None


@pytest.mark.parametrize("kind", CHANGES)
def test_each_change_fails_with_its_guard(kind: str) -> None:
    change, text = CHANGES[kind]
    m = model()
    change(m)
    assert ModuleStates(*ROWS).mismatch(m) == text


def test_global_hooks_fail_a_table_of_called_modules() -> None:
    handle = nn.modules.module.register_module_forward_hook(lambda *a: None)
    try:
        assert ModuleStates(*ROWS).mismatch(model()) == "no global module hooks"
    finally:
        handle.remove()
    assert ModuleStates(*ROWS).mismatch(model()) is None


def test_a_class_that_cannot_be_imported_raises_for_the_guard_to_report() -> None:
    rows = (("ln", "no_such_module_anywhere:LayerNorm", True, {}),)
    m = model()
    m.ln = nn.Identity()  # not the cached class: the import is tried
    with pytest.raises(ModuleNotFoundError):
        ModuleStates(*rows).mismatch(m)


def test_rows_spell_attribute_paths_only() -> None:
    with pytest.raises(ValueError, match="not an attribute path"):
        ModuleStates(("ln", nn.LayerNorm, True, {"eps; import os": 1}))


def state(grad: str | None = "read") -> ModelState:
    layouts = runtime_shim.TensorLayouts(
        "cpu", (("self.ln.weight", torch.float32, (4,), (1,)),)
    )
    return ModelState(
        ModuleStates(*ROWS),
        {
            "_parameters": ("ln.weight", "layers.0.weight", "layers.0.bias"),
            "_buffers": ("scale",),
        },
        layouts=layouts,
        tied=(("shared.weight", "_parameters", "layers.0.weight"),),
        grad=grad,
    )


def test_model_state_passes_and_checks_tensors() -> None:
    m = model()
    x = torch.randn(4)
    with torch.no_grad():
        assert state().mismatch(m, x) is None
    m.layers[0].bias = None
    assert state().mismatch(m, x) == "self.layers[0].bias is not None"
    m = model()
    m.ln.weight.data = torch.ones(4, dtype=torch.float64)
    assert state().mismatch(m, x) == "self.ln.weight.dtype == torch.float32"
    m = model()
    del m._buffers["scale"]
    assert state().mismatch(m, x) == "self.scale is not None"


def test_tied_tensors_stay_tied() -> None:
    m = model()
    m.layers[0].weight = nn.Parameter(torch.randn(4, 4))  # `shared` is layers[0]
    with torch.no_grad():
        assert state().mismatch(m) is None
    rows = (*ROWS[:5], ("shared", nn.Linear, False, {}), *ROWS[6:])
    states = ModelState(
        ModuleStates(*rows),
        {"_parameters": ("layers.0.weight",)},
        tied=(("shared.weight", "_parameters", "layers.0.weight"),),
    )
    m.shared = nn.Linear(4, 4)
    with torch.no_grad():
        assert states.mismatch(m) == "self.shared.weight is self.layers[0].weight"


def test_grad() -> None:
    m = model()
    x = torch.randn(4)
    needs = "not torch.is_grad_enabled() or nothing it reads requires grad"
    assert state().mismatch(m, x) == needs  # the parameters require grad
    with torch.no_grad():
        assert state().mismatch(m, x) is None
    for p in m.parameters():
        p.requires_grad_(False)
    assert state().mismatch(m, x) is None
    assert state().mismatch(m, x.requires_grad_()) == needs
    m.layers[1].weight.requires_grad_()  # read by no kernel: "all" sees it
    assert state().mismatch(m, x.detach()) is None
    assert state("all").mismatch(m, x.detach()) == needs
