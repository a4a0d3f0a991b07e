"""The gradients of every lowered op, through training variants on both backends,
against eager autograd.

The rows are those of tests/codegen/test_op_cases.py (one or more per pointwise and
reduction op the kernels compute) whose inputs are finite float32 tensors: each
becomes a training variant with every input declared `:grad`, and is called with
a random gradient of its outputs. Where eager's outputs have a gradient, the
variant must compile forward and backward and give eager's outputs and input
gradients; where they have none (a comparison, an argmax), it runs the source and
says so.
"""

from __future__ import annotations

import os

if os.environ.get("TRANSPILE_TEST_DEVICE") != "cuda":  # see tests/devices.py
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch

from tests.codegen.test_op_cases import ALL_CASES, Case, source
from tests.compile_helpers import import_generated, unique_name
from tests.devices import REAL_GPU
from transpiler.api import build
from transpiler.options import Options, Target, TensorSpec, Variant

pytestmark = [  # masked-off lanes of Triton's interpreter compute log(0) and such
    pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning"),
]

GRAD_TOL = {"rtol": 1e-4, "atol": 1e-5}


def _trainable(case: Case) -> bool:
    inputs = list(case.inputs.values())
    return bool(inputs) and all(
        isinstance(t, torch.Tensor)
        and t.dtype == torch.float32
        and bool(torch.isfinite(t).all())
        for t in inputs
    )


CASES = [c for c in ALL_CASES if _trainable(c)]


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("op_gradients")
    stem = unique_name("grad_src")
    (root / f"{stem}.py").write_text(source())
    targets = []
    for case in CASES:
        specs = tuple(
            (n, TensorSpec(t.dtype, tuple(t.shape), grad=True))
            for n, t in case.inputs.items()
        )
        variants = tuple(Variant(specs, d, train=True) for d in ("cpu", "cuda"))
        targets.append(Target(f"{stem}.py::{case.name}", variants))
    files = build(Options(targets=tuple(targets), root=root))
    return import_generated(files, root, stem)


def _leaves(value) -> list[torch.Tensor]:
    if isinstance(value, torch.Tensor):
        return [value]
    return [t for v in value for t in _leaves(v)]


def _variants(module, case: Case) -> dict[str, str]:
    """The header's line of each of the case's variants, by device."""
    after = module.__doc__.split(f"\n    {case.name} (")[1].splitlines()[1:3]
    lines = [line.split(None, 2) for line in after]
    return {device.rstrip(","): name + " " + rest for name, device, rest in lines}


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_op_gradient(case: Case, device: str, generated) -> None:
    on = "cuda" if device == "cuda" and REAL_GPU else "cpu"
    eager = getattr(generated._source, case.name)
    theirs = {n: t.clone().to(on).requires_grad_(True) for n, t in case.inputs.items()}
    want = _leaves(eager(**theirs))
    line = _variants(generated, case)[device]
    differentiable = [w for w in want if w.requires_grad]
    if not differentiable:
        assert "none of whose outputs has a gradient" in line, line
        return
    gen = torch.Generator().manual_seed(0)
    tangents = [torch.randn(w.shape, generator=gen).to(on) for w in differentiable]
    try:
        torch.autograd.backward(differentiable, tangents)
    except (RuntimeError, NotImplementedError) as e:  # eager has no formula either
        assert "no backward: " in line and str(e).splitlines()[0] in line, line
        return
    assert "forward and backward" in line, line
    variant = line.split()[0]
    mine = {n: t.clone().to(on).requires_grad_(True) for n, t in case.inputs.items()}
    got = _leaves(vars(generated)[f"_{variant}"](**mine))
    assert len(got) == len(want)
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, equal_nan=True, rtol=1e-4, atol=1e-5)
    torch.autograd.backward([g for g, w in zip(got, want) if w.requires_grad], tangents)
    for n in case.inputs:
        w, g = theirs[n].grad, mine[n].grad
        assert (g is None) == (w is None), n
        if w is not None:
            torch.testing.assert_close(
                g, w, equal_nan=True, **GRAD_TOL, msg=lambda m, n=n: f"{n}: {m}"
            )
