"""Render the generated Python module: header, guarded dispatch, variant functions.

The module exports a drop-in replacement for the target: a subclass of the source class
(or a function with the source function's signature). Its `forward` tries each variant's
guards in order and runs the first that holds; otherwise it warns once, naming the
guards that failed, and runs the source (eager) code.
"""

from __future__ import annotations

import ast
import math
import re
from collections.abc import Mapping
from dataclasses import replace
from functools import partial

import torch

from runtime_shim.modules import self_path
from transpiler.build import RangeGuard, SharedKernel, TargetCode, VariantCode
from transpiler.codegen import triton as triton_codegen
from transpiler.codegen.guards import Guard, StateCode, fresh, state_code
from transpiler.errors import UserError
from transpiler.frontend import fallback
from transpiler.frontend.fallback import Stub
from transpiler.frontend.objects import ObjectInput, dimension_source
from transpiler.frontend.signature import FROM_SOURCE
from transpiler.ir.dynamic import Dim, dims_in
from transpiler.ir.graph import (
    DEVICE,
    Global,
    InputObject,
    Record,
    Ref,
    Updated,
    iter_refs,
    leaves,
    map_leaves,
    records_in,
)
from transpiler.ir.program import (
    Alloc,
    ExternCall,
    FallbackCall,
    KernelCall,
    LoopCall,
    PartCall,
    Program,
    kernel_params,
    last_steps,
    reads_writes,
)
from transpiler.ir.region import (
    CompiledLoop,
    CompiledRegion,
    map_programs,
    programs_of,
)
from transpiler.options import ObjectSpec, ScalarSpec, TensorSpec
from transpiler.passes.direct_views import DIRECT_VIEW
from transpiler.passes.hoist_constants import (
    constant_sources,
    constant_steps,
    kept_bytes,
)
from transpiler.text import (
    comment,
    docstring,
    py_literal,
    py_str,
    source_lines,
)

OVERWRITTEN = "outputs are overwritten by the next call"  # of a CUDA graph
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


def defaults_table(t: TargetCode, module_alias: str) -> list[str]:
    """The source function's own default values, by parameter, for the defaults
    that are not plain literals: `_DEFAULTS_Net["act"]` is the object the source's
    `act=nn.GELU()` made, not a new one."""
    if all(p.default is not FROM_SOURCE for p in t.signature.params):
        return []
    qualname = t.source.rpartition("::")[2]
    fn = f"{module_alias}.{qualname}" + (".forward" if t.is_module else "")
    return [
        f"# The defaults of {comment(qualname)}: the source's own objects",
        f"{t.defaults} = {{",
        "    name: p.default",
        f"    for name, p in inspect.signature({fn}).parameters.items()",
        "}",
    ]


def literal(value) -> str:
    """Python source for a constant argument of an extern call."""
    if isinstance(value, Ref):
        return value.name
    if isinstance(value, Dim):
        return str(value)
    if value is DEVICE:
        return "device"
    if isinstance(value, torch.dtype):
        return DTYPE_NAMES.get(value, str(value))  # `torch.complex64`
    if isinstance(value, (torch.memory_format, torch.layout)):
        return f"torch.{str(value).split('.')[-1]}"
    if isinstance(value, (float, str)):  # `float("inf")`, `"mean"`
        return py_literal(value)
    if isinstance(value, list):
        return "[" + ", ".join(literal(v) for v in value) + "]"
    if isinstance(value, dict):
        items = ", ".join(f"{literal(k)}: {literal(v)}" for k, v in value.items())
        return "{" + items + "}"
    if isinstance(value, Record) and value.built == "state":
        state = ", ".join(f"{py_str(k)}: {literal(v)}" for k, v in value.fields)
        return f"runtime_shim.rebuild({value.module}.{value.qualname}, {{{state}}})"
    if isinstance(value, Record):
        inner = ", ".join(f"{k}={literal(v)}" for k, v in value.fields)
        return f"{value.module}.{value.qualname}({inner})"
    if isinstance(value, Global):
        return f"{value.module}.{value.qualname}"
    if isinstance(value, InputObject):
        return repr(value)
    if isinstance(value, tuple):
        inner = ", ".join(literal(v) for v in value)
        inner = f"({inner},)" if len(value) == 1 else f"({inner})"
        if type(value).__module__ == "torch.return_types":  # `torch.max(x, 1)`
            return f"torch.return_types.{type(value).__name__}({inner})"
        return inner
    return repr(value)


def _plain(tests: list[str]) -> list[Guard]:
    return [Guard(test, test) for test in tests]


def input_guards(t: TargetCode, vc: VariantCode) -> list[Guard]:
    """The checks of the inputs: no extra arguments where the source takes `*args`
    or `**kwargs` (the variant is compiled for none), then each input's type,
    device, dtype, shape and layout, or its value. Tests read the parameters under
    the wrapper's names for them (`TargetCode.local_names`), texts under the
    user's."""
    own = {n: n for n in t.signature.names}
    tests, texts = _input_tests(t, vc, t.local_names), _input_tests(t, vc, own)
    return [
        Guard(test, text, seen=seen) for (test, seen), (text, _) in zip(tests, texts)
    ]


def tensor_inputs(t: TargetCode, vc: VariantCode) -> list[str]:
    """The locals of the variant's tensor inputs, whose checks `SeenTensors` skips
    when they are as on the last call that passed (Note [Inputs seen before])."""
    return [
        t.local(param)
        for param, spec in vc.variant.inputs
        if isinstance(spec, TensorSpec)
    ]


def seen_name(vc: VariantCode) -> str:
    return f"_SEEN_{vc.name}"


