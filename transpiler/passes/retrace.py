"""Re-run a graph on meta tensors under a recorder: the engine of graph rewrites.

Passes that rewrite ops in terms of other ATen ops (decompositions, strength reduction)
do it by running each node's op, or its replacement, on meta tensors under a fresh
`Recorder`, so the new nodes get PyTorch's own metadata and keep the original's span.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch.utils._python_dispatch import (
    _disable_current_modes,
    _get_current_dispatch_mode,
)

from transpiler.frontend.recorder import (
    GraphBuilder,
    OpaqueValue,
    Recorder,
)
from transpiler.ir.graph import DEVICE, Graph, Node, Ref, TensorMeta, map_refs
from transpiler.ir.ops import EXTERN_LAYOUT, device_strides, on_meta, resolve_op

Rewrite = Callable[[Node, tuple, dict], object]  # returns NotImplemented to keep


@dataclass(frozen=True)
class SameOp:
    """What a rewrite returns to keep a node's op whole, with other arguments."""

    args: tuple
    kwargs: dict


def retrace(
    graph: Graph,
    rewrites: dict[str, Rewrite] | None = None,
    decompositions: dict | None = None,
    values: dict[str, object] | None = None,
) -> Graph:
    """`graph` rerun node by node, with `rewrites` (by target) and `decompositions`
    applied. `values`, when given, is filled with each node's value as it is rerun
    (meta tensors, by the original node's name): rewrites read earlier values there.
    """
    builder = GraphBuilder()
    builder.reserve(n.name for n in graph.nodes)  # values that survive keep names
    recorder = Recorder(builder, decompositions)
    values = {} if values is None else values
    rewrites = rewrites or {}
    with torch.device("meta"), torch.no_grad(), recorder:
        for node in graph.nodes:
            value = run_node(node, values, builder, recorder, rewrites)
            values[node.name] = value
            keep_name(node, value, builder, reserved={n.name for n in graph.nodes})
    builder_nodes = builder.nodes
    outputs = map_refs(graph.outputs, lambda r: _ref_of(values[r.name], builder))
    return graph.with_nodes(builder_nodes, outputs)


@contextlib.contextmanager
def computed_again(node: Node):
    """Ops a rewrite records inside carry `node`'s source line and origin: a
    node it computes again, not the node it rewrites."""
    origin = node.origin or node.target.split(".")[1].lstrip("_")
    with _recorded(node) as recorded:
        yield
    for i, n in recorded:
        if n.origin is None:
            recorded.nodes[i] = _with_origin(n, origin)


@contextlib.contextmanager
def recomputed(node: Node):
    """Ops a rewrite records inside are `node`'s own op, computed again at other
    positions: they keep its source line and its origin, None included (a cast
    of the program's own rounds where a decomposition's does not: Note
    [Rounding casts] in schedule.py)."""
    with _recorded(node) as recorded:
        yield
    for i, n in recorded:
        recorded.nodes[i] = _with_origin(n, node.origin)
        recorded.recorder.own_origin.add(n.name)


class _Recorded:
    """The nodes the recorder adds from `start` on, with their indices."""

    def __init__(self, recorder: Recorder):
        self.recorder, self.nodes = recorder, recorder.builder.nodes
        self.start = len(self.nodes)

    def __iter__(self):
        return ((i, self.nodes[i]) for i in range(self.start, len(self.nodes)))


@contextlib.contextmanager
def _recorded(node: Node):
    """Records under `node`'s source line; the nodes recorded."""
    recorder = _get_current_dispatch_mode()
    recorded, saved, recorder.span = _Recorded(recorder), recorder.span, node.span
    try:
        yield recorded
    finally:
        recorder.span = saved


def _with_origin(n: Node, origin: str | None) -> Node:
    return Node(n.name, n.op, n.target, n.args, n.kwargs, n.meta, n.span, origin)


def _ref_of(value, builder: GraphBuilder) -> Ref:
    return builder.ref(value, None)


def keep_name(node: Node, value, builder: GraphBuilder, reserved: set[str]) -> None:
    """Give a rewritten node's result the node's name, unless it is an older value
    (a rewrite like `x * 1 -> x`): names stay stable through passes."""
    if not isinstance(value, torch.Tensor) or node.op != "call":
        return
    current = builder.name_of(value)
    if current is not None and current != node.name and current not in reserved:
        builder.rename(current, node.name)


def arguments(node: Node, values: dict, read=None) -> tuple[tuple, dict]:
    """`node`'s arguments with the values of the nodes they name (`values`, or
    `read(ref)` where given), on the meta device."""
    read = read or (lambda r: values[r.name])
    args = map_refs(node.args, read)
    kwargs = {
        k: torch.device("meta") if v is DEVICE else map_refs(v, read)
        for k, v in node.kwargs
    }
    return args, kwargs


