"""Decompose composite ops into the ops our kernels fuse, using PyTorch's own rules.

Before:  ln: f32[8,64] = aten.native_layer_norm.default(x, [64], w, b, 1e-05)
After:   var_mean = aten.var_mean.correction(x, [1], correction=0, keepdim=True)
         add = aten.add.Tensor(getitem_1, 1e-05); rsqrt = aten.rsqrt.default(add)
         sub = aten.sub.Tensor(x, getitem_0) ... (all tagged origin="native_layer_norm")

The table is `torch._decomp`'s entry for each op in `DECOMPOSE`; nothing here
re-derives an op by hand. Ops not listed stay whole (matmuls, attention: extern calls),
and so does exact GELU, a kernel op of its own: only `approximate="tanh"` decomposes.

Composite ops that alias their input where its layout allows and copy otherwise
(`contiguous`, `reshape`, `to`: Note [Views and copies that may alias] in ir/ops.py)
decompose by their own composite kernel, wherever they appear, decompositions'
insides included: softmax's `x.contiguous()` of a transposed `x` becomes
`clone(x, memory_format=torch.contiguous_format)`, which kernels compute, and of a
contiguous `x` becomes `x` itself.
"""

from __future__ import annotations

import torch
from torch._decomp import get_decompositions

from transpiler.ir.graph import Graph, Node
from transpiler.ir.ops import POINTWISE, copies_that_may_alias, may_copy
from transpiler.passes.dce import dce
from transpiler.passes.retrace import retrace

aten = torch.ops.aten

# Note [Integer division by zero]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# On integers, fmod, remainder and floor_divide by zero raise in eager, and a
# kernel cannot raise (C++'s `%` by zero stops the process). So on integers these
# run in kernels only by a Scalar that is neither 0 nor -1 (INT_MIN % -1 traps
# too); otherwise the quotient is eager's `div(a, b, rounding_mode=...)`, which
# raises as they do, and the remainder `a - q * b` is computed in kernels.
INTEGER_DIVISIONS = {  # op -> the rounding of its quotient
    aten.fmod.Tensor: "trunc",
    aten.fmod.Scalar: "trunc",
    aten.remainder.Tensor: "floor",
    aten.remainder.Scalar: "floor",
    aten.remainder.Scalar_Tensor: "floor",
    aten.floor_divide.default: "floor",
    aten.floor_divide.Scalar: "floor",
}

# Note [any and all]
# ~~~~~~~~~~~~~~~~~~
# `x.any(dims)` is whether the largest of `x != 0`, as 0.0 or 1.0, is 1: a max
# reduction kernels compute (likewise `all`, the smallest). Of bool or float
# inputs only: any and all of uint8 return uint8 and stay whole.
ANY_ALL = {
    aten.any.default: torch.amax,
    aten.any.dim: torch.amax,
    aten.any.dims: torch.amax,
    aten.all.default: torch.amin,
    aten.all.dim: torch.amin,
    aten.all.dims: torch.amin,
}

DECOMPOSE = (
    aten.native_layer_norm.default,
    aten._softmax.default,
    aten._log_softmax.default,
    aten._safe_softmax.default,
    aten.gelu.default,
    aten.silu.default,
    aten.hardtanh.default,
    aten.leaky_relu.default,
    aten.split.Tensor,
    aten.stack.default,
    aten.embedding.default,
    aten.index_select.default,
    aten.nll_loss_forward.default,
    aten.addcmul.default,
    aten.lerp.Scalar,
    aten.zeros_like.default,
    aten.ones_like.default,
    aten.native_batch_norm.default,
    # reductions that are formulas of the reductions kernels compute
    aten.std.correction,
    aten.std.dim,
    aten.std_mean.correction,
    aten.logsumexp.default,
    aten.linalg_vector_norm.default,
    aten.native_group_norm.default,
    *ANY_ALL,
    # elementwise ops that are formulas of kernel ops
    aten.hardswish.default,
    aten.hardsigmoid.default,
    aten.hardshrink.default,
    aten.softshrink.default,
    aten.threshold.default,
    aten.elu.default,
    aten.celu.default,
    aten.softplus.default,
    aten.mish.default,
    aten.glu.default,
    aten.logit.default,
    aten.masked_fill.Scalar,
    aten.lerp.Tensor,
    aten.addcdiv.default,
    aten.xlogy.Tensor,
    aten.heaviside.default,
    aten.sinc.default,
    aten.isinf.default,
    aten.isfinite.default,  # a composite op, in logaddexp's decomposition
    aten.isposinf.default,
    aten.isneginf.default,
    aten.nan_to_num.default,
    aten.logaddexp.default,
    aten.logaddexp2.default,
    aten.clamp.Tensor,
    aten.clamp_min.Tensor,
    aten.clamp_max.Tensor,
    aten.logical_xor.default,
    aten.rad2deg.default,
    aten.frac.default,
    aten.round.decimals,
    aten.pow.Tensor_Scalar,  # of bools by a bool: Note [Powers of bools]
    # kernel ops on floats; on integers, a division that raises where eager does
    *(op for op in INTEGER_DIVISIONS),
)
BATCH_NORM = "aten.native_batch_norm.default"


