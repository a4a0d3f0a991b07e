"""Library models' training graphs (passes/joint.py, passes/partition.py): each
model of `factories.MODELS` traced as `transpile` traces it, its joint graph
partitioned, and the forward then the backward run by the reference interpreter
against eager autograd (tests/models/joint_check.py, in a process of its own)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.models.factories import MODELS, Model
from tests.models.test_models import ROOT, _env

pytestmark = pytest.mark.slow

# Traced as a tree of regions (branches on tensor data in their attention masks):
# the joint graph of one graph does not take them yet, and they are left out.
REGIONS = {"gpt2", "llama", "bert_mask", "qwen2", "gemma", "distilbert_mask"}
ONE_GRAPH = [m for m in MODELS if m.name not in REGIONS]


@pytest.mark.parametrize("model", ONE_GRAPH, ids=[m.name for m in ONE_GRAPH])
def test_joint_graph_of_a_library_model_matches_eager(model: Model) -> None:
    run = subprocess.run(
        [sys.executable, "-m", "tests.models.joint_check", model.name],
        cwd=ROOT,
        env=_env(model),
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert run.returncode == 0, run.stderr[-4000:]
    result = json.loads(run.stdout.splitlines()[-1])
    assert not result["regions"], result
    count, outputs = result["tangents"]
    assert count == outputs, result
    assert result["output_error"] < 1e-4, result
    bad = {p: e for p, e in result["errors"].items() if isinstance(e, str) or e > 1e-4}
    assert bad == {}, bad
    assert len(result["errors"]) == result["gradients"] > 0
