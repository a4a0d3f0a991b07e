"""Which cuda variants replay a CUDA graph (`cuda_graphs = true`, `--cuda-graphs`).

A CUDA graph replays the exact kernel launches it captured, with the same addresses,
sizes and control flow. So a variant that asks for one gets one only if:

- its shapes are static: a named dynamic dimension changes sizes and grids per call;
- it has no graph breaks: fallback code runs arbitrary Python on every call;
- it has no `while` loop on tensor data: each step reads its condition on the host,
  and the steps between would be graphs of a few kernels each, replayed in a loop.

Anything else compiles normally, and `transpile --explain` says why. The mechanism
is `runtime_shim.cuda_graph` (runtime_shim/cuda_graphs.py).

A variant that branches on tensor data (`if y.sum() > 0:`) is a *tree* of graphs,
as torch.compile's cudagraph trees are around a graph break: its code is split at
each branch into straight-line segments, each captured as a graph of its own on
first use, and the `if` between them stays in Python, reading the condition that
the graph before it wrote (codegen/graph_segments.py, `runtime_shim.cuda_graph_tree`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from transpiler.codegen.wrapper import VariantCode

OVERWRITTEN = "outputs are overwritten by the next call"


def blocker(vc: VariantCode) -> str | None:
    """Why `vc` cannot replay a CUDA graph, or None when it can."""
    if vc.variant.device != "cuda":
        return "not a cuda variant"
    if vc.region is None:
        return "it runs the source"
    if vc.dynamic or vc.specializes:
        dims = ", ".join(d for d, _ in vc.dynamic) or vc.specializes
        return f"its shapes are dynamic ({dims})"
    if vc.objects:
        names = ", ".join(o.param for o in vc.objects)
        return f"it takes objects whose tensors it reads in place ({names})"
    if vc.calls_fallback:
        return "it has graph breaks (fallback code runs in Python on every call)"
    if any(r.loops for r in vc.region.walk()):
        return "it loops on tensor data (a host sync on every step)"
    return None


def uses_cuda_graph(vc: VariantCode) -> bool:
    """True when `vc` asked for a CUDA graph and can have one."""
    return vc.variant.cuda_graphs and blocker(vc) is None


def is_tree(vc: VariantCode) -> bool:
    """True when `vc` replays CUDA graphs, one per segment between its branches."""
    return uses_cuda_graph(vc) and vc.region.cond is not None


def segment_count(vc: VariantCode) -> int:
    return len(list(vc.region.walk()))


def explain(vc: VariantCode) -> list[str]:
    """The `--explain` line of a variant that asked for a CUDA graph."""
    if not vc.variant.cuda_graphs:
        return []
    why = blocker(vc)
    if why is None and is_tree(vc):
        return [
            f"cuda graph: one per segment between branches on tensor data"
            f" ({segment_count(vc)} segments), each captured on first use, then"
            f" replayed; the branches run in Python ({OVERWRITTEN})"
        ]
    if why is None:
        return [
            f"cuda graph: captured on the first call, then replayed ({OVERWRITTEN})"
        ]
    return [f"cuda graph: off, {why}; compiled without one"]
