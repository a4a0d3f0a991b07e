"""Training variants with graph breaks (Note [Training through graph breaks] in
passes/parts.py): the compiled parts between fallback calls, each with its own
forward and backward, against eager autograd, on both backends (C++; Triton in its
interpreter).

Each case must compile (its guards pass, the call does not fall back, and the
header counts its compiled parts and its graph breaks), hold its work in kernels,
and match eager on the same weights, inputs and seed: the outputs, the gradients
of the parameters and of the inputs declared `:grad`, the parameters and buffers
after the call, and what the fallback code printed.
"""

from __future__ import annotations

import contextlib
import io
import os
import warnings
from functools import partial

if os.environ.get("TRANSPILE_TEST_DEVICE") != "cuda":  # see tests/devices.py
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch

from tests.compile_helpers import import_generated, unique_name
from tests.devices import REAL_GPU
from tests.helpers import randomize_parameters
from tests.training.compare import assert_step_matches
from transpiler.api import build
from transpiler.options import Options, Target, TensorSpec, Variant

SOURCE = '''
import torch
import torch.nn as nn
import torch.nn.functional as F


class PrintBetween(nn.Module):
    """A break that reads a compiled value: what follows does not depend on it,
    so all the compiled code is one part, run before the print."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 8)

    def forward(self, x):
        h = F.gelu(self.fc1(x))
        print("hidden", tuple(h.shape), round(float(h.detach().sum()), 1))
        return self.fc2(h).tanh()


class WrittenBetween(nn.Module):
    """Fallback code writes compiled values in place, and compiled code after it
    reads their new values: three parts, the last computing no gradient."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 8)

    def forward(self, x):
        h = F.gelu(self.fc1(x))
        mask = h > 0.1
        print("scaled", tuple(h.mul_(0.5).shape))
        out = self.fc2(h)
        print("flipped", tuple(mask.logical_not_().shape))
        return out, mask.sum(-1)


class DrawsBetween(nn.Module):
    """Fallback code draws random numbers between two dropouts: the second, which
    reads nothing the fallback code computes, still draws after it, as eager's."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(16, 32)
        self.drop = nn.Dropout(0.3)

    def forward(self, x):
        h = self.drop(F.gelu(self.fc1(x)))
        print("drew", round(torch.rand(1).item(), 4))
        return self.drop(self.fc2(x)) * h


class NormBetween(nn.Module):
    """A layer norm's parameters, and a parameter read by both parts: autograd
    adds up its gradients."""

    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(16)
        self.scale = nn.Parameter(torch.ones(16))
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        h = self.ln(x) * self.scale
        print("normed", tuple(h.add_(1.0).shape))
        return self.fc(h.relu()) * self.scale


class BranchBetween(nn.Module):
    """A branch on tensor data: a part before it, one in each path."""

    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(16, 32)
        self.fc2 = nn.Linear(32, 8)
        self.fc3 = nn.Linear(32, 8)

    def forward(self, x):
        h = F.gelu(self.fc1(x))
        if x.sum() > 0:
            y = self.fc2(h).tanh()
        else:
            print("negative")
            y = self.fc3(h * 2).sigmoid()
        return y * h.sum(-1, keepdim=True)


def logged_loss(x, y):
    z = (x * y).sin()
    print("z", tuple(z.shape))
    return (z * x).sum(-1)
'''

GRAD = "grad"
# case -> (inputs: name -> (shape, GRAD or None)), its parts in order ("T": with
# a backward, "-": computing no gradient), its graph breaks
CASES = {
    "PrintBetween": ({"x": ((4, 16), None)}, "T", 1),
    "WrittenBetween": ({"x": ((4, 16), GRAD)}, "TT-", 2),
    "DrawsBetween": ({"x": ((4, 16), None)}, "TT", 1),
    "NormBetween": ({"x": ((6, 16), GRAD)}, "TT", 1),
    "logged_loss": ({"x": ((3, 7), GRAD), "y": ((3, 7), GRAD)}, "T", 1),
}

