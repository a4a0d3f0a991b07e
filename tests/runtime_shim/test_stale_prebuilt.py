"""`python -m runtime_shim build DIR` removes the prebuilt libraries that no `.cpp`
under DIR builds any more, and keeps those of the current sources: native or
portable, for this platform or another."""

from __future__ import annotations

from pathlib import Path

import pytest

from runtime_shim.__main__ import main
from runtime_shim.cpp import _prebuilt_key, find_compiler, prebuilt_path

SOURCE = """\
#include <cstdint>
extern "C" void add_one(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += 1.0f;
}
"""

pytestmark = pytest.mark.skipif(find_compiler() is None, reason="no C++ compiler")


def build(capsys: pytest.CaptureFixture[str], *flags: str) -> list[str]:
    assert main(["build", "gen", *flags]) == 0
    out, err = capsys.readouterr()
    assert err == ""
    return out.splitlines()


def library(cpp: str, portable: bool = False) -> str:
    path = Path(cpp)
    return prebuilt_path(path, path.read_text(), portable).as_posix()


def test_build_removes_what_no_source_builds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "gen" / "sub").mkdir(parents=True)
    toy, other = Path("gen/toy.cpp"), Path("gen/sub/other.cpp")
    toy.write_text(SOURCE)
    other.write_text(SOURCE)
    old_toy, old_other = library("gen/toy.cpp"), library("gen/sub/other.cpp")
    assert build(capsys) == [
        f"built gen/sub/other.cpp -> {old_other}",
        f"built gen/toy.cpp -> {old_toy}",
    ]

    # regenerated: toy.cpp has other kernels, other.cpp is gone
    toy.write_text(SOURCE.replace("1.0f", "2.0f"))
    other.unlink()
    arm = (
        toy.parent
        / "__prebuilt__"
        / (f"toy-{_prebuilt_key(toy.read_text(), 'aarch64', 'linux', False)}.so")
    )
    arm.write_bytes(b"a library built on another machine")
    in_progress = toy.parent / "__prebuilt__" / ".toy-x1y2z3.so"
    in_progress.write_bytes(b"")
    portable = library("gen/toy.cpp", portable=True)
    assert build(capsys, "--portable") == [
        f"built gen/toy.cpp -> {portable}",
        f"removed {old_toy} (stale: gen/toy.cpp changed since it was built)",
        f"removed {old_other} (stale: gen/sub/other.cpp is gone)",
    ]
    native = library("gen/toy.cpp")
    assert build(capsys) == [f"built gen/toy.cpp -> {native}"]

    left = sorted(p.as_posix() for p in Path("gen").rglob("*.so"))
    assert left == sorted([arm.as_posix(), in_progress.as_posix(), native, portable])
