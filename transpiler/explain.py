"""`transpile --explain`: what each variant became, before anything is written.

Like `torch._dynamo.explain`, but ahead of time: per target and variant, the guards
that select it, the graph breaks (fallback code) with `file:line`, reason and source
line, the branches on tensor data, and how much of the work runs in generated kernels.
"""

from __future__ import annotations

from transpiler.build import Backward, Build, TargetCode, VariantCode
from transpiler.codegen.wrapper import OVERWRITTEN, megabytes, variant_guards
from transpiler.ir.program import ExternCall, KernelCall
from transpiler.passes.hoist_constants import kept_bytes
from transpiler.text import count


def report(build: Build, options) -> str:
    out: list[str] = []
    for module in build.modules:
        for t in module.targets:
            out.append(f"{t.source} -> {options.out.as_posix()}/{module.stem}.py")
            for vc in t.variants:
                out += ["  " + line for line in _variant(t, vc, module.stubs)]
            out.append("")
    return "\n".join(out).rstrip() + "\n"


def _variant(t: TargetCode, vc: VariantCode, stubs: dict) -> list[str]:
    lines = [f"variant {vc.name} ({vc.describe()})"]
    if vc.region is None:
        span = vc.fallback_span
        where = f" ({span}: {span.text})" if span is not None else ""
        return [
            *lines,
            f"  runs the source: {vc.fallback_reason}{where}",
            *(f"  {line}" for line in _cuda_graph(vc)),
        ]
    guards = variant_guards(t, vc)
    lines.append("  guards:")
    lines += [f"    {g.text}" for g in guards]
    steps = vc.steps
    kernels = [s for s in steps if isinstance(s, KernelCall)]
    externs = [s.target for s in steps if isinstance(s, ExternCall) and s.computes]
    breaks = vc.fallback_calls
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
    if program.kept and not vc.cuda_graph:
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
    lines += _training(vc)
    if not breaks:
        lines.append("  graph breaks: none")
    for name in dict.fromkeys(s.target for s in breaks):
        stub = stubs[name]
        lines.append(f"  graph break: {stub.span}: {stub.reason}")
        lines.append(f"    {stub.span.text}")
    return lines + [f"  {line}" for line in _cuda_graph(vc)]


def _training(vc: VariantCode) -> list[str]:
    """What a training variant's forward saves for its backward, and what the
    backward computes again (Note [Save or recompute] in passes/partition.py)."""
    if vc.backward is not None:
        return _backward_lines(vc.backward, "  ")
    lines = []
    for part in vc.parts:  # Note [Training through graph breaks]
        names = ", ".join(n for n, _ in part.variant.inputs)
        if part.backward is None:
            lines.append(f"  part {part.name} ({names}): no gradient, no backward")
            continue
        lines.append(f"  part {part.name} ({names}):")
        lines += _backward_lines(part.backward, "    ")
    return lines


def _backward_lines(b: Backward, ind: str) -> list[str]:
    of = ", ".join(b.wrt)
    again = ", ".join(b.recomputed[:8]) + (", ..." if len(b.recomputed) > 8 else "")
    return [
        f"{ind}backward: compiled, the gradients of {of}",
        f"{ind}saved for the backward: {count(len(b.saved), 'tensor')}"
        f" ({megabytes(b.saved_bytes)} beside inputs and parameters):"
        f" {', '.join(b.saved)}",
        f"{ind}computed again in the backward: {count(len(b.recomputed), 'value')}"
        + (f" ({again})" if again else ""),
    ] + (
        [
            f"{ind}a second backward for the loss alone"
            f" ({', '.join(b.loss_tangents)}): the other outputs' gradients zero,"
            " not filled or read"
        ]
        if b.loss is not None
        else []
    )


def _cuda_graph(vc: VariantCode) -> list[str]:
    """The line of a variant that asked for a CUDA graph: what
    `pipeline.decide_cuda_graph` decided."""
    if vc.cuda_graph == "tree":
        segments = len(list(vc.region.walk()))
        return [
            f"cuda graph: one per segment between branches on tensor data"
            f" ({segments} segments), each captured on first use, then"
            f" replayed; the branches run in Python ({OVERWRITTEN})"
        ]
    if vc.cuda_graph:
        return [
            f"cuda graph: captured on the first call, then replayed ({OVERWRITTEN})"
        ]
    if vc.cuda_graph_off:
        return [f"cuda graph: off, {vc.cuda_graph_off}; compiled without one"]
    return []


def compiled_nothing(build: Build) -> list[str]:
    """One line for each variant whose every statement runs as the source: all
    fallback, or fallback calls with not one kernel or PyTorch call around them."""
    lines = []
    for module in build.modules:
        for t in module.targets:
            for vc in t.variants:
                where = f"{t.source} variant {vc.name} ({vc.describe()})"
                if vc.region is None:
                    span = vc.fallback_span
                    at = f" ({span})" if span is not None else ""
                    lines.append(
                        f"{where} compiles nothing: {vc.fallback_reason}{at}; "
                        "it runs the source"
                    )
                    continue
                work = [
                    s
                    for s in vc.steps
                    if isinstance(s, KernelCall)
                    or (isinstance(s, ExternCall) and s.computes)
                ]
                if not work and vc.calls_fallback:
                    lines.append(
                        f"{where} compiles nothing: every statement with tensor "
                        "work is fallback code (see --explain)"
                    )
    return lines
