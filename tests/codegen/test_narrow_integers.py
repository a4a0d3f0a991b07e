"""uint8 and int16 tensors in kernels (Note [Unsigned integers] in
codegen/optable.py): an image of bytes normalized into floats, and reductions,
scans and comparisons of both, compared with eager on both backends, with no
call into PyTorch left. Every pointwise op over both dtypes is swept in
tests/codegen/test_dtype_semantics.py, every cast between them in test_casts.py.
"""

from __future__ import annotations

import pytest
import torch

from tests.compile_helpers import compile_source

SOURCE = """
import torch


def normalize(img, mean, std):
    return (img.float() / 255 - mean) / std


def reductions(x):
    return (
        x.sum(-1),
        x.amax(0),
        x.argmin(-1),
        x.cumsum(-1),
        x.prod(-1),
        (x > 100).sum(),
        torch.where(x < 7, x, x - 3),
    )


def to_bytes(x):
    return (x * 255).to(torch.uint8), (x * 1000).to(torch.int16)
"""

_gen = torch.Generator().manual_seed(3)


def _ints(low: int, high: int, shape, dtype) -> torch.Tensor:
    return torch.randint(low, high, shape, generator=_gen).to(dtype)


CASES = {
    "normalize": {
        "img": _ints(0, 256, (2, 3, 8, 8), torch.uint8),
        "mean": torch.rand(3, 1, 1, generator=_gen),
        "std": torch.rand(3, 1, 1, generator=_gen) + 0.5,
    },
    "reductions_uint8": ("reductions", {"x": _ints(0, 256, (6, 37), torch.uint8)}),
    "reductions_int16": ("reductions", {"x": _ints(-900, 900, (6, 37), torch.int16)}),
    # negative floats become bytes through int64, as torch converts them
    "to_bytes": {"x": torch.linspace(-2, 2, 60).view(6, 10)},
}


def _function(name: str) -> tuple[str, dict]:
    case = CASES[name]
    return case if isinstance(case, tuple) else (name, case)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    out = {}
    for name in CASES:
        fn, inputs = _function(name)
        root = tmp_path_factory.mktemp(name)
        out[name] = compile_source(SOURCE, {fn: inputs}, root)[fn]
    return out


@pytest.mark.parametrize("name", list(CASES))
def test_narrow_integers_in_kernels(compiled, name: str) -> None:
    case = compiled[name]
    case.check(_function(name)[1])
    for side in (case.cpu_source, case.cuda_source):
        assert "torch.ops.aten" not in side, side
