"""Find and parse the user's source: files, classes and function definitions.

Parsed files are cached per path; each `FunctionDef` is found by the line where its
code object starts, so decorators, nested classes and same-named methods resolve
exactly as Python resolved them.
"""

from __future__ import annotations

import ast
import inspect
import tokenize
from dataclasses import dataclass
from pathlib import Path

import libcst as cst
from libcst.metadata import MetadataWrapper, PositionProvider

from transpiler.codegen.text import source_lines
from transpiler.errors import UserError


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
        path = path.resolve()
        try:
            return path.relative_to(self.root).as_posix()
        except ValueError:
            return path.name

    def is_user_file(self, path: str | None) -> bool:
        if not path:
            return False
        p = Path(path).resolve()
        if "site-packages" in p.parts or "dist-packages" in p.parts:
            return False
        return p.is_relative_to(self.root) and p.suffix == ".py"

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

    def function(self, fn) -> tuple[SourceFile, cst.FunctionDef]:
        """The parsed file and `FunctionDef` of a Python function object."""
        fn = inspect.unwrap(fn)
        src = self.load(Path(inspect.getsourcefile(fn)))
        first = fn.__code__.co_firstlineno
        node = src.defs.get(first)
        if node is None:  # decorated: the def line follows its decorators
            node = next(
                (d for line, d in sorted(src.defs.items()) if line >= first), None
            )
        if node is None or node.name.value != fn.__name__:
            raise UserError(f"cannot find the source of {fn.__qualname__}", src.display)
        return src, node


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
