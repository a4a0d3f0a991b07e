"""C++ kernels shared between the modules of one run (`pipeline.share_kernels`).

Two targets in different source files whose code compiles to the same kernel (a
model built from a block that is a target of its own) write that kernel once: in
the module of the run that has it first. The other module calls it in that module's
library. Each case builds both modules into one package, checks where each kernel
is written and called, and runs both modules against eager PyTorch.
"""

from __future__ import annotations

import re

import pytest
import torch

from tests.compile_helpers import import_generated, unique_name
from tests.helpers import check_call
from transpiler.api import build
from transpiler.options import Options, Target, TensorSpec, Variant

BLOCK = """
import torch
import torch.nn.functional as F


def block(x, w, b):
    return F.gelu(F.layer_norm(x, (x.shape[-1],), w, b))
"""

MODEL = """
import torch

from {block} import block


def model(x, m, w, b):
    y = block(x @ m, w, b)
    return torch.relu(y @ m)
"""


def _variant(rows: int, names: str) -> Variant:
    shapes = {"x": (rows, 32), "m": (32, 32), "w": (32,), "b": (32,)}
    inputs = tuple((n, TensorSpec(torch.float32, shapes[n])) for n in names)
    return Variant(inputs, "cpu")


def _defined(cpp: str) -> list[str]:
    return re.findall(r'extern "C" void (\w+)\(', cpp)


def _called(py: str) -> list[tuple[str, str]]:
    return re.findall(r'(_cpp\w*)\.function\("(\w+)"', py)


# (which target comes first, rows of the block's x, rows of the model's x) ->
# the kernels each module writes, and the module whose library each one calls
CASES = {
    "block first": (
        "block",
        8,
        8,
        {"block": 1, "model": 1},  # the model writes only its relu
        {"block": {"_cpp"}, "model": {"_cpp", "_cpp_{block}"}},
    ),
    "model first": (
        "model",
        8,
        8,
        {"block": 0, "model": 2},  # the block's one kernel is the model's
        {"block": {"_cpp_{model}"}, "model": {"_cpp"}},
    ),
    "other sizes": (
        "block",
        8,
        4,
        {"block": 1, "model": 2},  # a kernel of other sizes is another kernel
        {"block": {"_cpp"}, "model": {"_cpp"}},
    ),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_a_kernel_is_written_once_and_called_where_it_is(case, tmp_path):
    first, block_rows, model_rows, defined, libraries = CASES[case]
    stems = {"block": unique_name("block"), "model": unique_name("model")}
    (tmp_path / f"{stems['block']}.py").write_text(BLOCK)
    (tmp_path / f"{stems['model']}.py").write_text(MODEL.format(**stems))
    targets = {
        "block": Target(f"{stems['block']}.py::block", (_variant(block_rows, "xwb"),)),
        "model": Target(f"{stems['model']}.py::model", (_variant(model_rows, "xmwb"),)),
    }
    order = [first, *(t for t in targets if t != first)]
    files = build(Options(targets=tuple(targets[t] for t in order), root=tmp_path))

    for which, stem in stems.items():
        assert len(_defined(files.get(f"{stem}.cpp", ""))) == defined[which]
        wanted = {library.format(**stems) for library in libraries[which]}
        assert {library for library, _ in _called(files[f"{stem}.py"])} == wanted
        assert ("_cpp = " in files[f"{stem}.py"]) == (defined[which] > 0)
    for stem in stems.values():  # every call finds its kernel in that library
        for library, kernel in _called(files[f"{stem}.py"]):
            home = stem if library == "_cpp" else library.removeprefix("_cpp_")
            assert kernel in _defined(files[f"{home}.cpp"])

    package = import_generated(files, tmp_path, stems["block"]).__name__
    package = package.rsplit(".", 1)[0]
    rows = {"block": block_rows, "model": model_rows}
    for which, stem in stems.items():
        generated = __import__(f"{package}.{stem}", fromlist=["_"])
        source = __import__(stem)
        fn = generated._cpu_0  # the compiled variant itself, not its dispatch
        eager = getattr(source, which)
        torch.manual_seed(0)
        inputs = {
            "x": torch.randn(rows[which], 32),
            "m": torch.randn(32, 32) / 6,
            "w": torch.randn(32),
            "b": torch.randn(32),
        }
        if which == "block":
            del inputs["m"]
        check_call(fn, eager, inputs, torch.float32, f"{case}: {which}")