BRANCH = ({"x": ((4, 16), GRAD)},)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("training_breaks")
    stem = unique_name("train_breaks")
    (root / f"{stem}.py").write_text(SOURCE)
    targets = []
    for name, (inputs, *_) in {**CASES, "BranchBetween": BRANCH}.items():
        specs = tuple(
            (n, TensorSpec(torch.float32, shape, grad=g == GRAD))
            for n, (shape, g) in inputs.items()
        )
        variants = tuple(Variant(specs, d, train=True) for d in ("cpu", "cuda"))
        targets.append(Target(f"{stem}.py::{name}", variants))
    options = Options(targets=tuple(targets), root=root)
    files = build(options)
    return import_generated(files, root, stem), files[f"{stem}.py"], options


def _on(device: str) -> str:
    return "cuda" if device == "cuda" and REAL_GPU else "cpu"


def _variant(module, name: str, device: str) -> tuple[str, str]:
    """The variant of `name` on `device`, and its line in the header."""
    lines = module.__doc__.split(f"{name} (")[1].splitlines()[1:3]
    for line in lines:
        variant, described = line.split()[:2]
        if described.rstrip(",") == device:
            return variant, line
    raise AssertionError(f"no {device} variant of {name} in the header")


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_parts_match_eager_autograd(generated, name: str, device: str) -> None:
    module, *_ = generated
    inputs_of, parts, breaks = CASES[name]
    variant, line = _variant(module, name, device)
    # compiled: the header counts its parts and breaks; each part that computes
    # gradients has its autograd.Function, and the parts launch kernels
    assert "forward and backward" in line and "runs the source" not in line, line
    assert f"{len(parts)} compiled part" in line, line
    assert f"{breaks} graph break" in line, line
    assert not line.split(":", 1)[1].lstrip().startswith("0 kernels"), line
    functions = vars(module)
    for i, kind in enumerate(parts):
        assert f"_{variant}_part_{i}" in functions
        assert (f"_{variant}_part_{i}_autograd" in functions) == (kind == "T"), i
    assert f"_{variant}_part_{len(parts)}" not in functions
    source, exported = getattr(module._source, name), getattr(module, name)
    if isinstance(source, type):
        torch.manual_seed(0)
        eager_mod = source()
        randomize_parameters(eager_mod, 0)
        mine_mod = exported()
        mine_mod.load_state_dict(eager_mod.state_dict())
        eager_mod, mine_mod = eager_mod.to(_on(device)), mine_mod.to(_on(device))
        eager_fn, self_ = eager_mod, (mine_mod,)
    else:
        eager_fn, eager_mod, mine_mod, self_ = source, None, None, ()
    gen = torch.Generator().manual_seed(1)
    inputs = {
        n: torch.randn(shape, generator=gen).to(_on(device)).requires_grad_(g == GRAD)
        for n, (shape, g) in inputs_of.items()
    }
    theirs = {
        n: t.detach().clone().requires_grad_(t.requires_grad) for n, t in inputs.items()
    }
    if _on(device) == device:  # a cuda variant in the interpreter takes CPU tensors
        assert functions[f"_guards_{variant}"](*self_, **inputs) is None
    run = functions[f"_{variant}"]
    printed = []
    for call, args, kwargs in ((eager_fn, (), theirs), (run, self_, inputs)):
        out = io.StringIO()
        torch.manual_seed(7)  # dropout and fallback draws: eager's order
        with contextlib.redirect_stdout(out):
            printed.append((call(*args, **kwargs), out.getvalue()))
    (want, want_text), (got, got_text) = printed
    assert got_text == want_text
    assert_step_matches(name, want, got, theirs, inputs, eager_mod, mine_mod)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_fifty_adamw_steps_through_a_break_follow_eager(generated, device: str) -> None:
    """Fifty steps of the generated AdamW on a model with graph breaks and dropout
    on both sides of a fallback that draws: eager's loss at every step."""
    module, *_ = generated
    source, exported = module._source.DrawsBetween, module.DrawsBetween
    torch.manual_seed(0)
    eager_mod = source().to(_on(device))
    mine_mod = exported().to(_on(device))
    mine_mod.load_state_dict(eager_mod.state_dict())
    variant, _ = _variant(module, "DrawsBetween", device)
    run = partial(vars(module)[f"_{variant}"], mine_mod)
    opts = [
        torch.optim.AdamW(eager_mod.parameters(), lr=1e-2),
        module.AdamW(mine_mod.parameters(), lr=1e-2),
    ]
    gen = torch.Generator().manual_seed(5)
    for step in range(50):
        x = torch.randn(4, 16, generator=gen).to(_on(device))
        losses = []
        for call, opt in zip((eager_mod, run), opts):
            torch.manual_seed(1000 + step)
            with contextlib.redirect_stdout(io.StringIO()):
                loss = (call(x) - 0.5).square().mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[0] == pytest.approx(losses[1], rel=1e-4), step
    for a, b in zip(mine_mod.parameters(), eager_mod.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_both_paths_of_a_branch_match_eager(generated, device: str) -> None:
    """Each path of a branch on tensor data (one with a graph break) against eager:
    the outputs and every gradient; the parameters of the path not taken get
    none, as in eager."""
    module, *_ = generated
    variant, line = _variant(module, "BranchBetween", device)
    assert "3 compiled parts" in line and "1 branch on tensor data" in line, line
    torch.manual_seed(0)
    eager_mod = module._source.BranchBetween().to(_on(device))
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(4, 16, generator=gen).to(_on(device))
    taken = set()
    for sign in (1, -1):
        mine_mod = module.BranchBetween().to(_on(device))
        mine_mod.load_state_dict(eager_mod.state_dict())
        eager_mod.zero_grad()
        xs = [(sign * x).abs().mul(sign).requires_grad_(True) for _ in range(2)]
        taken.add(bool(xs[0].sum() > 0))
        run = vars(module)[f"_{variant}"]
        outs = []
        for call, xi in ((eager_mod, xs[0]), (partial(run, mine_mod), xs[1])):
            text = io.StringIO()
            with contextlib.redirect_stdout(text):
                out = call(xi)
            out.square().sum().backward()
            outs.append((out, text.getvalue()))
        assert outs[0][1] == outs[1][1]
        torch.testing.assert_close(outs[1][0], outs[0][0], rtol=1e-4, atol=1e-5)
        torch.testing.assert_close(xs[1].grad, xs[0].grad, rtol=1e-4, atol=1e-5)
        for (p, a), (_, b) in zip(
            mine_mod.named_parameters(), eager_mod.named_parameters()
        ):
            assert (a.grad is None) == (b.grad is None), p
            if b.grad is not None:
                torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5)
    assert taken == {True, False}


