"""rematerialize: a pointwise value one kernel stores for another is computed again
in the reader where that reads no more memory; results match eager PyTorch on both
backends, and the values stored are counted before and after."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.compile_helpers import compile_source, trace_source
from transpiler.passes.fuse import fuse
from transpiler.passes.rematerialize import rematerialize
from transpiler.pipeline import optimize

pytestmark = [  # masked-off lanes of Triton's interpreter compute 0 / 0 and such
    pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning"),
]

# Each function computes values in a kernel before a matmul (an extern call) and
# reads them again in a kernel after it, as a batch norm's backward reads the
# recomputed forward around a convolution's backward.
SOURCE = """
import torch


def normalized(x, m, r, w):
    h = (x - m) * r
    a = h.relu()
    e = a @ w
    g = torch.where(a > 0, e, 0.0)
    return (g * h).sum(0), g.sum(0)


def three_inputs(x, y, z, w):
    h = x * y + z
    e = h.relu() @ w
    return (e * h).sum(-1)


def mask_only(x, m, w, dy):
    c = x - m
    e = c.relu() @ w
    return torch.where(c > 0, e, dy).sum(-1)


def mask_and_value(x, m, r, w):
    c = (x - m) * r
    keep = c > 0
    e = c.relu() @ w
    return torch.where(keep, e, 0.0).sum(0), (e * c).sum(0), (e * (x - m)).sum(0)


def read_transposed(x, m, w):
    h = (x - m).exp()
    e = h @ w
    return (e * h.t().t()).sum(-1) + h.t().sum(0)


def read_unsqueezed(x, m, r, w):
    h = (x - m) * r
    a = h.relu()
    e = a @ w
    g = torch.where(a > 0, e, 0.0)
    return (g.unsqueeze(0) * h.unsqueeze(0)).sum(-1)


def random_values(x, w):
    h = x * torch.rand_like(x)
    e = h @ w
    return (e * h).sum(-1)


def reduced_in_between(x, w):
    h = x - x.mean(-1, keepdim=True)
    e = h @ w
    return (e * h).sum(-1)
"""

g = torch.Generator().manual_seed(0)


def randn(*shape):
    return torch.randn(*shape, generator=g)


SQUARE = (16, 16)
# name -> (inputs, full-size values stored before, after)
CASES = {
    # h and the mask computed again from x in the reader (x costs less than
    # both); a stays stored for the matmul
    "normalized": (
        {"x": randn(*SQUARE), "m": randn(16), "r": randn(16), "w": randn(*SQUARE)},
        3,
        1,
    ),
    # three inputs to read instead of one value: stored
    "three_inputs": (
        {"x": randn(*SQUARE), "y": randn(*SQUARE), "z": randn(*SQUARE)}
        | {"w": randn(*SQUARE)},
        2,
        2,
    ),
    # a bool mask is a byte an element, x four: stored
    "mask_only": (
        {"x": randn(*SQUARE), "m": randn(16), "w": randn(*SQUARE)}
        | {"dy": randn(*SQUARE)},
        2,
        2,
    ),
    # the mask, c and x - m taken together read x once: all computed again
    "mask_and_value": (
        {"x": randn(*SQUARE), "m": randn(16), "r": randn(16), "w": randn(*SQUARE)},
        4,
        1,
    ),
    # read through views that keep each element's place: computed again, the
    # views copied onto the copies
    "read_unsqueezed": (
        {"x": randn(*SQUARE), "m": randn(16), "r": randn(16), "w": randn(*SQUARE)},
        3,
        1,
    ),
    # read through views that move elements: stored
    "read_transposed": (
        {"x": randn(*SQUARE), "m": randn(16), "w": randn(*SQUARE)},
        1,
        1,
    ),
    # drawn twice, it would differ: stored
    "random_values": ({"x": randn(*SQUARE), "w": randn(*SQUARE)}, 1, 1),
    # a function of a reduction of its own kernel: stored
    "reduced_in_between": ({"x": randn(*SQUARE), "w": randn(*SQUARE)}, 1, 1),
}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict:
    functions = {
        name: inputs for name, (inputs, _, _) in CASES.items() if "random" not in name
    }
    return compile_source(SOURCE, functions, tmp_path_factory.mktemp("remat"))


@pytest.mark.parametrize("name", sorted(n for n in CASES if "random" not in n))
def test_matches_eager_on_both_backends(compiled, name: str) -> None:
    """Outputs and inputs after the call against eager, with no fallback code."""
    c = compiled[name]
    c.check(CASES[name][0])
    for source in (c.cpu_source, c.cuda_source):
        assert "_fallback_" not in source, source


def _stored(graph, fusion) -> int:
    nodes = graph.by_name()
    return sum(
        1
        for name in fusion.realized
        if fusion.kinds[name] == "pointwise"
        and nodes[name].tensor_meta.numel == SQUARE[0] * SQUARE[1]
    )


@pytest.mark.parametrize("name", sorted(CASES))
def test_values_stored_before_and_after(name: str, tmp_path: Path) -> None:
    inputs, before, after = CASES[name]
    graph = optimize(trace_source(SOURCE, name, inputs, tmp_path).graph)
    fusion = fuse(graph)
    assert _stored(graph, fusion) == before, "\n".join(map(str, fusion.groups))
    again, refused = rematerialize(graph, fusion, "cpu")
    assert _stored(again, refused) == after, "\n".join(map(str, refused.groups))
    assert len(refused.groups) <= len(fusion.groups)
