"""Library models (transformers, timm) transpiled straight from their classes.

Each model of `factories.MODELS` is transpiled as a user would, with the command
line in a fresh process (`transpile pkg.mod::Class --factory ... --device cpu
--device cuda`), then checked by tests/models/check.py in another process that
cannot import the compiler: both variants (C++ kernels; Triton kernels in Triton's
interpreter, or on the GPU in GPU mode) against eager on new inputs, outputs and
inputs and state after the call, with no ATen op run inside fallback code and no
call left to the source.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.models.factories import MODELS, STUBS, Model, has_real_torchvision

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT_S = 900


def _env(model: Model, *paths: Path) -> dict[str, str]:
    env = dict(os.environ)
    extra = [str(ROOT), *map(str, paths)]
    if model.timm and not has_real_torchvision():
        extra.append(str(STUBS))
    env["PYTHONPATH"] = os.pathsep.join(extra + [env.get("PYTHONPATH", "")])
    env["HF_HUB_OFFLINE"] = "1"
    env["TRANSFORMERS_VERBOSITY"] = "error"
    return env


def _transpile(
    model: Model,
    out: Path,
    devices: tuple[str, ...] = ("cpu", "cuda"),
    train: bool = False,
) -> subprocess.CompletedProcess:
    args = [model.target, "--factory", model.factory, "-o", str(out)]
    if train:
        args.append("--train")
    for device in devices:
        args += ["--device", device]
    if model.more:
        for inputs in (model.inputs, *model.more):
            spec = ", ".join(f"{name}={spec}" for name, spec in inputs.items())
            args += ["--variant", spec]
    else:
        for name, spec in model.inputs.items():
            args += ["--example", f"{name}={spec}"]
    command = "import sys; from transpiler.cli import main; sys.exit(main())"
    return subprocess.run(
        [sys.executable, "-c", command, *args],
        cwd=ROOT,
        env=_env(model),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )


def _check(model: Model, tmp_path: Path, *args: str) -> dict:
    """tests/models/check.py with `args`, in a process of its own that imports the
    generated package from `tmp_path`: its result, the JSON of its last line."""
    checked = subprocess.run(
        [sys.executable, "-m", "tests.models.check", *args],
        cwd=ROOT,
        env=_env(model, tmp_path),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    assert checked.returncode == 0, checked.stderr[-4000:]
    return json.loads(checked.stdout.splitlines()[-1])


@pytest.mark.parametrize("model", MODELS, ids=[m.name for m in MODELS])
def test_library_model_compiles_whole_and_matches_eager(
    model: Model, tmp_path: Path
) -> None:
    out = tmp_path / "gen"
    built = _transpile(model, out)
    assert built.returncode == 0, built.stderr
    assert "graph break" not in built.stderr.lower(), built.stderr
    stem = model.target.split("::")[0].rsplit(".", 1)[-1]
    text = (out / f"{stem}.py").read_text()
    assert "Graph breaks (code run eagerly):\n    none" in text, text[:3000]

    result = _check(model, tmp_path, model.name, f"gen.{stem}")
    assert result["problems"] == [], result
    assert result["cuda_variants"], result  # the Triton variant ran too
    assert result["fallback_ops"] == 0 and result["fallback_calls"] == 0, result
