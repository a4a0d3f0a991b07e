"""Pooling and nearest-neighbour upsampling in generated kernels on both backends
(Note [Pooling as windows] in passes/decompose.py).

A table of the pools vision models use (ResNet's stem max pool, DenseNet's average
pool, Inception's 3 x 3 average with and without the padding counted, 1-d and 3-d
pools, dilated and rectangular windows, adaptive average and max pools whose
windows divide their input or differ in length) and of nearest upsampling by
whole factors (UNet and FPN decoders), each with what follows it in the model.
Each case is checked against eager, outputs and inputs after the call; those the
note covers run in kernels alone, the pool and its consumer in one kernel. The
cases it leaves whole (indices read, windows overhanging with `ceil_mode`,
fractional scales) must still match.
"""

from __future__ import annotations

import re

import pytest
import torch

from tests.compile_helpers import compile_source

SOURCE = """
import torch
import torch.nn.functional as F


def stem(x):
    return F.max_pool2d(F.relu(x), 3, 2, 1)


def halve(x):
    return F.max_pool2d(x, 2)


def lenet(x):
    return F.relu(F.max_pool2d(x, 2))


def dilated(x):
    return F.max_pool2d(x, (3, 2), (1, 2), (1, 0), dilation=(2, 1))


def transition(x):
    return F.avg_pool2d(x, 2) * 0.5


def inception(x):
    return F.avg_pool2d(x, 3, 1, 1), F.avg_pool2d(x, 3, 1, 1, count_include_pad=False)


def divisor(x):
    return F.avg_pool2d(x, 3, 2, 1, divisor_override=4)


def ceil_even(x):
    return F.max_pool2d(x, 2, 2, ceil_mode=True)


def pools_1d_3d(x1, x3):
    return (
        F.max_pool1d(x1, 3, 2, 1),
        F.avg_pool1d(x1, 4),
        F.max_pool3d(x3, 2),
        F.avg_pool3d(x3, 3, 1, 1),
    )


def adaptive(x):
    return F.adaptive_avg_pool2d(x, (2, 4)), F.adaptive_avg_pool2d(x, 1)


def adaptive_max(x, x1, x3):
    # timm's "max" and "avgmax" heads (to 1 x 1), windows that divide the input,
    # windows that differ in length (3 x 5 of 8 x 12), 1-D and 3-D
    return (
        F.adaptive_max_pool2d(x, 1) + F.adaptive_avg_pool2d(x, 1),
        F.adaptive_max_pool2d(x, (2, 4)),
        F.adaptive_max_pool2d(x, (3, 5)),
        F.adaptive_max_pool1d(x1, 4),
        F.adaptive_max_pool3d(x3, (2, 2, 3)),
    )


def adaptive_max_indices(x):
    return F.adaptive_max_pool2d(x, (3, 5), return_indices=True)


def upsample_add(x, skip):
    return F.interpolate(x, scale_factor=2, mode="nearest") + skip


def upsample_sizes(x):
    return (
        F.interpolate(x, size=(24, 16), mode="nearest"),
        F.interpolate(x, scale_factor=3.0, mode="nearest"),
    )


def with_indices(x):
    values, indices = F.max_pool2d(x, 2, return_indices=True)
    return values, indices


def ceil_overhang(x):
    return F.max_pool2d(x, 3, 2, ceil_mode=True), F.avg_pool2d(x, 3, 2, ceil_mode=True)


def half_precision(x):
    return F.max_pool2d(x, 3, 2, 1), F.avg_pool2d(x, 2)


def fractional(x):
    return F.interpolate(x, scale_factor=1.5, mode="nearest")
"""

g = torch.Generator().manual_seed(0)


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g)


def specials(x: torch.Tensor) -> torch.Tensor:
    """A NaN, a -inf and an inf in the first map; a plateau of equal values."""
    x = x.clone()
    x[0, 0, 1, 1] = float("nan")
    x[0, 0, 5, 4] = float("-inf")
    x[0, 0, 6, 0] = float("inf")
    x[0, 1, :4, :4] = 2.0
    return x


