"""Kernel op → source text, one table per backend.

Adding a pointwise op is one row in `ir/ops.py` plus one row here per backend (and a
row in tests/codegen/test_op_cases.py); a test checks every op has a row in each table.
`{0}`, `{1}`, `{2}` are the operands, already converted to the op's dtype: names or
literals, so a row may use one twice. A Triton row may call `libdevice.<function>`
(CUDA's libdevice on a GPU, NumPy stand-ins in Triton's interpreter:
runtime_shim/libdevice.py), which takes float32 or float64 tensors, never halves.

Note [Operators that differ from torch's]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A backend operator does not always mean what the torch op means for every dtype:
`+` on Triton's 1-bit `tl.int1` wraps (True + True is False; torch's is True, a
logical or), signed overflow in C++ is undefined (the compiler may fold
`x + 1 > x` to true; torch wraps), and `std::floor` of an int64 goes through
double. Such an op gets a row in `TRITON_TYPED` / `CPP_TYPED` under (op, kind of
its operands' dtype: "bool", "uint", "int" or "float"), which `op_text` takes
before the op's general row. tests/codegen/test_dtype_semantics.py runs every op
over every dtype on both backends against eager.

Note [Unsigned integers]
~~~~~~~~~~~~~~~~~~~~~~~~
uint8 (images, masks) is the one unsigned dtype kernels compute, kind "uint",
which takes an int's row where it has none of its own. A number meets a uint8
tensor as torch makes it meet one, wrapped into it (`x + -2` adds 254, `x == -2`
compares with 254: the literal is written wrapped, where Triton refuses a
negative one). Its own rows are those where an int's would look at a sign: sign,
signbit, abs, pow (no negative exponent), remainder and floor division (the
quotient of unsigned numbers, no correction), and `>>` past the width (0, where
a signed value fills with its sign). A float becomes a uint8 through int64, as
torch converts it (-2.5 is 254; a float's own conversion would saturate on a GPU
and be undefined in C++).
"""

from __future__ import annotations

import math

import torch

from transpiler.ir.dynamic import Dim

TRITON: dict[str, str] = {
    "identity": "{0}",
    "add": "{0} + {1}",
    "sub": "{0} - {1}",
    "rsub": "{1} - {0}",
    "mul": "{0} * {1}",
    "truediv": "{0} / {1}",
    "neg": "-{0}",
    "abs": "tl.abs({0})",
    "relu": "tl.where({0} < 0, 0, {0})",
    "exp": "tl.exp({0})",
    "log": "tl.log({0})",
    "sqrt": "tl.sqrt({0})",
    "rsqrt": "tl.rsqrt({0})",
    "sin": "tl.sin({0})",
    "cos": "tl.cos({0})",
    "tanh": "_tanh({0})",
    "sigmoid": "tl.sigmoid({0})",
    "erf": "tl.erf({0})",
    "gelu": "{0} * 0.5 * (1.0 + tl.erf({0} * 0.7071067811865476))",
    "floor": "tl.floor({0})",
    "ceil": "tl.ceil({0})",
    "reciprocal": "1.0 / {0}",
    "logical_not": "{0} == 0",
    "log2": "tl.log2({0})",
    "log10": "libdevice.log10({0})",
    "exp2": "tl.exp2({0})",
    "log1p": "libdevice.log1p({0})",
    "expm1": "libdevice.expm1({0})",
    "trunc": "tl.where({0} < 0, tl.ceil({0}), tl.floor({0}))",
    "sign": "tl.where({0} > 0, 1.0, tl.where({0} < 0, -1.0, 0.0))",  # NaN: 0
    "isnan": "{0} != {0}",
    "round": "_round({0})",
    "tan": "tl.sin({0}) / tl.cos({0})",
    "erfc": "_erfc({0})",
    "asin": "libdevice.asin({0})",
    "acos": "libdevice.acos({0})",
    "atan": "libdevice.atan({0})",
    "sinh": "libdevice.sinh({0})",
    "cosh": "libdevice.cosh({0})",
    "asinh": "libdevice.asinh({0})",
    "acosh": "libdevice.acosh({0})",
    "atanh": "libdevice.atanh({0})",
    "lgamma": "libdevice.lgamma({0})",
    "signbit": "libdevice.signbit({0}) != 0",
    "pow": "libdevice.pow({0}, {1})",
    "atan2": "libdevice.atan2({0}, {1})",
    "hypot": "_hypot({0}, {1})",
    "copysign": "libdevice.copysign({0}, {1})",
    "fmod": "libdevice.fmod({0}, {1})",
    "remainder": "_remainder({0}, {1})",
    "floor_divide": "_floor_divide({0}, {1})",
    "maximum": "_maximum({0}, {1})",
    "minimum": "_minimum({0}, {1})",
    "fmax": "tl.where(({0} > {1}) | ({1} != {1}), {0}, {1})",
    "fmin": "tl.where(({0} < {1}) | ({1} != {1}), {0}, {1})",
    "eq": "{0} == {1}",
    "ne": "{0} != {1}",
    "lt": "{0} < {1}",
    "le": "{0} <= {1}",
    "gt": "{0} > {1}",
    "ge": "{0} >= {1}",
    "logical_and": "({0} != 0) & ({1} != 0)",
    "logical_or": "({0} != 0) | ({1} != 0)",
    "bitwise_and": "{0} & {1}",
    "bitwise_or": "{0} | {1}",
    "bitwise_xor": "{0} ^ {1}",
    "bitwise_not": "~{0}",
    "shift_left": "_shift_left({0}, {1})",
    "shift_right": "_shift_right({0}, {1})",
    "where": "tl.where({0}, {1}, {2})",
    "round_f16": "{0}.to(tl.float16).to(tl.float32)",
    "round_bf16": "{0}.to(tl.bfloat16).to(tl.float32)",
}

