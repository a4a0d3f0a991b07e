"""Render the generated Python module: header, guarded dispatch, variant functions.

The module exports a drop-in replacement for the target: a subclass of the source class
(or a function with the source function's signature). Its `forward` tries each variant's
guards in order and runs the first that holds; otherwise it warns once, naming the
guards that failed, and runs the source (eager) code.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace

import torch

from transpiler.codegen import cuda_graphs
from transpiler.codegen import triton as triton_codegen
from transpiler.frontend.fallback import Stub
from transpiler.ir.dynamic import Dim, dims_in
from transpiler.ir.graph import DEVICE, FALLBACK, LOOP, Ref, Span
from transpiler.ir.ops import EXTERN_LAYOUT
from transpiler.ir.program import (
    Alloc,
    ExternCall,
    KernelCall,
    Program,
    kernel_params,
)
from transpiler.ir.region import CompiledLoop, CompiledRegion, programs_of
from transpiler.options import ScalarSpec, TensorSpec, Variant
from transpiler.passes.direct_views import DIRECT_VIEW

DTYPE_NAMES = {
    d: f"torch.{str(d).split('.')[1]}"
    for d in (
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
}


@dataclass(frozen=True)
class VariantCode:
    """One compiled (or all-fallback) variant of a target."""

    name: str  # "cpu_0"
    variant: Variant
    guards: tuple[str, ...]  # module-attribute guards from the frontend
    region: CompiledRegion | None  # None: the variant runs the source
    fallback_reason: str | None = None
    fallback_span: Span | None = None
    dynamic: tuple[tuple[str, str], ...] = ()  # (named dimension, its size in Python)
    specializes: str = ""  # "size 1 of B": made for a dynamic variant, tried first

    def describe(self) -> str:
        text = self.variant.describe()
        return f"{text} ({self.specializes})" if self.specializes else text

    @property
    def programs(self) -> list[Program]:
        return programs_of(self.region) if self.region else []

    @property
    def calls_fallback(self) -> bool:
        """Whether fallback code (a graph break) runs in the variant."""
        return any(
            isinstance(s, ExternCall) and s.target.startswith(FALLBACK)
            for p in self.programs
            for s in p.steps
        )


@dataclass(frozen=True)
class TargetCode:
    name: str  # exported name
    source: str  # "examples/toy.py::ToyLinear"
    is_module: bool
    params_text: str  # the forward's (or function's) parameter list, from the source
    call_text: str  # the arguments that pass those parameters on
    variants: tuple[VariantCode, ...]
    # how each parameter and buffer is read: path -> Python (see `direct_reads`)
    reads: Mapping[str, str] = field(default_factory=dict)

    def read(self, path: str) -> str:
        return self.reads.get(path, path)


def literal(value) -> str:
    """Python source for a constant argument of an extern call."""
    if isinstance(value, Ref):
        return value.name
    if isinstance(value, Dim):
        return str(value)
    if value is DEVICE:
        return "device"
    if isinstance(value, torch.dtype):
        return DTYPE_NAMES[value]
    if isinstance(value, (torch.memory_format, torch.layout)):
        return f"torch.{str(value).split('.')[-1]}"
    if isinstance(value, float) and not math.isfinite(value):
        return f'float("{value}")'
    if isinstance(value, list):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {literal(v)}" for k, v in value.items()) + "}"
    if isinstance(value, tuple):
        inner = ", ".join(literal(v) for v in value)
        return f"({inner},)" if len(value) == 1 else f"({inner})"
    return repr(value)


@dataclass(frozen=True)
class Guard:
    """One check of a variant's guard function.

    `test` is the Python it evaluates; `text` is what `--explain` and the fallback
    warning show: the test itself, unless it names a parameter by the local that
    `binds` assigns first (`ln_1_weight = self.ln_1.weight`), where text has the path.
    """

    test: str
    text: str
    binds: tuple[tuple[str, str], ...] = ()  # (local name, "self.<path>")


def _plain(tests: list[str]) -> list[Guard]:
    return [Guard(test, test) for test in tests]


def input_guards(v: Variant) -> list[Guard]:
    guards = []
    sizes: dict[str, str] = {}  # named dimension -> where it is first read
    for name, spec in v.inputs:
        if isinstance(spec, TensorSpec):
            # kernels index inputs as contiguous; torch's notion of contiguous lets
            # size-1 and empty dims have any stride, which indexing never uses
            guards += [
                f"isinstance({name}, torch.Tensor)",
                f"{name}.is_{v.device}",
                # kernels launch on the current device, as eager's ops on the
                # inputs' own would
                *(
                    [f"{name}.get_device() == torch.cuda.current_device()"]
                    if v.device == "cuda"
                    else []
                ),
                f"{name}.dtype == {DTYPE_NAMES[spec.dtype]}",
                *_shape_guards(name, spec.shape, sizes),
                f"{name}.is_contiguous()",
            ]
        elif spec.value is None:
            guards.append(f"{name} is None")
        else:
            assert isinstance(spec, ScalarSpec)
            kind = type(spec.value).__name__
            guards.append(f"type({name}) is {kind} and {name} == {spec.value!r}")
    return _plain(guards)


def _shape_guards(name: str, shape: tuple, sizes: dict[str, str]) -> list[str]:
    """`x.shape == (2, 4)`; with a named dimension, its size is any >= 2 (size 1
    has a variant of its own), the same wherever the name appears."""
    if all(isinstance(d, int) for d in shape):
        return [f"{name}.shape == {literal(tuple(shape))}"]
    guards = [f"{name}.dim() == {len(shape)}"]
    for i, d in enumerate(shape):
        here = f"{name}.shape[{i}]"
        if isinstance(d, int):
            guards.append(f"{here} == {d}")
        elif d in sizes:
            guards.append(f"{here} == {sizes[d]}")
        else:
            sizes[d] = here
            guards.append(f"{here} >= 2")
    return guards


def read_params(vc: VariantCode) -> dict[str, tuple[str, object]]:
    """Every parameter and buffer the variant reads: path -> (local name, meta)."""
    params: dict[str, tuple[str, object]] = {}
    for program in vc.programs:
        for name, path, meta in program.params:
            params.setdefault(path, (name, meta))
    names = [name for name, _ in params.values()]
    assert len(set(names)) == len(names), names
    return params


def param_guards(vc: VariantCode) -> list[Guard]:
    """Layout guards for the parameters that kernels read. The parameter is read once,
    into a local: `self.ln_1.weight` costs a Python call per attribute. Its layout is
    checked on every call, since `module.to(...)` may swap it or reassign `.data`."""
    params = read_params(vc)
    guards = []
    for path in kernel_params(vc.programs):
        name, m = params[path]
        checks = [
            f"is_{vc.variant.device}",
            f"dtype == {DTYPE_NAMES[m.dtype]}",
            f"shape == {literal(m.shape)}",
            f"stride() == {literal(m.stride)}",
        ]
        first, *rest = (Guard(f"{name}.{c}", f"{path}.{c}") for c in checks)
        guards += [replace(first, binds=((name, path),)), *rest]
    return guards


def grad_guard(t: TargetCode, vc: VariantCode) -> list[Guard]:
    """Kernels do not record autograd: with grad on, anything needing it runs eager.

    Only what the variant reads matters; fallback code may read any parameter."""
    v = vc.variant
    needs = [f"{n}.requires_grad" for n, s in v.inputs if isinstance(s, TensorSpec)]
    if t.is_module and vc.calls_fallback:
        needs.append("any(p.requires_grad for p in self.parameters())")
    elif t.is_module:  # the layout guards read the kernels' parameters into locals
        params, bound = read_params(vc), kernel_params(vc.programs)
        needs += [
            f"{params[path][0] if path in bound else path}.requires_grad"
            for path in params
        ]
    if not needs:
        return []
    test = f"not torch.is_grad_enabled() or not ({' or '.join(needs)})"
    if not t.is_module:
        return _plain([test])
    return [
        Guard(test, "not torch.is_grad_enabled() or nothing it reads requires grad")
    ]


def variant_guards(t: TargetCode, vc: VariantCode) -> list[Guard]:
    """Every guard of a variant, in the order they are checked."""
    guards = input_guards(vc.variant) + _plain(list(vc.guards))
    if t.is_module:
        guards += _plain(["not self.training"])
    guards += param_guards(vc) + grad_guard(t, vc)
    return list(dict.fromkeys(guards))


def guard_function(t: TargetCode, vc: VariantCode) -> list[str]:
    self_ = "self, " if t.is_module else ""
    lines = [
        f"def _guards_{vc.name}({self_}{t.params_text}):",
        f'    """Variant {vc.name} ({vc.describe()}): the first guard that '
        'fails, or None."""',
    ]
    for g in variant_guards(t, vc):
        lines += [f"    {name} = {t.read(path)}" for name, path in g.binds]
        lines += [f"    if not ({g.test}):", f"        return {g.text!r}"]
    lines.append("    return None")
    return lines


