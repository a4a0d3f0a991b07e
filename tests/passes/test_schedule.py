"""schedule: groups become kernels with explicit indexing, ordered with the externs.

Identical kernels (same body, sizes and dtypes) are emitted once and called again;
every wrapper step reads only buffers defined before it.
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
from transpiler.ir.graph import Node, TensorMeta, iter_refs
from transpiler.ir.program import (
    Alloc,
    ExternCall,
    Index,
    Kernel,
    KernelArg,
    KernelCall,
    KernelNames,
    Program,
    Stmt,
    Store,
    body_key,
)
from transpiler.passes.fuse import fuse
from transpiler.passes.schedule import _buffer_stem, readable_params, schedule
from transpiler.pipeline import lower, optimize

pytestmark = [  # masked-off lanes of Triton's interpreter compute 0 / 0 and such
    pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning"),
]

SOURCE = """
import torch


def twice(x, y, b, c):
    return (x + b).relu(), (y + c).relu()


def sharing_a_read(x, y, b):
    return (x + b).relu(), (y + b).relu()


def looped(x, y):
    outs = []
    for t in (x, y):
        outs.append((t * 2).sigmoid())
    return outs


def other_shapes(x, z):
    return (x + 1).relu(), (z + 1).relu()


def around_matmul(x, w):
    h = (x * 2).t()
    return (h @ w).exp()


def softmax(x):
    return torch.softmax(x, -1)


def reshaped_reduction(x):
    return (x + 1).view(6, 4).sum(-1)  # rows of 4 cut through x's rows of 6


def regrouped_reduction(x):
    return (x + 1).view(4, 2, 4).sum(-1)


def reshaped_pointwise(x, v, w):
    y = x + v  # two reads to compute again: the reader reads y
    m = y @ w
    return y.view(8, 8) * m.view(8, 8)


def same_as_twice(x, y, b, c):
    return (x + b).relu(), (y + c).relu()


def returned_and_read(x, w, b):
    y = torch.nn.functional.linear(x, w, b)
    return y, y.relu()
