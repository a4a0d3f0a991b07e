"""The optimization pipeline: graph passes in order, then lowering to a Program."""

from __future__ import annotations

from dataclasses import replace

from transpiler.ir.graph import Graph
from transpiler.ir.program import Program
from transpiler.ir.region import CompiledLoop, CompiledRegion, LoopBody, Region
from transpiler.passes.addmm_activation import addmm_activation
from transpiler.passes.channels_last import channels_last
from transpiler.passes.check_indices import check_indices
from transpiler.passes.constant_fold import constant_fold
from transpiler.passes.dce import dce
from transpiler.passes.decompose import decompose
from transpiler.passes.device_outputs import fold_device_outputs
from transpiler.passes.drop_copies import drop_copies
from transpiler.passes.drop_expands import drop_expands
from transpiler.passes.fold_linear import fold_linear
from transpiler.passes.fuse import fuse
from transpiler.passes.grouped_attention import repeat_grouped_heads
from transpiler.passes.recompute import recompute_broadcasts
from transpiler.passes.schedule import KernelNames, schedule
from transpiler.passes.small_matmul import unroll_small_matmuls
from transpiler.passes.split_addmm import split_addmm
from transpiler.passes.split_reductions import split_reductions

PIPELINE = (
    (check_indices, "check the indices of the indirect loads kernels compute"),
    (decompose, "rewrite composite ops (layer_norm, softmax, gelu) into fusable ops"),
    (split_reductions, "reduce long reductions with few results in two kernels"),
    (channels_last, "run 2-D convolutions and the kernels between them NHWC"),
    (unroll_small_matmuls, "compute a matmul with K <= 8 as products that fuse"),
    (split_addmm, "move a linear layer's bias into the kernel of its epilogue"),
    (constant_fold, "strength-reduce pow, drop x*1 and x+0"),
    (drop_copies, "drop clones of values already laid out as asked"),
    (drop_expands, "read an expanded value by broadcasting it"),
    (recompute_broadcasts, "compute small values where a larger kernel reads them"),
    (fold_linear, "call a linear layer's matmul as one `linear`"),  # no retrace after
    (dce, "drop values nothing uses"),
)


# Passes for one device only, run before PIPELINE's
DEVICE_PASSES = {
    "cuda": (
        (addmm_activation, "let cuBLAS apply a linear layer's bias and GELU"),
        (repeat_grouped_heads, "call fused f32 attention over grouped heads"),
    ),
}
# Passes of PIPELINE that take the device: what pays differs between them
FOR_DEVICE = (split_reductions,)


def optimize(graph: Graph, device: str = "cpu") -> Graph:
    for run, _why in DEVICE_PASSES.get(device, ()) + PIPELINE:
        graph = run(graph, device) if run in FOR_DEVICE else run(graph)
        graph.lint()
    graph = fold_device_outputs(graph, device)  # last: a retrace would undo it
    graph.lint()
    return graph


def lower(graph: Graph, names: KernelNames, device: str = "cpu") -> Program:
    """Fuse into kernels and schedule them with the extern calls."""
    return schedule(graph, fuse(graph, device), names)


def lower_region(
    region: Region,
    names: KernelNames,
    env: dict[str, str] | None = None,
    loops: tuple[LoopBody, ...] = (),
    device: str = "cpu",
) -> CompiledRegion:
    """Optimize and lower each region of a variant (see Note [Regions]).

    Passes may rename a value (`x * 1` is `x`); `env` carries the names that values
    from earlier regions have in the code generated for them.
    """
    env = dict(env or {})
    graph = _rename_inputs(region.graph, env)
    program = lower(optimize(graph, device), names, device)
    compiled_loops = tuple(
        (n.target, _lower_loop(loops[int(n.target.split(":")[1])], names, device))
        for n in graph.nodes
        if n.is_loop
    )
    if region.branch is None:
        return CompiledRegion(program, (), loops=compiled_loops)
    *live, cond = program.outputs
    *orig_live, _ = region.graph.outputs
    env.update({o.name: n.name for o, n in zip(orig_live, live)})
    b = region.branch
    return CompiledRegion(
        program,
        tuple(r.name for r in live),
        cond.name,
        b.span,
        lower_region(b.if_true, names, env, loops, device),
        lower_region(b.if_false, names, env, loops, device),
        compiled_loops,
    )


def _lower_loop(body: LoopBody, names: KernelNames, device: str) -> CompiledLoop:
    program = lower(optimize(body.graph, device), names, device)
    return CompiledLoop(program, body.carried, body.span)


def _rename_inputs(graph: Graph, env: dict[str, str]) -> Graph:
    mapping = {
        n.name: env[n.name]
        for n in graph.nodes
        if n.op == "input" and n.name in env and env[n.name] != n.name
    }
    if not mapping:
        return graph
    clash = {n.name for n in graph.nodes if n.op != "input"} & set(mapping.values())
    assert not clash, f"renamed inputs clash with {clash}"
    return graph.renamed(mapping)


def name_stubs(graph: Graph, names: list[str]) -> Graph:
    """Give fallback calls (`_fallback:N`) their names in the generated module."""
    return graph.with_nodes(
        replace(n, target=names[int(n.target.split(":")[1])]) if n.is_fallback else n
        for n in graph.nodes
    )


def map_graphs(region: Region, fn) -> Region:
    """The same region tree with `fn` applied to each region's graph."""
    branch = region.branch
    if branch is not None:
        branch = replace(
            branch,
            if_true=map_graphs(branch.if_true, fn),
            if_false=map_graphs(branch.if_false, fn),
        )
    return Region(fn(region.graph), branch)
