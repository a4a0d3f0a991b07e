"""Compile Python source text end to end, for tests.

`compile_source` writes the source into a fresh project root, builds every named
function (or nn.Module class) as a target with one CPU and one CUDA variant, writes
the generated package under a unique name, imports it and returns, per target, the
CPU variant (C++ kernels, compiled by runtime_shim) and the CUDA variant (Triton
kernels; called with CPU tensors, they run in Triton's interpreter). A module's
variants take the instance first. Many targets in one source share one generated
module, so one C++ compile: batch cases into one call where you can.
`Compiled.check(inputs)` runs both variants against eager on clones of `inputs` and
compares outputs, inputs, parameters and buffers after the call (`check_call`).

`trace_source` runs only the frontend, for tests of the graph passes.
"""

from __future__ import annotations

import copy
import functools
import importlib
import inspect
import itertools
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any
from unittest import mock

if os.environ.get("TRANSPILE_TEST_DEVICE") != "cuda":  # see tests/devices.py
    os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest
import torch

from runtime_shim import cpp as shim_cpp
from tests.devices import REAL_GPU, on_gpu
from tests.helpers import build_pair, check_call, variant_dtype
from transpiler import pipeline
from transpiler.api import build, write
from transpiler.frontend.loader import resolve
from transpiler.frontend.source import SourceCache
from transpiler.frontend.trace import Traced, instantiate, trace
from transpiler.ir.graph import Graph
from transpiler.ir.interpreter import run_graph
from transpiler.options import (
    Options,
    ScalarSpec,
    Spec,
    Target,
    TensorSpec,
    Variant,
)
from transpiler.pipeline import optimize

Example = torch.Tensor | int | float | bool | None | Spec
_counter = itertools.count()


def specs(inputs: Mapping[str, Example]) -> tuple[tuple[str, Spec], ...]:
    """Variant inputs from example values: tensors give their dtype and shape."""
    out = []
    for name, value in inputs.items():
        if isinstance(value, (TensorSpec, ScalarSpec)):
            out.append((name, value))
        elif isinstance(value, torch.Tensor):
            out.append((name, TensorSpec(value.dtype, tuple(value.shape))))
        else:
            out.append((name, ScalarSpec(value)))
    return tuple(out)


@dataclass(frozen=True)
class Compiled:
    """One compiled function: both variants and the text generated for them."""

    name: str
    module: ModuleType  # the generated wrapper module
    cpu: Callable[..., Any]  # `_cpu_N`: C++ kernels
    cuda: Callable[..., Any]  # `_cuda_N`: Triton kernels (interpreted on CPU)
    cpu_source: str  # source of the CPU variant function
    cuda_source: str
    cpp_text: str  # the whole generated .cpp file of the module ("" if none)
    triton_text: str  # the whole generated *_triton.py ("" if none)

    def __call__(self, *args, **kwargs):
        """The exported function: guards, then a variant or eager."""
        return self.module.__dict__[self.name](*args, **kwargs)

    @property
    def eager(self) -> Callable[..., Any]:
        """The user's source function, as Python runs it."""
        return getattr(self.module._source, self.name)

    def check(
        self,
        inputs: Mapping[str, object],
        init: Mapping[str, object] | None = None,
        dtype: torch.dtype | None = None,
    ) -> None:
        """`.cpu`, then `.cuda`, against `.eager` by `helpers.check_call`: outputs,
        and every input, parameter, buffer and plain attribute after the call.

        A module class is built once on each side from `init`, with the same seeded
        weights (`helpers.build_pair`); both variants run on the generated instance,
        eager's in step. `dtype` (tolerances) defaults to the inputs' f16/bf16.
        """
        dtype = dtype or variant_dtype(specs(inputs))
        exported = getattr(self.module, self.name)
        eager, mine = build_pair(self.eager, exported, init or {})
        for backend, variant in (("cpu", self.cpu), ("triton", self.cuda)):
            run = variant
            if isinstance(mine, torch.nn.Module):
                run = functools.partial(variant, mine)
            check_call(run, eager, inputs, dtype, f"{self.name} {backend}")


