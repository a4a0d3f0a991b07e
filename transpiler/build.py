"""What each stage of the pipeline hands the next (pipeline.py): typed, immutable
records.

    compiling a variant  ->  VariantCode   (its regions of lowered programs, guards,
                                            and the decisions made for it)
    compiling a target   ->  TargetCode    (its signature and variants, in order)
    compiling a module   ->  ModuleCode    (its targets, kernels by backend,
                                            fallback code, the sources read,
                                            the C++ kernels another module writes)
    compiling a run      ->  Build         (every module; what `--autotune` tunes
                                            and what rendering turns into files)
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property

from transpiler.frontend.fallback import Stub
from transpiler.frontend.objects import ObjectInput
from transpiler.frontend.signature import Signature
from transpiler.ir.dynamic import Dim
from transpiler.ir.graph import Span, TensorMeta
from transpiler.ir.program import (
    ExternCall,
    FallbackCall,
    Kernel,
    KernelCall,
    Program,
)
from transpiler.ir.region import CompiledRegion, programs_of
from transpiler.options import Variant
from transpiler.text import count

BACKENDS = {"cpu": "cpp", "cuda": "triton"}


@dataclass(frozen=True)
class RangeGuard:
    """A condition on the size of a named dimension that the code was compiled
    for, decided at transpile time (`x.shape[0] > 4`: Note [Dynamic dimensions]),
    read from the first input that has the dimension."""

    input: str  # the parameter, or a path from one (`objects.dimension_source`)
    axis: int | None  # None: the input is the size itself (an int in an object)
    op: str  # "<", "==", ...
    left: int | Dim
    right: int | Dim
    outcome: bool

    def test(self, name: str) -> str:
        """The check, with the input read as `name`."""
        size = name if self.axis is None else f"{name}.shape[{self.axis}]"

        def text(v: int | Dim) -> str:
            return str(Dim(v.a, v.b, size)) if isinstance(v, Dim) else str(v)

        test = f"{text(self.left)} {self.op} {text(self.right)}"
        return test if self.outcome else f"not ({test})"


@dataclass(frozen=True)
class Backward:
    """The compiled backward of a training variant (`pipeline.compile_training`).
    Its forward (`VariantCode.region`) returns `(outputs, saved)`; the backward's
    program takes the saved values, then the tangents (the gradients of the
    differentiable outputs), and returns a gradient per name of `wrt`, None where
    the outputs do not depend on it."""

    region: CompiledRegion
    saved: tuple[str, ...]  # the backward's inputs the forward saves, in order
    tangents: tuple[str, ...]  # its inputs that are tangents, in output order
    wrt: tuple[str, ...]  # input names, then parameter paths
    differentiable: tuple[bool, ...]  # per output: has a tangent
    saved_bytes: int  # what the forward saves, inputs and parameters aside
    recomputed: tuple[str, ...]  # forward values the backward computes again
    # each tangent as traced (its output's layout): a gradient autograd passes in
    # is given it (`.sum().backward()` passes an expanded one), and one it passes
    # as None is zeros of it
    tangent_metas: tuple[TensorMeta, ...]
    # the backward where only the 0-dim outputs (a loss) have gradients, the
    # others' zero (Note [The backward of a loss alone] in passes/partition.py)
    loss: CompiledRegion | None = None

    @property
    def loss_tangents(self) -> tuple[str, ...]:
        """The tangents the backward of the loss alone takes: the 0-dim ones."""
        metas = zip(self.tangents, self.tangent_metas)
        return tuple(t for t, m in metas if not m.shape)


@dataclass(frozen=True)
class VariantCode:
    """One compiled (or all-fallback) variant of a target."""

    name: str  # "cpu_0"
    variant: Variant
    guards: tuple  # the frontend's (Note [State guards]), and RangeGuards
    region: CompiledRegion | None  # None: the variant runs the source
    fallback_reason: str | None = None
    fallback_span: Span | None = None
    # (named dimension, its name in the code: `variants.code_name`)
    dynamic: tuple[tuple[str, str], ...] = ()
    specializes: str = ""  # "size 1 of B": made for a dynamic variant, tried first
    objects: tuple[ObjectInput, ...] = ()  # objects passed in (frontend/objects.py)
    # (module path, attribute, value) the variant sets when it starts (Note [Model
    # state the call sets] in frontend/interpreter.py)
    model_state: tuple[tuple[str, str, object], ...] = ()
    # decided once, when the variant is compiled (`pipeline.decide_cuda_graph`):
    # None, "one" (a graph of the whole call) or "tree" (a graph per segment
    # between branches on tensor data); and why a variant that asked has none
    cuda_graph: str | None = None
    cuda_graph_off: str | None = None
    backward: Backward | None = None  # a training variant's
    # a training variant with graph breaks: the compiled parts its code calls
    # between them (Note [Training through graph breaks] in passes/parts.py),
    # each a training variant of its own (or inference, computing no gradient)
    parts: tuple[VariantCode, ...] = ()

    @property
    def backend(self) -> str:
        """Which kernels the variant launches: "triton" on cuda, "cpp" on cpu."""
        return BACKENDS[self.variant.device]

    def describe(self) -> str:
        text = self.variant.describe()
        return f"{text} ({self.specializes})" if self.specializes else text

    @property
    def programs(self) -> list[Program]:
        """The programs of its code: the forward's, then the backward's, then
        its parts'."""
        if self.region is None:
            return []
        backward = programs_of(self.backward.region) if self.backward else []
        parts = [p for part in self.parts for p in part.programs]
        return programs_of(self.region) + backward + parts

    @property
    def backwards(self) -> list[Backward]:
        """The compiled backwards of a training variant: its own, or its
        parts'."""
        own = [self.backward] if self.backward is not None else []
        return own + [b for part in self.parts for b in part.backwards]

    @property
    def trains(self) -> bool:
        """Whether it is a training variant that compiles a backward."""
        return bool(self.backwards)

    def summary(self) -> str:
        """One line: what the variant's code does (the module header, `-v`)."""
        if self.region is None:
            where = f" ({self.fallback_span})" if self.fallback_span else ""
            return f"runs the source: {self.fallback_reason}{where}"
        stubs = len(self.fallback_calls)
        externs = sum(isinstance(s, ExternCall) and s.computes for s in self.steps)
        kernels = sum(isinstance(s, KernelCall) for s in self.steps)
        parts = [count(kernels, "kernel"), count(externs, "extern call")]
        if stubs:
            parts.append(count(stubs, "graph break"))
        if self.trains:
            parts.append("forward and backward")
        if self.parts:
            parts.append(count(len(self.parts), "compiled part"))
        branches = sum(r.cond is not None for r in self.region.walk())
        if branches:
            parts.append(
                count(branches, "branch on tensor data", "branches on tensor data")
            )
        if self.cuda_graph == "tree":
            segments = len(list(self.region.walk()))
            parts.append(f"CUDA graphs ({segments} segments)")
        elif self.cuda_graph:
            parts.append("CUDA graph")
        return ", ".join(parts)

    @property
    def steps(self) -> list:
        """The steps of all the variant's programs, in order."""
        return [s for p in self.programs for s in p.steps]

    @property
    def fallback_calls(self) -> list[ExternCall]:
        """The calls of fallback code (graph breaks) among the steps."""
        return [s for s in self.steps if isinstance(s, FallbackCall)]

    @property
    def calls_fallback(self) -> bool:
        """Whether fallback code (a graph break) runs in the variant."""
        return bool(self.fallback_calls)


