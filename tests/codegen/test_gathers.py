"""Indirect loads in kernels (Note [Indirect loads] in passes/schedule.py).

Embedding lookups, `x[idx]` with negative and multi-dimensional indices, `x[i, j]`
with several index tensors (neighbours or apart, broadcasting together),
index_select, gather along each dimension and the losses built on them (nll_loss,
cross_entropy with ignored targets) and scatters of one element per row, compared
with eager on both backends, the lookups themselves in generated kernels; indices
out of range raise, as eager's ops do (Note [Indirect loads in range] in
passes/check_indices.py).
"""

from __future__ import annotations

import pytest
import torch

from tests.compile_helpers import compile_source
from tests.devices import REAL_GPU

SOURCE = """
import torch
import torch.nn.functional as F


def embed(weight, ids, pos):
    return F.embedding(ids, weight) + pos


def embed_long(weight, ids):
    return F.embedding(ids, weight) * 2


def take_rows(x, idx):
    return x[idx] * 2, x[:, idx].relu(), x.index_select(1, idx[0].abs()) + 1


def gathered(x, i0, i1):
    return torch.gather(x, 1, i1).exp(), torch.gather(x, 0, i0) - 1


def losses(logits, target):
    return (
        F.cross_entropy(logits, target),
        F.cross_entropy(logits, target, reduction="sum", ignore_index=3),
        F.nll_loss(F.log_softmax(logits, -1), target, reduction="none"),
    )


def scattered(x, i0, i1, src):
    # one index per row: a select (Note [Scatters of one element per row])
    return (
        torch.zeros_like(x).scatter(1, i1, -1.0) * x.exp(),
        x.scatter(0, i0, src) + 1,
        x.scatter(-1, i1, src[:6]),
    )


def scattered_twice_per_row(x, i2, src):
    # two indices per row: a scatter kernel, not a select
    return x.scatter(1, i2, src) * 2


def several_indices(x, pos, lengths, i, j, bi, qi, ki):
    b = torch.arange(x.shape[0])
    return (
        x[b, lengths - 1] * 2,  # each sequence's last position
        pos[bi, qi] == pos[bi, ki],  # indices that broadcast (a mask's positions)
        x[i, :, j] + 1,  # apart: the indices' dimensions first
        x[i, j, -1 - j],  # three, negative ones counted from the end
    )


def unbatched_loss(x, w, target):
    # one sample: the log-softmax is read through a view of another shape
    logits = F.linear(x, w)
    return F.cross_entropy(logits, target), F.cross_entropy(logits * 2, target)
"""


def inputs() -> dict:
    gen = torch.Generator().manual_seed(9)
    target = torch.randint(0, 40, (12,), generator=gen)
    target[2] = 3  # ignored by the second loss
    return {
        "embed": {
            "weight": torch.randn(50, 16, generator=gen),
            "ids": torch.randint(0, 50, (3, 7), generator=gen),
            "pos": torch.randn(7, 16, generator=gen),
        },
        # 32768 indices: checked in 4 parts side by side, then the parts
        "embed_long": {
            "weight": torch.randn(50, 4, generator=gen),
            "ids": torch.randint(0, 50, (4, 8192), generator=gen),
        },
        "take_rows": {
            "x": torch.randn(9, 9, generator=gen),
            "idx": torch.tensor([[0, -1, 4], [8, -9, 2]]),
        },
        "gathered": {
            "x": torch.randn(6, 10, generator=gen),
            "i0": torch.randint(0, 6, (4, 10), generator=gen),
            "i1": torch.randint(0, 10, (6, 3), generator=gen),
        },
        "losses": {"logits": torch.randn(12, 40, generator=gen) * 3, "target": target},
        "scattered": {
            "x": torch.randn(6, 10, generator=gen),
            "i0": torch.randint(0, 6, (1, 10), generator=gen),
            "i1": torch.randint(0, 10, (6, 1), generator=gen),
            "src": torch.randn(8, 12, generator=gen),
        },
        "several_indices": {
            "x": torch.randn(4, 7, 5, generator=gen),
            "pos": torch.randint(0, 3, (2, 8), generator=gen),
            "lengths": torch.tensor([7, 1, 3, 5]),
            "i": torch.tensor([0, -1, 2]),
            "j": torch.tensor([-5, 4, 0]),
            "bi": torch.arange(2).view(2, 1, 1, 1),
            "qi": torch.randint(0, 8, (1, 1, 6, 1), generator=gen),
            "ki": torch.randint(0, 8, (1, 1, 1, 6), generator=gen),
        },
    }


