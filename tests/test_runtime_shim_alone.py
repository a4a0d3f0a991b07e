"""runtime_shim on its own: a wheel of just it, and its tests without the compiler.

A production image installs `pip install ./runtime_shim` next to the generated
modules; neither it nor its tests may need `transpiler`, `libcst` or `black`.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCKED = ("transpiler", "libcst", "black")


def test_wheel_holds_runtime_shim_alone(tmp_path: Path) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "--no-deps",
            "--no-build-isolation",
            "-q",
            "-w",
            str(tmp_path),
            str(ROOT / "runtime_shim"),
        ],
        check=True,
        capture_output=True,
        text=True,
    )
    (wheel,) = tmp_path.glob("*.whl")
    names = zipfile.ZipFile(wheel).namelist()
    modules = {n for n in names if n.endswith(".py")}
    assert modules == {
        "runtime_shim/__init__.py",
        "runtime_shim/__main__.py",
        "runtime_shim/autograd.py",
        "runtime_shim/blas.py",
        "runtime_shim/cpp.py",
        "runtime_shim/cuda_graphs.py",
        "runtime_shim/checks.py",
        "runtime_shim/constants.py",
        "runtime_shim/guards.py",
        "runtime_shim/layout.py",
        "runtime_shim/libdevice.py",
        "runtime_shim/modules.py",
        "runtime_shim/objects.py",
        "runtime_shim/optim.py",
        "runtime_shim/provenance.py",
        "runtime_shim/triton_launch.py",
        "runtime_shim/unbound.py",
        "runtime_shim/warn.py",
    }
    # the header every generated C++ file includes ships with the package, and
    # the fused optimizers' C++
    assert "runtime_shim/kernels.h" in names
    assert "runtime_shim/optim.cpp" in names
    metadata = next(n for n in names if n.endswith("METADATA"))
    requires = [
        line.split(":", 1)[1].strip()
        for line in zipfile.ZipFile(wheel).read(metadata).decode().splitlines()
        if line.startswith("Requires-Dist:") and "extra ==" not in line
    ]
    assert requires == ["torch>=2.4"]


@pytest.mark.slow
def test_its_tests_pass_without_the_compiler() -> None:
    code = f"""
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name.partition(".")[0] in {BLOCKED!r}:
            raise ImportError(f"{{name}} is not installed here")
sys.meta_path.insert(0, Block())
import pytest
sys.exit(pytest.main(["-q", "-p", "no:cacheprovider", "tests/runtime_shim"]))
"""
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert " passed" in result.stdout
