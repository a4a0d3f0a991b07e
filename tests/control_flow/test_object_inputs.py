"""Objects passed in, declared by example: `state=FILE.py::make_state(P)`.

See Note [Objects passed in]. Each case compiles a module whose forward reads (and
may set attributes of) an object built by an example function in the same file,
then calls the compiled variant and eager on deep copies of the same object: the
outputs, and every tensor and Python value in the object after the call, must be
eager's, and the call must have run the compiled variant. Then the cases where the
guards must send a call to the source: another structure, another value, aliasing
broken; and the examples that cannot be inputs, which fail the transpile with one
message.
"""

from __future__ import annotations

import copy
import functools
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch

import runtime_shim.warn
from tests.compile_helpers import assert_same, import_generated, unique_name
from tests.control_flow.support import (
    fallback_messages,
    recorded_warnings,
    spy_on,
)
from tests.devices import on_gpu
from transpiler.api import build
from transpiler.errors import UserError
from transpiler.options import Options, Target, Variant, parse_variant

PRELUDE = """
import torch
from torch import nn


class State:
    def __init__(self, total, steps):
        self.total = total
        self.steps = steps


class Cache:
    def __init__(self, keys, values):
        self.keys = keys
        self.values = values

    def update(self, k, v):
        self.keys = torch.cat([self.keys, k], dim=1)
        self.values = torch.cat([self.values, v], dim=1)
        return self.keys, self.values

    def length(self):
        return self.keys.shape[1]
"""

# name, module source (class M), example function source, the variant, a call
CASES = {
    "attribute writes of tensors and ints": (
        """
        class M(nn.Module):
            def forward(self, x, state):
                state.total = state.total + x.sum(0)
                state.steps = state.steps + 1
                return torch.relu(x) * 2
        """,
        """
        def example(module):
            return State(torch.zeros(8), 3)
        """,
        "x=f32[4,8], state=FILE::example()",
        lambda: {"x": torch.randn(4, 8), "state": _state(torch.randn(8), 3)},
    ),
    "a tuple of tensors, read": (
        """
        class M(nn.Module):
            def forward(self, x, pair):
                w, b = pair
                return x @ w + b
        """,
        """
        def example(module):
            return (torch.zeros(8, 6), torch.zeros(6))
        """,
        "x=f32[4,8], pair=FILE::example()",
        lambda: {"x": torch.randn(4, 8), "pair": (torch.randn(8, 6), torch.randn(6))},
    ),
    "a dict of a tensor and a float": (
        """
        class M(nn.Module):
            def forward(self, x, params):
                return torch.tanh(x * params["scale"] + params["shift"])
        """,
        """
        def example(module):
            return {"scale": 0.5, "shift": torch.zeros(8)}
        """,
        "x=f32[4,8], params=FILE::example()",
        lambda: {
            "x": torch.randn(4, 8),
            "params": {"scale": 0.5, "shift": torch.randn(8)},
        },
    ),
    "a cache of any length, appended to and returned": (
        """
        class M(nn.Module):
            def forward(self, q, k, cache):
                keys, values = cache.update(k, k * 2)
                scores = torch.softmax(q @ keys.transpose(1, 2) / cache.length(), -1)
                return scores @ values, cache
        """,
        """
        def example(module, P):
            return Cache(torch.zeros(2, P, 8), torch.zeros(2, P, 8))
        """,
        "q=f32[2,1,8], k=f32[2,1,8], cache=FILE::example(P)",
        None,  # called at several lengths below
    ),
    "a window of the last tokens, a slice": (
        """
        class M(nn.Module):
            def forward(self, k, cache):
                full = torch.cat([cache.keys, k], dim=1)
                cache.keys = full[:, -4:]
                return full.sum(1) * cache.values
        """,
        """
        def example(module):
            return Cache(torch.zeros(2, 5, 8)[:, -4:], torch.zeros(8))
        """,
        "k=f32[2,1,8], cache=FILE::example()",
        lambda: {
            "k": torch.randn(2, 1, 8),
            "cache": _module.Cache(torch.randn(2, 5, 8)[:, -4:], torch.randn(8)),
        },
    ),
    "the same tensor twice": (
        """
        class M(nn.Module):
            def forward(self, x, cache):
                return x + cache.keys * cache.values
        """,
        """
        def example(module):
            t = torch.zeros(3, 8)
            return Cache(t, t)
        """,
        "x=f32[3,8], cache=FILE::example()",
        lambda: _shared_cache(torch.randn(3, 8)),
    ),
}


