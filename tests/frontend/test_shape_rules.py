"""Ops whose meta kernel holds one device's limits run as extern calls with their
results' shapes from `ir.ops.SHAPE_RULES` (Note [Meta kernels with one device's
limits]).

`_grouped_mm`'s meta kernel accepts bf16 only, with 16-byte aligned strides, where
the CPU kernel multiplies float32: transformers' mixture-of-experts layers call it
so. A table of its four layouts (a 2D input against 3D weights, as experts run,
with the weights transposed too; 3D by 3D; 3D by 2D; 2D by 2D), in float32 and
bf16, each around pointwise work, is compared with eager on both backends, with
the product an extern call and not fallback code. Each rule's result agrees with
the meta kernel wherever that accepts, and a rule raises for shapes that no
device's kernel takes.
"""

from __future__ import annotations

import pytest
import torch

from tests.compile_helpers import aten_calls, compile_source
from transpiler.ir.ops import SHAPE_RULES

BODIES = {  # name: (parameters, expression)
    "experts": ("x, w, offs", "F.grouped_mm(x * 2, w, offs=offs).relu()"),
    "experts_transposed": (
        "x, w, offs",
        "F.silu(F.grouped_mm(x, w.transpose(-2, -1), offs=offs)) + 1",
    ),
    "batched": ("a, b", "F.grouped_mm(a, b) * 0.5"),
    "columns": ("a, b, offs", "F.grouped_mm(a.tanh(), b, offs=offs)"),
    "inner": ("a, b, offs", "F.grouped_mm(a, b, offs=offs).sum(0)"),
}

g = torch.Generator().manual_seed(0)
OFFS = torch.tensor([4, 4, 12], dtype=torch.int32)  # an empty group too


def randn(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g)


INPUTS = {
    "experts": {"x": randn(12, 16), "w": randn(3, 16, 8), "offs": OFFS},
    "experts_transposed": {"x": randn(12, 16), "w": randn(3, 8, 16), "offs": OFFS},
    "batched": {"a": randn(3, 4, 16), "b": randn(3, 16, 8)},
    "columns": {"a": randn(3, 4, 16), "b": randn(16, 12), "offs": OFFS},
    "inner": {"a": randn(4, 12), "b": randn(12, 8), "offs": OFFS},
}
CASES = [
    (name, dtype)
    for name in INPUTS
    for dtype in (torch.float32, torch.bfloat16)
    if dtype == torch.float32 or name in ("experts", "experts_transposed", "batched")
]


def _cast(inputs: dict, dtype: torch.dtype) -> dict:
    return {k: v.to(dtype) if v.is_floating_point() else v for k, v in inputs.items()}


def _fn(name: str, dtype: torch.dtype) -> str:
    return f"{name}_{str(dtype).removeprefix('torch.')}"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    lines = ["import torch", "import torch.nn.functional as F", ""]
    for name, dtype in CASES:
        params, expr = BODIES[name]
        lines += ["", f"def {_fn(name, dtype)}({params}):", f"    return {expr}", ""]
    functions = {_fn(n, d): _cast(INPUTS[n], d) for n, d in CASES}
    return compile_source("\n".join(lines), functions, tmp_path_factory.mktemp("mm"))


@pytest.mark.parametrize("name,dtype", CASES, ids=[f"{n}-{d}" for n, d in CASES])
def test_grouped_mm_as_eager(compiled, name, dtype):
    case = compiled[_fn(name, dtype)]
    for side in (case.cpu_source, case.cuda_source):
        assert aten_calls(side, ("_grouped_mm",)), side  # an extern call
        assert "fallback" not in side.lower(), side
    case.check(_cast(INPUTS[name], dtype))


ALIGNED = [  # bf16, strides of 16 bytes: the meta kernel accepts them
    (randn(12, 16), randn(3, 16, 8), OFFS),
    (randn(12, 16), randn(3, 8, 16).transpose(-2, -1), OFFS),
    (randn(3, 8, 16), randn(3, 16, 8), None),
]


@pytest.mark.parametrize("a,b,offs", ALIGNED)
def test_rule_agrees_with_meta_kernel(a, b, offs):
    meta = [t.to(torch.bfloat16).to("meta") for t in (a, b)]
    offs = None if offs is None else offs.to("meta")
    want = torch.ops.aten._grouped_mm.default(*meta, offs)
    got = SHAPE_RULES["aten._grouped_mm.default"](*meta, offs)
    assert (got.shape, got.dtype) == (want.shape, want.dtype)


@pytest.mark.parametrize(
    "a,b,offs",
    [
        (randn(12, 16), randn(3, 12, 8), OFFS),  # contraction differs
        (randn(12, 16), randn(2, 16, 8), OFFS),  # two groups of weights, three offsets
        (randn(3, 4, 16), randn(2, 16, 8), None),  # batches differ
        (randn(12, 16), randn(3, 16, 8), None),  # no offsets for a 2D input
    ],
)
def test_rule_refuses_what_eager_refuses(a, b, offs):
    with pytest.raises(RuntimeError):
        torch.nn.functional.grouped_mm(a, b, offs=offs)
    meta = [t.to("meta") for t in (a, b)]
    offs = None if offs is None else offs.to("meta")
    with pytest.raises(RuntimeError):
        SHAPE_RULES["aten._grouped_mm.default"](*meta, offs)
