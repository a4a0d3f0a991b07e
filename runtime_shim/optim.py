"""Fused optimizer steps for training with generated modules: `AdamW` and `SGD`.

Drop-in replacements of `torch.optim.AdamW` and `torch.optim.SGD` (the same
arguments, state and `state_dict`, so either loads the other's). A step makes one
pass over the elements of every parameter of a group, where PyTorch's default
(`foreach`) steps make one pass per arithmetic op:

- float32 CPU parameters: in C++ (runtime_shim/optim.cpp), one call per group;
- floating parameters on a GPU (CUDA and the other devices PyTorch has
  multi-tensor fused kernels for): those kernels (`torch._fused_adamw_`,
  `torch._fused_sgd_`, what `fused=True` runs), one launch per device and dtype
  (more only where a list outgrows one launch), with the step counts kept on the
  device so that a step never waits for the host;
- the rest (other CPU dtypes, sparse gradients, `amsgrad`, `maximize`, SGD
  without momentum): PyTorch's own step, as `torch.optim` computes it. PyTorch's
  CPU fused SGD kernel is not used: for bf16 and f16 it leaves wrong momentum
  buffers (torch 2.13).

Generated modules with a training variant export both (`generated.gpt.AdamW`).
"""

from __future__ import annotations

from pathlib import Path

import torch

from runtime_shim.cpp import load_cpp

try:  # the devices PyTorch has multi-tensor fused optimizer kernels for
    from torch.utils._foreach_utils import (
        _get_fused_kernels_supported_devices as _fused_devices,
    )
except ImportError:  # pragma: no cover - a torch without them

    def _fused_devices() -> list[str]:
        return []


# where PyTorch's fused kernels step parameters: its devices but the CPU
_KERNEL_DEVICES = frozenset(_fused_devices()) - {"cpu"}


_LIBRARY = None


def _library():
    global _LIBRARY
    if _LIBRARY is None:
        _LIBRARY = load_cpp(Path(__file__).with_name("optim.cpp"))
    return _LIBRARY


def _fused(t: torch.Tensor) -> bool:
    """Whether the C++ step updates `t` (and its gradient and state alike)."""
    return (
        t.device.type == "cpu"
        and t.dtype == torch.float32
        and t.is_contiguous()
        and t.grad is not None
        and t.grad.dtype == torch.float32
        and t.grad.is_contiguous()
        and not t.grad.is_sparse
    )


_FLOATS = (torch.float16, torch.bfloat16, torch.float32, torch.float64)


def _split(group: dict, plain: bool):
    """A group's parameters with gradients: those of the C++ step, those of the
    fused kernels (lists of one device and dtype) and the rest. Grouped in C++
    (`torch.optim` groups its tensors so too): a step of a few hundred
    parameters spends microseconds here, not a Python check of each."""
    params = [p for p in group["params"] if p.grad is not None]
    if not plain or not params:
        return [], [], params
    cpp, kernel, others = [], [], []
    lists = torch._C._group_tensors_by_device_and_dtype([params], False)
    for (device, dtype), ((ps,), _) in lists.items():
        if device.type == "cpu" and dtype == torch.float32:
            for p in ps:
                (cpp if _fused(p) else others).append(p)
        elif (
            device.type in _KERNEL_DEVICES
            and dtype in _FLOATS
            and all(p.grad.dtype == dtype and not p.grad.is_sparse for p in ps)
        ):
            kernel.append(ps)
        else:
            others += ps
    return cpp, kernel, others


def _torch_step(optimizer, step, group: dict, params: list[torch.Tensor]) -> None:
    """PyTorch's own `step` for `params` of `group` alone: every other parameter
    set aside for the call (it walks all groups)."""
    kept = [g["params"] for g in optimizer.param_groups]
    for g in optimizer.param_groups:
        g["params"] = params if g is group else []
    try:
        step()
    finally:
        for g, ps in zip(optimizer.param_groups, kept):
            g["params"] = ps


def _table(tensors: list[torch.Tensor]) -> torch.Tensor:
    return torch.tensor([t.data_ptr() for t in tensors], dtype=torch.int64)