def _input_tests(
    t: TargetCode, vc: VariantCode, names: Mapping[str, str]
) -> list[tuple[str, bool]]:
    """`input_guards`, each parameter `p` spelled `names[p]`: (test, whether it
    checks a tensor input's metadata alone)."""
    v = vc.variant
    objects = {o.param: o for o in vc.objects}
    guards = [
        f"not {names[p.name]}"
        for p in t.signature.params
        if p.kind in (p.VAR_POSITIONAL, p.VAR_KEYWORD)
    ]
    seen: list[str] = []
    sizes: dict[str, str] = {}  # named dimension -> where it is first read
    for param, spec in v.inputs:
        name = names[param]
        if isinstance(spec, TensorSpec):
            # kernels index inputs as contiguous; torch's notion of contiguous lets
            # size-1 and empty dims have any stride, which indexing never uses
            # three checks, each read as one: what it is, its dtype, its layout
            seen += [
                f"isinstance({name}, torch.Tensor) and {name}.is_{v.device}",
                # kernels launch on the current device, as eager's ops on the
                # inputs' own would
                *(
                    [f"{name}.get_device() == torch.cuda.current_device()"]
                    if v.device == "cuda"
                    else []
                ),
                f"{name}.dtype == {DTYPE_NAMES[spec.dtype]}",
                " and ".join(
                    [*_shape_guards(name, spec.shape, sizes), f"{name}.is_contiguous()"]
                ),
            ]
            if v.train:  # its gradient is computed where it was declared `:grad`
                seen.append(f"{'' if spec.grad else 'not '}{name}.requires_grad")
        elif isinstance(spec, ObjectSpec):
            guards += _object_tests(vc, objects[param], name, sizes)
        elif spec.value is None:
            guards.append(f"{name} is None")
        else:
            assert isinstance(spec, ScalarSpec)
            kind = type(spec.value).__name__
            guards.append(f"type({name}) is {kind} and {_equals(name, spec.value)}")
    return [(test, True) for test in seen] + [(test, False) for test in guards]


def _object_tests(
    vc: VariantCode, obj: ObjectInput, name: str, sizes: dict[str, str]
) -> list[str]:
    """The checks of an object passed in (Note [Objects passed in]): its structure
    as the example has it, read through `name`; a tensor's in two checks, its kind
    and its shape."""
    device = vc.variant.device
    for dim, _ in vc.dynamic:  # read where the variant reads it
        source, axis = dimension_source(vc.variant.inputs, vc.objects, dim)
        param = re.match(r"\w+", source)[0]
        if dim not in sizes and param == obj.param:
            at = "" if axis is None else f".shape[{axis}]"
            sizes[dim] = f"{name}{source[len(param):]}{at}"
    first = set(sizes.values())
    guards = []
    for c in obj.checks:
        here = f"{name}{c.path}"
        if c.kind == "type":
            guards.append(f"type({here}) is {_class(c.value)}")
        elif c.kind == "attributes":
            names = ", ".join(py_literal(n) for n in sorted(c.value))
            guards.append(f"vars({here}).keys() == {{{names}}}")
        elif c.kind == "len":
            guards.append(f"len({here}) == {c.value}")
        elif c.kind == "keys":
            guards.append(f"list({here}) == {literal(list(c.value))}")
        elif c.kind == "same":
            guards.append(f"{here} is {name}{c.value}")
        elif c.kind == "device":
            guards.append(f"{here}.type == {py_literal(device)}")
        elif c.kind == "value" and isinstance(c.value, Dim):  # a length, say
            size = Dim(c.value.a, c.value.b, sizes[c.value.name])
            test = f"{here} >= 2" if here in first else f"{here} == {size}"
            guards.append(f"type({here}) is int and {test}")
        elif c.kind == "value" and isinstance(c.value, Global):
            guards.append(f"{here} is {_class(c.value)}")
        elif c.kind == "value" and (c.value is None or isinstance(c.value, bool)):
            guards.append(f"{here} is {c.value}")
        elif c.kind == "value" and isinstance(c.value, torch.dtype):
            guards.append(f"{here} == {literal(c.value)}")
        elif c.kind == "value":
            kind = type(c.value).__name__
            guards.append(f"type({here}) is {kind} and {_equals(here, c.value)}")
        else:
            assert c.kind == "tensor", c
            guards += _object_tensor_tests(here, c.value, device, sizes, first)
    return guards


def _object_tensor_tests(
    here: str, meta: tuple, device: str, sizes: dict[str, str], first: set[str]
) -> list[str]:
    dtype, shape, stride = meta
    on = f"{here}.is_{device}"
    if device == "cuda":
        on += f" and {here}.get_device() == torch.cuda.current_device()"
    layout = f"{here}.is_contiguous()" if stride is None else ""
    kind = " and ".join(
        filter(
            None,
            [
                f"type({here}) is torch.Tensor",
                on,
                f"{here}.dtype == {DTYPE_NAMES[dtype]}",
                layout,
            ],
        )
    )
    sized = _sized(shape, sizes)
    if not any(isinstance(d, Dim) for d in shape):
        tests = [kind, f"{here}.shape == {literal(tuple(shape))}"]
    else:
        dims = [f"{here}.dim() == {len(shape)}"]
        for axis, want in enumerate(sized):
            size = f"{here}.shape[{axis}]"
            dims.append(f"{size} >= 2" if size in first else f"{size} == {want}")
        tests = [kind, " and ".join(dims)]
    if stride is not None:
        strides = ", ".join(_sized(stride, sizes)) + ("," if len(stride) == 1 else "")
        tests.append(f"{here}.stride() == ({strides})")
    return tests


def _sized(values: tuple, sizes: dict[str, str]) -> list[str]:
    """Python for sizes or strides, a dynamic one read where `sizes` says."""
    return [
        str(Dim(v.a, v.b, sizes[v.name])) if isinstance(v, Dim) else str(v)
        for v in values
    ]


def _class(g: Global) -> str:
    """Python for a class: a builtin by its name (`list`), others by module."""
    return g.qualname if g.module == "builtins" else literal(g)


def object_imports(vc: VariantCode) -> list[str]:
    """The modules of the classes an object's checks name."""
    return sorted(
        {
            c.value.module
            for o in vc.objects
            for c in o.checks
            if isinstance(c.value, Global) and c.value.module != "builtins"
        }
    )


def _equals(name: str, value: int | float | bool) -> str:
    """`x == 0.5`, `x == float("inf")`; NaN equals nothing: `x != x`."""
    if isinstance(value, float) and math.isnan(value):
        return f"{name} != {name}"
    return f"{name} == {py_literal(value)}"


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


