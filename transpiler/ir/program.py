"""The loop-level IR: kernels with explicit index arithmetic, and wrapper steps.

Note [Kernel iteration]
~~~~~~~~~~~~~~~~~~~~~~~
A kernel iterates over `xnumel` rows and, for a reduction kernel, `rnumel` elements
per row (`rnumel == 1` for pointwise kernels). A value is either per row (level "x") or
per element (level "r"); in a pointwise kernel everything is level "x". Every value is
computed at its flat, row-major position: `xindex` for level "x", and
`xindex * rnumel + rindex` for level "r" (reductions are over trailing dimensions).

An `Index` turns that position into an address in a buffer:
    offset + sum(term.stride * ((var // term.div) % term.mod) for term in terms)
which is how views, broadcasting and any strided layout are read without copies.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

import torch

from transpiler.ir.graph import Ref, Span, TensorMeta, leaves


@dataclass(frozen=True)
class Term:
    var: str  # "x" or "r", or a statement: an index the kernel loaded (in range)
    div: int
    mod: int
    stride: int


@dataclass(frozen=True)
class Index:
    offset: int
    terms: tuple[Term, ...]


@dataclass(frozen=True)
class Stmt:
    """`name = op(*args)`: args are statement names, Python scalars, or for a load
    `(buffer_param, Index)`."""

    name: str
    op: str  # "load" | "reduce" | "scan" | a kernel op from codegen.optable
    args: tuple[Any, ...]
    dtype: torch.dtype  # the dtype the value is computed in
    level: str  # "x" | "r"
    reduce: str | None = None  # for op == "reduce": "sum" | "max" | "min" |
    # "argmax" | "argmin" (the first position of the row's max or min, NaN first);
    # for op == "scan" (per element: the row's elements up to it): "sum" | "prod"


def operands(s: Stmt) -> tuple[str, ...]:
    """The statements `s` reads: its arguments, and the loaded indices its
    address is computed from (`Term`s whose variable is a statement)."""
    if s.op == "load":  # (buffer parameter, index[, mask])
        _, index, *mask = s.args
        return (*mask, *(t.var for t in index.terms if t.var not in ("x", "r")))
    if s.op == "index":
        return tuple(t.var for t in s.args[0].terms if t.var not in ("x", "r"))
    return tuple(a for a in s.args if isinstance(a, str))


@dataclass(frozen=True)
class Store:
    buffer: str  # kernel parameter name
    index: Index
    value: str
    level: str
    dtype: torch.dtype  # the buffer's dtype
    # a scatter's store (Note [Scatters] in passes/schedule.py): "add" into the
    # element, "write" it, or keep the larger ("amax") or smaller ("amin") of the
    # two, at addresses two positions may share
    scatter: str | None = None
    mask: str | None = None  # a bool statement: stored only where it holds


@dataclass(frozen=True)
class KernelArg:
    param: str  # name inside the kernel ("x_ptr", "ln_1_weight_ptr", "out_ptr")
    buffer: str  # name in the wrapper
    dtype: torch.dtype


@dataclass(frozen=True)
class LaunchConfig:
    """How a Triton kernel is launched: `xblock` rows (or elements) per program,
    `rblock` elements of a row at a time (1 for pointwise kernels), `num_warps`."""

    xblock: int
    rblock: int
    num_warps: int

    def grid(self, xnumel: int) -> int:
        return -(-xnumel // self.xblock)

    def launch_kwargs(self, reduction: bool) -> dict[str, int]:
        """The keyword arguments of a launch: the kernel's constexprs (`RBLOCK` for
        a reduction kernel only), then Triton's options."""
        blocks = {"XBLOCK": self.xblock}
        if reduction:
            blocks["RBLOCK"] = self.rblock
        return {**blocks, "num_warps": self.num_warps}


@dataclass(frozen=True)
class Tuned:
    """A launch config chosen by timing candidates (`transpile --autotune`)."""

    config: LaunchConfig
    note: tuple[str, ...]  # comment lines above the kernel: where, what, how fast


