"""`torch.topk` with a small k in kernels, as rounds of two reductions over the row
(Note [Top-k in rounds] in passes/decompose.py).

A table of the ways models use it: a mixture of experts' router (softmax, top 2,
renormalized), top k along a middle dimension, the picked positions read back by a
gather, k of 1 and k the whole row, rows that fill a block and rows that do not, in
float32, float64 and bfloat16. Each runs on both backends with inputs that hold
NaN, infinities and ties, and is checked against eager: the values exactly; the
positions exactly where eager's order is defined (the k values and the next one
all different), elsewhere as positions that hold those values, each once (eager's
order among equal values is its kernel's: it differs between CPU and GPU, and with
the row's length). The smallest values are taken in kernels too, and so are
integers and `sorted=False` (whose values are compared in order). The inputs are
unchanged after the call, and no call into PyTorch computes a top-k. A k past
TOPK_ROUNDS stays a call into PyTorch.
"""

from __future__ import annotations

import pytest
import torch

from tests.compile_helpers import aten_calls, compile_source

SOURCE = """
import torch
import torch.nn.functional as F


def router(logits):
    weights = F.softmax(logits, dim=1, dtype=torch.float)
    weights, experts = torch.topk(weights, 2, dim=-1)
    return weights / weights.sum(dim=-1, keepdim=True), experts


def three(x):
    return torch.topk(x, 3)


def middle(x):
    values, positions = torch.topk(x, 4, dim=1)
    return values * 2.0, positions


def gathered(x):
    values, positions = x.topk(2)
    return x.gather(-1, positions) - values, positions


def first(x):
    return torch.topk(x, 1, dim=0)


def whole(x):
    return torch.topk(x, 5)


def many(x):
    return torch.topk(x, 9)


def smallest(x):
    return torch.topk(x, 2, largest=False)


def nearest(x):
    # the nearest of a row's points, in any order: the rounds' order is one
    values, positions = torch.topk(x, 3, dim=0, largest=False, sorted=False)
    return values.sqrt(), positions


def counts(x):
    return torch.topk(x, 4)


def fewest(x):
    return torch.topk(x, 3, largest=False)


def ascending(x):
    return torch.topk(x, 5, largest=False)
"""