def param_guards(t: TargetCode, vc: VariantCode, state: StateCode) -> list[Guard]:
    """Every parameter and buffer the variant reads is there (a `Linear(bias=False)`
    has None), and the layout of those that kernels read. Each is read once, into a
    local, from its module's local (`state`; `self.ln_1.weight` costs a Python call
    per attribute). Layouts are checked on every call, since `module.to(...)` may
    swap a parameter or reassign `.data`: all in one call of the variant's table
    (`layout_table`, runtime_shim.TensorLayouts). Then: a parameter read by one name
    still is the one another name shares (tied weights)."""
    params = read_params(vc)
    owners: dict[str, list[str]] = {}  # one check per module: its tensors are there
    for path in params:
        owners.setdefault(path.rpartition(".")[0], []).append(path)
    guards = []
    for paths in owners.values():
        binds = tuple((params[p][0], state.tensors.get(p) or t.read(p)) for p in paths)
        test = " and ".join(f"{name} is not None" for name, _ in binds)
        guards.append(
            Guard(test, " and ".join(f"{p} is not None" for p in paths), binds)
        )
    laid_out = laid_out_params(vc)
    if laid_out:
        taken = {"self", *t.signature.names, *t.local_names.values()}
        taken |= {*state.locals.values(), *state.modules.values()}
        taken |= {name for name, _ in params.values()}
        failed = fresh("mismatch", taken)
        # one per line (a trailing comma): a tensor more or less changes one line
        tensors = "".join(f"{params[path][0]}, " for path in laid_out)
        text = (
            f"{len(laid_out)} parameters and buffers as compiled: device "
            f"{vc.variant.device}, dtype, shape and strides ({layouts_name(vc)})"
        )
        read = f"{layouts_name(vc)}.mismatch({tensors})"
        guards.append(Guard(f"{failed} is None", text, ((failed, read),), failed))
    for tie in state.tied:
        path, first = self_path(tie.name), self_path(tie.first)
        if first in params:
            read = state.tensors.get(path) or t.read(path)
            test = f"{read} is {params[first][0]}"
            guards.append(Guard(test, f"{path} is {first}"))
    return guards


def laid_out_params(vc: VariantCode) -> list[str]:
    """The parameters and buffers whose layout the variant's code assumes: those
    its kernels read, and those it computes kept values from (Note [Values of
    parameters alone]: a kept value is computed for one layout of them)."""
    paths = list(kernel_params(vc.programs))
    p = vc.region.program
    if p.kept:
        sources = set(constant_sources(p))
        paths += [path for name, path, _ in p.params if name in sources]
    return list(dict.fromkeys(paths))


def layouts_name(vc: VariantCode) -> str:
    return f"_LAYOUTS_{vc.name}"


def layout_table(vc: VariantCode) -> list[str]:
    """`_LAYOUTS_<variant>`: the device, dtype, shape and strides that the kernels
    of a variant assume of each parameter and buffer they read, one row each."""
    laid_out = laid_out_params(vc)
    if not laid_out:
        return []
    params = read_params(vc)
    rows = []
    for path in laid_out:
        m = params[path][1]
        dtype, shape, stride = DTYPE_NAMES[m.dtype], literal(m.shape), literal(m.stride)
        rows.append(f"        ({py_str(path)}, {dtype}, {shape}, {stride}),")
    return [
        f"{layouts_name(vc)} = runtime_shim.TensorLayouts(",
        f"    {py_str(vc.variant.device)},",
        "    (",
        *rows,
        "    ),",
        ")",
    ]


def grad_guard(t: TargetCode, vc: VariantCode) -> list[Guard]:
    """Kernels do not record autograd: with grad on, anything needing it runs eager.

    Only what the variant reads matters; fallback code may read any parameter. A
    training variant is for grad enabled and the parameters it differentiates
    requiring grad (its inputs are checked with the inputs: `input_guards`)."""
    if vc.trains:
        params = read_params(vc)
        paths = (self_path(p) for b in vc.backwards for p in b.wrt)
        needs = [params[p][0] for p in paths if p in params]
        test = " and ".join(
            ["torch.is_grad_enabled()"] + [f"{n}.requires_grad" for n in needs]
        )
        return [Guard(test, "torch.is_grad_enabled() and the parameters require grad")]
    tensors = list(graph_inputs(vc)) if vc.region else []
    needs = [f"{t.local(n)}.requires_grad" for n in tensors]
    if t.is_module and vc.calls_fallback:
        needs.append("any(p.requires_grad for p in self.parameters())")
    elif t.is_module:  # the parameter guards read them into locals
        needs += [f"{name}.requires_grad" for name, _ in read_params(vc).values()]
    if not needs:
        return []
    test = f"not torch.is_grad_enabled() or not ({' or '.join(needs)})"
    if not t.is_module:
        own = " or ".join(f"{n}.requires_grad" for n in tensors)
        return [Guard(test, f"not torch.is_grad_enabled() or not ({own})")]
    return [
        Guard(test, "not torch.is_grad_enabled() or nothing it reads requires grad")
    ]


def variant_state(t: TargetCode, vc: VariantCode) -> StateCode:
    """The checks of what the variant assumes of the model and globals (Note [State
    guards]), with locals named apart from the function's parameters and the
    parameter locals."""
    taken = {"self", *t.signature.names, *t.local_names.values()}
    taken |= {name for name, _ in read_params(vc).values()}
    return state_code((g for g in vc.guards if not isinstance(g, RangeGuard)), taken)


def variant_guards(
    t: TargetCode, vc: VariantCode, state: StateCode | None = None
) -> list[Guard]:
    """Every guard of a variant, in the order they are checked: the inputs, then
    the model from the root down (each check reads only what those before it
    established), the parameters, autograd."""
    state = state or variant_state(t, vc)
    guards = input_guards(t, vc)
    if t.is_module:
        guards += _plain([mode_test(vc)])
    guards += state.guards + _range_guards(t, vc)
    guards += param_guards(t, vc, state) + grad_guard(t, vc)
    return list(dict.fromkeys(guards))


def mode_test(vc: VariantCode) -> str:
    """The module's mode the variant is for: train mode for a training variant."""
    return "self.training" if vc.variant.train else "not self.training"


