"""The recorder of one device's variant: op results as that device returns them.

See Note [Device outputs] in ir/device_outputs.py.
"""

from __future__ import annotations

import torch

from transpiler.frontend.recorder import GraphBuilder, Recorder, op_name
from transpiler.ir.device_outputs import DEVICE_OUTPUTS, Result
from transpiler.ir.ops import bind_args


class DeviceRecorder(Recorder):
    """A `Recorder` that, after an op whose results on `device` differ from its
    meta kernel's (`DEVICE_OUTPUTS`), records the conversion of each result that
    differs and hands the code that called the op the converted results."""

    def __init__(self, builder: GraphBuilder, device: str):
        super().__init__(builder)
        self.rules = DEVICE_OUTPUTS.get(device, {})

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = super().__torch_dispatch__(func, types, args, kwargs)
        target = op_name(func)
        rule = self.rules.get(target)
        if rule is None:
            return out
        bound = bind_args(target, tuple(args), tuple((kwargs or {}).items()))
        results = rule.results({k: getattr(v, "dtype", v) for k, v in bound.items()})
        with self:
            return tuple(self._convert(t, results.get(i)) for i, t in enumerate(out))

    def _convert(self, t: torch.Tensor, result: Result | None) -> torch.Tensor:
        """`t` converted to `result` (an empty tensor of its dtype, or a cast),
        under `t`'s name: the code that reads it reads the device's result."""
        if result is None:
            return t
        if result.empty and t.shape != (0,):
            converted = t.new_empty((0,), dtype=result.dtype)
        elif t.dtype != result.dtype:
            converted = t.to(result.dtype)
        else:
            return t
        b = self.builder
        name = b.name_of(t)
        b.rename(name, b.fresh(f"{name}_meta"))
        b.rename(b.name_of(converted), name)
        return converted
