"""Where the tests run `_cuda_N` variants: Triton's CPU interpreter, or a real GPU.

Without a GPU (CI), `_cuda_N` variants are called with CPU tensors and their Triton
kernels run in Triton's interpreter (`TRITON_INTERPRET=1`, set by tests/conftest.py).
With `TRANSPILE_TEST_DEVICE=cuda` on a machine with a GPU, the same tests run the
real kernels: `on_gpu(variant)` moves the tensor arguments (and a module passed
first, for a module's variant) to the GPU, calls the variant, copies each argument
back into the caller's CPU tensor (so in-place updates are seen as the test expects)
and returns the outputs on the CPU. The tests' comparisons do not change.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import torch

REAL_GPU = os.environ.get("TRANSPILE_TEST_DEVICE") == "cuda"


def _to(value: Any, device: str, known: dict[int, Any] | None = None) -> Any:
    """`value` with its tensors on `device`, of the same types (a dataclass such as
    a `ModelOutput`, a named tuple, a plain object passed in: a cache). `known`
    maps objects (by id) to what they become: filled as objects are moved."""
    known = {} if known is None else known
    if id(value) in known:
        return known[id(value)]
    if isinstance(value, torch.Tensor):
        return value.to(device)
    if isinstance(value, torch.device):
        return torch.device(device)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = [f.name for f in dataclasses.fields(value) if f.init]
        moved = {n: _to(getattr(value, n), device, known) for n in fields}
        return dataclasses.replace(value, **moved)
    if isinstance(value, tuple) and hasattr(value, "_make"):
        return value._make(_to(v, device, known) for v in value)
    if isinstance(value, (list, tuple)):
        return type(value)(_to(v, device, known) for v in value)
    if isinstance(value, dict):
        return {k: _to(v, device, known) for k, v in value.items()}
    if _plain_object(value):
        moved = known[id(value)] = object.__new__(type(value))
        vars(moved).update({k: _to(v, device, known) for k, v in vars(value).items()})
        return moved
    return value


def _plain_object(value: Any) -> bool:
    """An object of a Python class, its state in `__dict__` (not a module)."""
    return (
        hasattr(value, "__dict__")
        and not isinstance(value, (type, torch.nn.Module))
        and type(value).__setattr__ is object.__setattr__
        and type(value).__module__ != "builtins"
        and not callable(value)
    )


def _copy_back(moved: Any, original: Any) -> None:
    """Write what the variant left in `moved` (on the GPU) into `original`; an
    object's attributes the variant set are set on the original, on the CPU."""
    if isinstance(original, torch.Tensor):
        with torch.no_grad():
            if moved.shape != original.shape:  # `x.unsqueeze_(0)` changed its shape
                original.set_(moved.cpu())
            else:
                original.copy_(moved.cpu())
    elif isinstance(original, (list, tuple)):
        for m, o in zip(moved, original):
            _copy_back(m, o)
    elif isinstance(original, dict):
        for k in original:
            _copy_back(moved[k], original[k])
    elif _plain_object(original) and moved is not original:
        for k, v in vars(moved).items():
            was = vars(original).get(k)
            if isinstance(v, torch.Tensor):
                vars(original)[k] = v.cpu()
            elif isinstance(v, (list, tuple, dict)) or _plain_object(v):
                _copy_back(v, was)
            elif not isinstance(v, torch.device):  # a number the variant set
                vars(original)[k] = v


def _originals(value: Any, known: dict[int, Any]) -> dict[int, Any]:
    """id(moved object) -> the object of `value` it was moved from."""
    found: dict[int, Any] = {}

    def walk(v: Any) -> None:
        if id(v) in known and _plain_object(v):
            found[id(known[id(v)])] = v
        if isinstance(v, (list, tuple)):
            for x in v:
                walk(x)
        elif isinstance(v, dict):
            for x in v.values():
                walk(x)

    walk(value)
    return found


