"""A cuda variant that branches on tensor data, written as CUDA-graph segments.

With CUDA graphs on, such a variant cannot be one graph: each `if` reads its
condition on the host. So its code is split where the regions split (Note [Regions]):
each region's straight-line code becomes a segment function, and the variant
function keeps its shape, with each straight-line block replaced by a call of its
segment through `graphs.run` (Note [CUDA graph trees] in runtime_shim/cuda_graphs.py):

    def _cuda_1(graphs, self, x):
        addmm, gt = graphs.run(_cuda_1_seg0, self, x)
        # sync: the branch reads tensor data (examples/toy.py:28: if y.sum() > 0:)
        if gt:
            return graphs.run(_cuda_1_seg1, self, x, addmm)
        else:
            return graphs.run(_cuda_1_seg2, self, x, addmm)

    def _cuda_1_seg0(self, x):
        ...  # the code before the branch, as the variant without graphs has it
        return (addmm, gt)

Segments are numbered in the order the regions nest (depth first, the true branch
first). The variant function takes the target's parameters under the wrapper's
names for them (`TargetCode.local_names`), as `variant_function` does; each segment
takes the variant's tensor inputs under their names in the graph (`graph_inputs`),
then the values of earlier segments it reads; one before a branch returns the
values later segments read, then the condition. Variants without a branch keep one
function and one graph.
"""

from __future__ import annotations

from transpiler.build import TargetCode, VariantCode
from transpiler.codegen.wrapper import (
    bind_graph_inputs,
    device_locals,
    device_source,
    graph_inputs,
    literal,
    straight_lines,
    sync_comment,
)
from transpiler.ir.graph import Ref
from transpiler.ir.region import CompiledRegion
from transpiler.text import docstring


def segment_functions(t: TargetCode, vc: VariantCode, kernels: dict) -> list[str]:
    """The variant function (calling its segments through `graphs`), then the
    segment functions."""
    assert vc.region is not None and vc.region.cond is not None
    inputs = list(graph_inputs(vc).values())
    # no parameter's local nor graph value is named `graphs` (`text.is_reserved`)
    graphs = "graphs"
    self_ = ["self"] if t.is_module else []
    body: list[str] = []  # the variant function's
    segments: list[list[str]] = []  # each segment function's lines, by number

    def visit(r: CompiledRegion, earlier: list[str], ind: str, after: str) -> None:
        """Segment for region `r`, which runs `after` (the branch taken); `earlier`
        are the values of the segments before it."""
        index, name = len(segments), f"_{vc.name}_seg{len(segments)}"
        reads = [n for n in r.program.inputs if n in earlier and n not in inputs]
        assert set(r.program.inputs) <= {*inputs, *reads}, r.program.inputs
        params = ", ".join([*self_, *inputs, *reads])
        segments.append([])  # numbered before the segments after it
        call = f"{graphs}.run({name}, {params})"
        if r.cond is None:
            body.append(f"{ind}return {call}")
            doc = [f"Segment {index} of {vc.name}: {after}."]
        else:
            outs, where = _outputs(r, inputs), _where(r)
            body.append(f"{ind}{literal(outs)} = {call}")
            body.append(f"{ind}# sync: {sync_comment(r)}")
            later = [*earlier, *(o.name for o in outs)]
            body.append(f"{ind}if {r.cond}:")
            visit(r.if_true, later, ind + "    ", f"where {where} is true")
            body.append(f"{ind}else:")
            visit(r.if_false, later, ind + "    ", f"where {where} is false")
            doc = [
                f"Segment {index} of {vc.name}: {after}, up to {where}.",
                "",
                "Returns what later segments read, then the condition.",
            ]
        segments[index] = _segment(t, vc, name, params, doc, r, kernels)

    visit(vc.region, [], "    ", "from the start")
    own = t.signature.text(t.defaults, t.local_names)
    params = ", ".join(p for p in (graphs, *self_, own) if p)
    driver = [
        f"def _{vc.name}({params}):",
        f'    """Variant {vc.name} as CUDA graphs, one per segment between branches:',
        f"    `{graphs}` (runtime_shim.CudaGraphTree) captures each on first use and",
        '    then replays it; the branches run here, in Python."""',
        *bind_graph_inputs(t, vc),
        *body,
    ]
    return driver + [line for seg in segments for line in ["", "", *seg]]


def _segment(
    t: TargetCode,
    vc: VariantCode,
    name: str,
    params: str,
    doc: list[str],
    r: CompiledRegion,
    kernels: dict,
) -> list[str]:
    """One segment: the region's straight-line code, returning what it outputs."""
    quoted = [f'"""{docstring(doc[0])}', *map(docstring, doc[1:])]
    quoted[-1] += '"""'
    lines = [f"def {name}({params}):", *(f"    {d}" if d else "" for d in quoted)]
    lines += device_locals(device_source(t, vc), [r.program])
    lines += straight_lines(r, kernels, vc.variant.device, t.reads, "    ")
    inputs = list(graph_inputs(vc).values())
    outs = r.program.outputs if r.cond is None else _outputs(r, inputs)
    return lines + [f"    return {literal(outs)}"]


def _outputs(r: CompiledRegion, inputs: list[str]) -> tuple[Ref, ...]:
    """What a segment before a branch returns: the values later segments read, but
    the variant's inputs, which every segment takes anyway; then the condition."""
    *live, cond = r.program.outputs
    assert all(isinstance(o, Ref) for o in r.program.outputs), r.program.outputs
    return (*(o for o in live if o.name not in inputs), cond)


def _where(r: CompiledRegion) -> str:
    """The branch, as a docstring quotes it (escaped by `_segment`)."""
    return f"{r.span} ({r.span.text})" if r.span else "a branch on tensor data"
