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

import itertools
import math
import struct

import torch
from torch._decomp import get_decompositions

from transpiler.ir.graph import Graph, Node, TensorMeta
from transpiler.ir.ops import (
    ATOMIC_TYPES,
    EXTREMA,
    EXTREMA_TYPES,
    POINTWISE,
    SUPPORTED_DTYPES,
    copies_that_may_alias,
    may_copy,
    resolve_op,
)
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

# Note [Rounded divisions]
# ~~~~~~~~~~~~~~~~~~~~~~~~
# `torch.div(a, b, rounding_mode=...)` (`x // y` of floats, a position's bucket in
# relative attention): of floats, 'floor' is floor_divide (its kernel formula is
# eager's) and 'trunc' is the quotient truncated, as eager computes it. Of
# integers, by a Scalar that cannot trap (Note [Integer division by zero]),
# 'floor' is floor_divide and 'trunc' the exact quotient of `a - fmod(a, b)` by b;
# by a tensor, the op itself, which raises on a zero as eager does.
ROUNDED_DIVISIONS = (aten.div.Tensor_mode, aten.div.Scalar_mode)

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

# Note [Pooling as windows]
# ~~~~~~~~~~~~~~~~~~~~~~~~~
# A max or average pool with a fixed window is, for each offset (i, j) within the
# window, a strided slice of the input padded by the pool's padding (-inf for a
# max, 0 for an average), and the maximum or the sum of those slices: data
# movement and pointwise ops that kernels compute as one load per offset, masked
# at the padding, into the consumer's kernel (a ReLU or a residual add after the
# pool), never a pooled tensor on its own. An average divides by the window's
# size, or with `count_include_pad=False` by how many of its elements lie within
# the input, itself the same sum over a padded tensor of ones (a constant
# kernels fold). A max pool whose indices are read, `ceil_mode` windows that
# overhang the padding, and integer maxima stay whole. Nearest-neighbour
# upsampling by whole factors is an expand and a reshape: each output element
# reads the input at its coordinates divided by the factor, index arithmetic.
POOLS = {
    aten.max_pool2d_with_indices.default: 2,
    aten.max_pool3d_with_indices.default: 3,
    aten.avg_pool2d.default: 2,
    aten.avg_pool3d.default: 3,
    aten.avg_pool1d.default: 1,
}
ADAPTIVE_AVG_POOLS = {
    aten._adaptive_avg_pool2d.default: 2,
    aten._adaptive_avg_pool3d.default: 3,
}
# An adaptive max pool whose output divides the input is a max over each window's
# own dimensions of the input viewed as (..., output, window, ...): a reduction
# (timm's `SelectAdaptivePool2d("max")`, to 1 x 1: a max over H and W); one whose
# windows differ, the maximum of gathers, as an average's sum (indices read:
# the op).
ADAPTIVE_MAX_POOLS = {
    aten.adaptive_max_pool2d.default: 2,
    aten.adaptive_max_pool3d.default: 3,
}
UPSAMPLE_NEAREST = (
    aten.upsample_nearest1d.default,
    aten.upsample_nearest2d.default,
    aten.upsample_nearest3d.default,
)

# Note [Scatters of one element per row]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# `x.scatter(d, index, src)` with one index per row along `d` (index of x's shape
# but 1 along d: a one-hot, nll_loss's backward) writes each row at most once,
# so it is a select: where(positions along d == index, src, x), a pointwise op
# kernels compute, reading x, src and the index where a copy of x and an extern
# scatter would write x twice (cross-entropy's backward: a zero-filled matrix
# of logits' size, then the scatter, then the kernel reading it). Its indices are
# checked as eager's are (passes/check_indices.py). Other scatters write in a
# kernel of their own, as `index_put` (below).
SCATTERS = (aten.scatter.value, aten.scatter.src)

# `x.index_add(dim, index, src)` is `x.index_put([None] * dim + [index], src,
# accumulate=True)`, and `x.scatter_add(dim, index, src)` is the same with an
# index tensor for every dimension: `index` along `dim`, the positions along the
# others. Both then run in the kernel of a scatter that adds (Note [Scatters] in
# schedule.py), for the dtypes both backends add in kernels. `index_copy` and
# `index_fill` are `index_put` along `dim` without `accumulate`, and `scatter`
# (`scatter_reduce` of sums, with `include_self`) its twin with positions as
# `scatter_add`'s: kernels that write (any dtype kernels hold) or add. None but
# `index_fill` counts a negative index from the end, which passes/check_indices.py
# raises on.
ADDS = (aten.index_add.default, aten.scatter_add.default)
ADD_TYPES = tuple(t for t in ATOMIC_TYPES["cuda"] if t in ATOMIC_TYPES["cpu"])
EXTREMA_KERNEL_TYPES = tuple(
    t for t in EXTREMA_TYPES["cuda"] if t in EXTREMA_TYPES["cpu"]
)
INDEX_FILLS = (aten.index_fill.int_Scalar, aten.index_fill.int_Tensor)
WRITES = (aten.index_copy.default, *INDEX_FILLS)
SCATTER_REDUCE = aten.scatter_reduce.two
REDUCED = ("sum", "mean")  # the reductions of SCATTER_REDUCE scatters add
INDEX_REDUCE = aten.index_reduce.default  # of means, maxima and minima
# the reductions kernels compute of the scatters that reduce
REDUCTIONS = {
    str(SCATTER_REDUCE): (*REDUCED, *EXTREMA),
    str(INDEX_REDUCE): ("mean", *EXTREMA),
}
# ops whose index has one dimension (the rest: one index per element of `src`)
ALONG_DIM = (
    aten.index_add.default,
    aten.index_copy.default,
    INDEX_REDUCE,
    *INDEX_FILLS,
)

# Note [Masked scatters]
# ~~~~~~~~~~~~~~~~~~~~~
# `x.masked_scatter(mask, source)` (a multimodal model placing image features at
# the image tokens' embeddings) gives each element where the mask holds, in
# row-major order, the next element of `source`: element k of the flattened
# source, k the number of such elements before it. That is a scan of the mask
# (a cumsum), a gather from `source` at it, and a select, all kernel ops. A mask
# expanded along its trailing dimensions (`(ids == image_token)[..., None]
# .expand_as(embeds)`) holds along each row of them alike: the scan counts its
# rows (`inner` elements each), and a row's elements take `inner` consecutive
# source elements: a row of the source seen as rows of `inner` (where its size
# is a multiple of `inner`). The scan is one kernel program along all the mask's
# rows, so only masks of up to `MASKED_SCATTER_ROWS` rows decompose; eager's
# kernel scans in parallel. Eager raises where the source holds fewer elements
# than the mask selects; passes/check_indices.py checks that, as it checks
# indices.
MASKED_SCATTER = aten.masked_scatter.default
MASKED_SCATTER_ROWS = 1 << 16

