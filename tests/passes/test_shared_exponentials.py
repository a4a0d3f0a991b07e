"""A sigmoid computed from the `exp(-|x|)` a log-sigmoid of the same value
computes (Note [Shared exponentials] in passes/shared_exponentials.py), against
eager on both backends, with the exponentials of each kernel counted.

Each function is run on random logits and on the edges of the sigmoid: zeros of
both signs, +-inf, NaN, and values large enough that `exp(-x)` overflows.
"""

from __future__ import annotations

import re

import pytest
import torch

from tests.compile_helpers import compile_source

pytestmark = [  # eager's edges: exp(inf), inf - inf and 0 * inf in the interpreter
    pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning"),
]

SOURCE = """
import torch
import torch.nn.functional as F


def focal_loss(x, t):
    p = torch.sigmoid(x)
    ce = F.binary_cross_entropy_with_logits(x, t, reduction="none")
    p_t = p * t + (1 - p) * (1 - t)
    return (ce * (1 - p_t) ** 2).mean(-1)


def probs_and_log_probs(x, t):
    return torch.sigmoid(x), F.logsigmoid(x)


def silu_and_logsigmoid(x, t):
    return F.silu(x) + F.logsigmoid(x) * t


def weighted_bce_and_probs(x, t):
    w = torch.full_like(t[0], 2.0)
    ce = F.binary_cross_entropy_with_logits(x, t, pos_weight=w, reduction="none")
    return ce * torch.sigmoid(x)


def sigmoid_alone(x, t):
    return torch.sigmoid(x) * t


def sigmoid_of_another(x, t):
    return torch.sigmoid(t) * F.logsigmoid(x)


def bf16_probs_and_log_probs(x, t):
    y = x.to(torch.bfloat16)
    return torch.sigmoid(y), F.logsigmoid(y)
"""

# (exponentials, sigmoids) in each backend's kernels: one exponential where
# the sigmoid shares the log-sigmoid's; the controls keep their sigmoid
KERNEL_OPS = {
    "focal_loss": (1, 0),
    "probs_and_log_probs": (1, 0),
    "silu_and_logsigmoid": (1, 0),
    "weighted_bce_and_probs": (1, 0),
    "sigmoid_alone": (0, 1),
    "sigmoid_of_another": (1, 1),
    "bf16_probs_and_log_probs": (1, 1),
}
ROWS, N = 16, 64
EDGES = (0.0, -0.0, float("inf"), float("-inf"), float("nan"), 100.0, -100.0, 1e-8)


def _inputs(kind: str) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(5)
    x = torch.randn(ROWS, N, generator=gen) * 6
    t = torch.rand(ROWS, N, generator=gen)
    if kind == "edges":
        for i, v in enumerate(EDGES):
            x[i, : N // 2] = v
            x[i, N // 2 :] = -v
    return {"x": x, "t": t}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    functions = {name: _inputs("random") for name in KERNEL_OPS}
    return compile_source(SOURCE, functions, tmp_path_factory.mktemp("shared_exp"))


def _kernels(case) -> list[tuple[str, str, str]]:
    """The text of each kernel the variants of `case` launch, with the names
    of its backend's exponential and sigmoid."""
    out = []
    for name in re.findall(r"_triton\.(\w+)\[", case.cuda_source):
        start = case.triton_text.index(f"def {name}(")
        end = case.triton_text.find("@triton.jit", start)
        out.append((case.triton_text[start:end], "tl.exp(", "tl.sigmoid("))
    for name in re.findall(r'_cpp\.function\(\s*"(\w+)"', case.cpu_source):
        start = case.cpp_text.index(f"void {name}(")
        end = case.cpp_text.find('extern "C"', start)
        out.append((case.cpp_text[start:end], "exp_f32(", "sigmoid_f32("))
    return out


@pytest.mark.parametrize("kind", ["random", "edges"])
@pytest.mark.parametrize("name", list(KERNEL_OPS))
def test_against_eager(compiled, name: str, kind: str) -> None:
    compiled[name].check(_inputs(kind))


@pytest.mark.parametrize("name", list(KERNEL_OPS))
def test_exponentials_per_kernel(compiled, name: str) -> None:
    kernels = _kernels(compiled[name])
    assert {k[1] for k in kernels} == {"tl.exp(", "exp_f32("}, kernels
    for text, exp, sigmoid in kernels:
        if exp in text or sigmoid in text:
            assert (text.count(exp), text.count(sigmoid)) == KERNEL_OPS[name], text
