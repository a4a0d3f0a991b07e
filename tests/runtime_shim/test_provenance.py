"""A generated module warns once on import when a source it was built from changed."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from runtime_shim.provenance import check_sources, source_hash

ROOT = Path(__file__).resolve().parents[2]


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


def test_generated_module_reports_an_edited_example(tmp_path: Path) -> None:
    """End to end: transpile, edit the source, import the generated module."""
    (tmp_path / "examples").mkdir()
    source = (ROOT / "examples" / "pointwise.py").read_text()
    (tmp_path / "examples" / "pointwise.py").write_text(source)
    build = [
        sys.executable,
        "-m",
        "transpiler.cli",
        "--root",
        str(tmp_path),
        "examples/pointwise.py::fused_pointwise",
        "--device",
        "cpu",
        "--variant",
        "x=f32[4,8], bias=f32[8], scale=f32[8]",
    ]
    subprocess.run(build, check=True, capture_output=True, text=True, cwd=tmp_path)
    (tmp_path / "examples" / "pointwise.py").write_text(
        source.replace("y = x * 2", "y = x * 3")
    )
    code = textwrap.dedent("""
        import warnings
        warnings.simplefilter("always")
        import generated.pointwise
    """)
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=True,
    )
    assert (
        "generated/pointwise.py is stale: examples/pointwise.py changed since it "
        "was generated; run transpile"
    ) in result.stderr