# `x[mask] = v` (`index_put` with one bool index, over dimensions p.. of x) of
# values the same for every element the mask selects (one value, or a row of
# the dimensions after the mask's) writes them wherever the mask holds:
# `where(mask, v, x)`, the mask viewed along those dimensions, a pointwise op
# (`x + where(mask, v, 0)` where it accumulates), not the mask's `nonzero`
# (data-dependent, a sync) and a scatter. Values of a row for each selected
# element of a mask over x's leading dimensions (older LLaVA's
# `inputs_embeds[image_mask] = image_features`) are x's masked scatter of them
# (Note [Masked scatters]), after a check that the mask selects as many rows as
# there are values: eager raises otherwise ("shape mismatch").
INDEX_PUT = aten.index_put.default
ROWS_MESSAGE = (
    "shape mismatch: value tensor of shape {shape} cannot be broadcast to "
    "indexing result: the mask selects another number of rows"
)

# `as_strided_scatter(base, src, size, stride, offset)` (a slice assigned into a
# tensor: `self.cache[:, :, pos:end] = k`, how the recorder writes any view of a
# tensor written in place) writes `src` at the elements of a strided view of
# base's memory: an `index_put` into base seen flat, at the view's addresses
# (positions, computed where the kernel writes: Note [Positions as indices] in
# schedule.py), for a contiguous base the view stays inside.
STRIDED_SCATTER = aten.as_strided_scatter.default

# Note [Pads and interpolation as gathers]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A reflect, replicate or circular pad, and a linear, bilinear, trilinear or
# bicubic interpolation (or a nearest one by other than whole factors), read the
# input at source coordinates that are functions of the output's: `n - 1 -
# |n - 1 - |p||` along a reflected dimension, `clamp(p, 0, n - 1)` along a
# replicated one, `p mod n` along a wrapped one, `floor((p + 0.5) * scale - 0.5)`
# and its neighbour for a linear one. Each is
# `x[..., i_h[:, None], i_w]`, one gather with an index tensor per dimension,
# broadcast together (a pad's own decomposition here; the interpolations' are
# torch's, with weights that are functions of the positions too). The indices
# are positions, computed where the gather reads them (Note [Positions as
# indices] in schedule.py): one kernel reads the input and writes the result.
# An adaptive average pool whose windows differ in length is a sum of such
# gathers, one for each position within the longest window, each zero past its
# window's end (`_adaptive_avg_by_gathers`).
REFLECT_PADS = (
    aten.reflection_pad1d.default,
    aten.reflection_pad2d.default,
    aten.reflection_pad3d.default,
)
REPLICATE_PADS = (
    aten.replication_pad1d.default,
    aten.replication_pad2d.default,
    aten.replication_pad3d.default,
)
INTERPOLATIONS = (
    aten.upsample_linear1d.default,
    aten.upsample_bilinear2d.default,
    aten.upsample_trilinear3d.default,
    aten.upsample_bicubic2d.default,
    aten._upsample_nearest_exact1d.default,
    aten._upsample_nearest_exact2d.default,
    aten._upsample_nearest_exact3d.default,
)

DECOMPOSE = (
    *POOLS,
    *ADAPTIVE_AVG_POOLS,
    *ADAPTIVE_MAX_POOLS,
    *UPSAMPLE_NEAREST,
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
    aten.cat.default,  # of one piece: a copy (`_one_piece_cat`)
    aten.embedding.default,
    aten.index_select.default,
    aten.nll_loss_forward.default,
    aten.addcmul.default,
    aten.lerp.Scalar,
    aten.zeros_like.default,
    aten.ones_like.default,
    aten.zeros.default,  # constants: `full`, which kernels compute
    aten.ones.default,
    aten.new_zeros.default,
    aten.new_ones.default,
    aten.native_batch_norm.default,
    # reductions that are formulas of the reductions kernels compute
    aten.std.correction,
    aten.std.dim,
    aten.std_mean.correction,
    aten.logsumexp.default,
    aten.topk.default,  # small k: Note [Top-k in rounds]
    aten.max.dim,  # the extreme and its position: two reductions kernels compute
    aten.min.dim,
    aten.argmax.default,  # of one element a row: position 0
    aten.argmin.default,
    aten.linalg_vector_norm.default,
    aten.native_group_norm.default,
    aten.nansum.default,  # a sum of where(isnan(x), 0, x)
    aten.count_nonzero.dim_IntList,  # a sum of x != 0
    aten.count_nonzero.default,
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
    aten.deg2rad.default,
    aten.rsub.Tensor,
    aten.log_sigmoid_forward.default,  # F.logsigmoid
    aten._prelu_kernel.default,
    aten.special_xlog1py.default,
    aten.special_entr.default,
    aten.ldexp.Tensor,
    # losses that are pointwise formulas and a mean or a sum
    aten.mse_loss.default,
    aten.huber_loss.default,
    aten.soft_margin_loss.default,
    aten.binary_cross_entropy.default,
    # of f32 and f64 only: Note [Steps in halves]
    aten.binary_cross_entropy_with_logits.default,
    aten.log_sigmoid.default,
    # a triangle: where(column - row <= k, x, 0), positions kernels compute
    aten.tril.default,
    aten.triu.default,
    aten.repeat.default,  # an expand of the input, read through index arithmetic
    # reshapes and a permutation: read by the next kernel through index arithmetic
    # (pixel shuffles on the GPU only: `GPU_ONLY`)
    aten.pixel_shuffle.default,
    aten.pixel_unshuffle.default,
    aten.channel_shuffle.default,
    aten.frac.default,
    aten.round.decimals,
    aten.pow.Tensor_Scalar,  # of bools by a bool: Note [Powers of bools]
    *SCATTERS,
    *ADDS,
    *WRITES,
    SCATTER_REDUCE,
    INDEX_REDUCE,
    MASKED_SCATTER,
    INDEX_PUT,
    STRIDED_SCATTER,
    *REFLECT_PADS,
    *REPLICATE_PADS,
    *INTERPOLATIONS,
    # kernel ops on floats; on integers, a division that raises where eager does
    *(op for op in INTEGER_DIVISIONS),
    *ROUNDED_DIVISIONS,
)
BATCH_NORM = "aten.native_batch_norm.default"
# Decomposed for the GPU only. A pixel shuffle's reader on the CPU walks the output
# rows with an inner loop as long as the upscale factor (the rest of its position is
# divided out per element), where PyTorch's own shuffle copies contiguous runs:
# an ESPCN head's shuffle and GELU at [4, 256, 32, 32] took 6.7 ms as one kernel,
# 2.9 ms as PyTorch's shuffle and a kernel.
GPU_ONLY = ("aten.pixel_shuffle.default", "aten.pixel_unshuffle.default")


def decompose(graph: Graph, device: str = "cpu") -> Graph:
    nodes = graph.by_name()
    if not any(_decomposes(n, nodes, device) for n in graph.nodes):
        return graph
    table = decomposition_table(graph)
    if device != "cuda":
        for target in GPU_ONLY:
            del table[resolve_op(target)]
    return retrace(graph, decompositions=table)