def reads_function(t: TargetCode, vc: VariantCode) -> list[str]:
    """For a CUDA graph: the parameters and buffers it reads in place, by address."""
    if not (cuda_graphs.uses_cuda_graph(vc) and read_params(vc)):
        return []
    doc = (
        f"What the CUDA graphs of {vc.name} read in place: moving one re-captures them."
        if cuda_graphs.is_tree(vc)
        else f"What the CUDA graph of {vc.name} reads in place: moving one re-captures"
        " it."
    )
    return [
        f"def _reads_{vc.name}(self):",
        f'    """{doc}"""',
        f"    return ({''.join(f'{t.read(path)}, ' for path in read_params(vc))})",
    ]


# Ops with a public spelling that is the same ATen overload: cheaper to call than an
# `OpOverload` (no Python frame of its own), and plainer to read.
FUNCTIONS = {
    "aten.mm.default": "torch.mm",
    "aten.addmm.default": "torch.addmm",
    "aten.bmm.default": "torch.bmm",
    "aten.baddbmm.default": "torch.baddbmm",
    "aten.linear.default": "torch.nn.functional.linear",
    "aten.embedding.default": "torch.embedding",
    "aten.arange.start": "torch.arange",
    "aten.scaled_dot_product_attention.default": (
        "torch.nn.functional.scaled_dot_product_attention"
    ),
}
# Ops called through runtime_shim: `_addmm_activation`'s GELU is the tanh form on
# CUDA and the exact one on the CPU; the shim's CPU path computes the CUDA one. A
# direct view is a chain of view methods in one call (passes/direct_views.py).
SHIM_FUNCTIONS = {
    "aten._addmm_activation.default": "runtime_shim.addmm_activation",
    DIRECT_VIEW: DIRECT_VIEW,
}
METHODS = {
    "aten.view.default": "view",
    "aten._unsafe_view.default": "view",
    "aten.t.default": "t",
    "aten.transpose.int": "transpose",
    "aten.permute.default": "permute",
    "aten.unsqueeze.default": "unsqueeze",
    "aten.squeeze.dim": "squeeze",
    "aten.split_with_sizes.default": "split_with_sizes",
}
# Methods whose size or dims argument may be spread: `x.view(8, 64)` parses faster
# than `x.view([8, 64])`.
SPREAD = {"view", "permute"}


