"""Values of parameters and buffers alone (Note [Values of parameters alone]): the
variant computes them on its first call, keeps them on the instance, and computes
them again once a tensor they were computed from is written in place, swapped
(`.data =`) or assigned anew. Every call is compared with eager, on both backends,
outputs and parameters and buffers after the call."""

from __future__ import annotations

import copy
import functools
from pathlib import Path

import pytest
import torch

from tests.compile_helpers import Compiled, compile_source
from tests.devices import REAL_GPU
from tests.helpers import build_pair, check_call
from transpiler.explain import report
from transpiler.options import Options, Target, TensorSpec, Variant
from transpiler.pipeline import compile_modules

SOURCE = """
import torch
import torch.nn.functional as F
from torch import nn


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(4, 8, 3, padding=1)
        self.c2 = nn.Conv2d(8, 8, 3, padding=1)

    def forward(self, x):
        return self.c2(self.c1(x).relu()).relu()


class CastWeight(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 8))

    def forward(self, x):
        return F.linear(x.to(torch.bfloat16), self.w.to(torch.bfloat16)).float()


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(8, 16))
        self.register_buffer("scale", torch.rand(16) + 0.5)

    def forward(self, x):
        return x @ (self.w * self.scale).t().contiguous().t()


class Returned(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(8))

    def forward(self, x):
        s = torch.softmax(self.w, 0)
        return x @ s, s


class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 8))
        self.register_buffer("calls", torch.zeros(()))

    def forward(self, x):
        self.calls.add_(1)
        return F.linear(x, self.w * 2.0)
"""

g = torch.Generator().manual_seed(0)


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g)


# class -> (its input, whether values of parameters alone are kept)
CASES = {
    "ConvNet": (randn(2, 4, 6, 6), True),  # channels-last copies of the weights
    "CastWeight": (randn(4, 8), True),  # a weight cast on every call
    "Scaled": (randn(4, 8), True),  # a parameter times a buffer
    "Returned": (randn(4, 8), False),  # the caller may write what it returns
    "Counter": (randn(4, 8), False),  # the call writes a buffer
}
DTYPES = {"CastWeight": torch.bfloat16}  # tolerances: it computes in bf16


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict[str, Compiled]:
    root: Path = tmp_path_factory.mktemp("hoist")
    return compile_source(SOURCE, {n: {"x": x} for n, (x, _) in CASES.items()}, root)


def in_place(module: torch.nn.Module) -> None:
    with torch.no_grad():
        for p in module.parameters():
            p.mul_(1.5)


def swap_data(module: torch.nn.Module) -> None:
    for p in module.parameters():
        p.data = p.data.flip(0) + 0.25


def assign_anew(module: torch.nn.Module) -> None:
    for name, p in list(module.named_parameters()):
        owner, _, leaf = name.rpartition(".")
        fresh = torch.nn.Parameter(p.detach() - 0.5)
        setattr(module.get_submodule(owner), leaf, fresh)


CHANGES = {"in place": in_place, ".data swapped": swap_data, "assigned": assign_anew}


def kept(module: torch.nn.Module, variant) -> tuple | None:
    entry = module.__dict__.get("_transpile_constants", {}).get(variant.__name__[1:])
    return None if entry is None else entry[3]


@pytest.mark.parametrize("backend", ["cpu", "cuda"])
@pytest.mark.parametrize("case", CASES)
def test_kept_values_follow_the_parameters(case, backend, compiled) -> None:
    c = compiled[case]
    x, hoisted = CASES[case]
    variant = getattr(c, backend)
    assert ("runtime_shim.constants(" in getattr(c, f"{backend}_source")) == hoisted
    eager, mine = build_pair(c.eager, getattr(c.module, case), {})
    device = "cpu"
    if backend == "cuda" and REAL_GPU:  # the instance stays on the GPU throughout
        variant, device = variant.__wrapped__, "cuda"
        mine.to(device)
    run = functools.partial(variant, mine)

    def same(where: str) -> None:
        check_call(run, eager, {"x": x}, DTYPES.get(case, torch.float32),
                   f"{case} {backend} {where}", modules=(mine, eager),
                   device=device)  # fmt: skip

    same("first call")
    first = kept(mine, variant)
    same("second call")
    if hoisted:
        assert first is not None and kept(mine, variant) is first  # not recomputed
    for what, change in CHANGES.items():
        change(eager)
        change(mine)
        same(f"after parameters were {what}")
        if hoisted:
            assert kept(mine, variant) is not first, what
            first = kept(mine, variant)
    copied = copy.deepcopy(mine)
    assert kept(copied, variant) is None  # a copy computes its own
    check_call(functools.partial(variant, copied), eager, {"x": x},
               DTYPES.get(case, torch.float32), f"{case} {backend} copy",
               modules=(copied, eager), device=device)  # fmt: skip


def test_explain_says_what_is_kept(tmp_path: Path) -> None:
    """`--explain` names, per variant, how many values are kept between calls and
    the memory they hold; a variant that keeps none says nothing of it. (A
    module name of its own: the loader keeps it imported for the process.)"""
    (tmp_path / "kept_model.py").write_text(SOURCE)
    variants = (Variant((("x", TensorSpec(torch.float32, (2, 4, 6, 6))),), "cpu"),)
    returned = (Variant((("x", TensorSpec(torch.float32, (4, 8))),), "cpu"),)
    options = Options(
        targets=(
            Target("kept_model.py::ConvNet", variants),
            Target("kept_model.py::Returned", returned),
        ),
        root=tmp_path,
    )
    text = report(compile_modules(options), options)
    conv, ret = text.split("kept_model.py::Returned")
    # the two 3x3 weights in channels-last: (8*4*9 + 8*8*9) floats
    kept = "kept between calls: 2 values of parameters and buffers alone (3456 bytes)"
    assert kept in conv, conv
    assert "kept between calls" not in ret, ret
