"""Shared test helpers: the example targets, seeded inputs and weights, tolerances.

Only torch is imported at module level (the transpiler lazily, in `load_cases`), so
the independence test's subprocess, where `transpiler` cannot be imported, uses these
same helpers to run the generated modules.

Tolerances (DESIGN.md, "Testing"): float32 is compared with rtol=1e-4, atol=1e-5;
f16/bf16 variants are compared, in float32, against eager run in float32 on upcast
inputs and weights, with rtol=atol=2e-2; integer and bool outputs must be exact.

`check_call` is the one differential check of a call: generated and eager each run on
their own clones of the inputs (and their own module), then outputs, inputs,
parameters, buffers and plain attributes must agree at those tolerances.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib
import os
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from transpiler.options import Variant

ROOT = Path(__file__).resolve().parents[1]
LOW_PRECISION = (torch.float16, torch.bfloat16)
F32_TOL = {"rtol": 1e-4, "atol": 1e-5}
LOW_TOL = {"rtol": 2e-2, "atol": 2e-2}
EXACT_TOL = {"rtol": 0.0, "atol": 0.0}

# ---------------------------------------------------------------------------- targets


@dataclass(frozen=True)
class Case:
    """One variant of one `[tool.transpile]` target."""

    source: str  # as written in pyproject.toml: "examples/gpt_block.py::Block"
    module: str  # the source module: "examples.gpt_block"
    name: str  # the exported name: "Block"
    stem: str  # the generated module is `<package>.<stem>`
    package: str  # the output package: "generated"
    init: tuple[tuple[str, object], ...]
    variant: Variant
    position: int  # index of `variant` in `siblings`
    siblings: tuple[Variant, ...]  # all variants of the target, in config order
    label: str  # "gpt_block::Block[cpu_0]"

    @property
    def device(self) -> str:
        return self.variant.device


def split_source(source: str) -> tuple[str, str]:
    """`examples/toy.py::ToyLinear` or `examples.toy::ToyLinear` -> module, qualname."""
    left, _, qualname = source.strip().partition("::")
    if left.endswith(".py"):
        left = left.removeprefix("./").removesuffix(".py").replace("/", ".")
    return left, qualname


def load_cases(pyproject: Path = ROOT / "pyproject.toml") -> tuple[Case, ...]:
    """Every variant of every target, in config order.

    Labels number the variants of a generated module per device, across its targets,
    in the order declared (`_cpu_0`, `_cpu_1`, `_cuda_0`, ...).
    """
    from transpiler.options import load_config

    out, targets = load_config(pyproject, pyproject.parent)
    package = out.as_posix().strip("/").replace("/", ".")
    counts: dict[tuple[str, str], int] = {}
    cases = []
    for target in targets:
        module, qualname = split_source(target.source)
        stem = module.rsplit(".", 1)[-1]
        name = qualname.rsplit(".", 1)[-1]
        for position, variant in enumerate(target.variants):
            n = counts.get((stem, variant.device), 0)
            counts[stem, variant.device] = n + 1
            label = f"{stem}::{name}[{variant.device}_{n}]"
            cases.append(
                Case(
                    target.source,
                    module,
                    name,
                    stem,
                    package,
                    target.init,
                    variant,
                    position,
                    target.variants,
                    label,
                )
            )
    return tuple(cases)


def generated_module(case: Case) -> ModuleType:
    return importlib.import_module(f"{case.package}.{case.stem}")


def source_object(case: Case) -> Any:
    return getattr(importlib.import_module(case.module), case.name)


def header_variants(module: ModuleType) -> dict[str, list[tuple[str, str]]]:
    """From a generated module's header: target source -> [(variant name, device)].

    The header's table ("Variants (tried in order):") lists each target as
    `Name (source)` and under it one line per variant: `cpu_0    cpu: x=f32[2,4] ...`.
    """
    lines = (module.__doc__ or "").splitlines()
    start = lines.index("Variants (tried in order):") + 1
    table: dict[str, list[tuple[str, str]]] = {}
    current: list[tuple[str, str]] = []
    for line in lines[start:]:
        if not line.strip():
            break
        if line.startswith(" " * 8):
            if "(size 1 of " in line:  # made for a dynamic variant, not declared
                continue
            name, device = line.split()[:2]
            current.append((name, device.rstrip(":")))
        else:
            source = line.strip().rsplit("(", 1)[1].rstrip(")")
            current = table.setdefault(source, [])
    return table


def variant_function(case: Case) -> Callable[..., Any]:
    """The generated `_cpu_N` / `_cuda_N` function of `case`, named by the header."""
    module = generated_module(case)
    listed = header_variants(module).get(case.source)
    assert listed is not None, f"{module.__name__} header does not list {case.source}"
    assert len(listed) == len(case.siblings), (case.source, listed)
    name, device = listed[case.position]
    assert device == case.device, (name, device, case.device)
    fn = module.__dict__.get(f"_{name}")
    assert fn is not None, f"{case.label} was not compiled:\n{module.__doc__}"
    return fn


# ----------------------------------------------------------------------------- inputs


DYNAMIC_SIZE = 7  # a named dimension's size in tests: none the compiler sampled


def make_inputs(
    inputs: Iterable[tuple[str, Any]], seed: int, device: str = "cpu"
) -> dict[str, object]:
    """Seeded inputs for `(name, spec)` pairs: a spec with `dtype` and `shape` (a
    `TensorSpec`) gives randn floats or randint(0, 10) integers, any other (a
    `ScalarSpec`) gives its `value`. Drawn on the CPU, then moved to `device`."""
    gen = torch.Generator().manual_seed(seed)
    values: dict[str, object] = {}
    for name, spec in inputs:
        if not hasattr(spec, "dtype"):
            values[name] = spec.value
            continue
        shape = tuple(DYNAMIC_SIZE if isinstance(d, str) else d for d in spec.shape)
        if spec.dtype.is_floating_point:
            value = torch.randn(shape, generator=gen).to(spec.dtype)
        else:
            high = 2 if spec.dtype == torch.bool else 10
            value = torch.randint(0, high, shape, generator=gen).to(spec.dtype)
        values[name] = value.to(device)
    return values


def variant_dtype(inputs: Iterable[tuple[str, Any]]) -> torch.dtype:
    """The precision a variant is judged at: its f16/bf16 input dtype, else float32."""
    for _, spec in inputs:
        if getattr(spec, "dtype", None) in LOW_PRECISION:
            return spec.dtype
    return torch.float32


def randomize_parameters(module: torch.nn.Module, seed: int) -> None:
    """Every float parameter := randn * 0.1 (so LayerNorm weights are not all ones)."""
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for param in module.parameters():
            if param.is_floating_point():
                noise = torch.randn(param.shape, generator=gen) * 0.1
                param.copy_(noise.to(param.dtype))


def build_pair(
    source: Any, generated: Any, init: Mapping[str, object], seed: int = 0
) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """(eager, generated) callables; modules share the same seeded random weights."""
    is_module = isinstance(source, type) and issubclass(source, torch.nn.Module)
    if not is_module:
        return source, generated
    assert isinstance(generated, type) and issubclass(
        generated, source
    ), f"{generated!r} is not a subclass of {source!r}"
    torch.manual_seed(seed)
    eager = source(**init)
    randomize_parameters(eager, seed)
    gen = generated(**init)
    gen.load_state_dict(eager.state_dict())
    return eager.eval(), gen.eval()


def upcast(value: object) -> object:
    if isinstance(value, torch.Tensor) and value.dtype in LOW_PRECISION:
        return value.float()
    return value


def reference(
    eager: Callable[..., Any], inputs: Mapping[str, object], dtype: torch.dtype
) -> Any:
    """Eager's output; for f16/bf16, eager in float32 on upcast inputs and weights."""
    if dtype not in LOW_PRECISION:
        return eager(**inputs)
    if isinstance(eager, torch.nn.Module):
        eager = copy.deepcopy(eager).float()
    return eager(**{name: upcast(value) for name, value in inputs.items()})


