"""The layouts a variant's kernels assume of the parameters and buffers they read.

A guard function checks, for each tensor a kernel reads in place, its device, dtype,
shape and strides, on every call: `module.to(...)`, `param.data = ...` or
`load_state_dict(..., assign=True)` may have changed any of them. Written as Python,
that is four attribute reads and comparisons per tensor, about half a microsecond
each; a ResNet-50 has 320 such tensors. Generated code lists them in one table,

    _LAYOUTS_cuda_0 = runtime_shim.TensorLayouts(
        "cuda",
        (
            ("self.conv1.weight", torch.float32, (64, 3, 7, 7), (147, 49, 7, 1)),
            ...
        ),
    )

and its guard function calls `_LAYOUTS_cuda_0.mismatch(conv1_weight, ...)`: None,
or the first check that fails, spelled as the guard it stands for
(`"self.conv1.weight.dtype == torch.float32"`).

Note [Layouts checked in C++]
-----------------------------
The checks are made in Python, row by row, until they pass. Then the tensors'
metadata as they are now is kept in a `TensorGuards` of torch's (the C++ check that
`torch.compile`'s guards run on tensors, `torch._C._dynamo.guards`), and later calls
ask it first: one call for all the tensors instead of four Python checks each.
`TensorGuards` compares more than the table asks (dispatch keys, `requires_grad`,
the Python type, the device index) and nothing less, so when it passes the table's
checks pass too; when it fails, the Python checks decide, and a pass takes a new
snapshot. Where torch has no `TensorGuards`, where it does not take these tensors,
or after `RETAKES` snapshots that did not last (calls that alternate between two
states), every call checks in Python.

Note [Inputs seen before]
-------------------------
A guard function checks each tensor input too: its type and device, its dtype, its
shape and that it is contiguous, about three quarters of a microsecond a tensor on
a slow host, a fifth of the host time of a small decode step. The inputs are new
tensors on every call, but their metadata is nearly always what it was on the last
call. So a variant keeps a `SeenTensors`: after the Python checks of the inputs
pass, a `TensorGuards` snapshot of their metadata (as above); a later call asks it
first, in one C++ call for all of them, and checks in Python only when it fails.
What the Python checks read is metadata the snapshot compares (type, device type
and index, dtype, sizes, strides: `is_contiguous` and any relation between the
shapes of two inputs follow from those), and, on a GPU, the current device, which
it keeps beside the snapshot. After `RETAKES` snapshots that did not last (shapes
that change from call to call), it stops taking them.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

__all__ = ["SeenTensors", "TensorLayouts"]

Row = tuple[str, torch.dtype, tuple[int, ...], tuple[int, ...]]

RETAKES = 16  # snapshots taken before the checks stay in Python


class TensorLayouts:
    """The device type, dtype, shape and strides of tensors, by their paths."""

    def __init__(self, device: str, rows: Sequence[Row]) -> None:
        self.device = device
        self.on_device = f"is_{device}"  # `t.is_cuda`: a property, not a call
        self.rows = tuple(rows)
        self.snapshot = None  # see Note [Layouts checked in C++]
        self.retakes = RETAKES

    def mismatch(self, *tensors: torch.Tensor) -> str | None:
        """None where every tensor is as its row says; else the first check that
        fails, as the guard's text."""
        snapshot = self.snapshot
        if snapshot is not None:
            try:
                if snapshot.check(*tensors):
                    return None
            except Exception:  # not what it was made for: the Python checks decide
                pass
        failed = self.check(tensors)
        if failed is None and self.retakes > 0:
            self.retakes -= 1
            self.snapshot = _snapshot(tensors)
        return failed

    def check(self, tensors: Sequence[torch.Tensor]) -> str | None:
        """`mismatch`, in Python alone."""
        on_device = self.on_device
        for t, (path, dtype, shape, stride) in zip(tensors, self.rows, strict=True):
            if not getattr(t, on_device):
                return f"{path}.{on_device}"
            if t.dtype != dtype:
                return f"{path}.dtype == {_dtype_text(dtype)}"
            if t.shape != shape:
                return f"{path}.shape == {shape}"
            if t.stride() != stride:
                return f"{path}.stride() == {stride}"
        return None


class SeenTensors:
    """The metadata of a variant's tensor inputs on the last call that passed their
    checks (Note [Inputs seen before])."""

    def __init__(self, device: str) -> None:
        self.on_cuda = device == "cuda"
        # (torch's snapshot, the current CUDA device when it was taken), or None:
        # one attribute, so that a thread never pairs one's snapshot with another's
        # device
        self.last = None
        self.retakes = RETAKES

    def same(self, *tensors: torch.Tensor) -> bool:
        """Whether `tensors` have the metadata seen last: their checks would pass."""
        last = self.last
        if last is None:
            return False
        snapshot, current = last
        try:
            if not snapshot.check(*tensors):
                return False
        except Exception:  # not what it was made for: the Python checks decide
            return False
        return not self.on_cuda or torch.cuda.current_device() == current

    def seen(self, *tensors: torch.Tensor) -> None:
        """`tensors` passed their checks: kept for the calls after."""
        if self.retakes <= 0:
            self.last = None
            return
        self.retakes -= 1
        snapshot = _snapshot(tensors)
        current = torch.cuda.current_device() if self.on_cuda else None
        self.last = None if snapshot is None else (snapshot, current)


def _snapshot(tensors: Sequence[torch.Tensor]):
    """torch's C++ check of `tensors`' metadata as they are now, or None."""
    try:
        from torch._C._dynamo.guards import TensorGuards

        snapshot = TensorGuards(
            *tensors,
            dynamic_dims_sizes=[list(t.shape) for t in tensors],
            dynamic_dims_strides=[list(t.stride()) for t in tensors],
        )
        return snapshot if snapshot.check(*tensors) else None
    except Exception:  # absent from this torch, or another signature
        return None


def _dtype_text(dtype: torch.dtype) -> str:
    return str(dtype)  # "torch.float32", as guards spell it
