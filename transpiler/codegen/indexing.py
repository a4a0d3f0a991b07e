"""Print an `Index` (see Note [Kernel iteration]) as source text, for either backend."""

from __future__ import annotations

from transpiler.ir.dynamic import Dim
from transpiler.ir.program import Index


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
