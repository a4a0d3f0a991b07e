"""The graph passes, one per module, and how a variant's tree of regions is lowered.

The order the passes run in, and every other stage, is in pipeline.py.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

from transpiler.ir.graph import Graph
from transpiler.ir.program import Program
from transpiler.ir.region import CompiledLoop, CompiledRegion, LoopBody, Region

Lower = Callable[[Graph], Program]  # optimize and lower one graph (pipeline.lower)


def lower_region(
    region: Region,
    lower: Lower,
    env: dict[str, str] | None = None,
    loops: tuple[LoopBody, ...] = (),
) -> CompiledRegion:
    """Optimize and lower each region of a variant (see Note [Regions]).

    Passes may rename a value (`x * 1` is `x`); `env` carries the names that values
    from earlier regions have in the code generated for them.
    """
    env = dict(env or {})
    graph = _rename_inputs(region.graph, env)
    program = lower(graph)
    compiled_loops = tuple(
        (n.target, _lower_loop(loops[int(n.target)], lower))
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
        lower_region(b.if_true, lower, env, loops),
        lower_region(b.if_false, lower, env, loops),
        compiled_loops,
    )


def _lower_loop(body: LoopBody, lower: Lower) -> CompiledLoop:
    return CompiledLoop(lower(body.graph), body.carried, body.span)


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
    """Give fallback calls (by their number in the trace) their functions' names
    in the generated module."""
    return graph.with_nodes(
        replace(n, target=names[int(n.target)]) if n.is_fallback else n
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
