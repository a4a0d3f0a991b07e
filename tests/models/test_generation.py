"""Greedy generation with causal language models of transformers.

Two variants are compiled: the prefill (`use_cache=True`, no cache given) returns
the model's output with the key/value cache it filled, built by the generated code
(`runtime_shim.rebuild`); the decode step takes one token and that cache, declared
by example (`kv_cache(P)`: any past length P), appends to it and returns it. Every
one of 32 tokens goes through a compiled variant and must be eager's, on the CPU
and through the cuda variants (Triton's interpreter without a GPU).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.models.factories import CACHE, GENERATORS, Model
from tests.models.test_models import _check, _transpile

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("model", GENERATORS, ids=[m.name for m in GENERATORS])
def test_greedy_generation_through_compiled_prefill_and_decode_matches_eager(
    model: Model, device: str, tmp_path: Path
) -> None:
    out = tmp_path / "gen"
    # cpu variants too for cuda: without a GPU, their guards pick the cuda variant
    built = _transpile(
        model, out, devices=("cpu", device) if device != "cpu" else ("cpu",)
    )
    assert built.returncode == 0, built.stderr
    stem = model.target.split("::")[0].rsplit(".", 1)[-1]
    text = (out / f"{stem}.py").read_text()
    assert "Graph breaks (code run eagerly):\n    none" in text, text[:3000]
    assert (
        "runtime_shim.rebuild(" in text
    )  # the prefill's cache, built by generated code
    # the decode step appends to the cache passed in, then returns it
    assert f"{CACHE}.layers[0].keys = " in text
    assert f"{CACHE}={CACHE}," in text
    result = _check(model, tmp_path, "--generate", model.name, f"gen.{stem}", device)
    assert result["problems"] == [] and result["tokens"] == 32, result
