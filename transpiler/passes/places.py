"""Where a kernel reads a value: the value's coordinates as affine functions of the
kernel's own.

Note [Places]
~~~~~~~~~~~~~
A kernel enumerates the positions of its own shape. A value it computes where it
reads it (fuse's "inline" kind) is read at other positions than its own: shifted
or reversed by data movement (`cat`, `pad`, `roll`, `flip`), through the strides
of a view (`permute`, `unsqueeze`, a slice with a step, a reshape that splits a
dimension), broadcast into its reader. Each of these maps the reader's
coordinates c to the value's: along each dimension k of the value,
`sum_i a[k][i] * c[i] + b[k]`. A `Place` holds the a and b, and each step from a
value to what it is computed from composes one more such map:

- `operand`: a pointwise op reads its operands broadcast from the right;
- `moved`: data movement reads a piece of its input at `a * c + b` along some
  dimensions (Note [Data movement in kernels] in schedule.py);
- `through`: a view's element is its base's element at the view's offset plus
  its coordinates times its strides; where each dimension of the view steps
  along one dimension of the base without carrying into the next, that is an
  affine map of coordinates too ([8, 256, 32] viewed as [8, 64, 4, 32] and
  permuted steps along the 256 by 4 and by 1). A view that merges dimensions of
  its base does not map: the base is written, and the view reads it.

At memory the place becomes the strides and offset of a load (`meta`); at data
movement, a piece's bounds become conditions on a coordinate (`coordinate`).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from transpiler.ir.graph import TensorMeta


@dataclass(frozen=True)
class Place:
    at: tuple[int, ...]  # the reader's shape
    coefs: tuple[tuple[int, ...], ...]  # per dimension of the value, per reader's
    offsets: tuple[int, ...]  # per dimension of the value

    @staticmethod
    def reading(shape: tuple[int, ...], at: tuple[int, ...]) -> Place:
        """A value of `shape` read at each position of `at`, broadcast from the
        right as a pointwise op reads it."""
        pad = len(at) - len(shape)
        coefs = tuple(
            tuple(int(i == d + pad and n != 1) for i in range(len(at)))
            for d, n in enumerate(shape)
        )
        return Place(tuple(at), coefs, (0,) * len(shape))

    def operand(self, shape: tuple[int, ...]) -> Place:
        """Where a value read here reads its operand of `shape` (broadcast)."""
        pad = len(self.coefs) - len(shape)
        zero = (0,) * len(self.at)
        return Place(
            self.at,
            tuple(zero if n == 1 else self.coefs[d + pad] for d, n in enumerate(shape)),
            tuple(0 if n == 1 else self.offsets[d + pad] for d, n in enumerate(shape)),
        )

    def moved(self, maps: dict[int, tuple[int, int]]) -> Place:
        """Coordinate `a * c + b` along each dimension d of `maps` ({d: (a, b)})
        where this place reads coordinate c."""
        coefs, offsets = list(self.coefs), list(self.offsets)
        for d, (a, b) in maps.items():
            coefs[d] = tuple(a * x for x in coefs[d])
            offsets[d] = a * offsets[d] + b
        return Place(self.at, tuple(coefs), tuple(offsets))

    def through(self, view: TensorMeta, base: TensorMeta) -> Place | None:
        """This place of `view`, a view of `base`'s memory (dense, in any order of
        dimensions), as a place of `base`; None where a dimension of the view
        does not step along one dimension of the base."""
        dims = _dense_order(base)
        if dims is None or len(view.shape) != len(self.coefs):
            return None
        rest = view.offset - base.offset
        offsets = [0] * len(base.shape)
        for k in dims:  # outermost first
            offsets[k], rest = divmod(rest, base.stride[k])
        if rest or any(b < 0 or b >= n for b, n in zip(offsets, base.shape)):
            return None
        coefs = [[0] * len(self.at) for _ in base.shape]
        reach = list(offsets)  # the largest coordinate along each base dimension
        for i, (n, s) in enumerate(zip(view.shape, view.stride)):
            if n == 1 or s == 0:
                continue
            k = next((k for k in dims if base.stride[k] <= s), None)
            if k is None or s % base.stride[k]:
                return None
            step = s // base.stride[k]
            reach[k] += step * (n - 1)
            offsets[k] += step * self.offsets[i]
            for j, a in enumerate(self.coefs[i]):
                coefs[k][j] += step * a
        if any(r >= n for r, n in zip(reach, base.shape)):
            return None  # it would carry into the next dimension
        return Place(self.at, tuple(map(tuple, coefs)), tuple(offsets))

    def meta(self, view: TensorMeta) -> TensorMeta:
        """`view`'s memory read at this place: a meta of the reader's shape."""
        stride, offset = [0] * len(self.at), view.offset
        for d, (row, b) in enumerate(zip(self.coefs, self.offsets)):
            if view.shape[d] == 1:
                continue
            offset += b * view.stride[d]
            for i, a in enumerate(row):
                stride[i] += a * view.stride[d]
        return TensorMeta(self.at, tuple(stride), offset, view.dtype)

    def coordinate(self, d: int) -> TensorMeta:
        """The coordinate along dimension d, as a meta whose address it is."""
        return TensorMeta(self.at, self.coefs[d], self.offsets[d], torch.int64)

    def span(self, d: int) -> tuple[int, int]:
        """The least and the greatest coordinate along d over the reader's positions."""
        low = high = self.offsets[d]
        for a, n in zip(self.coefs[d], self.at):
            low, high = low + min(0, a * (n - 1)), high + max(0, a * (n - 1))
        return low, high

    def inside(self, view: TensorMeta) -> bool:
        """Whether every position reads `view`'s memory within it: along each
        dimension that moves its address (a broadcast one reads one element
        wherever its coordinate lies)."""
        return all(
            n == 1 or s == 0 or (0 <= self.span(d)[0] and self.span(d)[1] < n)
            for d, (n, s) in enumerate(zip(view.shape, view.stride))
        )

    def varies(self, d: int) -> frozenset[int]:
        """The reader's dimensions the coordinate along d moves with."""
        return frozenset(i for i, a in enumerate(self.coefs[d]) if a)


def maps_into(view: TensorMeta, base: TensorMeta) -> bool:
    """Whether every dimension of `view` steps along one dimension of `base`."""
    identity = Place.reading(view.shape, view.shape)
    return identity.through(view, base) is not None


def _dense_order(base: TensorMeta) -> list[int] | None:
    """`base`'s dimensions of more than one element, outermost first, where its
    memory is dense (contiguous in some order of them); else None."""
    dims = sorted(
        (d for d, n in enumerate(base.shape) if n != 1),
        key=lambda d: -base.stride[d],
    )
    expected = 1
    for d in reversed(dims):
        if base.stride[d] != expected:
            return None
        expected *= base.shape[d]
    return dims
