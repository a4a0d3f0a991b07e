"""Every `omp simd` loop of the C++ kernels of patterns from real models is
vectorized by GCC with the flags runtime_shim compiles with.

A loop GCC leaves scalar runs four to eight times slower and says nothing: one
int64 conversion (Note [Conversions of int64] in codegen/cpp.py), a select that
GCC's partial redundancy elimination turns into two paths (`-fno-tree-pre` in
runtime_shim/cpp.py), a `where` between the pieces of a `cat` of computed values.
Each pattern is compiled as the generated module compiles it, with GCC's report
of the loops it vectorized, and checked against eager.
"""

from __future__ import annotations

import re

import pytest
import torch

from tests.compile_helpers import compile_source, vectorized_lines
from transpiler.codegen import cpp

SOURCE = """
import math

import torch
import torch.nn.functional as F


def topk_softmax(logits):
    logits = logits / 0.7
    v, _ = torch.topk(logits, 50)
    return logits.masked_fill(logits < v[:, [-1]], float("-inf")).softmax(-1)


def extended_mask_softmax(scores, mask):
    m = (1.0 - mask[:, None, None, :].float()) * torch.finfo(torch.float32).min
    return (scores + m).softmax(-1)


def buckets(q, k):
    d = (k[None, :] - q[:, None]).abs()
    large = 8 + (torch.log(d.float() / 8) / math.log(16) * 8).to(torch.long)
    return torch.where(d < 8, d, large.clamp(max=15))


def timesteps(t):
    f = torch.exp(-math.log(10000) * torch.arange(0, 64, dtype=torch.float32) / 64)
    e = t[:, None].float() * f[None, :]
    return torch.cat([torch.cos(e), torch.sin(e)], dim=-1)


def cross_entropy(logits, target):
    return F.cross_entropy(logits, target)


def argmax_rows(logits):
    return logits.argmax(-1)
"""

g = torch.Generator().manual_seed(0)
CASES = {
    "topk_softmax": {"logits": torch.randn(4, 32000, generator=g)},
    "extended_mask_softmax": {
        "scores": torch.randn(2, 4, 64, 64, generator=g),
        "mask": torch.randint(0, 2, (2, 64), generator=g),
    },
    "buckets": {
        "q": torch.randint(0, 512, (96,), generator=g),
        "k": torch.randint(0, 512, (96,), generator=g),
    },
    "timesteps": {"t": torch.randint(0, 50, (24,), generator=g)},
    "cross_entropy": {
        "logits": torch.randn(16, 4000, generator=g),
        "target": torch.randint(0, 4000, (16,), generator=g),
    },
    "argmax_rows": {"logits": torch.randn(16, 4000, generator=g)},
}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory):
    return compile_source(SOURCE, CASES, tmp_path_factory.mktemp("vectorized"))


@pytest.fixture(scope="module")
def report(compiled, tmp_path_factory: pytest.TempPathFactory) -> tuple[str, set[int]]:
    """(the C++ file, the lines GCC reports loops vectorized at), compiled as
    runtime_shim compiles it."""
    text = next(iter(compiled.values())).cpp_text
    return text, vectorized_lines(text, tmp_path_factory.mktemp("report"))


def _trips(loop: str) -> int:
    """The number of times a `for` of constant bounds runs (GCC unrolls a loop
    of up to `SHORT_INNER_MAX` whole, or leaves it to its cost model)."""
    bounds = re.search(r"= (\d+); \w+ < (\d+);", loop)
    return int(bounds[2]) - int(bounds[1]) if bounds else cpp.SHORT_INNER_MAX + 1


# the calls into PyTorch each case keeps (the rest is in kernels)
EXTERN = {"topk_softmax": "aten.topk", "cross_entropy": "aten"}


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager(compiled, name: str) -> None:
    compiled[name].check(CASES[name])  # outputs, and inputs after the call
    source = compiled[name].cpu_source
    assert "_fallback_" not in source  # no op runs in fallback code
    calls = re.findall(r"torch\.ops\.(aten\.\w+)", source)
    assert all(c.startswith(EXTERN.get(name, "-")) for c in calls), calls


def test_every_simd_loop_is_vectorized(report) -> None:
    text, found = report
    lines = text.splitlines()
    pragmas = [
        i + 1 for i, line in enumerate(lines) if re.search(r"#pragma omp .*simd", line)
    ]
    assert pragmas, text
    # GCC places a loop at its pragma, or at the first line of its body
    scalar = [
        p
        for p in pragmas
        if not found & {p, p + 1, p + 2} and _trips(lines[p]) > cpp.SHORT_INNER_MAX
    ]
    assert not scalar, "\n\n".join(
        "\n".join(lines[max(0, n - 20) : n + 12]) for n in scalar[:3]
    )
