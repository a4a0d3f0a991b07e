"""Print an `Index` (see Note [Kernel iteration]) as source text, for either backend."""

from __future__ import annotations

from transpiler.ir.dynamic import Dim, size
from transpiler.ir.program import Index, Kernel, Stmt, Store, Term

INNER_MIN = 64  # elements: enough for a few full vectors per inner loop of a split
INNER_MAX = 4096  # elements: an inner loop longer gains nothing more
OUTER_MIN = 64  # outer iterations: enough to share out among threads evenly
COLUMN_TILE_MIN = 16  # the fewest neighbouring rows worth a tile of their own


def size_text(value) -> str:
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
        e = names.get(t.var, t.var)  # else a value of the kernel (an index loaded)
        if t.div != 1:
            e = f"{e} {div} {size_text(t.div)}"
        whole = ranges.get(t.var)  # None: a loaded index, in range
        static = all(isinstance(v, int) for v in (t.div, t.mod, whole or 0))
        if whole is not None and (not static or t.div * t.mod < whole):
            e = (
                f"({e}) % {size_text(t.mod)}"
                if t.div != 1
                else f"{e} % {size_text(t.mod)}"
            )
        if t.stride != 1:
            e = (
                f"{size_text(t.stride)} * ({e})"
                if " " in e
                else f"{size_text(t.stride)} * {e}"
            )
        parts.append(e)
    if not parts and empty is not None:
        parts.append(empty)
    text = " + ".join(parts)
    offset = index.offset
    if isinstance(offset, int) and offset < 0 and parts:
        return f"{text} - {-offset}"
    if offset != 0 or not parts:
        text = " + ".join([*parts, size_text(offset)])
    return text


def split_index(
    index: Index, inner: int, numel: int, wrap: bool = False, var: str = "x"
) -> Index | None:
    """`index` over a flat `x < numel` rewritten over `x0 < numel // inner` and
    `x1 < inner`, with `x = x0 * inner + x1`; None when a term mixes the two.
    (`var` names the variable split: `r` into `r0` and `r1` alike.)

    A term `(x // d) % m` depends on `x0` alone when `inner` divides `d`, on `x1`
    alone when `d * m` divides `inner`, and splits into a sum when `d` divides
    `inner` and it never wraps (`d * m >= numel`) or, with `wrap`, wraps at a
    multiple of `inner` (`x0 % (d * m / inner)` then)."""
    terms: list[Term] = []
    v0, v1 = f"{var}0", f"{var}1"
    for t in index.terms:
        if t.var != var:
            terms.append(t)
        elif t.div % inner == 0:
            terms.append(Term(v0, t.div // inner, t.mod, t.stride))
        elif inner % (t.div * t.mod) == 0:
            terms.append(Term(v1, t.div, t.mod, t.stride))
        elif inner % t.div == 0 and (
            t.div * t.mod >= numel or (wrap and t.div * t.mod % inner == 0)
        ):
            outer = min(numel, t.div * t.mod) // inner
            terms.append(Term(v0, 1, outer, t.stride * (inner // t.div)))
            terms.append(Term(v1, t.div, inner // t.div, t.stride))
        else:
            return None
    return Index(index.offset, tuple(terms))


def column_tile(indices: list[Index], numel, most: int) -> int | None:
    """The number of neighbouring rows a kernel reading across rows (`across_rows`)
    reduces together: the largest divisor of `numel` of `COLUMN_TILE_MIN` to `most`
    with which every index splits into a tile number and a row within the tile
    printed without `//` or `%` (`split_index`); None when there is none."""
    if not isinstance(numel, int):
        return None
    valid = [
        inner
        for inner in _divisors(numel)
        if min(COLUMN_TILE_MIN, numel) <= inner <= most
        and all(
            (split := split_index(index, inner, numel, wrap=True)) is not None
            and not any(t.var == "x1" and _wraps(t, inner) for t in split.terms)
            for index in indices
        )
    ]
    return max(valid, default=None)


def _wraps(t: Term, numel: int) -> bool:
    """Whether printing `t` over `var < numel` needs a `//` or a `%`."""
    return t.div != 1 or t.div * t.mod < numel


def inner_split(
    indices: list[Index], numel: int, var: str = "x", outer_min: int = OUTER_MIN
) -> int | None:
    """The length of an inner loop that lets every index of a flat loop be printed
    without `//` or `%` in it (which would stop it vectorizing), or None when the
    flat loop needs none or no such split exists. The longest inner loop of up to
    `INNER_MAX` that leaves `outer_min` outer iterations to share out among threads
    is preferred: the fewer inner loops, the fewer partial vectors at their ends
    and the less work on the outer index alone (a channel's weight); else the
    shortest of at least `INNER_MIN`. (`var`: the loop's variable, `x` or `r`; a
    loop over `r` runs in one thread, `outer_min` 1.)"""
    terms = [t for index in indices for t in index.terms]
    if not all(isinstance(v, int) for t in terms for v in (t.div, t.mod, t.stride)):
        return None
    if not isinstance(numel, int) or not any(
        _wraps(t, numel) for t in terms if t.var == var
    ):
        return None
    valid = []
    for inner in _divisors(numel):
        if inner in (1, numel):
            continue
        split = [split_index(index, inner, numel, True, var) for index in indices]
        if all(
            s is not None
            and not any(t.var == f"{var}1" and _wraps(t, inner) for t in s.terms)
            for s in split
        ):
            valid.append(inner)
    if not valid:
        return None
    wide = [inner for inner in valid if inner >= INNER_MIN]
    long = [i for i in wide if i <= INNER_MAX and numel // i >= outer_min]
    return long[-1] if long else wide[0] if wide else valid[-1]


def _divisors(n: int) -> list[int]:
    small = [d for d in range(1, int(n**0.5) + 1) if n % d == 0]
    return sorted(set(small + [n // d for d in small]))


def across_rows(k: Kernel) -> bool:
    """Whether a reduction kernel reads its rows side by side (Note [Reduction
    order] in passes/fuse.py): most of the memory its per-element accesses touch
    lies along the rows, not along each row's elements, as `x.sum(0)` reads a
    row-major `x`. Such a kernel reduces a tile of neighbouring rows together,
    element by element, so that each read covers whole cache lines."""
    if not k.is_reduction:
        return False
    itemsize = {a.param: a.dtype.itemsize for a in k.inputs + k.outputs}
    accesses = [s.args[:2] for s in k.body if isinstance(s, Stmt) and s.op == "load"]
    accesses += [(s.buffer, s.index) for s in k.body if isinstance(s, Store)]
    along = {"x": 0, "r": 0}  # bytes touched by accesses contiguous along x, r
    for param, index in accesses:
        if not any(t.var == "r" for t in index.terms):
            continue
        footprint = itemsize[param]
        for t in index.terms:
            footprint *= size(t.mod)
        for t in index.terms:
            if t.var in along and t.div == 1 and t.stride in (1, -1):
                along[t.var] += footprint
    return along["x"] > along["r"]
