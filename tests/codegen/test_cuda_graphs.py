"""`cuda_graphs = true`: which cuda variants replay a CUDA graph, and the code for it.

One source holds a target of each kind; all are built with CUDA graphs asked for.
Static variants call `runtime_shim.cuda_graph` at their call site; ones that branch
on tensor data `runtime_shim.cuda_graph_tree`, with a segment function per region
(codegen/graph_segments.py); dynamic ones, ones with graph breaks and ones that loop
on tensor data compile normally, and `--explain` says why. Then the generated module
runs on CPU: the Triton variant in Triton's interpreter, its guards' device check and
the capture replaced (see tests/runtime_shim/test_cuda_graph_runner.py), against
eager over several calls, through every branch, and after a parameter is replaced.
"""

from __future__ import annotations

from types import ModuleType

import pytest
import torch

from runtime_shim.cuda_graphs import ATTRIBUTE, CudaGraphRunner, CudaGraphTree, _tensors
from tests.compile_helpers import import_generated, unique_name
from tests.devices import REAL_GPU
from transpiler.api import build
from transpiler.explain import report
from transpiler.options import Options, Target, TensorSpec, Variant
from transpiler.pipeline import compile_modules

# CPU tensors through the cuda variant: its kernels run in Triton's interpreter.
# On a GPU (tests/devices.py), benchmarks/cuda_graphs_check.py replays them there.
INTERPRETER_ONLY = pytest.mark.skipif(
    REAL_GPU, reason="runs the cuda variant on CPU tensors, in Triton's interpreter"
)

SOURCE = """
import torch
from torch import nn


class Static(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, 8)

    def forward(self, x):
        return torch.relu(self.lin(x)) * 2


def pointwise(x, y):
    return (x + y).relu()


def branches(x):
    if x.sum() > 0:
        return x * 2
    return x - 1


def loops(x):
    while x.abs().max() > 1:
        x = x / 2
    return x


def breaks(x):
    y = x * 2
    print("side effect")
    return y + 1


def dynamic(x):
    return x.relu() * 3


class Toy(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x):
        y = self.linear(x)
        if y.sum() > 0:
            return y.relu()
        return y.tanh()


def nested(x, y):
    a = x * 2
    if a.sum() > 0:
        b = a + y
        if b.mean() > 1:
            return b * a
        return b - 1
    return a - y
"""
F32 = torch.float32
X = (("x", TensorSpec(F32, (4, 8))),)
INPUTS = {
    "Static": X,
    "pointwise": (*X, ("y", TensorSpec(F32, (4, 8)))),
    "branches": X,
    "loops": X,
    "breaks": X,
    "dynamic": (("x", TensorSpec(F32, ("B", 8))),),
    "Toy": X,
    "nested": (*X, ("y", TensorSpec(F32, (4, 8)))),
}
BLOCKERS = {
    "Static": None,
    "pointwise": None,
    "branches": None,
    "loops": "it loops on tensor data (a host sync on every step)",
    "breaks": "it has graph breaks (fallback code runs in Python on every call)",
}


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> tuple[Options, str]:
    root = tmp_path_factory.mktemp("cuda_graphs")
    stem = unique_name("src")
    (root / f"{stem}.py").write_text(SOURCE)
    targets = tuple(
        Target(f"{stem}.py::{name}", (Variant(inputs, "cuda", cuda_graphs=True),))
        for name, inputs in INPUTS.items()
    )
    return Options(targets=targets, root=root), stem


@pytest.fixture(scope="module")
def text(project: tuple[Options, str]) -> str:
    options, stem = project
    return build(options)[f"{stem}.py"]


@pytest.fixture(scope="module")
def generated(project: tuple[Options, str]) -> ModuleType:
    options, stem = project
    return import_generated(build(options), options.root, stem)


