"""Named dynamic dimensions: one `f32[B,...]` variant for every size of B.

See Note [Dynamic dimensions]. Checked: the batch-size example runs for B = 1, 7 and
64 without regeneration, on CPU (C++) and in Triton's interpreter; a condition on B
becomes a range guard; code that depends on B in other ways runs its source, and
`transpile` does not fail on it.
"""

from __future__ import annotations

import functools
import importlib
import sys
import warnings
from pathlib import Path

import pytest
import torch

import generated.batch_sizes as generated_classifier
from examples.batch_sizes import Classifier
from tests.control_flow.support import no_fallback
from tests.devices import on_gpu
from tests.helpers import check_call
from transpiler.api import build, write
from transpiler.options import Options, Target, Variant, parse_spec


def variant_names(module, describe: str) -> str:
    """The variant function name (`cpu_3`) the header lists with `describe`."""
    for line in (module.__doc__ or "").splitlines():
        if describe in line:
            return line.split()[0]
    raise AssertionError(f"{describe!r} not in\n{module.__doc__}")


def pair() -> tuple[torch.nn.Module, torch.nn.Module]:
    torch.manual_seed(0)
    eager = Classifier().eval()
    gen = generated_classifier.Classifier().eval()
    gen.load_state_dict(eager.state_dict())
    return eager, gen


def test_named_dimension_parses() -> None:
    spec = parse_spec("f32[B,512]")
    assert spec.shape == ("B", 512) and str(spec) == "f32[B,512]"
    assert Variant((("x", spec),), "cpu").dynamic == ("B",)


@pytest.mark.parametrize("batch", [1, 7, 64])
def test_one_variant_serves_every_batch_size(batch: int) -> None:
    eager, gen = pair()
    x = {"x": torch.randn(batch, 512)}
    with torch.no_grad():  # and no fallback to eager
        check_call(gen, eager, x, where=f"B={batch}", context=no_fallback)


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")  # masked lanes
@pytest.mark.parametrize("batch", [1, 7, 64])
def test_triton_variant_serves_every_batch_size(batch: int) -> None:
    eager, gen = pair()
    x = torch.randn(batch, 512)
    describe = "cuda: x=f32[1,512]" if batch == 1 else "cuda: x=f32[B,512]"
    fn = getattr(
        generated_classifier, "_" + variant_names(generated_classifier, describe)
    )
    with torch.no_grad():
        run = functools.partial(on_gpu(fn), gen)
        check_call(run, eager, {"x": x}, where=f"B={batch}")


def test_kernels_take_the_size_at_run_time() -> None:
    import inspect

    name = variant_names(generated_classifier, "cpu: x=f32[B,512]")
    source = inspect.getsource(getattr(generated_classifier, "_" + name))
    assert "B = x.shape[0]" in source
    assert 'l")(' in source and ", B\n" in source  # passed as an int64 argument


SOURCE = """
import torch


def big_batches(x):
    if x.shape[0] > 4:
        return x * 2
    return x - 1


def loops_over_batch(x):
    total = x[0]
    for i in range(1, x.shape[0]):
        total = total + x[i]
    return total


def iterates_batch(x):
    return torch.stack([row.amax() for row in x])
"""


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("dynamic")
    (root / "dyn_src.py").write_text(SOURCE)
    spec = (("x", parse_spec("f32[B,8]")),)
    targets = tuple(
        Target(f"dyn_src.py::{fn}", (Variant(spec, "cpu"),))
        for fn in ("big_batches", "loops_over_batch", "iterates_batch")
    )
    write(build(Options(targets=targets, root=root)), root / "dyn_gen")
    sys.path.insert(0, str(root))
    try:
        yield importlib.import_module("dyn_gen.dyn_src"), importlib.import_module(
            "dyn_src"
        )
    finally:
        sys.path.remove(str(root))


def test_condition_on_the_dimension_becomes_a_range_guard(compiled) -> None:
    gen, src = compiled
    assert (
        "x.shape[0] > 4" in (gen.__doc__ or "")
        or "x.shape[0] > 4" in open(gen.__file__).read()
    )
    with torch.no_grad():
        x = {"x": torch.randn(7, 8)}
        check_call(gen.big_batches, src.big_batches, x, context=no_fallback)
        x = {"x": torch.randn(3, 8)}
        with pytest.warns(RuntimeWarning, match=r"x\.shape\[0\] > 4"):
            check_call(gen.big_batches, src.big_batches, x)


def test_code_depending_on_the_dimension_otherwise_runs_its_source(compiled) -> None:
    gen, src = compiled
    text = Path(gen.__file__).read_text()
    for fn in ("loops_over_batch", "iterates_batch"):
        assert (
            f"the code depends on B beyond sizes (a loop over it, say) [all of {fn}"
            in text
        )
    x = {"x": torch.randn(5, 8)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_call(gen.loops_over_batch, src.loops_over_batch, x)
        check_call(gen.iterates_batch, src.iterates_batch, x)