def _range_guards(t: TargetCode, vc: VariantCode) -> list[Guard]:
    return [
        Guard(g.test(t.local(g.input)), g.test(g.input))
        for g in vc.guards
        if isinstance(g, RangeGuard)
    ]


# ------------------------------------------------------ the model, as two tables


def module_table(name: str, rows: list[str]) -> list[str]:
    """`_MODULES_<name>`: the model's modules a target's variants read (Note in
    runtime_shim/modules.py), one row each, shared by the variants that read the
    same; laid out by hand, a row or two a module."""
    return [
        "# The modules the code read: name, class, whether it is called (no hooks),",
        "# the values read of it (runtime_shim/modules.py)",
        "# fmt: off",
        f"{name} = runtime_shim.ModuleStates(",
        *rows,
        ")",
        "# fmt: on",
    ]


def model_name(vc: VariantCode) -> str:
    return f"_MODEL_{vc.name}"


def tensor_tables(vc: VariantCode, state: StateCode) -> dict[str, list[str]] | None:
    """The parameters and buffers the variant reads, by the table of their modules
    that holds them; None where one is read other than through its module (the
    guard function then checks each itself)."""
    tables: dict[str, list[str]] = {}
    for path in read_params(vc):
        held = state.held.get(path)
        if held is None:
            return None
        name, table = held
        tables.setdefault(table, []).append(name)
    return tables


def model_table(
    t: TargetCode, vc: VariantCode, state: StateCode, modules: str
) -> list[str]:
    """`_MODEL_<variant>`: the model as the variant's code assumes it, checked in one
    call (`runtime_shim.ModelState`): its modules, the parameters and buffers it
    reads there, the layouts of those its kernels read, and autograd."""
    tables = tensor_tables(vc, state) or {}
    params = read_params(vc)
    tied = [
        f"({py_str(tie.name)}, {py_str(state.held[self_path(tie.name)][1])},"
        f" {py_str(tie.first)})"
        for tie in state.tied
        if self_path(tie.first) in params and self_path(tie.name) in state.held
    ]
    inputs = list(graph_inputs(vc))
    grad = "all" if vc.calls_fallback else "read"
    grad = grad if inputs or params or vc.calls_fallback else None
    if vc.trains:
        grad = "train"
    rows = [f"    {modules},", *_tensors_dict(tables)]
    if laid_out_params(vc):
        rows.append(f"    layouts={layouts_name(vc)},")
    if tied:
        rows.append(f"    tied=({''.join(f'{row}, ' for row in tied)}),")
    if grad is not None:
        rows.append(f"    grad={py_str(grad)},")
    return [
        "# fmt: off",
        f"{model_name(vc)} = runtime_shim.ModelState(",
        *rows,
        ")",
        "# fmt: on",
    ]


def _tensors_dict(tables: dict[str, list[str]]) -> list[str]:
    """`{"_parameters": ("ln_1.weight", "ln_1.bias", ...), ...}`, one line for the
    tensors of each module: a module added to the model adds a line, no other line
    changes."""
    lines = ["    {"]
    for table, names in tables.items():
        lines.append(f"        {py_str(table)}: (")
        by_module: dict[str, list[str]] = {}
        for name in names:
            by_module.setdefault(name.rpartition(".")[0], []).append(py_str(name))
        lines += [f"            {', '.join(group)}," for group in by_module.values()]
        lines.append("        ),")
    return [*lines, "    },"]


def guard_function(
    t: TargetCode, vc: VariantCode, modules: str | None = None
) -> list[str]:
    """`_guards_<variant>`: the text of the first guard that fails, or None. It never
    raises: a model in a state no guard foresaw (an attribute deleted, a tensor where
    a number was) fails the guard that reads it, so the call runs the source.

    `modules` names the `runtime_shim.ModuleStates` table of the model's modules
    (`module_table`): the inputs are checked here, one check at a time, and the
    model in one call of the variant's `ModelState` (`model_table`)."""
    self_ = "self, " if t.is_module else ""
    state = variant_state(t, vc)
    doc = f"Variant {vc.name} ({vc.describe()}): the first guard that fails, or None."
    model = model_table(t, vc, state, modules) if modules else []
    table = layout_table(vc) if t.is_module else []
    tensors = ", ".join(tensor_inputs(t, vc))
    snapshot = (
        [f"{seen_name(vc)} = runtime_shim.SeenTensors({py_str(vc.variant.device)})", ""]
        if tensors
        else []
    )
    lines = [
        *table,
        *([""] if table else []),
        *model,
        *([""] if model else []),
        *snapshot,
        f"def _guards_{vc.name}({self_}{t.signature.text(t.defaults, t.local_names)}):",
        f'    """{docstring(doc)}"""',
        "    try:",
    ]
    if model:  # the model's modules and tensors: one call, last
        imports = state.global_imports
        guards = [*input_guards(t, vc), *_plain([mode_test(vc)])]
        guards += state.globals + _range_guards(t, vc)
    else:
        imports = state.imports
        guards = variant_guards(t, vc, state)
    lines += [f"        import {m}" for m in sorted({*imports, *object_imports(vc)})]
    seen = [g for g in guards if g.seen]
    if seen:  # Note [Inputs seen before] in runtime_shim/guards.py
        lines.append(f"        if not {seen_name(vc)}.same({tensors}):")
        lines += _check_lines(seen, "            ")
        lines.append(f"            {seen_name(vc)}.seen({tensors})")
    lines += _check_lines([g for g in guards if not g.seen], "        ")
    if model:
        inputs = "".join(f", {t.local(n)}" for n in graph_inputs(vc))
        lines.append(f"        return {model_name(vc)}.mismatch(self{inputs})")
    else:
        lines.append("        return None")
    lines += [
        "    except Exception as e:  # a state no guard foresaw: the source runs",
        '        return f"guards that read without error ({type(e).__name__}: {e})"',
    ]
    return lines


def _check_lines(guards: list[Guard], ind: str) -> list[str]:
    """Each guard's reads and its test, returning its text when the test fails."""
    lines = []
    for g in guards:
        lines += [f"{ind}{name} = {read}" for name, read in g.binds]
        failure = g.failure or py_str(g.text)
        lines += [f"{ind}if {_negated(g.test)}:", f"{ind}    return {failure}"]
    return lines


