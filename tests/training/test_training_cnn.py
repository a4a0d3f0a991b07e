"""A small CNN (convolutions, batch norms in train mode, ReLU, max pool, a mean over
space, dropout, a linear layer) trained fifty steps with its generated training
variant and the module's fused SGD with momentum, against eager and torch.optim.SGD
from the same weights and the same seed at every step, on both backends (C++;
Triton in its interpreter, or on the GPU with TRANSPILE_TEST_DEVICE=cuda): the same
loss at every step (dropout on, the same masks), and the same weights, running
statistics and batch counts after."""

from __future__ import annotations

import inspect
import os

if os.environ.get("TRANSPILE_TEST_DEVICE") != "cuda":  # see tests/devices.py
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch
import torch.nn.functional as F

from tests.control_flow.support import compile_variants
from tests.devices import REAL_GPU
from transpiler.options import TensorSpec, Variant

SOURCE = """
import torch
from torch import nn
import torch.nn.functional as F


class SmallCNN(nn.Module):
    def __init__(self, classes: int = 10):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 16, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(16)
        self.drop = nn.Dropout(0.2)
        self.fc = nn.Linear(16, classes)

    def forward(self, x):
        x = F.relu(self.bn1(self.conv1(x)))
        x = F.max_pool2d(x, 2)
        x = F.relu(self.bn2(self.conv2(x)))
        return self.fc(self.drop(x.mean((2, 3))))
"""
SHAPE = (4, 3, 8, 8)


@pytest.mark.slow
@pytest.mark.parametrize("device", ["cpu", "cuda"])
def test_cnn_trains_to_eager_losses(tmp_path, device: str) -> None:
    variant = Variant((("x", TensorSpec(torch.float32, SHAPE)),), device, train=True)
    generated = compile_variants(SOURCE, "SmallCNN", [variant], tmp_path)
    assert "forward and backward" in generated.__doc__, generated.__doc__
    run = vars(generated)[f"_{device}_0"]
    forward = vars(generated)[f"_{device}_0_forward"]
    for written in ("num_batches_tracked", "running_mean", "running_var"):
        assert f"{written}.copy_(" in inspect.getsource(forward)
    on = "cuda" if device == "cuda" and REAL_GPU else "cpu"
    torch.manual_seed(0)
    eager = generated._source.SmallCNN().to(on).train()
    mine = generated.SmallCNN().to(on).train()
    mine.load_state_dict(eager.state_dict())
    opts = [
        torch.optim.SGD(eager.parameters(), lr=0.05, momentum=0.9),
        generated.SGD(mine.parameters(), lr=0.05, momentum=0.9),
    ]
    gen = torch.Generator().manual_seed(1)
    batches = [
        (torch.randn(SHAPE, generator=gen), torch.randint(0, 10, (4,), generator=gen))
        for _ in "ab"
    ]
    calls = (eager, lambda x: run(mine, x))
    for step in range(50):
        x, y = (t.to(on) for t in batches[step % 2])
        losses = []
        for call, opt in zip(calls, opts):
            torch.manual_seed(step)  # the same dropout masks on both sides
            loss = F.cross_entropy(call(x), y)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[0] == pytest.approx(losses[1], rel=1e-4, abs=1e-5), (
            step,
            losses,
        )
    for (name, a), (_, b) in zip(mine.state_dict().items(), eager.state_dict().items()):
        torch.testing.assert_close(
            a, b, rtol=1e-3, atol=1e-4, msg=lambda m, name=name: f"{name}: {m}"
        )
    assert int(mine.bn1.num_batches_tracked) == 50
    assert losses[0] < 1.0  # it learned (log(10) = 2.3 at the start)
