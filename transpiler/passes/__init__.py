"""The optimization pipeline: graph passes in order, then lowering to a Program."""

from __future__ import annotations

from transpiler.ir.graph import Graph
from transpiler.ir.program import Program
from transpiler.passes.constant_fold import constant_fold
from transpiler.passes.dce import dce
from transpiler.passes.decompose import decompose
from transpiler.passes.fuse import fuse
from transpiler.passes.schedule import KernelNames, schedule
from transpiler.passes.split_addmm import split_addmm

PIPELINE = (
    (decompose, "rewrite composite ops (layer_norm, softmax, gelu) into fusable ops"),
    (split_addmm, "move a linear layer's bias into the kernel of its epilogue"),
    (constant_fold, "strength-reduce pow, drop x*1 and x+0"),
    (dce, "drop values nothing uses"),
)


def optimize(graph: Graph) -> Graph:
    for run, _why in PIPELINE:
        graph = run(graph)
        graph.lint()
    return graph


def lower(graph: Graph, names: KernelNames) -> Program:
    """Fuse into kernels and schedule them with the extern calls."""
    return schedule(graph, fuse(graph), names)
