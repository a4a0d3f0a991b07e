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

from transpiler.ir.program import Const, Kernel, Stmt, Store, operands


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
    if any(isinstance(s, Store) or s.op == "scan" for s in first.body + second.body):
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


@dataclass(frozen=True)
class Welford:
    """Two loops over a row that compute a variance, the corrected two-pass
    algorithm of Note [Variance] in passes/schedule.py: `t = sum(v)`, then from
    `m = t / k` the sums `s = sum(d * d)` and `e = sum(d)` of `d = v - m`; one loop
    computes the mean and the sum of squared deviations (Note [Welford] in
    codegen/triton.py), and the statements between the loops follow it."""

    value: str  # v
    total: str  # t
    mean: str  # m
    squares: str  # s
    residual: str  # e
    body: tuple[Stmt, ...]  # the statements computing v, in order
    between: tuple[Stmt, ...]  # per-row statements between the loops, m among them


def welford(
    first: Loop, between: list[Segment], second: Loop, rnumel
) -> Welford | None:
    """The one-loop form of `first`, `between` and `second`, or None when they are
    not a row's sum, its mean, and the sums of the deviations from it and of their
    squares."""
    if len(first.reductions) != 1 or len(second.reductions) != 2:
        return None
    (t,) = first.reductions
    if t.reduce != "sum" or not t.dtype.is_floating_point:
        return None
    if any(isinstance(s, Store) or s.op == "scan" for s in first.body + second.body):
        return None
    if not all(isinstance(s, Stmt) and s.level == "x" for s in between):
        return None
    mean = next(
        (
            s
            for s in between
            if s.op == "truediv"
            and s.args[0] == t.name
            and isinstance(s.args[1], Const)
            and s.args[1].value == rnumel
        ),
        None,
    )
    if mean is None:
        return None
    stmts = {st.name: st for st in second.body}
    d = next(
        (
            st
            for st in second.body
            if st.op == "sub" and st.args == (t.args[0], mean.name)
        ),
        None,
    )
    if d is None:
        return None
    squares = residual = None
    for r in second.reductions:
        if r.reduce != "sum":
            return None
        src = stmts.get(r.args[0])
        if r.args[0] == d.name:
            residual = r
        elif src is not None and src.op == "mul" and src.args == (d.name, d.name):
            squares = r
    if squares is None or residual is None:
        return None
    computed = {st.name for st in first.body}
    square = stmts[squares.args[0]]
    if any(st.name not in computed for st in second.body if st not in (d, square)):
        return None
    return Welford(
        t.args[0],
        t.name,
        mean.name,
        squares.name,
        residual.name,
        first.body,
        tuple(between),
    )


@dataclass(frozen=True)
class Spread:
    """A loop over a row's deviations `d = v - m` from a first mean `m`, summing
    `d * d` and `d`, and the per-row statements after it that correct the mean and
    the sum of squares by the deviations' sum (Note [Variance] in
    passes/schedule.py): computed together by one helper where `v` is read back
    from the row's buffer."""

    value: str  # v
    first: str  # m
    mean: str  # the corrected mean (the first where the correction is NaN)
    squares: str  # the sum of squared deviations about it, at least 0
    replaced: frozenset[str]  # every statement the helper computes


def spread(loop: Loop, kernel: Kernel, rnumel) -> Spread | None:
    """`loop` and the correction that follows it in `kernel`, as the statements
    `centered_squares` (passes/schedule.py) emits, or None when they are not that
    or when another statement reads a value between."""
    if any(isinstance(s, Store) for s in loop.body) or len(loop.reductions) != 2:
        return None
    stmts = {s.name: s for s in kernel.body if isinstance(s, Stmt)}
    by_op: dict[tuple, Stmt] = {}
    for s in kernel.body:
        if isinstance(s, Stmt) and s.op != "load":
            by_op.setdefault((s.op, s.args), s)

    def find(op, *args):
        return by_op.get((op, args))

    sums = {r.args[0]: r for r in loop.reductions if r.reduce == "sum"}
    d = next((stmts[a] for a in sums if stmts[a].op == "sub"), None)
    if d is None or len(sums) != 2:
        return None
    value, first = d.args
    sq = find("mul", d.name, d.name)
    if sq is None or sq.name not in sums or not isinstance(first, str):
        return None
    squares, residual = sums[sq.name], sums[d.name]
    error = next(
        (
            s
            for s in stmts.values()
            if s.op == "truediv"
            and s.args[0] == residual.name
            and isinstance(s.args[1], Const)
            and s.args[1].value == rnumel
        ),
        None,
    )
    if error is None:
        return None
    excess = find("mul", residual.name, error.name)
    less = excess and find("sub", squares.name, excess.name)
    clamped = less and find("relu", less.name)
    corrected = find("add", first, error.name)
    undefined = find("isnan", error.name)
    mean = (
        undefined and corrected and find("where", undefined.name, first, corrected.name)
    )
    if not (clamped and mean):
        return None
    inner = {d.name, sq.name, squares.name, residual.name}
    after = {error, excess, less, corrected, undefined}
    replaced = inner | {s.name for s in after} | {clamped.name, mean.name}
    readers = [
        s
        for s in kernel.body
        if getattr(s, "name", None) not in replaced
        and (set(operands(s)) if isinstance(s, Stmt) else {s.value})
        & (replaced - {clamped.name, mean.name})
    ]
    if readers or any(s.level != "x" for s in after):
        return None
    return Spread(value, first, mean.name, clamped.name, frozenset(replaced))
