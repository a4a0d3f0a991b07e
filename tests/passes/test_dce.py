"""dce: values nothing uses are dropped; inputs and used values stay in order."""

from __future__ import annotations

from pathlib import Path

import torch

from tests.compile_helpers import assert_same, trace_source
from transpiler.ir.graph import Graph, Node, Ref, TensorMeta
from transpiler.passes.dce import dce

X = torch.randn(4, 8, generator=torch.Generator().manual_seed(0))

SOURCE = """
import torch


def f(x, unused):
    a = x.exp()
    b = x.relu()
    c = b.sin()
    mean, var = a.mean(-1), b.var(-1)
    return {"c": c, "var": var, "n": 3}
"""


def test_unused_values_are_dropped(tmp_path: Path) -> None:
    inputs = {"x": X, "unused": X}
    result = trace_source(SOURCE, "f", inputs, tmp_path)
    before = result.graph
    after = dce(before)
    after.lint()
    names = [n.name for n in after.nodes]
    assert "exp" in {n.name for n in before.nodes} and "exp" not in names
    assert "mean" in {n.name for n in before.nodes} and "mean" not in names
    # inputs stay (they are the signature), even unused ones; order is kept
    assert [n.name for n in after.nodes if n.op == "input"] == ["x", "unused"]
    order = [n.name for n in before.nodes]
    assert names == sorted(names, key=order.index)
    assert_same(result.run(after, inputs), result.eager(inputs))
    assert_same(result.run(before, inputs), result.eager(inputs))


def test_dead_chains_and_multi_output_nodes(tmp_path: Path) -> None:
    source = (
        "import torch\n\n\ndef f(x):\n"
        "    m, v = torch.var_mean(x, -1)\n"
        "    dead = (x * 2).exp().sum()\n"
        "    return m\n"
    )
    inputs = {"x": X}
    result = trace_source(source, "f", inputs, tmp_path)
    after = dce(result.graph)
    after.lint()
    targets = [n.target for n in after.nodes if n.op == "call"]
    assert targets == ["aten.var_mean.correction", "getitem"], str(after)
    assert_same(result.run(after, inputs), result.eager(inputs))


def test_unused_param_is_dropped() -> None:
    meta = TensorMeta((2,), (1,), 0, torch.float32)
    graph = Graph(
        (
            Node("x", "input", "x", meta=meta),
            Node("w", "param", "w", meta=meta),
            Node("y", "call", "aten.neg.default", (Ref("x"),), meta=meta),
        ),
        Ref("y"),
    )
    assert [n.name for n in dce(graph).nodes] == ["x", "y"]


def test_dce_is_idempotent(tmp_path: Path) -> None:
    graph = trace_source(SOURCE, "f", {"x": X, "unused": X}, tmp_path).graph
    once = dce(graph)
    assert dce(once) == once
