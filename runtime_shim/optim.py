"""Fused optimizer steps for training with generated modules: `AdamW` and `SGD`.

Drop-in replacements of `torch.optim.AdamW` and `torch.optim.SGD` (the same
arguments, state and `state_dict`, so either loads the other's): a step updates
every float32 CPU parameter of a group in one pass over its elements, in C++
(runtime_shim/optim.cpp), where PyTorch's `foreach` steps make one pass per
arithmetic op. Other tensors (CUDA, bf16, sparse gradients aside) take PyTorch's
own step, as `torch.optim` computes it. Generated modules with a training variant
export both (`generated.gpt.AdamW`).
"""

from __future__ import annotations

from pathlib import Path

import torch

from runtime_shim.cpp import load_cpp

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
            mine = [p for p in group["params"] if plain and _fused(p)]
            fused = {id(p) for p in mine}
            others = [
                p for p in group["params"] if p.grad is not None and id(p) not in fused
            ]
            if mine:
                self._fused_step(group, mine)
            if others:
                _torch_step(self, super().step, group, others)
        return loss

    def _state(self, p: torch.Tensor) -> dict:
        state = self.state[p]
        if not state:  # as torch.optim.AdamW starts it
            state["step"] = torch.tensor(0.0, dtype=torch.float32)
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(
                p, memory_format=torch.preserve_format
            )
        return state

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
            mine = [p for p in group["params"] if plain and _fused(p)]
            fused = {id(p) for p in mine}
            others = [
                p for p in group["params"] if p.grad is not None and id(p) not in fused
            ]
            if mine:
                self._fused_step(group, mine)
            if others:
                _torch_step(self, super().step, group, others)
        return loss

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


__all__ = ["SGD", "AdamW"]
