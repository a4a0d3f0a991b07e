"""What the source does when it is called must happen when the generated code is
called: state it writes, effects it has, names it binds, errors it raises.

Each class below is a table of small modules. Every case is built with a CPU and a
CUDA variant; the exported module (C++ kernels) and the `_cuda_0` variant (Triton's
interpreter) are each called twice on fresh state, next to the source module, and
must agree with it on the outputs *and* on every parameter, buffer, plain attribute
and input after each call, with the RNG seeded the same before each call.
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import re
import subprocess
import sys
import textwrap
import warnings
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from tests.compile_helpers import import_generated, unique_name
from tests.devices import on_gpu
from transpiler.api import build
from transpiler.options import Options, Target, TensorSpec, Variant

PRELUDE = """\
import torch
import torch.nn.functional as F
from torch import nn
"""


def _build(source: str, inputs: dict[str, dict], root: Path):
    """Build each class of `source` named in `inputs` for its example inputs, on
    both devices, as one generated module (one C++ compile)."""
    root.mkdir(parents=True, exist_ok=True)
    stem = unique_name("src")
    (root / f"{stem}.py").write_text(PRELUDE + textwrap.dedent(source))
    targets = []
    for name, example in inputs.items():
        spec = tuple(
            (k, TensorSpec(v.dtype, tuple(v.shape))) for k, v in example.items()
        )
        variants = (Variant(spec, "cpu"), Variant(spec, "cuda"))
        targets.append(Target(f"{stem}.py::{name}", variants))
    files = build(Options(targets=tuple(targets), root=root))
    return import_generated(files, root, stem), files[f"{stem}.py"]


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory):
    """`built(table)`: the generated module of a table of cases, built once."""
    cache: dict[str, object] = {}

    def get(table: str):
        if table not in cache:
            source, inputs = TABLES[table]()
            cache[table] = _build(source, inputs, tmp_path_factory.mktemp(table))[0]
        return cache[table]

    return get


def _state(module: torch.nn.Module) -> dict:
    """Parameters, buffers and plain attributes of every submodule, copied."""
    plain = {
        f"{name}.{k}": copy.deepcopy(v)
        for name, m in module.named_modules()
        for k, v in vars(m).items()
        if not k.startswith("_") and k != "training"
    }
    return {**plain, **{k: v.clone() for k, v in module.state_dict().items()}}


def _same(a, b, where: str) -> None:
    assert type(a) is type(b), (where, type(a), type(b))
    if isinstance(a, torch.Tensor):  # before objects: a tensor has a __dict__ too
        torch.testing.assert_close(a, b, equal_nan=True, msg=where)
        return
    if dataclasses.is_dataclass(a) or hasattr(a, "__dict__"):  # an object's state
        a, b = vars(a), vars(b)
    if isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            _same(a[k], b[k], f"{where}.{k}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            _same(x, y, f"{where}[{i}]")
    else:
        assert a == b, (where, a, b)


def _run_both(generated, name: str, inputs: Callable[[], dict], calls: int = 2) -> None:
    """The exported module and its `_cuda_N` variant against the source, call by
    call, on modules starting from the same weights."""
    source_cls = getattr(generated._source, name)
    torch.manual_seed(0)
    eager = source_cls().eval()
    for backend in ("cpu", "triton"):
        mine = getattr(generated, name)().eval()
        mine.load_state_dict(eager.state_dict())
        reference = copy.deepcopy(eager)
        for call in range(calls):
            torch.manual_seed(call)
            args = inputs()
            theirs = {k: v.clone() for k, v in args.items()}
            torch.manual_seed(100 + call)
            with torch.no_grad():  # on the variant's device: the same RNG
                want = _on(backend, _call)(reference, **theirs)
            torch.manual_seed(100 + call)
            with torch.no_grad():
                if backend == "cpu":
                    got = mine(**args)
                else:
                    got = _cuda_variant(generated, name)(mine, **args)
            where = f"{name} {backend} call {call}"
            _same(got, want, f"{where} output")
            _same(args, theirs, f"{where} inputs")
            _same(_state(mine), _state(reference), f"{where} state")


def _call(module, **inputs):
    return module(**inputs)


def _on(backend: str, fn):
    """`fn` run where the backend's variant runs (tests/devices.py)."""
    return on_gpu(fn) if backend == "triton" else fn


def _cuda_variant(generated, name: str):
    """The `_cuda_N` function that `name`'s dispatch calls."""
    return on_gpu(_variant(generated, name, "cuda"))


