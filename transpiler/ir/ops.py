"""Which ATen ops we lower, and how they map onto kernel operations.

One row per op. `POINTWISE` maps an ATen overload to a `Pointwise` lowering: the kernel
op name (a key of the backend tables in codegen/optable.py), which positional arguments
are its operands, and how operand dtypes are chosen. `REDUCTIONS` lists the reductions
fused into row-reduction kernels. Views need no table: an op whose schema says its
result aliases its input is a view, and its meta strides say how to index it. Every
other op is an extern call.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from transpiler.ir.graph import contiguous_strides


def resolve_op(target: str):
    """The OpOverload for a node target such as "aten.add.Tensor"."""
    ns, packet, overload = target.split(".")
    return getattr(getattr(getattr(torch.ops, ns), packet), overload)


@dataclass(frozen=True)
class Pointwise:
    op: str  # kernel op, a key of codegen.optable.TRITON / CPP
    operands: tuple[int, ...] = (0,)  # positional argument indices
    kind: str = "arith"  # "arith": operands in the result type; "compare": promoted
    # inputs, bool result; "where": bool condition then values; "cast": to the result
    keywords: tuple[tuple[str, object], ...] = ()  # (name, value): a keyword argument
    # a call may pass, with the one value this lowering computes


P = Pointwise
UNARY = (
    "abs",
    "neg",
    "relu",
    "exp",
    "log",
    "sqrt",
    "rsqrt",
    "sin",
    "cos",
    "tanh",
    "sigmoid",
    "erf",
    "floor",
    "ceil",
    "reciprocal",
    "logical_not",
    "log2",
    "log10",
    "exp2",
    "log1p",
    "expm1",
    "trunc",
    "sign",
    "round",
    "tan",
    "erfc",
    "asin",
    "acos",
    "atan",
    "sinh",
    "cosh",
    "asinh",
    "acosh",
    "atanh",
    "lgamma",
)

POINTWISE: dict[str, Pointwise] = {
    **{f"aten.{op}.default": P(op) for op in UNARY},
    "aten.gelu.default": P("gelu", keywords=(("approximate", "none"),)),  # exact GELU
    "aten.add.Tensor": P("add", (0, 1)),
    "aten.add.Scalar": P("add", (0, 1)),
    "aten.sub.Tensor": P("sub", (0, 1)),
    "aten.sub.Scalar": P("sub", (0, 1)),
    "aten.rsub.Scalar": P("rsub", (0, 1)),
    "aten.mul.Tensor": P("mul", (0, 1)),
    "aten.mul.Scalar": P("mul", (0, 1)),
    "aten.div.Tensor": P("truediv", (0, 1)),
    "aten.true_divide.Tensor": P("truediv", (0, 1)),
    "aten.div.Scalar": P("truediv", (0, 1)),
    "aten.maximum.default": P("maximum", (0, 1)),
    "aten.minimum.default": P("minimum", (0, 1)),
    "aten.fmax.default": P("fmax", (0, 1)),  # NaN loses
    "aten.fmin.default": P("fmin", (0, 1)),
    "aten.clamp_min.default": P("maximum", (0, 1)),
    "aten.clamp_max.default": P("minimum", (0, 1)),
    "aten.eq.Tensor": P("eq", (0, 1), "compare"),
    "aten.eq.Scalar": P("eq", (0, 1), "compare"),
    "aten.ne.Tensor": P("ne", (0, 1), "compare"),
    "aten.ne.Scalar": P("ne", (0, 1), "compare"),
    "aten.lt.Tensor": P("lt", (0, 1), "compare"),
    "aten.lt.Scalar": P("lt", (0, 1), "compare"),
    "aten.le.Tensor": P("le", (0, 1), "compare"),
    "aten.le.Scalar": P("le", (0, 1), "compare"),
    "aten.gt.Tensor": P("gt", (0, 1), "compare"),
    "aten.gt.Scalar": P("gt", (0, 1), "compare"),
    "aten.ge.Tensor": P("ge", (0, 1), "compare"),
    "aten.ge.Scalar": P("ge", (0, 1), "compare"),
    "aten.logical_and.default": P("logical_and", (0, 1), "compare"),
    "aten.logical_or.default": P("logical_or", (0, 1), "compare"),
    # on booleans and integers (INTEGER_ONLY)
    "aten.bitwise_and.Tensor": P("bitwise_and", (0, 1)),
    "aten.bitwise_or.Tensor": P("bitwise_or", (0, 1)),
    "aten.bitwise_xor.Tensor": P("bitwise_xor", (0, 1)),
    "aten.__and__.Tensor": P("bitwise_and", (0, 1)),
    "aten.__or__.Tensor": P("bitwise_or", (0, 1)),
    "aten.__xor__.Tensor": P("bitwise_xor", (0, 1)),
    "aten.bitwise_and.Scalar": P("bitwise_and", (0, 1)),
    "aten.bitwise_or.Scalar": P("bitwise_or", (0, 1)),
    "aten.bitwise_xor.Scalar": P("bitwise_xor", (0, 1)),
    "aten.bitwise_not.default": P("bitwise_not"),
    # shifts by a negative count or one past the width as torch's: 0 for <<, the
    # sign bit for >>
    "aten.bitwise_left_shift.Tensor": P("shift_left", (0, 1)),
    "aten.bitwise_left_shift.Tensor_Scalar": P("shift_left", (0, 1)),
    "aten.bitwise_left_shift.Scalar_Tensor": P("shift_left", (0, 1)),
    "aten.__lshift__.Tensor": P("shift_left", (0, 1)),
    "aten.__lshift__.Scalar": P("shift_left", (0, 1)),
    "aten.bitwise_right_shift.Tensor": P("shift_right", (0, 1)),
    "aten.bitwise_right_shift.Tensor_Scalar": P("shift_right", (0, 1)),
    "aten.bitwise_right_shift.Scalar_Tensor": P("shift_right", (0, 1)),
    "aten.__rshift__.Tensor": P("shift_right", (0, 1)),
    "aten.__rshift__.Scalar": P("shift_right", (0, 1)),
    "aten.where.self": P("where", (0, 1, 2), "where"),
    "aten.where.ScalarSelf": P("where", (0, 1, 2), "where"),
    "aten.where.ScalarOther": P("where", (0, 1, 2), "where"),
    "aten.where.Scalar": P("where", (0, 1, 2), "where"),
    "aten.isnan.default": P("isnan", (0,), "compare"),
    "aten.signbit.default": P("signbit", (0,), "compare"),
    "aten.sgn.default": P("sign"),  # sign, for the real dtypes kernels compute
    "aten.pow.Tensor_Tensor": P("pow", (0, 1)),
    "aten.pow.Tensor_Scalar": P("pow", (0, 1)),
    "aten.pow.Scalar": P("pow", (0, 1)),
    "aten.atan2.default": P("atan2", (0, 1)),
    "aten.hypot.default": P("hypot", (0, 1)),
    "aten.copysign.Tensor": P("copysign", (0, 1)),
    "aten.copysign.Scalar": P("copysign", (0, 1)),
    # on integers only by a nonzero Scalar (passes/decompose.py: Note [Integer
    # division by zero])
    "aten.fmod.Tensor": P("fmod", (0, 1)),
    "aten.fmod.Scalar": P("fmod", (0, 1)),
    "aten.remainder.Tensor": P("remainder", (0, 1)),
    "aten.remainder.Scalar": P("remainder", (0, 1)),
    "aten.remainder.Scalar_Tensor": P("remainder", (0, 1)),
    "aten.floor_divide.default": P("floor_divide", (0, 1)),
    "aten.floor_divide.Scalar": P("floor_divide", (0, 1)),
    "aten.clone.default": P("identity"),
    "aten._to_copy.default": P("identity", (0,), "cast"),
    "aten.copy.default": P("identity", (1,), "cast"),
    # constants: the fill value, in the result's dtype, at every position
    "aten.full.default": P("identity", (1,), "cast"),
    "aten.full_like.default": P("identity", (1,), "cast"),
    "aten.fill.Scalar": P("identity", (1,), "cast"),  # `x.fill_(v)`, functional
    "aten.fill.Tensor": P("identity", (1,), "cast"),  # ... of a 0-d tensor `v`
    "aten.new_full.default": P("identity", (2,), "cast"),
    "aten.scalar_tensor.default": P("identity", (0,), "cast"),
    # `start + step * i` at position i, of integer arguments (Note [Ranges in
    # kernels] in passes/schedule.py)
    "aten.arange.default": P("index", (0,), "iota"),
    "aten.arange.start": P("index", (0, 1), "iota"),
    "aten.arange.start_step": P("index", (0, 1, 2), "iota"),
}
RANGES = frozenset(t for t, row in POINTWISE.items() if row.kind == "iota")


def arange_of(node) -> tuple[int, int, int] | None:
    """(start, step, count) of a `torch.arange` node of ints; None for any other
    node (Note [Ranges in kernels] in passes/schedule.py)."""
    if node.target not in RANGES:
        return None
    bound = bind_args(node.target, node.args, node.kwargs)
    start, end, step = bound.get("start", 0), bound["end"], bound.get("step", 1)
    if not all(
        isinstance(v, int) and not isinstance(v, bool) for v in (start, end, step)
    ):
        return None
    return start, step, node.tensor_meta.numel


# Kernel ops of booleans and integers: eager raises for floats, where some of the
# meta kernels (`bitwise_and.Tensor`, `bitwise_left_shift.Tensor_Scalar`) return a
# float result. On floats they stay extern calls, which raise as eager does.
INTEGER_ONLY = frozenset(
    {
        "bitwise_and",
        "bitwise_or",
        "bitwise_xor",
        "bitwise_not",
        "shift_left",
        "shift_right",
    }
)

# Reductions: kernel reduction op and how the result is finished.
REDUCTIONS: dict[str, str] = {
    "aten.sum.default": "sum",
    "aten.sum.dim_IntList": "sum",
    "aten.mean.default": "mean",
    "aten.mean.dim": "mean",
    "aten.amax.default": "max",
    "aten.max.default": "max",
    "aten.min.default": "min",
    "aten.amin.default": "min",
    "aten.var.correction": "var",
    "aten.var.dim": "var",
    "aten.var_mean.correction": "var_mean",
    "aten.var_mean.dim": "var_mean",
    "aten.argmax.default": "argmax",
    "aten.argmin.default": "argmin",
    "aten.prod.default": "prod",
    "aten.prod.dim_int": "prod",
}

# Scans: kernel scan op (the running sum or product along one dimension, see Note
# [Scans] in passes/schedule.py).
SCANS: dict[str, str] = {
    "aten.cumsum.default": "sum",
    "aten.cumprod.default": "prod",
}

# Ops that move data: each element of the result is an element of an input, or a
# constant, at a position that is index arithmetic of its own (Note [Data movement
# in kernels] in passes/schedule.py).
MOVEMENT = (
    "aten.cat.default",
    "aten.constant_pad_nd.default",
    "aten.roll.default",
    "aten.flip.default",
)

# Ops that read an input at positions given by another (an index tensor): the
# index is loaded, and the input at it (Note [Indirect loads] in schedule.py).
# `_unsafe_index` is `x[i0, i1, ...]` whose indices are in range by construction
# (the decompositions of pads and interpolations), unchecked, as eager's is.
UNSAFE_INDEX = "aten._unsafe_index.Tensor"
GATHERS = ("aten.index.Tensor", "aten.gather.default", UNSAFE_INDEX)
INDEX_TYPES = (torch.int64, torch.int32)
# Ops that write or add values into a copy of a tensor at positions given by index
# tensors: `x.index_put(indices, v, accumulate)` (and `_unsafe_index_put`, which
# PyTorch's decompositions write), and the same with a mask of which values are
# added (an embedding's gradient). A kernel stores or adds each value into its
# element (Note [Scatters] in schedule.py): on a GPU an add is atomic, which
# Triton has for the dtypes of `ATOMIC_TYPES`; the C++ kernel stores or adds one
# value after another.
# `x.index_reduce(dim, index, source, "amax")` (or "amin"), x included, keeps the
# larger (smaller) of each element and the values scattered into it: a kernel
# keeps it atomically on a GPU, for the dtypes of `EXTREMA_TYPES`, and in order in
# C++; `scatter_reduce`'s maxima and minima decompose into it.
MASKED_PUT = "aten._unsafe_masked_index_put_accumulate.default"
INDEX_REDUCE = "aten.index_reduce.default"
PUTS = (
    "aten.index_put.default",
    "aten._unsafe_index_put.default",
    MASKED_PUT,
    INDEX_REDUCE,
)
EXTREMA = ("amax", "amin")
ATOMIC_TYPES = {
    "cuda": (torch.float32, torch.float64, torch.float16, torch.int32),
    "cpu": (
        torch.float32,
        torch.float64,
        torch.float16,
        torch.bfloat16,
        torch.int32,
        torch.int64,
    ),
}

EXTREMA_TYPES = {
    "cuda": (torch.float32, torch.float64, torch.int32, torch.int64),
    "cpu": (
        torch.float32,
        torch.float64,
        torch.float16,
        torch.bfloat16,
        torch.uint8,
        torch.int8,
        torch.int16,
        torch.int32,
        torch.int64,
    ),
}

FLOAT_TYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
HALF_TYPES = (torch.float16, torch.bfloat16)


# Ops that raise on tensor data (an index out of range), which meta tensors cannot
# check: they run even when nothing uses their result, as eager runs them.
CHECKS_DATA = frozenset(
    {
        "aten.index.Tensor",
        "aten.index_select.default",
        "aten.gather.default",
        "aten.take.default",
        "aten.take_along_dim.default",
        "aten.embedding.default",
        "aten.embedding_bag.default",
        "aten._embedding_bag.default",
        "aten.one_hot.default",
        "aten.bincount.default",
        "aten.multinomial.default",
        "aten._assert_async.default",
        "aten._assert_async.msg",
        "aten._linalg_check_errors.default",  # `linalg.inv` of a singular matrix
    }
)


# Ops that return a fresh tensor which is nonetheless a reinterpretation of one input.
EXTRA_VIEWS = ("aten._unsafe_view.default",)


# Note [Views and copies that may alias]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A schema saying "the result aliases the input" (`Tensor(a) -> Tensor(a)`) is not
# enough to make an op a view. `contiguous`, `reshape`, `flatten`, `to` and the other
# composite ops (a CompositeImplicitAutograd kernel, written in terms of other ops)
# return their input, or a view of it, only where its layout allows, and otherwise a
# new tensor in a new layout: `x.t().contiguous()` is a copy. Read as a view of `x`,
# its meta strides (those of the copy) would address `x`'s memory wrongly. So a view is
# an op that aliases *always*: one that aliases by schema and is not composite.
# Composite ones are decomposed by their own kernel (passes/decompose.py), into real
# views and real copies (`clone(memory_format=...)`, `_to_copy`); left whole, they run
# as extern calls.


def is_view(target: str) -> bool:
    """Whether an op's result always aliases its first argument (from the op's
    schema and kernels: Note [Views and copies that may alias])."""
    if target == "getitem" or target in EXTRA_VIEWS:
        return True
    return _aliases(target) and not _composite(target)


def is_random(target: str) -> bool:
    """Whether an ATen op draws random numbers (dropout, `bernoulli`): computed
    twice it draws twice, and its draws follow the order of the calls."""
    if not target.startswith("aten."):
        return False
    return torch.Tag.nondeterministic_seeded in resolve_op(target).tags


def may_copy(target: str) -> bool:
    """Whether an op's schema says its result aliases its input, but the op is a
    composite that copies where the layout asks for it (`contiguous`)."""
    return _composite(target) and _aliases(target)


@functools.cache
def _aliases(target: str) -> bool:
    if not target.startswith("aten."):
        return False

    schema = resolve_op(target)._schema
    return bool(schema.returns) and all(
        r.alias_info is not None and not r.alias_info.is_write for r in schema.returns
    )


def _composite(target: str) -> bool:
    """Whether the op has a CompositeImplicitAutograd kernel (made of other ops)."""
    ns, packet, overload = target.split(".")
    name = f"{ns}::{packet}" + ("" if overload == "default" else f".{overload}")
    return torch._C._dispatch_has_kernel_for_dispatch_key(
        name, "CompositeImplicitAutograd"
    )


@functools.cache
def copies_that_may_alias() -> tuple:
    """Every ATen overload for which `may_copy` holds, in name order."""

    targets = []
    for name in sorted(torch._C._dispatch_get_all_op_names()):
        packet, _, overload = name.removeprefix("aten::").partition(".")
        target = f"aten.{packet}.{overload or 'default'}"
        if name.startswith("aten::") and may_copy(target):
            targets.append(target)
    return tuple(resolve_op(t) for t in targets)


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """Kernels compute f16/bf16 in f32."""
    return torch.float32 if dtype in HALF_TYPES else dtype


# Kernel ops that round an f32 value to f16/bf16 and back: an explicit cast to one
# (`x.to(torch.bfloat16)`) rounds there, wherever it sits in a fused chain, although
# its value is computed on in f32 (Note [Rounding casts] in passes/schedule.py).
ROUNDING = {torch.float16: "round_f16", torch.bfloat16: "round_bf16"}


SUPPORTED_DTYPES = (
    torch.float16,
    torch.bfloat16,
    torch.float32,
    torch.float64,
    torch.int8,
    torch.uint8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.bool,
)


ATTENTION_PARAMETERS = (
    "query",
    "key",
    "value",
    "attn_mask",
    "dropout_p",
    "is_causal",
    "scale",
    "enable_gqa",
)


def attention_arguments(args: tuple, kwargs: dict) -> dict:
    """A call of `scaled_dot_product_attention`'s arguments, by name."""
    return dict(zip(ATTENTION_PARAMETERS, args)) | kwargs