def run_node(
    node: Node,
    values: dict,
    builder: GraphBuilder,
    recorder: Recorder,
    rewrites: dict[str, Rewrite],
):
    """Rerun `node` on the meta values of the nodes before it (`values`), recorded
    by `recorder` into `builder`, with its rewrite if it has one; its value."""
    if node.op in ("input", "param") and not isinstance(node.meta, TensorMeta):
        builder.keep_opaque(node)
        return OpaqueValue(node.name)
    if node.op in ("input", "param"):
        m = node.tensor_meta
        with _disable_current_modes():  # a placeholder, not an op of the graph
            t = placeholder(m)
        builder.keep(node, t)
        return t
    args, kwargs = arguments(node, values)
    if node.target == "getitem" and isinstance(args[0], _StubResults):
        return _stub_result(node, args[0], builder)
    if node.target == "getitem":
        return args[0][args[1]]
    if node.is_fallback or node.is_loop:  # kept as they are; results picked apart
        return _fallback(node, values, builder)
    recorder.span = node.span
    start = len(builder.nodes)
    rewrite = rewrites.get(node.target)
    out = rewrite(node, args, kwargs) if rewrite else NotImplemented
    op = resolve_op(node.target)
    whole = isinstance(out, SameOp)
    if whole:
        args, kwargs, out = out.args, out.kwargs, NotImplemented
    if out is NotImplemented and op in recorder.decompositions and not whole:
        out = op(*args, **kwargs)
    elif out is NotImplemented:  # keep the op whole, even a composite one
        with _disable_current_modes():
            out = on_meta(node.target, args, kwargs)
            if node.target in EXTERN_LAYOUT:  # the layout the device's kernel gives it
                stride = device_strides(node.target, out, args)
                out = torch.empty_strided(
                    out.shape, stride, dtype=out.dtype, device="meta"
                )
        recorder.record(node.target, args, kwargs, out)
    origin = node.origin
    if len(builder.nodes) - start > 1 and origin is None:
        origin = node.target.split(".")[1].lstrip("_")
    for i in range(start, len(builder.nodes)):
        n = builder.nodes[i]
        if (
            n.origin is None
            and origin is not None
            and n.name not in recorder.own_origin
        ):
            builder.nodes[i] = _with_origin(n, origin)
    if isinstance(out, torch.Tensor) and not builder.knows(out):
        raise AssertionError(f"rewrite of {node.name} returned an unrecorded tensor")
    return out


def _fallback(node: Node, values: dict, builder: GraphBuilder):
    def ref(r: Ref) -> Ref:
        value = values[r.name]
        return (
            Ref(str(value))
            if isinstance(value, _StubResults)
            else builder.ref(value, None)
        )

    kwargs = tuple((k, map_refs(v, ref)) for k, v in node.kwargs)
    name = builder.add(
        node.op,
        node.target,
        map_refs(node.args, ref),
        kwargs,
        node.meta,
        node.span,
        base=node.name,
    )
    if name != node.name:
        builder.rename(name, node.name)
    if not isinstance(node.meta, tuple):  # a returning stub: one opaque value
        return OpaqueValue(node.name)
    return _StubResults(node.name)


class _StubResults(str):
    """The results of fallback code: its node's name; `getitem` nodes pick them."""


def _stub_result(node: Node, stub: _StubResults, builder: GraphBuilder):
    name = builder.add(
        "call",
        "getitem",
        (Ref(str(stub)), node.args[1]),
        (),
        node.meta,
        node.span,
        base=node.name,
    )
    if name != node.name:
        builder.rename(name, node.name)
    if not isinstance(node.meta, TensorMeta):
        return OpaqueValue(node.name)
    m = node.meta
    with _disable_current_modes():
        value = placeholder(m)
    builder.bind(value, node.name)
    return value


def placeholder(m: TensorMeta) -> torch.Tensor:
    """A meta tensor of `m`'s shape, strides and storage offset: a view the code
    takes of it has its offset from the same storage, as the value's own views
    have (a saved `k` of a split `qkv` starts 32 elements in: its transpose does
    too, and a kernel reading the transpose through the saved value subtracts
    nothing)."""
    if not m.offset:
        return torch.empty_strided(m.shape, m.stride, dtype=m.dtype, device="meta")
    extent = 1 + sum((n - 1) * s for n, s in zip(m.shape, m.stride) if n > 0)
    storage = torch.empty(m.offset + extent, dtype=m.dtype, device="meta")
    return torch.empty(0, dtype=m.dtype, device="meta").set_(
        storage.untyped_storage(), m.offset, m.shape, m.stride
    )


__all__ = [
    "SameOp",
    "arguments",
    "keep_name",
    "placeholder",
    "recomputed",
    "retrace",
    "run_node",
]
