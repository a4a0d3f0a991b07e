"""Gathers of elementwise values computed from gathered operands (Note
[Gathered values] in passes/gathered_values.py), against eager on both
backends.

The split thresholds are lowered so that rows of 4096 split (Note [Split
softmax]): there the log-softmax's statistics come from another kernel, and the
gathered loss must still never write the whole log-softmax. Cases gather along
the last dimension, several positions a row, through casts and operands
broadcast along either dimension. The controls are computed as before: values
something else reads too, or with no statistics from another kernel (a
function of memory alone, column statistics). Gathers down the columns, whose
index check splits into rows, put a load at computed positions in a C++ kernel that
loops over its row twice: its next row's prefetch must leave that load alone
(`_row_loads` in codegen/cpp.py; such kernels did not compile).

`logp[torch.arange(n), t]`, one element a row picked by an index of two tensors,
is such a gather too (Note [Picks of one element a row] in range_gathers.py),
with targets counted from the row's end; picking from some rows only is not.
"""

from __future__ import annotations

import re
from unittest import mock

import pytest
import torch

from tests.compile_helpers import check_raises_as_eager, compile_source, trace_source
from transpiler.passes import split_reductions
from transpiler.passes.check_indices import check_indices
from transpiler.passes.decompose import decompose
from transpiler.passes.gathered_values import _elementwise, gathered_values
from transpiler.passes.range_gathers import range_gathers

pytestmark = [  # masked-off lanes of Triton's interpreter
    pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning"),
]

SOURCE = """
import torch
import torch.nn.functional as F


def token_log_probs(x, t):
    return F.log_softmax(x, dim=-1).gather(-1, t[:, None])[:, 0]


def cross_entropy(x, t):
    return F.cross_entropy(x, t), F.cross_entropy(x, t, reduction="none")


def probs_at(x, t):
    e = torch.exp(x - x.amax(-1, keepdim=True))
    return (e / e.sum(-1, keepdim=True)).gather(1, t[:, None])


def bf16_log_probs(x, t):
    y = x.to(torch.bfloat16)
    return F.log_softmax(y.float(), dim=-1).gather(-1, t[:, None])


def several_a_row(x, t3):
    return F.log_softmax(x, dim=-1).gather(1, t3)


def scaled_columns(x, w, t):
    return torch.tanh(x * w[None, :] + 1.0).gather(1, t[:, None]) - x.amax(-1)[:, None]


def down_columns(x, t0):
    return (x - x.mean(0, keepdim=True)).gather(0, t0[None, :])


def sequences(x3, t2):
    return F.log_softmax(x3, dim=-1).gather(-1, t2[..., None]).squeeze(-1)


def down_input(x, t0):
    return x.gather(0, t0[None, :])


def down_kept(x, t0):
    y = x * 2.0 + 1.0
    return y.gather(0, t0[None, :]), y


def picked(x, t):
    logp = F.log_softmax(x, dim=-1)
    return -logp[torch.arange(x.shape[0]), t].mean()


def picked_input(x, t):
    return x[torch.arange(x.shape[0]), t] * 2.0


def picked_some_rows(x, t):
    logp = F.log_softmax(x, dim=-1)
    return logp[torch.arange(x.shape[0] - 1), t[1:]]


def also_summed(x, t):
    ls = F.log_softmax(x, dim=-1)
    return ls.gather(-1, t[:, None]), ls.sum(-1)
"""

ROWS, N = 8, 4096
# cases whose [ROWS, N] elementwise value is read by the gather alone: no
# variant allocates a buffer of that shape
NOT_WRITTEN = {
    "token_log_probs",
    "cross_entropy",
    "probs_at",
    "bf16_log_probs",
    "several_a_row",
    "picked",
}