def aten_calls(side: str, ops: tuple[str, ...]) -> list[str]:
    """The lines of a variant's source that call one of `ops` (aten op names,
    `index_put`) into PyTorch."""
    return [
        line
        for line in side.splitlines()
        if "torch.ops.aten." in line and any(f".{op}" in line for op in ops)
    ]


def check_raises_as_eager(case: Compiled, args: Mapping[str, Any]) -> None:
    """Eager raises an IndexError or a RuntimeError for `args` (an index out of
    range); so does each variant, the same type. (Not the Triton variant on a
    real GPU: its device-side assert would end the CUDA context.)"""
    import pytest

    with pytest.raises((IndexError, RuntimeError)) as eager_error:
        case.eager(**{k: v.clone() for k, v in args.items()})
    variants = [case.cpu] if REAL_GPU else [case.cpu, case.cuda]
    for variant in variants:
        with pytest.raises(eager_error.type):
            variant(**{k: v.clone() for k, v in args.items()})


def unique_name(prefix: str) -> str:
    return f"{prefix}_{next(_counter)}_{uuid.uuid4().hex[:8]}"


def import_generated(files: Mapping[str, str], root: Path, stem: str) -> ModuleType:
    """Write `files` (what `build` returned) into a fresh package under `root` and
    import its module `stem`."""
    package = unique_name("gen")
    write(files, root / package)
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    importlib.invalidate_caches()
    return importlib.import_module(f"{package}.{stem}")


def compile_source(
    source: str,
    functions: Mapping[str, Mapping[str, Example]],
    root: Path,
    graph_hook: Callable[[Graph], Graph] | None = None,
) -> dict[str, Compiled]:
    """Build each function of `source` for its example inputs, on both backends.

    `graph_hook`, if given, rewrites each traced graph before the graph passes.
    Raises AssertionError when a variant fell back to eager (no program).
    """
    root.mkdir(parents=True, exist_ok=True)
    stem = unique_name("src")
    (root / f"{stem}.py").write_text(source)
    targets = []
    for fn, inputs in functions.items():
        inp = specs(inputs)
        targets.append(
            Target(f"{stem}.py::{fn}", (Variant(inp, "cpu"), Variant(inp, "cuda")))
        )
    options = Options(targets=tuple(targets), root=root)
    if graph_hook is None:
        files = build(options)
    else:

        def hooked(graph: Graph, device: str = "cpu", **kwargs) -> Graph:
            return optimize(graph_hook(graph), device, **kwargs)

        with mock.patch.object(pipeline, "optimize", hooked):
            files = build(options)
    module = import_generated(files, root, stem)
    cpp_text = files.get(f"{stem}.cpp", "")
    triton_text = files.get(f"{stem}_triton.py", "")
    out = {}
    for i, fn in enumerate(functions):  # variants are numbered across the module
        cpu, cuda = (module.__dict__.get(f"_{d}_{i}") for d in ("cpu", "cuda"))
        assert (
            cpu is not None and cuda is not None
        ), f"{fn} was not compiled:\n{module.__doc__}"
        out[fn] = Compiled(
            fn,
            module,
            cpu,
            on_gpu(cuda),
            inspect.getsource(cpu),
            inspect.getsource(cuda),
            cpp_text,
            triton_text,
        )
    return out


def compile_function(
    source: str, name: str, inputs: Mapping[str, Example], root: Path
) -> Compiled:
    return compile_source(source, {name: inputs}, root)[name]