def _variant(generated, name: str, device: str):
    """The variant function for `device` that `name`'s dispatch calls."""
    (variant,) = set(
        re.findall(
            rf"_guards_({device}_\d+)\(",
            inspect.getsource(getattr(generated, name).forward),
        )
    )
    return getattr(generated, f"_{variant}")


# ------------------------------------------------- in-place writes into the caller's


ALIAS_WRITES = {
    "EmbeddingMaxNorm": (
        """
        class EmbeddingMaxNorm(nn.Module):
            def __init__(self):
                super().__init__()
                self.weight = nn.Parameter(torch.randn(10, 4) * 3)
            def forward(self, x):
                return F.embedding(x, self.weight, max_norm=1.0) * 2
        """,
        lambda: {"x": torch.tensor([1, 2, 1, 7])},
    ),
    "InstanceNormStats": (
        """
        class InstanceNormStats(nn.Module):
            def __init__(self):
                super().__init__()
                self.register_buffer("rm", torch.zeros(4))
                self.register_buffer("rv", torch.ones(4))
            def forward(self, x):
                y = F.instance_norm(
                    x, running_mean=self.rm, running_var=self.rv, use_input_stats=True
                )
                return y + 1
        """,
        lambda: {"x": torch.randn(2, 4, 5)},
    ),
    "DetachedParamWrite": (
        """
        class DetachedParamWrite(nn.Module):
            def __init__(self):
                super().__init__()
                self.scale = nn.Parameter(torch.ones(4))
            def forward(self, x):
                self.scale.detach().mul_(2)
                return x * self.scale
        """,
        lambda: {"x": torch.randn(3, 4)},
    ),
    "InputRowWrite": (
        """
        class InputRowWrite(nn.Module):
            def forward(self, x):
                x[0].add_(1)
                return x.sum(0)
        """,
        lambda: {"x": torch.randn(3, 4)},
    ),
}


ALIASES_SEE_WRITES = """
class WriteAfterFallbackWrite(nn.Module):
    def forward(self, x):
        x.mul_(0.5)
        y = x * 2
        x.add_(1)
        return y

class ViewBeforeWrite(nn.Module):
    def forward(self, x):
        h = x * 2
        v = h.t()
        h.mul_(3)
        return v + 1

class DetachBeforeWrite(nn.Module):
    def forward(self, x):
        h = x * 2
        d = h.detach()
        h.add_(1)
        return d * h

class RowWriteThenBase(nn.Module):
    def forward(self, x):
        h = x * 2
        h[0].add_(1)
        return h + 1

class FallbackWritesViewedBuffer(nn.Module):
    def forward(self, x):
        h = x * 2
        first = h[0]
        h[h > 0] = 0.0
        return first + 1, h

class SplitThenFallbackWrite(nn.Module):
    def forward(self, x):
        h = x * 2
        a, b, c = h.unbind(0)
        h[h < 0] = 1.0
        return a * b + c
"""
ALIASES_SEE_WRITES += """
class CopyBeforeFallbackWrite(nn.Module):
    def forward(self, x):
        scaled = [x * i for i in range(2)]
        x[0].mul_(3)
        return torch.stack([e.relu() for e in scaled]), scaled
"""
ALIASED = (
    "CopyBeforeFallbackWrite",
    "WriteAfterFallbackWrite",
    "ViewBeforeWrite",
    "DetachBeforeWrite",
    "RowWriteThenBase",
    "FallbackWritesViewedBuffer",
    "SplitThenFallbackWrite",
)


@pytest.mark.parametrize("name", ALIASED)
def test_aliases_see_in_place_writes_made_after_them(
    name: str, built, triton_interpreter: None
) -> None:
    """A view, `detach` or unpacked piece of a tensor taken before an in-place write
    to it (compiled or fallback code) reads the written values, and an input that
    fallback code wrote is still the caller's for later writes."""
    _run_both(built("aliases"), name, lambda: {"x": torch.randn(3, 4)})


@pytest.mark.parametrize("name", sorted(ALIAS_WRITES))
def test_in_place_writes_through_aliases_reach_the_caller(
    name: str, built, triton_interpreter: None
) -> None:
    _run_both(built("alias_writes"), name, ALIAS_WRITES[name][1])


# ------------------------------------------------------------ torch calls with effects


