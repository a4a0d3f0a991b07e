"""The compiler, stage by stage: every step from a target's source to the files.

For each target of the run (options.py), grouped by the module it is written to:

    resolve the target and instantiate it on meta tensors       frontend/loader, trace
    for each variant:
        trace it into a tree of regions of ATen graphs          frontend/trace.py
        (a training variant: joint graph, partition; then each
        half as a graph below: Note [Training variants])        passes/joint, partition
        name its fallback code                                  passes.name_stubs
        for each graph (region, loop body):
            DEVICE_PASSES[device], then GRAPH_PASSES            passes/*.py
            fold_device_outputs                                 passes/device_outputs.py
            fuse into kernels                                   passes/fuse.py
            compute stored values again in their readers        passes/rematerialize
            schedule the kernels with the extern calls          passes/schedule.py
        the passes over the lowered programs                    finish
        decide its CUDA graph                                   decide_cuda_graph
→ Build: typed records of every module (build.py)
→ how each C++ kernel's loops are written                         schedule_cpp
→ each C++ kernel written once, in the first module that has it   share_kernels
→ with --autotune, on a GPU: tune launch configs and matmul epilogues   autotune.py
→ render each module: wrapper, Triton, C++; black                codegen/module.py
→ write atomically, diff (--check) or report (--explain)        api.py

Every stage takes records and returns new ones; `render` is a function of the build.
"""

from __future__ import annotations

import dataclasses
import inspect
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from torch import nn

from runtime_shim.provenance import source_hash
from transpiler.autotune import Bench, tune
from transpiler.build import (
    BACKENDS,
    Backward,
    Build,
    ModuleCode,
    SharedKernel,
    TargetCode,
    VariantCode,
)
from transpiler.codegen import cpp
from transpiler.codegen.module import render_module
from transpiler.errors import UserError
from transpiler.formatting import format_module
from transpiler.frontend.fallback import Stub
from transpiler.frontend.loader import resolve
from transpiler.frontend.recorder import Unsupported
from transpiler.frontend.signature import Signature
from transpiler.frontend.source import SourceCache
from transpiler.frontend.trace import Traced, direct_reads, instantiate, trace
from transpiler.ir.dynamic import SAMPLES, Mismatch, generalize
from transpiler.ir.graph import Graph, Ref, Span, TensorMeta, Updated
from transpiler.ir.program import KernelNames, Program, body_key
from transpiler.ir.region import CompiledRegion, Region, programs_of
from transpiler.options import Options, ScalarSpec, Target, TensorSpec, Variant
from transpiler.passes import lower_region, map_graphs, name_stubs
from transpiler.passes.addmm_activation import addmm_activation
from transpiler.passes.adds_into_sums import adds_into_sums
from transpiler.passes.channels_last import channels_last
from transpiler.passes.check_indices import check_indices
from transpiler.passes.constant_fold import constant_fold
from transpiler.passes.dce import dce
from transpiler.passes.decompose import decompose
from transpiler.passes.device_outputs import fold_device_outputs
from transpiler.passes.direct_views import direct_views
from transpiler.passes.drop_copies import drop_copies
from transpiler.passes.drop_expands import drop_expands
from transpiler.passes.embedding_gradients import embedding_gradients
from transpiler.passes.extern_layouts import pin_extern_layouts
from transpiler.passes.fold_linear import fold_linear
from transpiler.passes.fuse import fuse
from transpiler.passes.gathered_values import gathered_values
from transpiler.passes.grouped_attention import repeat_grouped_heads
from transpiler.passes.hoist_constants import hoist_constants
from transpiler.passes.joint import joint
from transpiler.passes.partition import partition, zero_tangents
from transpiler.passes.parts import Part, as_part_calls
from transpiler.passes.parts import split as split_parts
from transpiler.passes.range_gathers import range_gathers
from transpiler.passes.recompute import recompute_broadcasts
from transpiler.passes.rematerialize import rematerialize
from transpiler.passes.reuse_buffers import (
    drop_dead_copies,
    reinplace_externs,
    reuse_buffers,
)
from transpiler.passes.schedule import schedule
from transpiler.passes.shared_exponentials import shared_exponentials
from transpiler.passes.small_matmul import unroll_small_matmuls
from transpiler.passes.split_addmm import split_addmm
from transpiler.passes.split_reductions import split_reductions
from transpiler.variants import code_name, range_guards, register_kernels

# ---------------------------------------------------------------- the graph passes

