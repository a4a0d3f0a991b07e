"""Expands read by pointwise ops become broadcasts (passes/drop_expands.py)."""

from __future__ import annotations

import re

import torch

from tests.compile_helpers import compile_source

SOURCE = """
import torch
import torch.nn.functional as F


def normalize(x):
    return F.normalize(x, dim=-1)


def scaled(x, s, t):
    # a 0-dim value keeps its expand: broadcast, it would promote as a number
    return x * t.expand(4, 6), (x.float() + s.expand(4, 6)).relu()
"""


def test_expand_read_by_pointwise_is_a_broadcast(tmp_path) -> None:
    inputs = {
        "normalize": {"x": torch.randn(8, 32)},
        "scaled": {
            "x": torch.randn(4, 6),
            "s": torch.randn(4, 1),
            "t": torch.tensor(2.5, dtype=torch.float64),
        },
    }
    compiled = compile_source(SOURCE, inputs, tmp_path)
    for name, args in inputs.items():
        compiled[name].check(args)
    doc = compiled["normalize"].module.__doc__
    # the norm is computed per row in the kernel of the division: one kernel
    assert re.search(r"cpu_0 .* 1 kernel, 0 extern calls", doc), doc
