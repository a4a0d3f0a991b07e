"""A training graph with graph breaks, split at its fallback calls into parts.

Note [Training through graph breaks]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Fallback code runs eagerly, so autograd records what it does as it records any
eager code. A training variant with graph breaks is therefore compiled as a chain:
the compiled code between fallback calls is split into parts, each differentiated
on its own (joint graph, partition) and called through an `autograd.Function` of
its own; the fallback calls run between them as they do in inference. Autograd
joins the chain: a part's backward receives the gradients of its outputs from the
parts and fallback code that read them, and gives back those of its inputs and of
the parameters it reads (autograd adds up a parameter's over the parts).

Which part a compiled value belongs to is decided by the fallback calls it depends
on: a value is computed in the first part after every fallback call it reads
(through any chain of values). A fallback call runs after the parts holding what
it reads, and after the fallback call before it (`_after`), so with N calls there
are at most N + 1 parts, each as large as the order allows:

    x ─ mul ─┬────────────────── add ─ out         part 0: mul, add, sum
             └─ sum ─ _fallback_0(sum) ─ s ─ div    fallback 0
                                                    part 1: div (reads s)

`split` returns the outer graph, which holds the inputs, the fallback calls and a
call per part (a "fallback" node whose target is the part's number, its results
picked by `getitem` nodes named as the values they carry), and each part's graph:
its inputs are the variant's inputs and the values of earlier parts and fallback
code it reads (an "input" node named and targeted as the value), the parameters
it reads, and it returns, as a tuple, its values that later code reads.
"""

from __future__ import annotations

from dataclasses import dataclass, fields, replace

from transpiler.frontend.recorder import Unsupported
from transpiler.ir.graph import Graph, ModuleRef, Node, Ref, TensorMeta, iter_refs
from transpiler.ir.ops import is_random, is_view
from transpiler.ir.program import FallbackCall, PartCall, Program
from transpiler.ir.region import CompiledRegion, map_programs


@dataclass(frozen=True)
class Part:
    graph: Graph  # returns a tuple of Refs: `outputs`, by the same names
    inputs: tuple[str, ...]  # the outer values it takes, as its input nodes' order
    outputs: tuple[str, ...]  # its values that later code reads


@dataclass(frozen=True)
class Split:
    outer: Graph  # inputs, fallback calls, part calls (target: the part's name)
    parts: tuple[Part, ...]
    prefix: str  # of the parts' names: `_cpu_0_part_`, then their number

    def fallback_results(self) -> set[str]:
        """The outer values fallback code computes."""
        calls = {
            n.name
            for n in self.outer.nodes
            if n.is_fallback and not n.target.startswith(self.prefix)
        }
        return {
            n.name
            for n in self.outer.nodes
            if n.target == "getitem" and n.args[0].name in calls
        }


def split(graph: Graph, module: bool, prefix: str, first: int = 0) -> Split:
    """`graph` split at its fallback calls (Note [Training through graph
    breaks]). `module`: the target is a module, whose part calls take `self`;
    the parts' functions are named `prefix` and their number, from `first`."""
    nodes = graph.by_name()
    fallback_of = {}  # a fallback call's node, and each `getitem` of its results
    for n in graph.nodes:
        if n.is_fallback:
            fallback_of[n.name] = n.name
        elif n.target == "getitem" and n.args[0].name in fallback_of:
            fallback_of[n.name] = n.args[0].name
        if n.is_loop:
            raise Unsupported("a training variant with a loop on tensor data", n.span)
    level: dict[str, int] = {}  # compiled value: its part; fallback: runs after it
    ready: dict[str, int] = {}  # the first part that may read the value
    previous = None  # the last fallback call so far

    for n in graph.nodes:
        if n.op in ("input", "param"):
            level[n.name] = ready[n.name] = 0
            continue
        if n.name in fallback_of and not n.is_fallback:  # a result of a call
            ready[n.name] = ready[fallback_of[n.name]]
            continue
        # a fallback call runs after what it reads and after what it is ordered
        # after: the call before it, the values read before it writes them; an
        # op drawing random numbers, after the fallback calls before it (they may
        # draw too: eager's order of draws, so the same seed gives the same)
        deps = [r.name for r in n.refs()]
        if previous is not None and (n.op == "call" and is_random(n.target)):
            deps.append(previous)
        level[n.name] = max((ready[d] for d in deps), default=0)
        ready[n.name] = level[n.name] + (1 if n.is_fallback else 0)
        if n.is_fallback:
            previous = n.name
    compiled = [
        n
        for n in graph.nodes
        if n.op not in ("input", "param") and n.name not in fallback_of
    ]
    last = max((level[n.name] for n in graph.nodes if n.is_fallback), default=-1)
    _sink(graph, compiled, level, last + 1)
    members: list[list[Node]] = [[] for _ in range(last + 2)]
    for n in compiled:
        members[level[n.name]].append(n)

    # what code outside each part reads: later parts, fallback calls, the result
    read_outside: dict[int, set[str]] = {}
    part_of = {n.name: level[n.name] for n in compiled}
    for n in graph.nodes:
        if n.op in ("input", "param"):
            continue
        here = part_of.get(n.name)
        for r in n.refs():
            if n.is_fallback and _ordering(n, r):
                continue
            owner = part_of.get(r.name)
            if owner is not None and owner != here:
                read_outside.setdefault(owner, set()).add(r.name)
    for r in iter_refs(graph.outputs):
        if r.name in part_of:
            read_outside.setdefault(part_of[r.name], set()).add(r.name)

    parts: list[Part] = []
    outer_reads = {
        r.name
        for n in graph.nodes
        if n.is_fallback
        for r in n.refs()
        if not _ordering(n, r)
    } | {r.name for r in iter_refs(graph.outputs)}
    outer = [
        n
        for n in graph.nodes
        if n.op == "input" or (n.op == "param" and n.name in outer_reads)
    ]
    after: Ref | None = None  # the last call of the outer graph: the order
    fallbacks = {level[n.name]: n for n in graph.nodes if n.is_fallback}
    for k, part_nodes in enumerate(members):
        if part_nodes:
            part = _part(nodes, part_nodes, read_outside.get(k, set()))
            number = first + len(parts)
            name = f"part_{number}"
            while name in nodes:  # a value of the user's so named
                name += "_"
            args = tuple(Ref(i) for i in part.inputs)
            if module:
                args = (ModuleRef("self"), *args)
            metas = tuple(nodes[o].meta for o in part.outputs)
            kwargs = (("_after", after),) if after is not None else ()
            span = part_nodes[0].span
            outer.append(
                Node(name, "fallback", f"{prefix}{number}", args, kwargs, metas, span)
            )
            outer += [
                Node(o, "call", "getitem", (Ref(name), i), (), nodes[o].meta, span)
                for i, o in enumerate(part.outputs)
            ]
            parts.append(part)
            after = Ref(name)
        call = fallbacks.get(k)
        if call is not None:
            kwargs = tuple((key, v) for key, v in call.kwargs if key not in ORDERING)
            if after is not None:
                kwargs = (("_after", after), *kwargs)
            outer.append(replace(call, kwargs=kwargs))
            outer += [
                n
                for n in graph.nodes
                if fallback_of.get(n.name) == call.name and not n.is_fallback
            ]
            after = Ref(call.name)
    result = Split(graph.with_nodes(outer, graph.outputs), tuple(parts), prefix)
    result.outer.lint()
    return result