GRAPH_PASSES = (
    (check_indices, "check the indices of the indirect loads kernels compute"),
    (decompose, "rewrite composite ops (layer_norm, softmax, gelu) into fusable ops"),
    (shared_exponentials, "compute a sigmoid from a log-sigmoid's exp(-|x|)"),
    (range_gathers, "read a gather by a range of positions as a slice"),
    (embedding_gradients, "add an embedding's gradient into a tied weight's"),
    (adds_into_sums, "add a scatter into zeros into the tensor it is added to"),
    (split_reductions, "reduce long reductions with few results in two kernels"),
    (gathered_values, "gather an elementwise value's operands, not the value"),
    (channels_last, "run 2-D convolutions and the kernels between them NHWC"),
    (unroll_small_matmuls, "compute a matmul with K <= 8 as products that fuse"),
    (split_addmm, "move a linear layer's bias into the kernel of its epilogue"),
    (constant_fold, "strength-reduce pow, drop x*1 and x+0"),
    (drop_copies, "drop clones of values already laid out as asked"),
    (drop_expands, "read an expanded value by broadcasting it"),
    (recompute_broadcasts, "compute small values where a larger kernel reads them"),
    (fold_linear, "call a linear layer's matmul as one `linear`"),  # no retrace after
    (dce, "drop values nothing uses"),
)
# Passes for one device only, run before GRAPH_PASSES
DEVICE_PASSES = {
    "cuda": (
        (addmm_activation, "let cuBLAS apply a linear layer's bias and GELU"),
        (repeat_grouped_heads, "call fused f32 attention over grouped heads"),
    ),
}
# Passes of GRAPH_PASSES that take the device: what pays differs between them
FOR_DEVICE = (decompose, split_reductions)


def optimize(graph: Graph, device: str = "cpu", checked: bool = False) -> Graph:
    """The graph passes; `checked`: the indices were checked before (a training
    graph's, before the joint: `_train`)."""
    passes = DEVICE_PASSES.get(device, ()) + GRAPH_PASSES
    if checked:
        passes = tuple(p for p in passes if p[0] is not check_indices)
    for run, _why in passes:
        graph = run(graph, device) if run in FOR_DEVICE else run(graph)
        graph.lint()
    graph = fold_device_outputs(graph, device)  # last: a retrace would undo it
    graph.lint()
    return graph


def lower(graph: Graph, names: KernelNames, device: str = "cpu") -> Program:
    """Fuse into kernels, compute stored values again where that reads less
    (passes/rematerialize.py), and schedule the kernels with the extern calls."""
    graph, fusion = rematerialize(graph, fuse(graph, device), device)
    return schedule(graph, fusion, names)


# ------------------------------------------------------- the passes over programs


def finish(
    compiled: CompiledRegion, backend: str, static: bool = True, keep: bool = True
) -> CompiledRegion:
    """The passes over a variant's lowered programs, in order. A dynamic variant's
    sizes are expressions: its views stay view methods. `keep`: values of
    parameters alone are kept between calls; not in training, where an optimizer
    writes the parameters every step, and a fused one (`torch.optim.AdamW(fused=
    True)`) without moving their versions, by which kept values are known stale."""
    compiled = pin_extern_layouts(compiled)  # the layouts extern calls are given
    if static:  # a chain of views, one call (Note [Direct views])
        compiled = direct_views(compiled, tuple(compiled.program.inputs))
    # values of parameters alone, before any branch (Note [Values of parameters
    # alone])
    if keep:
        compiled = replace(compiled, program=hoist_constants(compiled.program))
    if static:  # Note [Extern calls in place], Note [Copies of dead buffers]
        compiled = drop_dead_copies(
            reinplace_externs(compiled), in_place_reads=backend == "triton"
        )
    if static and backend == "triton":  # Note [Writing over a dead input]
        compiled = reuse_buffers(compiled)
    return compiled


# ------------------------------------------------------------------------ variants

Tracer = Callable[[Variant], Traced]


