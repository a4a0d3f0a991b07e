"""Loops and comprehensions over a tensor: `for row in x`, `[f(r) for r in x]`.

Python iterates a tensor through `Tensor.__iter__`, its slices along the first
dimension (`unbind(0)`). The interpreter does the same and unrolls the loop once a
slice, as it unrolls one over a list: each form here was a graph break, though
`zip(x, y)` and `enumerate(x)`, which call `iter` themselves, were not. Each case
runs on both backends against eager (outputs and inputs after the call) with no
fallback code; iterating a 0-d tensor raises as eager does, and a loop over a
dynamic first dimension runs the source (tests/control_flow/test_dynamic.py).
"""

from __future__ import annotations

import re

import pytest
import torch

from tests.compile_helpers import Compiled, compile_source

SOURCE = """
import torch


def for_loop(x):
    out = []
    for row in x:
        out.append(row.sum())
    return torch.stack(out)


def list_comprehension(x):
    return torch.stack([r.amax(-1) for r in x])


def generator_in_sum(x):
    return sum(r.exp() for r in x)


def nested_comprehension(x):
    return torch.stack([v * 2 for r in x for v in r])


def dict_comprehension(x):
    d = {i: r for i, r in enumerate(x)}
    return d[0] - d[len(d) - 1]


def filtered(x, keep: int):
    return torch.cat([r for i, r in enumerate(x) if i != keep])


def break_and_else(x):
    total = torch.zeros_like(x[0])
    for r in x:
        if r.shape[0] > 100:
            break
        total = total + r
    else:
        total = total * 2
    return total


def writes_through_slices(x):
    for r in x:
        r.mul_(2)
    return x + 1


def ints_and_bools(idx, mask):
    picked = [int_row * 3 for int_row in idx]
    flags = [m.any() for m in mask]
    return torch.stack(picked), torch.stack(flags)


def log_prob_per_sequence(logits, index):
    # TRL's selective log-softmax: the logsumexp one sequence at a time
    selected = torch.gather(logits, dim=-1, index=index.unsqueeze(-1)).squeeze(-1)
    lse = torch.stack([torch.logsumexp(lg, dim=-1) for lg in logits])
    return selected - lse


def zero_dim(x):
    return [v for v in x.sum()]
"""

g = torch.Generator().manual_seed(0)
X = torch.randn(4, 6, generator=g)
CASES = {
    "for_loop": {"x": X},
    "list_comprehension": {"x": torch.randn(3, 5, 7, generator=g)},
    "generator_in_sum": {"x": X},
    "nested_comprehension": {"x": X},
    "dict_comprehension": {"x": X},
    "filtered": {"x": X, "keep": 2},
    "break_and_else": {"x": X},
    "writes_through_slices": {"x": X},
    "ints_and_bools": {
        "idx": torch.randint(0, 9, (3, 4), generator=g),
        "mask": torch.rand(5, 4, generator=g) > 0.7,
    },
    "log_prob_per_sequence": {
        "logits": torch.randn(2, 8, 100, generator=g),
        "index": torch.randint(0, 100, (2, 8), generator=g),
    },
}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Compiled]:
    functions = CASES | {"zero_dim": {"x": X}}
    return compile_source(SOURCE, functions, tmp_path_factory.mktemp("iteration"))


@pytest.mark.parametrize("name", CASES)
def test_matches_eager_without_fallback(
    compiled: dict[str, Compiled], name: str
) -> None:
    case = compiled[name]
    for source in (case.cpu_source, case.cuda_source):
        assert "_fallback_" not in source, source
        calls = re.findall(r"torch\.ops\.aten\.(\w+)", source)
        assert set(calls) <= {"as_strided"}, source  # a view
    case.check(
        {
            k: v.clone() if isinstance(v, torch.Tensor) else v
            for k, v in CASES[name].items()
        }
    )


# C++ launches of each unrolled loop: the slices' reductions side by side in one
# kernel, the stack (and the gather and subtraction) in the next
LAUNCHES = {"for_loop": 2, "list_comprehension": 2, "log_prob_per_sequence": 2}


@pytest.mark.parametrize("name", LAUNCHES)
def test_slices_are_read_by_kernels(compiled: dict[str, Compiled], name: str) -> None:
    """Each slice is read where a kernel needs it: no copy of a slice, no
    launch a slice."""
    source = compiled[name].cpu_source
    assert source.count("_cpp.function(") == LAUNCHES[name], source
    shape = tuple(next(iter(CASES[name].values())).shape[1:])
    assert f"empty({shape}" not in source, source


def test_zero_dim_raises_as_eager(compiled: dict[str, Compiled]) -> None:
    case = compiled["zero_dim"]
    assert "_fallback_" in case.cpu_source
    with pytest.raises(TypeError) as eager_error:
        case.eager(X.clone())
    for variant in (case.cpu, case.cuda):
        with pytest.raises(TypeError) as error:
            variant(X.clone())
        assert str(error.value) == str(eager_error.value)
