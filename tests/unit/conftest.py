"""Fixtures shared by the unit tests."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path

import pytest


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A fresh project root; the user modules it imports are forgotten afterwards."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    before = set(sys.modules)
    yield tmp_path
    for name in set(sys.modules) - before:
        if tmp_path.as_posix() in (getattr(sys.modules[name], "__file__", "") or ""):
            del sys.modules[name]