@dataclass
class ModuleBuilder:
    """A module while its targets compile: the names its variants, kernels and
    fallback code take, which are shared by all its targets. `finish` makes the
    `ModuleCode` the later stages read."""

    stem: str
    source_file: str
    source_module: str
    targets: list[TargetCode] = field(default_factory=list)
    names: dict[str, KernelNames] = field(
        default_factory=lambda: {"cpp": KernelNames(), "triton": KernelNames()}
    )
    kernels: dict[str, list] = field(default_factory=lambda: {"cpp": [], "triton": []})
    # variants per device, numbered across the module's targets: their functions
    # (`_cpu_0`, `_guards_cpu_0`) share the generated module's namespace
    counts: dict[str, int] = field(default_factory=dict)
    stubs: dict[Stub, str] = field(default_factory=dict)  # fallback code, named
    sources: dict[str, tuple[str, str]] = field(default_factory=dict)

    def variant_name(self, variant: Variant) -> str:
        """`cpu_0`, `cuda_0`, `cpu_1`, ...: numbered per device across the module."""
        n = self.counts.get(variant.device, 0)
        self.counts[variant.device] = n + 1
        return f"{variant.device}_{n}"

    def stub_name(self, stub: Stub) -> str:
        return self.stubs.setdefault(stub, f"_fallback_{len(self.stubs)}")

    def finish(self) -> ModuleCode:
        return ModuleCode(
            self.stem,
            self.source_file,
            self.source_module,
            tuple(self.targets),
            {backend: tuple(ks) for backend, ks in self.kernels.items()},
            {name: stub for stub, name in self.stubs.items()},
            dict(sorted(self.sources.items())),
        )


def compile_variant(
    name: str, variant: Variant, tracer: Tracer, mb: ModuleBuilder
) -> VariantCode:
    traced = tracer(variant)
    if traced.region is None:
        fb = traced.fallback
        return VariantCode(name, variant, traced.guards, None, fb.reason, fb.span)
    backend = BACKENDS[variant.device]
    names = mb.names[backend]
    compiled = finish(_lower(traced, mb, names, variant.device), backend)
    _add_kernels(mb, backend, programs_of(compiled))
    return VariantCode(
        name,
        variant,
        traced.guards,
        compiled,
        objects=traced.objects,
        model_state=traced.model_state,
    )


def _add_kernels(mb: ModuleBuilder, backend: str, programs: list[Program]) -> None:
    """Add the kernels `programs` call that the module does not hold yet, each
    once, as the first program that calls it has it. (A name registered while
    lowering need not be held: a program pass may have dropped the call, as
    Note [Copies of dead buffers] drops copies, from the program that made it.)"""
    held = {k.name for k in mb.kernels[backend]}
    for p in programs:
        for k in p.kernels:
            if k.name not in held:
                held.add(k.name)
                mb.kernels[backend].append(k)


# Note [Training variants]
# ~~~~~~~~~~~~~~~~~~~~~~~~
# A training variant (`train = true`, `--train`) is traced with the module in train
# mode. Its graph's joint graph (passes/joint.py) holds the forward and, from
# PyTorch's own autograd formulas, the gradients of the inputs declared `:grad` and
# of every floating-point parameter the graph reads; the partition (passes/
# partition.py) splits it at a minimum cut into a forward that returns `(outputs,
# saved)` and a backward from the saved values and the outputs' gradients (the
# tangents) to the gradients. The backward is lowered first: its program's inputs
# fix the order of the saved values, which the forward then returns in that order.
# Both halves go through the same graph passes, fusion and program passes as any
# variant, with the module's kernel names, so a kernel both halves compute is one.
# The wrapper (codegen/training.py) joins them in a `torch.autograd.Function`.
# Only code that traces as one graph returning tensors is compiled for training;
# any other runs the source, saying why (`_not_one_graph`).


def compile_training(
    name: str,
    variant: Variant,
    tracer: Tracer,
    mb: ModuleBuilder,
    parameters: frozenset[str] = frozenset(),
    module: bool = True,
) -> VariantCode:
    """A training variant (Note [Training variants]): the traced graph, its joint
    graph with the gradients of the parameters it reads and of the inputs declared
    `:grad`, split into a forward that saves what the backward reads and a
    backward that computes the rest again; each half lowered as a variant's graph
    is. With graph breaks, each compiled part between them is (Note [Training
    through graph breaks] in passes/parts.py)."""
    traced = tracer(variant)
    if traced.region is None:
        fb = traced.fallback
        return VariantCode(name, variant, traced.guards, None, fb.reason, fb.span)
    why = _not_one_graph(traced)
    if why is not None:
        return VariantCode(name, variant, traced.guards, None, *why)
    try:
        graph = traced.graph
        if traced.stubs or graph is None or not _returns_tensors(graph):
            # Note [Training through graph breaks]: fallback calls, branches on
            # tensor data between parts, or a result the code around the part
            # builds (a transformers ModelOutput, None among tensors)
            return _training_parts(name, variant, traced, mb, parameters, module)
        forward, backward = _train(graph, variant, mb, parameters)
    except Unsupported as e:
        return VariantCode(name, variant, traced.guards, None, e.reason, e.span)
    return VariantCode(
        name, variant, traced.guards, forward, objects=traced.objects, backward=backward
    )