def decomposition_table(graph: Graph, backward: bool = False) -> dict:
    """Each op of `DECOMPOSE` -> how it is decomposed in `graph` (batch norm and
    pools decompose by what the graph reads of them). With `backward` (the joint
    graph, passes/joint.py), a max pool's backward reads its indices: it stays
    whole, and computes them."""
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
        table[aten.native_batch_norm.default] = _writing_nothing(
            table[aten.native_batch_norm.default]
        )
    table[aten.round.decimals] = _round_decimals
    table[aten.native_group_norm.default] = _contiguous_only(
        table[aten.native_group_norm.default]
    )
    table[aten.stack.default] = _stack
    table[aten.cat.default] = _one_piece_cat
    for target, widens in ONE_ELEMENT.items():
        table[resolve_op(target)] = _one_element(resolve_op(target), widens)
    table[aten.repeat.default] = _repeat
    for op in FULL_PRECISION_ONLY:
        table[op] = _full_precision_only(table[op])
    read = backward or _pool_indices_read(dce(graph))
    for op, dims in POOLS.items():
        table[op] = _pool(op, dims, read)
    for op, dims in ADAPTIVE_AVG_POOLS.items():
        table[op] = _adaptive_avg_pool(_pool(op, dims, read), dims)
    for op, dims in ADAPTIVE_MAX_POOLS.items():
        table[op] = _adaptive_max_pool(dims, read)
    for op in UPSAMPLE_NEAREST:
        table[op] = _upsample_nearest(table[op])
    for op in REFLECT_PADS:
        table[op] = _edge_pad("reflect")
    for op in REPLICATE_PADS:
        table[op] = _edge_pad("replicate")
    table[aten._pad_circular.default] = _edge_pad("circular")
    table[aten.logsumexp.default] = _logsumexp
    table[aten.topk.default] = _topk
    table[aten.max.dim] = _extreme_at(torch.amax, torch.argmax)
    table[aten.argmax.default] = table[aten.argmin.default] = _one_position
    table[aten.min.dim] = _extreme_at(torch.amin, torch.argmin)
    for op in SCALED_SECOND:
        table[op] = _scaled_second(op)
    table[aten.pow.Tensor_Scalar] = _pow_of_bools
    for op, mode in INTEGER_DIVISIONS.items():
        table[op] = _integer_division(op, mode)
    for op in ROUNDED_DIVISIONS:
        table[op] = _rounded_division
    for op, reduce in ANY_ALL.items():
        table[op] = any_all(reduce)
    table.update({op: op.decompose for op in copies_that_may_alias()})
    table[aten.conj_physical.default] = _real_conj
    for op in SCATTERS:
        table[op] = _scatter_as_select_or_put
    table[aten.index_add.default] = _index_add_as_put
    table[aten.scatter_add.default] = _scatter_as_put(adds=True)
    table[aten.index_copy.default] = _index_copy_as_put
    for op in INDEX_FILLS:
        table[op] = _index_fill_as_put
    table[SCATTER_REDUCE] = _scatter_reduce_as_puts
    table[INDEX_REDUCE] = _index_reduce_as_puts
    table[MASKED_SCATTER] = _masked_scatter_as_gather
    table[INDEX_PUT] = _masked_put_as_select
    table[STRIDED_SCATTER] = _strided_scatter_as_put
    return table


def one_per_row(shape, dim: int, index_shape) -> bool:
    """Whether a scatter into a tensor of `shape` along `dim` with an index of
    `index_shape` writes one element per row (Note [Scatters of one element per
    row])."""
    if not shape or len(index_shape) != len(shape):
        return False
    dim = dim % len(shape)
    return all(
        n == (1 if d == dim else m) for d, (n, m) in enumerate(zip(index_shape, shape))
    )


def _scatter_as_select_or_put(x, dim, index, src):
    if not one_per_row(x.shape, dim, index.shape):
        return _scatter_as_put(adds=False)(x, dim, index, src)
    dim = dim % x.dim()
    if isinstance(src, torch.Tensor):  # what scatter reads of it
        src = src[tuple(slice(0, n) for n in index.shape)]
    shape = [1] * x.dim()
    shape[dim] = x.shape[dim]
    positions = torch.arange(x.shape[dim], device=x.device).view(shape)
    out = torch.where(positions == index, src, x)
    return out if out.dtype == x.dtype else NotImplemented


def put_in_kernel(op, x, index, src, reduce: str = "sum") -> bool:
    """Whether `op` (a scatter of `ADDS`, `WRITES` or `SCATTERS`, or `INDEX_REDUCE`)
    of these (tensors or metas; `src` may be a number), reducing by `reduce`
    (`SCATTER_REDUCE`'s and `INDEX_REDUCE`'s), runs in a kernel, as a scatter that
    adds, writes or keeps extrema (Note [Scatters] in schedule.py): static shapes,
    a dtype the kernel adds (`ADD_TYPES`), keeps extrema of (`EXTREMA_KERNEL_TYPES`)
    or holds, an index of one dimension for the ops `ALONG_DIM` (index_fill's of
    none too), else of x's rank, and a `src` of x's dtype and rank (index_fill's:
    a number or a 0-d tensor)."""
    op = str(op)
    reductions = REDUCTIONS.get(op)  # of the ops that reduce by `reduce`
    if reductions is not None and reduce not in reductions:
        return False
    extrema = reductions is not None and reduce in EXTREMA
    adds = op in map(str, ADDS) or (reductions is not None and not extrema)
    fills = op in map(str, INDEX_FILLS)
    along = op in map(str, ALONG_DIM)
    shapes = [x.shape, index.shape, getattr(src, "shape", ())]
    if not all(isinstance(n, int) for shape in shapes for n in shape):
        return False
    if isinstance(src, (torch.Tensor, TensorMeta)):
        if fills and len(src.shape) != 0:
            return False
        if not fills and (src.dtype != x.dtype or len(src.shape) != len(x.shape)):
            return False
    types = ADD_TYPES if adds else SUPPORTED_DTYPES
    if extrema:
        types = EXTREMA_KERNEL_TYPES
    ranks = (1, 0) if along else (len(x.shape),)
    return (
        x.dtype in types
        and len(x.shape) > 0
        and len(index.shape) in ranks
        and all(n > 0 for n in index.shape)
    )


def _index_add_as_put(x, dim, index, src, *, alpha=1):
    if not put_in_kernel(aten.index_add.default, x, index, src):
        return NotImplemented
    if alpha != 1:
        src = src * alpha
    return aten.index_put.default(x, [None] * (dim % x.dim()) + [index], src, True)


def _index_copy_as_put(x, dim, index, src):
    if not put_in_kernel(aten.index_copy.default, x, index, src):
        return NotImplemented
    index = index.reshape(-1)
    return aten.index_put.default(x, [None] * (dim % x.dim()) + [index], src)


def _index_fill_as_put(x, dim, index, value):
    if not put_in_kernel(aten.index_fill.int_Scalar, x, index, value):
        return NotImplemented
    index = index.reshape(-1)
    value = _as_tensor(value, x)
    return aten.index_put.default(x, [None] * (dim % x.dim()) + [index], value)


def _scatter_as_put(adds: bool):
    op = aten.scatter_add.default if adds else aten.scatter.src

    def put(x, dim, index, src):
        if not put_in_kernel(op, x, index, src):
            return NotImplemented
        return aten.index_put.default(
            x, _scatter_indices(x, dim, index), _scattered(src, index, x), adds
        )

    return put


