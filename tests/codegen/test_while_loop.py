"""`while` on tensor data: a Python loop around a body compiled once (LoopBody).

Each case runs the generated CPU (C++) and Triton-interpreter variants against eager
PyTorch (`Compiled.check`: outputs and inputs after the call) on inputs that take
zero, one and several iterations.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.compile_helpers import Compiled, compile_source

SOURCE = """
import torch


def halve(x):
    y = x * 1.5
    while y.abs().max() > 1:
        y = y / 2
    return y + 1


def two_carried(x, n):
    while n.sum() > 0:
        x = x * 2
        n = n - 1
    return x, n


def grows(x):
    while x.sum() < 10:
        x = torch.cat([x, x])
    return x


def counts_in_python(x):
    steps = 0
    while x.max() > 1:
        x = x / 2
        steps += 1
    return x
"""

X = torch.randn(4, 8)
INPUTS = {
    "halve": {"x": X},
    "two_carried": {"x": X, "n": torch.tensor([2.0, 1.0])},
    "grows": {"x": torch.ones(2)},
    "counts_in_python": {"x": X},
}


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Compiled]:
    return compile_source(SOURCE, INPUTS, tmp_path_factory.mktemp("while"))


@pytest.mark.parametrize("scale", [0.1, 3.0, 100.0])
def test_loop_matches_eager_for_any_trip_count(
    scale: float, compiled: dict[str, Compiled]
) -> None:
    compiled["halve"].check({"x": X * scale})


def test_loop_is_compiled_not_fallback(compiled: dict[str, Compiled]) -> None:
    c = compiled["halve"]
    assert "while " in c.cpu_source and "_fallback" not in c.cpu_source
    assert "sync: the loop condition reads tensor data" in c.cpu_source
    # one kernel for the body and the next condition: y / 2, |y|, max, > 1
    assert c.cpu_source.count("_cpp.function(") == 3
    # the header counts the loop as what it runs, as --explain does: not an extern
    assert "3 kernels, 0 extern calls" in c.module.__doc__


@pytest.mark.parametrize("n", [[0.0, 0.0], [2.0, 1.0], [3.0, -5.0]])
def test_several_carried_values(n: list[float], compiled: dict[str, Compiled]) -> None:
    compiled["two_carried"].check({"x": X, "n": torch.tensor(n)})


@pytest.mark.parametrize("name", ["grows", "counts_in_python"])
def test_loops_that_cannot_be_compiled_run_eagerly(
    name: str, compiled: dict[str, Compiled], tmp_path: Path
) -> None:
    """A loop changing shapes, or a Python counter, is fallback code: still right."""
    c = compiled[name]
    assert "_fallback_" in c.cpu_source
    c.check(INPUTS[name])
