"""Matmul epilogues: a linear layer and the elementwise kernel that reads its result,
as one Triton matmul whose epilogue is that kernel's body.

Before:  linear_2 = torch.nn.functional.linear(h, w)         # cuBLAS, to memory
         triton_fused_addmm_gelu_1(linear_2, b, gelu)        # read back: C + b, GELU
After:   triton_matmul_addmm_gelu_1(h, w, b, gelu)           # C = h @ w.T in registers

Note [Matmul epilogues]
~~~~~~~~~~~~~~~~~~~~~~~
The product never goes to memory: each program computes a tile of `a @ w.T` and
runs the consumer's body on it, reading the bias, a residual or whatever else that
body loads at the tile's flat positions `x = i * n + j`. The product is rounded to
the dtype `linear` would have returned before the body sees it, so the numbers are
those of the two-step code. Whether that beats cuBLAS followed by the one fused
kernel depends on the shapes and the GPU: cuBLAS's matmul is often faster than a
Triton one, and the epilogue saves one write and one read of the result. So the
choice is made by timing both, under `transpile --autotune`
(`autotune.tune_epilogues`); without it, the code stays cuBLAS plus a kernel.

Applies to `linear(a, w)` without a bias (`split_addmm` has moved it into the
consumer) where `a` and `w` are contiguous f16 or bf16, and the result, or
contiguous views of it, is read by exactly one pointwise kernel, at each element's
own position, and by nothing else; not in code with a loop on tensor data, whose body
may read any earlier value.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from transpiler.ir.graph import Ref, TensorMeta, iter_refs
from transpiler.ir.ops import HALF_TYPES
from transpiler.ir.program import (
    MATMUL_OPERANDS,
    Alloc,
    ExternCall,
    Kernel,
    KernelArg,
    KernelCall,
    LoopCall,
    Matmul,
    MatmulConfig,
    Program,
    Stmt,
)

LINEAR = "aten.linear.default"


@dataclass(frozen=True)
class Epilogue:
    """A linear layer and its consumer that one matmul kernel can replace."""

    linear: ExternCall
    views: tuple[ExternCall, ...]  # views of its result, only the consumer reads
    call: KernelCall  # the consumer's launch
    consumer: Kernel
    kernel: Kernel  # the matmul kernel, with a heuristic config until tuned


def default_config(m: int, n: int) -> MatmulConfig:
    """A tile for large bf16/f16 matmuls on current GPUs; smaller when the matrix
    is small."""
    if m * n >= 1 << 20:
        return MatmulConfig(128, 128, 64, 8, 8, 3)
    return MatmulConfig(64, 64, 32, 8, 4, 3)


def metas(program: Program) -> dict[str, TensorMeta]:
    """The layout of every tensor the program's steps make or read as parameters."""
    out = {name: meta for name, _, meta in program.params}
    for s in program.steps:
        if isinstance(s, Alloc):
            out[s.buffer] = s.meta
        elif isinstance(s, ExternCall) and isinstance(s.meta, TensorMeta):
            out[s.out] = s.meta
    return out


def find(
    program: Program,
    kernels: dict[str, Kernel],
    inputs: dict[str, TensorMeta],
) -> list[Epilogue]:
    """Every linear layer of `program` whose consumer could be its epilogue;
    `inputs` gives the layouts of the program's inputs where known."""
    if any(isinstance(s, LoopCall) for s in program.steps):
        return []  # a loop body may read any earlier value by name: keep them all
    layout = inputs | metas(program)
    readers: dict[str, list] = {}  # buffer -> the steps that read it
    for s in program.steps:
        if isinstance(s, KernelCall):
            names = s.args
        elif isinstance(s, ExternCall):
            names = [r.name for r in iter_refs((s.args, s.kwargs))]
        else:
            names = []
        for name in names:
            readers.setdefault(name, []).append(s)
    for r in iter_refs(program.outputs):
        readers.setdefault(r.name, []).append(None)  # returned: must stay
    found = []
    for s in program.steps:
        if isinstance(s, ExternCall) and s.target == LINEAR:
            e = _epilogue(s, layout, readers, kernels)
            if e is not None:
                found.append(e)
    return found