def _scatter_reduce_as_puts(x, dim, index, src, reduce, *, include_self=True):
    """`scatter_reduce` of sums or means, as `_reduced_puts` computes them. Of
    maxima or minima, an `index_reduce` (`_extrema_put`): along `dim` where the
    index is one a row, expanded along the rest of x (a graph's messages reduced
    into their nodes, `dst[:, None].expand_as(messages)`); else of the flattened
    x at each value's address."""
    if not put_in_kernel(SCATTER_REDUCE, x, index, src, reduce):
        return NotImplemented
    indices = _scatter_indices(x, dim, index)
    values = _scattered(src, index, x)
    if reduce in REDUCED:
        return _reduced_puts(x, indices, values, reduce, include_self)
    dim = dim % x.dim()
    others = [d for d in range(x.dim()) if d != dim]
    if all(index.stride(d) == 0 and index.shape[d] == x.shape[d] for d in others):
        rows = index[tuple(slice(None) if d == dim else 0 for d in range(x.dim()))]
        return _extrema_put(x, dim, rows, values, reduce, include_self)
    strides = torch.empty(x.shape, device="meta").stride()
    address = sum(i * stride for i, stride in zip(indices, strides))
    address = address.expand(index.shape).reshape(-1)
    flat = x.reshape(-1)
    out = _extrema_put(flat, 0, address, values.reshape(-1), reduce, include_self)
    return out.view(x.shape)


def _index_reduce_as_puts(x, dim, index, source, reduce, *, include_self=True):
    """`index_reduce` of means: `scatter_reduce`'s, each row of `source` along
    `dim` scattered into the row of x its index names. Of maxima or minima: the
    op, a kernel's (Note [Scatters] in schedule.py), along a dimension counted
    from the start, x included."""
    if not put_in_kernel(INDEX_REDUCE, x, index, source, reduce):
        return NotImplemented
    given, dim = dim, dim % x.dim()
    if reduce in EXTREMA:
        if include_self and given == dim:  # the op as a kernel computes it
            return NotImplemented
        return _extrema_put(x, dim, index, source, reduce, include_self)
    shape = [1] * x.dim()
    shape[dim] = -1
    index = index.reshape(shape).expand(source.shape)
    indices = _scatter_indices(x, dim, index)
    return _reduced_puts(x, indices, source, reduce, include_self)


def _extrema_put(x, dim: int, index, source, reduce: str, include_self: bool):
    """`x.index_reduce(dim, index, source, reduce)` of maxima or minima, x
    included; without x, its indexed rows are written over with the identity
    first (-inf for amax, the lowest integer; eager's)."""
    if not include_self:
        if x.dtype.is_floating_point:
            identity = -math.inf if reduce == "amax" else math.inf
        else:
            info = torch.iinfo(x.dtype)
            identity = info.min if reduce == "amax" else info.max
        at = [None] * dim + [index]
        x = aten.index_put.default(x, at, _as_tensor(identity, x))
    return aten.index_reduce.default(x, dim, index, source, reduce)


def _reduced_puts(x, indices, values, reduce: str, include_self: bool):
    """`values` summed into x at `indices` (into zeros where the indexed elements
    of x are not included: a scatter writing zeros there first). Means: those
    sums over counts, a scatter adding ones into ones (into zeros without x), as
    eager's; an element no value is scattered into keeps x's value, and integers
    round the quotient down (a division by a tensor: the op)."""
    kept = x
    if not include_self:
        x = aten.index_put.default(x, indices, x.new_zeros(()))
    total = aten.index_put.default(x, indices, values, True)
    if reduce == "sum":
        return total
    count = torch.full_like(kept, int(include_self))
    count = aten.index_put.default(count, indices, x.new_ones(()), True)
    if not include_self:  # no value scattered: x's own
        count = torch.where(count == 0, 1, count)
    if x.dtype.is_floating_point:
        return total / count
    return aten.floor_divide.default(total, count)


def masked_scatter_rows(x, mask) -> tuple[int, int] | None:
    """(rows, inner) of `x.masked_scatter(mask, ...)`'s scan (Note [Masked
    scatters]): the mask's elements but its trailing expanded dimensions, and the
    elements of those; None where it does not decompose."""
    shapes = (x.shape, mask.shape)
    if not all(isinstance(n, int) for shape in shapes for n in shape):
        return None
    try:
        shape = torch.broadcast_shapes(x.shape, mask.shape)
    except RuntimeError:
        return None
    if tuple(shape) != tuple(x.shape) or not shape:
        return None
    pad = len(shape) - len(mask.shape)
    stride = mask.stride() if callable(mask.stride) else mask.stride  # a meta's
    strides = (0,) * pad + tuple(stride)
    sizes = (1,) * pad + tuple(mask.shape)
    inner = 1
    for d in reversed(range(len(shape))):
        if sizes[d] != 1 and strides[d] != 0:
            break
        inner *= shape[d]
    rows = math.prod(shape) // max(inner, 1)
    return (rows, inner) if 0 < rows <= MASKED_SCATTER_ROWS else None


def _masked_scatter_as_gather(x, mask, source):
    split = masked_scatter_rows(x, mask)
    if split is None or source.dtype != x.dtype or x.dtype not in SUPPORTED_DTYPES:
        return NotImplemented
    if source.numel() == 0:
        return NotImplemented
    rows, inner = split
    if source.numel() < inner or source.numel() % inner:
        return NotImplemented
    shape = x.shape
    mask = mask.expand(shape)
    heads = mask.reshape(rows, inner)[:, 0]  # one element of each row
    table = source.reshape(-1, inner)  # the rows the mask's rows take, in order
    before = heads.cumsum(0) - 1  # the row of `table` each row takes
    at = before.clamp(0, table.shape[0] - 1)  # in range where unselected
    return torch.where(mask, table[at].view(shape), x)


def _masked_put_as_select(x, indices, values, accumulate=False):
    masks = [(p, i) for p, i in enumerate(indices) if i is not None]
    if len(masks) != 1 or masks[0][1].dtype != torch.bool:
        return NotImplemented
    (p, mask), rest = masks[0], len(indices) - masks[0][0] - 1
    if any(indices[:p]) or len(indices) > x.dim() or values.dtype != x.dtype:
        return NotImplemented
    trailing = x.dim() - p - mask.dim()
    if trailing < 0 or rest > trailing:
        return NotImplemented
    after = tuple(x.shape[x.dim() - trailing :])
    if values.dim() > trailing:  # a row for each selected element, or one row
        if values.dim() > trailing + 1 or values.shape[0] != 1:
            return _masked_rows(x, p, mask, values, accumulate, after)
        values = values[0]
    try:
        if torch.broadcast_shapes(values.shape, after) != after:
            return NotImplemented
    except RuntimeError:
        return NotImplemented
    mask = mask.view(*[1] * p, *mask.shape, *[1] * trailing)
    if accumulate:
        return x + torch.where(mask, values, torch.zeros_like(values))
    return torch.where(mask, values, x)


