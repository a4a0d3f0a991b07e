"""The joint graph (passes/joint.py): a traced forward and its backward, recorded
from PyTorch's own autograd formulas.

Each case traces a function or module, builds its joint graph with respect to every
floating-point input and every parameter, runs it with the reference interpreter on
real inputs and random output gradients, and compares the forward outputs and every
gradient with eager autograd (`torch.autograd.grad` on the source itself).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.compile_helpers import trace_source
from transpiler.frontend.recorder import Unsupported
from transpiler.ir.graph import Ref, leaves
from transpiler.ir.interpreter import run_graph
from transpiler.ir.ops import POINTWISE, REDUCTIONS, is_view
from transpiler.passes.joint import joint
from transpiler.passes.partition import partition

ROOT = Path(__file__).resolve().parents[2]

SOURCE = """
import torch
import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(16, 32)
        self.proj = nn.Linear(32, 16)

    def forward(self, x):
        h = self.fc(x)
        h = F.gelu(h, approximate="tanh")
        return self.proj(h)


class Norms(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(16)
        self.scale = nn.Parameter(torch.rand(16) + 0.5)

    def forward(self, x):
        y = self.ln(x)
        rms = y * torch.rsqrt(y.pow(2).mean(-1, keepdim=True) + 1e-6)
        return rms * self.scale


class Embed(nn.Module):
    def __init__(self):
        super().__init__()
        self.wte = nn.Embedding(20, 16)

    def forward(self, idx):
        return self.wte(idx).sum(1)


def attention_probs(q, k):
    scores = q @ k.transpose(-1, -2) / 4.0
    probs = torch.softmax(scores, dim=-1)
    return probs, probs.argmax(-1)


def silu_residual(x, w):
    y = F.silu(x @ w)
    return x + y * torch.sigmoid(y)


def grad_regions(x, w):
    y = x * w
    with torch.no_grad():
        s = y.sum()
        with torch.enable_grad():
            t = y.exp()
    z = y.detach() * y
    return z * s + t, x
"""

CASES = {
    "MLP": ({"x": torch.randn(4, 16)}, None),
    "Norms": ({"x": torch.randn(3, 5, 16)}, None),
    "Embed": ({"idx": torch.randint(0, 20, (2, 7))}, None),
    "attention_probs": ({"q": torch.randn(2, 6, 16), "k": torch.randn(2, 6, 16)}, None),
    "silu_residual": ({"x": torch.randn(8, 16), "w": torch.randn(16, 16) / 4}, None),
    "Block": ({"x": torch.randn(2, 8, 32)}, {"n_embd": 32, "n_head": 4}),
    # no_grad, enable_grad inside it, detach; an input returned as it is
    "grad_regions": ({"x": torch.randn(4, 8), "w": torch.randn(4, 8)}, None),
}


def _source(name: str) -> str:
    if name == "Block":  # the example GPT-2 block, attention included
        return (ROOT / "examples" / "gpt_block.py").read_text()
    return SOURCE


@pytest.mark.parametrize("name", CASES, ids=list(CASES))
def test_joint_graph_matches_eager_autograd(name: str, tmp_path: Path) -> None:
    inputs, init = CASES[name]
    traced = trace_source(_source(name), name, inputs, tmp_path, init)
    graph = traced.graph
    module = traced.obj if isinstance(traced.obj, torch.nn.Module) else None
    floats = [n for n, v in inputs.items() if v.is_floating_point()]
    params = [p for p, _ in module.named_parameters()] if module else []
    result = joint(graph, floats + params)

    # eager: the source itself, with autograd
    eager_inputs = {n: v.clone().requires_grad_(n in floats) for n, v in inputs.items()}
    want = traced.eager(eager_inputs)
    outs = [t for t in leaves(want) if isinstance(t, torch.Tensor) and t.requires_grad]
    assert len(result.tangents) == len(outs)
    torch.manual_seed(1)
    tangents = [torch.randn_like(t) for t in outs]
    wrt = [eager_inputs[n] for n in floats] + [module.get_parameter(p) for p in params]
    want_grads = torch.autograd.grad(outs, wrt, tangents, allow_unused=True)

    # the joint graph, by the reference interpreter
    feed = dict(inputs) | dict(zip(result.tangents, tangents))
    with torch.no_grad():
        got, got_grads = run_graph(result.graph, feed, module)
    for g, w in zip(leaves(got), leaves(want)):
        torch.testing.assert_close(g, w.detach(), rtol=1e-4, atol=1e-5)
    assert len(got_grads) == len(wrt)
    for label, g, w in zip(floats + params, got_grads, want_grads):
        if w is None:
            assert g is None, label
        else:
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5, msg=label)


def test_backward_ops_keep_the_line_of_their_forward_op(tmp_path: Path) -> None:
    inputs = {"x": torch.randn(4, 16)}
    traced = trace_source(SOURCE, "MLP", inputs, tmp_path)
    result = joint(traced.graph, ["x", "fc.weight", "fc.bias"])
    names = {n.name for n in traced.graph.nodes}
    backward = [n for n in result.graph.nodes if n.name not in names]
    lines = {n.span.text for n in backward if n.op == "call"}
    # the gradient of each of the three lines (fc, gelu, proj) is computed
    assert lines == {"h = self.fc(x)", 'h = F.gelu(h, approximate="tanh")',
                     "return self.proj(h)"}, lines  # fmt: skip
    grads = result.graph.outputs[1]
    assert all(isinstance(g, Ref) for g in grads)


def test_fallback_code_has_no_backward_yet(tmp_path: Path) -> None:
    source = """
import torch


def with_print(x):
    y = x * 2
    print(y.shape)
    return y.exp()
"""
    traced = trace_source(source, "with_print", {"x": torch.randn(3)}, tmp_path)
    assert any(n.is_fallback for n in traced.graph.nodes)
    with pytest.raises(Unsupported, match="backward of fallback code"):
        joint(traced.graph, ["x"])


# ---------------------------------------------------------------- the partition


@pytest.mark.parametrize("name", CASES, ids=list(CASES))
def test_forward_then_backward_match_eager_autograd(name: str, tmp_path: Path) -> None:
    """The forward run alone, then the backward on what it saved and the output
    gradients: the same outputs and gradients as eager autograd."""
    inputs, init = CASES[name]
    traced = trace_source(_source(name), name, inputs, tmp_path, init)
    module = traced.obj if isinstance(traced.obj, torch.nn.Module) else None
    floats = [n for n, v in inputs.items() if v.is_floating_point()]
    params = [p for p, _ in module.named_parameters()] if module else []
    split = partition(joint(traced.graph, floats + params))

    eager_inputs = {n: v.clone().requires_grad_(n in floats) for n, v in inputs.items()}
    want = traced.eager(eager_inputs)
    outs = [t for t in leaves(want) if isinstance(t, torch.Tensor) and t.requires_grad]
    torch.manual_seed(1)
    tangents = [torch.randn_like(t) for t in outs]
    wrt = [eager_inputs[n] for n in floats] + [module.get_parameter(p) for p in params]
    want_grads = torch.autograd.grad(outs, wrt, tangents, allow_unused=True)

    with torch.no_grad():
        got, saved = run_graph(split.forward, dict(inputs), module)
        feed = dict(zip(split.saved, saved)) | dict(zip(split.tangents, tangents))
        feed |= dict(inputs)  # inputs the backward reads are saved for free
        got_grads = run_graph(split.backward, feed, module)
    for g, w in zip(leaves(got), leaves(want)):
        torch.testing.assert_close(g, w.detach(), rtol=1e-4, atol=1e-5)
    for label, g, w in zip(floats + params, got_grads, want_grads):
        if w is None:
            assert g is None, label
        else:
            torch.testing.assert_close(g, w, rtol=1e-4, atol=1e-5, msg=label)
    backward_reads = {n.name for n in split.backward.nodes}
    assert set(split.saved) <= backward_reads  # nothing saved that is not read


CHAIN = """
import torch


def chain(x, w):
    h = x @ w
    a = torch.sin(h)
    b = torch.cos(a) * a
    return torch.exp(b) + a
"""


def test_a_pointwise_chain_is_recomputed_not_saved(tmp_path: Path) -> None:
    """After the matmul, every value is elementwise: the backward computes them
    again from `h` (saved: the matmul is not recomputed), and saves nothing else
    but the inputs (free) whatever the chain's length."""
    inputs = {"x": torch.randn(8, 16), "w": torch.randn(16, 32)}
    traced = trace_source(CHAIN, "chain", inputs, tmp_path)
    split = partition(joint(traced.graph, ["x", "w"]))
    nodes = {n.name: n for n in split.forward.nodes}
    computed = [s for s in split.saved if nodes[s].op not in ("input", "param")]
    assert [nodes[s].target for s in computed] == ["aten.mm.default"], computed
    assert split.saved_bytes() == 8 * 32 * 4
    recomputed = {n.target for n in split.backward.nodes}
    assert {"aten.sin.default", "aten.cos.default"} <= recomputed
    # what `--explain` lists as computed again: the forward's work, not its views
    backward = {n.name: n for n in split.backward.nodes}
    again = {backward[name].target for name in split.recomputed}
    assert {"aten.sin.default", "aten.cos.default"} <= again
    assert not any(is_view(t) for t in again), again


@pytest.mark.parametrize("name", ["MLP", "Norms", "attention_probs", "Block"])
def test_the_backward_is_made_of_ops_kernels_fuse(name: str, tmp_path: Path) -> None:
    """Decomposed (`BACKWARD_DECOMPOSE`), the backward of a layer norm, softmax or
    GELU is elementwise ops and reductions; what is left whole is matmuls and
    the fused attention's backward (Note [Attention in the joint graph])."""
    inputs, init = CASES[name]
    traced = trace_source(_source(name), name, inputs, tmp_path, init)
    module = traced.obj if isinstance(traced.obj, torch.nn.Module) else None
    params = [p for p, _ in module.named_parameters()] if module else []
    split = partition(joint(traced.graph, [*inputs, *params]))
    whole = {
        n.target
        for n in split.backward.nodes
        if n.op == "call"
        and not (n.target in POINTWISE or n.target in REDUCTIONS or is_view(n.target))
    }
    extern = {"aten.mm.default", "aten.bmm.default", "aten.cat.default"}
    extern.add("aten._scaled_dot_product_flash_attention_for_cpu_backward.default")
    assert whole <= extern, whole
    composite = joint(traced.graph, [*inputs, *params], decomposed=False)
    assert any("_backward" in n.target for n in composite.graph.nodes)


def test_nodes_computed_under_no_grad_are_marked(tmp_path: Path) -> None:
    inputs = CASES["grad_regions"][0]
    graph = trace_source(SOURCE, "grad_regions", inputs, tmp_path).graph
    marked = {n.span.text.strip(): n.grad for n in graph.nodes if n.op == "call"}
    assert marked == {
        "y = x * w": True,
        "s = y.sum()": False,
        "t = y.exp()": True,  # enable_grad inside no_grad
        "z = y.detach() * y": True,
        "return z * s + t, x": True,
    }, marked


RESIDUAL = """
import torch
import torch.nn.functional as F


def residual(x, w1, w2, w3):
    for w in (w1, w2, w3):
        x = x + F.layer_norm(x, (16,)) @ w
    return x
"""


def _residual_split(tmp_path: Path):
    inputs = {"x": torch.randn(8, 16)} | {
        f"w{i}": torch.randn(16, 16) for i in (1, 2, 3)
    }
    traced = trace_source(RESIDUAL, "residual", inputs, tmp_path)
    return partition(joint(traced.graph, ["x", "w1", "w2", "w3"]))


def test_of_equal_cuts_the_nearest_to_the_backward_is_saved(tmp_path: Path) -> None:
    """Three residual layers: saving the stream's sums or the matmuls' outputs
    costs the same bytes. The sums are what each layer norm's backward reads, so
    they are saved and no layer adds up the stream before it again (Note [Save
    or recompute])."""
    split = _residual_split(tmp_path)
    nodes = {n.name: n for n in split.forward.nodes}
    computed = [nodes[s] for s in split.saved if nodes[s].op not in ("input", "param")]
    assert [n.target for n in computed] == ["aten.add.Tensor"] * 2, computed
    assert all(n.tensor_meta.shape == (8, 16) for n in computed)
    sums_again = [
        n.name
        for n in split.backward.nodes
        if n.name in split.recomputed
        and n.target == "aten.add.Tensor"
        and n.tensor_meta.shape == (8, 16)
    ]
    assert not sums_again, sums_again


def test_values_computed_again_come_just_before_their_first_use(
    tmp_path: Path,
) -> None:
    """Each layer norm is computed again where its layer's backward needs it:
    the first layer's after the other layers' matmuls, not at the start of the
    backward, where its values would be alive throughout."""
    split = _residual_split(tmp_path)
    at = {
        kind: [
            i
            for i, n in enumerate(split.backward.nodes)
            if n.target == kind and (kind != VAR_MEAN or n.name in split.recomputed)
        ]
        for kind in (VAR_MEAN, "aten.mm.default")
    }
    norms, mms = at[VAR_MEAN], at["aten.mm.default"]
    assert len(norms) == 3 and len(mms) == 6, split.backward
    assert norms[1] > mms[1] and norms[2] > mms[3], split.backward


VAR_MEAN = "aten.var_mean.dim"