def fused_attention(given: dict, device: str) -> bool:
    """Whether the device's fused attention kernel, with its own backward, computes
    a training variant's call of `scaled_dot_product_attention` (its arguments by
    name): the memory-efficient kernel on cuda, which also draws dropout; the CPU's
    flash attention, which takes a constant mask of the query's dtype but no
    dropout (Note [Attention in the joint graph] in passes/joint.py)."""
    q, k = given["query"], given["key"]
    mask, p = given.get("attn_mask"), given.get("dropout_p", 0.0)
    if given.get("enable_gqa", False) or not isinstance(p, (int, float)):
        return False
    if q.dim() != 4 or q.shape[1] != k.shape[1] or not q.dtype.is_floating_point:
        return False
    if p and device != "cuda":
        return False
    if mask is None:
        return True
    return device != "cuda" and mask.dtype == q.dtype and not mask.requires_grad


def attention_layout(shape: tuple[int, ...], args: tuple) -> tuple[int, ...]:
    """Strides of attention's output as its fused kernels (flash, memory-efficient)
    write it: (B, H, L, D) stored as (B, L, H, D), so `y.transpose(1, 2)` is
    contiguous for free."""
    if len(shape) != 4:
        return contiguous_strides(shape)
    _, heads, length, dim = shape
    return (length * heads * dim, dim, heads * dim, 1)


