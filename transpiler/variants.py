"""Compile one variant: trace, name its fallback code, optimize and lower its regions.

A variant with a named dynamic dimension is compiled at several sizes and generalized
(see Note [Dynamic dimensions] in ir/dynamic.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from functools import partial

from transpiler.codegen.wrapper import VariantCode
from transpiler.frontend.trace import Traced
from transpiler.ir.dynamic import SAMPLES, Dim, Mismatch, generalize
from transpiler.ir.program import KernelCall, Program
from transpiler.ir.region import CompiledRegion, map_programs, programs_of
from transpiler.options import TensorSpec, Variant
from transpiler.passes import lower_region, map_graphs, name_stubs
from transpiler.passes.direct_views import direct_views
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
    compiled = _lower(traced, mb, names, variant.device)
    tensors = tuple(n for n, s in variant.inputs if isinstance(s, TensorSpec))
    compiled = direct_views(compiled, tensors)
    mb.kernels[variant.device] += [
        k for p in programs_of(compiled) for k in p.kernels if k.name not in before
    ]
    return VariantCode(name, variant, traced.guards, compiled)


def compile_dynamic(name: str, variant: Variant, tracer: Tracer, mb) -> VariantCode:
    """One variant for every size (>= 2) of the variant's named dimension."""
    (dim,) = variant.dynamic
    samples = [tracer(variant.sized({dim: size})) for size in SAMPLES]
    failed = next((t for t in samples if t.region is None), None)
    if failed is not None:
        fb = failed.fallback
        return VariantCode(name, variant, failed.guards, None, fb.reason, fb.span)
    try:
        guards = generalize([t.guards for t in samples], dim)
        compiled = generalize(
            [_lower(t, mb, KernelNames(), variant.device) for t in samples], dim
        )
        comparisons = generalize([list(t.comparisons) for t in samples], dim)
    except Mismatch:
        span = next((c[0] for c in samples[0].comparisons), None)
        reason = f"the code depends on {dim} beyond sizes (a loop over it, say)"
        return VariantCode(name, variant, (), None, reason, span)
    size = _size_expr(variant, dim)
    ranges = [
        _range_guard(c, size)
        for c in comparisons
        if isinstance(c[2], Dim) or isinstance(c[3], Dim)
    ]
    compiled = _register_kernels(compiled, mb.names[variant.device], mb, variant)
    return VariantCode(
        name, variant, (*guards, *ranges), compiled, dynamic=((dim, size),)
    )


def _lower(traced: Traced, mb, names: KernelNames, device: str) -> CompiledRegion:
    stub_names = [mb.stub_name(stub) for stub in traced.stubs]
    region = map_graphs(traced.region, partial(name_stubs, names=stub_names))
    loops = tuple(
        dataclasses.replace(b, graph=name_stubs(b.graph, stub_names))
        for b in traced.loops
    )
    return lower_region(region, names, loops=loops, device=device)


def _size_expr(variant: Variant, dim: str) -> str:
    """Python for the size of `dim` at run time: `x.shape[0]`."""
    for name, spec in variant.inputs:
        if isinstance(spec, TensorSpec) and dim in spec.shape:
            return f"{name}.shape[{spec.shape.index(dim)}]"
    raise AssertionError(dim)


def _range_guard(comparison: tuple, size: str) -> str:
    _, op, left, right, outcome = comparison

    def text(v) -> str:
        return str(Dim(v.a, v.b, size)) if isinstance(v, Dim) else str(v)

    test = f"{text(left)} {OPERATORS[op]} {text(right)}"
    return test if outcome else f"not ({test})"


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