def _masked_rows(x, p: int, mask, values, accumulate: bool, after: tuple):
    """`x[mask] = values`, a row of `values` for each element of the mask over
    x's leading dimensions: the masked scatter of the rows, checked first."""
    if p or accumulate or values.dim() != len(after) + 1 or not values.shape[0]:
        return NotImplemented
    try:
        rows = values.expand(values.shape[0], *after)
    except RuntimeError:
        return NotImplemented
    mask = mask.view(*mask.shape, *[1] * len(after))
    selected = mask.to(torch.int64).sum()
    message = ROWS_MESSAGE.format(shape=list(values.shape))
    torch._assert_async(selected == values.shape[0], message)
    return _masked_scatter_as_gather(x, mask, rows)


def _strided_scatter_as_put(base, src, size, stride, storage_offset=None):
    offset = base.storage_offset() if storage_offset is None else storage_offset
    numbers = [*base.shape, *size, *stride, offset, base.storage_offset()]
    if not all(isinstance(n, int) for n in numbers) or base.storage_offset():
        return NotImplemented
    if not base.is_contiguous() or src.dtype != base.dtype or not base.numel():
        return NotImplemented
    if base.dtype not in SUPPORTED_DTYPES or not size or not all(n > 0 for n in size):
        return NotImplemented  # a view of one element (size ()) stays the op
    if min(stride, default=0) < 0 or len(size) != len(stride):
        return NotImplemented
    if offset + sum((n - 1) * s for n, s in zip(size, stride)) >= base.numel():
        return NotImplemented  # outside base: eager raises
    at = None  # positions alone: computed where the kernel writes
    for d, (n, s) in enumerate(zip(size, stride)):
        shape = [1] * len(size)
        shape[d] = n
        term = torch.arange(0, n * s, s, device=base.device).view(shape)
        at = term if at is None else at + term
    if offset:
        at = at + offset
    values = src if tuple(src.shape) == tuple(size) else src.expand(size)
    flat = aten.index_put.default(base.reshape(-1), [at], values)
    return flat.view(base.shape)


def _scatter_indices(x, dim, index) -> list:
    """The `index_put` indices of a scatter along `dim` with `index`: `index`
    along `dim`, the positions along the others."""
    dim = dim % x.dim()
    indices = []
    for d, n in enumerate(index.shape):
        shape = [1] * x.dim()
        shape[d] = n
        at = torch.arange(n, device=x.device).view(shape)
        indices.append(index if d == dim else at)
    return indices


def _scattered(src, index, x):
    """What a scatter with `index` writes of `src` (a number: a tensor of it)."""
    if not isinstance(src, torch.Tensor):
        return _as_tensor(src, x)
    return src[tuple(slice(0, n) for n in index.shape)]


def _as_tensor(value, x):
    """A number or 0-d tensor `value` as a 0-d tensor of x's dtype."""
    if isinstance(value, torch.Tensor):
        return value.to(x.dtype)
    return torch.scalar_tensor(value, dtype=x.dtype, device=x.device)


def _real_conj(x):
    """`conj_physical` of a real tensor is a copy (PyTorch's backward formulas
    call it: tanh's, a matmul's): a clone, which fuses or drops; a complex
    tensor's stays the op."""
    if x.is_complex():
        return NotImplemented
    return aten.clone.default(x)


# Note [Batch norm in eval]
# ~~~~~~~~~~~~~~~~~~~~~~~~~
# With its running statistics (eval mode), batch norm is a per-channel scale and
# shift: decomposed, it fuses into the kernel of what follows it, after a
# convolution that is its ReLU and residual add, so the normalized activation is
# never written on its own. In training with running statistics the frontend
# records it as its decomposition, whose updates of them are writes into buffers
# (Note [Writes into the caller's tensors] in frontend/recorder.py); without them
# (an instance norm, `track_running_stats=False`) it decomposes here too, into the
# batch's mean and variance per channel. The statistics it also returns differ
# between devices (Note in ir/device_outputs.py): a graph that reads them keeps
# the op whole.


def _writing_nothing(decomposition):
    def decompose_writing_nothing(*args, **kwargs):
        if not _normalizes_alone(args, kwargs):
            return NotImplemented
        return decomposition(*args, **kwargs)

    return decompose_writing_nothing


def _normalizes_alone(args: tuple, kwargs: dict) -> bool:
    """Whether a batch norm writes nothing: in eval, or in training without running
    statistics (an instance norm, `track_running_stats=False`)."""
    training = _argument(args, kwargs, 5, "training")
    return not training or _argument(args, kwargs, 3, "running_mean") is None


def _argument(args: tuple, kwargs: dict, index: int, name: str):
    return args[index] if len(args) > index else kwargs.get(name)


# `add(a, b, alpha=k)`, `sub(a, b, alpha=k)`: `b` scaled, then the op (alpha 1 is
# the op itself, which kernels compute)
SCALED_SECOND = (aten.add.Tensor, aten.sub.Tensor)


def _scaled_second(op):
    def scaled_second(a, b, *, alpha=1):
        if alpha == 1:
            return NotImplemented
        return op(a, torch.mul(b, alpha))

    return scaled_second


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


# Note [Top-k in rounds]
# ~~~~~~~~~~~~~~~~~~~~~~
# `torch.topk(x, k)` for a small k (a mixture of experts' router picks 2 of 8) is
# k rounds over the row, each two reductions that kernels compute: the extreme
# number among the candidates, then the lowest position that holds the round's
# pick. topk's order puts NaN above every number: first when it takes the
# largest, where amax's NaN does it; last when it takes the smallest, where a
# row's count of NaN tells which rounds pick one, and the others reduce the
# numbers alone (so do integers, which have none). The candidates of a round are
# the elements after the last pick in that order (the lower position first among
# equals), so an element is picked once, and a row of infinities or NaN gives
# every position. The rounds read the same row: one row kernel for all of them
# (eager's CUDA topk of 65536 rows of 8 takes 0.17 ms, a kernel a few
# microseconds). `sorted=False` leaves the order open, and the rounds' order is
# one. For larger k the rounds would read a long row k times: those stay calls
# into PyTorch.
TOPK_ROUNDS = 8
TOPK_ROW = 4096  # a row up to this many elements, held by one program


def _topk(x, k, dim=-1, largest=True, sorted=True):
    if x.dtype == torch.bool or x.is_complex():
        return NotImplemented
    if x.dim() == 0:  # the one element, at position 0
        if k != 1:
            return NotImplemented
        return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
    dim = dim % x.dim()
    n = x.shape[dim]
    if not 0 < k <= min(TOPK_ROUNDS, n) or n > TOPK_ROW:
        return NotImplemented
    shape = [1] * x.dim()
    shape[dim] = n
    pos = torch.arange(n, device=x.device).reshape(shape)
    if x.dtype.is_floating_point and largest:
        values, indices = _largest_first(x, k, dim, pos)
    else:
        values, indices = _counted_rounds(x, k, dim, pos, largest)
    if k == 1:
        return values[0], indices[0]
    return torch.cat(values, dim), torch.cat(indices, dim)


