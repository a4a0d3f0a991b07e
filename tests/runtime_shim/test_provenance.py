"""A generated module warns once on import when a source it was built from changed."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from runtime_shim.provenance import check_sources, source_hash


def make_package(tmp_path: Path, text: str) -> str:
    pkg = tmp_path / "stalepkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "model.py").write_text(text)
    sys.path.insert(0, str(tmp_path))
    return "stalepkg.model"


def test_changed_source_warns_once(tmp_path: Path) -> None:
    module = make_package(tmp_path, "x = 1\n")
    try:
        recorded = {module: ("stalepkg/model.py", source_hash(b"x = 0\n"))}
        generated = str(tmp_path / "generated" / "model.py")
        with pytest.warns(RuntimeWarning) as record:
            check_sources(generated, recorded)
            check_sources(generated, recorded)  # once per process
        assert len(record) == 1
        message = str(record[0].message)
        assert message.startswith(os.path.relpath(generated))
        assert message.endswith(
            "is stale: stalepkg/model.py changed since it was generated; "
            "run transpile"
        )
    finally:
        sys.path.remove(str(tmp_path))


def test_unchanged_or_missing_sources_are_quiet(tmp_path: Path, recwarn) -> None:
    module = make_package(tmp_path, "x = 1\n")
    try:
        check_sources("g.py", {module: ("stalepkg/model.py", source_hash(b"x = 1\n"))})
        check_sources("g.py", {"no_such_module_here": ("nope.py", "0" * 16)})
    finally:
        sys.path.remove(str(tmp_path))
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
