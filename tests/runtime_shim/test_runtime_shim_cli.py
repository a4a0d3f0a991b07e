"""`python -m runtime_shim build`, loading without a compiler, and independence."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SOURCE = """\
#include <cstdint>
extern "C" void add_one(float* x, int64_t n) {
  #pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) x[i] += 1.0f;
}
"""

# Run in a child: call add_one from gen/toy.cpp on a tensor, print the result.
CALL_ADD_ONE = """\
import torch
from runtime_shim import load_cpp
x = torch.arange(4, dtype=torch.float32)
load_cpp("gen/toy.cpp").function("add_one", "pl")(x.data_ptr(), x.numel())
print(x.tolist())
"""

# Makes importing these packages fail, as on a production box without them.
BLOCKER = """\
import sys
BLOCKED = {"transpiler", "libcst", "black"}
class Blocker:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is blocked in this test")
sys.meta_path.insert(0, Blocker())
sys.path.insert(0, %r)
"""


def run_python(
    args: list[str], cwd: Path, env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.fixture
def env(tmp_path: Path) -> dict[str, str]:
    env = dict(os.environ)
    env["TRANSPILE_CACHE_DIR"] = str(tmp_path / "cache")
    env["PYTHONPATH"] = str(ROOT)
    return env


@pytest.fixture
def no_compiler(tmp_path: Path, env: dict[str, str]) -> dict[str, str]:
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    env = dict(env, PATH=str(empty))
    env.pop("CXX", None)
    return env


def write_sources(tmp_path: Path) -> None:
    for rel in ("gen/toy.cpp", "gen/sub/other.cpp"):
        path = tmp_path / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(SOURCE)


@pytest.mark.parametrize("portable", [False, True])
def test_prebuilt_loads_without_compiler(
    tmp_path: Path, env: dict[str, str], no_compiler: dict[str, str], portable: bool
) -> None:
    write_sources(tmp_path)
    args = ["-m", "runtime_shim", "build", "gen"] + (["--portable"] if portable else [])
    built = run_python(args, tmp_path, env)
    assert built.returncode == 0, built.stderr
    lines = built.stdout.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith("built gen/sub/other.cpp -> gen/sub/__prebuilt__/")
    assert lines[1].startswith("built gen/toy.cpp -> gen/__prebuilt__/toy-")
    assert len(list((tmp_path / "gen" / "__prebuilt__").glob("toy-*.so"))) == 1

    loaded = run_python(["-c", CALL_ADD_ONE], tmp_path, no_compiler)
    assert loaded.returncode == 0, loaded.stderr
    assert loaded.stdout.strip() == "[1.0, 2.0, 3.0, 4.0]"
    assert not (tmp_path / "cache").exists()


def test_no_compiler_and_no_prebuilt(
    tmp_path: Path, no_compiler: dict[str, str]
) -> None:
    write_sources(tmp_path)
    loaded = run_python(["-c", CALL_ADD_ONE], tmp_path, no_compiler)
    assert loaded.returncode == 1
    assert loaded.stderr.strip().splitlines()[-1] == (
        "runtime_shim.cpp.RuntimeShimError: cannot load gen/toy.cpp: no prebuilt "
        "library and no C++ compiler found (set CXX or install g++); prebuild with: "
        "python -m runtime_shim build gen/"
    )


def test_build_errors_exit_2_without_traceback(
    tmp_path: Path, env: dict[str, str], no_compiler: dict[str, str]
) -> None:
    missing = run_python(["-m", "runtime_shim", "build", "nope"], tmp_path, env)
    assert missing.returncode == 2
    assert missing.stderr == "runtime_shim build: nope is not a directory\n"
    write_sources(tmp_path)
    bare = run_python(["-m", "runtime_shim", "build", "gen"], tmp_path, no_compiler)
    assert bare.returncode == 2
    assert bare.stderr == (
        "runtime_shim build: no C++ compiler found (set CXX or install g++)\n"
    )


def test_help(tmp_path: Path, env: dict[str, str]) -> None:
    shown = run_python(["-m", "runtime_shim", "--help"], tmp_path, env)
    assert shown.returncode == 0
    assert "build" in shown.stdout


def test_import_without_transpiler_libcst_black(
    tmp_path: Path, env: dict[str, str]
) -> None:
    write_sources(tmp_path)
    code = BLOCKER % str(ROOT) + textwrap.dedent("""\
        import runtime_shim
        for name in ("transpiler", "libcst", "black"):
            try:
                __import__(name)
            except ImportError:
                pass
            else:
                raise SystemExit(f"{name} was importable")
        """) + CALL_ADD_ONE
    done = run_python(["-I", "-c", code], tmp_path, env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[1.0, 2.0, 3.0, 4.0]"