CASES = {
    "stem": {"x": specials(randn(2, 3, 15, 14))},
    "halve": {"x": specials(randn(2, 4, 8, 9))},  # an odd width: the last column left
    "lenet": {"x": specials(randn(2, 4, 12, 12))},
    "dilated": {"x": randn(2, 3, 11, 10)},
    "transition": {"x": randn(2, 4, 8, 8)},
    "inception": {"x": randn(2, 3, 7, 9)},
    "divisor": {"x": randn(1, 2, 9, 9)},
    "ceil_even": {"x": randn(1, 2, 8, 6)},
    "pools_1d_3d": {"x1": randn(2, 3, 17), "x3": randn(1, 2, 6, 5, 4)},
    "adaptive": {"x": randn(2, 3, 8, 12)},
    "adaptive_max": {
        "x": specials(randn(2, 3, 8, 12)),
        "x1": randn(2, 3, 10),
        "x3": randn(1, 2, 6, 5, 4),
    },
    "adaptive_max_indices": {"x": randn(1, 2, 8, 12)},
    "upsample_add": {"x": randn(2, 3, 5, 7), "skip": randn(2, 3, 10, 14)},
    "upsample_sizes": {"x": randn(1, 2, 8, 4)},
    "with_indices": {"x": randn(1, 2, 6, 6)},
    "ceil_overhang": {"x": randn(1, 2, 8, 8)},
    "half_precision": {"x": randn(2, 3, 9, 8).bfloat16()},
    "fractional": {"x": randn(1, 2, 4, 4)},
}
WHOLE = {"with_indices", "ceil_overhang", "fractional", "adaptive_max_indices"}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory):
    return compile_source(SOURCE, CASES, tmp_path_factory.mktemp("pooling"))


def counts(c) -> list[tuple[int, int]]:
    """(kernels, extern calls) of the function's two variants."""
    doc = c.module.__doc__
    name = c.name
    section = doc[doc.index(f"{name}(") :]
    found = re.findall(r"(\d+) kernels?, (\d+) extern calls?", section)[:2]
    return [(int(k), int(e)) for k, e in found]


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager(compiled, name: str) -> None:
    compiled[name].check(CASES[name])


@pytest.mark.parametrize("name", sorted(set(CASES) - WHOLE))
def test_runs_in_kernels(compiled, name: str) -> None:
    for source in (compiled[name].cpu_source, compiled[name].cuda_source):
        assert "torch.ops" not in source and "extern" not in source, source


@pytest.mark.parametrize(
    "name", ["stem", "lenet", "transition", "upsample_add", "inception"]
)
def test_the_pool_and_its_consumer_are_one_kernel(compiled, name: str) -> None:
    """The windows are loads of the input where it is: no padded copy, no pooled
    tensor written for the ReLU, the scale or the residual add to read, no tensor
    of ones for the count of a window's elements within the input. On GPUs,
    `stem`'s ReLU before the pool is computed in each window (Note [Windows of
    computed values] in passes/schedule.py); C++ writes it first."""
    for source, gpu in (
        (compiled[name].cpu_source, False),
        (compiled[name].cuda_source, True),
    ):
        launches = re.findall(r"_cpp\.function\(|triton_\w+\[", source)
        assert len(launches) == (2 if name == "stem" and not gpu else 1), source


@pytest.mark.parametrize("name", sorted(WHOLE))
def test_cases_the_note_leaves_whole_stay_calls(compiled, name: str) -> None:
    source = compiled[name].cpu_source
    assert re.search(r"pool|upsample", source), source


def test_strided_windows_launch_two_elements_a_thread(compiled) -> None:
    """A window of stride 2 reads neighbouring outputs' inputs two apart: the pool
    gives each thread two elements, so a warp's loads stay within a few cache
    lines; the upsampling's reads (the same input for two neighbours) keep eight."""
    per_thread = {}
    for name in ("stem", "transition", "upsample_add"):
        found = re.findall(
            r"triton_\w+\[.*?\]\(\s*[^)]*?XBLOCK=(\d+), num_warps=(\d+)",
            compiled[name].cuda_source,
            re.S,
        )
        per_thread[name] = [int(x) // (32 * int(w)) for x, w in found]
    assert per_thread == {"stem": [2], "transition": [2], "upsample_add": [8]}