def _largest_first(x, k: int, dim: int, pos) -> tuple[list, list]:
    """The rounds of the largest floats: amax takes a NaN candidate first, as
    topk's order does."""
    low = torch.full((), float("-inf"), dtype=x.dtype, device=x.device)
    nan = torch.isnan(x)
    values, indices = [], []
    candidate = None  # every element, in the first round
    for _ in range(k):
        masked = x if candidate is None else torch.where(candidate, x, low)
        top = torch.amax(masked, dim, keepdim=True)  # NaN where a candidate is
        holds = (x == top) | (nan & torch.isnan(top))
        at, later = _first_holding(holds, candidate, pos, dim)
        values.append(top)
        indices.append(at)
        candidate = torch.where(
            torch.isnan(top),
            ~nan | later,
            (x < top) | ((x == top) & later),
        )
    return values, indices


def _first_holding(holds, candidate, pos, dim: int):
    """A round's pick: the lowest position among the candidates that holds its
    value, and the positions after it."""
    if candidate is not None:
        holds = holds & candidate
    n = pos.shape[dim]
    at = torch.amin(torch.where(holds, pos, n), dim, keepdim=True)
    return at, pos > at


def _counted_rounds(x, k: int, dim: int, pos, largest: bool) -> tuple[list, list]:
    """The rounds of the smallest values, or of integers: each reduces the
    numbers alone, and a row's count of NaN tells which rounds pick NaN (the
    last ones, for the smallest)."""
    n = x.shape[dim]
    floating = x.dtype.is_floating_point
    if floating:
        bound = float("-inf") if largest else float("inf")
    else:
        bound = torch.iinfo(x.dtype).min if largest else torch.iinfo(x.dtype).max
    bound = torch.full((), bound, dtype=x.dtype, device=x.device)
    reduce, beyond = (torch.amax, torch.lt) if largest else (torch.amin, torch.gt)
    if floating:
        nan = torch.isnan(x)
        number = ~nan
        nans = torch.sum(nan, dim, keepdim=True)
        not_a_number = torch.full((), float("nan"), dtype=x.dtype, device=x.device)
    values, indices = [], []
    candidate = None  # every element, in the first round
    for i in range(k):
        among = candidate
        if floating:
            among = number if candidate is None else candidate & number
        if among is not None:
            best = reduce(torch.where(among, x, bound), dim, keepdim=True)
        else:
            best = reduce(x, dim, keepdim=True)
        top, holds = best, x == best
        if floating:  # a round that picks NaN
            picks_nan = nans > i if largest else nans >= n - i
            top = torch.where(picks_nan, not_a_number, best)
            holds = torch.where(picks_nan, nan, holds)
        at, later = _first_holding(holds, candidate, pos, dim)
        values.append(top)
        indices.append(at)
        candidate = beyond(x, best) | ((x == best) & later)
        if floating:
            candidate = torch.where(picks_nan, number | later, candidate | nan)
    return values, indices


def _one_position(x, dim=None, keepdim=False):
    """argmax or argmin over one element a row: 0 (a reduction kernel needs rows
    of two elements or more)."""
    if x.numel() == 0 or (x.numel() > 1 and (dim is None or x.shape[dim] != 1)):
        return NotImplemented
    if dim is None:  # over all of one element
        shape = [1] * x.dim() if keepdim else []
    elif x.dim() == 0:
        shape = []
    else:
        shape = list(x.shape)
        if keepdim:
            shape[dim] = 1
        else:
            del shape[dim]
    return torch.zeros(shape, dtype=torch.int64, device=x.device)


def _extreme_at(extreme, position):
    """`torch.max(x, dim)` (or min): the extreme along `dim` and the first position
    holding it (NaN the extreme of all), as amax and argmax compute them."""

    def extreme_at(x, dim, keepdim=False):
        if x.dtype == torch.bool or x.is_complex() or x.numel() == 0:
            return NotImplemented
        if x.dim() == 0:
            return x.clone(), torch.zeros((), dtype=torch.int64, device=x.device)
        values = extreme(x, [dim], keepdim)
        if x.shape[dim] == 1:  # the one position
            return values, torch.zeros_like(values, dtype=torch.int64)
        return values, position(x, dim, keepdim)

    return extreme_at


def _repeat(x, repeats):
    """`x.repeat(repeats)` as one expand read by one copy: each dimension of size
    s repeated r times is a pair (r, s), the pair's first expanded from 1, and the
    copy flattens each pair into r * s elements. (torch's own decomposition copies
    the expanded tensor twice, around a permute.)"""
    shape = [1] * (len(repeats) - x.dim()) + list(x.shape)
    pairs = [n for s in shape for n in (1, s)]
    expanded = [n for r, s in zip(repeats, shape) for n in (r, s)]
    return (
        x.reshape(pairs)
        .expand(expanded)
        .reshape([r * s for r, s in zip(repeats, shape)])
    )


def _one_piece_cat(tensors, dim=0):
    """`torch.cat([t])` is a copy of `t` (`torch.cat(states)` of a list that
    holds one layer's): as a movement of one piece, a reduction's result that a
    kernel computed was returned under a name nothing wrote."""
    if len(tensors) != 1:
        return NotImplemented
    return tensors[0].clone()


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


# Note [Reductions of one element]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A sum, mean, max, min or product over dimensions of size 1 (a global average
# pool of a 1 x 1 feature map, `keepdim` statistics of a dimension of one, the sum
# of a 0-d loss) is its input's element in the result's dtype: a copy, which
# kernels compute and fuse, where the reduction kernels need rows of two elements
# or more.
ONE_ELEMENT = {  # -> whether the op sums integers into int64
    "aten.sum.dim_IntList": True,
    "aten.sum.default": True,
    "aten.mean.dim": False,
    "aten.mean.default": False,
    "aten.amax.default": False,
    "aten.amin.default": False,
    "aten.max.default": False,
    "aten.min.default": False,
    "aten.prod.dim_int": True,
    "aten.prod.default": True,
}


# the extrema of bools: whether any holds, whether all do
OF_BOOLS = {
    "aten.amax.default": torch.any,
    "aten.max.default": torch.any,
    "aten.amin.default": torch.all,
    "aten.min.default": torch.all,
}


def _one_element(op, widens: bool):
    of_bools = OF_BOOLS.get(str(op))

    def one_element(x, dim=None, keepdim=False, *, dtype=None):
        if x.numel() == 0:
            return NotImplemented
        given = dtype
        if dtype is None:  # eager's result dtype
            widen = widens and not x.dtype.is_floating_point
            dtype = torch.int64 if widen else x.dtype
        if x.dim() == 0:  # a 0-d result, whatever dim and keepdim say
            return x.to(dtype, copy=True)
        along = () if dim is None else [dim] if isinstance(dim, int) else dim
        dims = {d % x.dim() for d in along} or set(range(x.dim()))
        if all(x.shape[d] == 1 for d in dims):
            shape = [
                1 if d in dims else n
                for d, n in enumerate(x.shape)
                if keepdim or d not in dims
            ]
            return x.reshape(shape).to(dtype, copy=True)
        if of_bools is not None and x.dtype == torch.bool:
            if not along:
                return of_bools(x)
            return of_bools(x, dim=tuple(along), keepdim=keepdim)
        if given is None:
            return NotImplemented
        # eager casts the input to `dtype` first; the op's own result dtype (int64
        # for a sum of int32) cast to it wraps as eager's does
        args = () if dim is None else (dim, keepdim)
        return op(x.to(dtype), *args).to(dtype)

    return one_element