EFFECTS = """
class SeedThenSample(nn.Module):
    def forward(self, x):
        a = torch.rand(4, device=x.device)
        torch.manual_seed(0)
        b = torch.rand(4, device=x.device)
        y = x * 2
        torch.manual_seed(3)
        return y + a + b + torch.randn(4, device=x.device)

class GeneratorSeed(nn.Module):
    def forward(self, x):
        g = torch.Generator(x.device)
        g.manual_seed(5)
        return x + torch.rand(4, generator=g, device=x.device)
"""


@pytest.mark.parametrize("name", ["SeedThenSample", "GeneratorSeed"])
def test_rng_state_calls_run_at_call_time(
    name: str, built, triton_interpreter: None
) -> None:
    _run_both(built("effects"), name, lambda: {"x": torch.randn(4)})


def test_io_in_forward_happens_at_call_time_not_at_transpile_time(
    tmp_path: Path,
) -> None:
    saved = tmp_path / "saved.pt"
    source = f"""
    class Saves(nn.Module):
        def forward(self, x):
            torch.save(x * 2, {str(saved)!r})
            return x + 1
    """
    generated, text = _build(source, {"Saves": {"x": torch.randn(4)}}, tmp_path)
    assert not saved.exists(), "torch.save ran at transpile time"
    assert "torch.save(" in text  # in fallback code, verbatim
    x = torch.randn(4)
    with torch.no_grad():
        out = generated.Saves().eval()(x)
    torch.testing.assert_close(out, x + 1)
    torch.testing.assert_close(torch.load(saved), x * 2)


# ---------------------------------------------------- Python state the source changes


STATE = {
    "CountsSteps": """
        class CountsSteps(nn.Module):
            def __init__(self):
                super().__init__()
                self.steps = 0
            def forward(self, x):
                self.steps += 1
                return x * self.steps
        """,
    "AppendsHistory": """
        class AppendsHistory(nn.Module):
            def __init__(self):
                super().__init__()
                self.seen = []
            def forward(self, x):
                self.seen.append(x.shape[0])
                return x * len(self.seen)
        """,
    "SetsAttr": """
        class SetsAttr(nn.Module):
            def __init__(self):
                super().__init__()
                self.scale = 1.0
            def forward(self, x):
                setattr(self, "scale", self.scale * 2)
                return x * self.scale
        """,
}


@pytest.mark.parametrize("name", sorted(STATE))
def test_state_written_by_the_source_is_read_at_call_time(
    name: str, built, triton_interpreter: None
) -> None:
    _run_both(built("state"), name, lambda: {"x": torch.randn(3)}, calls=3)


# Note [Model state the call sets]: plain values a forward sets on its modules,
# set by the variant when it starts. name -> (source, compiled: no fallback code)
MODEL_STATE = {
    "ClampsWindow": (  # HF Swin: sizes clamped to the input's resolution
        """
        class ClampsWindow(nn.Module):
            def __init__(self):
                super().__init__()
                self.window = 4
                self.shift = 2
            def clamp(self, size):
                if size <= self.window:
                    self.shift = 0
                    self.window = size
            def forward(self, x):
                self.clamp(x.shape[-1])
                if self.shift > 0:
                    x = torch.roll(x, self.shift, -1)
                return x.view(-1, self.window).sum(-1) * self.window
        """,
        True,
    ),
    "SetsWithoutReading": (
        """
        class SetsWithoutReading(nn.Module):
            def __init__(self):
                super().__init__()
                self.last = None
            def forward(self, x):
                self.last = (x.shape[-1], "seen")
                return x * self.last[0]
        """,
        True,
    ),
    "SetsChildMode": (  # a parent sets what a child reads
        """
        class Child(nn.Module):
            def __init__(self):
                super().__init__()
                self.mode = "slow"
            def forward(self, x):
                return x * 2 if self.mode == "fast" else x - 1
        class SetsChildMode(nn.Module):
            def __init__(self):
                super().__init__()
                self.child = Child()
            def forward(self, x):
                self.child.mode = "fast"
                return self.child(x) + 1
        """,
        True,
    ),
    "ChangesWhatItRead": (  # the next call would read another value: source
        """
        class ChangesWhatItRead(nn.Module):
            def __init__(self):
                super().__init__()
                self.window = 8
            def forward(self, x):
                if x.shape[-1] <= self.window:
                    self.window = x.shape[-1] - 1
                return x * self.window
        """,
        False,
    ),
    "AfterFallbackCode": (
        """
        class AfterFallbackCode(nn.Module):
            def __init__(self):
                super().__init__()
                self.size = 0
            def forward(self, x):
                y = torch.from_numpy(x.cpu().numpy() * (self.size + 2)).to(x.device)
                self.size = 5
                return y + self.size
        """,
        False,
    ),
    "UnderDataCondition": (
        """
        class UnderDataCondition(nn.Module):
            def __init__(self):
                super().__init__()
                self.flag = False
            def forward(self, x):
                if x.sum() > 0:
                    self.flag = True
                return x * 2 if self.flag else x
        """,
        False,
    ),
}


