"""fuse: which nodes share a kernel, and which values are stored to memory.

Structure is checked on the `Fusion` of optimized graphs; every graph here is also
compiled through both backends (one build for the file) and compared with eager, so a
wrong fusion decision shows up as wrong numbers too.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.compile_helpers import (
    Compiled,
    assert_same,
    compile_source,
    trace_source,
)
from transpiler.ir.graph import Graph
from transpiler.passes.fuse import Fusion, fuse, resolve
from transpiler.pipeline import optimize

pytestmark = [  # masked-off lanes of Triton's interpreter compute 0 / 0 and such
    pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning"),
]

SOURCE = """
import torch
import torch.nn.functional as F


def softmax(x):
    return torch.softmax(x, -1)


def softmax_bf16(x):
    return torch.softmax(x, -1)


def layer_norm_residual(x, w, b, r):
    return F.layer_norm(x, (x.shape[-1],), w, b) + r


def transposed_view(x):
    y = x + 1
    return y.t() * 2


def contiguous_reshape(x):
    y = x + 1
    return y.reshape(-1) * 2


def read_back(x):
    a = x + 1
    b = a.t().contiguous()
    return b.t() + a


def matmul_between(x, w):
    p = torch.softmax(x, -1)
    m = p @ w
    return m + p


def reduce_then_broadcast(x):
    s = x.exp().sum(-1, keepdim=True)
    return x * s - x.amax(-1, keepdim=True)


def two_reductions_chain(x):
    c = x - x.mean(-1, keepdim=True)
    return c / (c * c).mean(-1, keepdim=True).sqrt()


def non_trailing_reduction(x):
    return (x + 1).sum(0) * 2


def gelu_tanh(x):
    return F.gelu(x, approximate="tanh")


def outputs_two(x):
    y = x.exp()
    return y, y.sum(-1)


def crossed_reads(a, b):
    return torch.lerp(a, b, 0.4)  # bf16: each of two kernels reads the other's cast


def row_max_unsqueezed(x):
    return torch.exp(x - x.amax(-1)[:, None]).sum(-1)


def row_sum_reshaped(x):
    return (x * x.sum(-1).reshape(4, 8, 1)).amax(-1)


def row_max_as_a_row(x):
    return (x - x.amax(1, keepdim=True).view(1, 8)).sum(1)
