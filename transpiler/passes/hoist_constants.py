"""Find the values a program computes from parameters and buffers alone.

Note [Values of parameters alone]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Some of what a forward computes depends on the model's parameters and buffers and
on nothing the call passes in: the channels-last copy of a convolution's weight
(passes/channels_last.py), a cast of a weight to the compute dtype, `1 + weight`.
Computed on every call, each costs a launch and an allocation, and its memory
traffic. The variant function computes them once and keeps them on the instance
(`runtime_shim.constants`), computing them again only when one of the tensors they
read is another object, was written in place (its version counter moved) or moved
(its address changed):

    sources = (conv1_weight, layer1_0_conv2_weight)
    constants = runtime_shim.constants(self, "cuda_0", sources)
    if constants is None:  # computed from parameters and buffers alone: 0.6 MB
        clone_1 = empty((64, 3, 7, 7), (147, 1, 21, 3), torch.float32)
        _triton.triton_fused_convolution_1[(10,)](conv1_weight, clone_1, ...)
        ...
        values = (clone_1, clone_2)
        constants = runtime_shim.keep_constants(self, "cuda_0", sources, values)
    clone_1, clone_2 = constants

This pass finds them: the steps (kernels, allocations, pure extern calls and views)
whose every tensor argument is a parameter, a buffer or such a value, with no
dynamic size and no random numbers. A factory reads no tensor: a position table
or a mask built from `torch.arange(16)` is kept too. A program whose code may
write a parameter (fallback code, a loop on tensor data, an extern op that
mutates, a kernel storing into a tensor it did not allocate) has none: moved to
the front of the call, the computation would read what those writes had not
written yet. Values the call
returns are computed in place (the caller may write them). The wrapper keeps
`Program.kept`, those of them that later steps read, and computes the rest inside
the cached block only.

A training variant keeps none (`pipeline.finish`): an optimizer writes the
parameters every step, and a fused one (`torch.optim.AdamW(fused=True)`) without
moving their versions, so kept values would be read stale.

A variant replayed from a CUDA graph computes them in place: a graph replays what it
captured, and would not compute them again after a parameter was written in place.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace

import torch

from transpiler.ir.dynamic import dims_in
from transpiler.ir.graph import Ref, Updated, leaves
from transpiler.ir.ops import resolve_op
from transpiler.ir.program import (
    Alloc,
    ExternCall,
    FallbackCall,
    KernelCall,
    LoopCall,
    Program,
    Step,
    reads_writes,
)
from transpiler.passes.direct_views import DIRECT_VIEW


def hoist_constants(program: Program) -> Program:
    """`program` with `constants` (in step order) and `kept` filled in."""
    if not program.params or not _writes_only_its_own(program):
        return program
    kernels = {k.name: k for k in program.kernels}
    constant = {name for name, _, _ in program.params}
    returned = _returned(program)
    # a buffer two steps write (a scatter adds into its copy) is not computed
    # once: the second write reads what the first wrote
    written = Counter(
        name
        for step in program.steps
        if not isinstance(step, Alloc)
        for name in reads_writes(step, program)[1]
    )
    returned |= {name for name, n in written.items() if n > 1}
    found: list[str] = []
    computes = False  # a kernel or an op, not views alone: worth keeping
    for step in program.steps:
        if isinstance(step, Alloc):
            continue
        reads, writes = reads_writes(step, program)
        if (
            set(reads) <= constant
            and not returned.intersection(writes)
            and _repeatable(step, kernels)
        ):
            constant |= set(writes)
            found += writes
            computes |= not (isinstance(step, ExternCall) and step.is_view)
    if not found or not computes:
        return program
    program = replace(program, constants=tuple(found))
    _, outside = constant_steps(program)
    later = {name for step in outside for name in reads_writes(step, program)[0]}
    return replace(program, kept=tuple(v for v in found if v in later))


def constant_steps(program: Program) -> tuple[list[Step], list[Step]]:
    """`program.steps` split into those computing `program.constants` (with their
    allocations) and the rest, each in order."""
    hoisted = set(program.constants)
    inside: list[Step] = []
    outside: list[Step] = []
    for step in program.steps:
        out = reads_writes(step, program)[1]
        (inside if set(out) <= hoisted else outside).append(step)
    return inside, outside


def constant_sources(program: Program) -> list[str]:
    """The parameters and buffers (wrapper names, in `program.params` order) that
    the values of parameters alone are computed from."""
    inside, _ = constant_steps(program)
    read = {name for step in inside for name in reads_writes(step, program)[0]}
    return [name for name, _, _ in program.params if name in read]


def kept_bytes(program: Program) -> int:
    """The memory the values of parameters alone of `program` take, kept."""
    inside, _ = constant_steps(program)
    return sum(
        s.meta.numel * s.meta.dtype.itemsize for s in inside if isinstance(s, Alloc)
    )


def _repeatable(step: Step, kernels) -> bool:
    """Whether computing the step once stands for computing it on every call."""
    if isinstance(step, KernelCall):
        return not dims_in(kernels[step.kernel])
    if step.meta == () or dims_in(step.meta) or dims_in(step.args):
        return False  # a check of tensor data, or a dynamic size
    if step.target == DIRECT_VIEW:
        return True
    op = _aten(step.target)  # None: the user's code, a loop, `getitem`
    return op is not None and torch.Tag.nondeterministic_seeded not in op.tags


def _writes_only_its_own(program: Program) -> bool:
    """No step may write a tensor the program did not allocate, nor the program
    write back into a parameter or buffer (`Updated.copies`)."""
    if isinstance(program.outputs, Updated) and program.outputs.copies:
        return False
    allocated = {s.buffer for s in program.steps if isinstance(s, Alloc)}
    for step in program.steps:
        if isinstance(step, KernelCall):
            if not set(reads_writes(step, program)[1]) <= allocated:
                return False
        elif isinstance(step, ExternCall) and step.target != DIRECT_VIEW:
            if isinstance(step, (FallbackCall, LoopCall)):
                return False
            op = _aten(step.target)
            if op is not None and op._schema.is_mutable:
                return False
    return True


def _aten(target: str):
    """The OpOverload an extern call's target names, or None (not an op)."""
    if target.count(".") != 2:
        return None
    return resolve_op(target)


def _returned(program: Program) -> set[str]:
    """The values the call returns, and those it returns a view of."""
    returned = {v.name for v in leaves(program.outputs) if isinstance(v, Ref)}
    for step in reversed(program.steps):
        if isinstance(step, ExternCall) and step.is_view and step.out in returned:
            returned |= {a.name for a in step.args if isinstance(a, Ref)}
    return returned
