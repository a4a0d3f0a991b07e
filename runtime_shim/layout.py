"""Tensors of a layout known ahead of time: new buffers, views, extern results.

A generated variant knows the shape, strides and dtype of every tensor it makes, so
it can make them without what `torch.empty_strided` and a chain of view methods
spend finding them out at run time (argument parsing, device lookup, one call per
view). Where this torch offers the direct constructors that torch.compile's own
generated code uses, they are taken; elsewhere the public calls that do the same.
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial

import torch

__all__ = ["allocator", "as_layout", "reinterpret", "view"]

try:
    from torch._C._dynamo.guards import (
        _empty_strided_cpu,
        _empty_strided_cuda,
        _reinterpret_tensor,
    )
except ImportError:  # pragma: no cover - a torch without them
    _empty_strided_cpu = _empty_strided_cuda = _reinterpret_tensor = None


def as_layout(t: torch.Tensor, stride: tuple[int, ...]) -> torch.Tensor:
    """`t` itself when it has `stride` already (the usual case), else a copy that
    has it: an op's kernel on a device may lay its result out otherwise than its
    meta kernel did when the code was generated (attention by the backend it picks,
    `log_sigmoid_forward` of a transposed tensor contiguous on the CPU).

    A dimension of size 1 is only ever read at position 0, so its stride is no
    part of the layout: attention's output for one query ([B, H, 1, D]) differs
    from its meta kernel's there alone, and is used as it is."""
    have = t.stride()
    if have == stride:
        return t
    for n, a, b in zip(t.shape, have, stride):  # a loop: half the time of all()
        if a != b and n != 1:
            out = torch.empty_strided(t.shape, stride, dtype=t.dtype, device=t.device)
            return out.copy_(t)
    return t


def allocator(device: torch.device) -> Callable[..., torch.Tensor]:
    """`empty(size, stride, dtype)`: an uninitialized tensor on `device`.

    On the CPU and the current CUDA device it is torch's own C constructor where this
    torch has one (`torch.empty_strided` parses its arguments and looks the device
    up on every call); elsewhere `torch.empty_strided` on `device`."""
    if device == _CPU:  # `device.type` builds a string: most of a microsecond
        if _empty_strided_cpu is not None:
            return _empty_strided_cpu
    elif (
        _empty_strided_cuda is not None
        and device.index is not None
        and device.index == torch._C._cuda_getDevice()
        and device.type == "cuda"
    ):
        return _empty_strided_cuda
    return partial(_empty_strided, device=device)


_CPU = torch.device("cpu")


def _empty_strided(size, stride, dtype, device) -> torch.Tensor:
    return torch.empty_strided(size, stride, dtype=dtype, device=device)


def reinterpret(base: torch.Tensor, size, stride, offset: int) -> torch.Tensor:
    """`base`'s memory seen with this size and stride, starting `offset` elements
    past `base`'s own start: a chain of view methods in one call.

    The result shares `base`'s storage but, as torch's C function does, is not
    recorded as its view: generated code uses it only where nothing records autograd,
    and never returns one."""
    return base.as_strided(size, stride, base.storage_offset() + offset)


# What generated code calls: torch's own C function where this torch has it (a
# Python function around it would cost a frame per call), else the one above.
view = _reinterpret_tensor or reinterpret