def test_which_variants_replay_a_graph(project: tuple[Options, str]) -> None:
    options, _ = project
    (mb,) = compile_modules(options).modules
    got = {t.name: [vc.cuda_graph_off for vc in t.variants] for t in mb.targets}
    assert got == {
        **{name: [why] for name, why in BLOCKERS.items()},
        "dynamic": [
            "its shapes are dynamic (size 1 of B)",
            "its shapes are dynamic (B)",
        ],
        "Toy": [None],
        "nested": [None],
    }
    trees = {t.name for t in mb.targets for vc in t.variants if vc.cuda_graph == "tree"}
    assert trees == {"branches", "Toy", "nested"}


def test_call_sites(text: str) -> None:
    comment = "# CUDA graph: outputs are overwritten by the next call (clone to keep)"
    assert (
        f"        if _guards_cuda_0(self, x) is None:\n"
        f"            {comment}\n"
        f"            return runtime_shim.cuda_graph(self, _cuda_0, _reads_cuda_0)"
        "(self, x)\n"
    ) in text
    assert (
        f"    if _guards_cuda_1(x, y) is None:\n"
        f"        {comment}\n"
        f"        return runtime_shim.cuda_graph(pointwise, _cuda_1)(x, y)\n"
    ) in text
    for name in ("_cuda_3(x)", "_cuda_4(x)", "_cuda_5(x)", "_cuda_6(x)"):
        assert f"        return {name}\n" in text
    assert text.count("runtime_shim.cuda_graph(") == 2
    tree_comment = comment.replace("CUDA graph:", "CUDA graphs:")
    assert (
        f"        if _guards_cuda_7(self, x) is None:\n"
        f"            {tree_comment}\n"
        f"            return runtime_shim.cuda_graph_tree(self, _cuda_7, _reads_cuda_7)"
        "(self, x)\n"
    ) in text
    assert "        return runtime_shim.cuda_graph_tree(branches, _cuda_2)(x)\n" in text
    assert text.count("runtime_shim.cuda_graph_tree(") == 3
    assert (
        "def _reads_cuda_0(self):\n"
        '    """What the CUDA graph of cuda_0 reads in place: moving one re-captures'
        ' it."""\n'
        "    return (\n"
        '        self._modules["lin"]._parameters["weight"],\n'
        '        self._modules["lin"]._parameters["bias"],\n'
        "    )\n"
    ) in text
    assert "def _reads_cuda_1" not in text  # a function reads no parameters


def test_header_says_outputs_are_overwritten(text: str) -> None:
    doc = text.split('"""')[1]
    assert "cuda_0   cuda: x=f32[4,8]" in doc
    assert doc.count(", CUDA graph\n") == 2
    assert doc.count(", CUDA graphs (3 segments)\n") == 2  # branches, Toy
    assert doc.count(", CUDA graphs (5 segments)\n") == 1  # nested
    assert "split at each branch into segments\n(`_cuda_2_seg0`, ...)" in doc
    assert "overwritten by the next call: clone an output to keep it." in doc


def test_explain_says_why(project: tuple[Options, str]) -> None:
    options, _ = project
    lines = report(compile_modules(options), options).splitlines()
    graph_lines = [line.strip() for line in lines if "cuda graph:" in line]
    on = (
        "cuda graph: captured on the first call, then replayed "
        "(outputs are overwritten by the next call)"
    )

    def tree(segments: int) -> str:
        return (
            "cuda graph: one per segment between branches on tensor data "
            f"({segments} segments), each captured on first use, then replayed; the "
            "branches run in Python (outputs are overwritten by the next call)"
        )

    assert graph_lines == [
        on,
        on,
        tree(3),
        *(
            f"cuda graph: off, {why}; compiled without one"
            for why in BLOCKERS.values()
            if why
        ),
        "cuda graph: off, its shapes are dynamic (size 1 of B); compiled without one",
        "cuda graph: off, its shapes are dynamic (B); compiled without one",
        tree(3),
        tree(5),
    ]


def test_no_cuda_graph_unless_asked(project: tuple[Options, str]) -> None:
    options, stem = project
    plain = Options(
        targets=tuple(
            Target(t.source, tuple(Variant(v.inputs, v.device) for v in t.variants))
            for t in options.targets[:3]
        ),
        root=options.root,
    )
    text = build(plain)[f"{stem}.py"]
    assert "cuda_graph" not in text and "CUDA graph" not in text
    assert "        return _cuda_0(self, x)\n" in text
    assert "        return _cuda_2(x)\n" in text
    assert "_seg0" not in text and ".run(" not in text  # one function, nested ifs


