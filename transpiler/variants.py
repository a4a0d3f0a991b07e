"""Compile one variant: trace, name its fallback code, optimize and lower its regions.

A variant with a named dynamic dimension is compiled at several sizes and generalized
(see Note [Dynamic dimensions] in ir/dynamic.py).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from functools import partial

from transpiler.codegen.text import is_reserved
from transpiler.codegen.wrapper import RangeGuard, VariantCode
from transpiler.frontend.objects import dimension_source
from transpiler.frontend.trace import Traced
from transpiler.ir.dynamic import SAMPLES, Dim, Mismatch, generalize
from transpiler.ir.program import Alloc, ExternCall, KernelCall, Program
from transpiler.ir.region import CompiledRegion, map_programs, programs_of
from transpiler.options import Variant
from transpiler.passes import lower_region, map_graphs, name_stubs
from transpiler.passes.direct_views import direct_views
from transpiler.passes.extern_layouts import pin_extern_layouts
from transpiler.passes.hoist_constants import hoist_constants
from transpiler.passes.schedule import KernelNames, body_key

Tracer = Callable[[Variant], Traced]
OPERATORS = {
    "Equal": "==",
    "NotEqual": "!=",
    "LessThan": "<",
    "LessThanEqual": "<=",
    "GreaterThan": ">",
    "GreaterThanEqual": ">=",
}


def compile_variant(name: str, variant: Variant, tracer: Tracer, mb) -> VariantCode:
    traced = tracer(variant)
    if traced.region is None:
        fb = traced.fallback
        return VariantCode(name, variant, traced.guards, None, fb.reason, fb.span)
    names = mb.names[variant.device]
    before = set(names.by_body.values())
    compiled = pin_extern_layouts(_lower(traced, mb, names, variant.device))
    compiled = direct_views(compiled, tuple(compiled.program.inputs))
    compiled = _hoist_constants(compiled)
    mb.kernels[variant.device] += [
        k for p in programs_of(compiled) for k in p.kernels if k.name not in before
    ]
    return VariantCode(name, variant, traced.guards, compiled, objects=traced.objects)


def compile_dynamic(name: str, variant: Variant, tracer: Tracer, mb) -> VariantCode:
    """One variant for every size (>= 2) of the variant's named dimension."""
    (dim,) = variant.dynamic
    samples = [tracer(variant.sized({dim: size})) for size in SAMPLES]
    failed = next((t for t in samples if t.region is None), None)
    if failed is not None:
        fb = failed.fallback
        return VariantCode(name, variant, failed.guards, None, fb.reason, fb.span)
    lowered = [_lower(t, mb, KernelNames(), variant.device) for t in samples]
    code = code_name(dim, lowered[0])
    try:
        guards = generalize([t.guards for t in samples], code)
        compiled = generalize(lowered, code)
        comparisons = generalize([list(t.comparisons) for t in samples], code)
        objects = generalize([t.objects for t in samples], dim)
    except Mismatch:
        span = next((c[0] for c in samples[0].comparisons), None)
        reason = f"the code depends on {dim} beyond sizes (a loop over it, say)"
        return VariantCode(name, variant, (), None, reason, span)
    ranges = [
        _range_guard(c, dimension_source(variant.inputs, objects, dim))
        for c in comparisons
        if isinstance(c[2], Dim) or isinstance(c[3], Dim)
    ]
    compiled = _register_kernels(compiled, mb.names[variant.device], mb, variant)
    compiled = _hoist_constants(pin_extern_layouts(compiled))
    return VariantCode(
        name,
        variant,
        (*guards, *ranges),
        compiled,
        dynamic=((dim, code),),
        objects=objects,
    )


# A name no kernel, C++ header or Triton gives to anything of its own: one capital,
# then small letters and digits (`B`, `T`, `Seq`). Others get a prefix of their own.
_KEPT = re.compile(r"[A-Z][a-z0-9]*")


def code_name(dim: str, compiled: CompiledRegion) -> str:
    """What the generated code calls named dimension `dim`: a local of the variant
    function (`B = x.shape[0]`) and an argument of its kernels. The user's name
    where it can be neither a kernel's own name (`x`, `tl`, `in_ptr0`, `int64_t`)
    nor a value of the variant (a stub's output, say), else `dim_<name>`,
    numbered apart from those values."""
    taken = {n for p in programs_of(compiled) for n in _bound(p)}
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


def _lower(traced: Traced, mb, names: KernelNames, device: str) -> CompiledRegion:
    stub_names = [mb.stub_name(stub) for stub in traced.stubs]
    region = map_graphs(traced.region, partial(name_stubs, names=stub_names))
    loops = tuple(
        dataclasses.replace(b, graph=name_stubs(b.graph, stub_names))
        for b in traced.loops
    )
    return lower_region(region, names, loops=loops, device=device)


def _hoist_constants(compiled: CompiledRegion) -> CompiledRegion:
    """Values of parameters alone, in the code before any branch (Note [Values of
    parameters alone])."""
    return dataclasses.replace(compiled, program=hoist_constants(compiled.program))


def _range_guard(comparison: tuple, source: tuple[str, int]) -> RangeGuard:
    """A comparison of the dimension's size decided at transpile time, as a guard
    reading the size where the variant reads it (`objects.dimension_source`)."""
    _, op, left, right, outcome = comparison
    return RangeGuard(*source, OPERATORS[op], left, right, outcome)


def _register_kernels(
    compiled: CompiledRegion, names: KernelNames, mb, variant: Variant
) -> CompiledRegion:
    """Give the generalized kernels their module-wide names (one per body)."""
    renames: dict[str, str] = {}
    for program in programs_of(compiled):
        for k in program.kernels:
            base = k.name.rsplit("_", 1)[0]
            new, fresh = names.name_for(base, body_key(k))
            renames[k.name] = new
            if fresh:
                mb.kernels[variant.device].append(dataclasses.replace(k, name=new))
    return map_programs(compiled, partial(_rename_program, renames=renames))


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