def convolution_layout(shape: tuple[int, ...], args: tuple) -> tuple[int, ...]:
    """Strides of a convolution's output as oneDNN and cuDNN write it: channels-last
    (NHWC in memory) when its input or weight is, contiguous otherwise. The meta
    kernel says contiguous for any input (Note [Channels-last convolutions] in
    passes/channels_last.py)."""
    x, w = args[0], args[1]
    if len(shape) == 4 and any(_channels_last(t) for t in (x, w)):
        _, c, h, width = shape
        return (h * width * c, 1, width * c, c)
    return contiguous_strides(shape)


def _channels_last(t) -> bool:
    return (
        isinstance(t, torch.Tensor)
        and t.dim() == 4
        and not t.is_contiguous()
        and t.is_contiguous(memory_format=torch.channels_last)
    )


# Extern ops whose run-time layout depends on the backend they pick, as a function of
# the result's shape and the op's arguments: compiled code assumes this layout, and
# the wrapper copies into it only when the result differs.
EXTERN_LAYOUT = {
    "aten.scaled_dot_product_attention.default": attention_layout,
    "aten.convolution.default": convolution_layout,
}


def device_strides(target: str, out: torch.Tensor, args: tuple) -> tuple[int, ...]:
    """The strides a device's kernel gives `out`, the result of `target` on meta
    tensors: `EXTERN_LAYOUT`'s where it has a row, the meta kernel's otherwise."""
    layout = EXTERN_LAYOUT.get(target)
    return layout(tuple(out.shape), args) if layout else out.stride()