@dataclass(frozen=True)
class TargetCode:
    name: str  # exported name
    source: str  # "examples/toy.py::ToyLinear"
    is_module: bool
    signature: Signature  # the forward's (or function's) parameters
    variants: tuple[VariantCode, ...]
    # how each parameter and buffer is read: path -> Python (see `direct_reads`)
    reads: Mapping[str, str] = field(default_factory=dict)

    def read(self, path: str) -> str:
        return self.reads.get(path, path)

    @property
    def params_text(self) -> str:
        """The exported parameter list, parameters under their own names."""
        return self.signature.text(self.defaults)

    @property
    def call_text(self) -> str:
        """The arguments that pass those parameters on, as the source takes them."""
        return self.signature.call()

    @property
    def defaults(self) -> str:
        """The module's table of the source's own defaults (`defaults_table`)."""
        return f"_DEFAULTS_{self.name}"

    @cached_property
    def local_names(self) -> dict[str, str]:
        """Each parameter's name inside the wrapper's own functions."""
        return self.signature.local_names(frozenset({self.name}))

    def local(self, name: str) -> str:
        """How the wrapper's own functions spell parameter `name`, or a path from
        one (`past_key_values.layers[0].keys`: see `objects.dimension_source`)."""
        param = re.match(r"\w+", name)[0]
        return self.local_names[param] + name[len(param) :]


@dataclass(frozen=True)
class SharedKernel:
    """A C++ kernel that a module calls where an earlier module of the run writes
    it (`pipeline.share_kernels`): in `<home>.cpp`, named `kernel.name` there."""

    home: str  # that module's stem
    kernel: Kernel


@dataclass(frozen=True)
class ModuleCode:
    """One generated module (`<stem>.py`, with `<stem>_triton.py`, `<stem>.cpp`)."""

    stem: str
    source_file: str  # as the header shows it
    source_module: str  # what the generated module imports as `_source`
    targets: tuple[TargetCode, ...]
    kernels: Mapping[str, tuple[Kernel, ...]]  # by backend: "cpp", "triton"
    stubs: Mapping[str, Stub]  # fallback code, by its function's name
    # module name -> (path, hash) of every source file its code was read from
    sources: Mapping[str, tuple[str, str]] = field(default_factory=dict)
    # the C++ kernels its calls name that another module writes, by those names
    shared: Mapping[str, SharedKernel] = field(default_factory=dict)

    def kernels_of(self, backend: str) -> tuple[Kernel, ...]:
        return self.kernels.get(backend, ())


@dataclass(frozen=True)
class Build:
    """Every module of a run, and the command that regenerates them."""

    modules: tuple[ModuleCode, ...]
    command: str