def _inputs(name: str, seed: int = 0, ignore: bool = False) -> dict:
    gen = torch.Generator().manual_seed(seed)
    x = torch.randn(ROWS, N, generator=gen) * 3
    t = torch.randint(0, N, (ROWS,), generator=gen)
    if ignore:
        t[::3] = -100  # cross-entropy's ignore_index
    if name == "several_a_row":
        return {"x": x, "t3": torch.randint(0, N, (ROWS, 3), generator=gen)}
    if name == "scaled_columns":
        return {"x": x, "w": torch.rand(N, generator=gen), "t": t}
    if name.startswith("picked"):  # counted from the row's end too, as indexing does
        t[::2] -= N
    if name.startswith("down"):
        return {"x": x, "t0": torch.randint(0, ROWS, (N,), generator=gen)}
    if name == "sequences":
        return {
            "x3": torch.randn(2, ROWS // 2, N, generator=gen),
            "t2": torch.randint(0, N, (2, ROWS // 2), generator=gen),
        }
    return {"x": x, "t": t}


# gathers not rewritten: from values something else reads too, or from values
# with no row statistics from another kernel (the kernel of the rows, if any,
# computes the gathered element: `row_gather` in fuse.py)
KEPT = {"also_summed", "down_kept", "scaled_columns", "down_columns"}
# an index of two tensors that picks other than one element of every row
INDEXED = {"picked_some_rows"}
NAMES = sorted(
    NOT_WRITTEN | KEPT | INDEXED | {"sequences", "down_input", "picked_input"}
)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    low = {d: 1 << 12 for d in ("cuda", "cpu")}
    functions = {name: _inputs(name) for name in NAMES}
    with (
        mock.patch.dict(split_reductions.NUMEL_MIN, low),
        mock.patch.dict(split_reductions.WHOLE_NUMEL_MIN, low),
    ):
        return compile_source(SOURCE, functions, tmp_path_factory.mktemp("gathered"))


@pytest.mark.parametrize("seed", [1, 2])
@pytest.mark.parametrize("name", NAMES)
def test_against_eager(compiled, name: str, seed: int) -> None:
    compiled[name].check(_inputs(name, seed))


def test_ignored_targets(compiled) -> None:
    compiled["cross_entropy"].check(_inputs("cross_entropy", 3, ignore=True))


@pytest.mark.parametrize("name", ["token_log_probs", "picked"])
@pytest.mark.parametrize("bad", [N, -N - 1])
def test_index_out_of_range_raises(compiled, name: str, bad: int) -> None:
    args = _inputs(name, 4)
    args["t"][5] = bad
    check_raises_as_eager(compiled[name], args)


def _whole_buffers(source: str) -> list[str]:
    return re.findall(rf"empty\(\s*\({ROWS}, {N}\)", source)


@pytest.mark.parametrize("name", sorted(NOT_WRITTEN))
def test_value_not_written(compiled, name: str) -> None:
    case = compiled[name]
    for source in (case.cpu_source, case.cuda_source):
        assert not _whole_buffers(source), source


@pytest.mark.parametrize("name", NAMES)
def test_gathers_read_no_elementwise_value(tmp_path, name: str) -> None:
    """After the pass, a gather reads an elementwise value only where something
    else reads that value too (`KEPT`)."""
    traced = trace_source(SOURCE, name, _inputs(name), tmp_path)
    low = {"cpu": 1 << 12}
    with (
        mock.patch.dict(split_reductions.NUMEL_MIN, low),
        mock.patch.dict(split_reductions.WHOLE_NUMEL_MIN, low),
    ):
        graph = range_gathers(decompose(check_indices(traced.graph), "cpu"))
        graph = gathered_values(split_reductions.split_reductions(graph, "cpu"))
    nodes = graph.by_name()
    from_values = [
        n.name
        for n in graph.nodes
        if n.target == "aten.gather.default" and _elementwise(nodes[n.args[0].name])
    ]
    assert bool(from_values) == (name in KEPT), graph
    indexed = any(n.target == "aten.index.Tensor" for n in graph.nodes)
    assert indexed == (name in INDEXED), graph
    traced.check(graph, _inputs(name, 5))


def test_rows_picked_in_the_rows_kernel(tmp_path) -> None:
    """Rows that do not split: `logp[arange(n), t]` is read where the row's
    kernel computes the row's statistics (`row_gather`), the log-softmax never
    written, on both backends."""
    rows, n = 64, 100
    gen = torch.Generator().manual_seed(6)
    inputs = {
        "x": torch.randn(rows, n, generator=gen),
        "t": torch.randint(-n, n, (rows,)),
    }
    case = compile_source(SOURCE, {"picked": inputs}, tmp_path)["picked"]
    case.check(inputs)
    for source in (case.cpu_source, case.cuda_source):
        assert not re.findall(rf"empty\(\s*\({rows}, {n}\)", source), source
