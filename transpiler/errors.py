"""User-facing errors.

Every problem with the user's input is raised as a `UserError`: one line, naming the
user's `file:line` where there is one. The CLI prints it and exits with code 2; nothing
is written. `assert` is for our own invariants only.
"""

from __future__ import annotations

import traceback
from pathlib import Path


class UserError(Exception):
    """A problem with the user's input, reported as one line with exit code 2."""

    def __init__(self, message: str, file: str | None = None, line: int | None = None):
        super().__init__(message)
        self.message = message
        self.file = file
        self.line = line

    def __str__(self) -> str:
        if self.file is None:
            return self.message
        where = self.file if self.line is None else f"{self.file}:{self.line}"
        return f"{where}: {self.message}"


_INSTALLED = {"site-packages", "dist-packages"}
_OURS = Path(__file__).resolve().parent  # the transpiler package


def user_file(file: str, root: Path) -> str | None:
    """`file` relative to `root` if it is the user's code: under `root`, outside
    the transpiler and installed packages; else None."""
    path, root = Path(file).resolve(), root.resolve()
    if not path.is_file() or _INSTALLED & set(path.parts):
        return None
    if not path.is_relative_to(root) or path.is_relative_to(_OURS):
        return None
    return path.relative_to(root).as_posix()


def raised_at(err: BaseException, root: Path) -> tuple[str | None, int | None]:
    """The innermost `file:line` of the user's code in `err`'s traceback, if any."""
    for frame in reversed(traceback.extract_tb(err.__traceback__)):
        file = user_file(frame.filename, root)
        if file is not None:
            return file, frame.lineno
    return None, None