def _extern_call(target: str, args: list, kwargs: list[str]) -> str:
    """Python for an extern call; `args` are values (`Ref`s, constants)."""
    if target in METHODS and args:
        method = METHODS[target]
        rest = list(args[1:])
        if method in SPREAD and len(rest) == 1 and isinstance(rest[0], (list, tuple)):
            rest = list(rest[0]) if rest[0] else rest
        text = [literal(a) for a in rest] + kwargs
        return f"{literal(args[0])}.{method}({', '.join(text)})"
    function = FUNCTIONS.get(target) or SHIM_FUNCTIONS.get(
        target, f"torch.ops.{target}"
    )
    return f"{function}({', '.join([literal(a) for a in args] + kwargs)})"


def _step_lines(step) -> list[str]:
    if isinstance(step, Alloc):
        m = step.meta
        return [
            f"{step.buffer} = empty({literal(m.shape)}, {literal(m.stride)}, "
            f"{DTYPE_NAMES[m.dtype]})"
        ]
    if isinstance(step, ExternCall):
        if step.target == "getitem":
            return [f"{step.out} = {step.args[0].name}[{step.args[1]}]"]
        args = [literal(a) for a in step.args]
        kwargs = [f"{k}={literal(v)}" for k, v in step.kwargs if not k.startswith("_")]
        if step.target.startswith(FALLBACK):  # the user's code, run eagerly
            call = f"{step.target}({', '.join(args + kwargs)})"
            return [f"{step.out} = {call}" if step.meta else call]
        call = _extern_call(step.target, list(step.args), kwargs)
        if step.target in EXTERN_LAYOUT:  # a copy only if the backend differs
            call = f"runtime_shim.as_layout({call}, {literal(step.meta.stride)})"
        return [f"{step.out} = {call}"]
    raise AssertionError(step)


