"""Resolve a target (`FILE.py::Name` or `pkg.mod::Name`) to an importable object."""

from __future__ import annotations

import difflib
import importlib
import sys
import types
from dataclasses import dataclass
from pathlib import Path

from transpiler.errors import UserError, raised_at
from transpiler.text import identifier

_MAX_NAMES = 8  # names listed when a target's name is not found


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
    _check_names(left, module_name, qualname)
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
        where = raised_at(e, root)
        raise UserError(f"cannot import {module_name}: {e}", *where) from None
    except Exception as e:  # the user's module raised while it was imported
        message = f"importing {module_name} raised {type(e).__name__}: {e}"
        raise UserError(message, *raised_at(e, root)) from None
    if left.endswith(".py") and Path(module.__file__).resolve() != path:
        raise UserError(
            f"{left} imports as {module_name}, but that name is already "
            f"{module.__file__}; run transpile from the project root"
        )
    obj = module
    for part in qualname.split("."):
        if not hasattr(obj, part):
            raise UserError(
                f"{module_name} has no {qualname!r}{_known_names(obj, part)}",
                _display(module.__file__, root),
            )
        obj = getattr(obj, part)
    return Resolved(module_name, qualname, obj, Path(module.__file__))


def _check_names(left: str, module_name: str, qualname: str) -> None:
    """The generated module imports the user's module by name (`import pkg.mod`)
    and names the target in Python: each part must be a Python name, spelled as
    Python reads it (`my-model.py` cannot be imported by an import statement)."""
    for part in module_name.split("."):
        if identifier(part) != part:
            hint = f"; rename it to {part.replace('-', '_')}" if "-" in part else ""
            raise UserError(
                f"{left}: {part!r} is not a Python module name, so generated code "
                f"cannot import {module_name}{hint}"
            )
    for part in qualname.split("."):
        if identifier(part) != part:
            raise UserError(f"{left}::{qualname}: {part!r} is not a Python name")


def _known_names(obj: object, missing: str) -> str:
    """`; did you mean 'Net'?`, or the classes and functions a module defines."""
    if not isinstance(obj, types.ModuleType):
        return ""
    names = sorted(
        name
        for name, value in vars(obj).items()
        if isinstance(value, (type, types.FunctionType))
        and getattr(value, "__module__", None) == obj.__name__
    )
    close = difflib.get_close_matches(missing, names, n=1)
    if close:
        return f"; did you mean {close[0]!r}?"
    if not names:
        return ""
    shown = names[:_MAX_NAMES] + (["..."] if len(names) > _MAX_NAMES else [])
    return f" (it defines {', '.join(shown)})"


def _display(file: str, root: Path) -> str:
    try:
        return Path(file).resolve().relative_to(root.resolve()).as_posix()
    except ValueError:
        return file
