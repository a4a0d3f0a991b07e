"""Golden test: the checked-in `generated/` is what `transpile` generates today.

A change to generated text fails here (and only here, when numerics are unchanged) with
a unified diff and the one command that accepts it. Generating twice, in this process
and in a subprocess with another hash seed, must give identical files.
"""

from __future__ import annotations

import difflib
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import ROOT
from transpiler import api
from transpiler.cli import build_options, build_parser
from transpiler.options import Options

STALE = "generated/ is stale: run 'transpile' to accept the change"
IGNORED = ("__pycache__", "__prebuilt__")
DIFF_LINES = 80


def config_options(*argv: str) -> Options:
    """The Options `transpile ARGV` builds in the repository root (config mode)."""
    return build_options(build_parser().parse_args([*argv, "--root", str(ROOT)]))


def read_tree(folder: Path) -> dict[str, str]:
    """Every file under `folder` by relative posix path, skipping caches."""
    files = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if path.is_file() and not any(part in IGNORED for part in rel.parts):
            files[rel.as_posix()] = path.read_text(encoding="utf-8")
    return files


def diff(old: str, new: str, old_name: str, new_name: str) -> str:
    lines = list(
        difflib.unified_diff(
            old.splitlines(keepends=True),
            new.splitlines(keepends=True),
            old_name,
            new_name,
        )
    )
    if len(lines) > DIFF_LINES:
        lines = lines[:DIFF_LINES] + [f"... ({len(lines) - DIFF_LINES} more lines)\n"]
    return "".join(lines)


def assert_same_files(
    new: dict[str, str], old: dict[str, str], message: str, folder: str = ""
) -> None:
    """`new` == `old`, else fail with `message` and a diff from old to new."""
    added = sorted(set(new) - set(old))
    removed = sorted(set(old) - set(new))
    if added or removed:
        pytest.fail(f"{message}\nnew files: {added}\ngone: {removed}", pytrace=False)
    for rel in sorted(old):
        if new[rel] != old[rel]:
            text = diff(old[rel], new[rel], f"a/{folder}{rel}", f"b/{folder}{rel}")
            pytest.fail(f"{message}\n{text}", pytrace=False)


def run_cli(*argv: str, cwd: Path, **env: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "transpiler.cli", *argv],
        check=False,
        cwd=cwd,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=300,
    )


@pytest.fixture(scope="module")
def built() -> dict[str, str]:
    """`transpile`'s output for pyproject.toml, generated in memory."""
    return api.build(config_options())


def test_generated_is_fresh(built: dict[str, str]) -> None:
    assert_same_files(built, read_tree(ROOT / "generated"), STALE, "generated/")


@pytest.mark.slow
def test_generating_twice_is_identical(built: dict[str, str], tmp_path: Path) -> None:
    again = api.build(config_options())
    assert_same_files(again, built, "a second build in this process differs")
    # another process with another hash seed, written to disk by `transpile -o`
    seed = "2" if os.environ.get("PYTHONHASHSEED") == "1" else "1"
    result = run_cli("-o", str(tmp_path / "out"), cwd=ROOT, PYTHONHASHSEED=seed)
    assert result.returncode == 0, result.stderr
    written = read_tree(tmp_path / "out")
    assert_same_files(written, built, f"a build with PYTHONHASHSEED={seed} differs")


@pytest.mark.slow
def test_check_passes_on_checked_in_tree() -> None:
    result = run_cli("--check", cwd=ROOT)
    assert result.returncode == 0, result.stdout + result.stderr
    assert result.stdout == ""


def copy_project(dest: Path, generated: dict[str, str]) -> None:
    """examples/ and pyproject.toml, with `generated` (fresh, whatever the checked-in
    tree is) as generated/."""
    shutil.copytree(
        ROOT / "examples", dest / "examples", ignore=shutil.ignore_patterns(*IGNORED)
    )
    shutil.copy(ROOT / "pyproject.toml", dest / "pyproject.toml")
    api.write(generated, dest / "generated")


def test_check_fails_with_diff_when_source_changed(
    built: dict[str, str], tmp_path: Path
) -> None:
    copy_project(tmp_path, built)
    example = tmp_path / "examples" / "pointwise.py"
    text = example.read_text()
    assert "    y = x * 2\n" in text
    example.write_text(text.replace("    y = x * 2\n", "    y = x * 3\n"))
    before = read_tree(tmp_path / "generated")

    result = run_cli("--check", "--root", str(tmp_path), cwd=tmp_path)

    assert result.returncode == 1, result.stdout + result.stderr
    out = result.stdout
    changed = {line.split()[1] for line in out.splitlines() if line.startswith("+++ ")}
    assert "b/generated/pointwise.py" in changed, out
    assert changed <= {
        f"b/generated/pointwise{suffix}" for suffix in (".py", ".cpp", "_triton.py")
    }, out
    source_line = r"^([-+])\s*(#|//) examples/pointwise\.py:12: y = x \* (\d)$"
    signs = {(m[1], m[3]) for m in re.finditer(source_line, out, re.MULTILINE)}
    assert signs == {("-", "2"), ("+", "3")}, out
    last = out.strip().splitlines()[-1]
    assert "stale" in last and last.endswith("transpile"), last
    assert read_tree(tmp_path / "generated") == before, "--check wrote files"