class AdamW(torch.optim.AdamW):
    """`torch.optim.AdamW`, fused: see the module docstring. `amsgrad`, `maximize`
    and complex parameters take PyTorch's step."""

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            plain = not (group["amsgrad"] or group["maximize"])
            cpp, kernel, others = _split(group, plain)
            if cpp:
                self._fused_step(group, cpp)
            for params in kernel:
                self._kernel_step(group, params)
            if others:
                _torch_step(self, super().step, group, others)
        return loss

    def _state(self, p: torch.Tensor, step_device: torch.device | None = None) -> dict:
        """`p`'s state, started as torch.optim.AdamW starts it; its step count on
        `step_device` (the fused kernels read it there)."""
        state = self.state[p]
        if not state:
            state["step"] = torch.tensor(0.0, dtype=torch.float32)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(
                p, memory_format=torch.preserve_format
            )
        if step_device is not None and state["step"].device != step_device:
            state["step"] = state["step"].to(step_device, torch.float32)
        return state

    def _kernel_step(self, group: dict, params: list[torch.Tensor]) -> None:
        """PyTorch's fused AdamW kernel over `params` (one device and dtype)."""
        states = [self._state(p, p.device) for p in params]
        steps = [s["step"] for s in states]
        torch._foreach_add_(steps, 1)
        beta1, beta2 = group["betas"]
        torch._fused_adamw_(
            params,
            [p.grad for p in params],
            [s["exp_avg"] for s in states],
            [s["exp_avg_sq"] for s in states],
            [],
            steps,
            amsgrad=False,
            lr=float(group["lr"]),
            beta1=float(beta1),
            beta2=float(beta2),
            weight_decay=float(group["weight_decay"]),
            eps=float(group["eps"]),
            maximize=False,
        )
        _written(params)

    def _fused_step(self, group: dict, params: list[torch.Tensor]) -> None:
        states = [self._state(p) for p in params]
        for s in states:
            s["step"] += 1
        beta1, beta2 = group["betas"]
        steps = torch.tensor([float(s["step"]) for s in states], dtype=torch.float64)
        numels = torch.tensor([p.numel() for p in params], dtype=torch.int64)
        tables = [
            _table(params),
            _table([p.grad for p in params]),
            _table([s["exp_avg"] for s in states]),
            _table([s["exp_avg_sq"] for s in states]),
        ]
        _library().function("adamw_f32", "lppppppddddd")(
            len(params),
            *(t.data_ptr() for t in tables),
            numels.data_ptr(),
            steps.data_ptr(),
            float(group["lr"]),
            float(beta1),
            float(beta2),
            float(group["eps"]),
            float(group["weight_decay"]),
        )
        _written(params)


class SGD(torch.optim.SGD):
    """`torch.optim.SGD`, fused where it keeps a momentum buffer: see the module
    docstring. Without momentum, `maximize` or for other tensors, PyTorch's step."""

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        for group in self.param_groups:
            plain = group["momentum"] != 0 and not group["maximize"]
            cpp, kernel, others = _split(group, plain)
            if cpp:
                self._fused_step(group, cpp)
            for params in kernel:
                self._kernel_step(group, params)
            if others:
                _torch_step(self, super().step, group, others)
        return loss

    def _kernel_step(self, group: dict, params: list[torch.Tensor]) -> None:
        """PyTorch's fused SGD kernel over `params` (one device and dtype): one
        launch for those whose momentum buffer starts now (it is the gradient,
        as torch.optim.SGD starts it), one for the rest."""
        fresh = [p for p in params if self.state[p].get("momentum_buffer") is None]
        for p in fresh:
            self.state[p]["momentum_buffer"] = torch.empty_like(
                p, memory_format=torch.preserve_format
            )
        known = {id(p) for p in fresh}
        going = [p for p in params if id(p) not in known]
        for first, ps in ((True, fresh), (False, going)):
            if not ps:
                continue
            torch._fused_sgd_(
                ps,
                [p.grad for p in ps],
                [self.state[p]["momentum_buffer"] for p in ps],
                weight_decay=float(group["weight_decay"]),
                momentum=float(group["momentum"]),
                lr=float(group["lr"]),
                dampening=float(group["dampening"]),
                nesterov=bool(group["nesterov"]),
                maximize=False,
                is_first_step=first,
            )
            _written(ps)

    def _fused_step(self, group: dict, params: list[torch.Tensor]) -> None:
        first = []
        for p in params:
            state = self.state[p]
            fresh = state.get("momentum_buffer") is None
            if fresh:  # torch.optim.SGD's first buffer is the gradient itself
                state["momentum_buffer"] = torch.empty_like(
                    p, memory_format=torch.preserve_format
                )
            first.append(int(fresh))
        buffers = [self.state[p]["momentum_buffer"] for p in params]
        tables = [_table(params), _table([p.grad for p in params]), _table(buffers)]
        numels = torch.tensor([p.numel() for p in params], dtype=torch.int64)
        starts = torch.tensor(first, dtype=torch.int64)
        _library().function("sgd_f32", "lpppppddddl")(
            len(params),
            *(t.data_ptr() for t in tables),
            numels.data_ptr(),
            starts.data_ptr(),
            float(group["lr"]),
            float(group["momentum"]),
            float(group["dampening"]),
            float(group["weight_decay"]),
            int(bool(group["nesterov"])),
        )
        _written(params)


def _written(params: list[torch.Tensor]) -> None:
    """Count a step's writes into `params` (the C++ step's, and the fused
    kernels', which torch 2.13's do not count) as in-place writes, as torch's
    plain steps' are: each tensor's version moves, so that what was computed
    from it and kept (`runtime_shim.constants`, autograd's saved tensors) is
    known stale."""
    try:  # one call for the list where torch takes one (2.5 on)
        torch.autograd.graph.increment_version(params)
    except TypeError:
        for p in params:
            torch.autograd.graph.increment_version(p)


__all__ = ["SGD", "AdamW"]
