"""Library models (transformers, timm) transpiled with `--train`: the training
counterpart of test_models.py, in a file of its own so that a parallel run can
give the two to different workers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.models.factories import MODELS, Model
from tests.models.test_models import _check, _transpile

TRAINED = [m for m in MODELS if m.trains]


@pytest.mark.slow
@pytest.mark.parametrize("model", TRAINED, ids=[m.name for m in TRAINED])
def test_library_model_trains_compiled_and_matches_eager(
    model: Model, tmp_path: Path
) -> None:
    """The model transpiled with `--train`: its training variants compile
    (their own backward, no graph break), and a step of each, dropout on, gives
    eager's outputs and gradients (tests/models/check.py `check_training`)."""
    out = tmp_path / "gen"
    built = _transpile(model, out, train=True)
    assert built.returncode == 0, built.stderr
    assert "warning" not in built.stderr, built.stderr
    stem = model.target.split("::")[0].rsplit(".", 1)[-1]
    text = (out / f"{stem}.py").read_text()
    assert "Graph breaks (code run eagerly):\n    none" in text, text[:3000]
    assert "class _cpu_0" in text and "runs the source" not in text, text[:3000]
    result = _check(model, tmp_path, "--train", model.name, f"gen.{stem}")
    assert result["problems"] == [], result
    assert result["gradients"] > 0 and result["fallback_calls"] == 0, result
