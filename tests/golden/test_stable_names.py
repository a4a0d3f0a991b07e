"""Names in generated code are stable: adding code at the end renames nothing before it.

Each case builds a source, appends an op (or a layer) at the end, and builds again.
The unified diff between the two outputs may only add lines, apart from the header's
summary (variant table, source hash) and the `return` of each variant. Where the
edit shifts source lines (a layer added in `__init__`), the `file:line` in comments is
compared without its number. Building the same source twice, from two different
project roots, gives byte-identical files.
"""

from __future__ import annotations

import difflib
import re
import sys
from pathlib import Path

import pytest
import torch

from transpiler.api import build
from transpiler.options import Options, Target, TensorSpec, Variant

FUNCTION = """\
import torch


def f(x, w, y):
    a = torch.relu(x + y)
    h = a @ w
    b = torch.sigmoid(h) * y
    s = b.sum(-1, keepdim=True)
    print("s:", s.shape)
    c = b / (s + 1)
    out = torch.tanh(c @ w) - a
    return out
"""
FUNCTION_LONGER = FUNCTION.replace(
    "    return out\n", "    out = torch.relu(out @ w) + x\n    return out\n"
)
MODULE = """\
import torch
from torch import nn


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1 = nn.Linear(8, 8)
        self.fc2 = nn.Linear(8, 8)
        self.fc3 = nn.Linear(8, 8)

    def forward(self, x):
        x = torch.relu(self.fc1(x))
        x = torch.sigmoid(self.fc2(x))
        x = torch.tanh(self.fc3(x))
        return x
"""
MODULE_LONGER = MODULE.replace(
    "        self.fc3 = nn.Linear(8, 8)\n",
    "        self.fc3 = nn.Linear(8, 8)\n        self.fc4 = nn.Linear(8, 8)\n",
).replace(
    "        return x\n", "        x = torch.relu(self.fc4(x)) * 2\n        return x\n"
)


def f32(*shape: int) -> TensorSpec:
    return TensorSpec(torch.float32, shape)


CASES = {  # id: (source, the source with code added at the end, target, inputs)
    "function": (
        FUNCTION,
        FUNCTION_LONGER,
        "model.py::f",
        (("x", f32(4, 8)), ("w", f32(8, 8)), ("y", f32(4, 8))),
    ),
    "module": (MODULE, MODULE_LONGER, "model.py::Net", (("x", f32(4, 8)),)),
}
HEADER_END = '"""\n'  # the module docstring (header, variant table) ends here
SOURCE_LINE = re.compile(r"model\.py:\d+")
KERNEL_NAME = re.compile(r"\b(?:triton|cpp)_fused_\w+")


def build_files(root: Path, source: str, target: str, inputs) -> dict[str, str]:
    """Every generated file of `target` in `source`, written to `root`/model.py."""
    root.mkdir(parents=True)
    (root / "model.py").write_text(source)
    variants = (Variant(inputs, "cpu"), Variant(inputs, "cuda"))
    saved_path = list(sys.path)
    sys.modules.pop("model", None)
    try:
        return build(Options(targets=(Target(target, variants),), root=root))
    finally:
        sys.path[:] = saved_path
        sys.modules.pop("model", None)


def comparable(rel: str, text: str) -> list[str]:
    """The lines to compare: without the header, `file:line` without its number."""
    if rel == "model.py":
        text = text[text.index(HEADER_END, 3) + len(HEADER_END) :]
        text = "".join(
            line
            for line in text.splitlines(keepends=True)
            if "check_sources(" not in line
        )
    return SOURCE_LINE.sub("model.py:N", text).splitlines(keepends=True)


@pytest.mark.parametrize("case", sorted(CASES))
def test_code_added_at_the_end_renames_nothing(case: str, tmp_path: Path) -> None:
    source, longer, target, inputs = CASES[case]
    old = build_files(tmp_path / "old", source, target, inputs)
    new = build_files(tmp_path / "new", longer, target, inputs)
    assert set(old) <= set(new)
    removed, added = [], 0
    for rel in sorted(old):
        diff = difflib.unified_diff(
            comparable(rel, old[rel]), comparable(rel, new[rel])
        )
        for line in list(diff)[2:]:
            if line.startswith("-") and not line[1:].strip().startswith("return "):
                removed.append(f"{rel}: {line}")
            added += line.startswith("+")
    assert removed == [], "".join(removed)
    assert added > 0
    kernels = {rel: set(KERNEL_NAME.findall(text)) for rel, text in old.items()}
    for rel, names in kernels.items():
        assert names <= set(KERNEL_NAME.findall(new[rel])), rel


@pytest.mark.parametrize("case", sorted(CASES))
def test_building_twice_is_byte_identical(case: str, tmp_path: Path) -> None:
    source, _, target, inputs = CASES[case]
    first = build_files(tmp_path / "one", source, target, inputs)
    second = build_files(tmp_path / "elsewhere" / "two", source, target, inputs)
    assert first == second
