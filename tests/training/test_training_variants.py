"""Training variants (`train = true`): the generated forward and backward against eager
autograd, on both backends (C++; Triton in its interpreter).

Each case is built for training on cpu and cuda, imported, and called through the
exported module (its guards, then the variant) with grad enabled and the module in
train mode. The variant must run (its guards pass, nothing falls back), and then
match eager on the same weights and inputs: the outputs, the gradient of every
parameter and of every input declared `:grad`, and the parameters and buffers after
the call. A loop of SGD steps checks that gradients and in-place updates of the
parameters between calls give eager's losses step after step.
"""

from __future__ import annotations

import contextlib
import os
import re
import warnings
from functools import partial
from pathlib import Path

if os.environ.get("TRANSPILE_TEST_DEVICE") != "cuda":  # see tests/devices.py
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel

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


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(32)
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, 32)

    def forward(self, x):
        return x + self.fc2(F.gelu(self.fc1(self.ln(x))))


class DropMlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(32)
        self.fc1 = nn.Linear(32, 64)
        self.fc2 = nn.Linear(64, 32)
        self.drop = nn.Dropout(0.2)

    def forward(self, x):
        h = self.drop(F.gelu(self.fc1(self.ln(x))))
        return x + self.drop(self.fc2(h))


class GatedRms(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(48))
        self.proj = nn.Linear(48, 48, bias=False)

    def forward(self, x, gate):
        rms = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.proj(rms * self.weight * F.silu(gate))


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(32, 96)
        self.out = nn.Linear(32, 32)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(x).split(c, dim=2)
        q, k, v = (z.view(b, t, 4, 8).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, t, c))


class Heads(nn.Module):
    """Two outputs: logits (differentiable) and their argmax (not)."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 10)
        self.register_buffer("scale", torch.full((10,), 0.5))

    def forward(self, x):
        logits = torch.tanh(self.fc(x)) * self.scale
        return logits.log_softmax(-1), logits.argmax(-1)


class DropAttention(nn.Module):
    """Attention with dropout, as transformers' models call it in training."""

    def __init__(self):
        super().__init__()
        self.qkv = nn.Linear(32, 96)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (
            z.view(b, t, 4, 8).transpose(1, 2) for z in self.qkv(x).split(c, dim=2)
        )
        causal = F.scaled_dot_product_attention(q, k, v, dropout_p=0.2, is_causal=True)
        full = F.scaled_dot_product_attention(q, k * 2, v, dropout_p=0.1, scale=0.3)
        return causal + full


class MaskedDropAttention(DropAttention):
    """Attention with a mask and dropout, which no fused kernel draws here."""

    def forward(self, x, mask):
        b, t, c = x.shape
        q, k, v = (
            z.view(b, t, 4, 8).transpose(1, 2) for z in self.qkv(x).split(c, dim=2)
        )
        return F.scaled_dot_product_attention(q, k, v, mask, dropout_p=0.1)


class LmLoss(nn.Module):
    """A language model's loss: an embedding with a padding index, an output
    layer tied to it, and cross-entropy with an ignored target."""

    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(40, 16, padding_idx=1)
        self.ln = nn.LayerNorm(16)

    def forward(self, ids, labels):
        logits = self.ln(self.wte(ids)) @ self.wte.weight.t()
        loss = F.cross_entropy(logits.flatten(0, 1), labels.flatten(), ignore_index=3)
        return loss, logits


class DropPath(nn.Module):
    """timm's drop path: a fresh tensor filled in place by `bernoulli_`."""

    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 16)

    def forward(self, x):
        keep = x.new_empty((x.shape[0], 1)).bernoulli_(0.7)
        keep.div_(0.7)
        return x + self.fc(x).relu() * keep


def loss_fn(x, y):
    return ((x.sin() * y).sum(-1) ** 2).mean()
