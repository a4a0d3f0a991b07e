"""Convolutions read and write channels-last activations (NHWC in memory).

Before:  conv: f32[2,64,56,56] = aten.convolution.default(x, w, None, ...)
         relu: f32[2,64,56,56] = aten.relu.default(conv)
After:   clone: f32[2,3,224,224] stride=(150528, 1, 672, 3)
                = aten.clone.default(x, memory_format=torch.channels_last)
         clone_1: f32[64,3,7,7] stride=(147, 1, 21, 3)
                = aten.clone.default(w, memory_format=torch.channels_last)
         conv: f32[2,64,56,56] stride=(200704, 1, 3584, 64)
                = aten.convolution.default(clone, clone_1, None, ...)
         relu: f32[2,64,56,56] stride=(200704, 1, 3584, 64) = aten.relu.default(conv)

Note [Channels-last convolutions]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
oneDNN on CPUs and cuDNN on GPUs run 2-D convolutions fastest on NHWC data (the
tensor cores of TF32 and half precision want channels innermost), and both return
NHWC for NHWC input (`ir.ops.convolution_layout`). So a network of convolutions
stays NHWC once its input is converted: the kernels between convolutions (batch
norm, activations, residual adds) compute on the layout they receive, iterating in
its memory order (`KernelBuilder.order` in passes/schedule.py), and the copy is made
once, of the first convolution's input. The libraries want the weights in the same
layout, and would copy each weight whose kernel is larger than 1x1 to it on every
call (an `aten::copy_` each, tens of microseconds of host time); the graph copies
them itself instead, in a kernel of its own (a 1x1 weight is already both layouts).
Values the graph returns get back the
contiguous layout they had, so callers see the strides eager code gives them, and a
graph with fallback code or a loop on tensor data in it is left as it is: the
source code there could `view` a value that is no longer contiguous. In compiled
code, a view the new layout does not allow (`y.view(n, -1)` flattening an NHWC
activation for a linear layer) becomes a copy of the same shape, as `reshape` makes.

As TorchInductor's layout optimization does, a graph with a grouped convolution of
more than one input channel per group stays NCHW: those run many times slower
channels-last on GPUs. Depthwise convolutions (one channel per group) gain from it.
So does a graph with few convolutions among many other ops (`NODES_PER_CONVOLUTION`:
a vision transformer's patch embedding), where there is little to gain, and where
cuDNN's NHWC algorithm would round the one convolution otherwise than eager's NCHW
one does (TF32 by default). Transposed convolutions are left alone.
"""

from __future__ import annotations

import torch

from transpiler.ir.graph import (
    Graph,
    Node,
    Ref,
    TensorMeta,
    contiguous_strides,
    iter_refs,
    map_refs,
)
from transpiler.ir.ops import is_view, resolve_op
from transpiler.passes.retrace import retrace

CONVOLUTION = "aten.convolution.default"
NODES_PER_CONVOLUTION = 300  # more ops than this per convolution: left NCHW
# Ops that read memory through explicit strides (an in-place write to a view
# becomes one): traced for the old layout, they would read the new one wrongly
STRIDED = frozenset(
    {
        "aten.as_strided.default",
        "aten.as_strided_scatter.default",
        "aten._reshape_alias.default",
    }
)


def channels_last(graph: Graph) -> Graph:
    nodes = graph.by_name()
    convs = [n for n in graph.nodes if n.target == CONVOLUTION and _2d(n, nodes)]
    if not convs or any(_grouped(n, nodes) for n in convs):
        return graph
    if len(graph.nodes) >= NODES_PER_CONVOLUTION * len(convs):
        return graph  # a patch embedding in front of a transformer
    if any(n.is_fallback or n.is_loop for n in graph.nodes):
        return graph  # source code reading a value sees the strides eager gives it
    if any(n.target in STRIDED for n in graph.nodes):
        return graph  # its explicit strides were computed for the old layout
    chosen = {n.name for n in convs}

    def rewrite(node: Node, args, kwargs):
        if node.name not in chosen:
            return NotImplemented
        x = args[0].contiguous(memory_format=torch.channels_last)
        w = args[1].contiguous(memory_format=torch.channels_last)
        return resolve_op(node.target)(x, w, *args[2:], **kwargs)

    rewrites = {CONVOLUTION: rewrite}
    rewrites.update({n.target: _view_or_copy for n in graph.nodes if _view(n)})
    return _outputs_as_before(graph, retrace(graph, rewrites=rewrites))


def _view(node: Node) -> bool:
    return node.target.startswith("aten.") and is_view(node.target)


def _view_or_copy(node: Node, args, kwargs):
    """The view, or where the new layout does not allow it (`y.view(n, -1)` of an
    NHWC activation), a copy of the same shape, as `reshape` makes."""
    try:
        return resolve_op(node.target)(*args, **kwargs)
    except RuntimeError:
        return args[0].reshape(node.tensor_meta.shape)


def _2d(node: Node, nodes: dict[str, Node]) -> bool:
    """A 2-D, not transposed convolution of tensors."""
    x, w = node.args[0], node.args[1]
    if not (isinstance(x, Ref) and isinstance(w, Ref)):
        return False
    meta = nodes[x.name].meta
    transposed = node.args[6] if len(node.args) > 6 else False
    return isinstance(meta, TensorMeta) and len(meta.shape) == 4 and not transposed


def _grouped(node: Node, nodes: dict[str, Node]) -> bool:
    """A grouped convolution with more than one input channel per group."""
    groups = node.args[8] if len(node.args) > 8 else 1
    return groups > 1 and nodes[node.args[1].name].tensor_meta.shape[1] > 1


def _outputs_as_before(before: Graph, after: Graph) -> Graph:
    """`after`, with each returned value that was contiguous in `before` and is not
    now copied back to contiguous memory."""
    was = before.by_name()
    now = after.by_name()
    old_refs = iter(list(iter_refs(before.outputs)))
    taken = set(now)
    added: list[Node] = []

    def restore(ref: Ref) -> Ref:
        old = was[next(old_refs).name].meta
        new = now[ref.name].meta
        if not (isinstance(old, TensorMeta) and isinstance(new, TensorMeta)):
            return ref
        if not old.is_contiguous() or new.is_contiguous():
            return ref
        name = f"{ref.name}_contiguous"
        while name in taken:
            name += "_"
        taken.add(name)
        meta = TensorMeta(new.shape, contiguous_strides(new.shape), 0, new.dtype)
        kwargs = (("memory_format", torch.contiguous_format),)
        span = now[ref.name].span
        added.append(
            Node(name, "call", "aten.clone.default", (ref,), kwargs, meta, span)
        )
        return Ref(name)

    outputs = map_refs(after.outputs, restore)
    if not added:
        return after
    return after.with_nodes(list(after.nodes) + added, outputs)