def _sink(graph: Graph, compiled: list[Node], level: dict[str, int], last: int):
    """Move each value computed from parameters and constants alone (a weight's
    transpose, its cast, an `arange`), and each view of an input, into the first
    part that reads it: passed
    from an earlier part, it would be an output there and an input here, and the
    parameter's gradient would go through both."""
    nodes = graph.by_name()
    alone = set()
    for n in compiled:
        sources = [nodes[r.name] for r in n.refs()]
        if n.op == "call" and is_random(n.target):
            continue
        if all(s.op == "param" or s.name in alone for s in sources) or (
            is_view(n.target) and sources[0].op == "input"
        ):
            alone.add(n.name)
    needed: dict[str, int] = {r.name: last for r in iter_refs(graph.outputs)}
    for n in reversed(graph.nodes):
        if n.name in alone and n.name in needed:
            level[n.name] = max(level[n.name], needed[n.name])
        if n.op in ("input", "param") or n.name not in level:
            continue  # a fallback call's results: read where it runs
        for r in n.refs():
            needed[r.name] = min(needed.get(r.name, last), level[n.name])


ORDERING = ("_after", "_reads")  # a fallback call's kwargs that only order it


def _ordering(n: Node, r: Ref) -> bool:
    """Whether `r` is read by fallback call `n` only to order it."""
    return (
        n.is_fallback
        and any(key in ORDERING and r in iter_refs(v) for key, v in n.kwargs)
        and r not in iter_refs(n.args)
    )


def _part(nodes: dict[str, Node], members: list[Node], read: set[str]) -> Part:
    """The graph of one part: `members`, with what they read from outside as
    inputs (parameters as parameters), returning the values in `read`."""
    own = {n.name for n in members}
    inputs: list[Node] = []
    seen = set()
    for n in members:
        for r in n.refs():
            if r.name in own or r.name in seen:
                continue
            seen.add(r.name)
            source = nodes[r.name]
            if source.op in ("input", "param"):
                inputs.append(source)
            elif isinstance(source.meta, TensorMeta):
                inputs.append(Node(r.name, "input", r.name, meta=source.meta))
            else:
                raise Unsupported(
                    "a training variant whose compiled code reads a value of "
                    "fallback code that is no tensor",
                    n.span,
                )
    outputs = tuple(n.name for n in members if n.name in read)
    for o in outputs:
        if not isinstance(nodes[o].meta, TensorMeta):
            raise Unsupported(
                "a training variant whose fallback code reads a compiled value "
                "that is no tensor",
                nodes[o].span,
            )
    params = [n for n in inputs if n.op == "param"]
    tensors = [n for n in inputs if n.op == "input"]
    part = Graph((*tensors, *params, *members), tuple(Ref(o) for o in outputs))
    part.lint()
    return Part(part, tuple(n.name for n in tensors), outputs)


def as_part_calls(region: CompiledRegion, prefix: str) -> CompiledRegion:
    """The outer code's calls of parts (`split`'s fallback nodes named `prefix`
    and a number) as `PartCall`s: compiled code, not fallback code."""

    def calls(p: Program) -> Program:
        steps = tuple(
            (
                PartCall(**{f.name: getattr(s, f.name) for f in fields(s)})
                if isinstance(s, FallbackCall) and s.target.startswith(prefix)
                else s
            )
            for s in p.steps
        )
        return replace(p, steps=steps)

    return map_programs(region, calls)


__all__ = ["Part", "Split", "as_part_calls", "split"]
