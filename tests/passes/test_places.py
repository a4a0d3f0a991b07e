"""`Place.through` against torch's own views (Note [Places] in passes/places.py).

A base tensor holds its own flat positions (`arange`), so each element of a view
of it says where in the base it lies. For random chains of views (permute,
transpose, slices with steps, unsqueeze, expand, select, splits of a dimension,
reshapes that merge), where `through` gives a place, the base coordinates it
computes at every position of the view are those the view's element names; where
it gives none, some dimension of the view crosses a boundary of the base's.
"""

from __future__ import annotations

import itertools
import random

import pytest
import torch

from transpiler.ir.graph import TensorMeta
from transpiler.passes.places import Place, maps_into


def _random_view(t: torch.Tensor, rng: random.Random) -> torch.Tensor:
    for _ in range(rng.randint(1, 4)):
        rank = t.dim()
        op = rng.choice(["permute", "slice", "unsqueeze", "expand", "select", "split"])
        if op == "permute" and rank > 1:
            dims = list(range(rank))
            rng.shuffle(dims)
            t = t.permute(dims)
        elif op == "slice" and rank:
            d = rng.randrange(rank)
            n = t.shape[d]
            start = rng.randrange(n)
            t = t.narrow(d, start, n - start)[
                (slice(None),) * d + (slice(None, None, rng.randint(1, 3)),)
            ]
        elif op == "unsqueeze":
            t = t.unsqueeze(rng.randint(0, rank))
        elif op == "expand" and rank:
            ones = [d for d in range(rank) if t.shape[d] == 1]
            if ones:
                size = list(t.shape)
                size[rng.choice(ones)] = rng.randint(2, 3)
                t = t.expand(size)
        elif op == "select" and rank > 1:
            d = rng.randrange(rank)
            t = t.select(d, rng.randrange(t.shape[d]))
        elif op == "split" and rank:
            d = rng.randrange(rank)
            n = t.shape[d]
            factors = [f for f in (2, 3) if n % f == 0]
            if factors and t.is_contiguous():
                f = rng.choice(factors)
                t = t.view(*t.shape[:d], f, n // f, *t.shape[d + 1 :])
            elif rng.random() < 0.3:
                t = t.reshape(-1)  # merges: may not map
    return t


def _coordinates(place: Place, c: tuple[int, ...]) -> list[int]:
    return [
        b + sum(a * x for a, x in zip(row, c))
        for row, b in zip(place.coefs, place.offsets)
    ]


@pytest.mark.parametrize("seed", range(40))
def test_through_matches_torch(seed: int) -> None:
    rng = random.Random(seed)
    shape = tuple(rng.choice([1, 2, 3, 4, 6]) for _ in range(rng.randint(1, 4)))
    base = torch.arange(torch.Size(shape).numel()).view(shape)
    if rng.random() < 0.3 and base.dim() > 1:  # dense in another order
        base = base.transpose(0, -1).contiguous().transpose(0, -1)
    mapped = 0
    for _ in range(10):
        view = _random_view(base, rng)
        if view.numel() == 0 or view.untyped_storage().data_ptr() != (
            base.untyped_storage().data_ptr()
        ):
            continue  # a reshape that copied
        vmeta, bmeta = TensorMeta.of(view), TensorMeta.of(base)
        place = Place.reading(vmeta.shape, vmeta.shape).through(vmeta, bmeta)
        assert (place is not None) == maps_into(vmeta, bmeta)
        if place is None:
            continue
        mapped += 1
        for c in itertools.product(*(range(n) for n in vmeta.shape)):
            at = _coordinates(place, c)
            assert all(0 <= x < n for x, n in zip(at, shape)), (c, at)
            assert base[tuple(at)].item() == view[tuple(c)].item(), (c, at)
    assert mapped


def test_merges_do_not_map() -> None:
    base = torch.arange(24).view(4, 6)
    flat = base.view(-1)[::5]  # steps of 5 cross the rows of 6
    assert not maps_into(TensorMeta.of(flat), TensorMeta.of(base))
    merged = base[:, :3].t()  # steps along a row and across rows: maps
    assert maps_into(TensorMeta.of(merged), TensorMeta.of(base))