def variant_function(t: TargetCode, vc: VariantCode, kernels: dict) -> list[str]:
    assert vc.region is not None
    self_ = "self, " if t.is_module else ""
    lines = [f"def _{vc.name}({self_}{t.params_text}):"]
    lines += device_locals(device_source(t, vc), vc.programs)
    for dim, size_expr in vc.dynamic:
        lines.append(f"    {dim} = {size_expr}  # dynamic: one variant for every size")
    return lines + _region_lines(vc.region, kernels, vc.variant.device, t.reads, "    ")


def device_locals(source: str | None, programs: list[Program]) -> list[str]:
    """The locals through which code reads the device of `source` (an input or a
    parameter): `empty`, the allocator of its buffers, and `device`, for extern
    calls that take one."""
    if source is None:
        return []
    steps = [step for p in programs for step in p.steps]
    lines = []
    if any(isinstance(step, Alloc) for step in steps):
        lines.append(f"    empty = runtime_shim.allocator({source}.device)")
    if any(
        v is DEVICE
        for step in steps
        if isinstance(step, ExternCall)
        for v in _flat([*step.args, *(v for _, v in step.kwargs)])
    ):
        lines.append(f"    device = {source}.device")
    return lines


def _flat(values) -> list:
    out = []
    for v in values:
        if isinstance(v, (list, tuple)):
            out += _flat(v)
        elif isinstance(v, dict):
            out += _flat(list(v.values()))
        else:
            out.append(v)
    return out


def device_source(t: TargetCode, vc: VariantCode) -> str | None:
    """What a variant's `device` local is read from: its first tensor input, else
    its first parameter."""
    tensors = [n for n, s in vc.variant.inputs if isinstance(s, TensorSpec)]
    params = [p for program in vc.programs for p in program.params]
    return tensors[0] if tensors else (t.read(params[0][1]) if params else None)


def _region_lines(
    r: CompiledRegion, kernels: dict, device: str, reads: Mapping[str, str], ind: str
) -> list[str]:
    """One region's steps; a branch on tensor data becomes a Python `if`."""
    lines = straight_lines(r, kernels, device, reads, ind)
    if r.cond is None:
        return [*lines, f"{ind}return {literal(r.program.outputs)}"]
    lines += [
        f"{ind}# sync: {sync_comment(r)}",
        f"{ind}if {r.cond}:",
        *_region_lines(r.if_true, kernels, device, reads, ind + "    "),
        f"{ind}else:",
        *_region_lines(r.if_false, kernels, device, reads, ind + "    "),
    ]
    return lines


def sync_comment(r: CompiledRegion) -> str:
    where = f"{r.span}: {r.span.text}" if r.span else "a condition"
    return f"the branch reads tensor data ({where})"


def straight_lines(
    r: CompiledRegion, kernels: dict, device: str, reads: Mapping[str, str], ind: str
) -> list[str]:
    """A region's parameters and steps, up to its branch or return: straight-line
    code (a `while` on tensor data aside), a segment of a CUDA graph tree. `reads`
    says how to read each parameter (`TargetCode.reads`)."""
    p = r.program
    lines = [f"{ind}{name} = {reads.get(path, path)}" for name, path, _ in p.params]
    last_span = None
    allocs: list[str] = []  # written just before the kernel that fills them
    for step in p.steps:
        if isinstance(step, Alloc):
            allocs += _step_lines(step)
            continue
        spans = step.spans if isinstance(step, KernelCall) else (step.span,)
        for s in spans:
            if s is not None and s != last_span:
                lines.append(f"{ind}# {s}: {s.text}")
                last_span = s
        lines += [ind + a for a in allocs]
        allocs = []
        if isinstance(step, KernelCall):
            lines.append(ind + _kernel_call(step, kernels, device))
        elif step.target.startswith(LOOP):
            loop = dict(r.loops)[step.target]
            lines += _loop_lines(step, loop, kernels, device, reads, ind)
        else:
            lines += [ind + s for s in _step_lines(step)]
    return lines


def _loop_lines(
    step: ExternCall,
    loop: CompiledLoop,
    kernels: dict,
    device: str,
    reads: Mapping[str, str],
    ind: str,
) -> list[str]:
    """`while cond:` around the compiled body; carried values keep their names."""
    cond, *initial = (a.name for a in step.args[: 1 + len(loop.carried)])
    flag = f"{step.out}_cond"
    body = CompiledRegion(loop.program, (), loops=())
    inner = _region_lines(body, kernels, device, reads, ind + "    ")[:-1]  # no return
    *nexts, next_cond = (r.name for r in loop.program.outputs)
    where = f"{loop.span}: {loop.span.text}" if loop.span else "a loop"
    return [
        f"{ind}{', '.join(loop.carried)}, {flag} = {', '.join([*initial, cond])}",
        f"{ind}# sync: the loop condition reads tensor data ({where})",
        f"{ind}while {flag}:",
        *inner,
        f"{ind}    {', '.join(loop.carried)}, {flag} = "
        f"{', '.join([*nexts, next_cond])}",
        f"{ind}{step.out} = ({', '.join(loop.carried)},)",
    ]