def grouped_mm_result(mat_a, mat_b, offs=None, bias=None, out_dtype=None):
    """`_grouped_mm`'s result without the limits of one device's kernel: its
    shape, the dtype asked for (the inputs' by default), contiguous. The shapes
    must agree as every device's kernel requires; dtypes, strides and alignment
    are for the kernel to accept or refuse when it runs, as in eager."""
    a2, b2 = mat_a.dim() == 2, mat_b.dim() == 2
    torch._check(
        mat_a.dim() in (2, 3) and mat_b.dim() in (2, 3),
        lambda: "grouped_mm: multiplicands must be 2D or 3D",
    )
    if not (a2 and b2):
        torch._check(
            mat_a.size(-1) == mat_b.size(-2),
            lambda: "contraction dimension of mat_a and mat_b must match",
        )
    torch._check(
        (offs is not None) == (a2 or b2),
        lambda: "grouped_mm: offsets are needed exactly when a multiplicand is 2D",
    )
    groups = offs.size(0) if offs is not None else mat_a.size(0)
    if a2 and b2:
        shape = [groups, mat_a.size(0), mat_b.size(1)]
    elif a2:
        torch._check(groups == mat_b.size(0), lambda: "group counts must match")
        shape = [mat_a.size(0), mat_b.size(-1)]
    elif b2:
        torch._check(groups == mat_a.size(0), lambda: "group counts must match")
        shape = [mat_a.size(1), mat_b.size(1)]
    else:
        torch._check(mat_a.size(0) == mat_b.size(0), lambda: "batch sizes must match")
        shape = [mat_a.size(0), mat_a.size(1), mat_b.size(-1)]
    dtype = out_dtype or mat_a.dtype
    return torch.empty(shape, dtype=dtype, device=mat_a.device)


