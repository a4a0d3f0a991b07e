"""Print an `Index` (see Note [Kernel iteration]) as source text, for either backend."""

from __future__ import annotations

from transpiler.ir.program import Index


def format_index(
    index: Index,
    names: dict[str, str],
    ranges: dict[str, int],
    div: str,
    empty: str | None = None,
) -> str:
    """`offset + stride * ((var div d) % m) + ...`, dropping what cannot matter:
    `// 1`, a `% m` that the variable's range never reaches, `1 *`."""
    parts = []
    for t in index.terms:
        e = names[t.var]
        if t.div != 1:
            e = f"{e} {div} {t.div}"
        if t.div * t.mod < ranges[t.var]:
            e = f"({e}) % {t.mod}" if t.div != 1 else f"{e} % {t.mod}"
        if t.stride != 1:
            e = f"{t.stride} * ({e})" if " " in e else f"{t.stride} * {e}"
        parts.append(e)
    if not parts and empty is not None:
        parts.append(empty)
    if index.offset or not parts:
        parts.append(str(index.offset))
    return " + ".join(parts)