def test_model_state_the_call_sets(tmp_path: Path) -> None:
    """Each case against eager for three calls on one instance (state, inputs and
    outputs after each); the compiled ones run no fallback code and set the state
    when they start, and their guards pass on the calls after the first."""
    source = "".join(textwrap.dedent(src) for src, _ in MODEL_STATE.values())
    inputs = {name: {"x": torch.randn(2, 4)} for name in MODEL_STATE}
    generated, _ = _build(source, inputs, tmp_path)
    for name, (_, compiled) in MODEL_STATE.items():
        cpu = inspect.getsource(_variant(generated, name, "cpu"))
        assert ("_fallback_" not in cpu) == compiled, (name, cpu)
        with warnings.catch_warnings():
            # a failed guard warns; where the write is fallback code, the guard
            # on what the call read fails after its first call, as it should
            warnings.simplefilter("error" if compiled else "ignore")
            _run_both(generated, name, lambda: {"x": torch.randn(2, 4)}, calls=3)
    clamps = inspect.getsource(_variant(generated, "ClampsWindow", "cpu"))
    assert "self.shift = 0" in clamps and "self.window = 4" in clamps, clamps


# ------------------------------------------------------- names bound by fallback code


NAMES = """
class Base(nn.Module):
    def forward(self, x):
        return x + 1

class NestedDef(nn.Module):
    def forward(self, x):
        def twice(t):
            return t * 2
        return twice(x) + 1

class NestedDefLocals(nn.Module):
    def forward(self, x):
        def inner(t, *args):
            for e in args:
                t = t + e
            return t
        return inner(x, x)

class ExceptAs(nn.Module):
    def forward(self, x):
        try:
            y = x.view(7)
        except RuntimeError as e:
            y = x * 2
        return y

class Walrus(nn.Module):
    def forward(self, x):
        if (n := x.shape[0]) > 1:
            x = x + n
        return x * n

class Deletes(nn.Module):
    def forward(self, x):
        y = x * 2
        z = x.tolist()
        del z
        return y + 1

class LocalImport(nn.Module):
    def forward(self, x):
        import math
        return x * math.pi

class ReadsLocals(nn.Module):
    def forward(self, x, scale=2.0):
        args = locals()
        return x * args["scale"]

class SuperInFallback(Base):
    def forward(self, x):
        y = super().forward(x)
        print(super().forward(y).shape)
        return y * 2
"""


NAMES += """
class AssignedOnOnePath(nn.Module):
    def forward(self, x):
        try:
            t = x.view(7)
        except RuntimeError:
            pass
        return x * 2

class ReadsNameAssignedInTry(nn.Module):
    def forward(self, x):
        try:
            t = x.view(-1) * 2
        except RuntimeError:
            pass
        return t + 1

class BreakInFallback(nn.Module):
    def forward(self, x):
        for i in range(3):
            try:
                x = x + 1
                if i == 1:
                    break
            except RuntimeError:
                pass
        return x * 2

def doubled(t):
    return t * 2

class LocalDictItems(nn.Module):
    def forward(self, x):
        opts = {}
        opts["scale"] = 2.0
        return x * opts["scale"]

class RunStateQueries(nn.Module):
    def forward(self, x):
        if torch.compiler.is_compiling() or torch.jit.is_tracing():
            return x
        return x * 2

class FallbackImportsWhatItReads(nn.Module):
    def forward(self, x):
        import math as m
        fn = doubled
        rows = x.tolist()
        return fn(torch.tensor(rows)) * m.pi

class FallbackGetsAMethod(nn.Module):
    def scale(self, t):
        return t * 3
    def forward(self, x):
        fn = self.scale
        rows = x.tolist()
        return fn(torch.tensor(rows))

class FallbackGetsASlice(nn.Module):
    def forward(self, x):
        keep = slice(-2, None)
        rows = x[keep].tolist()
        return x[keep] * len(rows)

class FallbackValueInAList(nn.Module):
    def forward(self, x):
        rows = torch.tensor(x.tolist(), device=x.device)
        return torch.cat([rows, x]) * 2

class NoneFromFallbackCode(nn.Module):
    def forward(self, x):
        s = x.sum().item()
        y = None if s < 1e9 else x * 2
        if y is not None:
            x = x + y
        return x * 3

class FallbackFillsDict(nn.Module):
    def forward(self, x):
        opts = {}
        rows = x.tolist()
        opts["n"] = len(rows)
        return x * opts.get("n", 0)

class NotOfTensorInFallback(nn.Module):
    def forward(self, x):
        print(not (x > 5).any())
        return x * 2
"""


