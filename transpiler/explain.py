"""`transpile --explain`: what each variant became, before anything is written.

Like `torch._dynamo.explain`, but ahead of time: per target and variant, the guards
that select it, the graph breaks (fallback code) with `file:line`, reason and source
line, the branches on tensor data, and how much of the work runs in generated kernels.
"""

from __future__ import annotations

from transpiler.codegen import cuda_graphs
from transpiler.codegen.module import count
from transpiler.codegen.wrapper import (
    TargetCode,
    VariantCode,
    megabytes,
    variant_guards,
)
from transpiler.ir.graph import FALLBACK, LOOP
from transpiler.ir.program import ExternCall, KernelCall
from transpiler.passes.hoist_constants import kept_bytes


def report(modules: dict, options) -> str:
    out: list[str] = []
    for stem, mb in modules.items():
        stubs = {name: stub for stub, name in mb.stubs.items()}
        for t in mb.targets:
            out.append(f"{t.source} -> {options.out.as_posix()}/{stem}.py")
            for vc in t.variants:
                out += ["  " + line for line in _variant(t, vc, stubs)]
            out.append("")
    return "\n".join(out).rstrip() + "\n"


def _variant(t: TargetCode, vc: VariantCode, stubs: dict) -> list[str]:
    lines = [f"variant {vc.name} ({vc.describe()})"]
    if vc.region is None:
        return [
            *lines,
            f"  runs the source: {vc.fallback_reason} "
            f"({vc.fallback_span}: {vc.fallback_span.text})",
            *(f"  {line}" for line in cuda_graphs.explain(vc)),
        ]
    guards = variant_guards(t, vc)
    lines.append("  guards:")
    lines += [f"    {g.text}" for g in guards]
    steps = [s for p in vc.programs for s in p.steps]
    kernels = [s for s in steps if isinstance(s, KernelCall)]
    calls = [
        s
        for s in steps
        if isinstance(s, ExternCall) and not s.is_view and s.target != "getitem"
    ]
    externs = [s.target for s in calls if not s.target.startswith((FALLBACK, LOOP))]
    breaks = [s for s in calls if s.target.startswith(FALLBACK)]
    in_kernels = sum(p.kernel_ops for p in vc.programs)
    total = in_kernels + len(externs)
    share = f"{100 * in_kernels // total}%" if total else "-"
    distinct = len({k.kernel for k in kernels})
    lines.append(
        f"  kernels: {count(len(kernels), 'launch', 'launches')} of "
        f"{count(distinct, 'distinct kernel')}"
    )
    lines.append(f"  ATen ops in generated kernels: {in_kernels} of {total} ({share})")
    program = vc.region.program
    if program.kept and not cuda_graphs.uses_cuda_graph(vc):
        lines.append(
            f"  kept between calls: {count(len(program.kept), 'value')} of parameters"
            f" and buffers alone ({megabytes(kept_bytes(program))}), computed again"
            " when one they read changes"
        )
    if externs:
        names = sorted({e.split(".")[1] for e in externs})
        lines.append(f"  extern calls: {len(externs)} ({', '.join(names)})")
    conds = [r for r in vc.region.walk() if r.cond is not None]
    for r in conds:
        lines.append(f"  branch on tensor data: {r.span}: {r.span.text}")
    for _, loop in (loop for r in vc.region.walk() for loop in r.loops):
        where = f"{loop.span}: {loop.span.text}" if loop.span else "a loop"
        lines.append(f"  loop on tensor data: {where}")
    if not breaks:
        lines.append("  graph breaks: none")
    for name in dict.fromkeys(s.target for s in breaks):
        stub = stubs[name]
        lines.append(f"  graph break: {stub.span}: {stub.reason}")
        lines.append(f"    {stub.span.text}")
    return lines + [f"  {line}" for line in cuda_graphs.explain(vc)]


def compiled_nothing(modules: dict) -> list[str]:
    """One line for each variant whose every statement runs as the source: all
    fallback, or fallback calls with not one kernel or PyTorch call around them."""
    lines = []
    for mb in modules.values():
        for t in mb.targets:
            for vc in t.variants:
                where = f"{t.source} variant {vc.name} ({vc.describe()})"
                if vc.region is None:
                    lines.append(
                        f"{where} compiles nothing: {vc.fallback_reason} "
                        f"({vc.fallback_span}); it runs the source"
                    )
                    continue
                steps = [s for p in vc.programs for s in p.steps]
                work = [
                    s
                    for s in steps
                    if isinstance(s, KernelCall)
                    or (
                        isinstance(s, ExternCall)
                        and not s.is_view
                        and s.target != "getitem"
                        and not s.target.startswith((FALLBACK, LOOP))
                    )
                ]
                if not work and vc.calls_fallback:
                    lines.append(
                        f"{where} compiles nothing: every statement with tensor "
                        "work is fallback code (see --explain)"
                    )
    return lines
