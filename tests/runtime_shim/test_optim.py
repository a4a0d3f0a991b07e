"""runtime_shim's fused optimizers against torch.optim: the same parameters and
state after every step, for a table of settings, mixed tensors (bf16 parameters,
parameters without gradients, several groups), and state_dicts that load both ways
and go on training alike."""

from __future__ import annotations

import copy

import pytest
import torch

import runtime_shim
from tests.devices import REAL_GPU

# with TRANSPILE_TEST_DEVICE=cuda on a GPU, the CUDA step (PyTorch's fused kernels)
DEVICES = ["cpu", "cuda"] if REAL_GPU else ["cpu"]

SETTINGS = {
    "adamw": (runtime_shim.AdamW, torch.optim.AdamW, {"lr": 1e-2}),
    "adamw decay betas": (
        runtime_shim.AdamW,
        torch.optim.AdamW,
        {"lr": 3e-3, "betas": (0.8, 0.95), "eps": 1e-6, "weight_decay": 0.3},
    ),
    "adamw amsgrad": (runtime_shim.AdamW, torch.optim.AdamW, {"amsgrad": True}),
    "sgd momentum": (runtime_shim.SGD, torch.optim.SGD, {"lr": 0.05, "momentum": 0.9}),
    "sgd nesterov decay": (
        runtime_shim.SGD,
        torch.optim.SGD,
        {"lr": 0.05, "momentum": 0.8, "nesterov": True, "weight_decay": 1e-2},
    ),
    "sgd dampening": (
        runtime_shim.SGD,
        torch.optim.SGD,
        {"lr": 0.1, "momentum": 0.5, "dampening": 0.3},
    ),
    "sgd plain": (runtime_shim.SGD, torch.optim.SGD, {"lr": 0.1}),
}


class Net(torch.nn.Module):
    """Float32 layers, a bf16 one, and a frozen one (no grad). The bf16 layer is a
    branch of its own with its own loss, so that its rounding (PyTorch's fused
    kernel rounds bf16 unlike its plain step) does not reach the float32
    gradients."""

    def __init__(self) -> None:
        super().__init__()
        self.a = torch.nn.Linear(16, 300)  # 4800 + 300: big enough for threads
        self.b = torch.nn.Linear(300, 8)
        self.low = torch.nn.Linear(8, 8).bfloat16()
        self.frozen = torch.nn.Linear(8, 8)

    def forward(self, x):
        h = self.b(torch.nn.functional.gelu(self.a(x)))
        low = self.low(x[:, :8].bfloat16()).float()
        return self.frozen(h), low


def _groups(model: Net, lr_scale: float = 0.5) -> list[dict]:
    return [
        {"params": list(model.a.parameters())},
        {"params": [*model.b.parameters(), *model.low.parameters()]},
        {"params": list(model.frozen.parameters()), "lr_scale": lr_scale},
    ]


def _train(model, opt, steps: int, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    for _ in range(steps):
        x = torch.randn(32, 16, generator=gen).to(device)
        opt.zero_grad()
        sum(y.pow(2).mean() for y in model(x)).backward()
        opt.step()


def _same(a: torch.nn.Module, b: torch.nn.Module, oa, ob) -> None:
    for (name, p), (_, q) in zip(a.named_parameters(), b.named_parameters()):
        # torch's plain bf16 step rounds after every op, the fused kernel once
        tol = {"rtol": 5e-2, "atol": 5e-2} if p.dtype == torch.bfloat16 else {}
        torch.testing.assert_close(p, q, msg=lambda m, n=name: f"{n}: {m}", **tol)
    for p, q in zip(a.parameters(), b.parameters()):
        sa, sb = oa.state.get(p, {}), ob.state.get(q, {})
        assert sa.keys() == sb.keys()
        tol = {"rtol": 5e-2, "atol": 5e-2} if p.dtype == torch.bfloat16 else {}
        for key in sa:  # a fused kernel keeps the step count on the device
            torch.testing.assert_close(
                sa[key].to(p.device),
                sb[key].to(p.device),
                **{"rtol": 1e-4, "atol": 1e-6, **tol},
            )


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("setting", SETTINGS)
def test_steps_and_state_follow_torch(setting: str, device: str) -> None:
    ours, theirs, kwargs = SETTINGS[setting]
    torch.manual_seed(0)
    model = Net().to(device)
    model.frozen.requires_grad_(False)
    a, b = copy.deepcopy(model), copy.deepcopy(model)
    oa, ob = theirs(_groups(a), **kwargs), ours(_groups(b), **kwargs)
    _train(a, oa, 12, seed=1)
    _train(b, ob, 12, seed=1)
    _same(a, b, oa, ob)
    # each loads the other's state_dict and trains on as the other would
    oa.load_state_dict(copy.deepcopy(ob.state_dict()))
    ob.load_state_dict(copy.deepcopy(oa.state_dict()))
    _train(a, oa, 5, seed=2)
    _train(b, ob, 5, seed=2)
    _same(a, b, oa, ob)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("setting", SETTINGS)
def test_a_step_moves_each_parameters_version(setting: str, device: str) -> None:
    """A step writes each parameter in place, as torch's do: its version moves, so
    what was computed from it and kept (`runtime_shim.constants`: a position
    embedding looked up once) is computed again, not read stale."""
    ours, _, kwargs = SETTINGS[setting]
    torch.manual_seed(0)
    model = Net().to(device)
    model.frozen.requires_grad_(False)
    opt = ours(_groups(model), **kwargs)
    _train(model, opt, 1, seed=1)
    trained = [p for p in model.parameters() if p.requires_grad]
    before = [p._version for p in trained]
    _train(model, opt, 1, seed=2)
    assert all(p._version > v for p, v in zip(trained, before))


@pytest.mark.parametrize("optimizer", [runtime_shim.AdamW, runtime_shim.SGD])
def test_the_fused_kernels_step_moves_versions_too(optimizer) -> None:
    """PyTorch's fused kernels (a GPU's step) do not move the versions of what
    they write; the step does. Called here on CPU tensors, which they take."""
    model = torch.nn.Linear(8, 8)
    opt = (
        optimizer(model.parameters(), lr=0.1, momentum=0.9)
        if (optimizer is runtime_shim.SGD)
        else optimizer(model.parameters(), lr=0.1)
    )
    model(torch.randn(4, 8)).sum().backward()
    params = list(model.parameters())
    before = [p._version for p in params]
    with torch.no_grad():
        opt._kernel_step(opt.param_groups[0], params)
    assert all(p._version > v for p, v in zip(params, before))


def test_adamw_runs_the_fused_step() -> None:
    """The float32 parameters take the C++ step: with it broken, they differ."""
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 8)
    opt = runtime_shim.AdamW(model.parameters(), lr=0.1)
    model(torch.randn(4, 8)).sum().backward()
    before = model.weight.detach().clone()
    called = []
    library = runtime_shim.optim._library()
    real = library.function("adamw_f32", "lppppppddddd")

    def counting(*args):
        called.append(args[0])
        return real(*args)

    library._functions["adamw_f32"] = ("lppppppddddd", counting)
    try:
        opt.step()
    finally:
        library._functions["adamw_f32"] = ("lppppppddddd", real)
    assert called == [2]  # weight and bias, in one call
    assert not torch.equal(before, model.weight)


