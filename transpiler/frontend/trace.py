"""Frontend entry: one target and one variant → a `Graph` plus the variant's guards."""

from __future__ import annotations

import contextlib
import inspect
import itertools
import math
import sys
import types
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
from torch import nn

from runtime_shim.modules import self_path
from transpiler.errors import UserError, raised_at, user_file
from transpiler.frontend.device_recorder import DeviceRecorder
from transpiler.frontend.fallback import ObjectPaths, Stub, importable, record_fields
from transpiler.frontend.guards import (
    GlobalGuard,
    ModuleGuard,
    SameTensor,
    registered,
    state_guards,
)
from transpiler.frontend.interpreter import (
    BranchPoint,
    Interpreter,
    Retrace,
    UserCodeError,
    attention_written_out,
    tensor_of_data,
)
from transpiler.frontend.loader import resolve
from transpiler.frontend.objects import Example, ObjectInput, example_input
from transpiler.frontend.recorder import (
    GraphBuilder,
    OpaqueValue,
    Recorder,
    Unsupported,
    with_cause,
)
from transpiler.frontend.source import SourceCache
from transpiler.ir.graph import (
    DEVICE,
    Global,
    Graph,
    ModuleRef,
    Node,
    Record,
    Ref,
    Updated,
    map_refs,
    subgraph,
)
from transpiler.ir.region import Branch, LoopBody, Region
from transpiler.options import ObjectSpec, ScalarSpec, TensorSpec, Variant
from transpiler.text import py_str

MAX_PATHS = 16  # paths through conditions on tensor data compiled for one variant


@dataclass(frozen=True)
class Traced:
    """What the frontend learned about one variant."""

    region: Region | None  # None when the variant is all fallback
    # what it assumes of the model and globals (inputs are guarded apart): see
    # Note [State guards]; `compile_dynamic` adds `wrapper.RangeGuard`s
    guards: tuple[ModuleGuard | GlobalGuard | SameTensor, ...]
    stubs: tuple[Stub, ...] = ()  # fallback code; `_fallback:N` calls stubs[N]
    fallback: Unsupported | None = None
    loops: tuple[LoopBody, ...] = ()  # `_loop:N` runs loops[N]
    comparisons: tuple[tuple, ...] = ()  # see Interpreter.comparisons
    objects: tuple[ObjectInput, ...] = ()  # Note [Objects passed in]
    # (module path, attribute, value): Note [Model state the call sets]
    model_state: tuple[tuple[str, str, object], ...] = ()

    @property
    def graph(self) -> Graph | None:
        """The whole graph, for code without branches on tensor data."""
        if self.region is None or self.region.branch is not None:
            return None
        return self.region.graph


class DropoutAsOp(torch.overrides.TorchFunctionMode):
    """`F.dropout` in train mode as the ATen op `native_dropout`, which returns the
    mask it drew with the result: one op of the graph, whose backward
    (`native_dropout_backward`) reads the mask, and which at run time draws from
    torch's generator as eager's dropout does (the same masks after the same
    `torch.manual_seed`). Otherwise dropout is an empty tensor filled in place
    by `bernoulli_`, which no graph holds (fallback code).

    Attention with dropout (`F.scaled_dot_product_attention(..., dropout_p=0.1)`,
    as transformers' models call it in training) is kept whole where the device's
    fused kernel draws it (cuda's memory-efficient kernel, eager's pick for f32:
    the same masks). Elsewhere it is written out as eager's math path computes it
    on the CPU, with its dropout as `native_dropout`: the same draws after the
    same seed there."""

    def __init__(self, device: str):
        super().__init__()
        self.device = device

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.dropout:
            names = ("input", "p", "training", "inplace")
            given = dict(zip(names, args)) | kwargs
            p = given.get("p", 0.5)
            if given.get("training", True) and not given.get("inplace", False):
                if isinstance(p, float) and 0.0 < p < 1.0:
                    x = given["input"]
                    return torch.ops.aten.native_dropout.default(x, p, True)[0]
        if func is torch.nn.functional.scaled_dot_product_attention:
            if attention_written_out(args, kwargs, self.device):  # Interpreter.train
                return _attention_with_dropout(*args, **kwargs)
        return func(*args, **kwargs)


