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

from transpiler.ir.program import Kernel, Stmt, Store, operands


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
            stack.extend(operands(s))
        return sorted((stmts[n] for n in seen), key=lambda s: order[s.name])

    def x_deps(stmt_list: list[Stmt]) -> set[str]:
        return {
            a
            for s in stmt_list
            for a in operands(s)
            if a in stmts and stmts[a].level == "x"
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


@dataclass(frozen=True)
class OnlineSoftmax:
    """Two loops over a row, `m = max(v)` and then `s = sum(exp(v - m))` (softmax,
    log_softmax, cross-entropy), that one loop computes (Note [Online softmax])."""

    value: str  # v
    max: str  # m
    shifted: str  # v - m
    exp: str  # exp(v - m)
    sum: str  # s
    body: tuple[Stmt, ...]  # the statements computing v, in order


def online_softmax(first: Loop, second: Loop) -> OnlineSoftmax | None:
    """The online form of `first` then `second`, or None when they are not a max
    and the sum of exponentials shifted by it."""
    if len(first.reductions) != 1 or len(second.reductions) != 1:
        return None
    (m,), (s,) = first.reductions, second.reductions
    if m.reduce != "max" or s.reduce != "sum":
        return None
    if any(isinstance(s, Store) for s in first.body + second.body):
        return None
    stmts = {st.name: st for st in second.body}
    e = stmts.get(s.args[0])
    d = stmts.get(e.args[0]) if e is not None and e.op == "exp" else None
    if d is None or d.op != "sub" or d.args != (m.args[0], m.name):
        return None
    computed = {st.name for st in first.body}
    if any(st.name not in computed for st in second.body if st not in (d, e)):
        return None
    return OnlineSoftmax(m.args[0], m.name, d.name, e.name, s.name, first.body)