"""

g = torch.Generator().manual_seed(0)
X = torch.randn(6, 40, generator=g)
INPUTS = {
    "softmax": {"x": X},
    "softmax_bf16": {"x": X.to(torch.bfloat16)},
    "layer_norm_residual": {
        "x": X,
        "w": torch.randn(40, generator=g),
        "b": torch.randn(40, generator=g),
        "r": torch.randn(6, 40, generator=g),
    },
    "transposed_view": {"x": X},
    "contiguous_reshape": {"x": X},
    "read_back": {"x": torch.randn(8, 8, generator=g)},
    "matmul_between": {
        "x": torch.randn(8, 8, generator=g),
        "w": torch.randn(8, 8, generator=g),
    },
    "reduce_then_broadcast": {"x": X},
    "two_reductions_chain": {"x": X},
    "non_trailing_reduction": {"x": X},
    "gelu_tanh": {"x": X},
    "outputs_two": {"x": X},
    "crossed_reads": {
        "a": torch.randn(8, generator=g).bfloat16(),
        "b": torch.randn(8, generator=g).bfloat16(),
    },
    "row_max_unsqueezed": {"x": X},
    "row_sum_reshaped": {"x": torch.randn(4, 8, 16, generator=g)},
    "row_max_as_a_row": {"x": torch.randn(8, 8, generator=g)},
}


def fused(name: str, tmp_path: Path) -> tuple[Graph, Fusion]:
    graph = optimize(trace_source(SOURCE, name, INPUTS[name], tmp_path).graph)
    return graph, fuse(graph)


def members(fusion: Fusion, graph: Graph, target: str) -> set[int]:
    return {fusion.group_of[n.name] for n in graph.nodes if n.target == target}


def test_softmax_is_one_reduction_group(tmp_path: Path) -> None:
    graph, fusion = fused("softmax", tmp_path)
    assert len(fusion.groups) == 1
    (group,) = fusion.groups
    assert (group.rows, group.rnumel) == (6, 40)
    targets = {graph.by_name()[n].target for n in group.nodes}
    assert {
        "aten.amax.default",
        "aten.exp.default",
        "aten.sum.dim_IntList",
        "aten.div.Tensor",
    } <= targets
    assert len(fusion.realized) == 1  # only the result is stored


def test_layer_norm_and_residual_add_are_one_group(tmp_path: Path) -> None:
    graph, fusion = fused("layer_norm_residual", tmp_path)
    assert len(fusion.groups) == 1, fusion.groups
    last = graph.by_name()[graph.outputs.name]
    assert last.target == "aten.add.Tensor"
    assert fusion.group_of[last.name] == 0
    assert fusion.realized == {last.name}


def test_transposed_view_of_a_fused_value_is_computed_where_it_is_read(
    tmp_path: Path,
) -> None:
    """`(x + 1).t() * 2`: the sum is computed at the transposed positions the
    product reads (Note [Places] in passes/places.py), never written."""
    graph, fusion = fused("transposed_view", tmp_path)
    nodes = graph.by_name()
    assert fusion.kinds["t"] == "view"
    assert fusion.kinds["add"] == "inline"
    assert len(fusion.groups) == 1
    assert fusion.realized == {graph.outputs.name}
    how, via, root = resolve(nodes["mul"].args[0], nodes, fusion.kinds)
    assert (how, via, root) == ("inline", "t", "add")


def test_contiguous_reshape_of_a_fused_value_stays_in_registers(tmp_path: Path) -> None:
    graph, fusion = fused("contiguous_reshape", tmp_path)
    assert len(fusion.groups) == 1
    assert fusion.realized == {graph.outputs.name}


def test_reduction_over_leading_dim_is_one_group_in_its_order(tmp_path: Path) -> None:
    """(x + 1).sum(0) * 2 of an [R, C] x: C rows of R elements, enumerated kept
    dimension first (Note [Reduction order]), prologue and epilogue included."""
    graph, fusion = fused("non_trailing_reduction", tmp_path)
    (group,) = fusion.groups
    rows, cols = INPUTS["non_trailing_reduction"]["x"].shape
    assert (group.rows, group.rnumel, group.order) == (cols, rows, (1, 0))
    assert fusion.realized == {graph.outputs.name}


def test_multi_output_reduction_items_join_its_group(tmp_path: Path) -> None:
    graph, fusion = fused("layer_norm_residual", tmp_path)
    items = [n.name for n in graph.nodes if n.target == "getitem"]
    assert items and all(fusion.kinds[i] == "item" for i in items)
    assert {fusion.group_of[i] for i in items} == {0}


def test_value_used_outside_and_inside_is_realized_once(tmp_path: Path) -> None:
    graph, fusion = fused("outputs_two", tmp_path)
    assert len(fusion.groups) == 1
    exp = next(n.name for n in graph.nodes if n.target == "aten.exp.default")
    assert exp in fusion.realized


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_no_group_reads_back_what_it_writes(name: str, tmp_path: Path) -> None:
    graph, fusion = fused(name, tmp_path)
    nodes = graph.by_name()
    ancestors: dict[str, set[str]] = {}
    for n in graph.nodes:
        ancestors[n.name] = set()
        for r in n.refs():
            ancestors[n.name] |= {r.name} | ancestors[r.name]
    for group in fusion.groups:
        mine = set(group.nodes)
        for name_ in group.nodes:
            for r in nodes[name_].refs():
                how, _, root = resolve(r, nodes, fusion.kinds)
                if how == "virtual" and root in mine:
                    continue  # in registers
                assert root not in mine and not (ancestors[root] & mine), (
                    f"{name_} in group {group.id} reads {root} from memory, "
                    f"which this kernel computes"
                )
    # no two kernels read each other's values, directly or through others
    reads_from = {group.id: set() for group in fusion.groups}
    for n in graph.nodes:
        for r in n.refs():
            root = resolve(r, nodes, fusion.kinds)[2]
            here, there = fusion.group_of.get(n.name), fusion.group_of.get(root)
            if None not in (here, there) and here != there:
                reads_from[here].add(there)
    for start in reads_from:
        seen, todo = set(), list(reads_from[start])
        while todo:
            gid = todo.pop()
            assert gid != start, f"kernels read each other's values: {start}, {gid}"
            if gid not in seen:
                seen.add(gid)
                todo += reads_from[gid]
    # and every value read from another kernel is stored by it
    for n in graph.nodes:
        for r in n.refs():
            how, _, root = resolve(r, nodes, fusion.kinds)
            if (
                root in fusion.group_of
                and fusion.group_of.get(n.name) != (fusion.group_of[root])
                and fusion.kinds[n.name] != "view"
            ):
                assert root in fusion.realized, (n.name, root)


def test_groups_are_in_graph_order(tmp_path: Path) -> None:
    graph, fusion = fused("two_reductions_chain", tmp_path)
    order = [n.name for n in graph.nodes]
    for group in fusion.groups:
        assert list(group.nodes) == sorted(group.nodes, key=order.index)
    assert len(fusion.groups) == 1, fusion.groups


def test_sibling_pointwise_ops_share_a_kernel(tmp_path: Path) -> None:
    _, fusion = fused("gelu_tanh", tmp_path)
    assert len(fusion.groups) == 1, fusion.groups


@pytest.mark.parametrize(
    "name, groups",
    [("row_max_unsqueezed", 1), ("row_sum_reshaped", 1), ("row_max_as_a_row", 2)],
)
def test_row_results_read_through_views(name: str, groups: int, tmp_path: Path) -> None:
    """A row's result read back per element of the row through a view of the
    same flat order joins the row's kernel where the view broadcasts it along
    the row (`m[:, None]`, a reshape to (..., 1)); laid out as a row of its own
    (`m.view(1, n)`), element j of each row reads the result of row j, which the
    row's kernel does not hold: a second kernel reads it from memory."""
    _, fusion = fused(name, tmp_path)
    assert len(fusion.groups) == groups, fusion.groups