# Note [Steps in halves]
# ~~~~~~~~~~~~~~~~~~~~~~
# Kernels compute f16 and bf16 values in f32 and round where eager's op returns its
# result. An op that eager composes of several ops in the half type rounds after
# each; for most the difference stays within the half type's error, but
# binary_cross_entropy_with_logits with weights subtracts nearly equal rounded terms:
# an OpInfo sample's bf16 loss differs by 14% from the same formula computed in f32
# and rounded once. Of halves it stays eager's op.
FULL_PRECISION_ONLY = (aten.binary_cross_entropy_with_logits.default,)


def _full_precision_only(decomposition):
    def decompose_full_precision(x, *args, **kwargs):
        if x.dtype in (torch.float16, torch.bfloat16):
            return NotImplemented
        return decomposition(x, *args, **kwargs)

    return decompose_full_precision


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


def _rounded_division(a, b, rounding_mode=None):
    """Note [Rounded divisions]."""
    floats = torch.result_type(a, b).is_floating_point
    if rounding_mode not in ("floor", "trunc"):
        return NotImplemented
    if not floats and not _in_kernel_on_integers(b):
        return NotImplemented
    if rounding_mode == "floor":
        return torch.floor_divide(a, b)
    if floats:
        return torch.trunc(torch.div(a, b))
    return torch.floor_divide(a - torch.fmod(a, b), b)


def _pool(op, dims: int, indices_read: bool):
    """A pool over the last `dims` dimensions as the maximum or sum of strided
    slices of the padded input (Note [Pooling as windows])."""
    is_max = "max_pool" in str(op)

    def decompose_pool(x, kernel_size, stride=(), padding=0, *rest, **kwargs):
        names = (
            ("dilation", "ceil_mode")
            if is_max
            else ("ceil_mode", "count_include_pad", "divisor_override")
        )
        given = {**dict(zip(names, rest)), **kwargs}
        dilation, ceil_mode = given.get("dilation", 1), given.get("ceil_mode", False)
        count_include_pad = given.get("count_include_pad", True)
        divisor = given.get("divisor_override")
        if (is_max and indices_read) or not x.dtype.is_floating_point:
            return NotImplemented
        kernel = _per_dim(kernel_size, dims)
        stride = _per_dim(stride or kernel_size, dims)
        padding, dilation = _per_dim(padding, dims), _per_dim(dilation, dims)
        sizes = x.shape[x.dim() - dims :]
        out = [
            (n + 2 * p - d * (k - 1) - 1) // s + 1
            for n, k, s, p, d in zip(sizes, kernel, stride, padding, dilation)
        ]
        if ceil_mode and any(
            (n + 2 * p - d * (k - 1) - 1) % s != 0
            for n, k, s, p, d in zip(sizes, kernel, stride, padding, dilation)
        ):
            return NotImplemented  # a last window overhanging the padding
        if any(o <= 0 for o in out) or x.numel() == 0:
            return NotImplemented
        fill = float("-inf") if is_max else 0.0
        geometry = (stride, padding, dilation, out)
        exclude_pad = not count_include_pad and any(padding) and divisor is None
        result = count = None
        for offset in _window_offsets(kernel):
            window = _window(x, offset, *geometry, fill)
            if result is None:
                result = window
            elif is_max:
                result = torch.maximum(result, window)
            else:
                result = result + window
            if exclude_pad:  # 1 where the window's element is in the input
                inside = _window(x, offset, *geometry, 0.0, ones=True)
                count = inside if count is None else count + inside
        if is_max:
            return result, torch.empty_like(result, dtype=torch.int64)  # unread
        if divisor is not None:
            return result / divisor
        if count is not None:
            return result / count
        return result / math.prod(kernel)

    return decompose_pool


