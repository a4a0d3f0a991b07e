"""direct_views: chains of view methods the wrapper makes become one
`runtime_shim.view` call from a root of known layout; results match eager PyTorch."""

from __future__ import annotations

import re
from pathlib import Path
from types import ModuleType

import pytest
import torch

from tests.compile_helpers import (
    assert_same,
    compile_source,
    import_generated,
    unique_name,
)
from transpiler.api import build
from transpiler.options import Options, Target, TensorSpec, Variant

pytestmark = [  # masked-off lanes of Triton's interpreter compute 0 / 0 and such
    pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning"),
]

SOURCE = """
import torch
import torch.nn.functional as F
from torch import nn


def attention(x, w):
    q, k, v = F.linear(x, w).split(16, dim=2)
    q = q.view(2, 8, 4, 4).transpose(1, 2)
    k = k.view(2, 8, 4, 4).transpose(1, 2)
    v = v.view(2, 8, 4, 4).transpose(1, 2)
    y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    return F.linear(y.transpose(1, 2).contiguous().view(2, 8, 16), w[:16]).relu()


def input_root(x, w):
    return torch.mm(x.view(16, 10).t(), w).relu()


def kernel_root(x, w):
    return torch.bmm((x + 1).view(2, 16, 20).transpose(1, 2), w)


def returned(x):
    return (x * 2).view(4, 8).t()


def one_link(x, w):
    return torch.mm(x.t(), w).relu()


class Weights(nn.Module):
    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 12))

    def forward(self, x):
        return torch.mm(x, self.w.view(12, 16).t()).relu()
"""

g = torch.Generator().manual_seed(0)


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g)


EXAMPLES = {
    "attention": {"x": randn(2, 8, 16), "w": randn(48, 16)},
    "input_root": {"x": randn(160), "w": randn(16, 3)},
    "kernel_root": {"x": randn(32, 20), "w": randn(2, 16, 3)},
    "returned": {"x": randn(32)},
    "one_link": {"x": randn(16, 10), "w": randn(16, 3)},
}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict:
    return compile_source(SOURCE, EXAMPLES, tmp_path_factory.mktemp("direct_views"))


def code(source: str) -> str:
    """`source` without its comments (which quote the user's lines)."""
    return "\n".join(
        line for line in source.splitlines() if not line.lstrip().startswith("#")
    )


def direct_views(source: str) -> list[str]:
    return re.findall(r"runtime_shim\.view\(\s*(.*?)\s*\)\n", source, re.S)


@pytest.mark.parametrize("name", list(EXAMPLES))
def test_both_backends_match_eager(name: str, compiled: dict) -> None:
    c, example = compiled[name], EXAMPLES[name]
    want = c.eager(**example)
    assert_same(c.cpu(**example), want, 1e-5, 1e-5)
    assert_same(c.cuda(**example), want, 1e-5, 1e-5)


def test_attention_views_are_one_call_each(compiled: dict) -> None:
    for source in (compiled["attention"].cpu_source, compiled["attention"].cuda_source):
        assert direct_views(source) == [
            "linear, (2, 4, 8, 4), (384, 4, 48, 1), 0",
            "linear, (2, 4, 8, 4), (384, 4, 48, 1), 16",
            "linear, (2, 4, 8, 4), (384, 4, 48, 1), 32",
            "scaled_dot_product_attention, (2, 8, 16), (128, 16, 1), 0",
        ]
        for method in ("split_with_sizes", ".transpose(", "[0]", "[1]", "[2]"):
            assert method not in code(source)


def test_roots_of_known_layout(compiled: dict) -> None:
    """An input (guarded contiguous) and a kernel's buffer are roots."""
    assert direct_views(compiled["input_root"].cpu_source) == [
        "x, (10, 16), (1, 10), 0"
    ]
    assert direct_views(compiled["kernel_root"].cpu_source) == [
        "add, (2, 20, 16), (320, 1, 20), 0"
    ]


def test_offsets_are_from_the_roots_own_start(compiled: dict) -> None:
    """An input that is a contiguous slice of a larger tensor passes the guards; its
    direct views start where it starts."""
    c = compiled["input_root"]
    big = randn(170)
    x, w = big[3:163], EXAMPLES["input_root"]["w"]
    assert x.storage_offset() == 3 and x.is_contiguous()
    assert_same(c(x, w), c.eager(x, w), 1e-5, 1e-5)
    assert_same(c.cpu(x, w), c.eager(x, w), 1e-5, 1e-5)


def test_returned_views_stay_views(compiled: dict) -> None:
    """What the variant returns is a real view of its base, as eager's is."""
    c = compiled["returned"]
    assert direct_views(c.cpu_source) == []
    assert ".view(4, 8).t()" in c.cpu_source.replace("\n", "")
    out = c.cpu(**EXAMPLES["returned"])
    assert out._is_view() and out._base is not None


def test_one_link_stays_a_method(compiled: dict) -> None:
    assert direct_views(compiled["one_link"].cpu_source) == []
    assert "x.t()" in compiled["one_link"].cpu_source


@pytest.fixture(scope="module")
def weights(tmp_path_factory: pytest.TempPathFactory) -> ModuleType:
    root = tmp_path_factory.mktemp("direct_views_module")
    stem = unique_name("src")
    (root / f"{stem}.py").write_text(SOURCE)
    x = (("x", TensorSpec(torch.float32, (4, 16))),)
    target = Target(f"{stem}.py::Weights", (Variant(x, "cpu"),))
    return import_generated(build(Options(targets=(target,), root=root)), root, stem)


def test_parameters_only_extern_calls_read_keep_their_methods(
    weights: ModuleType,
) -> None:
    """Nothing guards the strides of a parameter that no kernel reads, so its views
    are made by the methods, which read the strides it has."""
    text = Path(weights.__file__).read_text()
    assert "runtime_shim.view(" not in text
    assert ".view(12, 16).t()" in text.replace("\n", "")
    module = weights.Weights().eval()
    eager = weights._source.Weights().eval()
    eager.load_state_dict(module.state_dict())
    x = randn(4, 16)
    with torch.no_grad():
        assert_same(module(x), eager(x), 1e-5, 1e-5)
