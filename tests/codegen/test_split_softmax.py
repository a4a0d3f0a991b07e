"""Softmax-like reductions over few long rows, split (Note [Split softmax] in
passes/split_reductions.py): each part's maximum and its sum of exponentials
shifted by it in one kernel, their totals in one more.

The split thresholds are lowered so that rows of 4096 split on both backends
(the mechanism, not the policy of when it pays, is under test here). Each case
is compared with eager on random rows and on rows where whole parts are -inf
(a top-k filter's masked logits), a whole row is -inf, or a value is +inf, and
counts its kernel launches: a split maximum and sum take two kernels, not four.
"""

from __future__ import annotations

from unittest import mock

import pytest
import torch

from tests.compile_helpers import compile_source
from transpiler.passes import split_reductions

pytestmark = [  # masked-off lanes of Triton's interpreter compute 0 / 0 and such
    pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning"),
]

SOURCE = """
import torch
import torch.nn.functional as F


def softmax(x):
    return torch.softmax(x, -1)


def log_softmax(x):
    return F.log_softmax(x / 0.7, dim=-1)


def logsumexp(x):
    return torch.logsumexp(x, -1), torch.logsumexp(x, 1, keepdim=True)


def by_hand(x):
    m = x.max(-1).values
    e = torch.exp(x - m[:, None])
    return e / e.sum(-1)[:, None]


def threshold_filter(x, v):
    return x.masked_fill(x < v[:, None], float("-inf")).softmax(-1)


def bf16_softmax(x):
    return torch.softmax(x.to(torch.bfloat16), -1)


def shifted_by_another(x, y):
    m = y.amax(-1, keepdim=True)
    return torch.exp(x - m).sum(-1), m
"""

ROWS, N = 8, 4096
# kernel launches with the split maximum and sum sharing their kernels: partials,
# totals, and (where a tensor is returned) the values; the two-pass split took
# two kernels more. `shifted_by_another` shifts by another tensor's maximum: two
# reductions split on their own.
LAUNCHES = {
    "softmax": 3,
    "log_softmax": 3,
    "logsumexp": 2,
    "by_hand": 3,
    "threshold_filter": 3,
    "bf16_softmax": 3,
    "shifted_by_another": 4,
}


def _launches(source: str) -> int:
    return source.count("_cpp.function(") + source.count("_triton.triton_")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    x = torch.randn(ROWS, N)
    functions = {name: {"x": x} for name in LAUNCHES}
    functions["shifted_by_another"] = {"x": x, "y": x}
    functions["threshold_filter"] = {"x": x, "v": x[:, 0]}
    low = {d: 1 << 12 for d in ("cuda", "cpu")}
    with (
        mock.patch.dict(split_reductions.NUMEL_MIN, low),
        mock.patch.dict(split_reductions.WHOLE_NUMEL_MIN, low),
    ):
        out = compile_source(SOURCE, functions, tmp_path_factory.mktemp("softmax"))
    return out, functions


def _rows(kind: str) -> torch.Tensor:
    gen = torch.Generator().manual_seed(11)
    x = torch.randn(ROWS, N, generator=gen) * 4
    if kind == "parts_inf":  # whole parts of each row -inf, as masked logits are
        for row in range(ROWS):
            keep = torch.zeros(N, dtype=torch.bool)
            keep[torch.randint(0, N, (3,), generator=gen)] = True
            x[row][~keep] = float("-inf")
    elif kind == "row_inf":  # a row of -inf alone; a value of +inf in another
        x[2] = float("-inf")
        x[5, 100] = float("inf")
    return x


@pytest.mark.parametrize("kind", ["random", "parts_inf", "row_inf"])
@pytest.mark.parametrize("name", list(LAUNCHES))
def test_split_softmax(compiled, name: str, kind: str) -> None:
    cases, functions = compiled
    case = cases[name]
    inputs = dict(functions[name])
    inputs["x"] = _rows(kind)
    if "y" in inputs:
        inputs["y"] = _rows("random").flip(0)
    if "v" in inputs:  # a top-k filter's threshold: the third largest of a row
        inputs["v"] = inputs["x"].topk(3).values[:, -1].clone()
    case.check(inputs)
    for source in (case.cpu_source, case.cuda_source):
        assert _launches(source) == LAUNCHES[name], source


def test_partials_read_each_row_once(compiled) -> None:
    """The kernel of the partials computes both the maximum and the shifted sum
    of each part, and stores no mask of the parts that are all -inf."""
    cases, _ = compiled
    case = cases["softmax"]
    kernels = case.triton_text.split("@triton.jit")
    partials = next(k for k in kernels if "tl.reduce(" in k and "tl.exp(" in k)
    assert partials.count("tl.load(x_ptr") == 1, partials
    assert partials.count("tl.store(") == 2, partials
    for source in (case.cpu_source, case.cuda_source):
        assert "torch.bool" not in source, source