def _adaptive_avg_pool(pool, dims: int):
    """An adaptive average pool whose output divides the input: an average pool
    with windows of size / output (ResNet's head, to 1 x 1, is a mean already);
    one that does not, a sum of gathers (`_adaptive_avg_by_gathers`)."""

    def decompose_adaptive(x, output_size):
        sizes = x.shape[x.dim() - dims :]
        if x.numel() == 0 or any(o <= 0 for o in output_size):
            return NotImplemented
        if any(n % o for n, o in zip(sizes, output_size)):
            return _adaptive_by_gathers(x, list(output_size), maximum=False)
        window = [n // o for n, o in zip(sizes, output_size)]
        return pool(x, window, window, 0)

    return decompose_adaptive


def _adaptive_max_pool(dims: int, indices_read: bool):
    """`ADAPTIVE_MAX_POOLS`' decomposition, of floats, whose indices nothing
    reads."""

    def decompose_adaptive_max(x, output_size):
        sizes = x.shape[x.dim() - dims :]
        if indices_read or not x.dtype.is_floating_point:
            return NotImplemented
        if x.numel() == 0 or any(o <= 0 for o in output_size):
            return NotImplemented
        if any(n % o for n, o in zip(sizes, output_size)):
            result = _adaptive_by_gathers(x, list(output_size), maximum=True)
        else:
            lead = x.dim() - dims
            shape = list(x.shape[:lead])
            for n, o in zip(sizes, output_size):
                shape += [o, n // o]
            windows = [lead + 2 * i + 1 for i in range(dims)]
            result = torch.amax(x.reshape(shape), windows)
        return result, torch.empty_like(result, dtype=torch.int64)  # unread

    return decompose_adaptive_max


def _adaptive_by_gathers(x, output_size: list[int], maximum: bool):
    """An adaptive average (`maximum`: max) pool whose windows differ in length:
    output position p of a dimension of n reduces inputs `p * n // o` up to
    `((p + 1) * n + o - 1) // o`, at most `longest` of them. The sum (maximum)
    over the k-th element of each window's every dimension, gathered at
    positions computed where they are read and zero (-inf) past the window's
    end, divided by the window's size for an average (Note [Pads and
    interpolation as gathers]): one kernel that reads x, as eager's loop does."""
    dims = len(output_size)
    lead = x.dim() - dims
    axes = []  # per dimension: (first position, length, longest), as broadcast
    for i, (n, o) in enumerate(zip(x.shape[lead:], output_size)):
        shape = [-1] + [1] * (dims - 1 - i)
        p = torch.arange(o, device=x.device)
        first = (p * n) // o
        length = ((p + 1) * n + o - 1) // o - first
        longest = max(((q + 1) * n + o - 1) // o - (q * n) // o for q in range(o))
        axes.append((first.view(shape), length.view(shape), longest, n))
    total = None
    for ks in itertools.product(*[range(longest) for _, _, longest, _ in axes]):
        indices, inside = [], None
        for k, (first, length, _, n) in zip(ks, axes):
            indices.append((first + k).clamp(max=n - 1))
            within = length > k
            inside = within if inside is None else inside & within
        value = aten._unsafe_index.Tensor(x, [None] * lead + indices)
        value = torch.where(inside, value, -math.inf if maximum else 0)
        if total is None:
            total = value
        else:
            total = torch.maximum(total, value) if maximum else total + value
    if maximum:
        return total
    count = None
    for _, length, _, _ in axes:
        count = length if count is None else count * length
    return total / count


def _per_dim(value, dims: int) -> list[int]:
    values = [value] if isinstance(value, int) else list(value)
    return values * dims if len(values) == 1 else values


def _window_offsets(kernel: list[int]) -> list[tuple[int, ...]]:
    offsets: list[tuple[int, ...]] = [()]
    for k in kernel:
        offsets = [o + (i,) for o in offsets for i in range(k)]
    return offsets


def _window(x, offset, stride, padding, dilation, out, fill: float, ones=False):
    """The elements at `offset` of every window: per dimension, the strided slice
    of the input that the windows reach within it, padded with `fill` where they
    reach the padding (a slice, then a pad: both read `x` where it is); with
    `ones`, 1 in place of the slice's elements."""
    dims = len(offset)
    index = [slice(None)] * x.dim()
    pads: list[int] = []
    for e, (i, s, p, d, n) in enumerate(zip(offset, stride, padding, dilation, out)):
        dim = x.dim() - dims + e
        at = i * d - p  # input position of the first window's element
        first = max(0, -(at // s) if at < 0 else 0)  # first window within the input
        last = min(n - 1, (x.shape[dim] - 1 - at) // s)
        if last < first:  # no window reaches the input: all padding
            corner = x[(..., *([slice(0, 1)] * dims))]
            shape = list(x.shape[: x.dim() - dims]) + list(out)
            return torch.full_like(corner.expand(shape), fill)
        start = at + first * s
        index[dim] = slice(start, start + s * (last - first) + 1, s)
        pads = [first, n - 1 - last] + pads
    window = x[tuple(index)]
    if ones:
        window = torch.ones_like(window)
    return torch.constant_pad_nd(window, pads, fill) if any(pads) else window


def _upsample_nearest(gather):
    def upsample_nearest(x, output_size, *scales):
        """Nearest-neighbour upsampling by whole factors: the input expanded by a
        new dimension after each upsampled one and reshaped, so each output element
        reads the input at its coordinates divided by the factor (Note [Pooling as
        windows]); by other factors, torch's decomposition, a gather at computed
        positions (Note [Pads and interpolation as gathers])."""
        dims = len(output_size)
        sizes = x.shape[x.dim() - dims :]
        padded = list(scales) + [None] * (dims - len(scales))
        if x.numel() == 0:
            return NotImplemented
        if not all(
            _whole_factor(n, o, scale)
            for n, o, scale in zip(sizes, output_size, padded)
        ):
            return gather(x, output_size, *scales)
        return _whole_upsample(x, output_size)

    return upsample_nearest


def _edge_pad(mode: str):
    reflect = mode == "reflect"

    def edge_pad(x, padding):
        """`x` padded by reflecting or repeating its edges, or by wrapping around:
        one gather at positions computed from the output's (Note [Pads and
        interpolation as gathers]); sizes eager refuses keep the op, which
        raises."""
        dims = len(padding) // 2
        lead = x.dim() - dims
        if len(padding) % 2 or x.dim() not in (dims + 1, dims + 2) or x.numel() == 0:
            return NotImplemented
        indices = []
        for i in range(dims):
            n = x.shape[lead + i]
            left, right = padding[2 * (dims - 1 - i)], padding[2 * (dims - 1 - i) + 1]
            if n + left + right <= 0 or (reflect and max(left, right) >= n):
                return NotImplemented
            if mode == "circular" and max(left, right) > n:
                return NotImplemented  # it would wrap around more than once
            p = torch.arange(-left, n + right, device=x.device)
            if reflect:  # ... 2 1 | 0 1 2 ... n-1 | n-2 n-3 ...
                at = (n - 1) - ((n - 1) - p.abs()).abs()
            elif mode == "replicate":  # 0 0 | 0 1 2 ... n-1 | n-1 n-1 ...
                at = p.clamp(0, n - 1)
            else:  # ... n-2 n-1 | 0 1 2 ... n-1 | 0 1 ...
                at = p % n
            indices.append(at.view(-1, *[1] * (dims - 1 - i)))
        return aten._unsafe_index.Tensor(x, [None] * lead + indices)

    return edge_pad


def _whole_upsample(x, output_size):
    dims = len(output_size)
    sizes = x.shape[x.dim() - dims :]
    lead = x.dim() - dims
    shape, expanded = list(x.shape[:lead]), list(x.shape[:lead])
    for n, o in zip(sizes, output_size):
        shape += [n, 1]
        expanded += [n, o // n]
    wide = x.reshape(shape).expand(expanded)
    return wide.reshape(*x.shape[:lead], *output_size)


def _whole_factor(size: int, out: int, scale) -> bool:
    """Whether eager's nearest source index of each output position `o`,
    `floor(o * r)` in float32 with `r` the reciprocal of the scale (or size / out),
    is `o // (out / size)`, the factor a whole number."""
    if out % size != 0:
        return False
    ratio = _float32(1.0 / scale if scale is not None else size / out)
    factor = out // size
    return all(
        min(math.floor(_float32(_float32(o) * ratio)), size - 1) == o // factor
        for o in range(out)
    )


def _float32(value: float) -> float:
    """`value` rounded to float32 (a product of two float32 values is exact in a
    Python float, so rounding it gives float32's product)."""
    return struct.unpack("f", struct.pack("f", value))[0]


def _pool_indices_read(graph: Graph) -> bool:
    """Whether any max pool's indices are read (in a graph without dead code)."""
    pools = {n.name for n in graph.nodes if "max_pool" in n.target}
    return any(
        n.target == "getitem" and n.args[0].name in pools and n.args[1] != 0
        for n in graph.nodes
    )


def _reads_statistics(graph: Graph) -> bool:
    """Whether a batch norm's mean or inverse standard deviation is read (in a
    graph without dead code)."""
    norms = {n.name for n in graph.nodes if n.target == BATCH_NORM}
    return any(
        n.target == "getitem" and n.args[0].name in norms and n.args[1] != 0
        for n in graph.nodes
    )


def _decomposes(node: Node, nodes: dict[str, Node], device: str) -> bool:
    if not node.target.startswith("aten."):
        return False
    if node.target in GPU_ONLY and device != "cuda":
        return False
    if node.target in ONE_ELEMENT:  # or with a dtype to cast its input to
        x = nodes[node.args[0].name].tensor_meta
        bools = x.dtype == torch.bool and node.target in OF_BOOLS
        return 0 < x.numel == node.tensor_meta.numel or (
            x.numel > 0 and (bools or dict(node.kwargs).get("dtype") is not None)
        )
    if may_copy(node.target):
        return True
    if resolve_op(node.target) in SCALED_SECOND:
        return dict(node.kwargs).get("alpha", 1) != 1
    if resolve_op(node.target) not in DECOMPOSE:
        return False
    if node.target == BATCH_NORM:
        return _normalizes_alone(node.args, dict(node.kwargs))
    if node.target == "aten.pow.Tensor_Scalar":
        return isinstance(node.args[1], bool)
    if resolve_op(node.target) in INTEGER_DIVISIONS:
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