@dataclass(frozen=True)
class RowLoop:
    """How the C++ code walks one loop over a reduction's row (codegen/cpp.py)."""

    lanes: int = 0  # accumulators per reduction (Note [Lanes]); 0: one
    chunk: int = 0  # elements a chunk of the row holds
    chunked: bool = False  # whether the row is walked a chunk at a time
    prefetch: bool = False  # fetches the next row (Note [Prefetching the next row])
    groups: int | None = None  # walked as groups of this many (`inner_split` on r)
    # the loop and the correction after it are one `row_spread` call over the
    # row in memory (`segments.spread`, Note [Variance])
    spread: bool = False


@dataclass(frozen=True)
class CppSchedule:
    """How a kernel's C++ loops are written, decided once (`cpp.schedule`) and
    rendered as is: threads, the inner loop's length, what rows keep on the
    stack, each loop over a row, the pieces a window's inner loop is split into."""

    parallel: bool  # rows split across threads (`omp parallel for`)
    inner: int | None = None  # x1: a pointwise kernel's inner loop, a column tile
    kept: frozenset[str] = frozenset()  # values kept in a row buffer
    loops: tuple[RowLoop, ...] = ()  # each loop over r, in order
    # the ranges of x1 and the conditions constant in each (Note [Edges of windows])
    parts: tuple[tuple[int, int, tuple[tuple[str, bool], ...]], ...] | None = None
    # the values of `kept` whose row buffer is an output's row, and that output's
    # parameter (Note [Rows kept in an output] in codegen/cpp.py)
    kept_in: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class MatmulConfig:
    """How a matmul kernel is tiled: a `block_m` x `block_n` tile of the result per
    program, `block_k` of the shared dimension per step, programs grouped `group_m`
    row tiles at a time so that neighbours share their weight tiles in L2."""

    block_m: int
    block_n: int
    block_k: int
    group_m: int
    num_warps: int
    num_stages: int

    def grid(self, m: int, n: int) -> int:
        return -(-m // self.block_m) * -(-n // self.block_n)

    def launch_kwargs(self) -> dict[str, int]:
        """The keyword arguments of a launch: the kernel's constexprs, then Triton's
        options."""
        return {
            "BLOCK_M": self.block_m,
            "BLOCK_N": self.block_n,
            "BLOCK_K": self.block_k,
            "GROUP_M": self.group_m,
            "num_warps": self.num_warps,
            "num_stages": self.num_stages,
        }


MATMUL_OPERANDS = ("a_ptr", "w_ptr")  # a matmul kernel's own parameters


@dataclass(frozen=True)
class Matmul:
    """A kernel whose elementwise body is the epilogue of `a @ w.T`: `a` is [m, k]
    and `w` [n, k], both contiguous, and each element x = i * n + j of the kernel
    starts from the product's (i, j), where the body has an op "matmul" (see Note
    [Matmul epilogues] in passes/matmul_epilogue.py)."""

    a: str  # kernel parameter names
    w: str
    m: int
    n: int
    k: int
    dtype: torch.dtype  # of a, w and the product as `linear` would return it
    config: MatmulConfig
    note: tuple[str, ...] = ()  # comment lines above the kernel: why it was chosen


@dataclass(frozen=True)
class Kernel:
    name: str
    xnumel: int
    rnumel: int
    inputs: tuple[KernelArg, ...]
    outputs: tuple[KernelArg, ...]
    body: tuple[Stmt | Store, ...]
    spans: tuple[Span, ...]
    tuned: Tuned | None = None  # None: codegen's heuristic launch config
    matmul: Matmul | None = None  # a matmul with this kernel as its epilogue
    cpp: CppSchedule | None = None  # how its C++ is written (`cpp.schedule`)

    @property
    def is_reduction(self) -> bool:
        return self.rnumel != 1 or any(
            isinstance(s, Stmt) and s.op == "reduce" for s in self.body
        )

    def renamed(self, params: Mapping[str, str]) -> Kernel:
        """The kernel with its parameters renamed, old name -> new."""

        def rename(s: Stmt | Store) -> Stmt | Store:
            if isinstance(s, Store):
                return replace(s, buffer=params[s.buffer])
            if s.op == "load":
                return replace(s, args=(params[s.args[0]], *s.args[1:]))
            return s

        return replace(
            self,
            inputs=tuple(replace(a, param=params[a.param]) for a in self.inputs),
            outputs=tuple(replace(a, param=params[a.param]) for a in self.outputs),
            body=tuple(rename(s) for s in self.body),
        )


@dataclass(frozen=True)
class Alloc:
    buffer: str
    meta: TensorMeta
    # the buffer whose memory it takes, which no step after its kernel reads
    # (Note [Writing over a dead input] in passes/reuse_buffers.py), seen at
    # this shape and strides (`as_view`) where its own differ
    reuses: str | None = None
    as_view: bool = False


@dataclass(frozen=True)
class KernelCall:
    kernel: str
    args: tuple[str, ...]  # wrapper buffer names, inputs then outputs
    spans: tuple[Span, ...]


@dataclass(frozen=True)
class ExternCall:
    """`out = target(*args, **kwargs)` with `Ref`s to wrapper names; views included.
    With `layout`, the result gets those strides, copied only if its own differ
    (passes/extern_layouts.py)."""

    out: str
    target: str
    args: tuple[Any, ...]
    kwargs: tuple[tuple[str, Any], ...]
    meta: Any
    span: Span | None
    is_view: bool = False
    layout: tuple[Any, ...] | None = None

    @property
    def computes(self) -> bool:
        """Whether the call is work done outside the kernels (not a view, `getitem`,
        fallback code or a loop): what the summary and `--explain` count."""
        return not (self.is_view or self.target == "getitem")


@dataclass(frozen=True)
class FallbackCall(ExternCall):
    """A call of fallback code (a graph break), in its place among the steps:
    `target` is its function in the generated module (`_fallback_0`)."""

    @property
    def computes(self) -> bool:
        return False


@dataclass(frozen=True)
class PartCall(ExternCall):
    """A call of a compiled part of a training variant with graph breaks (Note
    [Training through graph breaks] in passes/parts.py): `target` is its
    function in the generated module (`_cpu_0_part_1`), which applies its
    `autograd.Function`; the result is the tuple of its values later code reads."""

    @property
    def computes(self) -> bool:
        return False


@dataclass(frozen=True)
class LoopCall(ExternCall):
    """A `while` loop on tensor data: `target` names its body among the region's
    `loops`; the results are its carried values."""

    @property
    def computes(self) -> bool:
        return False


Step = Alloc | KernelCall | ExternCall  # FallbackCall, PartCall, LoopCall among them


@dataclass(frozen=True)
class Program:
    inputs: tuple[str, ...]  # tensor input names, in signature order
    params: tuple[
        tuple[str, str, TensorMeta], ...
    ]  # (wrapper name, "self.<path>", meta)
    steps: tuple[Step, ...]
    kernels: tuple[Kernel, ...]  # distinct kernels, in first-use order
    outputs: Any  # nested structure of Ref / constants
    kernel_ops: int = 0  # ATen ops computed inside the kernels (for --explain)
    # values computed from parameters and buffers alone, kept between calls, and
    # those of them read after (Note [Values of parameters alone])
    constants: tuple[str, ...] = ()
    kept: tuple[str, ...] = ()

    def __str__(self) -> str:
        return format_program(self)


def kernel_params(programs: list[Program]) -> dict[str, str]:
    """The parameters that kernels read or write, "self.<path>" -> local name, in
    order: the wrapper guards their layout (extern calls adapt to any). A buffer
    that takes a parameter's memory (`Alloc.reuses`: a buffer updated in place,
    `self.cache.index_copy_(...)`) is laid out as the parameter was compiled, so
    the parameter counts as written by whatever writes the buffer."""
    params: dict[str, str] = {}
    for p in programs:
        read = {a for s in p.steps if isinstance(s, KernelCall) for a in s.args}
        read |= {s.reuses for s in p.steps if isinstance(s, Alloc) and s.reuses}
        for name, path, _ in p.params:
            if name in read:
                params.setdefault(path, name)
    return params


def reads_writes(step: Step, program: Program) -> tuple[list[str], list[str]]:
    """The wrapper names a step of `program` reads and those it writes, in
    argument order (an allocation writes its buffer, and reads the buffer whose
    memory it takes, if any)."""
    if isinstance(step, Alloc):
        return [step.reuses] if step.reuses else [], [step.buffer]
    if isinstance(step, KernelCall):
        k = next(k for k in program.kernels if k.name == step.kernel)
        n = len(k.inputs)
        return list(step.args[:n]), list(step.args[n:])
    values = [*step.args, *(v for _, v in step.kwargs)]
    return [v.name for v in leaves(values) if isinstance(v, Ref)], [step.out]


def last_steps(program: Program, steps) -> dict[str, int]:
    """Each wrapper name `steps` (of `program`) read or write -> the index of the
    last step that does."""
    last: dict[str, int] = {}
    for i, step in enumerate(steps):
        read, written = reads_writes(step, program)
        for name in (*read, *written):
            last[name] = i
    return last


@dataclass(frozen=True, eq=False)
class Const:
    """A scalar literal inside a kernel, with the dtype it is computed in. Equal
    Consts are the same literal, which statements (`emit`) and kernels of identical
    bodies share: -0.0 is not 0.0."""

    value: object
    dtype: torch.dtype

    def _key(self) -> tuple:
        v = self.value
        if isinstance(v, float) and v == 0:
            return (v, math.copysign(1.0, v), self.dtype)
        return (v, self.dtype)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Const) and self._key() == other._key()

    def __hash__(self) -> int:
        return hash(self._key())


