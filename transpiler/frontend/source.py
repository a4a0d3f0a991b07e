"""Find and parse the user's source: files, classes and function definitions.

Parsed files are cached per path; each `FunctionDef` is found by the line where its
code object starts, so decorators, nested classes and same-named methods resolve
exactly as Python resolved them.
"""

from __future__ import annotations

import ast
import functools
import inspect
import sys
import sysconfig
import tokenize
from dataclasses import dataclass
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from transpiler.errors import UserError
from transpiler.text import source_lines


@dataclass
class SourceFile:
    path: Path
    display: str  # path relative to the project root, with forward slashes
    lines: list[str]
    module: cst.Module
    positions: dict  # CST node -> CodeRange
    defs: dict[int, cst.FunctionDef]  # first line (decorators included) -> def

    def line_of(self, node: cst.CSTNode) -> int:
        return self.positions[node].start.line

    def text_of(self, line: int) -> str:
        """The source line, without the blanks Python's tokenizer skips around it."""
        if not 0 < line <= len(self.lines):
            return ""
        return self.lines[line - 1].strip(" \t\f")


class SourceCache:
    def __init__(self, root: Path):
        self.root = root.resolve()
        self._files: dict[Path, SourceFile] = {}
        self.read: set[Path] = set()  # files read since `read` was last cleared

    def display(self, path: Path) -> str:
        """`path` as generated code names it: relative to the project root, or to
        the `sys.path` entry it is imported from (`transformers/models/gpt2/
        modeling_gpt2.py`), never a path of this machine."""
        path = path.resolve()
        if path.is_relative_to(self.root) and not _installed(path):
            return path.relative_to(self.root).as_posix()
        entry = _import_root(path)
        return path.relative_to(entry).as_posix() if entry else path.name

    def is_user_file(self, path: str | None) -> bool:
        """Whether functions defined in `path` are interpreted (see Note [What is
        interpreted]): Python source of the project or of any library, except
        PyTorch's own, the standard library's and those in OPAQUE_PACKAGES."""
        if not path:
            return False
        p = Path(path).resolve()
        if p.suffix != ".py" or not p.is_file():
            return False
        if p.is_relative_to(self.root) and not _installed(p):
            return True
        if not _installed(p) and any(p.is_relative_to(d) for d in _stdlib()):
            return False
        entry = _import_root(p)
        return entry is not None and p.relative_to(entry).parts[0] not in (
            OPAQUE_PACKAGES
        )

    def load(self, path: Path) -> SourceFile:
        path = path.resolve()
        self.read.add(path)
        if path not in self._files:
            self._files[path] = self._parse(path)
        return self._files[path]

    def _parse(self, path: Path) -> SourceFile:
        with tokenize.open(path) as f:  # in the encoding Python reads it in
            text = f.read()
        display = self.display(path)
        try:
            module = cst.parse_module(text)
            wrapper = MetadataWrapper(module, unsafe_skip_copy=True)
            positions = wrapper.resolve(PositionProvider)
        except cst.ParserSyntaxError as e:  # Python imported it: libcst's limit
            message = f"libcst cannot parse this file: {e.message}"
            raise UserError(message, display, e.raw_line) from None
        except RecursionError:
            message = "expression nested too deeply for libcst; split it into steps"
            raise UserError(message, display, _deepest_line(text)) from None
        defs: dict[int, cst.FunctionDef] = {}
        for node, rng in positions.items():
            if isinstance(node, cst.FunctionDef):
                defs[rng.start.line] = node
        lines = source_lines(text)  # as `line` numbers count: not str.splitlines
        return SourceFile(path, display, lines, module, positions, defs)

    def function(self, fn, unwrap: bool = True) -> tuple[SourceFile, cst.FunctionDef]:
        """The parsed file and `FunctionDef` of a Python function object (of the
        function it wraps, with `unwrap`, when it is a decorator's wrapper)."""
        if unwrap:
            fn = inspect.unwrap(fn)
        src = self.load(Path(inspect.getsourcefile(fn)))
        first = fn.__code__.co_firstlineno
        node = src.defs.get(first)
        if node is None:  # decorated: the def line follows its decorators
            node = next(
                (d for line, d in sorted(src.defs.items()) if line >= first), None
            )
        if node is None or node.name.value != fn.__code__.co_name:
            raise UserError(f"cannot find the source of {fn.__qualname__}", src.display)
        return src, node


# Note [What is interpreted]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~
# Every Python function the target reaches is interpreted, the libraries' as the
# project's (a transformers model's forward, its mask helpers, the decorators
# around them, a timm block), each with its own globals and closure: statements
# it cannot compile become fallback code in place, not the whole call. What is not
# interpreted runs as it is on meta tensors (a call into PyTorch) or is a graph
# break: PyTorch's own Python (its `nn` layers run under the recorder, which sees
# their ATen ops), the standard library, C extensions and the packages below,
# whose Python is a thin layer over compiled code or over PyTorch's internals.
OPAQUE_PACKAGES = frozenset(
    {
        "torch",
        "functorch",
        "torchgen",
        "triton",
        "numpy",
        "transpiler",
        "runtime_shim",
        "typing_extensions",
        "_pytest",
        "pytest",
        "libcst",
        "black",
    }
)


@functools.cache
def _stdlib() -> tuple[Path, ...]:
    """The standard library's directories (which hold site-packages too)."""
    paths = sysconfig.get_paths()
    return tuple(
        {Path(paths[key]).resolve() for key in ("stdlib", "platstdlib") if key in paths}
    )


def _installed(path: Path) -> bool:
    return "site-packages" in path.parts or "dist-packages" in path.parts


def _import_root(path: Path) -> Path | None:
    """The `sys.path` entry `path` is imported from (the longest that holds it)."""
    entries = [Path(e or ".").resolve() for e in sys.path]
    holding = [e for e in entries if path.is_relative_to(e) and e != path]
    return max(holding, key=lambda e: len(e.parts), default=None)


def _deepest_line(text: str) -> int | None:
    """The line of the most deeply nested node of `text`, for errors about nesting."""
    deepest, line = 0, None
    stack = [(node, 1) for node in ast.parse(text).body]
    while stack:  # iterative: recursion is what failed
        node, depth = stack.pop()
        if depth > deepest and hasattr(node, "lineno"):
            deepest, line = depth, node.lineno
        stack += [(child, depth + 1) for child in ast.iter_child_nodes(node)]
    return line
