"""Numbers made tensors of one element (`torch.where(mask, x, -inf)`'s
`scalar_tensor`, `torch.full((), v)`) are literals in the kernels that read them:
no kernel of their own, nothing written (`_mark_inlined` in passes/fuse.py). Read
by anything else (the result, a view an extern call reads) they are written as
before."""

from __future__ import annotations

import torch

from tests.compile_helpers import compile_source

SOURCE = """
import torch


def masked(scores, mask):
    return torch.where(mask, scores, torch.finfo(scores.dtype).min)


def filled(scores, mask):
    return scores.masked_fill(mask, float("-inf")).softmax(-1)


def returned(x):
    c = torch.full((), 2.5)
    return x * c, c


def extern_reads(x):
    c = torch.full((1, 1), 0.5)
    return x @ c.expand(6, 6) + c
"""


def _launches(source: str) -> int:
    return source.count("_cpp.function(") + source.count("_triton.")


def test_constants_are_literals_in_kernels(tmp_path) -> None:
    gen = torch.Generator().manual_seed(4)
    scores = torch.randn(2, 3, 6, 6, generator=gen)
    mask = torch.rand(1, 1, 6, 6, generator=gen) > 0.5
    mask[..., 0, :] = True  # no row of -inf only
    functions = {
        "masked": {"scores": scores, "mask": mask},
        "filled": {"scores": scores, "mask": ~mask},
        "returned": {"x": torch.randn(4, 5, generator=gen)},
        "extern_reads": {"x": torch.randn(6, 6, generator=gen)},
    }
    compiled = compile_source(SOURCE, functions, tmp_path)
    for name, inputs in functions.items():
        compiled[name].check(inputs)
    for name in ("masked", "filled"):
        case = compiled[name]
        assert _launches(case.cpu_source) == 1, case.cpu_source
        assert _launches(case.cuda_source) == 1, case.cuda_source