class Replayer:
    """Stands in for the capture: the "graph" reruns the variant on the static
    buffers and writes into the static outputs."""

    captures = 0

    def __call__(self, runner: CudaGraphRunner, run):
        self.captures += 1
        outputs = run()

        def replay() -> None:
            for static, fresh in zip(_tensors(outputs), _tensors(run())):
                static.copy_(fresh)

        return outputs, replay


@INTERPRETER_ONLY
def test_generated_module_replays_on_cpu(
    generated: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through the generated `forward`: new data each call, then a new weight."""
    replayer = Replayer()
    monkeypatch.setattr(CudaGraphRunner, "_record", lambda r, run: replayer(r, run))
    # CPU tensors pass the cuda variant's guards here; Triton interprets its kernels
    monkeypatch.setattr(generated, "_guards_cuda_0", lambda self, x: None)
    torch.manual_seed(0)
    eager = generated._source.Static().eval()
    model = generated.Static().eval()
    model.load_state_dict(eager.state_dict())
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        outputs = []
        for _ in range(3):
            x = torch.randn(4, 8, generator=gen)
            out = model(x)
            torch.testing.assert_close(out, eager(x))
            outputs.append(out)
        assert outputs[0] is outputs[1] is outputs[2]  # overwritten each call
        assert replayer.captures == 1
        weight = torch.randn(8, 8, generator=gen)
        eager.lin.weight = torch.nn.Parameter(weight)
        model.lin.weight = torch.nn.Parameter(weight.clone())
        x = torch.randn(4, 8, generator=gen)
        torch.testing.assert_close(model(x), eager(x))
        assert replayer.captures == 2


# ------------------------------------------------- variants that branch on data


def test_a_branching_variant_is_split_into_segments(text: str) -> None:
    """The variant keeps its shape, each straight-line block a segment call."""
    sync = "    # sync: the branch reads tensor data ({}.py:{}: {})\n"
    stem = text.split("from ")[1].split(".")[0]
    assert (
        "def _cuda_7(graphs, self, x):\n"
        '    """Variant cuda_7 as CUDA graphs, one per segment between branches:\n'
        "    `graphs` (runtime_shim.CudaGraphTree) captures each on first use and\n"
        '    then replays it; the branches run here, in Python."""\n'
        "    addmm, gt = graphs.run(_cuda_7_seg0, self, x)\n"
        + sync.format(stem, 48, "if y.sum() > 0:")
        + "    if gt:\n"
        "        return graphs.run(_cuda_7_seg1, self, x, addmm)\n"
        "    else:\n"
        "        return graphs.run(_cuda_7_seg2, self, x, addmm)\n"
    ) in text
    assert (
        "def _cuda_7_seg0(self, x):\n"
        f'    """Segment 0 of cuda_7: from the start, up to {stem}.py:48'
        " (if y.sum() > 0:).\n\n"
        '    Returns what later segments read, then the condition."""\n'
    ) in text
    assert "    return (addmm, gt)\n" in text
    assert (
        "def _cuda_7_seg1(self, x, addmm):\n"
        f'    """Segment 1 of cuda_7: where {stem}.py:48 (if y.sum() > 0:) is '
        'true."""\n'
    ) in text
    assert "def _cuda_7_seg2(self, x, addmm):\n" in text
    # nested branches: each segment takes the inputs, then what it reads of earlier
    # segments; one before a branch returns those values (not the inputs) and its test
    for signature in (
        "def _cuda_8(graphs, x, y):",
        "    mul, gt = graphs.run(_cuda_8_seg0, x, y)",
        "        add, gt_1 = graphs.run(_cuda_8_seg1, x, y, mul)",
        "            return graphs.run(_cuda_8_seg2, x, y, add, mul)",
        "            return graphs.run(_cuda_8_seg3, x, y, add)",
        "        return graphs.run(_cuda_8_seg4, x, y, mul)",
        "def _cuda_2(graphs, x):",
        "    (gt,) = graphs.run(_cuda_2_seg0, x)",
        "def _cuda_2_seg1(x):",
    ):
        assert f"\n{signature}\n" in text
    assert "def _cuda_8_seg0(x, y):\n" in text and "    return (mul, gt)\n" in text
    assert '"""What the CUDA graphs of cuda_7 read in place: moving one' in text