class CircularPadAsGather(torch.overrides.TorchFunctionMode):
    """`F.pad(x, pad, mode="circular")` as a gather at positions `p mod n` along
    each padded dimension (Note [Pads and interpolation as gathers] in
    passes/decompose.py). PyTorch's own circular pad is an implicit composite,
    decomposed before any op reaches the recorder into an uninitialized tensor
    and a copy into each of its pieces: a pad of one dimension was seven
    kernels and a call into PyTorch. Pads that eager refuses (wrapping around
    more than once, an empty result) are left to eager's pad, which raises."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func is torch.nn.functional.pad:
            names = ("input", "pad", "mode", "value")
            given = dict(zip(names, args)) | kwargs
            if given.get("mode") == "circular":
                padded = _circular_pad(given["input"], tuple(given["pad"]))
                if padded is not None:
                    return padded
        return func(*args, **kwargs)


class ListIndices(torch.overrides.TorchFunctionMode):
    """Lists of ints in an index (`v[:, [-1]]`, `x[[0, 2]] = y`), which PyTorch
    turns into index tensors of its own, outside any op the recorder sees. A list
    that is the index's only advanced part and an arithmetic progression (one
    value, or steps of one size) is the slice it selects, and a read through it a
    copy (the index's result never shares the tensor's memory); any other list is
    a constant tensor of its values (as `torch.tensor` is), indexed as eager does."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in (torch.Tensor.__getitem__, torch.Tensor.__setitem__):
            x, index = args[0], args[1]
            items = index if isinstance(index, tuple) else (index,)
            if isinstance(x, torch.Tensor) and any(map(_int_list, items)):
                items, sliced = _list_items(x, items)
                index = items if isinstance(index, tuple) else items[0]
                result = func(x, index, *args[2:], **kwargs)
                if sliced and func is torch.Tensor.__getitem__:
                    return result.clone(memory_format=torch.contiguous_format)
                return result
        return func(*args, **kwargs)


def _int_list(item) -> bool:
    return (
        isinstance(item, list)
        and len(item) > 0
        and all(isinstance(v, int) and not isinstance(v, bool) for v in item)
    )


def _list_items(x: torch.Tensor, items: tuple) -> tuple[tuple, bool]:
    """`items` with each list of ints a slice or a tensor (`ListIndices`), and
    whether a list became a slice."""
    lists = [i for i, item in enumerate(items) if _int_list(item)]
    simple = (slice, type(None), type(Ellipsis))
    out = list(items)
    if len(lists) == 1 and all(
        isinstance(item, simple) for i, item in enumerate(items) if i != lists[0]
    ):
        (at,) = lists
        used = sum(isinstance(item, (slice, list)) for item in items)
        before = sum(isinstance(item, slice) for item in items[:at])
        if Ellipsis in items[:at]:
            before += x.dim() - used
        n = x.shape[before] if before < x.dim() else None
        progression = _progression(items[at], n) if isinstance(n, int) else None
        if progression is not None:
            out[at] = progression
            return tuple(out), True
    for i in lists:
        out[i] = tensor_of_data(items[i], dtype=torch.int64, device=x.device)
    return tuple(out), False


def _progression(values: list[int], n: int) -> slice | None:
    """The slice of a dimension of size `n` that selects `values` in order, where
    they are in range and steps of one positive size apart; else None."""
    at = [v + n if v < 0 else v for v in values]
    if not all(0 <= v < n for v in at):
        return None
    step = at[1] - at[0] if len(at) > 1 else 1
    if step < 1 or any(b - a != step for a, b in itertools.pairwise(at)):
        return None
    return slice(at[0], at[-1] + 1, step)


