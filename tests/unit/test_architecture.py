"""The import graph of `transpiler/`: stages import only from earlier stages, and no
set of modules imports each other in a circle.

The layers, lowest first, are the stages of the pipeline (README, "How it is laid
out"): a module may import from its own layer and the ones below it. Imports inside
functions and under `TYPE_CHECKING` count: they are arrows a reader follows too.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2] / "transpiler"

LAYERS = [
    ("transpiler", "transpiler.errors", "transpiler.formatting", "transpiler.text"),
    ("transpiler.ir",),
    ("transpiler.options",),
    ("transpiler.frontend",),
    ("transpiler.passes",),
    ("transpiler.build",),
    ("transpiler.codegen",),
    ("transpiler.autotune", "transpiler.variants", "transpiler.explain"),
    ("transpiler.pipeline",),
    ("transpiler.api",),
    ("transpiler.cli",),
]


def _modules() -> dict[str, Path]:
    modules = {}
    for path in ROOT.rglob("*.py"):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules[".".join(parts)] = path
    return modules


def _imports(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The modules of `transpiler` that `name` imports, anywhere in its text."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([node.module] if node.module else []))
            candidates = [f"{base}.{a.name}" for a in node.names] + [base]
        elif isinstance(node, ast.Import):
            candidates = [a.name for a in node.names]
        else:
            continue
        for candidate in candidates:  # a submodule, else the module it is from
            if candidate in modules and candidate != name:
                found.add(candidate)
                break
    return found


def _layer(name: str) -> int:
    best = None
    for i, prefixes in enumerate(LAYERS):
        for prefix in prefixes:
            if name == prefix or name.startswith(prefix + "."):
                if best is None or len(prefix) > best[1]:
                    best = (i, len(prefix))
    assert best is not None, f"{name} is in no layer of LAYERS"
    return best[0]


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = _modules()
    return {name: _imports(name, path, modules) for name, path in modules.items()}


def test_no_module_imports_from_a_later_stage(graph):
    upward = [
        f"{a} -> {b}"
        for a, targets in sorted(graph.items())
        for b in sorted(targets)
        if _layer(b) > _layer(a)
    ]
    assert upward == []


def test_no_import_cycles(graph):
    # Tarjan's strongly connected components: any of more than one module is a cycle
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                cycles.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    assert cycles == []


def test_the_checks_see_arrows():
    """The graph is read from the code: a known downward arrow is in it."""
    modules = _modules()
    api = _imports("transpiler.api", modules["transpiler.api"], modules)
    assert "transpiler.options" in api and _layer("transpiler.cli") == len(LAYERS) - 1
