"""User-facing errors.

Every problem with the user's input is raised as a `UserError`: one line, naming the
user's `file:line` where there is one. The CLI prints it and exits with code 2; nothing
is written. `assert` is for our own invariants only.
"""

from __future__ import annotations


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
