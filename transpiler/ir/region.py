"""Regions: the code of a variant, split where a condition reads tensor data.

Note [Regions]
~~~~~~~~~~~~~~
A variant whose source branches on tensor data (`if y.sum() > 0:`) is compiled for
every path through it. The frontend traces each path (see frontend/trace.py) and merges
them into a tree: a `Region` holds the graph of the code up to a condition, and a
`Branch` the two regions that follow it. A leaf region's graph returns the function's
result; an inner region's graph returns the values later regions read, then the
condition. Each region compiles on its own; the wrapper becomes nested `if`s.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from transpiler.ir.graph import Graph, Span


@dataclass(frozen=True)
class Branch:
    cond: str  # name of the 0-d condition in the region before it
    span: Span | None  # the user's line holding the condition
    if_true: Region
    if_false: Region


@dataclass(frozen=True)
class Region:
    graph: Graph  # see Note [Regions] for what it returns
    branch: Branch | None = None

    def walk(self) -> Iterator[Region]:
        yield self
        if self.branch is not None:
            yield from self.branch.if_true.walk()
            yield from self.branch.if_false.walk()


@dataclass(frozen=True)
class LoopBody:
    """The body of `while <tensor condition>:`, compiled once, run until false.

    `graph` reads the carried values through its inputs named in `carried` (and any
    earlier value by its own name); it returns their next values, then the next
    condition. Carried values keep their shape, dtype and strides."""

    graph: Graph
    carried: tuple[str, ...]
    span: Span | None


@dataclass(frozen=True)
class CompiledLoop:
    program: Any
    carried: tuple[str, ...]
    span: Span | None


@dataclass(frozen=True)
class CompiledRegion:
    """A region lowered to a Program (any type: ir.program.Program)."""

    program: Any
    live_outs: tuple[str, ...]  # names later regions read (inner regions only)
    cond: str | None = None
    span: Span | None = None
    if_true: CompiledRegion | None = None
    if_false: CompiledRegion | None = None
    loops: tuple[tuple[str, CompiledLoop], ...] = ()  # by `_loop:N` target

    def walk(self) -> Iterator[CompiledRegion]:
        yield self
        for child in (self.if_true, self.if_false):
            if child is not None:
                yield from child.walk()


def programs_of(region: CompiledRegion) -> list:
    """Every Program of a compiled variant: regions, then loop bodies."""
    out = []
    for r in region.walk():
        out.append(r.program)
        out += [loop.program for _, loop in r.loops]
    return out


def map_programs(region: CompiledRegion, fn) -> CompiledRegion:
    """The same compiled tree with `fn` applied to each Program, loop bodies too."""
    children = {
        side: map_programs(child, fn)
        for side in ("if_true", "if_false")
        if (child := getattr(region, side)) is not None
    }
    loops = tuple(
        (target, replace(loop, program=fn(loop.program)))
        for target, loop in region.loops
    )
    return replace(region, program=fn(region.program), loops=loops, **children)
