"""The examples' GPT trained with its generated training variant and the module's
fused AdamW: fifty steps on a next-token loss, against eager and torch.optim.AdamW
from the same weights, on both backends
(C++; Triton in its interpreter, or on the GPU with TRANSPILE_TEST_DEVICE=cuda):
the same loss at every step and the same weights after."""

from __future__ import annotations

import importlib
import inspect
import itertools
import os
import sys
from pathlib import Path

if os.environ.get("TRANSPILE_TEST_DEVICE") != "cuda":  # see tests/devices.py
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch
import torch.nn.functional as F

from tests.compile_helpers import unique_name
from tests.devices import REAL_GPU
from transpiler.api import build, write
from transpiler.options import Options, Target, TensorSpec, Variant

ROOT = Path(__file__).resolve().parents[2]
INIT = {"vocab_size": 64, "block_size": 16, "n_layer": 2, "n_embd": 32, "n_head": 4}
TOKENS = (2, 16)


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory):
    specs = (("idx", TensorSpec(torch.int64, TOKENS)),)
    variants = tuple(Variant(specs, d, train=True) for d in ("cpu", "cuda"))
    target = Target("examples/gpt.py::GPT", variants, tuple(INIT.items()))
    files = build(Options(targets=(target,), root=ROOT))
    out = tmp_path_factory.mktemp("gpt_training")
    package = unique_name("gen")
    write(files, out / package)
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module(f"{package}.gpt")
    finally:
        sys.path.remove(str(out))


@pytest.mark.slow
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_gpt_trains_to_eager_losses(generated, device: str) -> None:
    from examples.gpt import GPT

    on = "cuda" if device == "cuda" and REAL_GPU else "cpu"
    variant = "cpu_0" if device == "cpu" else "cuda_0"
    assert f"{device}, train: idx=i64[2,16]" in generated.__doc__
    assert "_cpu_0_autograd" in vars(generated)
    torch.manual_seed(0)
    eager = GPT(**INIT).to(on).train()
    mine = generated.GPT(**INIT).to(on).train()
    mine.load_state_dict(eager.state_dict())
    run = vars(generated)[f"_{variant}"]
    calls = (eager, lambda idx: run(mine, idx))
    # the generated module's own AdamW (fused) against torch.optim's
    opts = [
        torch.optim.AdamW(eager.parameters(), lr=3e-3),
        generated.AdamW(mine.parameters(), lr=3e-3),
    ]
    gen = torch.Generator().manual_seed(3)
    batches = [
        torch.randint(0, INIT["vocab_size"], TOKENS, generator=gen) for _ in "ab"
    ]
    for step in range(50):
        idx = batches[step % 2].to(on)  # two batches, learned by heart
        targets = torch.roll(idx, -1, 1)
        losses = []
        for call, opt in zip(calls, opts):
            logits = call(idx)
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[0] == pytest.approx(losses[1], rel=1e-4), (step, losses)
    n = INIT["n_embd"]
    for (name, a), (_, b) in zip(mine.named_parameters(), eager.named_parameters()):
        if name.endswith("c_attn.bias"):  # the key bias: its true gradient is 0
            # (a constant added to every score of a row), so AdamW's steps of it
            # follow rounding noise, which differs between any two computations
            a, b = torch.cat([a[:n], a[2 * n :]]), torch.cat([b[:n], b[2 * n :]])
        torch.testing.assert_close(
            a, b, rtol=1e-3, atol=1e-4, msg=lambda m, name=name: f"{name}: {m}"
        )
    assert losses[0] < 3.0  # it learned (log(64) = 4.16 at the start)


@pytest.fixture(scope="module")
def examples(tmp_path_factory: pytest.TempPathFactory):
    """Every target of this repository's `[tool.transpile]`, for training."""
    from transpiler.options import for_training, load_config

    _, targets = load_config(ROOT / "pyproject.toml", ROOT)
    targets = tuple(for_training(t) for t in targets)
    files = build(Options(targets=targets, root=ROOT))
    out = tmp_path_factory.mktemp("examples_training")
    package = unique_name("gen")
    write(files, out / package)
    sys.path.insert(0, str(out))
    try:
        stems = sorted(
            {Path(f).stem for f in files if f.endswith(".py")} - {"__init__"}
        )
        return targets, {s: importlib.import_module(f"{package}.{s}") for s in stems}
    finally:
        sys.path.remove(str(out))


# why a training variant of an example runs the source: what it does that training
# variants do not compile yet, or that there is nothing to differentiate
NOT_COMPILED = (
    "branches on tensor data",
    "nothing to differentiate",
    "with a named dimension",
)