TWICE = {
    "x": torch.randn(6, 10),
    "i2": torch.tensor([[0, 3], [1, 2], [9, 2], [4, 5], [0, 6], [7, 8]]),  # distinct
    "src": torch.randn(6, 2),
}


UNBATCHED = {"x": torch.randn(8), "w": torch.randn(40, 8), "target": torch.tensor(7)}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    cases = {**inputs(), "unbatched_loss": UNBATCHED, "scattered_twice_per_row": TWICE}
    return compile_source(SOURCE, cases, tmp_path_factory.mktemp("gathers"))


def test_a_loss_of_one_sample(compiled) -> None:
    """cross_entropy of one sample (no batch dimension) reads its log-softmax
    through a view of another shape: it is written, then gathered from memory
    (the reductions of its one element stay calls into PyTorch)."""
    compiled["unbatched_loss"].check(UNBATCHED)


def test_other_scatters_write_in_a_kernel_of_their_own(compiled) -> None:
    """Two indices a row: no select, a scatter that writes (Note [Scatters] in
    passes/schedule.py), after a copy of x."""
    case = compiled["scattered_twice_per_row"]
    case.check(TWICE)
    for side in (case.cpu_source, case.cuda_source):
        assert "torch.ops.aten.scatter" not in side, side
        assert "fused_copy" in side and "fused_scatter" in side, side


@pytest.mark.parametrize("name", list(inputs()))
def test_indirect_loads(compiled, name: str) -> None:
    case = compiled[name]
    case.check(inputs()[name])
    for side in (case.cpu_source, case.cuda_source):
        # the lookups run in kernels: no extern call but the range check (and
        # the positions a scatter compares with its indices)
        externs = [line for line in side.splitlines() if "torch.ops.aten." in line]
        assert all("_assert_async" in s or "arange" in s for s in externs), side


@pytest.mark.parametrize(
    ("name", "bad"),
    [
        ("embed", {"ids": torch.tensor([[0, 1, 50, 2, 3, 4, 5]] * 3)}),
        ("take_rows", {"idx": torch.tensor([[0, -10, 4], [8, 1, 2]])}),
        ("gathered", {"i1": torch.full((6, 3), -1)}),
        ("embed", {"ids": torch.tensor([[0, 1, -1, 2, 3, 4, 5]] * 3)}),
        ("losses", {"target": torch.tensor([40] + [0] * 11)}),
        ("scattered", {"i1": torch.full((6, 1), 10)}),
        ("scattered", {"i0": torch.full((1, 10), -1)}),
        ("several_indices", {"j": torch.tensor([0, 5, 1])}),
        ("several_indices", {"lengths": torch.tensor([7, 1, 8, 5])}),
        (
            "embed_long",
            {
                "ids": torch.zeros(4, 8192, dtype=torch.long).index_fill(
                    1, torch.tensor([8191]), 50
                )
            },
        ),
        (
            "embed_long",
            {
                "ids": torch.zeros(4, 8192, dtype=torch.long).index_fill(
                    0, torch.tensor([2]), -1
                )
            },
        ),
    ],
)
def test_index_out_of_range_raises(compiled, name: str, bad: dict) -> None:
    """Eager raises (an IndexError, or gather's RuntimeError); so does each
    variant, the same type, before anything reads outside the tensor."""
    args = {**inputs()[name], **bad}
    with pytest.raises((IndexError, RuntimeError)) as eager_error:
        compiled[name].eager(**args)
    # on a GPU the check is a device-side assert, as eager's is: it ends the
    # process's CUDA context, so there the Triton variant is not called here
    variants = (
        (compiled[name].cpu,) if REAL_GPU else (compiled[name].cpu, compiled[name].cuda)
    )
    for variant in variants:
        with pytest.raises(eager_error.type, match="out of"):  # eager's type
            variant(**args)


def test_many_indices_are_checked_in_parts(compiled) -> None:
    """32768 indices are checked as 4 rows of 8192 (programs or threads side by
    side), then the 4 results: two kernels before the lookup, not one walking all
    (Note [Indirect loads in range])."""
    case = compiled["embed_long"]
    for side, call in (
        (case.cpu_source, "_cpp.function("),
        (case.cuda_source, "_triton."),
    ):
        assert side.count(call) == 3, side
        assert "empty((4,), (1,), torch.int8)" in side, side


def test_loss_never_writes_the_log_softmax(compiled) -> None:
    """cross_entropy's gather of the target's log-probability is computed again
    from the row's max and sum (fuse.row_gather): no [N, C] tensor is written."""
    logits = inputs()["losses"]["logits"]
    full = f"empty({tuple(logits.shape)}"
    for side in (compiled["losses"].cpu_source, compiled["losses"].cuda_source):
        assert full not in side, side