class _NoGradient(Unsupported):
    """A graph none of whose outputs depends on what is differentiated."""


NOTHING_TO_DIFFERENTIATE = (
    "a training variant with nothing to differentiate (no parameter, "
    "no NAME=f32[..]:grad)"
)
NO_OUTPUT_GRADIENT = "a training variant none of whose outputs has a gradient"


def _train(
    graph: Graph, variant: Variant, mb: ModuleBuilder, parameters: frozenset[str]
) -> tuple[CompiledRegion, Backward]:
    """A graph's compiled forward and backward: see `compile_training`. Raises
    `Unsupported` where it is not compiled, `_NoGradient` where it has nothing to
    differentiate."""
    wrt = differentiated(graph, variant, parameters)
    if not wrt:
        raise _NoGradient(NOTHING_TO_DIFFERENTIATE)
    written = _written(graph) & set(wrt)
    if written:
        span = next((n.span for n in graph.nodes if n.target in written), None)
        raise Unsupported(
            "a training variant that writes in place a tensor it differentiates", span
        )
    # indices are checked where the forward reads them, before the joint
    # decomposes their ops (embedding, nll_loss's backward: a scatter); the
    # backward reads the same indices
    graph = check_indices(graph)
    halves = partition(joint(graph, wrt, device=variant.device))
    if not halves.tangents:
        raise _NoGradient(NO_OUTPUT_GRADIENT, _last_span([graph]))
    backend = BACKENDS[variant.device]
    names = mb.names[backend]
    compiled = partial(
        _training_region,
        lower_graph=_graph_lowering(names, variant.device, checked=True),
        backend=backend,
    )
    backward = compiled(halves.backward)
    tangents = set(halves.tangents)
    saved = tuple(n for n in backward.program.inputs if n not in tangents)
    outputs, _ = halves.forward.outputs
    returned = (outputs, tuple(Ref(n) for n in saved))
    if isinstance(outputs, Updated):  # buffers written back, then the return
        returned = replace(outputs, result=(outputs.result, returned[1]))
    forward_graph = halves.forward.with_nodes(halves.forward.nodes, returned)
    forward = compiled(forward_graph)
    tangent_inputs = tuple(n for n in backward.program.inputs if n in tangents)
    metas = {n.name: n.meta for n in halves.backward.nodes if n.op == "input"}
    others = {n for n in tangent_inputs if metas[n].shape}
    loss = None
    if others and len(others) < len(tangent_inputs):  # a loss beside other outputs
        loss = compiled(zero_tangents(halves.backward, others))
    _add_kernels(
        mb,
        backend,
        programs_of(backward)
        + programs_of(forward)
        + (programs_of(loss) if loss else []),
    )
    code = Backward(
        backward,
        saved,
        tangent_inputs,
        halves.wrt,
        halves.differentiable,
        halves.saved_bytes(),
        halves.recomputed,
        tuple(metas[n] for n in tangent_inputs),
        loss,
    )
    return forward, code