class Low(torch.nn.Module):
    """Layers of two dtypes: bf16 and float64 on a GPU, float64 on the CPU, whose
    fused SGD kernel of PyTorch leaves bf16 momentum buffers wrong."""

    def __init__(self, device: str) -> None:
        super().__init__()
        first = torch.bfloat16 if device != "cpu" else torch.float64
        self.a = torch.nn.Linear(16, 64).to(device, first)
        self.b = torch.nn.Linear(64, 8).to(device, torch.float64)

    def forward(self, x):
        h = torch.relu(self.a(x.to(self.a.weight.dtype)))
        return self.b(h.double()).float(), x[:, :1]


def _two_groups(model: Low) -> list[dict]:
    return [{"params": [*model.a.parameters()]}, {"params": [*model.b.parameters()]}]


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize(
    "setting", [s for s in SETTINGS if s not in ("adamw amsgrad", "sgd plain")]
)
def test_fused_kernel_steps_equal_torch_fused(
    setting: str, device: str, monkeypatch
) -> None:
    """Parameters on a device with PyTorch's fused kernels take them: exactly what
    `fused=True` computes, over groups, fresh momentum buffers and a state_dict
    loaded from torch's default step. On a machine without a GPU the CPU plays the
    device (the same kernels exist for it)."""
    monkeypatch.setattr(runtime_shim.optim, "_KERNEL_DEVICES", {device})
    ours, theirs, kwargs = SETTINGS[setting]
    torch.manual_seed(0)
    model = Low(device)
    a, b = copy.deepcopy(model), copy.deepcopy(model)
    oa = theirs(_two_groups(a), fused=True, **kwargs)
    ob = ours(_two_groups(b), **kwargs)
    _train(a, oa, 6, seed=1)
    _train(b, ob, 6, seed=1)
    for p, q in zip(a.parameters(), b.parameters()):
        assert torch.equal(p, q)
        for key, value in oa.state[p].items():
            assert torch.equal(value, ob.state[q][key].to(value.device)), key
    plain = theirs(_two_groups(a), **kwargs)  # torch's default step
    _train(a, plain, 2, seed=2)
    ob.load_state_dict(copy.deepcopy(plain.state_dict()))
    oa.load_state_dict(copy.deepcopy(plain.state_dict()))
    for group in oa.param_groups:  # loading took plain's settings, `fused` too
        group["fused"] = True
    for state in oa.state.values():  # where torch's fused step keeps the count
        if "step" in state:
            state["step"] = state["step"].to(device)
    b.load_state_dict(a.state_dict())
    before = copy.deepcopy(a)
    _train(a, oa, 3, seed=3)
    _train(b, ob, 3, seed=3)
    for p, q, r in zip(a.parameters(), b.parameters(), before.parameters()):
        assert torch.equal(p, q)
        assert not torch.equal(p, r)
    # one launch per group (weight and bias): the kernel ran, not a plain step
    kernel = "_fused_adamw_" if ours is runtime_shim.AdamW else "_fused_sgd_"
    real, calls = getattr(torch, kernel), []

    def counting(params, *args, **kwargs):
        calls.append(len(params))
        return real(params, *args, **kwargs)

    monkeypatch.setattr(torch, kernel, counting)
    ob.step()
    assert calls == [2, 2]