# ---------------------------------------------------------------------------- compare


def flatten(value: object) -> list[object]:
    """Leaves of nested tuples, lists and dicts, in order."""
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in flatten(item)]
    if isinstance(value, dict):
        return [leaf for key in sorted(value) for leaf in flatten(value[key])]
    return [value]


def tolerance(dtype: torch.dtype, output_dtype: torch.dtype) -> dict[str, float]:
    if not output_dtype.is_floating_point:
        return EXACT_TOL
    return LOW_TOL if dtype in LOW_PRECISION else F32_TOL


def assert_close(
    actual: object, expected: object, dtype: torch.dtype, where: str = ""
) -> None:
    """Compare outputs leaf by leaf at the tolerance of `dtype` (see the docstring).

    For f16/bf16, `expected` is the float32 reference and `actual` is compared in
    float32; otherwise dtypes must match exactly.
    """
    got, want = flatten(actual), flatten(expected)
    assert len(got) == len(want), f"{where}: {len(got)} outputs, eager has {len(want)}"
    for i, (a, e) in enumerate(zip(got, want)):
        assert_value_close(a, e, dtype, f"{where} output {i}")


def assert_value_close(a: object, e: object, dtype: torch.dtype, at: str) -> None:
    """One leaf of `assert_close`: a tensor at the tolerance of `dtype`, any other
    value exactly; `at` says which value it is in a failure."""
    if not isinstance(e, torch.Tensor):
        assert not isinstance(a, torch.Tensor) and a == e, f"{at}: {a!r} != {e!r}"
        return
    assert isinstance(a, torch.Tensor), f"{at}: {type(a).__name__}, not a tensor"
    assert a.shape == e.shape, f"{at}: shape {tuple(a.shape)} != {tuple(e.shape)}"
    if dtype in LOW_PRECISION and e.dtype.is_floating_point:
        a = a.float()
    else:
        assert a.dtype == e.dtype, f"{at}: dtype {a.dtype} != {e.dtype}"
    torch.testing.assert_close(
        a.detach().cpu(),
        e.detach().cpu(),
        equal_nan=True,
        msg=lambda m: f"{at}: {m}",
        **tolerance(dtype, e.dtype),
    )