def _training_parts(
    name: str,
    variant: Variant,
    traced: Traced,
    mb: ModuleBuilder,
    parameters: frozenset[str],
    module: bool,
) -> VariantCode:
    """A training variant with graph breaks or branches on tensor data (Note
    [Training through graph breaks] in passes/parts.py): each region's graph
    split at its fallback calls into parts, each compiled as a training graph (or
    as inference, where nothing it computes has a gradient); the variant's code
    calls the parts and the fallback code in turn, and branches between them."""
    graphs = [r.graph for r in traced.region.walk()]
    if not any(differentiated(g, variant, parameters) for g in graphs):
        raise _NoGradient(NOTHING_TO_DIFFERENTIATE)
    stub_names = [mb.stub_name(stub) for stub in traced.stubs]
    region = map_graphs(traced.region, partial(name_stubs, names=stub_names))
    backend = BACKENDS[variant.device]
    names = mb.names[backend]
    specs = dict(variant.inputs)
    prefix = f"_{name}_part_"
    grads: set[str] = set()  # values that may carry a gradient
    compiled: list[VariantCode] = []
    lower_graph = _graph_lowering(names, variant.device)

    def compile_part(part: Part, fallback_values: set[str]) -> VariantCode:
        inputs = []
        for n in part.graph.nodes:
            if n.op != "input":
                continue
            if n.target in specs:  # an input of the variant
                inputs.append((n.target, specs[n.target]))
                continue
            meta = n.tensor_meta
            grad = n.name in grads or (
                n.name in fallback_values and meta.dtype.is_floating_point
            )
            inputs.append((n.target, TensorSpec(meta.dtype, meta.shape, None, grad)))
        part_variant = replace(variant, inputs=tuple(inputs))
        part_name = f"{name}_part_{len(compiled)}"
        try:
            forward, backward = _train(part.graph, part_variant, mb, parameters)
        except _NoGradient:  # inference code, run where autograd records nothing
            lowered = _training_region(part.graph, lower_graph, backend)
            _add_kernels(mb, backend, programs_of(lowered))
            return VariantCode(part_name, part_variant, (), lowered)
        grads.update(o for o, d in zip(part.outputs, backward.differentiable) if d)
        return VariantCode(part_name, part_variant, (), forward, backward=backward)

    def outer_of(r: Region) -> Region:
        """The code of region `r`: its parts' calls and the fallback calls."""
        cut = split_parts(r.graph, module, prefix, first=len(compiled))
        results = cut.fallback_results()
        for part in cut.parts:
            compiled.append(compile_part(part, results))
        branch = r.branch
        if branch is not None:
            true, false = outer_of(branch.if_true), outer_of(branch.if_false)
            branch = replace(branch, if_true=true, if_false=false)
        return Region(cut.outer, branch)

    outer = outer_of(region)
    if not any(part.backward for part in compiled):
        raise _NoGradient(NO_OUTPUT_GRADIENT, _last_span(graphs))
    # no kernel: the parts' calls and the fallback calls
    lowered = lower_region(outer, partial(lower, names=names, device=variant.device))
    return VariantCode(
        name,
        variant,
        traced.guards,
        as_part_calls(finish(lowered, backend, keep=False), prefix),
        objects=traced.objects,
        parts=tuple(compiled),
    )


def _training_region(
    graph: Graph, lower_graph: Callable[[Graph], Program], backend: str
) -> CompiledRegion:
    """A training variant's graph lowered and finished: it keeps no values of
    parameters between calls (`finish`)."""
    return finish(lower_region(Region(graph), lower_graph), backend, keep=False)


def _not_one_graph(traced: Traced) -> tuple[str, object] | None:
    """Why a training variant is not compiled, and where: its backward is
    compiled for graphs, split by fallback calls and branches on tensor data;
    not for loops on tensor data or objects passed in."""
    if traced.loops:
        return "a training variant with a loop on tensor data", traced.loops[0].span
    if traced.objects:
        return "a training variant that takes objects", _last_span(
            [traced.region.graph]
        )
    return None


def _returns_tensors(graph: Graph) -> bool:
    """Whether `graph` returns tensors alone, one or a tuple (buffers written back
    aside): what one autograd.Function returns."""
    outputs = graph.outputs
    if isinstance(outputs, Updated):  # tensors written in place: the forward's
        outputs = outputs.result
    flat = outputs if isinstance(outputs, tuple) else (outputs,)
    return all(isinstance(o, Ref) for o in flat)


def _written(graph: Graph) -> set[str]:
    """The inputs (names) and parameters (paths) `graph` writes in place."""
    if not isinstance(graph.outputs, Updated):
        return set()
    targets = {n.name: n.target for n in graph.nodes}
    return {targets[t.name] for t, _ in graph.outputs.copies}


def differentiated(
    graph: Graph, variant: Variant, parameters: frozenset[str]
) -> tuple[str, ...]:
    """What a training variant computes gradients of: the inputs declared `:grad`,
    then every floating-point parameter (of the names `parameters`) its graph
    reads; buffers are not differentiated."""
    declared = {n for n, s in variant.inputs if isinstance(s, TensorSpec) and s.grad}
    inputs = [n.target for n in graph.nodes if n.op == "input" and n.target in declared]
    params = [
        n.target
        for n in graph.nodes
        if n.op == "param"
        and n.target in parameters
        and isinstance(n.meta, TensorMeta)
        and n.meta.dtype.is_floating_point
    ]
    return tuple(inputs + params)


