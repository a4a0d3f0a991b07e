"""The retrace of a graph (passes/retrace.py): each node rerun on meta tensors."""

from __future__ import annotations

import pytest
import torch

from transpiler.ir.graph import Graph, Node, Ref, TensorMeta
from transpiler.passes.retrace import retrace


@pytest.mark.parametrize(
    "shape, stride, offset",
    [
        ((2, 4, 8, 8), (768, 8, 96, 1), 32),  # the k of a split qkv, per head
        ((2, 4, 8, 8), (768, 8, 96, 1), 0),
        ((6, 5), (10, 1), 3),  # a column window of a wider matrix
        ((0, 5), (5, 1), 7),  # empty
    ],
)
def test_views_of_an_input_keep_its_storage_offset(shape, stride, offset) -> None:
    """An input that starts inside its storage (a backward's saved view) keeps
    its offset through the retrace, and so do the views taken of it: a kernel
    reads a view relative to the input it is passed, by their offsets' difference
    (a transpose of a saved `k` 32 elements into qkv's storage read 32 elements
    before it when its retraced offset was 0: wrong gradients)."""
    meta = TensorMeta(shape, stride, offset, torch.float32)
    transposed = TensorMeta(
        (*shape[:-2], shape[-1], shape[-2]),
        (*stride[:-2], stride[-1], stride[-2]),
        offset,
        torch.float32,
    )
    graph = Graph(
        (
            Node("k", "input", "k", meta=meta),
            Node(
                "t", "call", "aten.transpose.int", (Ref("k"), -2, -1), meta=transposed
            ),
        ),
        Ref("t"),
    )
    nodes = retrace(graph).by_name()
    assert nodes["k"].meta == meta
    assert nodes["t"].meta == transposed
