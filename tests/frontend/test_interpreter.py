"""The frontend's abstract interpreter: Python constructs, inlining, guards, spans.

Each traced graph is run by the reference interpreter (`run_graph`) on real inputs
and compared with eager execution of the same source.
"""

from __future__ import annotations

import inspect
import warnings
from pathlib import Path

import pytest
import torch

from tests.compile_helpers import TraceResult, compile_source, trace_source
from tests.helpers import build_pair, check_call
from transpiler.codegen.guards import state_code
from transpiler.ir.graph import Ref, Updated

SOURCE = """
import torch
import torch.nn.functional as F
from torch import nn


def helper(x, scale=2.0, *, shift=1):
    y = x * scale
    return y + shift


def unpack(x, y):
    a, b = x.exp(), y.relu()
    (c, d), e = (a, b), a
    return c + d * e


def starred(x):
    first, *middle, last = x.unbind(0)
    return first + last + middle[0] * len(middle)


def augmented(x, y):
    h = x * 3
    h += y
    h *= 2
    h -= 1
    return h


def keywords(x):
    return helper(x) + helper(x, 0.5, shift=3) + helper(scale=1.5, x=x)


def renamed(old, new):
    # a wrapper that shows the wrapped function's parameters (its __signature__)
    # and reads its own *args and **kwargs, as transformers' deprecate_kwarg does
    def wrapper(fn):
        import functools
        import inspect

        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            if old in kwargs:
                kwargs[new] = kwargs.pop(old)
            return fn(*args, **kwargs)

        wrapped.__signature__ = inspect.signature(fn)
        return wrapped

    return wrapper


@renamed("past", "cache")
def attend(x, cache=None, scale=1.0):
    return x * scale if cache is None else x * scale + cache


def advertised_signature(x):
    return attend(x, past=x.exp(), scale=2.0) + attend(x)


def returns_dict(x):
    return {"exp": x.exp(), "pair": (x.sin(), [x.cos(), 3]), "none": None}


def functional(x, w):
    return F.softmax(F.linear(x, w), dim=-1) + F.relu(x).sum(-1, keepdim=True)


def methods(x):
    return x.transpose(0, 1).contiguous().view(-1).clamp_min(0.0).sqrt()


def static_if(x):
    if x.shape[0] > 2:
        y = x * 2
    elif x.dim() == 1:
        y = x * 3
    else:
        y = x * 4
    return y if x.shape[-1] == 8 else -y


def loops(x):
    for i in range(3):
        x = x + i
    ys = [x * k for k in range(1, 4) if k != 2]
    return ys[0] + ys[1]


def one_liners(x):
    if x.shape[0] == 4: return x + 1  # noqa: E701
    return x


def prints(x):
    y = x + 1
    print(y)
    return y


def tensor_if(x):
    if x.sum() > 0:
        return x
    return -x


def while_loop(x):
    while x.shape[0] > 1:
        x = x[1:]
    return x


def in_place_input(x):
    x += 1
    return x


class Block(nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.fc = nn.Linear(n, n)
        self.scale = 0.5

    def forward(self, x):
        h = self.fc(x)
        return helper(h, self.scale)


class Model(nn.Module):
    def __init__(self, n: int = 8, n_head: int = 4, depth: int = 2):
        super().__init__()
        self.n_head = n_head
        self.use_norm = True
        self.norm = nn.LayerNorm(n)
        self.blocks = nn.ModuleList([Block(n) for _ in range(depth)])
        self.head = nn.Sequential(nn.Linear(n, n), nn.GELU(), nn.Linear(n, 2))

    def forward(self, x, bias=None):
        if self.n_head == 4:
            x = x * 2
        if self.use_norm:
            x = self.norm(x)
        for block in self.blocks:
            x = x + block(x)
        if bias is not None:
            x = x + bias
        if self.training:
            x = F.dropout(x, 0.1)
        return self.head(x)
"""

g = torch.Generator().manual_seed(0)
X = torch.randn(4, 8, generator=g)
Y = torch.randn(4, 8, generator=g)


def traced(name: str, inputs: dict, tmp_path: Path, init=None) -> TraceResult:
    return trace_source(SOURCE, name, inputs, tmp_path, init)


def check(result: TraceResult, inputs: dict) -> None:
    """The traced graph, run by `run_graph`, against eager: outputs, inputs,
    parameters and buffers after the call (`TraceResult.check`)."""
    graph = result.graph
    graph.lint()
    result.check(graph, inputs)


