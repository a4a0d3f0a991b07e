"""`libdevice`: the math functions generated Triton kernels call that `triton.language`
does not have (`libdevice.pow`, `libdevice.atan2`, `libdevice.fmod`, ...).

Compiled for a GPU, it is Triton's `triton.language.extra.libdevice`, which the
backend resolves to CUDA's libdevice (or ROCm's device libraries). Triton's CPU
interpreter (`TRITON_INTERPRET=1`) cannot call an external library: there
`libdevice` is a namespace of stand-ins, the same functions computed with NumPy on the
interpreter's arrays (NumPy's ufuncs are C's `pow`, `atan2`, `fmod`, ...). A
generated module takes whichever applies when it is imported, as `triton.jit`
decides when it decorates a kernel whether the kernel is interpreted.

The stand-ins take what libdevice takes: tensors of one float dtype, float32 or
float64 (libdevice has no half-precision or integer rows), so a kernel that would
not compile for a GPU fails in the interpreter too.
"""

from __future__ import annotations

import math
import os
from types import SimpleNamespace


def interpreting() -> bool:
    """Whether Triton runs kernels in its CPU interpreter (as `triton.jit` reads
    it: `knobs.runtime.interpret` where Triton has knobs, `TRITON_INTERPRET`
    otherwise)."""
    try:
        from triton import knobs

        return bool(knobs.runtime.interpret)
    except (ImportError, AttributeError):
        return os.environ.get("TRITON_INTERPRET", "0").lower() in ("1", "true", "on")


def _compiled():
    try:
        from triton.language.extra import libdevice as compiled
    except ImportError:  # a Triton without the backend-neutral module
        from triton.language.extra.cuda import libdevice as compiled
    return compiled


def _elementwise(name: str, function, result=None):
    """A libdevice function over interpreter tensors: `function` applied to their
    NumPy arrays, broadcast; its result in the operands' dtype, or `result`."""

    def call(*args):
        import numpy as np
        import triton.language as tl
        from triton.runtime.interpreter import TensorHandle

        dtypes = {getattr(a, "dtype", None) for a in args}
        if len(dtypes) != 1 or not dtypes <= {tl.float32, tl.float64}:
            raise TypeError(
                f"libdevice.{name} takes tensors of float32 or of float64, got {dtypes}"
            )
        (dtype,) = dtypes
        out_dtype = result or dtype
        with np.errstate(all="ignore"):
            data = np.asarray(function(*(a.handle.data for a in args)))
        blocks = [a.type.shape for a in args if a.type.is_block()]
        if blocks:
            shape = np.broadcast_shapes(*(tuple(int(d) for d in s) for s in blocks))
            data = np.broadcast_to(data, shape)
            ty = tl.block_type(out_dtype, list(shape))
        else:
            ty = out_dtype
        numpy = {tl.float32: np.float32, tl.float64: np.float64, tl.int32: np.int32}
        data = np.ascontiguousarray(data, dtype=numpy[out_dtype])
        return tl.core.tensor(TensorHandle(data, out_dtype), ty)

    call.__name__ = name
    return call


def _lgamma(x):
    """C's lgamma, from Python's (in float64, rounded once): +inf at the poles
    (0, -1, -2, ...: Python raises there) and past the float64 range."""
    import numpy as np

    def one(v: float) -> float:
        try:
            return math.lgamma(v)
        except (ValueError, OverflowError):
            return math.inf

    return np.vectorize(one, otypes=[np.float64])(x.astype(np.float64)).astype(x.dtype)


def _interpreted() -> SimpleNamespace:
    import numpy as np
    import triton.language as tl

    unary = {
        "asin": np.arcsin,
        "acos": np.arccos,
        "atan": np.arctan,
        "sinh": np.sinh,
        "cosh": np.cosh,
        "asinh": np.arcsinh,
        "acosh": np.arccosh,
        "atanh": np.arctanh,
        "lgamma": _lgamma,
        "log10": np.log10,
        "log1p": np.log1p,
        "expm1": np.expm1,
    }
    binary = {
        "pow": np.power,
        "atan2": np.arctan2,
        "copysign": np.copysign,
        "fmod": np.fmod,
    }
    functions = {n: _elementwise(n, f) for n, f in {**unary, **binary}.items()}
    functions["signbit"] = _elementwise("signbit", np.signbit, tl.int32)
    return SimpleNamespace(**functions)


def load():
    """The libdevice a generated Triton module calls: Triton's, or the
    interpreter's stand-ins."""
    return _interpreted() if interpreting() else _compiled()
