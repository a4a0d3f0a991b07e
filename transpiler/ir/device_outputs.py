"""Ops whose kernel on a device returns another dtype or shape than their meta kernel.

Note [Device outputs]
~~~~~~~~~~~~~~~~~~~~~
The frontend traces on meta tensors, so every value has the dtype and shape an op's
meta kernel gives it. Meta kernels are written to match CUDA's, and a few ops return
otherwise on the CPU, all of them normalizations returning statistics:

    op (f16/bf16 input)              meta and CUDA     CPU
    native_layer_norm mean, rstd     float32           the input's dtype *
    native_batch_norm mean, invstd   float32, [C]      the input's dtype *, and [0]
                                                       when not training
    native_group_norm mean, rstd     the input's       the input's dtype *

    * float32 where the weights are ("mixed types", PyTorch's `is_mixed_type`,
      which CUDA's kernels do not take: they raise)

`DEVICE_OUTPUTS[device]` holds, by op, how to tell those results from the op's
arguments. The frontend of a variant for that device records the op as its meta
kernel describes it, then converts each result that differs into what the device
returns (frontend/device_recorder.py), so the code traced after it sees what eager
would. An op that decomposes into kernels computes the meta kernel's results, and
the conversions are casts in its kernels; an extern call returns the device's
results itself, and its conversions are folded into it once no pass retraces the
graph any more (passes/device_outputs.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from transpiler.ir.ops import HALF_TYPES


@dataclass(frozen=True)
class Result:
    """One result of an op as a device returns it: its dtype, and whether it is
    empty (shape [0]) where the meta kernel gives it values."""

    dtype: torch.dtype
    empty: bool = False


@dataclass(frozen=True)
class Statistics:
    """A normalization whose results `outputs` are statistics, which the device
    returns in float32 where the input is f16/bf16 and the first of `params` that
    is given is float32 (mixed types), else in the input's dtype; and empty where
    the op does not train (`training`: the argument that says, or a constant)."""

    params: tuple[str, ...]
    training: str | bool = True
    outputs: tuple[int, ...] = (1, 2)

    def results(self, dtypes: dict[str, Any]) -> dict[int, Result]:
        """By output index, the device's results; `dtypes` are the op's arguments
        by name, each tensor as its dtype (None where not given)."""
        given = [dtypes[p] for p in self.params if dtypes.get(p) is not None]
        mixed = dtypes["input"] in HALF_TYPES and given[:1] == [torch.float32]
        dtype = torch.float32 if mixed else dtypes["input"]
        training = self.training
        if isinstance(training, str):
            training = dtypes[training]
        return dict.fromkeys(self.outputs, Result(dtype, not training))


AFFINE = ("weight", "bias")  # the parameters `is_mixed_type` looks at, in order
RUNNING = (*AFFINE, "running_mean", "running_var")

DEVICE_OUTPUTS: dict[str, dict[str, Statistics]] = {
    "cpu": {
        "aten.native_layer_norm.default": Statistics(AFFINE),
        "aten.native_group_norm.default": Statistics(AFFINE),
        "aten.native_batch_norm.default": Statistics(RUNNING, "training"),
        "aten._native_batch_norm_legit.default": Statistics(RUNNING, "training"),
        "aten._native_batch_norm_legit.no_stats": Statistics(AFFINE, "training"),
        "aten._native_batch_norm_legit_no_training.default": Statistics(RUNNING, False),
        "aten._batch_norm_no_update.default": Statistics(RUNNING, False),
    },
    "cuda": {},  # as the meta kernels say
}