def _example_input(spec, gen: torch.Generator, on: str):
    if not isinstance(spec, TensorSpec):
        return spec.value
    if spec.dtype.is_floating_point:
        return torch.randn(spec.shape, generator=gen).to(spec.dtype).to(on)
    return torch.randint(0, 16, spec.shape, generator=gen).to(on)


@pytest.mark.slow
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_every_example_trains_or_says_why(examples, device: str) -> None:
    """Each example's training variant computes eager's outputs and the gradients
    of every parameter; one that is not compiled names a reason of NOT_COMPILED."""
    targets, modules = examples
    on = "cuda" if device == "cuda" and REAL_GPU else "cpu"
    compiled = 0
    for target in targets:
        stem = Path(target.source.split("::")[0]).stem
        module = modules[stem]
        name = target.source.split("::")[1]
        doc = module.__doc__
        after = doc.split(f"\n    {name} (")[1].splitlines()[1:]
        lines = list(itertools.takewhile(lambda x: x.startswith(" " * 8), after))
        ours = iter(v for v in target.variants if v.device == device)
        for line in lines:  # the header lists the variants in order
            variant, described = line.split()[:2]
            if described.rstrip(",") != device:
                continue
            spec = next(ours)
            if "forward and backward" not in line:
                assert any(why in line for why in NOT_COMPILED), line
                continue
            compiled += _check_example(module, target, name, variant, spec, on)
    # ToyLinear, MLP, LayerNormGELU (f32; bf16 but where eager rejects it), RMSNorm,
    # Block x2, GPT
    assert compiled >= 7


def _check_example(module, target, name, variant, spec, on) -> int:
    """1 once the variant matched eager; 0 where eager itself cannot run it."""
    from tests.helpers import randomize_parameters

    source = getattr(module._source, name)
    init = dict(target.init)
    torch.manual_seed(0)
    eager = source(**init)
    randomize_parameters(eager, 0)
    mine = getattr(module, name)(**init)
    mine.load_state_dict(eager.state_dict())
    eager, mine = eager.to(on).train(), mine.to(on).train()
    gen = torch.Generator().manual_seed(1)
    inputs = {n: _example_input(s, gen, on) for n, s in spec.inputs}
    try:
        want = eager(**inputs)
    except RuntimeError as e:  # eager rejects these inputs here: nothing to compare
        # (CUDA's layer norm takes no bf16 input with f32 weights; the CPU's does)
        assert on == "cuda" and "expected scalar type" in str(e), e
        return 0
    got = vars(module)[f"_{variant}"](mine, **inputs)
    tensors = [*eager.parameters(), *(t for t in inputs.values() if torch.is_tensor(t))]
    loose = any(t.dtype == torch.bfloat16 for t in tensors)  # eager rounds each op
    tol = {"rtol": 2e-2, "atol": 2e-2} if loose else {"rtol": 1e-4, "atol": 1e-5}
    torch.testing.assert_close(got, want, **tol)
    tangent = torch.randn(want.shape, generator=gen).to(want.dtype).to(on)
    want.backward(tangent)
    got.backward(tangent)
    for (p, a), (_, b) in zip(mine.named_parameters(), eager.named_parameters()):
        scale = float(b.grad.abs().max().float()) or 1.0
        err = float((a.grad.float() - b.grad.float()).abs().max()) / scale
        assert err < (3e-2 if loose else 1e-4), f"{name} {variant} {p}: {err}"
    return 1


def test_a_fused_torch_optimizer_trains_it_too(generated) -> None:
    """`torch.optim.AdamW(fused=True)` writes the parameters without moving their
    versions, so a training variant keeps no values of parameters between calls
    (the position embedding's rows): three steps give eager's losses."""
    from examples.gpt import GPT

    text = inspect.getsource(generated)
    assert "runtime_shim.constants(" not in text
    torch.manual_seed(0)
    eager = GPT(**INIT).train()
    mine = generated.GPT(**INIT).train()
    mine.load_state_dict(eager.state_dict())
    run = vars(generated)["_cpu_0"]
    calls = (eager, lambda idx: run(mine, idx))
    opts = [
        torch.optim.AdamW(m.parameters(), lr=3e-3, fused=True) for m in (eager, mine)
    ]
    idx = torch.randint(0, INIT["vocab_size"], TOKENS, generator=torch.Generator())
    for _ in range(3):
        losses = []
        for call, opt in zip(calls, opts):
            loss = F.cross_entropy(call(idx).flatten(0, 1), idx.flatten())
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[0] == pytest.approx(losses[1], rel=1e-4)
