"""Extern results that kernels read get the strides the kernels index them with.

Before:  isin = torch.ops.aten.isin.Tensor_Tensor(t, v)
After:   isin = runtime_shim.as_layout(torch.ops.aten.isin.Tensor_Tensor(t, v), (1, 9))

Note [Extern layouts]
~~~~~~~~~~~~~~~~~~~~~
A kernel reads a buffer through index arithmetic, with the strides traced on the
meta device. For the result of an extern op (a call into PyTorch) those are its meta
kernel's strides, and a device's own kernel may lay the result out otherwise: `isin`
of a transposed tensor is transposed on meta and contiguous on the CPU, attention as
the backend it picks writes it. So each extern result a kernel reads, directly or
through a view, gets its traced strides in the wrapper: `runtime_shim.as_layout`
compares the strides and copies only when they differ. Ops that return a new dense
tensor laid out alike on every device (`ir.ops.FIXED_LAYOUT`: matmuls, embedding)
need no check; those whose layout depends on the backend (`EXTERN_LAYOUT`) are
pinned wherever they are used, as direct views of them rely on it too. A value that
a loop on tensor data carries has several names (the value it starts from, the
body's input and next value, the loop's result): a kernel reading one pins every
extern result among them.
"""

from __future__ import annotations

from dataclasses import replace

from transpiler.ir.graph import TensorMeta
from transpiler.ir.ops import EXTERN_LAYOUT, FIXED_LAYOUT
from transpiler.ir.program import ExternCall, KernelCall, Program
from transpiler.ir.region import CompiledRegion, map_programs, programs_of


def pin_extern_layouts(region: CompiledRegion) -> CompiledRegion:
    """`region` with a `layout` on each extern call whose result a kernel reads
    and whose layout at run time may differ from its traced one."""
    read = _read_by_kernels(region)
    ops = {
        s.out: s.target
        for p in programs_of(region)
        for s in p.steps
        if isinstance(s, ExternCall)
    }
    return map_programs(region, lambda p: _pin(p, read, ops))


def _pin(p: Program, read: set[str], ops: dict[str, str]) -> Program:
    steps = tuple(
        replace(s, layout=s.meta.stride) if _needs_layout(s, read, ops) else s
        for s in p.steps
    )
    return replace(p, steps=steps)


def _needs_layout(s, read: set[str], ops: dict[str, str]) -> bool:
    """Whether `s` makes an extern result that compiled code reads with strides
    its op may not give it."""
    if not isinstance(s, ExternCall) or s.is_view or not isinstance(s.meta, TensorMeta):
        return False
    op = ops.get(s.args[0].name, "") if s.target == "getitem" else s.target
    if op in EXTERN_LAYOUT:
        return True
    return s.out in read and op.startswith("aten.") and op not in FIXED_LAYOUT


def _read_by_kernels(region: CompiledRegion) -> set[str]:
    """The names of the values kernels read, and every other name of a value that
    a loop carries where a kernel reads one."""
    read = {
        name
        for p in programs_of(region)
        for s in p.steps
        if isinstance(s, KernelCall)
        for name in s.args
    }
    for names in _carried(region):
        if read & names:
            read |= names
    return read


def _carried(region: CompiledRegion) -> list[set[str]]:
    """For each value carried by a loop on tensor data, its names: the value it
    starts from, the body's input and next value, and the loop's result."""
    out = []
    for r in region.walk():
        calls = {s.target: s for s in r.program.steps if isinstance(s, ExternCall)}
        for target, loop in r.loops:
            call = calls[target]
            results = {
                s.args[1]: s.out
                for s in r.program.steps
                if isinstance(s, ExternCall)
                and s.target == "getitem"
                and s.args[0].name == call.out
            }
            initial = call.args[1 : 1 + len(loop.carried)]
            nexts = loop.program.outputs[: len(loop.carried)]
            for i, name in enumerate(loop.carried):
                names = {name, initial[i].name, nexts[i].name}
                out.append(names | ({results[i]} if i in results else set()))
    return out