def test_explain_lists_each_part(generated) -> None:
    """`--explain`, per part: its name, what it takes, the gradients its backward
    computes and what it saves; a part that computes none says so."""
    from transpiler.explain import report
    from transpiler.pipeline import compile_modules

    *_, options = generated
    text = report(compile_modules(options), options)
    block = text.split("WrittenBetween -> ")[1].split("variant cuda_")[0]
    lines = [line.strip() for line in block.splitlines()]
    at = lines.index("part cpu_1_part_0 (x):")
    assert (
        lines[at + 1] == "backward: compiled, the gradients of x, fc1.weight, fc1.bias"
    )
    assert lines[at + 2].startswith("saved for the backward: ")
    assert lines[at + 3].startswith("computed again in the backward: ")
    assert "part cpu_1_part_1 (h):" in lines
    assert "backward: compiled, the gradients of h, fc2.weight, fc2.bias" in lines
    assert "part cpu_1_part_2 (mask): no gradient, no backward" in lines
    assert sum(line.startswith("graph break: ") for line in lines) == 2


def test_no_exported_name_leaks_between_variants(generated) -> None:
    """Every call of a part names a function the module defines."""
    module, text, _ = generated
    for line in text.splitlines():
        line = line.strip()
        if "_part_" in line and "= _" in line and "(" in line:
            called = line.split("= ", 1)[1].split("(", 1)[0]
            assert called in vars(module), line


def test_a_break_in_a_training_variant_is_no_longer_a_reason_to_run_the_source(
    generated,
) -> None:
    module, *_ = generated
    assert "with a graph break" not in module.__doc__
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.manual_seed(0)
        m = module.PrintBetween()
        with contextlib.redirect_stdout(io.StringIO()):
            m(torch.randn(4, 16)).sum().backward()
    assert all(p.grad is not None for p in m.parameters())