def compile_dynamic(
    name: str, variant: Variant, tracer: Tracer, mb: ModuleBuilder
) -> VariantCode:
    """One variant for every size (>= 2) of the variant's named dimension
    (Note [Dynamic dimensions] in ir/dynamic.py): compiled at several sizes, then
    generalized."""
    (dim,) = variant.dynamic
    samples = [tracer(variant.sized({dim: size})) for size in SAMPLES]
    failed = next((t for t in samples if t.region is None), None)
    if failed is not None:
        fb = failed.fallback
        return VariantCode(name, variant, failed.guards, None, fb.reason, fb.span)
    lowered = [_lower(t, mb, KernelNames(), variant.device) for t in samples]
    code = code_name(dim, lowered[0])
    try:
        guards = generalize([t.guards for t in samples], code)
        compiled = generalize(lowered, code)
        comparisons = generalize([list(t.comparisons) for t in samples], code)
        objects = generalize([t.objects for t in samples], dim)
        model_state = generalize([t.model_state for t in samples], code)
    except Mismatch:
        span = next((c[0] for c in samples[0].comparisons), None)
        reason = f"the code depends on {dim} beyond sizes (a loop over it, say)"
        return VariantCode(name, variant, (), None, reason, span)
    ranges = range_guards(comparisons, variant, objects, dim)
    backend = BACKENDS[variant.device]
    compiled, fresh = register_kernels(compiled, mb.names[backend])
    mb.kernels[backend] += fresh
    compiled = finish(compiled, backend, static=False)
    return VariantCode(
        name,
        variant,
        (*guards, *ranges),
        compiled,
        dynamic=((dim, code),),
        objects=objects,
        model_state=model_state,
    )


def _lower(
    traced: Traced, mb: ModuleBuilder, names: KernelNames, device: str
) -> CompiledRegion:
    stub_names = [mb.stub_name(stub) for stub in traced.stubs]
    region = map_graphs(traced.region, partial(name_stubs, names=stub_names))
    loops = tuple(
        dataclasses.replace(b, graph=name_stubs(b.graph, stub_names))
        for b in traced.loops
    )

    return lower_region(region, _graph_lowering(names, device), loops=loops)


def _graph_lowering(
    names: KernelNames, device: str, checked: bool = False
) -> Callable[[Graph], Program]:
    """How a variant's graph becomes a program: the graph passes, then `lower`,
    with the module's kernel names."""

    def lower_graph(graph: Graph) -> Program:
        return lower(optimize(graph, device, checked=checked), names, device)

    return lower_graph


def _last_span(graphs) -> Span | None:
    """The last user source line among the nodes of `graphs`: where a whole
    variant's reason to run the source points."""
    spans = [n.span for g in graphs for n in g.nodes if n.span is not None]
    return spans[-1] if spans else None


def decide_cuda_graph(vc: VariantCode) -> VariantCode:
    """Whether `vc` replays CUDA graphs (`cuda_graphs = true`, `--cuda-graphs`),
    stored on it for every later stage.

    A CUDA graph replays the exact kernel launches it captured, with the same
    addresses, sizes and control flow. So a variant that asks for one gets one only
    if its shapes are static (a named dynamic dimension changes sizes and grids per
    call), it has no graph breaks (fallback code runs arbitrary Python on every
    call) and no `while` loop on tensor data (each step reads its condition on the
    host). Anything else compiles normally, and `transpile --explain` says why. The
    mechanism is `runtime_shim.cuda_graph` (runtime_shim/cuda_graphs.py).

    A variant that branches on tensor data (`if y.sum() > 0:`) is a *tree* of
    graphs, as torch.compile's cudagraph trees are around a graph break: its code
    is split at each branch into straight-line segments, each captured as a graph
    of its own on first use, and the `if` between them stays in Python, reading the
    condition that the graph before it wrote (codegen/graph_segments.py,
    `runtime_shim.cuda_graph_tree`).
    """
    if not vc.variant.cuda_graphs:
        return vc
    why = _cuda_graph_blocker(vc)
    if why is not None:
        return replace(vc, cuda_graph_off=why)
    return replace(vc, cuda_graph="one" if vc.region.cond is None else "tree")


