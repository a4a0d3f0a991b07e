"""runtime_shim.layout: allocators and direct views agree with torch's own calls,
with torch's C functions and with the fallbacks used where a torch lacks them."""

from __future__ import annotations

import pytest
import torch

from runtime_shim import layout


@pytest.mark.parametrize("device", ["cpu", "meta"])
def test_allocator_makes_the_layout_asked_for(device: str) -> None:
    empty = layout.allocator(torch.device(device))
    t = empty((2, 3, 4), (12, 1, 3), torch.bfloat16)
    assert (t.shape, t.stride(), t.dtype) == ((2, 3, 4), (12, 1, 3), torch.bfloat16)
    assert t.device.type == device and t.storage_offset() == 0


def test_the_cpu_allocator_is_torchs_own_where_it_has_one() -> None:
    empty = layout.allocator(torch.device("cpu"))
    assert empty is (layout._empty_strided_cpu or empty)
    fallback = layout.allocator(torch.device("meta"))  # no C function for meta
    assert fallback.func is layout._empty_strided


@pytest.mark.parametrize("view", [layout.view, layout.reinterpret], ids=["c", "py"])
def test_view_is_a_chain_of_view_methods(view) -> None:
    base = torch.arange(200.0)[5:]  # a base that starts past its storage's start
    linear = base[:192].view(2, 4, 24)
    want = linear.split(8, dim=2)[1].view(2, 4, 2, 4).transpose(1, 2)
    got = view(linear, (2, 2, 4, 4), (96, 4, 24, 1), 8)
    assert got.stride() == want.stride()
    assert got.storage_offset() == want.storage_offset() == 5 + 8
    torch.testing.assert_close(got, want, rtol=0, atol=0)
    got.mul_(-1)  # it shares the base's memory
    torch.testing.assert_close(want, got, rtol=0, atol=0)


@pytest.mark.parametrize(
    ("size", "stride", "wanted", "copied"),
    [
        ((2, 3), (3, 1), (3, 1), False),
        ((2, 3), (3, 1), (1, 2), True),
        # a dimension of size 1 is read at position 0 alone: its stride is free
        ((1, 8, 1, 64), (512, 64, 64, 1), (512, 64, 512, 1), False),
        ((1, 8, 1, 64), (512, 64, 64, 1), (512, 1, 512, 8), True),
        ((4, 1), (1, 1), (1, 4), False),
    ],
)
def test_as_layout_copies_only_where_positions_differ(
    size, stride, wanted, copied: bool
) -> None:
    base = torch.arange(torch.Size(size).numel(), dtype=torch.float32)
    t = base.as_strided(size, stride)
    out = layout.as_layout(t, wanted)
    assert (out.data_ptr() != t.data_ptr()) == copied
    assert torch.equal(out, t)
    if copied:
        assert out.stride() == wanted