def line_of(text: str) -> int:
    """The line of SOURCE holding `text` (unique)."""
    hits = [i for i, line in enumerate(SOURCE.splitlines(), 1) if text in line]
    assert len(hits) == 1, (text, hits)
    return hits[0]


@pytest.mark.parametrize(
    "name, inputs",
    [
        ("unpack", {"x": X, "y": Y}),
        ("starred", {"x": X}),
        ("augmented", {"x": X, "y": Y}),
        ("keywords", {"x": X}),
        ("advertised_signature", {"x": X}),
        ("returns_dict", {"x": X}),
        ("functional", {"x": X, "w": torch.randn(5, 8, generator=g)}),
        ("methods", {"x": X}),
        ("static_if", {"x": X}),
        ("static_if", {"x": torch.randn(2, 3, generator=g)}),
        ("loops", {"x": X}),
        ("one_liners", {"x": X}),
    ],
)
def test_construct_matches_eager(name: str, inputs: dict, tmp_path: Path) -> None:
    check(traced(name, inputs, tmp_path), inputs)


def test_augmented_assignment_is_functionalized(tmp_path: Path) -> None:
    graph = traced("augmented", {"x": X, "y": Y}, tmp_path).graph
    targets = [n.target for n in graph.nodes if n.op == "call"]
    assert targets == [
        "aten.mul.Tensor",
        "aten.add.Tensor",
        "aten.mul.Tensor",
        "aten.sub.Tensor",
    ]
    assert not any(t.split(".")[1].endswith("_") for t in targets)


def test_in_place_update_of_an_input_is_written_back(tmp_path: Path) -> None:
    """`x += 1` on an input is its functional op, copied into the input at the
    return, which returns the input itself (Note [Writes into the caller's
    tensors])."""
    result = traced("in_place_input", {"x": X}, tmp_path)
    graph = result.graph
    assert not result.traced.stubs
    (add,) = [n for n in graph.nodes if n.target == "aten.add.Tensor"]
    assert add.span.line == line_of("    x += 1")
    assert isinstance(graph.outputs, Updated)
    assert graph.outputs.copies == ((Ref("x"), Ref(add.name)),)
    assert graph.outputs.result == Ref("x")


def test_returned_structure_is_kept(tmp_path: Path) -> None:
    graph = traced("returns_dict", {"x": X}, tmp_path).graph
    out = graph.outputs
    assert list(out) == ["exp", "pair", "none"]
    assert isinstance(out["pair"], tuple) and isinstance(out["pair"][1], list)
    assert out["pair"][1][1] == 3 and out["none"] is None


def test_static_if_records_only_the_taken_branch(tmp_path: Path) -> None:
    graph = traced("static_if", {"x": X}, tmp_path).graph
    muls = [n for n in graph.nodes if n.target == "aten.mul.Tensor"]
    assert [n.args[1] for n in muls] == [2]
    assert not any(n.target == "aten.neg.default" for n in graph.nodes)
    assert muls[0].span.line == line_of("y = x * 2")


def test_loops_are_unrolled(tmp_path: Path) -> None:
    graph = traced("loops", {"x": X}, tmp_path).graph
    adds = [n for n in graph.nodes if n.target == "aten.add.Tensor"]
    assert len(adds) == 4  # three from range(3), one for ys[0] + ys[1]
    muls = [n.args[1] for n in graph.nodes if n.target == "aten.mul.Tensor"]
    assert muls == [1, 3]  # the comprehension's filter dropped k == 2


def test_helper_functions_are_inlined_with_their_spans(tmp_path: Path) -> None:
    result = traced("keywords", {"x": X}, tmp_path)
    graph = result.graph
    lines = {n.span.line for n in graph.nodes if n.op == "call"}
    assert line_of("y = x * scale") in lines
    assert line_of("return y + shift") in lines
    assert all(n.span.file == result.file for n in graph.nodes if n.span)
    scales = [n.args[1] for n in graph.nodes if n.target == "aten.mul.Tensor"]
    assert scales == [2.0, 0.5, 1.5]  # default, positional, keyword


def test_spans_name_file_and_line(tmp_path: Path) -> None:
    result = traced("unpack", {"x": X, "y": Y}, tmp_path)
    by_target = {n.target: n.span for n in result.graph.nodes if n.op == "call"}
    span = by_target["aten.exp.default"]
    assert span.file == result.file
    assert span.line == line_of("a, b = x.exp(), y.relu()")
    assert span.text == "a, b = x.exp(), y.relu()"
    assert str(span) == f"{result.file}:{span.line}"
    assert by_target["aten.add.Tensor"].line == line_of("return c + d * e")


