"""The examples' GPT trained with its generated training variant: fifty steps of
AdamW on a next-token loss, against eager from the same weights, on both backends
(C++; Triton in its interpreter, or on the GPU with TRANSPILE_TEST_DEVICE=cuda):
the same loss at every step and the same weights after."""

from __future__ import annotations

import importlib
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
    opts = [torch.optim.AdamW(m.parameters(), lr=3e-3) for m in (eager, mine)]
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
