"""Resolve a target (`FILE.py::Name` or `pkg.mod::Name`) to an importable object."""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from pathlib import Path

from transpiler.errors import UserError


@dataclass(frozen=True)
class Resolved:
    module_name: str  # importable name of the user's module ("examples.toy")
    qualname: str  # "ToyModule"
    obj: object  # the class or function
    file: Path


def resolve(spec: str, root: Path) -> Resolved:
    """Import the module a target names and find the object in it."""
    left, _, qualname = spec.partition("::")
    if left.endswith(".py"):
        path = (root / left).resolve()
        if not path.is_file():
            raise UserError(f"no such file: {left}")
        try:
            rel = path.relative_to(root.resolve()).with_suffix("")
        except ValueError:
            raise UserError(f"{left} is outside the project root {root}") from None
        module_name = ".".join(rel.parts)
    else:
        module_name = left
    root_str = str(root.resolve())
    if root_str not in sys.path:
        sys.path.insert(0, root_str)
    try:
        module = importlib.import_module(module_name)
    except SyntaxError as e:
        file = e.filename or left
        raise UserError(
            f"syntax error: {e.msg}", _display(file, root), e.lineno
        ) from None
    except ImportError as e:
        raise UserError(f"cannot import {module_name}: {e}") from None
    obj = module
    for part in qualname.split("."):
        if not hasattr(obj, part):
            raise UserError(
                f"{module_name} has no {qualname!r}", _display(module.__file__, root)
            )
        obj = getattr(obj, part)
    return Resolved(module_name, qualname, obj, Path(module.__file__))


def _display(file: str, root: Path) -> str:
    try:
        return Path(file).resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return file
