"""recompute: small pointwise values read broadcast by a larger kernel are computed
in it, at its shape; results match eager PyTorch on both backends."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.compile_helpers import assert_same, compile_source, trace_source
from transpiler.passes.fuse import fuse
from transpiler.pipeline import optimize

pytestmark = [  # masked-off lanes of Triton's interpreter compute 0 / 0 and such
    pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning"),
]

SOURCE = """
import torch
import torch.nn.functional as F


def bn_eval(x, m, v, w, b):
    return F.batch_norm(x, m, v, w, b).relu()


def rms_one_plus(x, w):
    scale = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6)
    return x * scale * (1.0 + w)


def two_readers(x, y, w):
    s = w.sigmoid() * 2
    return x * s, y + s


def also_returned(x, w):
    s = w.exp()
    return x * s, s


def promoted(x, w, s):
    return x * (w + s)


def factory(x):
    return x + x.new_full((8,), 2.0).exp()


def flattened(x, w, u):
    p = w + u
    return x * p.reshape(16)


def read_by_a_matmul(x, y, w):
    s = y.sin()
    return x.exp() + s + s @ w


def mask_from_lengths(x, lengths):
    keep = torch.arange(8).unsqueeze(0) < lengths.unsqueeze(1)
    return x.masked_fill(~keep.unsqueeze(-1), 0.0).sum(1)
"""

g = torch.Generator().manual_seed(0)


def randn(*shape, dtype=torch.float32):
    return torch.randn(*shape, generator=g).to(dtype)


# name -> (inputs, kernels the optimized graph fuses into)
CASES = {
    "bn_eval": (
        {
            "x": randn(2, 8, 5, 5),
            "m": randn(8),
            "v": randn(8).abs() + 0.5,
            "w": randn(8),
            "b": randn(8),
        },
        1,
    ),
    "rms_one_plus": ({"x": randn(6, 8), "w": randn(8)}, 1),
    "two_readers": ({"x": randn(4, 8), "y": randn(2, 3, 8), "w": randn(8)}, 2),
    "also_returned": ({"x": randn(4, 8), "w": randn(8)}, 2),
    # broadcast, the f64 0-dim `s` would make `w + s` f64: it stays a kernel of its own
    "promoted": (
        {"x": randn(4, 8), "w": randn(8), "s": torch.tensor(0.5, dtype=torch.float64)},
        2,
    ),
    "factory": ({"x": randn(4, 8)}, 2),
    # `view` cannot merge the dimension `w` is broadcast along: p stays a kernel
    "flattened": ({"x": randn(4, 16), "w": randn(8), "u": randn(2, 8)}, 2),
    "read_by_a_matmul": ({"x": randn(4, 8), "y": randn(4, 8), "w": randn(8, 8)}, None),
    "mask_from_lengths": (
        {"x": randn(3, 8, 4), "lengths": torch.tensor([8, 3, 0])},
        None,
    ),
}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict:
    functions = {name: inputs for name, (inputs, _) in CASES.items()}
    return compile_source(SOURCE, functions, tmp_path_factory.mktemp("recompute"))


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager_on_both_backends(compiled, name: str) -> None:
    inputs = CASES[name][0]
    c = compiled[name]
    want = c.eager(**inputs)
    assert_same(c.cpu(**inputs), want, 1e-5, 1e-5)
    assert_same(c.cuda(**inputs), want, 1e-5, 1e-5)


@pytest.mark.parametrize(
    "name", sorted(n for n, (_, kernels) in CASES.items() if kernels is not None)
)
def test_small_values_are_computed_where_they_are_read(
    name: str, tmp_path: Path
) -> None:
    inputs, kernels = CASES[name]
    graph = optimize(trace_source(SOURCE, name, inputs, tmp_path).graph)
    groups = fuse(graph).groups
    assert len(groups) == kernels, "\n".join(map(str, groups)) + f"\n{graph}"


def test_batch_norm_statistics_are_read_per_channel(compiled) -> None:
    """Batch norm's scale is computed from the running variance inside the kernel
    that normalizes, which reads the statistics through stride-0 views."""
    source = compiled["bn_eval"].cpu_source
    assert source.count("_cpp.function(") == 1, source
    for name in ("x", "m", "v", "w", "b"):
        assert f"{name}.data_ptr()" in source, source


def test_an_op_drawing_random_numbers_is_never_recomputed() -> None:
    from transpiler.ir.ops import is_random, resolve_op

    assert is_random("aten.rand_like.default")
    assert is_random("aten.bernoulli.default")
    assert not is_random("aten.exp.default")
    assert resolve_op("aten.exp.default") is torch.ops.aten.exp.default