CPP: dict[str, str] = {
    "identity": "{0}",
    "add": "{0} + {1}",
    "sub": "{0} - {1}",
    "rsub": "{1} - {0}",
    "mul": "{0} * {1}",
    "truediv": "{0} / {1}",
    "neg": "-{0}",
    "abs": "std::abs({0})",
    "relu": "{0} < 0 ? 0 : {0}",
    "exp": "exp_f32({0})",
    "log": "log_f32({0})",
    "sqrt": "std::sqrt({0})",
    "rsqrt": "1 / std::sqrt({0})",
    "sin": "sin_f32({0})",
    "cos": "cos_f32({0})",
    "tanh": "tanh_f32({0})",
    "sigmoid": "sigmoid_f32({0})",
    "erf": "erf_f32({0})",
    "gelu": "gelu_f32({0})",
    "floor": "std::floor({0})",
    "ceil": "std::ceil({0})",
    "reciprocal": "1 / {0}",
    "logical_not": "!{0}",
    "log2": "std::log2({0})",
    "log10": "std::log10({0})",
    "exp2": "std::exp2({0})",
    "log1p": "log1p_f32({0})",
    "expm1": "expm1_f32({0})",
    "trunc": "std::trunc({0})",
    "sign": "({0} > 0 ? 1 : ({0} < 0 ? -1 : 0))",  # NaN: 0, as torch.sign
    "isnan": "{0} != {0}",
    "round": "std::nearbyint({0})",  # half to even, the default rounding mode
    "tan": "std::tan({0})",
    "erfc": "std::erfc({0})",
    "asin": "std::asin({0})",
    "acos": "std::acos({0})",
    "atan": "std::atan({0})",
    "sinh": "std::sinh({0})",
    "cosh": "std::cosh({0})",
    "asinh": "std::asinh({0})",
    "acosh": "std::acosh({0})",
    "atanh": "std::atanh({0})",
    "lgamma": "std::lgamma({0})",
    "signbit": "sign_bit({0})",
    "pow": "std::pow({0}, {1})",
    "atan2": "std::atan2({0}, {1})",
    "hypot": "std::hypot({0}, {1})",
    "copysign": "std::copysign({0}, {1})",
    "fmod": "std::fmod({0}, {1})",
    "remainder": "floor_mod({0}, {1})",
    "floor_divide": "floor_div({0}, {1})",
    "maximum": "max_nan({0}, {1})",
    "minimum": "min_nan({0}, {1})",
    "fmax": "({0} > {1} || {1} != {1} ? {0} : {1})",
    "fmin": "({0} < {1} || {1} != {1} ? {0} : {1})",
    "eq": "{0} == {1}",
    "ne": "{0} != {1}",
    "lt": "{0} < {1}",
    "le": "{0} <= {1}",
    "gt": "{0} > {1}",
    "ge": "{0} >= {1}",
    "logical_and": "{0} && {1}",
    "logical_or": "{0} || {1}",
    "bitwise_and": "{0} & {1}",
    "bitwise_or": "{0} | {1}",
    "bitwise_xor": "{0} ^ {1}",
    "bitwise_not": "~{0}",
    "shift_left": "shift_left({0}, {1})",
    "shift_right": "shift_right({0}, {1})",
    "where": "{0} ? {1} : {2}",
    "round_f16": "static_cast<float>(static_cast<_Float16>({0}))",
    "round_bf16": "bf16_to_float(float_to_bf16({0}))",
}

