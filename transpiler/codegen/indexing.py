"""Print an `Index` (see Note [Kernel iteration]) as source text, for either backend."""

from __future__ import annotations

from transpiler.ir.dynamic import Dim
from transpiler.ir.program import Index, Term

INNER_MIN = 64  # elements: enough for a few full vectors per inner loop of a split


def _n(value) -> str:
    """A size in an expression: a dynamic one in parentheses."""
    return f"({value})" if isinstance(value, Dim) and " " in str(value) else str(value)


def format_index(
    index: Index,
    names: dict[str, str],
    ranges: dict[str, int | Dim],
    div: str,
    empty: str | None = None,
) -> str:
    """`offset + stride * ((var div d) % m) + ...`, dropping what cannot matter:
    `// 1`, a `% m` that the variable's range never reaches, `1 *`. With dynamic
    sizes (`Dim`) every `% m` stays."""
    parts = []
    for t in index.terms:
        e = names[t.var]
        if t.div != 1:
            e = f"{e} {div} {_n(t.div)}"
        static = all(isinstance(v, int) for v in (t.div, t.mod, ranges[t.var]))
        if not static or t.div * t.mod < ranges[t.var]:
            e = f"({e}) % {_n(t.mod)}" if t.div != 1 else f"{e} % {_n(t.mod)}"
        if t.stride != 1:
            e = f"{_n(t.stride)} * ({e})" if " " in e else f"{_n(t.stride)} * {e}"
        parts.append(e)
    if not parts and empty is not None:
        parts.append(empty)
    if index.offset != 0 or not parts:
        parts.append(_n(index.offset))
    return " + ".join(parts)


def split_index(index: Index, inner: int, numel: int) -> Index | None:
    """`index` over a flat `x < numel` rewritten over `x0 < numel // inner` and
    `x1 < inner`, with `x = x0 * inner + x1`; None when a term mixes the two.

    A term `(x // d) % m` depends on `x0` alone when `inner` divides `d`, on `x1`
    alone when `d * m` divides `inner`, and splits into a sum when it never wraps
    (`d * m >= numel`) and `d` divides `inner`."""
    terms: list[Term] = []
    for t in index.terms:
        if t.var != "x":
            terms.append(t)
        elif t.div % inner == 0:
            terms.append(Term("x0", t.div // inner, t.mod, t.stride))
        elif inner % (t.div * t.mod) == 0:
            terms.append(Term("x1", t.div, t.mod, t.stride))
        elif t.div * t.mod >= numel and inner % t.div == 0:
            outer = numel // inner
            terms.append(Term("x0", 1, outer, t.stride * (inner // t.div)))
            terms.append(Term("x1", t.div, inner // t.div, t.stride))
        else:
            return None
    return Index(index.offset, tuple(terms))


def _wraps(t: Term, numel: int) -> bool:
    """Whether printing `t` over `var < numel` needs a `//` or a `%`."""
    return t.div != 1 or t.div * t.mod < numel


def inner_split(indices: list[Index], numel: int) -> int | None:
    """The length of an inner loop that lets every index of a flat loop be printed
    without `//` or `%` in it (which would stop it vectorizing), or None when the
    flat loop needs none or no such split exists. The shortest inner loop of at least
    `INNER_MIN` is preferred: it leaves the most outer iterations to share out."""
    terms = [t for index in indices for t in index.terms]
    if not all(isinstance(v, int) for t in terms for v in (t.div, t.mod, t.stride)):
        return None
    if not isinstance(numel, int) or not any(_wraps(t, numel) for t in terms):
        return None
    valid = []
    for inner in _divisors(numel):
        if inner in (1, numel):
            continue
        split = [split_index(index, inner, numel) for index in indices]
        if all(
            s is not None
            and not any(t.var == "x1" and _wraps(t, inner) for t in s.terms)
            for s in split
        ):
            valid.append(inner)
    if not valid:
        return None
    wide = [inner for inner in valid if inner >= INNER_MIN]
    return wide[0] if wide else valid[-1]


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))