def _cuda_graph_blocker(vc: VariantCode) -> str | None:
    if vc.variant.device != "cuda":
        return "not a cuda variant"
    if vc.region is None:
        return "it runs the source"
    if vc.dynamic or vc.specializes:
        dims = ", ".join(d for d, _ in vc.dynamic) or vc.specializes
        return f"its shapes are dynamic ({dims})"
    if vc.objects:
        names = ", ".join(o.param for o in vc.objects)
        return f"it takes objects whose tensors it reads in place ({names})"
    if vc.calls_fallback:
        return "it has graph breaks (fallback code runs in Python on every call)"
    if any(r.loops for r in vc.region.walk()):
        return "it loops on tensor data (a host sync on every step)"
    inputs = set(vc.region.program.inputs)
    for r in vc.region.walk():  # Note [Writes into the caller's tensors]
        outputs = r.program.outputs
        if isinstance(outputs, Updated) and any(
            t.name in inputs for t, _ in outputs.copies
        ):
            # a graph reads and writes its own copies of the inputs
            return "it writes into an input in place"
    return None


# ------------------------------------------------------------------ targets, a run


def compile_modules(
    options: Options,
    built: Callable[[str, TargetCode, float], None] | None = None,
    ready: Callable[[str], None] | None = None,
) -> Build:
    """Every target compiled, grouped by the generated module (file stem) it is in.

    `ready(stem)` is called before a target is compiled, once its module is known;
    `built(stem, code, seconds)` after it is.
    """
    sources = SourceCache(options.root)
    modules: dict[str, ModuleBuilder] = {}
    for target in options.targets:
        start = time.perf_counter()
        stem, code = _build_target(target, options, sources, modules, ready)
        if built is not None:
            built(stem, code, time.perf_counter() - start)
    build = Build(tuple(mb.finish() for mb in modules.values()), options.command)
    return share_kernels(schedule_cpp(build))


def schedule_cpp(build: Build) -> Build:
    """Each C++ kernel with its schedule: how its loops are written, decided once
    (`codegen.cpp.schedule`), which its renderer follows."""
    modules = []
    for module in build.modules:
        kernels = tuple(
            replace(k, cpp=cpp.schedule(k)) for k in module.kernels_of("cpp")
        )
        modules.append(replace(module, kernels={**module.kernels, "cpp": kernels}))
    return replace(build, modules=tuple(modules))


def share_kernels(build: Build) -> Build:
    """Each C++ kernel written once in the run: a module that compiles a kernel an
    earlier module of the run has (GPT compiles its blocks' kernels, which the Block
    target has too) calls it in that module's library. Triton kernels stay in the
    module that launches them, where `--autotune` tunes them for its calls."""
    homes: dict[tuple, SharedKernel] = {}
    modules = []
    for module in build.modules:
        own, shared = [], {}
        for k in module.kernels_of("cpp"):
            home = homes.setdefault(body_key(k), SharedKernel(module.stem, k))
            if home.home == module.stem:
                own.append(k)
            else:
                shared[k.name] = home
        kernels = {**module.kernels, "cpp": tuple(own)}
        modules.append(replace(module, kernels=kernels, shared=shared))
    return replace(build, modules=tuple(modules))


def render(build: Build) -> dict[str, str]:
    """Every output file of `build`, by path relative to the output directory."""
    files = {"__init__.py": '"""Modules generated by transpile."""\n'}
    for module in build.modules:
        out = render_module(module, build.command)
        files[f"{module.stem}.py"] = format_module(out.py)
        if out.triton is not None:
            files[f"{module.stem}_triton.py"] = format_module(out.triton)
        if out.cpp is not None:
            files[f"{module.stem}.cpp"] = out.cpp
    return files


def build_files(options: Options, bench: Bench | None = None) -> dict[str, str]:
    """Compile, tune on `bench` where it is given (`--autotune`), render."""
    compiled = compile_modules(options)
    if bench is not None:
        compiled = tune(compiled, bench)
    return render(compiled)