"""

g = torch.Generator().manual_seed(0)
INPUTS = {
    "twice": {
        "x": torch.randn(4, 8, generator=g),
        "y": torch.randn(4, 8, generator=g),
        "b": torch.randn(8, generator=g),
        "c": torch.randn(8, generator=g),
    },
    "sharing_a_read": {
        "x": torch.randn(4, 8, generator=g),
        "y": torch.randn(4, 8, generator=g),
        "b": torch.randn(8, generator=g),
    },
    "looped": {
        "x": torch.randn(4, 8, generator=g),
        "y": torch.randn(4, 8, generator=g),
    },
    "other_shapes": {
        "x": torch.randn(4, 8, generator=g),
        "z": torch.randn(3, 5, generator=g),
    },
    "around_matmul": {  # K = 16: a matmul too long to unroll (small_matmul.py)
        "x": torch.randn(16, 8, generator=g),
        "w": torch.randn(16, 4, generator=g),
    },
    "softmax": {"x": torch.randn(4, 8, generator=g)},
}
INPUTS["reshaped_reduction"] = {"x": torch.randn(4, 6, generator=g)}
INPUTS["regrouped_reduction"] = {"x": torch.randn(4, 8, generator=g)}
INPUTS["reshaped_pointwise"] = {
    "x": torch.randn(4, 16, generator=g),
    "v": torch.randn(4, 16, generator=g),
    "w": torch.randn(16, 16, generator=g),
}
INPUTS["same_as_twice"] = INPUTS["twice"]
INPUTS["returned_and_read"] = {
    "x": torch.randn(2, 4, 8, generator=g),
    "w": torch.randn(6, 8, generator=g),
    "b": torch.randn(6, generator=g),
}


def program(name: str, tmp_path: Path, names: KernelNames | None = None) -> Program:
    graph = optimize(trace_source(SOURCE, name, INPUTS[name], tmp_path).graph)
    return lower(graph, names or KernelNames())


def calls(p: Program) -> list[KernelCall]:
    return [s for s in p.steps if isinstance(s, KernelCall)]


def test_identical_kernels_are_emitted_once(tmp_path: Path) -> None:
    p = program("twice", tmp_path)
    assert [k.name for k in p.kernels] == ["fused_add_relu_0"]
    steps = calls(p)
    assert [s.kernel for s in steps] == ["fused_add_relu_0"] * 2
    assert steps[0].args != steps[1].args
    assert steps[0].args[0] == "x" and steps[1].args[0] == "y"


def test_siblings_reading_one_buffer_share_a_kernel(tmp_path: Path) -> None:
    p = program("sharing_a_read", tmp_path)
    (step,) = calls(p)
    assert step.args == ("x", "b", "y", "relu", "relu_1")


def test_unrolled_loop_reuses_its_kernel(tmp_path: Path) -> None:
    p = program("looped", tmp_path)
    assert len(p.kernels) == 1
    assert len(calls(p)) == 2


def test_other_shapes_get_other_kernels(tmp_path: Path) -> None:
    p = program("other_shapes", tmp_path)
    assert [k.name for k in p.kernels] == ["fused_add_relu_0", "fused_add_relu_1"]
    assert [(k.xnumel, k.rnumel) for k in p.kernels] == [(32, 1), (15, 1)]


def test_kernel_names_are_shared_across_programs(tmp_path: Path) -> None:
    names = KernelNames()
    first = program("twice", tmp_path, names)
    second = program("same_as_twice", tmp_path, names)
    assert [k.name for k in first.kernels] == ["fused_add_relu_0"]
    # each program has every kernel it calls (the passes over programs read
    # them); the module writes a kernel once, as the first program has it
    assert [k.name for k in second.kernels] == ["fused_add_relu_0"]
    assert body_key(second.kernels[0]) == body_key(first.kernels[0])
    assert {s.kernel for s in calls(second)} == {"fused_add_relu_0"}


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_steps_read_only_defined_buffers(name: str, tmp_path: Path) -> None:
    p = program(name, tmp_path)
    defined = set(p.inputs) | {n for n, _ in p.params}
    kernels = {k.name: k for k in p.kernels}
    seen_kernels: set[str] = set()
    for step in p.steps:
        if isinstance(step, Alloc):
            defined.add(step.buffer)
        elif isinstance(step, KernelCall):
            seen_kernels.add(step.kernel)
            assert all(a in defined for a in step.args), (step, defined)
        else:
            assert isinstance(step, ExternCall)
            assert all(r.name in defined for r in iter_refs((step.args, step.kwargs)))
            defined.add(step.out)
    assert all(r.name in defined for r in iter_refs(p.outputs))
    assert set(kernels) <= seen_kernels  # no kernel is emitted and never called


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_kernel_bodies_are_well_formed(name: str, tmp_path: Path) -> None:
    for k in program(name, tmp_path).kernels:
        params = {a.param for a in k.inputs}
        outs = {a.param for a in k.outputs}
        defined: set[str] = set()
        for s in k.body:
            if isinstance(s, Stmt):
                if s.op == "load":
                    assert s.args[0] in params
                else:
                    used = [a for a in s.args if isinstance(a, str)]
                    assert all(a in defined for a in used), s
                assert s.name not in defined
                defined.add(s.name)
            else:
                assert isinstance(s, Store) and s.buffer in outs
                assert s.value in defined
        assert {s.buffer for s in k.body if isinstance(s, Store)} == outs
        assert k.spans, k.name  # every kernel names the source lines it computes


def test_reduction_kernel_iterates_rows(tmp_path: Path) -> None:
    (k,) = program("softmax", tmp_path).kernels
    assert k.name == "fused_softmax_0"
    assert (k.xnumel, k.rnumel) == (4, 8) and k.is_reduction
    reduces = [s.reduce for s in k.body if isinstance(s, Stmt) and s.op == "reduce"]
    assert reduces == ["max", "sum"]


def test_extern_calls_stay_in_order_between_kernels(tmp_path: Path) -> None:
    p = program("around_matmul", tmp_path)
    kinds = [
        type(s).__name__ if not isinstance(s, ExternCall) else s.target
        for s in p.steps
        if not isinstance(s, Alloc)
    ]
    assert kinds == ["KernelCall", "aten.t.default", "aten.mm.default", "KernelCall"]
    views = [s for s in p.steps if isinstance(s, ExternCall) and s.is_view]
    assert [v.target for v in views] == ["aten.t.default"]


def test_broadcast_operand_is_indexed_not_copied(tmp_path: Path) -> None:
    (k,) = program("twice", tmp_path).kernels
    loads = [s for s in k.body if isinstance(s, Stmt) and s.op == "load"]
    bias = next(s for s in loads if s.args[0] == k.inputs[1].param)
    (term,) = bias.args[1].terms
    assert (term.var, term.div, term.mod, term.stride) == ("x", 1, 8, 1)


@pytest.mark.parametrize("name", ["reshaped_reduction", "reshaped_pointwise"])
def test_reshape_of_another_kernels_value_is_read_in_its_own_shape(
    name: str, tmp_path: Path
) -> None:
    """`(x + 1).view(4, 2, 4)` read by another kernel: row-major over the view."""
    p = program(name, tmp_path)
    reader = p.kernels[-1]
    load = next(
        s
        for s in reader.body
        if isinstance(s, Stmt) and s.op == "load" and s.args[0] == "add_ptr"
    )
    assert next(a.buffer for a in reader.inputs if a.param == "add_ptr") == "add"
    # flat element i of the view is element i of the buffer
    terms = [(t.var, t.div, t.mod, t.stride) for t in load.args[1].terms]
    if reader.rnumel > 1:
        assert terms == [("x", 1, 6, 4), ("r", 1, 4, 1)], load
    else:
        assert terms == [("x", 1, 64, 1)], load


def test_reshape_into_rows_that_divide_its_rows_is_one_kernel(tmp_path: Path) -> None:
    """`(x + 1).view(4, 2, 4).sum(-1)` of a [4, 8] x: rows of 4 cut each row of x
    in two (fuse.splits), so `x + 1` is computed in the reduction's kernel, x's
    dimension 1 read half within the row, half from one row to the next."""
    p = program("regrouped_reduction", tmp_path)
    (kernel,) = p.kernels
    (load,) = [s for s in kernel.body if isinstance(s, Stmt) and s.op == "load"]
    terms = [(t.var, t.div, t.mod, t.stride) for t in load.args[1].terms]
    assert sorted(terms) == [("r", 1, 4, 1), ("x", 1, 8, 4)], load


def test_program_printout_is_deterministic(tmp_path: Path) -> None:
    graph = optimize(trace_source(SOURCE, "twice", INPUTS["twice"], tmp_path).graph)
    fusion = fuse(graph)
    first = str(schedule(graph, fusion, KernelNames()))
    assert first == str(schedule(graph, fuse(graph), KernelNames()))
    assert first.splitlines()[0] == (
        "kernel fused_add_relu_0(x_ptr, b_ptr, out_ptr) xnumel=32 rnumel=1:"
    )
    assert "fused_add_relu_0(x, b, relu)" in first
    assert "fused_add_relu_0(y, c, relu_1)" in first


# ---- compiled: one kernel, called twice, in the generated module ------------------


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Compiled]:
    return compile_source(SOURCE, INPUTS, tmp_path_factory.mktemp("schedule"))


def test_generated_module_defines_each_kernel_once(
    compiled: dict[str, Compiled],
) -> None:
    c = compiled["twice"]
    assert c.cpp_text.count('extern "C" void cpp_fused_add_relu_0(') == 1
    assert c.triton_text.count("def triton_fused_add_relu_0(") == 1
    assert c.cpu_source.count('_cpp.function("cpp_fused_add_relu_0"') == 2
    assert c.cuda_source.count("triton_fused_add_relu_0[") == 2
    # the second function with the same body calls the same kernel
    same = compiled["same_as_twice"].cpu_source
    assert '_cpp.function("cpp_fused_add_relu_0"' in same


@pytest.mark.parametrize("name", sorted(INPUTS))
def test_compiled_matches_eager(name: str, compiled: dict[str, Compiled]) -> None:
    want = compiled[name].eager(**INPUTS[name])
    assert_same(compiled[name].cpu(**INPUTS[name]), want, 1e-5, 1e-5)
    assert_same(compiled[name].cuda(**INPUTS[name]), want, 1e-5, 1e-5)


def test_a_kernel_reading_a_returned_view_of_its_own_value(tmp_path: Path) -> None:
    """`y` is the bias add's value viewed back to 3D: returned (so the wrapper makes
    the view) and read by the relu in the same kernel, which needs no view."""
    c = compile_source(
        SOURCE, {"returned_and_read": INPUTS["returned_and_read"]}, tmp_path
    )
    c = c["returned_and_read"]
    args = INPUTS["returned_and_read"]
    assert_same(c.cpu(**args), c.eager(**args))
    assert_same(c.cuda(**args), c.eager(**args))


# ---- kernel parameters: named after what they carry -------------------------------


def _node(op: str, name: str, target: str) -> Node:
    return Node(name, op, target, meta=TensorMeta((4,), (1,), 0, torch.float32))


@pytest.mark.parametrize(
    ("node", "stem"),
    [
        (_node("input", "x", "x"), "x"),
        (_node("param", "h_0_ln_1_weight", "h.0.ln_1.weight"), "ln_1_weight"),
        (_node("param", "weight", "weight"), "weight"),
        (_node("param", "p", "blocks.3.attn.0.bias"), "attn_bias"),
        (_node("call", "native_layer_norm_3_0", "aten.x.default"), "native_layer_norm"),
        (_node("call", "linear", "aten.linear.default"), "linear"),
        (_node("input", "é", "é"), "buf"),  # ASCII only: C++ reads it too
        (_node("input", "données", "données"), "donnes"),
        (_node("param", "p", "layers.0.1"), "layers"),
    ],
)
def test_buffer_stems(node: Node, stem: str) -> None:
    assert _buffer_stem(node) == stem


def test_a_shared_kernel_is_named_after_its_first_launch(tmp_path: Path) -> None:
    """`(x + b).relu()` and `(y + c).relu()` launch one kernel: its parameters are
    named after the first launch's buffers, and its loads and stores use them."""
    p = program("twice", tmp_path)
    (k,) = p.kernels
    assert [a.param for a in k.inputs + k.outputs] == ["x_ptr", "b_ptr", "out_ptr"]
    loaded = {s.args[0] for s in k.body if isinstance(s, Stmt) and s.op == "load"}
    stored = {s.buffer for s in k.body if isinstance(s, Store)}
    assert (loaded, stored) == ({"x_ptr", "b_ptr"}, {"out_ptr"})
    assert [c.args for c in calls(p)] == [("x", "b", "relu"), ("y", "c", "relu_1")]


def test_a_stem_taken_twice_is_numbered() -> None:
    meta = TensorMeta((4,), (1,), 0, torch.float32)
    nodes = {
        "add": Node("add", "call", "aten.add.Tensor", meta=meta),
        "add_1": Node("add_1", "call", "aten.add.Tensor", meta=meta),
        "a": Node("a", "input", "a", meta=meta),
    }
    args = [KernelArg(f"in_ptr{i}", b, torch.float32) for i, b in enumerate(nodes)]
    body = tuple(
        Stmt(f"tmp{i}", "load", (a.param, Index(0, ())), torch.float32, "x")
        for i, a in enumerate(args)
    )
    k = Kernel("k", 4, 1, tuple(args), (), body, ())
    named = readable_params(k, nodes)
    # `a_ptr` is a matmul kernel's own operand: the input `a` gets another name
    assert [a.param for a in named.inputs] == ["add_ptr", "add_1_ptr", "a_1_ptr"]
    assert [s.args[0] for s in named.body] == ["add_ptr", "add_1_ptr", "a_1_ptr"]