def on_gpu(variant: Callable[..., Any]) -> Callable[..., Any]:
    """`variant` as the tests call it (CPU tensors in and out), run on the GPU in
    GPU mode; itself otherwise."""
    if not REAL_GPU:
        return variant

    @functools.wraps(variant)
    def run(*args: Any, **kwargs: Any) -> Any:
        module = args[0] if args and isinstance(args[0], torch.nn.Module) else None
        if module is not None:
            module.to("cuda")  # in place: parameters keep their identity
        try:
            known: dict[int, Any] = {}
            gpu_args, gpu_kwargs = _to(args, "cuda", known), _to(kwargs, "cuda", known)
            out = variant(*gpu_args, **gpu_kwargs)
            torch.cuda.synchronize()
            _copy_back(gpu_args, args)
            _copy_back(gpu_kwargs, kwargs)
            # objects passed in and returned are the caller's own again
            originals = _originals((args, kwargs), known)
            return _to(out, "cpu", originals)
        finally:
            if module is not None:
                module.to("cpu")

    return run


def _round_to_bf16(data: np.ndarray) -> np.ndarray:
    """f32 -> bf16 bits, round to nearest even; NaN stays NaN."""
    f32 = np.ascontiguousarray(data, dtype=np.float32)
    bits = f32.view(np.uint32)
    rounded = (bits + np.uint32(0x7FFF) + ((bits >> 16) & np.uint32(1))) >> 16
    return np.where(np.isnan(f32), np.uint32(0x7FC0), rounded).astype(np.uint16)


@contextlib.contextmanager
def interpreter_rounds_like_gpu() -> Iterator[None]:
    """Triton's CPU interpreter converts f32 to bf16 by cutting off the low 16 bits
    (`InterpreterBuilder.cast_impl` passes no rounding mode, whatever
    `fp_downcast_rounding` says), where a GPU (`cvt.rn.bf16.f32`, what
    `x.to(tl.bfloat16)` compiles to) rounds to nearest even, as torch does. Inside
    this context the interpreter converts as the GPU does, so bf16 results compare
    exactly with eager, and a kernel that forgets to round still fails."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        yield
        return
    try:
        import triton.language as tl
        from triton.runtime import interpreter
    except ImportError:
        yield
        return
    builder = interpreter.InterpreterBuilder
    cast_impl = builder.cast_impl

    def rounding_cast_impl(self, src, dst_type):
        if src.dtype.scalar == tl.float32 and dst_type.scalar == tl.bfloat16:
            return interpreter.TensorHandle(_round_to_bf16(src.data), tl.bfloat16)
        return cast_impl(self, src, dst_type)

    builder.cast_impl = rounding_cast_impl
    try:
        yield
    finally:
        builder.cast_impl = cast_impl


@contextlib.contextmanager
def interpreter_splats_bools() -> Iterator[None]:
    """Triton 3.9's CPU interpreter labels a comparison of scalars (`t >= 0` of a
    value loaded once) with the operands' type, int64, and a splat of it to a block
    (a scalar mask of a block's store) then holds int64, which its store rejects
    ("mask has unsupported dtype"); compiled for a GPU, the same kernel is valid.
    Inside this context a splat to a block of int1 holds bools."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        yield
        return
    try:
        import triton.language as tl
        from triton.runtime import interpreter
    except ImportError:
        yield
        return
    builder = interpreter.InterpreterBuilder
    create_splat = builder.create_splat

    def splat_of_bools(self, ret_ty, arg):
        out = create_splat(self, ret_ty, arg)
        if ret_ty.scalar == tl.int1 and out.data.dtype != bool:
            return interpreter.TensorHandle(out.data.astype(bool), tl.int1)
        return out

    builder.create_splat = splat_of_bools
    try:
        yield
    finally:
        builder.create_splat = create_splat


@contextlib.contextmanager
def interpreter_as_gpu() -> Iterator[None]:
    """Triton's CPU interpreter as a GPU runs kernels: bf16 rounding and splats of
    bools (the two contexts above)."""
    with interpreter_rounds_like_gpu(), interpreter_splats_bools():
        yield