def _epilogue(
    linear: ExternCall,
    layout: dict[str, TensorMeta],
    readers: dict[str, list],
    kernels: dict[str, Kernel],
) -> Epilogue | None:
    if len(linear.args) != 2 or linear.kwargs:
        return None
    if not all(isinstance(a, Ref) and a.name in layout for a in linear.args):
        return None
    a, w = (layout[r.name] for r in linear.args)
    out = layout.get(linear.out)
    if out is None or len(w.shape) != 2 or not a.shape:
        return None
    n, k = w.shape
    if not (a.dtype == w.dtype == out.dtype and a.dtype in HALF_TYPES):
        return None
    if not (a.is_contiguous() and w.is_contiguous() and a.shape[-1] == k):
        return None
    m = a.numel // k
    # the result and its contiguous views, which only views and one kernel read
    names, views, calls = {linear.out}, [], []
    stack = [linear.out]
    while stack:
        for reader in readers.get(stack.pop(), []):
            if isinstance(reader, KernelCall):
                calls.append(reader)
            elif (
                isinstance(reader, ExternCall)
                and reader.is_view
                and isinstance(reader.meta, TensorMeta)
                and reader.meta.is_contiguous()
                and reader.meta.numel == m * n
                and reader not in views
            ):
                views.append(reader)
                names.add(reader.out)
                stack.append(reader.out)
            else:
                return None
    if len({id(c) for c in calls}) != 1:
        return None
    call = calls[0]
    consumer = kernels[call.kernel]
    if consumer.is_reduction or consumer.xnumel != m * n or consumer.matmul:
        return None
    params = {arg.param for arg, buf in zip(consumer.inputs, call.args) if buf in names}
    fused = _fuse(consumer, params, m, n, k, a.dtype)
    if fused is None:
        return None
    return Epilogue(linear, tuple(views), call, consumer, fused)


def _identity(index, numel: int) -> bool:
    if index.offset != 0 or len(index.terms) != 1:
        return False
    (t,) = index.terms
    return (t.var, t.div, t.stride) == ("x", 1, 1) and t.mod >= numel


def _fuse(
    consumer: Kernel, params: set[str], m: int, n: int, k: int, dtype: torch.dtype
) -> Kernel | None:
    """The consumer with its loads of the product turned into "matmul" ops."""
    body = []
    for s in consumer.body:
        if isinstance(s, Stmt) and s.op == "load" and s.args[0] in params:
            if not _identity(s.args[1], m * n):
                return None
            s = Stmt(s.name, "matmul", (), s.dtype, s.level)
        body.append(s)
    inputs = (
        *(KernelArg(param, "", dtype) for param in MATMUL_OPERANDS),
        *(a for a in consumer.inputs if a.param not in params),
    )
    name = "matmul_" + consumer.name.removeprefix("fused_")
    matmul = Matmul(*MATMUL_OPERANDS, m, n, k, dtype, default_config(m, n))
    return replace(
        consumer, name=name, inputs=inputs, body=tuple(body), tuned=None, matmul=matmul
    )


def apply(program: Program, chosen: list[tuple[Epilogue, Kernel]]) -> Program:
    """`program` with each chosen linear layer and its consumer's launch replaced by
    one launch of the matmul kernel paired with it (the tuned `Epilogue.kernel`)."""
    drop: set[int] = set()
    launch: dict[int, KernelCall] = {}
    for e, fused in chosen:
        drop |= {id(e.linear), *(id(v) for v in e.views)}
        params = [a.param for a in e.consumer.inputs + e.consumer.outputs]
        a, w = (r.name for r in e.linear.args)
        buffers = dict(zip(params, e.call.args)) | {"a_ptr": a, "w_ptr": w}
        args = tuple(buffers[arg.param] for arg in fused.inputs + fused.outputs)
        spans = ((e.linear.span,) if e.linear.span else ()) + e.call.spans
        launch[id(e.call)] = KernelCall(fused.name, args, tuple(dict.fromkeys(spans)))
    steps = tuple(launch.get(id(s), s) for s in program.steps if id(s) not in drop)
    gone_values = {s.out for s in program.steps if id(s) in drop}
    steps = tuple(  # a buffer that took a dropped product's memory is its own
        (
            replace(s, reuses=None, as_view=False)
            if isinstance(s, Alloc) and s.reuses in gone_values
            else s
        )
        for s in steps
    )
    kernels = {k.name: k for k in program.kernels}
    kernels |= {fused.name: fused for _, fused in chosen}
    used = {s.kernel for s in steps if isinstance(s, KernelCall)}
    gone = {e.consumer.name for e, _ in chosen} - used
    return replace(
        program,
        steps=steps,
        kernels=tuple(k for name, k in kernels.items() if name not in gone),
    )
