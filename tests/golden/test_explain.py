"""Golden test of `transpile --explain` for the examples of pyproject.toml.

The output is pinned in tests/golden/explain.txt; a change fails with a unified diff
and the one command that accepts it. --explain writes nothing, and lists each graph
break (file:line, reason, source line) and each branch on tensor data.
"""

from __future__ import annotations

import contextlib
import difflib
import io
import re
from pathlib import Path

import pytest

from tests.helpers import ROOT
from transpiler.cli import main

GOLDEN = Path(__file__).with_name("explain.txt")
ACCEPT = "transpile --explain > tests/golden/explain.txt"
DIFF_LINES = 80

# (file, the source line of the statement) of what --explain must list
GRAPH_BREAKS = [
    ("examples/dynamo.py", 'print(f"Shape: {y.shape}")'),
    ("examples/layer_loop.py", "print(x.mean())"),
]
BRANCHES = [
    ("examples/toy.py", "if y.sum() > 0:"),
    ("examples/script_vs_trace.py", "if x.sum() > 0:"),
    ("examples/dynamo.py", "if y.sum() > 0:"),
]


def snapshot(folder: Path) -> dict[str, tuple[int, bytes]]:
    """Every file under `folder` (but caches): modification time and content."""
    return {
        p.relative_to(folder).as_posix(): (p.stat().st_mtime_ns, p.read_bytes())
        for p in sorted(folder.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


@pytest.fixture(scope="module")
def explained() -> dict[str, object]:
    """`transpile --explain` in the repository root, and the files around it."""
    before = snapshot(ROOT / "generated")
    top = sorted(p.name for p in ROOT.iterdir())
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(["--explain", "--root", str(ROOT)])
    return {
        "code": code,
        "out": out.getvalue(),
        "err": err.getvalue(),
        "unchanged": before == snapshot(ROOT / "generated"),
        "same_top": top == sorted(p.name for p in ROOT.iterdir()),
    }


def test_explain_matches_golden(explained: dict[str, object]) -> None:
    assert explained["code"] == 0, explained["err"]
    new = str(explained["out"])
    old = GOLDEN.read_text(encoding="utf-8") if GOLDEN.exists() else ""
    if new != old:
        lines = list(
            difflib.unified_diff(
                old.splitlines(keepends=True),
                new.splitlines(keepends=True),
                "a/tests/golden/explain.txt",
                "b/tests/golden/explain.txt",
            )
        )
        if len(lines) > DIFF_LINES:
            more = len(lines) - DIFF_LINES
            lines = [*lines[:DIFF_LINES], f"... ({more} more lines)\n"]
        pytest.fail(
            f"`transpile --explain` output changed; to accept it run:\n    {ACCEPT}\n"
            + "".join(lines),
            pytrace=False,
        )


def test_explain_writes_nothing(explained: dict[str, object]) -> None:
    assert explained["unchanged"], "--explain changed a file in generated/"
    assert explained["same_top"], "--explain created or removed a file in the root"


def line_number(file: str, text: str) -> int:
    lines = (ROOT / file).read_text(encoding="utf-8").splitlines()
    hits = [i for i, line in enumerate(lines, 1) if line.strip().startswith(text)]
    assert len(hits) == 1, (file, text, hits)
    return hits[0]


@pytest.mark.parametrize(("file", "text"), GRAPH_BREAKS, ids=lambda v: str(v))
def test_lists_graph_breaks(explained: dict[str, object], file: str, text: str) -> None:
    """`graph break: FILE:LINE: REASON` then the source line, in each variant."""
    where = f"{file}:{line_number(file, text)}"
    pattern = rf"^ +graph break: {re.escape(where)}: (?P<reason>.+)\n +(?P<src>.+)$"
    found = list(re.finditer(pattern, str(explained["out"]), re.M))
    assert len(found) == 2, f"{where}: want one per variant (cpu, cuda): {found}"
    for m in found:
        assert "print" in m["reason"], m["reason"]
        assert m["src"].strip().startswith(text), m["src"]


@pytest.mark.parametrize(("file", "text"), BRANCHES, ids=lambda v: str(v))
def test_lists_branches_on_tensor_data(
    explained: dict[str, object], file: str, text: str
) -> None:
    where = f"{file}:{line_number(file, text)}"
    pattern = rf"^ +branch on tensor data: {re.escape(where)}: {re.escape(text)}"
    found = re.findall(pattern, str(explained["out"]), re.M)
    assert len(found) == 2, f"{where}: want one per variant (cpu, cuda)"