# a comparison whose opposite is its negation, for the values guards compare
# (scalars, tuples, dtypes, sizes, objects by identity)
_OPPOSITE = {ast.Eq: "!=", ast.Is: "is not", ast.In: "not in", ast.IsNot: "is"}


def _negated(test: str) -> str:
    """Python true when `test` is false, as plainly as it can be said:
    `self.training` for `not self.training`, `not isinstance(x, torch.Tensor)`."""
    node = ast.parse(test, mode="eval").body
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
        return ast.get_source_segment(test, node.operand)
    if isinstance(node, ast.Compare) and len(node.ops) == 1:
        op = _OPPOSITE.get(type(node.ops[0]))
        if op is not None:
            left = ast.get_source_segment(test, node.left)
            return f"{left} {op} {ast.get_source_segment(test, node.comparators[0])}"
    if isinstance(node, (ast.BoolOp, ast.IfExp, ast.NamedExpr, ast.Lambda)):
        return f"not ({test})"
    return f"not {test}"


def reads_function(t: TargetCode, vc: VariantCode) -> list[str]:
    """For a CUDA graph: the parameters and buffers it reads in place, by address."""
    if not (vc.cuda_graph and read_params(vc)):
        return []
    doc = (
        f"What the CUDA graphs of {vc.name} read in place: moving one re-captures them."
        if vc.cuda_graph == "tree"
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
    "aten.convolution.default": "torch.convolution",
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
    # a cuda variant's attention in training (Note [Attention in the joint graph]);
    # the shim's path for CPU tensors serves Triton's interpreter
    "aten._scaled_dot_product_efficient_attention.default": "runtime_shim.attention",
    "aten._scaled_dot_product_efficient_attention_backward.default": (
        "runtime_shim.attention_backward"
    ),
    # raises eager's error type on the CPU (Note [Indirect loads in range])
    "aten._assert_async.msg": "runtime_shim.check_index",
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


# Steps that call a function of the generated module by its name: fallback code
# (the user's, run eagerly) and a training variant's compiled parts
CALLS = (FallbackCall, PartCall)


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
        if step.reuses is not None:  # Note [Writing over a dead input]
            memory = step.reuses
            if step.as_view:
                view = (Ref(memory), m.shape, m.stride, 0)
                memory = _extern_call(DIRECT_VIEW, list(view), [])
            return [f"{step.buffer} = {memory}  # written over: not read after"]
        return [
            f"{step.buffer} = empty({literal(m.shape)}, {literal(m.stride)}, "
            f"{DTYPE_NAMES[m.dtype]})"
        ]
    if isinstance(step, ExternCall):
        if step.target == "getitem":
            item = f"{step.args[0].name}[{step.args[1]}]"
            return [f"{step.out} = {_laid_out(item, step)}"]
        args = [literal(a) for a in step.args]
        kwargs = [f"{k}={literal(v)}" for k, v in step.kwargs if not k.startswith("_")]
        if isinstance(step, CALLS):  # a function of the module, by its name
            call = f"{step.target}({', '.join(args + kwargs)})"
            return [f"{step.out} = {call}" if step.meta else call]
        call = _extern_call(step.target, list(step.args), kwargs)
        if step.meta == ():  # a check of tensor data: it returns nothing
            return [call]
        return [f"{step.out} = {_laid_out(call, step)}"]
    raise AssertionError(step)


def _laid_out(value: str, step: ExternCall) -> str:
    """`value` with the strides compiled code reads it with, where its op may give
    it others: a copy only if they differ (passes/extern_layouts.py)."""
    if step.layout is None:
        return value
    return f"runtime_shim.as_layout({value}, {literal(step.layout)})"


def variant_function(
    t: TargetCode, vc: VariantCode, kernels: dict, free: bool = False
) -> list[str]:
    """`_cpu_0`: the variant's code. It takes the target's parameters under the
    wrapper's names for them (`TargetCode.local_names`) and first binds each
    tensor input to the name of its graph value, where the two differ."""
    assert vc.region is not None
    self_ = "self, " if t.is_module else ""
    names = t.local_names
    lines = [f"def _{vc.name}({self_}{t.signature.text(t.defaults, names)}):"]
    lines += bind_graph_inputs(t, vc)
    lines += device_locals(device_source(t, vc), programs_of(vc.region))
    for dim, size in _dynamic_sizes(t, vc):
        lines.append(f"    {dim} = {size}  # dynamic: one variant for every size")
    bound, reads = module_locals(t, vc)
    lines += bound
    lines += [  # Note [Model state the call sets] in frontend/interpreter.py
        f"    {path}.{attr} = {literal(value)}" for path, attr, value in vc.model_state
    ]
    region = map_programs(vc.region, partial(_local_objects, t=t))
    # a CUDA graph replays what it captured: it would not compute them again
    keep_as = None if vc.cuda_graph else vc.name
    return lines + _region_lines(
        region, kernels, vc.variant.device, reads, "    ", keep_as, free
    )


def _direct_read(text: str) -> tuple[tuple[str, ...], str, str] | None:
    """`self._modules["attn"]._modules["c_attn"]._parameters["weight"]` ->
    (("attn", "c_attn"), "_parameters", "weight"); None for another read."""
    node = ast.parse(text, mode="eval").body
    chain = []
    while isinstance(node, ast.Subscript) and isinstance(node.value, ast.Attribute):
        if not isinstance(node.slice, ast.Constant):
            return None
        chain.append((node.value.attr, node.slice.value))
        node = node.value.value
    if not (isinstance(node, ast.Name) and node.id == "self" and chain):
        return None
    (table, leaf), *modules = chain
    if table not in ("_parameters", "_buffers") or any(
        attr != "_modules" for attr, _ in modules
    ):
        return None
    return tuple(key for _, key in reversed(modules)), table, leaf


def module_locals(t: TargetCode, vc: VariantCode) -> tuple[list[str], dict[str, str]]:
    """`attn = self._modules["attn"]`, `attn_c_attn = attn._modules["c_attn"]` for
    each submodule that two or more of the parameters (or the submodules holding
    them) the variant reads are found in, and how each parameter and buffer is then
    read (`attn_c_attn._parameters["weight"]`): each module is looked up once a
    call, under the name the source's path gives it. Where fallback code runs,
    which may set a module's attributes, every read starts from `self`."""
    reads = {}
    if vc.calls_fallback:
        return [], dict(t.reads)
    programs = programs_of(vc.region)  # its own: not its parts'
    for p in programs:
        for _, path, _ in p.params:
            read = _direct_read(t.read(path))
            if read is not None:
                steps, table, leaf = read
                reads[path] = (steps, f".{table}[{py_str(leaf)}]")
    uses: dict[tuple, set] = {}  # a module -> what is read in it: tensors, modules
    for steps, leaf in reads.values():
        for n in range(len(steps)):
            uses.setdefault(steps[:n], set()).add(steps[n])
        uses.setdefault(steps, set()).add(leaf)
    taken = {*t.local_names.values(), "self", "empty", "device"}
    for p in programs:
        taken |= {*p.inputs, *(n for n, _, _ in p.params)}
        taken |= {s.buffer for s in p.steps if isinstance(s, Alloc)}
        taken |= {s.out for s in p.steps if isinstance(s, ExternCall)}
    names: dict[tuple, str] = {(): "self"}
    lines = []

    def name_of(steps: tuple) -> str:
        """How the code reads the module at `steps`: its local, once bound."""
        if steps not in names:
            parent = name_of(steps[:-1])
            text = f"{parent}._modules[{py_str(steps[-1])}]"
            if len(uses[steps]) < 2:
                return text
            names[steps] = fresh("_".join(steps), taken)
            lines.append(f"    {names[steps]} = {text}")
        return names[steps]

    out = dict(t.reads)
    out.update({path: name_of(steps) + leaf for path, (steps, leaf) in reads.items()})
    return lines, out


def _local_objects(p: Program, t: TargetCode) -> Program:
    """`p` with the objects passed in that it returns or sets attributes of named
    as the variant function's parameters name them (`TargetCode.local`)."""

    def local(value):
        if isinstance(value, InputObject):
            return InputObject(t.local(value.param), value.path)
        return value

    return replace(p, outputs=map_leaves(p.outputs, local))


def bind_graph_inputs(t: TargetCode, vc: VariantCode) -> list[str]:
    """`sum_, x = sum_1, x_` where the graph's name for a tensor input differs from
    the wrapper's for its parameter: in one assignment, as one may be the other's;
    then the tensors of objects passed in, one per line
    (`layers_0_keys = past_key_values.layers[0].keys`)."""
    pairs = [(v, t.local(n)) for n, v in graph_inputs(vc).items() if v != t.local(n)]
    params = [(v, n) for v, n in pairs if n.isidentifier()]
    lines = []
    if params:
        values, names = (", ".join(side) for side in zip(*params))
        lines.append(f"    {values} = {names}")
    return lines + [f"    {v} = {n}" for v, n in pairs if not n.isidentifier()]


def graph_inputs(vc: VariantCode) -> dict[str, str]:
    """Each tensor input of a compiled variant (the parameter's name) -> the name
    of its value in the variant's code (the graph's input, which the graph names
    like any value: `sum` is `sum_`)."""
    assert vc.region is not None
    objects = {o.param: o for o in vc.objects}
    tensors = []
    for n, s in vc.variant.inputs:
        if isinstance(s, TensorSpec):
            tensors.append(n)
        elif isinstance(s, ObjectSpec):
            tensors += [n + path for path in objects[n].tensors]
    values = vc.region.program.inputs
    assert len(values) == len(tensors), (values, tensors)
    return dict(zip(tensors, values))


def _dynamic_sizes(t: TargetCode, vc: VariantCode) -> list[tuple[str, str]]:
    """Each named dimension's name in the code, and its size, read from the first
    input that has it (`objects.dimension_source`)."""
    values = graph_inputs(vc)
    sizes = []
    for dim, code in vc.dynamic:
        name, axis = dimension_source(vc.variant.inputs, vc.objects, dim)
        if axis is None:  # an int in an object passed in
            sizes.append((code, t.local(name)))
        else:
            sizes.append((code, f"{values[name]}.shape[{axis}]"))
    return sizes


def device_locals(device: str, programs: list[Program]) -> list[str]:
    """The locals through which code reads `device` (Python for the variant's
    device): `empty`, the allocator of its buffers, and `device`, for extern calls
    that take one."""
    steps = [step for p in programs for step in p.steps]
    lines = []
    if any(isinstance(step, Alloc) for step in steps):
        lines.append(f"    empty = runtime_shim.allocator({device})")
    if any(
        v is DEVICE
        for step in steps
        if isinstance(step, ExternCall)
        for v in _flat([*step.args, *(v for _, v in step.kwargs)])
    ) or any(v is DEVICE for p in programs for v in leaves(p.outputs)):
        lines.append(f"    device = {device}")
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


def device_source(t: TargetCode, vc: VariantCode) -> str:
    """Python for the device a variant runs on: its first tensor input's, else its
    first parameter's, else (no tensor in) the current device of its kind."""
    tensors = list(graph_inputs(vc).values())
    params = [p for program in vc.programs for p in program.params]
    if tensors or params:
        return f"{tensors[0] if tensors else t.read(params[0][1])}.device"
    if vc.variant.device == "cuda":
        return 'torch.device("cuda", torch.cuda.current_device())'
    return 'torch.device("cpu")'


def _region_lines(
    r: CompiledRegion,
    kernels: dict,
    device: str,
    reads: Mapping[str, str],
    ind: str,
    keep_as: str | None = None,
    free: bool = False,
    free_inputs: bool = False,
) -> list[str]:
    """One region's steps; a branch on tensor data becomes a Python `if`. With
    `free` (a training variant's halves), each value is dropped after its last
    use (`last_uses`); with `free_inputs` too, the inputs (a backward's saved
    values, which the caller no longer holds)."""
    lines = straight_lines(r, kernels, device, reads, ind, keep_as, free, free_inputs)
    if r.cond is None:
        outputs = r.program.outputs
        imports = sorted({rec.module for rec in records_in(outputs)})
        lines += [f"{ind}import {m}" for m in imports]
        if isinstance(outputs, Updated):  # Note [Objects passed in]
            lines += [
                f"{ind}{literal(obj)}.{attr} = {literal(value)}"
                for obj, attr, value in outputs.writes
            ]
            lines += copy_lines(outputs, ind)
            outputs = outputs.result
        return [*lines, f"{ind}return {literal(outputs)}"]
    lines += [
        f"{ind}# sync: {sync_comment(r)}",
        f"{ind}if {r.cond}:",
        *_region_lines(r.if_true, kernels, device, reads, ind + "    "),
        f"{ind}else:",
        *_region_lines(r.if_false, kernels, device, reads, ind + "    "),
    ]
    return lines


def copy_lines(outputs: Updated, ind: str) -> list[str]:
    """The copies of new values into the inputs, parameters and buffers the call
    wrote (Note [Writes into the caller's tensors] in frontend/recorder.py); for
    one a kernel wrote in place (Note [Copies of dead buffers] in
    passes/reuse_buffers.py), its version counter moved, as a copy moves it
    (autograd's checks and kept values read it)."""
    lines = [
        f"{ind}{literal(to)}.copy_({literal(value)})"
        for to, value in outputs.copies
        if to != value
    ]
    moved = [to for to, value in outputs.copies if to == value]
    if moved:  # one call for all of them
        tensors = literal(moved[0]) if len(moved) == 1 else literal(tuple(moved))
        lines.append(f"{ind}torch.autograd.graph.increment_version({tensors})")
    return lines


def sync_comment(r: CompiledRegion) -> str:
    """The text of a `# sync:` comment (escaped: see `text.comment`)."""
    where = f"{r.span}: {r.span.text}" if r.span else "a condition"
    return comment(f"the branch reads tensor data ({where})")


def straight_lines(
    r: CompiledRegion,
    kernels: dict,
    device: str,
    reads: Mapping[str, str],
    ind: str,
    keep_as: str | None = None,
    free: bool = False,
    free_inputs: bool = False,
) -> list[str]:
    """A region's parameters and steps, up to its branch or return: straight-line
    code (a `while` on tensor data aside), a segment of a CUDA graph tree. `reads`
    says how to read each parameter (`TargetCode.reads`). With `keep_as` (the
    variant's name), the values of parameters alone are computed once and kept
    under that key (Note [Values of parameters alone])."""
    p = r.program
    lines = [f"{ind}{name} = {reads.get(path, path)}" for name, path, _ in p.params]
    steps = list(p.steps)
    if keep_as is not None and p.kept:
        inside, steps = constant_steps(p)
        lines += _kept_lines(p, inside, r, kernels, device, reads, ind, keep_as)
    # a region that branches keeps its values for the code of its branches
    frees = {}
    if free and r.cond is None and not r.loops:
        frees = last_uses(p, steps, free_inputs)
    return lines + _steps_lines(steps, r, kernels, device, reads, ind, frees)


def last_uses(p: Program, steps: list, inputs: bool = False) -> dict[int, list[str]]:
    """The buffers and values of `p` that no step after step `i` reads, by `i`:
    the code drops them there (`del`), so that the allocator reuses their memory
    as eager's frees it; not the parameters, kept values and outputs, nor the
    inputs unless `inputs` says the caller no longer holds them."""
    keep = {*(n for n, _, _ in p.params), *p.kept}
    keep |= {r.name for r in iter_refs(p.outputs)}
    if not inputs:
        keep |= set(p.inputs)
    last = last_steps(p, steps)
    bound = {step.buffer for step in steps if isinstance(step, Alloc)}
    bound |= set(p.inputs)  # kept above unless `inputs`
    bound |= {s.out for s in steps if isinstance(s, ExternCall) and _binds(s)}
    frees: dict[int, list[str]] = {}
    for name, i in last.items():
        if name in bound - keep and not isinstance(steps[i], Alloc):
            frees.setdefault(i, []).append(name)
    return frees


def _binds(step: ExternCall) -> bool:
    """Whether the code of `step` assigns its result (`_step_lines`): not a check
    of tensor data, nor fallback code that returns nothing."""
    return step.meta != () and not (isinstance(step, CALLS) and not step.meta)


def _kept_lines(
    p: Program,
    inside: list,
    r: CompiledRegion,
    kernels: dict,
    device: str,
    reads: Mapping[str, str],
    ind: str,
    key: str,
) -> list[str]:
    """The block computing the values of parameters alone once: see Note [Values
    of parameters alone] in passes/hoist_constants.py."""
    sources = constant_sources(p)
    bound = (name for step in p.steps for name in reads_writes(step, p)[1])
    taken = {*p.inputs, *(n for n, _, _ in p.params), *bound}
    taken |= {re.match(r"\w+", read)[0] for read in reads.values()}  # module_locals
    held, kept = fresh("sources", taken), fresh("constants", taken)
    nbytes = kept_bytes(p)
    # one per line (trailing commas): a value more or less changes one line
    values = "".join(f"{v}, " for v in p.kept)
    return [
        f"{ind}{held} = ({''.join(f'{v}, ' for v in sources)})",
        f"{ind}{kept} = runtime_shim.constants(self, {py_str(key)}, {held})",
        f"{ind}if {kept} is None:",
        f"{ind}    # values of parameters and buffers alone, kept between calls:"
        f" {megabytes(nbytes)}",
        *_steps_lines(inside, r, kernels, device, reads, ind + "    "),
        f"{ind}    {kept} = runtime_shim.keep_constants("
        f"self, {py_str(key)}, {held}, ({values}))",
        f"{ind}({values}) = {kept}",
    ]


def megabytes(nbytes: int) -> str:
    return f"{nbytes / 2**20:.1f} MB" if nbytes >= 2**20 / 10 else f"{nbytes} bytes"


def _steps_lines(
    steps: list,
    r: CompiledRegion,
    kernels: dict,
    device: str,
    reads: Mapping[str, str],
    ind: str,
    frees: Mapping[int, list[str]] | None = None,
) -> list[str]:
    """The steps' code; after step `i`, `del` of the values `frees[i]` lists."""
    lines = []
    last_span = None
    allocs: list[str] = []  # written just before the kernel that fills them
    for i, step in enumerate(steps):
        if isinstance(step, Alloc):
            allocs += _step_lines(step)
            continue
        spans = step.spans if isinstance(step, KernelCall) else (step.span,)
        for s in spans:
            if s is not None and s != last_span:
                lines.append(f"{ind}# {comment(f'{s}: {s.text}')}")
                last_span = s
        lines += [ind + a for a in allocs]
        allocs = []
        if isinstance(step, KernelCall):
            lines.append(ind + _kernel_call(step, kernels, device))
        elif isinstance(step, LoopCall):
            loop = dict(r.loops)[step.target]
            lines += _loop_lines(step, loop, kernels, device, reads, ind)
        else:
            lines += [ind + s for s in _step_lines(step)]
        dead = (frees or {}).get(i)
        if dead:
            lines.append(f"{ind}del {', '.join(dead)}")
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
    where = comment(f"{loop.span}: {loop.span.text}") if loop.span else "a loop"
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
    """Fallback code: the user's statement, verbatim, in a function of its own
    (see `fallback.stub_function`)."""
    return source_lines(fallback.stub_function(name, stub))


def _kernel_call(step: KernelCall, kernels: dict, device: str) -> str:
    k = kernels[step.kernel]
    library = "_cpp"
    if isinstance(k, SharedKernel):  # written in another module's library
        library, k = f"_cpp_{k.home}", k.kernel
    dims = sorted(dims_in(k))  # dynamic sizes, passed by value
    if device == "cpu":
        sig = "p" * len(step.args) + "l" * len(dims)
        args = ", ".join([*(f"{a}.data_ptr()" for a in step.args), *dims])
        name = py_str(f"cpp_{k.name}")
        return f"{library}.function({name}, {py_str(sig)})({args})"
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
    """The exported class or function: guarded calls of each variant, then eager.

    Its body calls module-level names (the variants, `runtime_shim`, `super`). Where
    a parameter has one of those names, the body moves to `_dispatch_<name>`, which
    takes the parameters under the wrapper's names for them (`local_names`)."""
    me = t.signature.self_name
    own = {n: n for n in t.signature.names}
    body, used = _dispatch_body(t, module_alias, own, me, inner=False)
    clashes = used & {*own, me}
    about = f"{t.name} compiled ahead of time by transpile; see the module docstring."
    doc = f'"""{docstring(about)}"""'
    if t.is_module:
        head = [
            f"class {t.name}({module_alias}.{t.name}):",
            f"    {doc}",
            "",
            f"    def forward({me}, {t.params_text}):",
        ]
        ind = "        "
    else:
        head = [f"def {t.name}({t.params_text}):", f"    {doc}"]
        ind = "    "
    if not clashes:
        return head + [ind + line for line in body]
    return head + _dispatch_function(t, module_alias, ind)


def _dispatch_function(t: TargetCode, module_alias: str, ind: str) -> list[str]:
    """The exported function's body when a parameter is named like a module-level
    name it calls: one call of `_dispatch_<name>`, which has the body."""
    name = f"_dispatch_{t.name}"
    if name in (*t.signature.names, t.signature.self_name):
        raise UserError(
            f"{t.source}: a parameter named {name} would hide the generated "
            "module's function of that name; rename the parameter"
        )
    self_ = f"{t.signature.self_name}, " if t.is_module else ""
    call = t.signature.call(to=t.local_names)
    names = t.local_names
    body, _ = _dispatch_body(t, module_alias, names, "self", inner=True)
    own = "self, " if t.is_module else ""
    return [
        f"{ind}return {name}({self_}{call})",
        "",
        "",
        f"def {name}({own}{t.signature.text(t.defaults, names)}):",
        f'    """{docstring(t.name)}: its parameters are under names that do not hide'
        ' the module\'s."""',
        *("    " + line for line in body),
    ]


def _dispatch_body(
    t: TargetCode, module_alias: str, held: dict[str, str], me: str, inner: bool
) -> tuple[list[str], set[str]]:
    """The dispatch's statements, with the parameters in the locals `held` (and
    the module instance in `me`); and the module-level names they call. `inner`:
    the body is in a function of its own, not in the exported one."""
    compiled = [vc for vc in t.variants if vc.region is not None]
    sig, names = t.signature, t.local_names
    self_ = f"{me}, " if t.is_module else ""
    used = {"runtime_shim"}
    lines = []
    for vc in compiled:
        guards = f"_guards_{vc.name}({self_}{sig.call(held, names)})"
        lines.append(f"if {guards} is None:")
        tree = vc.cuda_graph == "tree"  # a graph per segment between branches
        # guards and variants take the parameters under the wrapper's names
        call = f"{self_}{sig.call(held, names)}"
        used |= {f"_guards_{vc.name}", f"_{vc.name}"}
        if vc.cuda_graph:
            owner = me if t.is_module else t.name  # where its graph is kept
            reads = f", _reads_{vc.name}" if read_params(vc) else ""
            used |= {owner, f"_reads_{vc.name}"} - {me}
            lines += [
                f"    # CUDA graph{'s' if tree else ''}: {OVERWRITTEN}"
                " (clone to keep)",
                f"    return runtime_shim.cuda_graph{'_tree' if tree else ''}"
                f"({owner}, _{vc.name}{reads})({call})",
            ]
        else:
            lines.append(f"    return _{vc.name}({call})")
    misses = ", ".join(
        f"({py_str(vc.name)}, _guards_{vc.name}({self_}{sig.call(held, names)}))"
        for vc in compiled
    )
    if not t.is_module:
        fallback = f"{module_alias}.{t.name}({sig.call(held)})"
        used.add(module_alias)
    elif inner:
        fallback = f"super({t.name}, {me}).forward({sig.call(held)})"
        used |= {"super", t.name}
    else:
        fallback = f"super().forward({sig.call(held)})"
        used.add("super")
    lines += [
        f"runtime_shim.warn_fallback({py_str(t.name)}, [{misses}])",
        f"return {fallback}",
    ]
    return lines, used