def decompose(graph: Graph) -> Graph:
    if not any(_decomposes(n) for n in graph.nodes):
        return graph
    table = get_decompositions(list(DECOMPOSE))
    for op in DECOMPOSE:
        if op not in table:  # no entry in torch._decomp: the composite's own kernel
            table[op] = op.decompose
    for op in DECOMPOSE:
        if str(op) in POINTWISE:
            table[op] = _unless_kernel_op(str(op), table[op])
    if _reads_statistics(dce(graph)):
        del table[aten.native_batch_norm.default]
    else:
        table[aten.native_batch_norm.default] = _in_eval(
            table[aten.native_batch_norm.default]
        )
    table[aten.round.decimals] = _round_decimals
    table[aten.native_group_norm.default] = _contiguous_only(
        table[aten.native_group_norm.default]
    )
    table[aten.stack.default] = _stack
    table[aten.logsumexp.default] = _logsumexp
    table[aten.pow.Tensor_Scalar] = _pow_of_bools
    for op, mode in INTEGER_DIVISIONS.items():
        table[op] = _integer_division(op, mode)
    for op, reduce in ANY_ALL.items():
        table[op] = any_all(reduce)
    table.update({op: op.decompose for op in copies_that_may_alias()})
    return retrace(graph, decompositions=table)


# Note [Batch norm in eval]
# ~~~~~~~~~~~~~~~~~~~~~~~~~
# With its running statistics (eval mode), batch norm is a per-channel scale and
# shift: decomposed, it fuses into the kernel of what follows it, after a
# convolution that is its ReLU and residual add, so the normalized activation is
# never written on its own. In training it updates the running statistics in
# place and stays whole. The statistics it also returns differ between devices
# (Note in ir/device_outputs.py): a graph that reads them keeps the op whole.


def _in_eval(decomposition):
    def decompose_in_eval(*args, **kwargs):
        if _argument(args, kwargs, 5, "training"):
            return NotImplemented
        return decomposition(*args, **kwargs)

    return decompose_in_eval


def _argument(args: tuple, kwargs: dict, index: int, name: str):
    return args[index] if len(args) > index else kwargs.get(name)


def _logsumexp(x, dim, keepdim=False):
    """log(sum(exp(x - m))) + m with m the max, as a row's max and the sum of
    exponentials shifted by it (Note [Online softmax] in codegen/triton.py): where
    m is infinite, eager's rule shifts by 0 instead and gives m itself (-inf for a
    row of -inf, inf where one is inf), so m is taken there."""
    if not x.dtype.is_floating_point or x.numel() == 0:
        return NotImplemented
    dim = list(range(x.dim())) if not dim else dim
    m = torch.amax(x, dim, keepdim=True)
    total = torch.sum(torch.exp(x - m), dim, keepdim=True)
    out = torch.where(torch.isinf(m), m, torch.log(total) + m)
    return out if keepdim else out.squeeze(dim)


def _stack(tensors, dim=0):
    """torch.stack as a cat of the inputs with the new dimension, so that the cat
    has the stack's shape (torch's rule cats them flat, then views the result: a
    view of a value computed in a kernel, which a reduction over the stacked
    dimension cannot read in its own kernel)."""
    dim = dim % (tensors[0].dim() + 1)
    return torch.cat([t.unsqueeze(dim) for t in tensors], dim)