NAMED = (
    "AssignedOnOnePath",
    "ReadsNameAssignedInTry",
    "BreakInFallback",
    "NotOfTensorInFallback",
    "NoneFromFallbackCode",
    "FallbackFillsDict",
    "LocalDictItems",
    "RunStateQueries",
    "FallbackImportsWhatItReads",
    "FallbackGetsAMethod",
    "FallbackGetsASlice",
    "FallbackValueInAList",
    "NestedDef",
    "NestedDefLocals",
    "ExceptAs",
    "Walrus",
    "Deletes",
    "LocalImport",
    "ReadsLocals",
    "SuperInFallback",
)


@pytest.mark.parametrize("name", NAMED)
def test_fallback_code_keeps_the_names_it_binds(
    name: str, built, triton_interpreter: None
) -> None:
    _run_both(built("names"), name, lambda: {"x": torch.randn(3)})


# Python that real model code is written in, compiled whole: no fallback code.
COMPILED_PYTHON = """
import contextvars
import dataclasses
import functools
import inspect
from typing import NamedTuple

_scale = contextvars.ContextVar("scale", default=1.0)


def and_all(*fns):
    if not all(callable(f) for f in fns):
        raise ValueError("not callable")
    def both(t):
        out = t > -1e9
        for f in fns:
            out = out & f(t)
        return out
    return both


def above(k):
    def inner(t):
        return t > k
    return inner


class ClosureFactories(nn.Module):
    def forward(self, x):
        keep = and_all(above(-1.0), lambda t, k=2.0: t < k)
        return x.masked_fill(~keep(x), 0.0)


class LateBinding(nn.Module):
    def forward(self, x):
        def shifted(t):
            return t + offset
        offset = 1.0
        a = shifted(x)
        offset = 2.0
        return a * shifted(x)


class NonlocalCounter(nn.Module):
    def forward(self, x):
        calls = 0
        def step(t):
            nonlocal calls
            calls += 1
            return t * calls
        return step(step(x)) + calls


class DecoratorInForward(nn.Module):
    def forward(self, x):
        def doubled(fn):
            @functools.wraps(fn)
            def wrapper(t):
                return fn(t) * 2
            return wrapper
        @doubled
        def plus_one(t):
            return t + 1
        return plus_one(x) + len(plus_one.__name__)


class Generators(nn.Module):
    def forward(self, x):
        parts = [x, x * 2, x * 3]
        total = sum(p for p in parts[1:])
        n = sum(1 for p in parts if p.dim() == 1)
        lazy = any(p.shape[0] > 2 for p in parts) or parts[99]
        return total + n + lazy


class ComprehensionScopes(nn.Module):
    def forward(self, x):
        k = 5
        squares = {k: k * k for k in range(3)}
        seen = {k % 2 for k in range(4)}
        pairs = [(i, j) for i in range(2) for j in range(i + 1)]
        return x * k + squares[2] + len(seen) + len(pairs)


class Output(NamedTuple):
    value: torch.Tensor
    count: int


@dataclasses.dataclass
class Result:
    hidden: torch.Tensor
    extra: torch.Tensor | None = None
    note: str = "ok"


class ReturnsRecords(nn.Module):
    def forward(self, x):
        return Result(hidden=x * 2), Output(x + 1, 3)


class Registry(dict):
    def get(self, key):
        return super().get(key) or 1.0


REGISTRY = Registry(weight=3.0)


class ScopedContext(nn.Module):
    def forward(self, x):
        token = _scale.set(REGISTRY.get("weight"))
        try:
            y = x * _scale.get()
        finally:
            _scale.reset(token)
        return y * _scale.get() + REGISTRY.get("missing")


class KeyValueStore:
    def __init__(self, n):
        self.layers = []
        self.n = n

    def update(self, i, t):
        while len(self.layers) <= i:
            self.layers.append(Layer())
        return self.layers[i].update(t)


class Layer:
    def __init__(self):
        self.ready = False

    def update(self, t):
        if not self.ready:
            self.seen = torch.tensor([], dtype=t.dtype, device=t.device)
            self.ready = True
        self.seen = torch.cat([self.seen, t])
        return self.seen


class BuildsAndReturnsState(nn.Module):
    def forward(self, x):
        store = KeyValueStore(2)
        a = store.update(0, x)
        b = store.update(1, x * 2)
        c = store.update(0, b)
        return c.sum() + a, store


class TensorLiterals(nn.Module):
    def forward(self, x):
        empty = torch.tensor([], dtype=x.dtype, device=x.device)
        w = torch.tensor([[1.0, 2.0, 3.0]], device=x.device)
        k = torch.as_tensor(2, device=x.device)
        return torch.cat([empty, x]) * w[0] + k + torch.tensor(True)


class NewTensorLiterals(nn.Module):
    def forward(self, x):
        scale = x.new_tensor([1.0, 2.0, 3.0])  # x's dtype and device
        size = x.new_tensor(x.shape)
        idx = x.new_tensor([2, 0], dtype=torch.long)
        return x * scale + size + x[idx].sum() + x.new_tensor(0.5)


class SignatureQueries(nn.Module):
    def chunk(self, a, b):
        return a * b
    def forward(self, x):
        n = len(inspect.signature(self.chunk).parameters)
        return self.chunk(*([x] * n))
"""

