"""channels_last: 2-D convolutions and the kernels between them run NHWC; what the
graph returns keeps the layout eager code gives it; results match eager PyTorch on
both backends."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from tests.compile_helpers import assert_same, compile_source, trace_source
from transpiler.pipeline import optimize

pytestmark = [  # masked-off lanes of Triton's interpreter compute 0 / 0 and such
    pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning"),
]

SOURCE = """
import torch
import torch.nn.functional as F


def residual(x, w1, w2, m, v, g, b):
    y = F.relu(F.batch_norm(F.conv2d(x, w1, padding=1), m, v, g, b))
    z = F.batch_norm(F.conv2d(y, w2, padding=1), m, v, g, b)
    return F.relu(z + y)


def depthwise(x, w):
    return F.conv2d(x, w, padding=1, groups=x.shape[1]).sigmoid()


def grouped(x, w):
    return F.conv2d(x, w, groups=2).relu()


def patch_embed(x, w, b):
    y = F.conv2d(x, w, b, stride=4).flatten(2).transpose(1, 2)
    return F.layer_norm(y, (y.shape[-1],))


def pooled(x, w):
    y = F.conv2d(x, w).relu()
    return y.mean((2, 3)), F.max_pool2d(y, 2)


def strided_input(x, w):
    return F.conv2d(x.transpose(2, 3), w).tanh()


def view_head(x, w, fw):
    y = F.conv2d(x, w).relu()
    return F.linear(y.view(y.shape[0], -1), fw)


def with_fallback(x, w):
    y = F.conv2d(x, w).relu()
    print("positive mean:", float(y.mean()) > 0)  # fallback code reads y
    return y.view(y.shape[0], -1) * 2


def inplace_on_a_view(x, w):
    y = F.conv2d(x, w)
    y[:, :2].relu_()  # becomes as_strided reads of y's memory
    return y.sigmoid()


def few_convolutions(x, w):
    y = F.conv2d(x, w)
    for _ in range(160):  # a long transformer after its patch embedding
        y = y.sin() * 0.5
    return y
"""

g = torch.Generator().manual_seed(0)


def randn(*shape):
    return torch.randn(*shape, generator=g)


BN = {"m": randn(8), "v": randn(8).abs() + 0.5, "g": randn(8), "b": randn(8)}
CASES = {  # name -> (inputs, whether its convolutions run NHWC)
    "residual": (
        {
            "x": randn(2, 4, 6, 6),
            "w1": randn(8, 4, 3, 3),
            "w2": randn(8, 8, 3, 3),
            **BN,
        },
        True,
    ),
    "depthwise": ({"x": randn(2, 8, 5, 5), "w": randn(8, 1, 3, 3)}, True),
    "grouped": ({"x": randn(2, 8, 5, 5), "w": randn(6, 4, 1, 1)}, False),
    "patch_embed": (
        {"x": randn(2, 3, 16, 16), "w": randn(8, 3, 4, 4), "b": randn(8)},
        True,
    ),
    "pooled": ({"x": randn(2, 3, 8, 8), "w": randn(8, 3, 3, 3)}, True),
    "strided_input": ({"x": randn(2, 3, 7, 9), "w": randn(5, 3, 2, 2)}, True),
    "view_head": (
        {"x": randn(2, 3, 6, 6), "w": randn(4, 3, 3, 3), "fw": randn(5, 64)},
        True,
    ),
    "with_fallback": ({"x": randn(2, 3, 6, 6), "w": randn(4, 3, 3, 3)}, False),
    "inplace_on_a_view": ({"x": randn(2, 3, 6, 6), "w": randn(4, 3, 3, 3)}, False),
    "few_convolutions": ({"x": randn(2, 3, 4, 4), "w": randn(4, 3, 2, 2)}, False),
}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory) -> dict:
    functions = {name: inputs for name, (inputs, _) in CASES.items()}
    return compile_source(SOURCE, functions, tmp_path_factory.mktemp("nhwc"))


def _results(value):
    return list(value) if isinstance(value, tuple) else [value]


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_eager_values_and_layouts(compiled, name: str) -> None:
    inputs = CASES[name][0]
    c = compiled[name]
    want = c.eager(**inputs)
    for got in (c.cpu(**inputs), c.cuda(**inputs)):
        assert_same(got, want, 1e-4, 1e-5)
        for r, w in zip(_results(got), _results(want)):
            if w.is_contiguous():  # returned as eager returns it
                assert r.is_contiguous(), (r.stride(), w.stride())


@pytest.mark.parametrize("name", sorted(CASES))
def test_convolutions_run_channels_last(name: str, tmp_path: Path) -> None:
    inputs, nhwc = CASES[name]
    graph = optimize(trace_source(SOURCE, name, inputs, tmp_path).graph)
    nodes = graph.by_name()
    convs = [n for n in graph.nodes if n.target == "aten.convolution.default"]
    assert convs
    for conv in convs:
        x = nodes[conv.args[0].name].tensor_meta
        out = conv.tensor_meta
        _, c, h, w = out.shape
        channels_last = (h * w * c, 1, w * c, c)
        assert (out.stride == channels_last) == nhwc, str(graph)
        assert (x.stride[1] == 1) == nhwc, str(graph)
        # the weight too, copied by the graph (cuDNN and oneDNN would copy it on
        # every call); a 1x1 weight is both layouts, and no copy is made
        weight = nodes[conv.args[1].name]
        _, i, kh, kw = weight.tensor_meta.shape
        copied = weight.target == "aten.clone.default"
        assert copied == (nhwc and kh * kw > 1 and i > 1), str(graph)


def test_kernels_store_in_memory_order(compiled) -> None:
    """Pointwise kernels between convolutions enumerate N, H, W, C: each store is
    to consecutive addresses, not strided by the channel count."""
    text = compiled["residual"].triton_text
    kernels = re.findall(r"\ndef (\w+)\(.*?(?=\n@|\Z)", text, re.S)
    bodies = re.split(r"\n@", text)
    # (not a slice's write, `y[:, :2].relu_()`: its addresses skip the rest)
    pointwise = [
        b
        for b in bodies
        if "tl.store" in b and "rindex" not in b and "index_put" not in b
    ]
    assert len(pointwise) >= 3, kernels
    for body in pointwise:
        for address in re.findall(r"tl\.store\(\s*([^,]+),", body):
            assert "%" not in address and "//" not in address, body