# ---- modules ------------------------------------------------------------------


def test_module_with_submodules_matches_eager(tmp_path: Path) -> None:
    inputs = {"x": X}
    result = traced("Model", inputs, tmp_path)
    check(result, inputs)
    graph = result.graph
    params = {n.target for n in graph.nodes if n.op == "param"}
    assert {
        "norm.weight",
        "blocks.0.fc.weight",
        "blocks.1.fc.bias",
        "head.0.weight",
        "head.2.bias",
    } <= params
    # the user's Block.forward and helper were inlined: their lines are spans
    lines = {n.span.line for n in graph.nodes if n.span}
    assert line_of("h = self.fc(x)") in lines
    assert line_of("y = x * scale") in lines
    # nn layers run under the recorder, attributed to the line calling them
    assert line_of("return self.head(x)") in lines


def guard_texts(result) -> str:
    """What the guards of a traced module check, as `--explain` shows them."""
    code = state_code(result.traced.guards, set())
    return "\n".join(g.text for g in code.guards)


def test_module_attribute_conditions_become_guards(tmp_path: Path) -> None:
    result = traced("Model", {"x": X}, tmp_path)
    guards = guard_texts(result)
    assert "self.n_head == 4" in guards
    assert "self.use_norm" in guards
    assert "self.blocks[0].scale == 0.5" in guards  # valid Python: it is emitted


def test_other_attribute_values_take_other_paths(tmp_path: Path) -> None:
    inputs = {"x": X}
    result = traced("Model", inputs, tmp_path, init={"n_head": 2, "depth": 3})
    check(result, inputs)
    assert "self.n_head == 2" in guard_texts(result)
    graph = result.graph
    assert "blocks.2.fc.weight" in {n.target for n in graph.nodes if n.op == "param"}
    assert not any(
        n.target == "aten.mul.Tensor" and n.args[1] == 2 for n in graph.nodes
    )


def test_optional_tensor_argument(tmp_path: Path) -> None:
    inputs = {"x": X, "bias": torch.randn(2, generator=g)[:1].expand(8).clone()}
    check(traced("Model", inputs, tmp_path), inputs)


def test_module_compiles_end_to_end(tmp_path: Path) -> None:
    """Guards and parameter reads through a ModuleList are emitted as Python (the
    reads through the registration dicts, as `nn.Module.__getattr__` finds them,
    each module looked up once, into a local named after its path)."""
    compiled = compile_source(SOURCE, {"Model": {"x": X}}, tmp_path)["Model"]
    table = inspect.getsource(compiled.module)  # the model's modules, a row each
    assert '("blocks.1", _source.Block, True, {"scale": 0.5})' in table, table
    code = compiled.cpu_source
    for line in (
        'blocks = self._modules["blocks"]',  # two blocks read: bound
        'blocks_0_fc = blocks._modules["0"]._modules["fc"]',  # blocks.0: one read
        'blocks_0_fc_weight = blocks_0_fc._parameters["weight"]',
    ):
        assert f"    {line}\n" in code, code
    compiled.check({"x": X})
    eager, model = build_pair(compiled.eager, compiled.module.Model, {})
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")  # dispatch picks the CPU variant, no fallback
        check_call(model, eager, {"x": X}, where="exported")


# ---- what is not compiled: fallback code with a reason and a span; branches ------


def test_print_becomes_fallback_code(tmp_path: Path) -> None:
    result = traced("prints", {"x": X}, tmp_path)
    (stub,) = result.traced.stubs
    assert stub.source == "print(y)\n" and stub.params == ("y",)
    assert "print" in stub.reason and stub.outputs == ()
    assert stub.span.file == result.file and stub.span.line == line_of("    print(y)")
    calls = [n for n in result.graph.nodes if n.is_fallback]
    assert len(calls) == 1 and calls[0].args == (Ref("add"),)


def test_condition_on_tensor_data_traces_both_branches(tmp_path: Path) -> None:
    result = traced("tensor_if", {"x": X}, tmp_path)
    region = result.traced.region
    assert region.branch is not None
    assert region.branch.span.line == line_of("    if x.sum() > 0:")
    assert [n.target for n in region.branch.if_false.graph.nodes if n.op == "call"] == [
        "aten.neg.default"
    ]


def test_static_while_is_unrolled(tmp_path: Path) -> None:
    result = traced("while_loop", {"x": X}, tmp_path)
    assert result.traced.stubs == () and result.graph is not None
    check(result, {"x": X})
