"""Gathers whose index a kernel computes from memory at the gather's positions.

A loss that ignores padding gathers at `where(t != ignore, t, 0)`, a weighted
loss reads `weight[t]`, a clamped or wrapped index is a function of the index
tensor: each index has the result's shape, so the kernel that gathers computes
it where it reads it instead of loading it from a kernel that stored it (Note
[Indices computed in the kernel] in passes/schedule.py). Each case is compared
with eager on both backends (outputs and inputs after the call); the launches
of each variant are counted, and the index tensors the program allocates.
"""

from __future__ import annotations

import re

import pytest
import torch

from tests.compile_helpers import check_raises_as_eager, compile_source

SOURCE = """
import torch
import torch.nn.functional as F


def ce_ignore(x, t):
    return F.cross_entropy(x, t)


def ce_smoothed(x, t):
    return F.cross_entropy(x, t, label_smoothing=0.1)


def ce_sum_ignore_zero(x, t):
    return F.cross_entropy(x, t, reduction="sum", ignore_index=0)


def nll_weighted(x, t, w):
    return F.nll_loss(F.log_softmax(x, -1), t, weight=w)


def gather_clamped(x, i):
    return x.gather(1, i.clamp(0, x.shape[1] - 1)) * 2


def take_wrapped(v, i):
    return v[(i + 3) % v.shape[0]] + 1


def rows_wrapped(e, i):
    return e[(i + 1) % e.shape[0]] * 3


def two_indices(x, i, j):
    return x[i.clamp(max=x.shape[0] - 1), j] - 1


def index_also_added(e, i):
    k = (i + 1) % e.shape[0]
    return e[k] * 3, k * 2
"""

g = torch.Generator().manual_seed(0)
N, C = 24, 37


def targets(ignore: int) -> torch.Tensor:
    t = torch.randint(0, C, (N,), generator=g)
    t[::5] = ignore
    return t


# name -> (inputs, launches of the CPU variant, of the CUDA variant)
CASES = {
    "ce_ignore": ({"x": torch.randn(N, C, generator=g), "t": targets(-100)}, 2, 2),
    "ce_smoothed": ({"x": torch.randn(N, C, generator=g), "t": targets(-100)}, 2, 2),
    "ce_sum_ignore_zero": (
        {"x": torch.randn(N, C, generator=g), "t": targets(0)},
        2,
        2,
    ),
    "nll_weighted": (
        {"x": torch.randn(N, C, generator=g), "t": targets(-100)}
        | {"w": torch.rand(C, generator=g)},
        2,
        2,
    ),
    "gather_clamped": (
        {
            "x": torch.randn(N, C, generator=g),
            "i": torch.randint(-5, C + 5, (N, 6), generator=g),
        },
        1,
        1,
    ),
    "take_wrapped": (
        {
            "v": torch.randn(C, generator=g),
            "i": torch.randint(0, 99, (N, 5), generator=g),
        },
        1,
        1,
    ),
    # the index has fewer dimensions than the rows it picks: computed at each
    # element of a row, from the index tensor read there (and, apart, checked
    # to lie in range)
    "rows_wrapped": (
        {
            "e": torch.randn(C, 8, generator=g),
            "i": torch.randint(0, 99, (N,), generator=g),
        },
        2,
        2,
    ),
    # two indices, one computed: `x[i.clamp(max=n - 1), j]`
    "two_indices": (
        {
            "x": torch.randn(C, 9, generator=g),
            "i": torch.randint(0, 60, (N, 3), generator=g),
            "j": torch.randint(0, 9, (N, 3), generator=g),
        },
        2,
        2,
    ),
    # an index read by a gather and by arithmetic: stored once, read by both
    "index_also_added": (
        {
            "e": torch.randn(C, 8, generator=g),
            "i": torch.randint(0, 99, (N,), generator=g),
        },
        None,
        None,
    ),
}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict:
    functions = {name: inputs for name, (inputs, _, _) in CASES.items()}
    return compile_source(SOURCE, functions, tmp_path_factory.mktemp("indices"))


def _launches(source: str) -> int:
    return source.count("_cpp.function(") + source.count("_triton.triton_")


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager_on_both_backends(compiled, name: str) -> None:
    """Outputs and inputs after the call, with no call into PyTorch but the
    check that the targets are in range."""
    case = compiled[name]
    case.check(CASES[name][0])
    for source in (case.cpu_source, case.cuda_source):
        assert "_fallback_" not in source, source
        calls = [ln for ln in source.splitlines() if "torch.ops.aten" in ln]
        assert not calls, calls


@pytest.mark.parametrize("name", sorted(n for n in CASES if CASES[n][1] is not None))
def test_the_index_is_computed_where_the_gather_reads_it(compiled, name: str) -> None:
    """As many launches as the reductions need, and no integer or bool tensor
    allocated but the one-element check that the targets are in range: the
    index, and the masks of ignored targets that the last kernel counts, are
    computed where they are read, never stored."""
    case = compiled[name]
    _, cpu, cuda = CASES[name]
    assert (_launches(case.cpu_source), _launches(case.cuda_source)) == (cpu, cuda), (
        case.cpu_source + case.cuda_source
    )
    for source in (case.cpu_source, case.cuda_source):
        stored = re.findall(
            r"empty\(\(\d[^)]*\), \([^)]*\), torch\.(?:int64|bool)\)", source
        )
        assert not stored, source


@pytest.mark.parametrize("name", ["ce_ignore", "nll_weighted"])
def test_targets_out_of_range_raise(compiled, name: str) -> None:
    inputs = dict(CASES[name][0])
    t = inputs["t"].clone()
    t[3] = C + 2
    check_raises_as_eager(compiled[name], inputs | {"t": t})