COMPILED_CASES = (
    "ClosureFactories",
    "LateBinding",
    "NonlocalCounter",
    "DecoratorInForward",
    "Generators",
    "ComprehensionScopes",
    "ReturnsRecords",
    "ScopedContext",
    "SignatureQueries",
    "BuildsAndReturnsState",
    "TensorLiterals",
    "NewTensorLiterals",
)


@pytest.mark.parametrize("name", COMPILED_CASES)
def test_python_of_real_models_compiles_without_fallback_code(
    name: str, built, triton_interpreter: None
) -> None:
    """Closures, decorators defined in forward, generators, comprehension scopes,
    dataclass and named-tuple results, context variables set and reset, queries
    of signatures: compiled, with the values eager Python computes."""
    generated = built("compiled_python")
    assert "_fallback_" not in inspect.getsource(generated), name
    _run_both(generated, name, lambda: {"x": torch.randn(3)})


def test_a_context_variable_left_set_is_an_effect(tmp_path: Path) -> None:
    source = """
    import contextvars

    flag = contextvars.ContextVar("flag", default=0)

    class LeavesItSet(nn.Module):
        def forward(self, x):
            flag.set(1)
            return x * 2
    """
    generated, text = _build(source, {"LeavesItSet": {"x": torch.randn(3)}}, tmp_path)
    assert "_fallback_" in text
    _run_both(generated, "LeavesItSet", lambda: {"x": torch.randn(3)})
    assert generated._source.flag.get() == 1


# ------------------------------------------ errors of the user's code: exit 2, no files


USER_ERRORS = {
    "normalized shape": (
        """
        class Norm(nn.Module):
            def __init__(self):
                super().__init__()
                self.ln = nn.LayerNorm(64)
            def forward(self, x):
                return self.ln(x) * 2
        """,
        "Norm",
        "x=f32[8,32]",
        "RuntimeError: Given normalized_shape=[64]",
        "return self.ln(x) * 2",
    ),
    "heads do not divide": (
        """
        class Heads(nn.Module):
            def __init__(self):
                super().__init__()
                self.heads = 5
            def forward(self, x):
                b, t, c = x.shape
                return x.view(b, t, self.heads, c // self.heads)
        """,
        "Heads",
        "x=f32[2,4,64]",
        "RuntimeError: shape '[2, 4, 5, 12]' is invalid",
        "return x.view(b, t, self.heads, c // self.heads)",
    ),
    "dtype of the weights": (
        """
        class Linear(nn.Module):
            def __init__(self):
                super().__init__()
                self.fc = nn.Linear(8, 8)
            def forward(self, x):
                return self.fc(x)
        """,
        "Linear",
        "x=bf16[2,8]",
        "float32 and bfloat16",
        "return self.fc(x)",
    ),
    "assertion": (
        """
        class Checks(nn.Module):
            def forward(self, x):
                assert x.shape[-1] == 3, "wants 3 channels"
                return x
        """,
        "Checks",
        "x=f32[2,4]",
        "AssertionError: wants 3 channels",
        'assert x.shape[-1] == 3, "wants 3 channels"',
    ),
    "bad call of a helper": (
        """
        def helper(a, b):
            return a + b

        class Calls(nn.Module):
            def forward(self, x):
                return helper(x)
        """,
        "Calls",
        "x=f32[2,4]",
        "TypeError: helper(): missing a required argument: 'b'",
        "return helper(x)",
    ),
}