def stub_function(name: str, stub: Stub) -> list[str]:
    """Fallback code: the user's statement, verbatim, in a function of its own."""
    lines = [
        f"def {name}({', '.join(stub.params)}):",
        f'    """{stub.span}: {stub.reason}."""',
    ]
    if stub.global_names:
        lines.append(f"    from {stub.module} import {', '.join(stub.global_names)}")
        lines.append("")
    lines += ["    " + line if line else "" for line in stub.source.splitlines()]
    if stub.outputs and not stub.returns:
        lines.append(f"    return {literal(tuple(Ref(n) for n in stub.outputs))}")
    return lines


def _kernel_call(step: KernelCall, kernels: dict, device: str) -> str:
    k = kernels[step.kernel]
    dims = sorted(dims_in(k))  # dynamic sizes, passed by value
    if device == "cpu":
        sig = "p" * len(step.args) + "l" * len(dims)
        args = ", ".join([*(f"{a}.data_ptr()" for a in step.args), *dims])
        return f'_cpp.function("cpp_{step.kernel}", "{sig}")({args})'
    if k.matmul is not None:
        mm, c = k.matmul, k.matmul.config
        blocks = ", ".join(f"{key}={v}" for key, v in c.launch_kwargs().items())
        return (
            f"_triton.triton_{step.kernel}[({c.grid(mm.m, mm.n)},)]"
            f"({', '.join(step.args)}, {blocks})"
        )
    c = triton_codegen.launch_config(k)
    kwargs = c.launch_kwargs(k.is_reduction)
    blocks = ", ".join(f"{key}={v}" for key, v in kwargs.items())
    if isinstance(k.xnumel, Dim):
        grid = f"({k.xnumel} + {c.xblock - 1}) // {c.xblock}"
    else:
        grid = str(c.grid(k.xnumel))
    return (
        f"_triton.triton_{step.kernel}[({grid},)]"
        f"({', '.join([*step.args, *dims])}, {blocks})"
    )


def dispatch(t: TargetCode, module_alias: str) -> list[str]:
    """The exported class or function: guarded calls of each variant, then eager."""
    compiled = [vc for vc in t.variants if vc.region is not None]
    self_ = "self, " if t.is_module else ""
    if t.is_module:
        lines = [
            f"class {t.name}({module_alias}.{t.name}):",
            f'    """{t.name} compiled ahead of time by transpile; see the module '
            'docstring."""',
            "",
            f"    def forward(self, {t.params_text}):",
        ]
        ind = "        "
        fallback = f"super().forward({t.call_text})"
    else:
        lines = [
            f"def {t.name}({t.params_text}):",
            f'    """{t.name} compiled ahead of time by transpile; see the module '
            'docstring."""',
        ]
        ind = "    "
        fallback = f"{module_alias}.{t.name}({t.call_text})"
    for vc in compiled:
        lines.append(f"{ind}if _guards_{vc.name}({self_}{t.call_text}) is None:")
        if cuda_graphs.uses_cuda_graph(vc):
            owner = "self" if t.is_module else t.name  # where its graph is kept
            reads = f", _reads_{vc.name}" if read_params(vc) else ""
            tree = cuda_graphs.is_tree(vc)  # a graph per segment between branches
            lines += [
                f"{ind}    # CUDA graph{'s' if tree else ''}: {cuda_graphs.OVERWRITTEN}"
                " (clone to keep)",
                f"{ind}    return runtime_shim.cuda_graph{'_tree' if tree else ''}"
                f"({owner}, _{vc.name}{reads})({self_}{t.call_text})",
            ]
        else:
            lines.append(f"{ind}    return _{vc.name}({self_}{t.call_text})")
    misses = ", ".join(
        f'("{vc.name}", _guards_{vc.name}({self_}{t.call_text}))' for vc in compiled
    )
    lines += [
        f'{ind}runtime_shim.warn_fallback("{t.name}", [{misses}])',
        f"{ind}return {fallback}",
    ]
    return lines
