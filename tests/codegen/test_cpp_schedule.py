"""A C++ kernel's schedule (`codegen.cpp.schedule`) is data on the kernel, and the
renderer writes what it says: the same kernels rendered under schedules changed
after the fact (no threads, no prefetch, one accumulator instead of lanes, one
inner loop instead of its peeled parts) follow the change and still compute what
eager PyTorch does.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from unittest import mock

import pytest
import torch

from tests.compile_helpers import compile_source
from tests.helpers import check_call
from transpiler.codegen import cpp
from transpiler.ir.program import CppSchedule, Kernel

SOURCE = """
import torch
import torch.nn.functional as F


def softmax(x):
    return torch.softmax(x, dim=-1)


def row_sum(x):
    return x.sum(-1)


def pool(x):
    return F.max_pool2d(x, 3, 2, padding=1)


def norm(x, w, b):
    return F.layer_norm(x, (96,), w, b)
"""

_gen = torch.Generator().manual_seed(0)
INPUTS = {
    "softmax": {"x": torch.randn(64, 1024, generator=_gen)},
    # positive: the sums of each order a schedule picks agree to f32's tolerance
    # (rows of randn that nearly cancel would compare rounding alone)
    "row_sum": {"x": torch.rand(64, 4096, generator=_gen) + 0.5},
    "pool": {"x": torch.randn(2, 8, 40, 40, generator=_gen)},  # rows of 20: split
    "norm": {
        "x": torch.randn(64, 96, generator=_gen),
        "w": torch.randn(96, generator=_gen),
        "b": torch.randn(96, generator=_gen),
    },
}


def _no_threads(s: CppSchedule) -> CppSchedule:
    return replace(s, parallel=False)


def _no_prefetch(s: CppSchedule) -> CppSchedule:
    return replace(s, loops=tuple(replace(lp, prefetch=False) for lp in s.loops))


def _one_accumulator(s: CppSchedule) -> CppSchedule:
    """Lanes become one accumulator a chunk at a time (a long row's sum in one
    accumulator would lose what the chunks keep)."""
    one = {"lanes": 0, "chunk": cpp.REDUCTION_CHUNK, "chunked": True}
    loops = tuple(replace(lp, **one) if lp.lanes else lp for lp in s.loops)
    return replace(s, loops=loops)


def _one_inner_loop(s: CppSchedule) -> CppSchedule:
    return replace(s, parts=None)


def _variance_inline(s: CppSchedule) -> CppSchedule:
    return replace(s, loops=tuple(replace(lp, spread=False) for lp in s.loops))


# change -> (what the decided schedule has that the change takes away, as text of
# the C++ it is written to)
CHANGES = {
    "no threads": (_no_threads, "#pragma omp parallel for"),
    "no prefetch": (_no_prefetch, "__builtin_prefetch"),
    "one accumulator": (_one_accumulator, "lanes_sum("),
    "one inner loop": (_one_inner_loop, "// split where the conditions on x1 change"),
    "variance inline": (_variance_inline, "row_spread<float"),
}


def _build(tmp_path: Path, change=None):
    decided: list[Kernel] = []
    schedule = cpp.schedule

    def changed(k: Kernel) -> CppSchedule:
        s = schedule(k)
        decided.append(replace(k, cpp=s))
        return s if change is None else change(s)

    with mock.patch.object(cpp, "schedule", changed):
        compiled = compile_source(SOURCE, INPUTS, tmp_path)
    return compiled, decided


@pytest.fixture(scope="module")
def decided(tmp_path_factory: pytest.TempPathFactory):
    return _build(tmp_path_factory.mktemp("decided"))


def test_every_kernel_is_rendered_from_its_schedule(decided) -> None:
    compiled, kernels = decided
    cpp_text = compiled["softmax"].cpp_text
    assert kernels
    for k in kernels:  # the file's text of each is its schedule's rendering
        assert cpp.render_kernel(k) in cpp_text
    softmax = next(k for k in kernels if "softmax" in k.name)
    assert softmax.cpp.parallel and softmax.cpp.kept  # exp(x - max), kept a row
    assert [lp.prefetch for lp in softmax.cpp.loops].count(True) == 1
    with pytest.raises(AssertionError, match="no C\\+\\+ schedule"):
        cpp.render_kernel(replace(softmax, cpp=None))


@pytest.mark.slow
@pytest.mark.parametrize("change", CHANGES, ids=list(CHANGES))
def test_the_renderer_follows_a_changed_schedule(change, decided, tmp_path) -> None:
    fn, text = CHANGES[change]
    fn_name = "norm" if change == "variance inline" else "softmax"
    assert text in decided[0][fn_name].cpp_text  # the schedule made that choice
    compiled, _ = _build(tmp_path, fn)
    assert text not in compiled[fn_name].cpp_text
    for name, inputs in INPUTS.items():  # the C++ variant (the Triton one is as was)
        want = getattr(compiled[name].module._source, name)
        check_call(compiled[name].cpu, want, inputs, torch.float32, f"{name} cpu")
