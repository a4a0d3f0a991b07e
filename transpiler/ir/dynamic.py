"""Named dynamic dimensions: one variant for every size of `B` in `f32[B,128]`.

Note [Dynamic dimensions]
~~~~~~~~~~~~~~~~~~~~~~~~~
The frontend and passes work on concrete shapes. A variant with a named dimension is
compiled at three sizes of it; `generalize` merges the three results, which must be
the same but for integers, into one where every integer that changed is a `Dim`,
`a * B + b`, fitted on two sizes and checked on the third. Anything else that changed
(a loop unrolled another number of times, a condition decided differently) means the
code depends on B in a way one variant cannot serve, and the variant runs the source.
Kernels take B as a run-time argument; the wrapper reads it from the input's shape.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

SAMPLES = (97, 101, 103)  # sizes a dynamic dimension is compiled at: primes, so
# products with other sizes stay recognizable, and large enough to be general


@dataclass(frozen=True)
class Dim:
    """The integer `a * name + b`."""

    a: int
    b: int
    name: str

    def at(self, value: int) -> int:
        return self.a * value + self.b

    def __str__(self) -> str:
        term = self.name if self.a == 1 else f"{self.a} * {self.name}"
        if self.b == 0:
            return term
        return f"{term} + {self.b}" if self.b > 0 else f"{term} - {-self.b}"


class Mismatch(Exception):
    """The samples differ in more than integers."""


def generalize(values: list[Any], name: str, sizes: tuple[int, ...] = SAMPLES) -> Any:
    """One value standing for `values`, compiled at `sizes` of dimension `name`."""
    first = values[0]
    if isinstance(first, int) and not isinstance(first, bool):
        if not all(type(v) is type(first) for v in values):
            raise Mismatch(values)
        if all(v == first for v in values):
            return first
        (s0, s1), (v0, v1) = sizes[:2], values[:2]
        if (v1 - v0) % (s1 - s0):
            raise Mismatch(values)
        a = (v1 - v0) // (s1 - s0)
        dim = Dim(a, v0 - a * s0, name)
        if any(dim.at(s) != v for s, v in zip(sizes, values)):
            raise Mismatch(values)
        return dim
    if any(type(v) is not type(first) for v in values):
        raise Mismatch(values)
    if dataclasses.is_dataclass(first) and not isinstance(first, type):
        fields = {
            f.name: generalize([getattr(v, f.name) for v in values], name, sizes)
            for f in dataclasses.fields(first)
        }
        if all(v is getattr(first, k) for k, v in fields.items()):
            return first  # unchanged, and the same object (a sentinel: `DEVICE`)
        return dataclasses.replace(first, **fields)
    if isinstance(first, (tuple, list)):
        if any(len(v) != len(first) for v in values):
            raise Mismatch(values)
        items = [generalize(list(parts), name, sizes) for parts in zip(*values)]
        return type(first)(items)
    if isinstance(first, dict):
        if any(v.keys() != first.keys() for v in values):
            raise Mismatch(values)
        return {k: generalize([v[k] for v in values], name, sizes) for k in first}
    if any(v != first for v in values):
        raise Mismatch(values)
    return first


def dims_in(value: Any) -> set[str]:
    """The names of the dynamic dimensions a value uses."""
    if isinstance(value, Dim):
        return {value.name}
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return set().union(
            *(dims_in(getattr(value, f.name)) for f in dataclasses.fields(value))
        )
    if isinstance(value, (tuple, list)):
        return set().union(*(dims_in(v) for v in value))
    if isinstance(value, dict):
        return set().union(*(dims_in(v) for v in value.values()))
    return set()


def size(value: int | Dim, typical: int = 1024) -> int:
    """A concrete size for heuristics (block sizes): a Dim at a typical size."""
    return value.at(typical) if isinstance(value, Dim) else value