def special_rows(x: torch.Tensor, dim: int) -> torch.Tensor:
    """`x` with rows along `dim` of NaN, -inf, inf and ties in it."""
    x = x.movedim(dim, -1).clone()
    n = x.shape[-1]
    rows = x.reshape(-1, n)
    specials = [
        lambda r: r.fill_(float("-inf")),
        lambda r: r.__setitem__(1 % n, float("nan")),
        lambda r: r.fill_(float("nan")),
        lambda r: r.__setitem__(slice(0, n, 2), 0.5),
        lambda r: r.__setitem__(slice(n // 2, n), float("-inf")),
        lambda r: r.__setitem__(slice(0, 2), float("inf")),
        lambda r: r.__setitem__(slice(n - 2, n), float("nan")),
        lambda r: r.fill_(1.0),
    ]
    for row, special in zip(rows, specials):
        special(row)
    return rows.reshape(x.shape).movedim(-1, dim).contiguous()


def randn(*shape: int, dtype=torch.float32, seed: int = 0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def randint(*shape: int, dtype=torch.int64, seed: int = 0) -> torch.Tensor:
    """Small integers: rows with ties, and the extremes of the dtype in some."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(-3, 4, shape, generator=g).to(dtype)
    x[0] = torch.iinfo(dtype).min
    x[1, ::2] = torch.iinfo(dtype).max
    return x


# name -> (example inputs, the dimension topk reads, whether it stays in kernels)
CASES = {
    "router": ({"logits": randn(64, 8)}, -1, True),
    "three": ({"x": randn(16, 10)}, -1, True),  # rows of 10 in blocks of 16
    "three_f64": ({"x": randn(12, 7, dtype=torch.float64)}, -1, True),
    "three_bf16": ({"x": randn(24, 32, dtype=torch.bfloat16)}, -1, True),
    "middle": ({"x": randn(3, 9, 5)}, 1, True),
    "gathered": ({"x": randn(4, 6, 12)}, -1, True),
    "first": ({"x": randn(6, 20)}, 0, True),
    "whole": ({"x": randn(10, 5)}, -1, True),
    "many": ({"x": randn(8, 40)}, -1, False),  # k past TOPK_ROUNDS
    "smallest": ({"x": randn(8, 12)}, -1, True),
    "smallest_bf16": ({"x": randn(16, 9, dtype=torch.bfloat16)}, -1, True),
    "nearest": ({"x": randn(10, 6).abs()}, 0, True),
    "counts": ({"x": randint(12, 11)}, -1, True),
    "fewest": ({"x": randint(6, 13, dtype=torch.int32)}, -1, True),
    "ascending": ({"x": randn(10, 5)}, -1, True),  # NaN picked in the last rounds
}
FUNCTION = {"three_f64": "three", "three_bf16": "three", "smallest_bf16": "smallest"}
READ_BACK = {
    "middle": 4,
    "gathered": 2,
    "nearest": 3,
}  # their k: values computed further
LARGEST = {
    "smallest": False,
    "smallest_bf16": False,
    "nearest": False,
    "fewest": False,
    "ascending": False,
}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict:
    by_function = {}
    for case, (inputs, _, _) in CASES.items():
        by_function.setdefault(FUNCTION.get(case, case), []).append((case, inputs))
    out = {}
    for fn, cases in by_function.items():
        for case, inputs in cases:  # one build for each example
            root = tmp_path_factory.mktemp(case)
            out[case] = compile_source(SOURCE, {fn: inputs}, root)[fn]
    return out


def check_topk(
    got,
    want,
    x: torch.Tensor,
    dim: int,
    label: str,
    gap: float = 0.0,
    largest: bool = True,
) -> None:
    """`got` is a top-k of `x` along `dim` as eager's `want` is (see the module
    docstring); eager's positions are compared where the top k and the next value
    are more than `gap` apart."""
    values, positions = got
    want_values, want_positions = want
    assert positions.dtype == torch.int64, label
    torch.testing.assert_close(values, want_values, equal_nan=True, rtol=0, atol=0)
    # the positions hold the values, each position once
    held = x.gather(dim, positions)
    torch.testing.assert_close(held, values, equal_nan=True, rtol=0, atol=0)
    picked = positions.movedim(dim, -1)
    assert (picked.sort(-1).values.diff(dim=-1) != 0).all(), label
    # where the top k and the next value are all different, eager's positions
    k, n = picked.shape[-1], x.shape[dim]
    ordered = x.movedim(dim, -1).double().nan_to_num(nan=float("inf"))
    top = ordered.sort(-1, descending=largest).values[..., : min(k + 1, n)]
    distinct = (top.diff(dim=-1).abs() > gap).all(-1)
    assert torch.equal(picked[distinct], want_positions.movedim(dim, -1)[distinct])


@pytest.mark.parametrize("case", CASES)
def test_topk_matches_eager(case: str, compiled: dict) -> None:
    inputs, dim, in_kernels = CASES[case]
    c = compiled[case]
    for side in (c.cpu_source, c.cuda_source):
        assert bool(aten_calls(side, ("topk",))) != in_kernels, side
    if not in_kernels:
        return
    x, *rest = inputs.values()
    assert not rest
    largest = LARGEST.get(case, True)
    rows = (x, special_rows(x, dim)) if x.dtype.is_floating_point else (x,)
    for values in rows:
        want = c.eager(values.clone())
        for backend, run in (("cpu", c.cpu), ("triton", c.cuda)):
            given = values.clone()
            got = run(given)
            assert torch.equal(given.nan_to_num(), values.nan_to_num()), backend
            label = f"{case} {backend}"
            if case == "router":
                weights, experts = got
                torch.testing.assert_close(weights, want[0], equal_nan=True)
                probs = torch.softmax(values.float(), dim=1)
                check_topk(
                    (probs.gather(1, experts), experts),
                    torch.topk(probs, 2, dim=-1),
                    probs,
                    -1,
                    label,
                    gap=1e-6,  # the kernel's softmax may differ in the last bit
                )
            elif case in READ_BACK:  # what the values became, then the positions
                if case == "nearest":  # sorted=False: eager's order is its own
                    got_values = got[0].sort(dim).values
                    want_values = want[0].sort(dim).values
                else:
                    got_values, want_values = got[0], want[0]
                torch.testing.assert_close(got_values, want_values, equal_nan=True)
                k = READ_BACK[case]
                check_topk(
                    (values.gather(dim, got[1]), got[1]),
                    torch.topk(values, k, dim=dim, largest=largest),
                    values,
                    dim,
                    label,
                    largest=largest,
                )
            else:
                check_topk(got, want, values, dim, label, largest=largest)
