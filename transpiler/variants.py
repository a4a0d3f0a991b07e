"""The pieces of a dynamic variant (Note [Dynamic dimensions] in ir/dynamic.py):
what its named dimension is called in the code, the guards on its size, and its
kernels' module-wide names once generalized. `pipeline.compile_dynamic` uses them.
"""

from __future__ import annotations

import dataclasses
import re
from functools import partial

from transpiler.build import RangeGuard
from transpiler.frontend.objects import dimension_source
from transpiler.ir.dynamic import Dim
from transpiler.ir.program import (
    Alloc,
    ExternCall,
    KernelCall,
    KernelNames,
    Program,
    body_key,
)
from transpiler.ir.region import CompiledRegion, map_programs, programs_of
from transpiler.options import Variant
from transpiler.text import is_reserved

OPERATORS = {
    "Equal": "==",
    "NotEqual": "!=",
    "LessThan": "<",
    "LessThanEqual": "<=",
    "GreaterThan": ">",
    "GreaterThanEqual": ">=",
}


# A name no kernel, C++ header or Triton gives to anything of its own: one capital,
# then small letters and digits (`B`, `T`, `Seq`). Others get a prefix of their own.
_KEPT = re.compile(r"[A-Z][a-z0-9]*")


def code_name(dim: str, compiled: CompiledRegion) -> str:
    """What the generated code calls named dimension `dim`: a local of the variant
    function (`B = x.shape[0]`) and an argument of its kernels. The user's name
    where it can be neither a kernel's own name (`x`, `tl`, `x_ptr`, `int64_t`)
    nor a value of the variant (a stub's output, say), else `dim_<name>`,
    numbered apart from those values."""
    taken = {n for p in programs_of(compiled) for n in _bound(p)}
    for p in programs_of(compiled):  # the kernels' parameters (`x_ptr`)
        taken.update(a.param for k in p.kernels for a in k.inputs + k.outputs)
    for r in compiled.walk():
        for _, loop in r.loops:
            taken.update(loop.carried)
    base = dim if _KEPT.fullmatch(dim) else f"dim_{dim}"
    name, n = base, 0
    while name in taken or is_reserved(name):
        n += 1
        name = f"{base}_{n}"
    return name


def _bound(p: Program) -> list[str]:
    """The names a program's code binds: inputs, parameters, buffers, results."""
    names = [*p.inputs, *(name for name, _, _ in p.params)]
    for step in p.steps:
        if isinstance(step, Alloc):
            names.append(step.buffer)
        elif isinstance(step, ExternCall):
            names += [step.out, f"{step.out}_cond"]
    return names


def range_guards(
    comparisons: list, variant: Variant, objects: tuple, dim: str
) -> list[RangeGuard]:
    """The comparisons of the dimension's size that the code was compiled for."""
    source = dimension_source(variant.inputs, objects, dim)
    return [
        _range_guard(c, source)
        for c in comparisons
        if isinstance(c[2], Dim) or isinstance(c[3], Dim)
    ]


def _range_guard(comparison: tuple, source: tuple[str, int]) -> RangeGuard:
    """A comparison of the dimension's size decided at transpile time, as a guard
    reading the size where the variant reads it (`objects.dimension_source`)."""
    _, op, left, right, outcome = comparison
    return RangeGuard(*source, OPERATORS[op], left, right, outcome)


def register_kernels(
    compiled: CompiledRegion, names: KernelNames
) -> tuple[CompiledRegion, list]:
    """The generalized kernels under their module-wide names (one per body), and
    those of them that are new to the module."""
    renames: dict[str, str] = {}
    new_kernels = []
    for program in programs_of(compiled):
        for k in program.kernels:
            base = k.name.rsplit("_", 1)[0]
            new, fresh = names.name_for(base, body_key(k))
            renames[k.name] = new
            if fresh:
                new_kernels.append(dataclasses.replace(k, name=new))
    renamed = map_programs(compiled, partial(_rename_program, renames=renames))
    return renamed, new_kernels


def _rename_program(p: Program, renames: dict[str, str]) -> Program:
    steps = tuple(
        (
            dataclasses.replace(s, kernel=renames[s.kernel])
            if isinstance(s, KernelCall)
            else s
        )
        for s in p.steps
    )
    kernels = tuple(dataclasses.replace(k, name=renames[k.name]) for k in p.kernels)
    return dataclasses.replace(p, steps=steps, kernels=kernels)