# (op, dtype kind of its operands) -> text where the general row would be wrong
TRITON_TYPED: dict[tuple[str, str], str] = {
    ("add", "bool"): "{0} | {1}",
    ("mul", "bool"): "{0} & {1}",
    # Triton < 3.9 computes a float's `-x` as `0 - x`: +0.0 for x = +0.0
    ("neg", "float"): "{0} * -1.0",
    ("floor", "int"): "{0}",
    ("ceil", "int"): "{0}",
    ("trunc", "int"): "{0}",
    ("sign", "bool"): "{0}",
    ("sign", "int"): "tl.where({0} > 0, 1, tl.where({0} < 0, -1, {0}))",
    ("round", "int"): "{0}",
    ("signbit", "bool"): "{0} != {0}",
    ("signbit", "int"): "{0} < 0",
    ("pow", "int"): "_pow_int({0}, {1})",
    ("fmod", "int"): "{0} % {1}",  # C's remainder: the dividend's sign
    ("remainder", "int"): "_remainder_int({0}, {1})",
    ("floor_divide", "int"): "_floor_divide_int({0}, {1})",
    ("bitwise_not", "bool"): "{0} == 0",
    # unsigned: no sign to fill with or correct for (Note [Unsigned integers])
    ("sign", "uint"): "tl.minimum({0}, 1)",
    ("signbit", "uint"): "{0} != {0}",
    ("pow", "uint"): "_pow_uint({0}, {1})",
    ("remainder", "uint"): "{0} % {1}",
    ("floor_divide", "uint"): "{0} // {1}",
    ("shift_right", "uint"): "_shift_right_uint({0}, {1})",
    # `~x` is `x ^ -1`, a constant uint8 does not hold (Triton 3.8's interpreter
    # raises); uint8 is the one unsigned dtype kernels hold
    ("bitwise_not", "uint"): "{0} ^ 255",
}

CPP_TYPED: dict[tuple[str, str], str] = {
    ("add", "bool"): "{0} || {1}",
    ("mul", "bool"): "{0} && {1}",
    ("floor", "int"): "{0}",
    ("ceil", "int"): "{0}",
    ("trunc", "int"): "{0}",
    ("sign", "bool"): "{0}",
    ("round", "int"): "{0}",
    ("signbit", "bool"): "{0} != {0}",
    ("signbit", "int"): "{0} < 0",
    ("pow", "int"): "pow_int({0}, {1})",
    ("fmod", "int"): "{0} % {1}",
    ("bitwise_not", "bool"): "!{0}",
    # two's complement wrap-around, as torch computes: no undefined signed overflow
    ("add", "int"): "wrap_add({0}, {1})",
    ("sub", "int"): "wrap_sub({0}, {1})",
    ("rsub", "int"): "wrap_sub({1}, {0})",
    ("mul", "int"): "wrap_mul({0}, {1})",
    ("neg", "int"): "wrap_neg({0})",
    ("abs", "int"): "wrap_abs({0})",
    ("abs", "uint"): "{0}",
    ("signbit", "uint"): "{0} != {0}",
    ("shift_right", "uint"): "shift_right_uint({0}, {1})",
}


def dtype_kind(dtype: torch.dtype) -> str:
    """The key of a dtype in the typed tables: "bool", "uint" (uint8), "int" or
    "float"."""
    if dtype == torch.bool:
        return "bool"
    if dtype == torch.uint8:
        return "uint"
    return "float" if dtype.is_floating_point else "int"


def op_text(table: dict[str, str], typed: dict, op: str, dtype: torch.dtype) -> str:
    """A kernel op's text for operands of `dtype` (Note [Operators that differ from
    torch's]); an unsigned integer's, where it has none of its own, an int's."""
    kind = dtype_kind(dtype)
    if (op, kind) not in typed and kind == "uint":
        kind = "int"
    return typed.get((op, kind), table[op])


# Triton helpers a kernel may call, emitted once per generated module when used.
TRITON_HELPERS = {
    "_tanh": "tanh",
    "_maximum": "maximum",
    "_argmax": "argmax",
    "_argmin": "argmin",
    "_welford": "var_mean",
    "_minimum": "minimum",
    "_product": "prod",
    "_round": "round",
    "_erfc": "erfc",
    "_hypot": "hypot",
    "_pow_int": "pow",
    "_remainder": "remainder",
    "_remainder_int": "remainder",
    "_floor_divide": "floor_divide",
    "_floor_divide_int": "floor_divide",
    "_shift_left": "shift_left",
    "_shift_right": "shift_right",
    "_pow_uint": "pow",
    "_shift_right_uint": "shift_right",
}