# ---- the same graphs, compiled: fusion decisions give eager's numbers -------------


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Compiled]:
    return compile_source(SOURCE, INPUTS, tmp_path_factory.mktemp("fuse"))


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_compiled_matches_eager(name: str, compiled: dict[str, Compiled]) -> None:
    inputs = INPUTS[name]
    eager = compiled[name].eager
    want = eager(**inputs)
    tol = (1e-4, 1e-5)
    if name.endswith("bf16"):  # against f32 eager on the same (bf16) inputs
        tol = (2e-2, 2e-2)
        want = eager(**{k: v.float() for k, v in inputs.items()}).to(torch.bfloat16)
    assert_same(compiled[name].cpu(**inputs), want, *tol)
    assert_same(compiled[name].cuda(**inputs), want, *tol)


BITS_OF_FLOATS = """
import torch


def bits_of_floats(x):
    return torch.bitwise_left_shift(x, 1) + torch.bitwise_and(x, 1)
"""


def test_integer_ops_on_floats_stay_extern_calls(tmp_path: Path) -> None:
    """Eager raises for `<<` and `&` of floats, where these overloads' meta kernels
    return a float: they stay extern calls, which raise as eager does, rather than
    kernels of operators floats do not have (ir.ops.INTEGER_ONLY)."""
    result = trace_source(BITS_OF_FLOATS, "bits_of_floats", {"x": X}, tmp_path)
    graph = optimize(result.graph)
    kinds = fuse(graph).kinds
    integer_ops = [n for n in graph.nodes if "bitwise" in n.target]
    assert len(integer_ops) == 2, str(graph)
    assert all(kinds[n.name] == "extern" for n in integer_ops), str(graph)
    with pytest.raises(RuntimeError, match="not implemented for 'Float'"):
        result.run(graph, {"x": X})