'''

GRAD = "grad"  # an input whose gradient is computed (`:grad`)
CASES = {
    "Mlp": {"x": ((4, 8, 32), GRAD)},
    "DropMlp": {"x": ((4, 8, 32), GRAD)},
    "GatedRms": {"x": ((6, 48), None), "gate": ((6, 48), None)},
    "Attention": {"x": ((2, 8, 32), GRAD)},
    "Heads": {"x": ((5, 16), None)},
    "loss_fn": {"x": ((3, 7), GRAD), "y": ((3, 7), GRAD)},
    "DropAttention": {"x": ((2, 8, 32), GRAD)},
    "MaskedDropAttention": {"x": ((2, 8, 32), GRAD), "mask": ((8, 8), None)},
    "DropPath": {"x": ((8, 16), GRAD)},
    "LmLoss": {"ids": ((4, 8), 12), "labels": ((4, 8), 8)},
}
# an int in place of GRAD: an input of indices below it


def _spec(shape, grad) -> TensorSpec:
    if isinstance(grad, int):
        return TensorSpec(torch.int64, shape)
    return TensorSpec(torch.float32, shape, grad=grad == GRAD)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory):
    root: Path = tmp_path_factory.mktemp("training")
    stem = unique_name("train_src")
    (root / f"{stem}.py").write_text(SOURCE)
    targets = []
    for name, inputs in CASES.items():
        specs = tuple((n, _spec(shape, g)) for n, (shape, g) in inputs.items())
        variants = tuple(Variant(specs, d, train=True) for d in ("cpu", "cuda"))
        targets.append(Target(f"{stem}.py::{name}", variants))
    files = build(Options(targets=tuple(targets), root=root))
    return import_generated(files, root, stem), files[f"{stem}.py"]


def _on(device: str) -> str:
    """Where a variant for `device` runs here: a cuda variant runs on the GPU with
    TRANSPILE_TEST_DEVICE=cuda, else on CPU tensors in Triton's interpreter."""
    return "cuda" if device == "cuda" and REAL_GPU else "cpu"


def _inputs(name: str, seed: int, device: str = "cpu") -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(seed)
    out = {}
    for n, (shape, grad) in CASES[name].items():
        if isinstance(grad, int):
            out[n] = torch.randint(0, grad, shape, generator=gen).to(_on(device))
            continue
        t = torch.randn(shape, generator=gen).to(_on(device))
        out[n] = t.requires_grad_(grad == GRAD)
    return out


def _pair(module, name: str, device: str = "cpu"):
    """The eager model and the generated one, with the same random weights."""
    source = getattr(module._source, name)
    exported = getattr(module, name)
    if not isinstance(source, type):
        return source, exported, None, None
    torch.manual_seed(0)
    eager = source()
    randomize_parameters(eager, 0)
    mine = exported()
    mine.load_state_dict(eager.state_dict())
    eager, mine = eager.to(_on(device)), mine.to(_on(device))
    return eager.train(), mine.train(), eager, mine


@pytest.mark.parametrize("name", list(CASES))
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_gradients_match_eager_autograd(generated, name: str, device: str) -> None:
    module, _text = generated
    eager_fn, _mine_fn, eager_mod, mine_mod = _pair(module, name, device)
    variant = _variant_of(module, name, device)
    inputs = _inputs(name, 1, device)
    theirs = {
        n: t.detach().clone().requires_grad_(t.requires_grad) for n, t in inputs.items()
    }
    self_ = (mine_mod,) if mine_mod is not None else ()
    # the variant runs: its guards pass (a cuda variant's in Triton's interpreter
    # takes CPU tensors, which its device guard refuses), and it computes the call
    guards = vars(module)[f"_guards_{variant}"]
    if _on(device) == device:
        assert guards(*self_, **inputs) is None
    run = vars(module)[f"_{variant}"]
    torch.manual_seed(7)  # dropout: the same masks from the same seed
    with _eager_attention(name):
        want = eager_fn(**theirs)
    torch.manual_seed(7)
    got = run(*self_, **inputs)
    assert_step_matches(name, want, got, theirs, inputs, eager_mod, mine_mod)


def _eager_attention(name: str):
    """Attention with dropout is the memory-efficient kernel on a GPU, eager's
    pick there for f32, and elsewhere PyTorch's math path with `native_dropout`
    (README, Training). Eager draws the same masks on the CPU; with a mask on a
    GPU it would run the memory-efficient kernel, drawing its own way."""
    if name != "MaskedDropAttention":
        return contextlib.nullcontext()
    return sdpa_kernel(SDPBackend.MATH)


def _variant_of(module, name: str, device: str) -> str:
    """The training variant of target `name` on `device`: named in the header."""
    header = module.__doc__
    lines = header.split(f"{name} (")[1].splitlines()[1:3]
    for line in lines:
        variant, described = line.split()[:2]
        if described.rstrip(",") == device:
            assert f"_{variant}_autograd" in vars(module), variant
            return variant
    raise AssertionError(f"no {device} variant of {name} in the header")


def test_the_header_and_the_autograd_class_say_what_is_saved(generated) -> None:
    module, text = generated
    assert "cpu, train: x=f32[4,8,32]:grad" in module.__doc__
    doc = vars(module)["_cpu_0_autograd"].__doc__
    assert "its forward saves" in doc and "computes" in doc
    assert "def _cpu_0_backward(self, " in text
    assert "graph break" not in module.__doc__.split("Graph breaks")[0]


def test_attention_saves_no_attention_matrix(generated) -> None:
    """Attention is the device's fused kernel in both halves (Note [Attention in
    the joint graph]): its backward reads the rows' logsumexp, not the matrix."""
    _, text = generated
    assert "torch.ops.aten._scaled_dot_product_flash_attention_for_cpu.default(" in text
    assert "runtime_shim.attention(" in text
    assert "runtime_shim.attention_backward(" in text
    saved = [line for line in text.splitlines() if "its forward saves" in line]
    assert saved


def test_cuda_attention_draws_its_dropout_in_the_fused_kernel(generated) -> None:
    """On cuda the memory-efficient kernel draws attention's dropout (both calls
    of DropAttention), its backward reading the seed and offset it drew with; a
    mask keeps the math path there, and the CPU's kernel takes no dropout."""
    _, text = generated
    calls = {
        m.group(1): " ".join(m.group(2).split())
        for m in re.finditer(r"def (_\w+_forward)\((.*?)\n\n\n", text, re.S)
    }
    names = [n for n in calls if "runtime_shim.attention(" in calls[n]]
    drawn = [n for n in names if re.search(r"None, True, 0\.[12],", calls[n])]
    assert len(drawn) == 1 and drawn[0].startswith("_cuda_"), names
    assert calls[drawn[0]].count("runtime_shim.attention(") == 2
    assert "native_dropout" not in calls[drawn[0]]
    written_out = [n for n in calls if "_safe_softmax" in calls[n]]
    assert sorted(n.split("_")[1] for n in written_out) == ["cpu", "cpu", "cuda"]


def test_cross_entropy_backward_is_a_select_in_a_kernel(generated) -> None:
    """nll_loss's backward, a scatter of one element per row, is a select in the
    kernel of the log-softmax's backward (Note [Scatters of one element per row]):
    no zero-filled matrix of the logits' size, no extern call; the targets are
    checked once, where the forward reads them."""
    module, text = generated
    for device in ("cpu", "cuda"):
        variant = _variant_of(module, "LmLoss", device)
        backward = text.split(f"def _{variant}_backward(")[1].split("\ndef ")[0]
        forward = text.split(f"def _{variant}_forward(")[1].split("\ndef ")[0]
        assert "nll_loss_backward" not in backward and "scatter" not in backward
        assert "zeros" not in backward and "_assert_async" not in backward
        assert forward.count("Target out of bounds") == 1, forward


def test_a_tied_embedding_adds_its_rows_into_the_output_layers_gradient(
    generated,
) -> None:
    """The embedding's gradient is added into the tied output layer's, in place
    (Note [Tied embeddings]): no table of its own, no sum of two tables, no copy
    of the matmul's result; a kernel adds the rows (Note [Scatters])."""
    module, text = generated
    for device in ("cpu", "cuda"):
        variant = _variant_of(module, "LmLoss", device)
        backward = text.split(f"def _{variant}_backward(")[1].split("\ndef ")[0]
        assert "embedding_dense_backward" not in backward, backward
        assert "torch.ops.aten.index_put" not in backward, backward
        assert "fused_copy" not in backward, backward
        adds = re.findall(r"\w+_fused_index_put_\d+\W", backward)
        assert len(adds) == 1, backward


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("used", ["loss", "logits", "both"])
def test_outputs_the_loss_does_not_read_get_no_gradient_filled(
    generated, monkeypatch, device: str, used: str
) -> None:
    """A model returning its loss and its logits, differentiated through the loss
    alone, runs the backward of the loss alone (Note [The backward of a loss
    alone]): autograd passes the logits' gradient as None, nothing fills it, and
    the gradients are eager's. Through the logits alone (the loss's gradient then
    zeros) or both, the full backward runs."""
    module, text = generated
    _, _, eager_mod, mine_mod = _pair(module, "LmLoss", device)
    variant = _variant_of(module, "LmLoss", device)
    inputs = _inputs("LmLoss", 3, device)
    backward = text.split(f"def _{variant}_loss_backward(")[1].split("\ndef ")[0]
    assert "tangent_1" not in backward  # the logits' gradient: zero, not read
    calls = []
    for name in (f"_{variant}_backward", f"_{variant}_loss_backward"):
        original = vars(module)[name]

        def counted(*args, name=name, original=original):
            calls.append(name)
            return original(*args)

        monkeypatch.setitem(vars(module), name, counted)
    run = vars(module)[f"_{variant}"]
    for outputs in (eager_mod(**inputs), run(mine_mod, **inputs)):
        loss, logits = outputs
        parts = {"loss": loss, "logits": logits.sum(), "both": loss + logits.sum()}
        parts[used].backward()
    want = f"_{variant}_loss_backward" if used == "loss" else f"_{variant}_backward"
    assert calls == [want]
    named = zip(mine_mod.named_parameters(), eager_mod.named_parameters())
    for (p, a), (_, b) in named:
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5, msg=p)


def test_explain_names_the_backward_of_the_loss_alone(tmp_path: Path) -> None:
    from transpiler.explain import report
    from transpiler.pipeline import compile_modules

    stem = unique_name("train_src")
    (tmp_path / f"{stem}.py").write_text(SOURCE)
    specs = tuple((n, _spec(*shape_grad)) for n, shape_grad in CASES["LmLoss"].items())
    target = Target(f"{stem}.py::LmLoss", (Variant(specs, "cpu", train=True),))
    options = Options(targets=(target,), root=tmp_path)
    text = report(compile_modules(options), options)
    assert "a second backward for the loss alone (tangent_0)" in text, text


@pytest.mark.parametrize(
    ("bad", "value"), [("ids", 40), ("ids", -1), ("labels", 40), ("labels", -2)]
)
def test_an_index_out_of_range_raises_as_eager(generated, bad, value) -> None:
    """The forward checks its indices before the joint decomposes the ops that
    read them (an embedding's, the loss's targets): the error eager raises, of
    its type. On a GPU the check is a device-side assert, which ends the CUDA
    context, so there only the CPU variant is called."""
    module, _ = generated
    devices = ("cpu",) if REAL_GPU else ("cpu", "cuda")
    for device in devices:
        eager_fn, _, _, mine_mod = _pair(module, "LmLoss", device)
        inputs = _inputs("LmLoss", 2, device)
        inputs[bad][1, 2] = value
        with pytest.raises((IndexError, RuntimeError)) as eager_error:
            eager_fn(**inputs)
        run = vars(module)[f"_{_variant_of(module, 'LmLoss', device)}"]
        with pytest.raises(eager_error.type, match="out of"):
            run(mine_mod, **inputs)


def test_eval_mode_and_no_grad_run_the_source(generated) -> None:
    """A training variant is for train mode with grad enabled: in eval mode, or
    under no_grad, its guards fail and (no other variant) the source runs."""
    module, _ = generated
    _, _mine_fn, _eager_mod, mine_mod = _pair(module, "Mlp")
    x = _inputs("Mlp", 3)["x"]
    guards = vars(module)["_guards_cpu_0"]
    assert guards(mine_mod, x) is None
    with torch.no_grad():
        assert "torch.is_grad_enabled()" in guards(mine_mod, x)
    assert guards(mine_mod, x.detach()) == "x.requires_grad"
    mine_mod.eval()
    assert guards(mine_mod, x) == "self.training"
    mine_mod.train()
    mine_mod.fc1.weight.requires_grad_(False)
    assert "require grad" in guards(mine_mod, x)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_fifty_sgd_steps_with_dropout_follow_eager(generated, device: str) -> None:
    """Fifty steps of SGD with momentum, dropout on: the same loss at every step,
    and the same weights after. Dropout draws from torch's generator as eager's
    does, so the same seed before each step gives the same masks; the gradients
    and the in-place updates between calls are the generated module's."""
    module, _ = generated
    _, _, eager_mod, mine_mod = _pair(module, "DropMlp", device)
    variant = _variant_of(module, "DropMlp", device)
    run = vars(module)[f"_{variant}"]
    models = ((eager_mod, eager_mod), (mine_mod, partial(run, mine_mod)))
    opts = [torch.optim.SGD(m.parameters(), lr=0.05, momentum=0.9) for m, _ in models]
    gen = torch.Generator().manual_seed(5)
    target = torch.randn(4, 8, 32, generator=gen).to(_on(device))
    for step in range(50):
        x = torch.randn(4, 8, 32, generator=gen).to(_on(device))
        losses = []
        for (_, call), opt in zip(models, opts):
            torch.manual_seed(1000 + step)
            loss = ((call(x.clone().requires_grad_(True)) - target) ** 2).mean()
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[0] == pytest.approx(losses[1], rel=1e-5), step
    for a, b in zip(mine_mod.parameters(), eager_mod.parameters()):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-5)


def test_the_exported_module_runs_the_variant(generated) -> None:
    """Called as users call it (the exported class), with no fallback warning."""
    module, _ = generated
    _, _mine_fn, eager_mod, mine_mod = _pair(module, "Mlp")
    x = _inputs("Mlp", 4)["x"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = mine_mod(x)
    assert type(out.grad_fn).__name__ == "_cpu_0_autogradBackward"  # the variant's
    want = eager_mod(x.detach().clone())
    torch.testing.assert_close(out, want, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_the_backward_frees_what_the_forward_saved(
    generated, device: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The autograd node lets go of the saved tensors as its backward starts
    (`runtime_shim.take_saved`) and the generated backward empties the list, so
    each saved value is freed after its last use there; with `retain_graph` they
    are kept, and a second backward gives eager's gradients again. The gradient
    `.sum().backward()` passes in is an expanded tensor: the backward takes it in
    the layout it was traced with."""
    module, text = generated
    assert text.count("    saved.clear()") >= 2 * len(CASES)
    _, _, eager_mod, mine_mod = _pair(module, "Mlp", device)
    variant = _variant_of(module, "Mlp", device)
    backward = vars(module)[f"_{variant}_backward"]
    released = []

    def watched(*args):
        gradients = backward(*args)
        try:  # the node's saved tensors, read while its backward still runs
            _ = out.grad_fn.saved_tensors
        except RuntimeError as error:
            released.append("freed" in str(error))
        else:
            released.append(False)
        return gradients

    monkeypatch.setitem(vars(module), f"_{variant}_backward", watched)
    x = _inputs("Mlp", 3, device)["x"]
    out = vars(module)[f"_{variant}"](mine_mod, x)
    out.sum().backward()
    assert released == [True]

    released.clear()
    theirs = x.detach().clone().requires_grad_()
    want = eager_mod(theirs)
    x = x.detach().clone().requires_grad_()
    mine_mod.zero_grad()
    out = vars(module)[f"_{variant}"](mine_mod, x)
    for _ in range(2):
        want.sum().backward(retain_graph=True)
        out.sum().backward(retain_graph=True)
    assert released == [False, False]
    torch.testing.assert_close(x.grad, theirs.grad, rtol=1e-4, atol=1e-5)
    for (p, a), (_, b) in zip(
        mine_mod.named_parameters(), eager_mod.named_parameters()
    ):
        torch.testing.assert_close(a.grad, b.grad, rtol=1e-4, atol=1e-5, msg=p)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_a_second_derivative_is_an_error(generated, device: str) -> None:
    """The backward's kernels record no graph. A gradient penalty (the norm of a
    gradient taken with `create_graph=True`, in the loss) differentiates it
    again: that raises, where the penalty's dependence on the weights would
    otherwise be silently left out of their gradients."""
    module, _ = generated
    _, _, _, mine_mod = _pair(module, "Mlp", device)
    variant = _variant_of(module, "Mlp", device)
    x = _inputs("Mlp", 4, device)["x"]
    out = vars(module)[f"_{variant}"](mine_mod, x)
    (g,) = torch.autograd.grad(out.pow(2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="differentiate twice"):
        ((g.norm() - 1) ** 2 + out.sum()).backward()
