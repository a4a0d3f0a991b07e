"""End to end: a generated module whose source was edited warns once on import."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


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