def branch_input(want: bool, decide, shape=(4, 8), seed: int = 0) -> torch.Tensor:
    """The first seeded input from `seed` on for which `decide(x) == want`."""
    while True:
        x = torch.randn(shape, generator=torch.Generator().manual_seed(seed))
        if bool(decide(x)) == want:
            return x
        seed += 1


@INTERPRETER_ONLY
def test_generated_tree_replays_both_branches_on_cpu(
    generated: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ToyModule's shape through the generated `forward`: the branches alternate,
    each segment is captured once, on its first use; a new weight re-captures."""
    replayer = Replayer()
    monkeypatch.setattr(CudaGraphRunner, "_record", lambda r, run: replayer(r, run))
    monkeypatch.setattr(generated, "_guards_cuda_7", lambda self, x: None)
    torch.manual_seed(0)
    eager = generated._source.Toy().eval()
    model = generated.Toy().eval()
    model.load_state_dict(eager.state_dict())
    with torch.no_grad():
        positive = lambda x: eager.linear(x).sum() > 0  # noqa: E731
        inputs = [branch_input(i % 2 == 0, positive, seed=10 * i) for i in range(6)]
        outputs = [model(x) for x in inputs[:1]]
        (tree,) = model.__dict__[ATTRIBUTE].values()
        assert isinstance(tree, CudaGraphTree)
        assert tree.segments == ["_cuda_7_seg0", "_cuda_7_seg1"]  # one path so far
        torch.testing.assert_close(outputs[0], eager(inputs[0]))
        for x in inputs[1:]:
            outputs.append(model(x))
            torch.testing.assert_close(outputs[-1], eager(x))
        assert tree.segments == ["_cuda_7_seg0", "_cuda_7_seg1", "_cuda_7_seg2"]
        assert replayer.captures == tree.captures == 3
        assert all(o is outputs[0] for o in outputs[::2])  # the relu graph's buffer
        assert all(o is outputs[1] for o in outputs[1::2])  # the tanh graph's
        assert outputs[0] is not outputs[1]
        weight = torch.randn(8, 8, generator=torch.Generator().manual_seed(5))
        eager.linear.weight = torch.nn.Parameter(weight)
        model.linear.weight = torch.nn.Parameter(weight.clone())
        x = branch_input(False, positive, seed=99)
        torch.testing.assert_close(model(x), eager(x))
        assert replayer.captures == 5  # every graph goes; two were needed
        assert tree.segments == ["_cuda_7_seg0", "_cuda_7_seg2"]
        assert tree.disabled is None


@INTERPRETER_ONLY
def test_generated_tree_takes_every_path_of_nested_branches(
    generated: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    replayer = Replayer()
    monkeypatch.setattr(CudaGraphRunner, "_record", lambda r, run: replayer(r, run))
    monkeypatch.setattr(generated, "_guards_cuda_8", lambda x, y: None)
    source = generated._source.nested
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(4, 8, generator=gen).abs()
    cases = {  # path -> (x, y)
        "seg2": (x, torch.ones(4, 8)),  # a.sum() > 0, b.mean() > 1
        "seg3": (x, -torch.ones(4, 8) * 5),  # a.sum() > 0, b.mean() <= 1
        "seg4": (-x, torch.randn(4, 8, generator=gen)),  # a.sum() <= 0
    }
    for _ in range(2):
        for x, y in cases.values():
            torch.testing.assert_close(generated.nested(x, y), source(x, y))
    (tree,) = generated.nested.__dict__[ATTRIBUTE].values()
    assert sorted(tree.segments) == [f"_cuda_8_seg{i}" for i in range(5)]
    assert replayer.captures == 5