USER_ERRORS.update(
    {
        f"{what} decided by Python values": (
            f"""
            class Fails(nn.Module):
                def forward(self, x):
                    n = x.shape[0]
                    table = {{"a": [1, 2]}}
                    {statement}
                    return x
            """,
            "Fails",
            "x=f32[2,4]",
            message,
            statement,
        )
        for what, statement, message in (
            ("raise", 'raise ValueError(f"batch of {n}")', "ValueError: batch of 2"),
            ("KeyError", 'k = table["b"]', "KeyError: 'b'"),
            ("IndexError", 'k = table["a"][n]', "IndexError: list index out of"),
            ("ZeroDivisionError", "k = n // (n - 2)", "ZeroDivisionError"),
            ("AttributeError", "y = x.no_such_method()", "AttributeError: 'Tensor'"),
            ("NameError", "y = x * undefined_name", "NameError: name 'undefined_name'"),
        )
    }
)


@pytest.mark.parametrize("case", sorted(USER_ERRORS))
def test_errors_of_the_users_code_fail_the_run(case: str, tmp_path: Path) -> None:
    source, name, example, message, line = USER_ERRORS[case]
    text = PRELUDE + textwrap.dedent(source)
    (tmp_path / "model.py").write_text(text)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "transpiler.cli",
            f"model.py::{name}",
            "--example",
            example,
            "--device",
            "cpu",
        ],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    (error,) = done.stderr.strip().splitlines()
    lineno = text.splitlines().index(textwrap.indent(line, " " * 8)) + 1
    assert error.startswith(f"transpile: error: model.py:{lineno}: "), error
    assert message in error and f"when called with cpu: {example}" in error, error
    assert not (tmp_path / "generated").exists()


def test_errors_on_a_path_chosen_by_data_stay_in_fallback_code(
    tmp_path: Path, triton_interpreter: None
) -> None:
    source = """
    class MaybeBad(nn.Module):
        def forward(self, x):
            if x.sum() > 1000:
                return x.view(3, -1)
            return x * 2
    """
    generated, text = _build(source, {"MaybeBad": {"x": torch.randn(2, 4)}}, tmp_path)
    assert "_fallback_0" in text
    _run_both(generated, "MaybeBad", lambda: {"x": torch.randn(2, 4)})
    with torch.no_grad(), pytest.raises(RuntimeError, match="invalid for input"):
        generated.MaybeBad().eval()(torch.full((2, 4), 1000.0))


def test_a_name_fallback_code_left_unassigned_raises_when_read(
    tmp_path: Path, triton_interpreter: None
) -> None:
    source = """
    class MaybeUnbound(nn.Module):
        def forward(self, x):
            try:
                if x.sum() > 0:
                    raise ValueError("positive")
                t = x * 2
            except ValueError:
                pass
            return t + 1
    """
    generated, _ = _build(source, {"MaybeUnbound": {"x": torch.randn(4)}}, tmp_path)
    _run_both(generated, "MaybeUnbound", lambda: {"x": -torch.rand(4)})
    for model in (generated._source.MaybeUnbound(), generated.MaybeUnbound()):
        with torch.no_grad(), pytest.raises(UnboundLocalError, match="'t'"):
            model.eval()(torch.rand(4))


LIBRARY = {
    "mylib/__init__.py": "",
    "mylib/ops.py": """
import functools

import torch


def logged(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        out = fn(*args, **kwargs)
        return out * 1.0
    return wrapper


@logged
def gate(x, y):
    return torch.sigmoid(x) * y
""",
}


