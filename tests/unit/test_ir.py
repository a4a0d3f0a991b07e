"""The graph IR: printing, lint, metadata helpers."""

from __future__ import annotations

import pytest
import torch

from runtime_shim.modules import self_path
from transpiler.ir.graph import (
    DEVICE,
    Graph,
    Node,
    Ref,
    Span,
    TensorMeta,
    contiguous_strides,
    iter_refs,
    map_refs,
)

F32 = torch.float32
M24 = TensorMeta((2, 4), (4, 1), 0, F32)
SPAN = Span("model.py", 7, "return (a + b).relu()")


def small_graph() -> Graph:
    return Graph(
        (
            Node("a", "input", "a", meta=M24),
            Node("w", "param", "fc.weight", meta=TensorMeta((4,), (1,), 0, F32)),
            Node(
                "add",
                "call",
                "aten.add.Tensor",
                (Ref("a"), Ref("w")),
                meta=M24,
                span=SPAN,
            ),
            Node(
                "relu", "call", "aten.relu.default", (Ref("add"),), meta=M24, span=SPAN
            ),
            Node(
                "t",
                "call",
                "aten.t.default",
                (Ref("relu"),),
                meta=TensorMeta((4, 2), (1, 4), 0, F32),
                span=SPAN,
            ),
            Node(
                "full",
                "call",
                "aten.full.default",
                ([2], 0.5),
                (("dtype", torch.bfloat16), ("device", DEVICE)),
                meta=TensorMeta((2,), (1,), 0, torch.bfloat16),
            ),
        ),
        {"out": (Ref("t"), [Ref("relu"), 3]), "full": Ref("full")},
    )


GOLDEN = """\
a: float32[2,4] = input('a')
w: float32[4] = param('fc.weight')
add: float32[2,4] = aten.add.Tensor(a, w)  # model.py:7
relu: float32[2,4] = aten.relu.default(add)  # model.py:7
t: float32[4,2] stride=(1, 4) = aten.t.default(relu)  # model.py:7
full: bfloat16[2] = aten.full.default([2], 0.5, dtype=torch.bfloat16, device=device)
return {'out': (t, [relu, 3]), 'full': full}"""


def test_graph_prints_stably() -> None:
    assert str(small_graph()) == GOLDEN
    assert str(small_graph()) == str(small_graph())


def test_meta_prints_layout_only_when_not_contiguous() -> None:
    assert str(M24) == "float32[2,4]"
    assert str(TensorMeta((), (), 0, F32)) == "float32[]"
    assert str(TensorMeta((4,), (1,), 3, torch.int64)) == "int64[4] offset=3"
    assert str(TensorMeta((2, 4), (1, 2), 0, F32)) == "float32[2,4] stride=(1, 2)"


def test_multi_output_node_prints_each_meta() -> None:
    node = Node(
        "vm",
        "call",
        "aten.var_mean.correction",
        (Ref("x"), [1]),
        meta=(TensorMeta((2,), (1,), 0, F32),) * 2,
    )
    assert str(node) == (
        "vm: (float32[2], float32[2]) = aten.var_mean.correction(x, [1])"
    )


def test_lint_accepts_a_well_formed_graph() -> None:
    small_graph().lint()


def test_lint_catches_use_before_def() -> None:
    g = small_graph()
    nodes = list(g.nodes)
    nodes[2], nodes[3] = nodes[3], nodes[2]  # relu before the add it reads
    with pytest.raises(AssertionError, match="relu uses add before it is defined"):
        g.with_nodes(nodes).lint()


def test_lint_catches_undefined_name() -> None:
    g = small_graph()
    bad = Node("neg", "call", "aten.neg.default", (Ref("nope"),), meta=M24)
    with pytest.raises(AssertionError, match="neg uses nope"):
        g.with_nodes([*g.nodes, bad]).lint()


def test_lint_catches_duplicate_names() -> None:
    g = small_graph()
    dup = Node("relu", "call", "aten.neg.default", (Ref("a"),), meta=M24)
    with pytest.raises(AssertionError, match="duplicate node name relu"):
        g.with_nodes([*g.nodes, dup]).lint()


def test_lint_catches_undefined_output_and_missing_meta() -> None:
    g = small_graph()
    with pytest.raises(AssertionError, match="output uses undefined gone"):
        g.with_nodes(g.nodes, outputs=[Ref("gone")]).lint()
    no_meta = Node("neg", "call", "aten.neg.default", (Ref("a"),))
    with pytest.raises(AssertionError, match="neg has no meta"):
        g.with_nodes([*g.nodes, no_meta]).lint()
    bad_op = Node("neg", "weird", "aten.neg.default", (Ref("a"),), meta=M24)
    with pytest.raises(AssertionError):
        g.with_nodes([*g.nodes, bad_op]).lint()


def test_users_include_the_output() -> None:
    users = small_graph().users()
    assert users["add"] == ["relu"]
    assert users["relu"] == ["t", "<output>"]
    assert users["a"] == ["add"] and users["full"] == ["<output>"]


def test_refs_are_found_and_mapped_in_nested_values() -> None:
    value = {"k": (Ref("a"), [1, Ref("b")]), "n": None}
    assert [r.name for r in iter_refs(value)] == ["a", "b"]
    mapped = map_refs(value, lambda r: r.name.upper())
    assert mapped == {"k": ("A", [1, "B"]), "n": None}
    assert isinstance(mapped["k"], tuple) and isinstance(mapped["k"][1], list)


@pytest.mark.parametrize(
    "shape, strides",
    [
        ((), ()),
        ((5,), (1,)),
        ((2, 3, 4), (12, 4, 1)),
        ((2, 0, 4), (4, 4, 1)),  # zero-size dims count as 1, as torch does
        ((3, 1, 2), (2, 2, 1)),
    ],
)
def test_contiguous_strides(shape, strides) -> None:
    assert contiguous_strides(shape) == strides
    assert contiguous_strides(shape) == torch.empty(shape).stride()


def test_tensor_meta_of() -> None:
    base = torch.empty(3, 4, dtype=torch.float64, device="meta")
    assert TensorMeta.of(base) == TensorMeta((3, 4), (4, 1), 0, torch.float64)
    view = base.t()[1:]
    meta = TensorMeta.of(view)
    assert meta == TensorMeta((3, 3), (1, 4), 1, torch.float64)
    assert not meta.is_contiguous() and meta.numel == 9
    assert TensorMeta.of(torch.zeros(2, 1, 3)[:, :, 1:]).offset == 1
    assert TensorMeta.of(torch.tensor(1.0)) == TensorMeta((), (), 0, F32)


def test_single_element_is_contiguous_whatever_its_strides() -> None:
    assert TensorMeta((1, 1), (7, 3), 0, F32).is_contiguous()
    assert TensorMeta((), (), 0, F32).numel == 1


def test_nodes_and_graphs_are_immutable_values() -> None:
    g = small_graph()
    with pytest.raises(AttributeError):
        g.nodes[0].name = "b"  # type: ignore[misc]
    assert small_graph() == g and hash(g.nodes[2]) == hash(small_graph().nodes[2])


@pytest.mark.parametrize(
    "name, path",
    [
        ("", "self"),
        ("fc", "self.fc"),
        ("blocks.0.attn.c_proj", "self.blocks[0].attn.c_proj"),
        ("layers.my-key.w", "getattr(self.layers, 'my-key').w"),
    ],
)
def test_self_path_is_python(name: str, path: str) -> None:
    assert self_path(name) == path
    compile(path, "<path>", "eval")