# Ops whose Triton text takes tensors (a helper, or libdevice, which takes one
# float dtype): a Python number operand is passed as a 0-d tensor of the op's dtype
TRITON_TENSOR_OPERANDS = {
    "pow",
    "atan2",
    "hypot",
    "copysign",
    "fmod",
    "remainder",
    "floor_divide",
    "shift_left",
    "shift_right",
}

# C++ helpers beyond the shared header (runtime_shim/kernels.h), emitted once per
# generated file when used
CPP_HELPERS = {
    "sign_bit": "signbit",
    "floor_mod": "remainder",
    "floor_div": "floor_divide",
    "pow_int": "pow",
    "shift_left": "shift_left",
    "shift_right": "shift_right",
    "shift_right_uint": "shift_right",
}

# Reductions by an arithmetic operator: the value each starts from, on both backends
OPERATOR_STARTS = {"sum": "0", "prod": "1"}

TRITON_DTYPES = {
    torch.float16: "tl.float16",
    torch.bfloat16: "tl.bfloat16",
    torch.float32: "tl.float32",
    torch.float64: "tl.float64",
    torch.int8: "tl.int8",
    torch.uint8: "tl.uint8",
    torch.int16: "tl.int16",
    torch.int32: "tl.int32",
    torch.int64: "tl.int64",
    torch.bool: "tl.int1",
}
CPP_TYPES = {
    torch.float16: "_Float16",
    torch.bfloat16: "uint16_t",
    torch.float32: "float",
    torch.float64: "double",
    torch.int8: "int8_t",
    torch.uint8: "uint8_t",
    torch.int16: "int16_t",
    torch.int32: "int32_t",
    torch.int64: "int64_t",
    torch.bool: "bool",
}


def triton_literal(value, dtype: torch.dtype) -> str:
    if isinstance(value, Dim):  # a dynamic size, an int expression
        return f"({value})"
    if dtype == torch.bool:
        return "1" if value else "0"
    if dtype.is_floating_point:
        value = float(value)
        if math.isnan(value):  # a sign bit only from bits, as -0.0's
            return (
                _NEGATIVE_NAN[dtype == torch.float64]
                if _signed(value)
                else 'float("nan")'
            )
        if math.isinf(value):
            return 'float("inf")' if value > 0 else 'float("-inf")'
        if value == 0 and _signed(value):
            return _NEGATIVE_ZERO[dtype == torch.float64]
        return repr(value)
    if dtype == torch.uint8:  # a negative number wraps, as torch's does
        return str(int(value) % 256)
    return str(int(value))


# -0.0 as a 0-d tensor, from its bits: Triton before 3.9 makes any float constant
# equal to 0 (`tl.full`, a Python float operand) +0.0
_NEGATIVE_ZERO = {
    False: "tl.full([], -2147483648, tl.int32).to(tl.float32, bitcast=True)",
    True: "tl.full([], -9223372036854775808, tl.int64).to(tl.float64, bitcast=True)",
}
# a NaN with its sign bit set (Note [Extrema of NaNs] in passes/schedule.py), from
# its bits as -0.0 is
_NEGATIVE_NAN = {
    False: "tl.full([], -4194304, tl.int32).to(tl.float32, bitcast=True)",
    True: "tl.full([], -2251799813685248, tl.int64).to(tl.float64, bitcast=True)",
}


def _signed(value: float) -> bool:
    return math.copysign(1.0, value) < 0


def cpp_literal(value, dtype: torch.dtype) -> str:
    if isinstance(value, Dim):
        return f"static_cast<{CPP_TYPES[dtype]}>({value})"
    if dtype == torch.bool:
        return "true" if value else "false"
    if dtype.is_floating_point:
        value = float(value)
        suffix = "f" if dtype != torch.float64 else ""
        if math.isnan(value):
            return "-NAN" if _signed(value) else "NAN"
        if math.isinf(value):
            return "INFINITY" if value > 0 else "-INFINITY"
        return repr(value) + suffix
    if dtype == torch.int64:  # int64_t, not `long long`: max_nan(T, T) deduces T
        return f"int64_t{{{int(value)}}}"
    if dtype == torch.uint8:  # a negative number wraps, as torch's does
        return f"static_cast<uint8_t>({int(value) % 256})"
    if dtype in (torch.int8, torch.int16):  # not promoted to int
        return f"static_cast<{CPP_TYPES[dtype]}>({int(value)})"
    return str(int(value))