@dataclass(frozen=True)
class TraceResult:
    """The frontend's result for a function or module class of a source text."""

    traced: Traced
    obj: Any  # the user's function, or an instance of the class with real weights
    file: str  # the source's path relative to the root, as spans show it

    @property
    def graph(self) -> Graph:
        """The traced graph; fails the test if the frontend fell back."""
        fb = self.traced.fallback
        assert self.traced.graph is not None, (fb.reason, fb.span)
        return self.traced.graph

    def eager(self, inputs: Mapping[str, Any]) -> Any:
        return self.obj(**inputs)

    def run(self, graph: Graph, inputs: Mapping[str, Any]) -> Any:
        """`graph` on real inputs, by the reference interpreter."""
        module = self.obj if isinstance(self.obj, torch.nn.Module) else None
        return run_graph(graph, dict(inputs), module)

    def check(self, graph: Graph, inputs: Mapping[str, object]) -> None:
        """`run(graph)` against eager by `helpers.check_call`: outputs, inputs,
        parameters and buffers after the call; eager runs on a copy of the module."""
        eager = copy.deepcopy(self.obj)
        modules = (self.obj, eager) if isinstance(eager, torch.nn.Module) else None

        def run(**kwargs: object) -> Any:
            return self.run(graph, kwargs)

        check_call(run, eager, inputs, modules=modules)


def trace_source(
    source: str,
    name: str,
    inputs: Mapping[str, Example],
    root: Path,
    init: Mapping[str, Any] | None = None,
) -> TraceResult:
    """Run the frontend on `name` (a function or nn.Module class) of `source`.

    A module class is traced on the meta device, and instantiated again on the CPU
    (seeded) for eager runs and `run_graph`.
    """
    root.mkdir(parents=True, exist_ok=True)
    stem = unique_name("src")
    (root / f"{stem}.py").write_text(source)
    spec = f"{stem}.py::{name}"
    sources = SourceCache(root)
    obj = resolve(spec, root).obj
    module = None
    if isinstance(obj, type) and issubclass(obj, torch.nn.Module):
        module = instantiate(obj, dict(init or {}), None, root)
    traced = trace(obj, module, Variant(specs(inputs), "cpu"), sources)
    if module is not None:
        torch.manual_seed(0)
        obj = obj(**dict(init or {})).eval()
    return TraceResult(traced, obj, f"{stem}.py")


def trace_graph(
    source: str,
    name: str,
    inputs: Mapping[str, Example],
    root: Path,
    init: Mapping[str, Any] | None = None,
) -> Graph:
    """The traced graph; fails the test if the frontend fell back."""
    return trace_source(source, name, inputs, root, init).graph


def assert_same(got: Any, want: Any, rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Nested tuples/lists/dicts of tensors and constants are equal (NaN == NaN)."""
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), type(got)
        assert got.dtype == want.dtype and got.shape == want.shape, (got, want)
        torch.testing.assert_close(got, want, rtol=rtol, atol=atol, equal_nan=True)
    elif isinstance(want, (tuple, list)):
        assert type(got) is type(want) and len(got) == len(want), (got, want)
        for g, w in zip(got, want):
            assert_same(g, w, rtol, atol)
    elif isinstance(want, dict):
        assert isinstance(got, dict) and list(got) == list(want), (got, want)
        for k in want:
            assert_same(got[k], want[k], rtol, atol)
    else:
        assert got == want, (got, want)


def vectorized_lines(cpp_text: str, folder: Path) -> set[int]:
    """The lines of C++ file `cpp_text` (numbered from 1) at which GCC reports a
    loop vectorized, compiled as runtime_shim compiles kernels; the test is
    skipped under another compiler (`-fopt-info` is GCC's)."""
    cxx = shim_cpp.find_compiler()
    assert cxx is not None, "no C++ compiler: runtime_shim cannot build kernels"
    version = subprocess.run([*cxx, "--version"], capture_output=True, text=True)
    if "Free Software Foundation" not in version.stdout:
        pytest.skip(f"-fopt-info is GCC's: {version.stdout.splitlines()[0]}")
    source = folder / "kernels.cpp"
    source.write_text(cpp_text)
    done = subprocess.run(
        [
            *cxx,
            *shim_cpp.CXX_FLAGS,
            *shim_cpp.INCLUDE_FLAGS,
            "-fopt-info-vec-optimized",
            str(source),
            "-o",
            str(folder / "kernels.so"),
        ],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    found = re.finditer(
        r"kernels\.cpp:(\d+):\d+: optimized: loop vectorized", done.stderr
    )
    return {int(m[1]) for m in found}