# Note [Meta kernels with one device's limits]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A few meta kernels check what one device's kernel accepts rather than what the op
# means: `_grouped_mm`'s takes bf16 only, with 16-byte aligned strides, as CUDA's
# kernel did, where the CPU kernel multiplies float32 (transformers' mixture of
# experts calls it so). Where such a meta kernel refuses, the op's result comes
# from its row here instead, which checks the shapes alone: the op runs as an
# extern call, and the device's kernel accepts or refuses its arguments at run
# time, as it does in eager.
SHAPE_RULES = {
    "aten._grouped_mm.default": grouped_mm_result,
}


def on_meta(target: str, args: tuple, kwargs: dict):
    """Op `target` on meta tensors: its meta kernel's result, or where that kernel
    refuses and the op has a row in SHAPE_RULES, the row's."""
    try:
        return resolve_op(target)(*args, **kwargs)
    except RuntimeError:
        rule = SHAPE_RULES.get(target)
        if rule is None:
            raise
        return rule(*args, **kwargs)


# Extern ops that return a new dense tensor laid out the same on every device, as
# their meta kernels say; other extern results may be laid out otherwise at run time
# (passes/extern_layouts.py)
FIXED_LAYOUT = frozenset(
    {
        "aten.mm.default",
        "aten.addmm.default",
        "aten.bmm.default",
        "aten.baddbmm.default",
        "aten.linear.default",
        "aten._addmm_activation.default",
        "aten.embedding.default",
        "aten.arange.start",
        *EXTERN_LAYOUT,
    }
)


def bind_args(target: str, args: tuple, kwargs: tuple) -> dict:
    """Arguments by schema name, with the schema's defaults filled in."""

    schema = resolve_op(target)._schema
    given = dict(kwargs)
    out = {}
    for i, a in enumerate(schema.arguments):
        if i < len(args) and not a.kwarg_only:
            out[a.name] = args[i]
        elif a.name in given:
            out[a.name] = given[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
    return out


def correction(target: str, args: tuple, kwargs: tuple) -> int:
    """The degrees of freedom a var / var_mean op subtracts (Bessel's: 1)."""
    bound = bind_args(target, args, kwargs)
    if "unbiased" in bound:
        return 1 if bound["unbiased"] else 0
    value = bound.get("correction")
    return 1 if value is None else value