def _circular_pad(x: torch.Tensor, pad: tuple) -> torch.Tensor | None:
    """`x` padded circularly by `pad` (last dimension first, as `F.pad`): one
    gather with a tensor of positions per padded dimension, broadcast together;
    None where eager raises."""
    dims = len(pad) // 2
    lead = x.dim() - dims
    if len(pad) % 2 or lead not in (1, 2):
        return None
    if not all(isinstance(p, int) for p in pad):
        return None
    indices = []
    for i in range(dims):  # the first padded dimension first
        n = x.shape[lead + i]
        left, right = pad[2 * (dims - 1 - i)], pad[2 * (dims - 1 - i) + 1]
        if not isinstance(n, int):
            return None
        # negative pads crop first; the rest wraps around what is left
        kept = n + min(left, 0) + min(right, 0)
        if kept <= 0 or max(left, right) > kept:
            return None
        start = max(-left, 0)
        at = torch.arange(-max(left, 0), kept + max(right, 0), device=x.device)
        at = start + at % kept
        indices.append(at.view(-1, *[1] * (dims - 1 - i)))
    return torch.ops.aten._unsafe_index.Tensor(x, [None] * lead + indices)


def _attention_with_dropout(
    query,
    key,
    value,
    attn_mask=None,
    dropout_p=0.0,
    is_causal=False,
    scale=None,
    enable_gqa=False,
):
    """`scaled_dot_product_attention` as ATen's math path computes it
    (`_scaled_dot_product_attention_math`), its dropout `native_dropout`."""
    aten = torch.ops.aten
    if enable_gqa:  # each key/value head serves a group of query heads
        groups = query.shape[-3] // key.shape[-3]
        key = key.repeat_interleave(groups, -3)
        value = value.repeat_interleave(groups, -3)
    if scale is None:
        scale = 1.0 / math.sqrt(query.shape[-1])
    root = math.sqrt(abs(scale))
    scores = (query * (root if scale >= 0 else -root)) @ (key.transpose(-2, -1) * root)
    if is_causal:
        length, source = query.shape[-2], key.shape[-2]
        attn_mask = torch.ones(
            length, source, dtype=torch.bool, device=query.device
        ).tril()
    if attn_mask is not None and attn_mask.dtype == torch.bool:
        bias = torch.zeros(attn_mask.shape, dtype=query.dtype, device=query.device)
        attn_mask = bias.masked_fill(attn_mask.logical_not(), float("-inf"))
    if attn_mask is not None:
        scores = scores + attn_mask
    weights = aten._safe_softmax.default(scores, -1)
    weights = aten.native_dropout.default(weights, dropout_p, True)[0]
    return weights @ value


@dataclass
class _Path:
    """One complete run of the source, with the outcomes of its conditions fixed."""

    nodes: list[Node]
    branches: list[BranchPoint]
    outputs: object


def instantiate(obj, init: dict, factory, root: Path) -> nn.Module:
    """Build the module on the meta device, so no weights are allocated."""
    build, args = (factory, {}) if factory is not None else (obj, init)
    shown = ", ".join(f"{k}={v!r}" for k, v in args.items())
    call = f"{build.__name__}({shown})"
    call = f"factory {call}" if factory is not None else call
    with torch.device("meta"):
        try:
            module = build(**args)
        except Exception as e:  # the user's constructor or factory raised
            file, line = raised_at(e, root)
            if file is None:  # the call itself: arguments the signature rejects
                file, line = _defined_at(build, root)
            message = f"{call} failed: {type(e).__name__}: {e}"
            raise UserError(message, file, line) from None
    if not isinstance(module, nn.Module):
        got = type(module).__name__
        message = f"{call} returned {got}, not an nn.Module"
        raise UserError(message, *_defined_at(build, root))
    return module.eval()


def _defined_at(fn, root: Path) -> tuple[str | None, int | None]:
    """Where a function, or a class (its own `__init__`, else the class), is defined,
    if that is the user's code."""
    init = getattr(fn, "__init__", None) if isinstance(fn, type) else None
    for candidate in (init, fn):
        try:
            file = user_file(inspect.getsourcefile(candidate) or "", root)
            line = inspect.getsourcelines(candidate)[1]
        except (TypeError, OSError):
            continue
        if file is not None:
            return file, line
    return None, None


