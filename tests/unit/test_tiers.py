"""The suite's two tiers: `python -m pytest -q` runs the fast one, `--runslow` every
test (what .ci/run runs); the README names both, and the fast tier still reaches
every subsystem."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
# each subsystem, by where its tests are: at least one of them is in the fast tier
SUBSYSTEMS = (
    "tests/frontend/",
    "tests/passes/",
    "tests/codegen/test_cpp_loops.py",  # the C++ backend
    "tests/differential/test_examples.py::test_triton_variant_matches_eager",
    "tests/control_flow/",
    "tests/runtime_shim/",
    "tests/unit/test_cli",
    "tests/golden/",
)


def test_ci_runs_the_readme_command_for_every_test() -> None:
    command = (ROOT / ".ci" / "run").read_text().strip().splitlines()[-1]
    assert command.endswith(" && python -m pytest -q --runslow -n 2 --dist loadfile")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert f"```\n{command}\n```\n\nruns every test, as CI does (`.ci/run`)" in readme
    assert "`python -m pytest -q` runs the fast tier" in readme


def collected(*flags: str) -> list[str]:
    """The ids of the tests a run with `flags` would run."""
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", *flags],
        cwd=ROOT,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return [line for line in done.stdout.splitlines() if "::" in line]


@pytest.mark.slow
def test_the_fast_tier_reaches_every_subsystem() -> None:
    fast, every = collected(), collected("--runslow")
    assert set(fast) < set(every)
    for where in SUBSYSTEMS:
        assert any(test.startswith(where) for test in fast), where
    models = [test for test in fast if test.startswith("tests/models/")]
    assert len(models) == 1, models