def _state(total: torch.Tensor, steps: int):
    return _module.State(total, steps)


def _shared_cache(t: torch.Tensor) -> dict:
    return {"x": torch.randn(3, 8), "cache": _module.Cache(t, t)}


_module: Any = None  # the source module of the case being run (its classes)


@functools.cache
def _compiled(name: str, root: Path) -> tuple[Any, Any]:
    """(the source module, the generated module) of case `name`, for cpu and cuda."""
    global _module
    body, example, variant, _ = CASES[name]
    stem = unique_name("objects")
    text = PRELUDE + textwrap.dedent(body) + textwrap.dedent(example)
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{stem}.py").write_text(text)
    inputs = parse_variant(variant.replace("FILE", f"{stem}.py"))
    variants = tuple(Variant(inputs, device) for device in ("cpu", "cuda"))
    files = build(Options(targets=(Target(f"{stem}.py::M", variants),), root=root))
    gen = import_generated(files, root, stem)
    import importlib

    source = importlib.import_module(stem)
    return source, gen


@pytest.fixture
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.getbasetemp() / "object_inputs"


def _run(name: str, root: Path, inputs: dict, device: str, variant: str, mp):
    """Call the compiled variant and eager on deep copies of `inputs`; compare
    outputs and the inputs after the call. Returns the compiled call's inputs."""
    global _module
    source, gen = _compiled(name, root)
    _module = source
    torch.manual_seed(0)
    eager = source.M().eval()
    compiled = gen.M().eval()
    mine, theirs = copy.deepcopy(inputs), copy.deepcopy(inputs)
    with torch.no_grad():
        if device == "cpu":
            calls = spy_on(mp, gen, f"_{variant}")
            with recorded_warnings() as record:
                got = compiled(**mine)
            assert fallback_messages(record) == [] and len(calls) == 1
        else:  # the cuda variant's Triton kernels, in the interpreter without a GPU
            got = on_gpu(getattr(gen, f"_{variant}"))(compiled, **mine)
        want = eager(**theirs)
    _assert_same_values(got, want, mine, theirs)
    return mine, got


def _assert_same_values(got, want, mine: dict, theirs: dict) -> None:
    if isinstance(want, tuple) and hasattr(want[-1], "keys"):  # (out, cache)
        assert got[-1] is mine["cache"]  # the object passed in, returned
        got, want = got[0], want[0]
    assert_same(got, want)
    assert_same(_state_of(mine), _state_of(theirs))