def direct_reads(module: nn.Module) -> dict[str, str]:
    """`self.blocks[0].attn.c_attn.weight` -> `self._modules["blocks"]._modules["0"]
    ._modules["attn"]._modules["c_attn"]._parameters["weight"]`, for every registered
    parameter and buffer that attribute access would find in those dicts.

    A generated call reads each parameter it uses on every call; through attributes,
    every step is a failed instance lookup and a call of `nn.Module.__getattr__` (or
    `ModuleList.__getitem__`), about a microsecond each. A path is left out where a
    class could answer the lookup itself: a class attribute of that name, or a class
    overriding `__getattr__` or `__getattribute__`."""
    reads = {}
    for name, _ in _named_tensors(module):
        owner, text = module, "self"
        *parents, leaf = name.split(".")
        for part in parents:
            if not registered(owner, part, "_modules"):
                break
            owner, text = owner._modules[part], f"{text}._modules[{py_str(part)}]"
        else:
            table = "_parameters" if leaf in owner._parameters else "_buffers"
            if registered(owner, leaf, table):
                reads[self_path(name)] = f"{text}.{table}[{py_str(leaf)}]"
    return reads


def _named_tensors(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """Every parameter and buffer under every name it is registered by (tied ones
    twice)."""
    return [
        *module.named_parameters(remove_duplicate=False),
        *module.named_buffers(remove_duplicate=False),
    ]


def trace(
    obj, module: nn.Module | None, variant: Variant, sources: SourceCache
) -> Traced:
    """Interpret `obj` (a function, or `module.forward`) on meta inputs, along every
    path through its conditions on tensor data (see Note [Regions]); the module in
    train mode for a training variant, else in eval mode."""
    if module is None or not variant.train:
        return _trace(obj, module, variant, sources)
    module.train()
    try:
        return _trace(obj, module, variant, sources)
    finally:
        module.eval()


def _trace(
    obj, module: nn.Module | None, variant: Variant, sources: SourceCache
) -> Traced:
    params: dict[int, str] = {}
    module_paths = ObjectPaths()
    reads: dict[tuple, object] = {}  # what the paths read (Note [State guards])
    tied: dict[str, str] = {}  # a tensor's other name -> the name it is read by
    if module is not None:
        for name, t in _named_tensors(module):
            first = params.setdefault(id(t), name)
            if first != name:
                tied[name] = first
        for name, m in module.named_modules(remove_duplicate=False):
            module_paths.add(m, self_path(name))
    fn = type(module).forward if module is not None else obj
    stubs: dict[Stub, int] = {}
    loops: dict[str, tuple[int, LoopBody]] = {}
    comparisons: list[tuple] = []
    paths = [0]
    objects: list[ObjectInput] = []
    whole: dict[int, str] = {}  # statements that are fallback code on every path
    model_state: list[tuple] = []  # Note [Model state the call sets]

    def run(decisions: tuple[bool, ...]) -> _Path:
        paths[0] += 1
        if paths[0] > MAX_PATHS:
            raise Unsupported(
                f"more than {MAX_PATHS} paths through conditions on tensor data"
            )
        builder = GraphBuilder(params)
        recorder = DeviceRecorder(builder, variant.device)
        interp = Interpreter(
            recorder,
            sources,
            module_paths,
            decisions,
            stubs,
            loops,
            whole,
            train=variant.train,
            device=variant.device,
        )
        args, kwargs, found = _inputs(
            fn, variant, builder, module, sources.root, skip_self=module is not None
        )
        objects[:] = [example.input for example in found]
        for example in found:
            interp.inputs.update(example.places)
            interp._held.append(example.copies)
        try:
            dropout = (
                DropoutAsOp(variant.device)
                if variant.train
                else contextlib.nullcontext()
            )
            pads, lists = CircularPadAsGather(), ListIndices()
            with torch.device("meta"), torch.no_grad(), recorder, dropout, pads, lists:
                self_ = (module,) if module is not None else ()
                # the variant takes the parameters of the decorated function, so
                # its decorators' wrappers are not run (Note [Entry decorators])
                entry = inspect.unwrap(fn)
                result = interp.run_function(entry, (*self_, *args), kwargs)
                interp.returned()
                outputs = _output_refs(result, builder, recorder, interp)
                writes = _input_writes(builder, recorder, interp)
                copies = _tensor_writes(builder, interp)
                if copies:  # the tensor written, returned, is the caller's
                    returned = {v: t for t, v in copies}
                    outputs = map_refs(outputs, lambda r: returned.get(r, r))
                if writes or copies:
                    outputs = Updated(outputs, writes, copies)
                model_state[:] = interp.model_state()
        finally:
            reads.update(interp.guards)
            comparisons.extend(interp.comparisons)
            interp.restore_model()
        return _Path(builder.nodes, interp.branches, outputs)

    def guards(graphs: list[Graph]) -> tuple:
        read = {n.target for g in graphs for n in g.nodes if n.op == "param"}
        source = sys.modules.get(getattr(obj, "__module__", None) or "")
        is_user = partial(_is_user_class, sources=sources)
        return state_guards(module, reads, sorted(read), tied, source, is_user)

    try:
        while True:
            try:
                region = _explore((), run(()), run)
                break
            except Retrace:  # from the start, with one more statement in `whole`
                for state in (stubs, loops, comparisons, reads):
                    state.clear()
                paths[0] = 0
    except Unsupported as e:
        if e.cause is not None:  # Note [Graph breaks that spread] in recorder.py
            e.reason = with_cause(e.reason, e.span, e.cause)
        return Traced(None, guards([]), tuple(stubs), e, objects=tuple(objects))
    except UserCodeError as e:  # eager raises it too, on every call
        where = (e.span.file, e.span.line) if e.span else (None, None)
        message = f"{e} (when called with {variant.describe()})"
        raise UserError(message, *where) from None
    bodies = tuple(body for _, body in sorted(loops.values(), key=lambda v: v[0]))
    for r in region.walk():
        r.graph.lint()
    for body in bodies:
        body.graph.lint()
    return Traced(
        region,
        guards([r.graph for r in region.walk()] + [b.graph for b in bodies]),
        tuple(stubs),
        loops=bodies,
        comparisons=tuple(comparisons),
        objects=tuple(objects),
        model_state=tuple(model_state),
    )


# Note [Entry decorators]
# ~~~~~~~~~~~~~~~~~~~~~~~
# A variant is called with the parameters of the target's own function (a
# `forward`), so that is where interpreting starts: decorators around it
# (transformers' `merge_with_config_defaults`, `capture_outputs`, `torch.no_grad`)
# are not run, and what they would add (config defaults for `use_cache`, captured
# hidden states) is not in the variant. Decorated functions the target calls are
# interpreted from their outermost wrapper that is Python source (see
# `Interpreter._layer`).


def _is_user_class(cls: type, sources: SourceCache) -> bool:
    try:
        return sources.is_user_file(inspect.getsourcefile(cls))
    except TypeError:  # built in
        return False


def _explore(prefix: tuple[bool, ...], path: _Path, run) -> Region:
    """The region after the conditions decided by `prefix`, on `path`."""
    k = len(prefix)
    start = path.branches[k - 1].position if k else 0
    if len(path.branches) == k:
        return Region(subgraph(path.nodes, start, len(path.nodes), path.outputs))
    point = path.branches[k]
    if_true = _explore((*prefix, True), path, run)
    if_false = _explore((*prefix, False), run((*prefix, False)), run)
    later = _inputs_of(if_true) | _inputs_of(if_false)
    body = path.nodes[start : point.position]
    live = tuple(Ref(n.name) for n in body if n.name in later)
    graph = subgraph(path.nodes, start, point.position, (*live, point.cond))
    return Region(graph, Branch(point.cond.name, point.span, if_true, if_false))


def _inputs_of(region: Region) -> set[str]:
    """Values a region and the regions after it read from earlier ones."""
    names: set[str] = set()
    for r in region.walk():
        names |= {n.name for n in r.graph.nodes if n.op == "input"}
    return names


def _inputs(
    fn,
    variant: Variant,
    builder: GraphBuilder,
    module: nn.Module | None,
    root: Path,
    skip_self: bool,
) -> tuple[list, dict, list[Example]]:
    """The example inputs as arguments of `fn`: positional-only parameters by
    position, in the order `fn` declares them, the others by keyword; and each
    object input's example, whose copy the code reads (Note [Objects passed
    in])."""
    params = list(inspect.signature(fn).parameters.values())[1 if skip_self else 0 :]
    kinds = {p.name: p.kind for p in params}
    values = {}
    objects = []
    for name, spec in variant.inputs:
        if name not in kinds:
            raise UserError(f"{fn.__qualname__} has no parameter {name!r}")
        if isinstance(spec, TensorSpec):
            t = torch.empty(spec.shape, dtype=spec.dtype, device="meta")
            builder.add_input(name, t)
            values[name] = t
        elif isinstance(spec, ObjectSpec):
            function = resolve(spec.function, root).obj
            example = example_input(name, spec, function, module, builder.add_input)
            objects.append(example)
            values[name] = example.copy
        else:
            assert isinstance(spec, ScalarSpec)
            values[name] = spec.value
    positional = [n for n, kind in kinds.items() if kind is kind.POSITIONAL_ONLY]
    args = [values.pop(n) for n in positional if n in values]
    return args, values, objects


def _input_writes(builder: GraphBuilder, recorder: Recorder, interp) -> tuple:
    """The attributes the call set on objects passed in, each with its value at
    the return, in the order first set: effects generated code replays."""
    written = interp.first_set(lambda obj: id(obj) in interp.inputs)
    if written and interp.stubs:
        raise Unsupported(
            "sets attributes of an object passed in and has fallback code, which "
            "would read them before they are set"
        )
    return tuple(
        (
            interp.inputs[id(obj)],
            name,
            _output_refs(vars(obj)[name], builder, recorder, interp),
        )
        for obj, name in written
    )


def _tensor_writes(builder: GraphBuilder, interp) -> tuple:
    """The inputs, parameters and buffers the call wrote in place, each with its
    value at the return (Note [Writes into the caller's tensors])."""
    copies = tuple((Ref(t), Ref(v)) for t, v in builder.caller_writes())
    if copies and interp.stubs:
        raise Unsupported(
            "writes into an input, parameter or buffer and has fallback code, "
            "which would read it before it is written"
        )
    return copies


def _output_refs(value, builder: GraphBuilder, recorder: Recorder, interp):
    """Replace result tensors by `Ref`s to the nodes computing them, and objects
    by how generated code builds them (`Record`, `Global`, `ModuleRef`)."""

    def out(v):
        return _output_refs(v, builder, recorder, interp)

    if isinstance(value, (torch.Tensor, OpaqueValue)):
        return builder.ref(value, recorder.span)
    if isinstance(value, torch.device):  # meta here: the variant's at run time
        return DEVICE
    if id(value) in interp.inputs:  # an object passed in, or one inside it
        return interp.inputs[id(value)]
    if id(value) in interp.module_paths:  # the model's config, a submodule
        return ModuleRef(interp.module_paths[id(value)])
    fields = record_fields(value)
    made = id(value) in interp.created
    if fields is not None or made:
        where = importable(type(value))
        if where is None or not where[1]:
            raise Unsupported(
                f"returns a {type(value).__qualname__}, a class generated code "
                "cannot import",
                recorder.span,
            )
        built = "init" if fields is not None else "state"
        if fields is None:
            fields = list(vars(value).items())
        pairs = tuple((k, out(v)) for k, v in fields)
        return Record(*where, pairs, built)
    if isinstance(value, (type, types.FunctionType)) and importable(value):
        return Global(*importable(value))
    if isinstance(value, (tuple, list)):
        return type(value)(out(v) for v in value)
    if isinstance(value, dict):
        return {k: out(v) for k, v in value.items()}
    if isinstance(value, (int, float, bool, str, type(None), torch.dtype)):
        return value
    raise Unsupported(f"returns a {type(value).__name__}", recorder.span)


__all__ = ["Traced", "instantiate", "trace"]
