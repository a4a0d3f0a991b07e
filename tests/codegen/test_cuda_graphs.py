"""`cuda_graphs = true`: which cuda variants replay a CUDA graph, and the code for it.

One source holds a target of each kind; all are built with CUDA graphs asked for.
Static variants call `runtime_shim.cuda_graph` at their call site; dynamic ones, ones
with graph breaks and ones that branch or loop on tensor data compile normally, and
`--explain` says why. Then the generated module runs on CPU: the Triton variant in
Triton's interpreter, its guards' device check and the capture replaced (see
tests/runtime_shim/test_cuda_graph_runner.py), against eager over several calls and
after a parameter is replaced.
"""

from __future__ import annotations

import importlib
import sys
from types import ModuleType

import pytest
import torch

from runtime_shim.cuda_graphs import CudaGraphRunner, _tensors
from tests.compile_helpers import unique_name
from transpiler.api import build, compile_modules, write
from transpiler.codegen import cuda_graphs
from transpiler.explain import report
from transpiler.options import Options, Target, TensorSpec, Variant

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
}
BLOCKERS = {
    "Static": None,
    "pointwise": None,
    "branches": "it branches on tensor data (a host sync on every call)",
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
    package = unique_name("gen")
    write(build(options), options.root / package)
    if str(options.root) not in sys.path:
        sys.path.insert(0, str(options.root))
    importlib.invalidate_caches()
    return importlib.import_module(f"{package}.{stem}")


def test_which_variants_replay_a_graph(project: tuple[Options, str]) -> None:
    options, _ = project
    (mb,) = compile_modules(options).values()
    got = {t.name: [cuda_graphs.blocker(vc) for vc in t.variants] for t in mb.targets}
    assert got == {
        **{name: [why] for name, why in BLOCKERS.items()},
        "dynamic": [
            "its shapes are dynamic (size 1 of B)",
            "its shapes are dynamic (B)",
        ],
    }


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
    for name in ("_cuda_2(x)", "_cuda_3(x)", "_cuda_4(x)", "_cuda_5(x)"):
        assert f"        return {name}\n" in text
    assert text.count("runtime_shim.cuda_graph(") == 2
    assert (
        "def _reads_cuda_0(self):\n"
        '    """What the CUDA graph of cuda_0 reads in place: moving one re-captures'
        ' it."""\n'
        "    return (\n"
        "        self.lin.weight,\n"
        "        self.lin.bias,\n"
        "    )\n"
    ) in text
    assert "def _reads_cuda_1" not in text  # a function reads no parameters


def test_header_says_outputs_are_overwritten(text: str) -> None:
    doc = text.split('"""')[1]
    assert "cuda_0   cuda: x=f32[4,8]" in doc
    assert doc.count(", CUDA graph\n") == 2
    assert "overwritten by the next call: clone an output to keep it." in doc


def test_explain_says_why(project: tuple[Options, str]) -> None:
    options, _ = project
    lines = report(compile_modules(options), options).splitlines()
    graph_lines = [line.strip() for line in lines if "cuda graph:" in line]
    on = (
        "cuda graph: captured on the first call, then replayed "
        "(outputs are overwritten by the next call)"
    )
    assert graph_lines == [
        on,
        on,
        *(
            f"cuda graph: off, {why}; compiled without one"
            for why in BLOCKERS.values()
            if why
        ),
        "cuda graph: off, its shapes are dynamic (size 1 of B); compiled without one",
        "cuda graph: off, its shapes are dynamic (B); compiled without one",
    ]


def test_no_cuda_graph_unless_asked(project: tuple[Options, str]) -> None:
    options, stem = project
    plain = Options(
        targets=tuple(
            Target(t.source, tuple(Variant(v.inputs, v.device) for v in t.variants))
            for t in options.targets[:2]
        ),
        root=options.root,
    )
    text = build(plain)[f"{stem}.py"]
    assert "cuda_graph" not in text and "CUDA graph" not in text
    assert "        return _cuda_0(self, x)\n" in text


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