def assert_same_dtypes(actual: object, expected: object, where: str = "") -> None:
    """Output dtypes as eager's (low-precision variants: eager run at low precision)."""
    for i, (a, e) in enumerate(zip(flatten(actual), flatten(expected))):
        if isinstance(e, torch.Tensor):
            assert a.dtype == e.dtype, f"{where} output {i}: {a.dtype} != {e.dtype}"


# ------------------------------------------------------ calls: outputs and mutations


def check_call(
    generated: Callable[..., Any],
    eager: Callable[..., Any],
    inputs: Mapping[str, object],
    dtype: torch.dtype = torch.float32,
    where: str = "",
    *,
    modules: tuple[torch.nn.Module, torch.nn.Module] | None = None,
    device: str = "cpu",
    context: Callable[[], contextlib.AbstractContextManager] = contextlib.nullcontext,
) -> Any:
    """Call `generated` and `eager` on independent clones of `inputs`; assert the same
    outputs (structure, then `assert_close`), the same value of every input after the
    call (in-place updates), and for modules the same parameters, buffers and plain
    attributes after the call. Returns the generated output.

    `modules` is (generated's, eager's): two instances that start from the same
    state. By default they are found in the callables (`module_of`); calling again
    continues from the states both reached. `generated` runs on clones moved to
    `device`, inside `context()`; then eager, from the same CPU RNG state (code
    that runs the source draws what eager draws). For f16/bf16 `dtype` the
    reference is eager in float32 on upcast inputs and a float32 copy of its
    module (see `reference`); output dtypes are eager's on another copy at the
    low precision.
    """
    mine, theirs = modules or (module_of(generated), module_of(eager))
    assert (mine is None) == (theirs is None), f"{where}: pass modules="
    assert mine is None or mine is not theirs, f"{where}: one module on both sides"
    args = clone(inputs, device)
    rng = torch.get_rng_state()  # each side draws the same random numbers
    with context():
        actual = generated(**args)
    want_args = clone(inputs)
    if dtype in LOW_PRECISION:
        assert theirs is None or eager is theirs, f"{where}: eager must be the module"
        native = copy.deepcopy(eager) if theirs is not None else eager
        torch.set_rng_state(rng)
        assert_same_dtypes(actual, native(**clone(inputs)), where)
        want_args = {name: upcast(value) for name, value in want_args.items()}
        if theirs is not None:
            eager = theirs = copy.deepcopy(theirs).float()
    torch.set_rng_state(rng)
    expected = eager(**want_args)
    got, want = structure(actual), structure(expected)
    assert got == want, f"{where}: output structure {got} != eager's {want}"
    assert_close(actual, expected, dtype, where)
    for name, value in want_args.items():
        assert_tree_close(args[name], value, dtype, f"{where} input {name!r}")
    if mine is not None:
        assert_same_state(mine, theirs, dtype, where)
    return actual


