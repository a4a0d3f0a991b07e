"""Text form of a `Program`: what `--explain` and the pass tests show."""

from __future__ import annotations

from transpiler.ir.program import Alloc, ExternCall, Index, KernelCall, Program, Stmt


def format_index(index: Index) -> str:
    parts = [f"{t.stride}*(({t.var}//{t.div})%{t.mod})" for t in index.terms]
    if index.offset or not parts:
        parts.append(str(index.offset))
    return " + ".join(parts)


def format_program(p: Program) -> str:
    lines = []
    for k in p.kernels:
        args = ", ".join(a.param for a in k.inputs + k.outputs)
        lines.append(f"kernel {k.name}({args}) xnumel={k.xnumel} rnumel={k.rnumel}:")
        for s in k.body:
            if isinstance(s, Stmt):
                args_text = ", ".join(
                    (
                        f"{a[0]}[{format_index(a[1])}]"
                        if s.op == "load" and i == 0
                        else str(a)
                    )
                    for i, a in enumerate((s.args,) if s.op == "load" else s.args)
                )
                op = {"reduce": s.reduce, "scan": f"cum{s.reduce}"}.get(s.op, s.op)
                lines.append(f"  {s.name}.{s.level} = {op}({args_text})")
            else:
                lines.append(f"  {s.buffer}[{format_index(s.index)}] = {s.value}")
    for step in p.steps:
        if isinstance(step, Alloc):
            lines.append(f"{step.buffer} = empty({step.meta})")
        elif isinstance(step, KernelCall):
            lines.append(f"{step.kernel}({', '.join(step.args)})")
        elif isinstance(step, ExternCall):
            lines.append(f"{step.out} = {step.target}{tuple(step.args)}")
    lines.append(f"return {p.outputs}")
    return "\n".join(lines)