def test_library_functions_are_interpreted_with_their_decorators(
    tmp_path: Path, triton_interpreter: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A function of a package outside the project (installed elsewhere on
    sys.path) is compiled like the project's own, through its decorator's wrapper,
    and spans name it by its import path, not by a path of this machine."""
    site = tmp_path / "site"
    for name, text in LIBRARY.items():
        (site / name).parent.mkdir(parents=True, exist_ok=True)
        (site / name).write_text(text)
    monkeypatch.syspath_prepend(str(site))
    source = """
    from mylib.ops import gate

    class UsesLibrary(nn.Module):
        def forward(self, x):
            return gate(x, x + 1) * 2
    """
    generated, text = _build(
        source, {"UsesLibrary": {"x": torch.randn(4)}}, tmp_path / "project"
    )
    assert "_fallback_" not in text, text
    assert "# mylib/ops.py:" in text and str(tmp_path) not in text, text
    _run_both(generated, "UsesLibrary", lambda: {"x": torch.randn(4)})


def test_an_unused_index_still_checks_its_range(
    tmp_path: Path, triton_interpreter: None
) -> None:
    source = """
    class UnusedIndex(nn.Module):
        def forward(self, x, idx):
            picked = x[idx]
            return x * 2
    """
    example = {"x": torch.randn(4, 3), "idx": torch.tensor([1, 2])}
    generated, _ = _build(source, {"UnusedIndex": example}, tmp_path)
    _run_both(generated, "UnusedIndex", lambda: dict(example))
    bad = {"x": torch.randn(4, 3), "idx": torch.tensor([1, 5])}
    for model in (generated._source.UnusedIndex(), generated.UnusedIndex()):
        with torch.no_grad(), pytest.raises(IndexError, match="out of bounds"):
            model.eval()(**bad)


TABLES: dict[str, Callable[[], tuple[str, dict[str, dict]]]] = {
    "alias_writes": lambda: (
        "".join(textwrap.dedent(src) for src, _ in ALIAS_WRITES.values()),
        {name: make() for name, (_, make) in ALIAS_WRITES.items()},
    ),
    "effects": lambda: (
        EFFECTS,
        {n: {"x": torch.randn(4)} for n in ("SeedThenSample", "GeneratorSeed")},
    ),
    "state": lambda: (
        "".join(textwrap.dedent(src) for src in STATE.values()),
        {name: {"x": torch.randn(3)} for name in STATE},
    ),
    "names": lambda: (NAMES, {n: {"x": torch.randn(3)} for n in NAMED}),
    "compiled_python": lambda: (
        COMPILED_PYTHON,
        {n: {"x": torch.randn(3)} for n in COMPILED_CASES},
    ),
    "aliases": lambda: (
        ALIASES_SEE_WRITES,
        {n: {"x": torch.randn(3, 4)} for n in ALIASED},
    ),
}


# Note [Graph breaks that spread]: a break where fallback code cannot run (inside a
# context that sets a context variable, as transformers' output capturing does)
# spreads to the statement around it; what is reported names the first break.
SPREADING = """
import contextvars

collector = contextvars.ContextVar("collector", default=None)


def captured(fn, x):
    token = collector.set([])
    try:
        return fn(x)
    finally:
        collector.reset(token)


class Counts(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls = self.calls + 1
        return x * 2


class Spreads(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Counts()

    def forward(self, x):
        y = x.relu()
        z = captured(self.inner, y)
        return z + 1


class Local(nn.Module):
    def __init__(self):
        super().__init__()
        self.inner = Counts()

    def forward(self, x):
        return self.inner(x.relu()) + 1
"""


def test_a_graph_break_that_spreads_names_the_first(tmp_path: Path) -> None:
    inputs = {"x": torch.randn(3)}
    generated, text = _build(SPREADING, {"Spreads": inputs, "Local": inputs}, tmp_path)
    breaks = re.search(r"Graph breaks \(code run eagerly\):\n((?:    .*\n)+)", text)[1]
    lines = [line.strip() for line in breaks.splitlines()]
    write = (
        "sets .calls of a module to 1, where it read 0: the next call would find "
        "another value"
    )
    # where it can run as fallback code (Local), the write itself breaks
    local = [line for line in lines if re.match(rf"\S+:\d+: {write} \[", line)]
    assert len(local) == 1, lines
    # inside the context, the call around it breaks, naming the write
    spread = [line for line in lines if ", because " in line]
    assert len(spread) == 1, lines
    cause = re.search(r", because \S+?:(\d+): (.*) \[_fallback_\d+\]$", spread[0])
    assert cause is not None and cause[2] == write, spread[0]
    source = (PRELUDE + textwrap.dedent(SPREADING)).splitlines()
    assert source[int(cause[1]) - 1].strip() == "self.calls = self.calls + 1"
    for name in ("Spreads", "Local"):
        _run_both(generated, name, lambda: {"x": torch.randn(3)})