def _build_target(
    target: Target,
    options: Options,
    sources: SourceCache,
    modules: dict[str, ModuleBuilder],
    ready: Callable[[str], None] | None = None,
) -> tuple[str, TargetCode]:
    resolved = resolve(target.source, options.root)
    obj = resolved.obj
    is_module = isinstance(obj, type) and issubclass(obj, nn.Module)
    if not is_module and not isinstance(obj, types.FunctionType):
        raise UserError(
            f"{target.source} is neither an nn.Module subclass nor a " "function"
        )
    stem = resolved.file.stem
    if ready is not None:
        ready(stem)
    display = sources.display(resolved.file)
    mb = modules.setdefault(stem, ModuleBuilder(stem, display, resolved.module_name))
    if mb.source_module != resolved.module_name:
        raise UserError(
            f"two targets would both write {stem}.py: "
            f"{mb.source_module} and {resolved.module_name}"
        )
    sources.read.clear()
    module = None
    if is_module:
        factory = None
        if target.factory:
            factory = resolve(target.factory, options.root).obj
        module = instantiate(obj, dict(target.init), factory, options.root)
    fn = type(module).forward if module is not None else obj
    src, fdef = sources.function(fn)
    params = _params(fn, is_module, src.display, src.line_of(fdef))
    variants = []
    tracer = partial(trace, obj, module, sources=sources)
    parameters = frozenset(
        name
        for name, _ in (
            module.named_parameters(remove_duplicate=False) if module else ()
        )
    )
    for variant in target.variants:
        variant = _complete(variant, fn, is_module, target.source)
        if variant.train and variant.dynamic:
            why = "a training variant with a named dimension (static shapes only)"
            name = mb.variant_name(variant)
            variants.append(VariantCode(name, variant, (), None, why))
            continue
        if not variant.dynamic:
            compile_ = compile_variant
            if variant.train:
                compile_ = partial(
                    compile_training, parameters=parameters, module=is_module
                )
            variants.append(compile_(mb.variant_name(variant), variant, tracer, mb))
            continue
        if len(variant.dynamic) > 1:
            raise UserError(
                f"{target.source}: one named dimension per variant for now "
                f"(got {', '.join(variant.dynamic)})"
            )
        # size 1 broadcasts and squeezes differently: it gets a variant of its own
        one = variant.sized({variant.dynamic[0]: 1})
        code = compile_variant(mb.variant_name(one), one, tracer, mb)
        variants.append(replace(code, specializes=f"size 1 of {variant.dynamic[0]}"))
        variants.append(compile_dynamic(mb.variant_name(variant), variant, tracer, mb))
    for path in sorted(sources.read):
        rel = Path(sources.display(path))
        name = ".".join(rel.with_suffix("").parts)
        mb.sources[name] = (rel.as_posix(), source_hash(path.read_bytes()))
    qual = resolved.qualname.split(".")[-1]
    code = TargetCode(
        qual,
        target.source,
        is_module,
        params,
        tuple(decide_cuda_graph(vc) for vc in variants),
        reads=direct_reads(module) if module is not None else {},
    )
    mb.targets.append(code)
    return stem, code


_NOT_A_FUNCTION = {  # calling such a def returns this, without running its body
    inspect.isgeneratorfunction: "a generator function (its call returns a generator)",
    inspect.iscoroutinefunction: "an async function (its call returns a coroutine)",
    inspect.isasyncgenfunction: "an async generator function",
}


def _params(fn, is_module: bool, file: str, line: int) -> Signature:
    """The parameters of the target's function (a module's forward), as the
    generated module declares them; `file:line` is where it is defined."""
    what = "forward" if is_module else fn.__qualname__
    for test, kind in _NOT_A_FUNCTION.items():
        if test(inspect.unwrap(fn)):
            raise UserError(
                f"{what} is {kind}: transpile compiles functions that compute and "
                "return their results",
                file,
                line,
            )
    params = list(inspect.signature(fn).parameters.values())
    if is_module and (not params or params[0].kind is params[0].VAR_POSITIONAL):
        raise UserError(
            "forward takes no named first parameter for the module (self)", file, line
        )
    return Signature.of(fn, drop_self=is_module)


def _complete(variant: Variant, fn, is_module: bool, source: str) -> Variant:
    """Give every parameter a spec: undeclared ones take (and guard) their default."""
    sig = list(inspect.signature(fn).parameters.values())[1 if is_module else 0 :]
    sig = [p for p in sig if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    given = dict(variant.inputs)
    for name in given:
        if name not in {p.name for p in sig}:
            known = ", ".join(p.name for p in sig)
            listed = f"its parameters are {known}" if sig else "it has no parameters"
            raise UserError(
                f"unknown example {name!r}: {source} has no parameter {name!r}; "
                + listed
            )
    inputs = []
    for p in sig:
        if p.name in given:
            inputs.append((p.name, given[p.name]))
        elif type(p.default) in (int, float, bool, type(None)):  # not an IntEnum
            inputs.append((p.name, ScalarSpec(p.default)))
        else:
            raise UserError(f"{source}: no example for parameter {p.name!r}")
    return replace(variant, inputs=tuple(inputs))
