"""Split a kernel body into per-row code and loops over the reduction dimension.

For a reduction kernel (see Note [Kernel iteration]) the per-element ("r") statements
run inside loops over `rindex`: one loop for each batch of reductions whose inputs are
ready, and a last loop for per-element stores. Per-row ("x") statements run between
the loops. A statement needed by several loops is recomputed in each: re-reading a row
from cache is cheaper than a round trip through memory. Backends render a `Loop`
either as a real loop, or, when the row fits in one block, as straight-line code.
"""

from __future__ import annotations

from dataclasses import dataclass

from transpiler.ir.program import Kernel, Stmt, Store


@dataclass(frozen=True)
class Loop:
    body: tuple[Stmt | Store, ...]  # r-level statements and stores, in order
    reductions: tuple[Stmt, ...]  # accumulated in this loop, finished after it


Segment = Stmt | Store | Loop


def segments(kernel: Kernel) -> list[Segment]:
    body = kernel.body
    stmts = {s.name: s for s in body if isinstance(s, Stmt)}
    order = {s.name: i for i, s in enumerate(body) if isinstance(s, Stmt)}

    def r_closure(roots: list[str]) -> list[Stmt]:
        seen: set[str] = set()
        stack = list(roots)
        while stack:
            name = stack.pop()
            s = stmts.get(name)
            if s is None or name in seen or s.level != "r" or s.op == "reduce":
                continue
            seen.add(name)
            stack.extend(a for a in s.args if isinstance(a, str))
        return sorted((stmts[n] for n in seen), key=lambda s: order[s.name])

    def x_deps(stmt_list: list[Stmt]) -> set[str]:
        return {
            a
            for s in stmt_list
            for a in s.args
            if isinstance(a, str) and a in stmts and stmts[a].level == "x"
        }

    out: list[Segment] = []
    ready: set[str] = set()
    pending = [s for s in body if isinstance(s, Stmt) and s.op == "reduce"]
    for s in body:
        if isinstance(s, Stmt) and s.op == "reduce":
            if s not in pending:
                continue
            batch = [s]
            pending.remove(s)
            for other in list(pending):
                deps = x_deps(r_closure([other.args[0]]))
                if deps <= ready:
                    batch.append(other)
                    pending.remove(other)
            inner = r_closure([r.args[0] for r in batch])
            out.append(Loop(tuple(inner), tuple(batch)))
            ready.update(r.name for r in batch)
        elif isinstance(s, Stmt) and s.level == "x":
            out.append(s)
            ready.add(s.name)
        elif isinstance(s, Store) and s.level == "x":
            out.append(s)
    stores = [s for s in body if isinstance(s, Store) and s.level == "r"]
    if stores:
        inner = r_closure([s.value for s in stores])
        out.append(Loop(tuple(inner) + tuple(stores), ()))
    return out
