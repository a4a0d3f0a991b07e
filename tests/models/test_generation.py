"""Greedy generation with causal language models of transformers.

The prefill variant (`use_cache=True`, no cache given) is compiled: it returns the
model's output with the key/value cache it filled, built by the generated code
(`runtime_shim.rebuild`). Later tokens run the model's source with that cache (no
variant takes a cache yet), and every one of 32 tokens must be eager's.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.models.factories import GENERATORS, Model
from tests.models.test_models import ROOT, TIMEOUT_S, _env, _transpile


@pytest.mark.parametrize("model", GENERATORS, ids=[m.name for m in GENERATORS])
def test_greedy_generation_from_a_compiled_prefill_matches_eager(
    model: Model, tmp_path: Path
) -> None:
    out = tmp_path / "gen"
    built = _transpile(model, out, devices=("cpu",))
    assert built.returncode == 0, built.stderr
    stem = model.target.split("::")[0].rsplit(".", 1)[-1]
    text = (out / f"{stem}.py").read_text()
    assert "Graph breaks (code run eagerly):\n    none" in text, text[:3000]
    assert "runtime_shim.rebuild(" in text  # the cache, built by generated code
    checked = subprocess.run(
        [sys.executable, "-m", "tests.models.check", "--generate", model.name,
         f"gen.{stem}"],
        cwd=ROOT,
        env=_env(model, tmp_path),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )  # fmt: skip
    assert checked.returncode == 0, checked.stderr[-4000:]
    result = json.loads(checked.stdout.splitlines()[-1])
    assert result["problems"] == [] and result["tokens"] == 32, result