def _round_decimals(x, decimals=0):
    """torch.round(x, decimals=d) as eager's kernel computes it: round(x * 10^d) /
    10^d, or round(x / 10^-d) * 10^-d for d < 0."""
    if not x.dtype.is_floating_point:
        return NotImplemented
    if decimals == 0:
        return torch.round(x)
    scale = 10.0 ** abs(decimals)
    if decimals > 0:
        return torch.round(x * scale) / scale
    return torch.round(x / scale) * scale


# Note [Powers of bools]
# ~~~~~~~~~~~~~~~~~~~~~~
# Eager's `x ** True` and `x ** False` of a bool tensor are bool tensors (`x`, and
# all true), where the meta kernel says int64: they are written as what eager
# returns. Other powers are kernel ops.


def _pow_of_bools(x, exponent):
    if x.dtype != torch.bool or not isinstance(exponent, bool):
        return NotImplemented
    return x.clone() if exponent else torch.ones_like(x)


def _contiguous_only(decomposition):
    """`decomposition` for a contiguous input; other inputs keep the op, whose
    kernels raise on them (group norm's do, on every device)."""

    def decompose_contiguous(x, *args, **kwargs):
        if not x.is_contiguous():
            return NotImplemented
        return decomposition(x, *args, **kwargs)

    return decompose_contiguous


def any_all(reduce):
    def decompose_any_all(x, dim=None, keepdim=False):
        if x.dtype != torch.bool and not x.dtype.is_floating_point:
            return NotImplemented
        dims = [] if dim is None else [dim] if isinstance(dim, int) else list(dim)
        nonzero = (x if x.dtype == torch.bool else x != 0).to(torch.int8)
        return reduce(nonzero, dims, keepdim) != 0

    return decompose_any_all


def _in_kernel_on_integers(divisor) -> bool:
    """Whether an integer division by `divisor` cannot trap (Note [Integer
    division by zero])."""
    return isinstance(divisor, (int, float)) and divisor not in (0, -1)


def _integer_division(op, mode: str):
    def decompose_integer_division(a, b):
        if torch.result_type(a, b).is_floating_point or _in_kernel_on_integers(b):
            return NotImplemented
        q = torch.div(a, b, rounding_mode=mode)
        floor_divide = op in (aten.floor_divide.default, aten.floor_divide.Scalar)
        return q if floor_divide else a - q * b

    return decompose_integer_division


def _reads_statistics(graph: Graph) -> bool:
    """Whether a batch norm's mean or inverse standard deviation is read (in a
    graph without dead code)."""
    norms = {n.name for n in graph.nodes if n.target == BATCH_NORM}
    return any(
        n.target == "getitem" and n.args[0].name in norms and n.args[1] != 0
        for n in graph.nodes
    )


def _decomposes(node: Node) -> bool:
    if not node.target.startswith("aten."):
        return False
    if may_copy(node.target):
        return True
    if _op(node.target) not in DECOMPOSE:
        return False
    if node.target == BATCH_NORM:
        return not _argument(node.args, dict(node.kwargs), 5, "training")
    if node.target == "aten.pow.Tensor_Scalar":
        return isinstance(node.args[1], bool)
    if _op(node.target) in INTEGER_DIVISIONS:
        floats = node.tensor_meta.dtype.is_floating_point
        return not floats and not _in_kernel_on_integers(node.args[1])
    return not _kernel_op(node.target, dict(node.kwargs))


def _kernel_op(target: str, kwargs: dict) -> bool:
    """Whether kernels compute the op whole: a `POINTWISE` row accepts these keyword
    arguments (exact GELU does; tanh GELU decomposes)."""
    row = POINTWISE.get(target)
    return row is not None and all((k, v) in row.keywords for k, v in kwargs.items())


def _unless_kernel_op(target: str, decomposition):
    """The decomposition, but NotImplemented (keep the op whole) for a kernel op."""

    def decompose_unless_kernel_op(*args, **kwargs):
        if _kernel_op(target, kwargs):
            return NotImplemented
        return decomposition(*args, **kwargs)

    return decompose_unless_kernel_op


def _op(target: str):
    from transpiler.frontend.recorder import resolve_op

    return resolve_op(target)
