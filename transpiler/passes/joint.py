"""The joint graph of a forward graph and its backward, from PyTorch's own autograd
formulas: the graph AOTAutograd traces for torch.compile's training.

Before:  x: f32[4,8] = input('x');  weight: f32[8] = param('weight')
         mul = aten.mul.Tensor(x, weight);  exp = aten.exp.default(mul)
         outputs: exp
After:   the same forward, then (the `detach` of each saved value left out here)
         tangent_0: f32[4,8] = input('tangent_0')      (d loss / d exp)
         mul_2 = aten.mul.Tensor(tangent_0, exp)       (d loss / d mul)
         mul_3 = aten.mul.Tensor(mul_2, x)
         mul_4 = aten.mul.Tensor(mul_2, weight)        (d loss / d x)
         sum_ = aten.sum.dim_IntList(mul_3, [0], True);  view = aten.view(sum_, [8])
         outputs: (exp, (mul_4, view))                  (d/dx, d/dweight)

Each forward node is rerun on meta tensors with grad enabled under a `Recorder`,
as `retrace` reruns them without; the inputs and parameters asked for require
gradients. `torch.autograd.grad` then runs the backward formulas PyTorch registered
for every op it recorded, and the ATen calls they make are recorded too: each
derivative is PyTorch's own (`native_layer_norm_backward`, `gelu_backward`, `mm` of
a tangent and a saved input), never one written here. One tangent input, the
gradient of the loss with respect to that output, comes in per forward output that
depends on something differentiated.

What the backward reads of the forward (a saved input, `exp`'s result) are `Ref`s to
forward values, so the graph is one: a partition decides later which of them the
forward keeps for the backward and which the backward computes again.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch._decomp import get_decompositions
from torch.utils._python_dispatch import _disable_current_modes

from transpiler.frontend.recorder import GraphBuilder, Recorder, Unsupported
from transpiler.ir.graph import Graph, Node, TensorMeta, Updated, leaves, map_refs
from transpiler.ir.ops import attention_arguments, fused_attention, on_meta
from transpiler.passes.decompose import decomposition_table
from transpiler.passes.retrace import arguments, keep_name, run_node

aten = torch.ops.aten


@dataclass(frozen=True)
class Joint:
    """A forward graph with its backward (`joint`). `graph.outputs` is
    `(forward outputs, gradients)`: one gradient per name of `wrt`, None where
    the outputs do not depend on it."""

    graph: Graph
    wrt: tuple[str, ...]  # inputs (parameter names) and parameters (their paths)
    tangents: tuple[str, ...]  # the input of each differentiable forward output
    # per tensor of the forward's outputs (in `leaves` order): whether it has one
    differentiable: tuple[bool, ...] = ()


# The backward ops PyTorch's formulas call that are formulas of ops kernels fuse:
# decomposed by `torch._decomp`, as the forward's composites are (decompose.py)
BACKWARD_DECOMPOSE = (
    aten.native_layer_norm_backward.default,
    aten.native_group_norm_backward.default,
    aten._softmax_backward_data.default,
    aten._log_softmax_backward_data.default,
    aten.gelu_backward.default,
    aten.silu_backward.default,
    aten.tanh_backward.default,
    aten.sigmoid_backward.default,
    aten.threshold_backward.default,
    aten.hardtanh_backward.default,
    aten.leaky_relu_backward.default,
    aten.elu_backward.default,
    aten.softplus_backward.default,
    aten.hardswish_backward.default,
    aten.hardsigmoid_backward.default,
    aten.native_dropout_backward.default,
    aten.nll_loss_backward.default,  # a scatter of one per row: a select
)


def joint(
    graph: Graph, wrt: Sequence[str], decomposed: bool = True, device: str = "cpu"
) -> Joint:
    """`graph` and the gradients of its outputs with respect to `wrt`: names of
    floating-point inputs, paths of parameters. `decomposed`: composite ops of
    both halves (a layer norm and its backward) as the ops kernels fuse, so that
    the partition may compute their parts again and the fuser fuse them.
    Attention is the fused kernel eager's runs on `device` (Note [Attention in
    the joint graph])."""
    table = {}
    if decomposed:
        table = decomposition_table(graph, backward=True)
        table |= get_decompositions(list(BACKWARD_DECOMPOSE))
    targets = {n.target: n for n in graph.nodes if n.op in ("input", "param")}
    missing = [name for name in wrt if name not in targets]
    assert not missing, f"no input or parameter {missing} in the graph"
    special = next((n for n in graph.nodes if n.is_fallback or n.is_loop), None)
    if special is not None:
        raise Unsupported("the backward of fallback code or a loop", special.span)
    builder = GraphBuilder()
    builder.reserve(n.name for n in graph.nodes)
    recorder = Recorder(builder, table)
    values: dict[str, object] = {}
    reserved = {n.name for n in graph.nodes}
    # what autograd saves for the backward is given back as the very tensor the
    # builder knows (unpacked, a saved result would be a new tensor object)
    keep_saved = torch.autograd.graph.saved_tensors_hooks(lambda t: t, lambda t: t)
    with torch.device("meta"), torch.enable_grad(), recorder, keep_saved:
        for node in graph.nodes:
            value = _run(node, values, builder, recorder, device)
            if node.op in ("input", "param") and node.target in wrt:
                with _disable_current_modes():
                    value.requires_grad_(True)
            values[node.name] = value
            keep_name(node, value, builder, reserved)
            for t in leaves(value):  # the backward of this op is this line's
                if isinstance(t, torch.Tensor) and t.grad_fn is not None:
                    t.grad_fn.metadata.setdefault("span", node.span)
    outputs = map_refs(graph.outputs, lambda r: values[r.name])
    if isinstance(outputs, Updated):  # the values written back into buffers (a
        outputs = outputs.result  # running mean) are no outputs: no gradient
    # an output that depends on what is differentiated (or is it: an input
    # returned as it is, whose gradient is then its tangent)
    flags = tuple(
        isinstance(t, torch.Tensor) and t.requires_grad
        for t in leaves(outputs)
        if isinstance(t, torch.Tensor)
    )
    differentiable = [
        t for t in leaves(outputs) if isinstance(t, torch.Tensor) and t.requires_grad
    ]
    tangents = []
    for i, out in enumerate(differentiable):
        with _disable_current_modes():  # an input of the backward, not an op
            tangent = torch.empty_strided(
                out.shape, out.stride(), dtype=out.dtype, device="meta"
            )
        builder.add_input(f"tangent_{i}", tangent)
        tangents.append(tangent)
    wanted = [values[targets[name].name] for name in wrt]
    backward = _BackwardRecorder(builder, table)
    with torch.device("meta"), backward:
        try:
            grads = torch.autograd.grad(
                differentiable, wanted, tangents, allow_unused=True
            )
        except (RuntimeError, NotImplementedError) as e:  # no formula: eager's too
            message = str(e).splitlines()[0]
            raise Unsupported(f"no backward: {message}", backward.span) from None
    refs = map_refs(graph.outputs, lambda r: builder.ref(values[r.name], None))
    grad_refs = tuple(None if g is None else builder.ref(g, None) for g in grads)
    result = graph.with_nodes(builder.nodes, (refs, grad_refs))
    result.lint()
    names = tuple(builder.name_of(t) for t in tangents)
    return Joint(result, tuple(wrt), names, flags)


def _run(
    node: Node,
    values: dict,
    builder: GraphBuilder,
    recorder: Recorder,
    device: str = "cpu",
):
    """`node` rerun with autograd: an op is called through the recorder, where a
    composite op kept whole in inference (attention) is decomposed, so that its
    backward is that of the ops it is made of."""
    if node.op != "call" or node.target == "getitem":
        return run_node(node, values, builder, recorder, {})
    with torch.set_grad_enabled(node.grad):  # `with torch.no_grad():` in the source
        return _call(node, values, recorder, device)


# Note [Attention in the joint graph]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# `scaled_dot_product_attention` picks a fused kernel by device; on the meta device
# it takes the math path, whose backward reads the whole attention matrix, saved.
# So the joint graph calls a fused kernel itself, whose autograd formula is its own
# fused backward: memory-efficient attention on cuda (in the generated code,
# `runtime_shim.attention`, which runs the kernel PyTorch's dispatcher picks where
# the module runs: Note [Attention kernels at run time]), the CPU's flash attention
# on cpu. Each saves its output and the rows' logsumexp, not the matrix; both
# halves call them as extern ops. On cuda the kernel also draws attention's
# dropout, from torch's generator as eager's kernel does; it returns the seed and
# offset it drew with, saved for its backward, which draws the same mask again.
# Grouped heads and masks the kernels do not take (any on cuda, where eager's pads
# them first; on the CPU a boolean one, or one with a gradient: T5's learned
# position bias) keep the math path, as does dropout on the CPU, written out by
# the frontend (`trace.DropoutAsOp`, `ir.ops.fused_attention`).
FUSED_ATTENTION = {
    "cuda": aten._scaled_dot_product_efficient_attention.default,
    "cpu": aten._scaled_dot_product_flash_attention_for_cpu.default,
}


def _fused_attention(args, kwargs, device: str):
    """The output of the device's fused attention kernel, or None where it does
    not apply (then the op decomposes)."""
    given = attention_arguments(args, kwargs)
    if not fused_attention(given, device):
        return None
    q, k, v = given["query"], given["key"], given["value"]
    causal, scale = given.get("is_causal", False), given.get("scale")
    p = float(given.get("dropout_p", 0.0))
    if device == "cuda":
        out = FUSED_ATTENTION["cuda"](q, k, v, None, True, p, causal, scale=scale)
    else:
        mask = given.get("attn_mask")
        out = FUSED_ATTENTION["cpu"](q, k, v, 0.0, causal, attn_mask=mask, scale=scale)
    return out[0]


def _call(node: Node, values: dict, recorder: Recorder, device: str = "cpu"):
    recorder.span = node.span
    args, kwargs = arguments(node, values)
    out = None
    if node.target == "aten.scaled_dot_product_attention.default":
        out = _fused_attention(args, kwargs, device)
    if out is None:
        out = on_meta(node.target, args, kwargs)
    meta = node.meta
    if isinstance(meta, TensorMeta) and out.stride() != meta.stride:
        # decomposed, the op lays its result out as its parts do; what follows was
        # traced for the layout the device's kernel gives it (`EXTERN_LAYOUT`)
        laid_out = torch.empty_strided(meta.shape, meta.stride, dtype=meta.dtype)
        out = laid_out.copy_(out)
    return out


class _BackwardRecorder(Recorder):
    """Records the backward's ops, each with the span of the forward op whose
    gradient formula runs it."""

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        node = torch._C._current_autograd_node()
        if node is not None:
            self.span = node.metadata.get("span", self.span)
        return super().__torch_dispatch__(func, types, args, kwargs)


__all__ = ["Joint", "joint"]