def module_of(fn: Callable[..., Any]) -> torch.nn.Module | None:
    """The module `fn` runs on: `fn` itself, a bound method's owner, or the first
    argument of a `functools.partial(variant, module)`; None for a function."""
    if isinstance(fn, functools.partial) and fn.args:
        fn = fn.args[0]
    fn = getattr(fn, "__self__", fn)
    return fn if isinstance(fn, torch.nn.Module) else None


def clone(value: Any, device: str = "cpu") -> Any:
    """A copy of nested tensors (cloned, moved to `device`) and other values."""
    if isinstance(value, torch.Tensor):
        copied = value.detach().clone().to(device)
        return copied.requires_grad_(value.requires_grad)
    if isinstance(value, (tuple, list)):
        return type(value)(clone(item, device) for item in value)
    if isinstance(value, dict):
        return {key: clone(item, device) for key, item in value.items()}
    return copy.deepcopy(value)


def structure(value: object) -> object:
    """The containers of `value` (their types, lengths, keys), leaves left out."""
    if isinstance(value, (tuple, list)):
        return type(value), [structure(item) for item in value]
    if isinstance(value, dict):
        return type(value), [(key, structure(item)) for key, item in value.items()]
    return None


def assert_tree_close(
    actual: object, expected: object, dtype: torch.dtype, at: str
) -> None:
    """Nested values leaf by leaf, as `assert_close` compares outputs."""
    got, want = flatten(actual), flatten(expected)
    assert len(got) == len(want), f"{at}: {len(got)} values, eager has {len(want)}"
    for i, (a, e) in enumerate(zip(got, want)):
        assert_value_close(a, e, dtype, at if len(want) == 1 else f"{at}[{i}]")


def assert_same_state(
    mine: torch.nn.Module, theirs: torch.nn.Module, dtype: torch.dtype, where: str
) -> None:
    """Every parameter, buffer and plain attribute of the two modules' trees."""
    kinds = {
        "parameter": lambda m: dict(m.named_parameters()),
        "buffer": lambda m: dict(m.named_buffers()),
        "attribute": plain_attributes,
    }
    for kind, get in kinds.items():
        got, want = get(mine), get(theirs)
        assert got.keys() == want.keys(), f"{where}: {kind}s {got.keys() ^ want.keys()}"
        for name, value in want.items():
            assert_tree_close(got[name], value, dtype, f"{where} {kind} {name!r}")


def plain_attributes(module: torch.nn.Module) -> dict[str, object]:
    """`vars` of every submodule (`training` included, `_private` ones not), by
    qualified name. An object without an `==` of its own compares by identity: one
    that each module has a copy of (deepcopy makes another) stands for its type."""
    out = {}
    for prefix, sub in module.named_modules():
        for key, value in vars(sub).items():
            if key.startswith("_"):
                continue
            no_eq = type(value).__eq__ is object.__eq__
            if no_eq and copy.deepcopy(value) is not value:
                value = type(value)
            out[f"{prefix}.{key}" if prefix else key] = value
    return out


@contextlib.contextmanager
def umask(mask: int) -> Iterator[None]:
    """This process's umask is `mask` inside the block."""
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)