@dataclass
class KernelNames:
    """Module-wide kernel names: one namespace, identical bodies share a name."""

    used: dict[str, int] = field(default_factory=dict)
    by_body: dict[tuple, str] = field(default_factory=dict)

    def name_for(self, base: str, key: tuple) -> tuple[str, bool]:
        if key in self.by_body:
            return self.by_body[key], False
        n = self.used.get(base, 0)
        self.used[base] = n + 1
        name = f"{base}_{n}"
        self.by_body[key] = name
        return name, True


def body_key(k: Kernel) -> tuple:
    """What makes two kernels one: their sizes, dtypes and bodies, whatever the
    kernels and their parameters are named."""
    args = k.inputs + k.outputs
    k = k.renamed({a.param: f"p{i}" for i, a in enumerate(args)})
    return (
        k.xnumel,
        k.rnumel,
        tuple(a.dtype for a in k.inputs),
        tuple(a.dtype for a in k.outputs),
        k.body,
    )


# The text form of a `Program`: what `--explain` and the pass tests show.


def format_index(index: Index) -> str:
    parts = [f"{t.stride}*(({t.var}//{t.div})%{t.mod})" for t in index.terms]
    if index.offset or not parts:
        parts.append(str(index.offset))
    return " + ".join(parts)


def format_program(p: Program) -> str:
    lines = []
    for k in p.kernels:
        args = ", ".join(a.param for a in k.inputs + k.outputs)
        lines.append(f"kernel {k.name}({args}) xnumel={k.xnumel} rnumel={k.rnumel}:")
        for s in k.body:
            if isinstance(s, Stmt):
                args_text = ", ".join(
                    (
                        f"{a[0]}[{format_index(a[1])}]"
                        if s.op == "load" and i == 0
                        else str(a)
                    )
                    for i, a in enumerate((s.args,) if s.op == "load" else s.args)
                )
                op = {"reduce": s.reduce, "scan": f"cum{s.reduce}"}.get(s.op, s.op)
                lines.append(f"  {s.name}.{s.level} = {op}({args_text})")
            else:
                op = "+=" if s.scatter == "add" else "="
                where = f" if {s.mask}" if s.mask is not None else ""
                at = f"{s.buffer}[{format_index(s.index)}]"
                lines.append(f"  {at} {op} {s.value}{where}")
    for step in p.steps:
        if isinstance(step, Alloc):
            lines.append(f"{step.buffer} = empty({step.meta})")
        elif isinstance(step, KernelCall):
            lines.append(f"{step.kernel}({', '.join(step.args)})")
        elif isinstance(step, ExternCall):
            lines.append(f"{step.out} = {step.target}{tuple(step.args)}")
    lines.append(f"return {p.outputs}")
    return "\n".join(lines)