def _state_of(value: Any) -> Any:
    """Every tensor and Python value in an input, as nested plain containers."""
    if isinstance(value, dict):
        return {k: _state_of(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_state_of(v) for v in value]
    if hasattr(value, "__dict__") and not isinstance(value, torch.Tensor):
        return {k: _state_of(v) for k, v in vars(value).items()}
    return value


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("name", [n for n, c in CASES.items() if c[3] is not None])
def test_object_input_matches_eager(
    name: str, device: str, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    global _module
    _module, _ = _compiled(name, root)
    _run(name, root, CASES[name][3](), device, f"{device}_0", monkeypatch)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("length", [1, 2, 7, 30])
def test_one_variant_serves_every_cache_length(
    length: int, device: str, root: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    global _module
    name = "a cache of any length, appended to and returned"
    _module, gen = _compiled(name, root)
    # `size 1 of P` is compiled apart and tried first (variant 0), then any P
    variant = f"{device}_{0 if length == 1 else 1}"
    inputs = {
        "q": torch.randn(2, 1, 8),
        "k": torch.randn(2, 1, 8),
        "cache": _module.Cache(torch.randn(2, length, 8), torch.randn(2, length, 8)),
    }
    mine, _ = _run(name, root, inputs, device, variant, monkeypatch)
    assert mine["cache"].keys.shape == (2, length + 1, 8)
    text = Path(gen.__file__).read_text()  # the length, read from the object
    assert "    keys = cache.keys\n" in text and "P = keys.shape[1]  # dynamic" in text


def test_guards_send_other_objects_to_the_source(root: Path) -> None:
    global _module
    name = "attribute writes of tensors and ints"
    _module, gen = _compiled(name, root)
    compiled = gen.M().eval()
    others = {
        "another int": _module.State(torch.randn(8), 4),
        "another dtype": _module.State(torch.randn(8, dtype=torch.float64), 3),
        "another class": _module.Cache(torch.randn(8), 3),
        "a float for an int": _module.State(torch.randn(8), 3.0),
        "an attribute more": _with(_module.State(torch.randn(8), 3), scale=2.0),
    }
    for what, state in others.items():
        runtime_shim.warn._SEEN.clear()  # a warning per case
        with torch.no_grad(), recorded_warnings() as record:
            try:
                compiled(torch.randn(4, 8), state)
            except AttributeError:  # the source's, reading `total` of a Cache
                assert what == "another class"
        assert fallback_messages(record), what


def _with(obj, **attributes):
    vars(obj).update(attributes)
    return obj


def test_aliasing_is_guarded(root: Path) -> None:
    global _module
    name = "the same tensor twice"
    _module, gen = _compiled(name, root)
    compiled = gen.M().eval()
    apart = _module.Cache(torch.randn(3, 8), torch.randn(3, 8))
    with torch.no_grad(), recorded_warnings() as record:
        got = compiled(torch.zeros(3, 8), apart)
    assert any("cache.values is cache.keys" in m for m in fallback_messages(record))
    assert_same(got, apart.keys * apart.values)


BAD_EXAMPLES = {
    "a module inside": (
        "def example(module):\n    return State(nn.Linear(2, 2), 1)\n",
        "holds a Linear at state.total",
    ),
    "the function raises": (
        "def example(module):\n    raise ValueError('no cache here')\n",
        "raised ValueError: no cache here",
    ),
    "a class defined in a function": (
        "def example(module):\n    class Local:\n        pass\n"
        "    s = Local()\n    s.total = torch.zeros(8)\n    return s\n",
        "which generated code cannot import",
    ),
}


@pytest.mark.parametrize("what", list(BAD_EXAMPLES))
def test_an_example_that_cannot_be_an_input_fails_with_one_message(
    what: str, tmp_path: Path
) -> None:
    example, message = BAD_EXAMPLES[what]
    stem = unique_name("bad")
    body = "class M(nn.Module):\n    def forward(self, x, state):\n        return x\n"
    (tmp_path / f"{stem}.py").write_text(PRELUDE + body + example)
    inputs = parse_variant(f"x=f32[2], state={stem}.py::example()")
    target = Target(f"{stem}.py::M", (Variant(inputs, "cpu"),))
    with pytest.raises(UserError, match=message):
        build(Options(targets=(target,), root=tmp_path))


def test_writes_with_fallback_code_run_the_source(tmp_path: Path) -> None:
    """Fallback code would read the object before generated code sets what the
    compiled code before it computed: the variant runs the source, and says why."""
    stem = unique_name("breaks")
    body = textwrap.dedent("""
        class M(nn.Module):
            def forward(self, x, state):
                state.total = state.total + x.sum(0)
                print("side effect")
                return x * state.total
        """)
    (tmp_path / f"{stem}.py").write_text(PRELUDE + body)
    (tmp_path / f"ex_{stem}.py").write_text(
        f"import torch\nfrom {stem} import State\n"
        "def example(module):\n    return State(torch.zeros(8), 0)\n"
    )
    inputs = parse_variant(f"x=f32[4,8], state=ex_{stem}.py::example()")
    target = Target(f"{stem}.py::M", (Variant(inputs, "cpu"),))
    files = build(Options(targets=(target,), root=tmp_path))
    assert (
        "sets attributes of an object passed in and has fallback code"
        in files[f"{stem}.py"]
    )
