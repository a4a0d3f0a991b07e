"""Text and names that reach generated code from the user: one test per class of bug.

Each test transpiles a small source (CPU variants: real C++), imports the generated
module and runs it. `PWNED` is planted where only text belongs (comments, strings,
`--init` values): were it to become code, it would set `builtins.PWNED`.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import io
import re
import shlex
import tokenize
import warnings
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
import torch

from runtime_shim.cuda_graphs import CudaGraphRunner, _tensors
from runtime_shim.modules import self_path
from tests.compile_helpers import (
    Compiled,
    compile_source,
    import_generated,
    unique_name,
)
from tests.devices import REAL_GPU, on_gpu
from tests.helpers import build_pair, check_call
from transpiler.api import build
from transpiler.cli import build_options, build_parser, main
from transpiler.options import Options, Target, TensorSpec, Variant
from transpiler.text import comment

PAYLOAD = '__import__("builtins").__setattr__("PWNED", 1)'


@pytest.fixture(autouse=True)
def _not_pwned():
    yield
    pwned = builtins.__dict__.pop("PWNED", None) is not None  # one test fails, once
    assert not pwned, "text from the source ran as code"


@dataclass(frozen=True)
class Built:
    files: dict[str, str]  # by name, as `build` returns them
    stem: str  # the source's (and the generated module's) name

    @property
    def py(self) -> str:
        return self.files[f"{self.stem}.py"]

    def load(self, root: Path) -> ModuleType:
        return import_generated(self.files, root, self.stem)


def transpile(root: Path, source: str, target: str, *argv: str) -> Built:
    """Build `target` of `source` as the one-off command line `argv` would (CPU
    only), twice: the files must be the same."""
    root.mkdir(parents=True, exist_ok=True)
    stem = unique_name("src")
    (root / f"{stem}.py").write_text(source, encoding="utf-8")
    args = [f"{stem}.py::{target}", "--device", "cpu", *argv, "--root", str(root)]
    options = build_options(build_parser().parse_args(args))
    files = build(options)
    assert build(options) == files, "not byte-identical when built twice"
    return Built(files, stem)


def only_in_text(python: str, marker: str) -> None:
    """`marker` appears in `python` only inside strings and comments, and our
    comments spell what is not printable (`\\u2028`, not the character)."""
    tokens = tokenize.generate_tokens(io.StringIO(python).readline)
    for tok in tokens:
        if marker in tok.string:
            assert tok.type in (tokenize.STRING, tokenize.COMMENT), tok
        if tok.type == tokenize.COMMENT and tok.line.lstrip().startswith("#"):
            assert tok.string.isprintable(), tok


def spans_match(python: str, source: str, stem: str) -> None:
    """Each `# <stem>.py:N: text` comment quotes line N of the source."""
    lines = source.split("\n")
    quoted = re.findall(rf"# {stem}\.py:(\d+): (.*)", python)
    assert quoted
    for line, text in quoted:
        assert text == comment(lines[int(line) - 1].strip()), (line, text)


def run_cli(root: Path, *argv: str) -> int:
    return main([*argv, "--root", str(root)])


# ------------------------------------------------------------------------------------


INJECTION = f"""\
import torch
from torch import nn


def f(x):
    y = x + 1  # note\u2028{PAYLOAD}
    print(y.shape)  # note\u2028{PAYLOAD}
    return y * 2


class Net(nn.Module):
    def __init__(self, path=""):
        super().__init__()
        self.path = path
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x).relu()
"""


def test_injection_text_lands_escaped_in_every_context(tmp_path: Path, capsys) -> None:
    """U+2028 in a comment (Python keeps it in the comment, `str.splitlines` splits
    there), `\"\"\"` and `C:\\Users` in an --init value: text, never code, and
    every file still parses and runs."""
    built = transpile(tmp_path, INJECTION, "f", "--example", "x=f32[2,4]")
    only_in_text(built.py, "PWNED")
    spans_match(built.py, INJECTION, built.stem)
    assert "PWNED" in built.py  # in the comments, as text
    module = built.load(tmp_path)
    x = torch.randn(2, 4)
    torch.testing.assert_close(module.f(x), (x + 1) * 2)
    assert capsys.readouterr().out == "torch.Size([2, 4])\n"
    for value in [f'a"""; {PAYLOAD}; """b', "C:\\Users\\me", "a\u2028b\\"]:
        init = f"path={value}"
        built = transpile(
            tmp_path, INJECTION, "Net", "--example", "x=f32[2,4]", "--init", init
        )
        only_in_text(built.py, "PWNED")
        module = built.load(tmp_path)
        assert shlex.quote(init) in module.__doc__
        net = module.Net(path=value).eval()
        with torch.no_grad():
            torch.testing.assert_close(net(x), module._source.Net.forward(net, x))


def test_backslash_continuation_in_cpp_comment(tmp_path: Path) -> None:
    """A source line ending in `\\` (and one with `??/`, `*/`, non-ASCII) copied
    into a `//` comment: the comment ends at its line, every CPU variant builds."""
    source = (
        "def f(x):\n"
        "    y = x + \\\n"
        "        1  # ??/ */ é \\\n"
        "    return y * 2  # ??/\n"
    )
    built = transpile(tmp_path, source, "f", "--example", "x=f32[4]")
    cpp = built.files[f"{built.stem}.cpp"]
    assert cpp.isascii()
    comments = [line for line in cpp.split("\n") if line.startswith("// src_")]
    assert comments and not any(line.rstrip().endswith("\\") for line in comments)
    x = torch.randn(4)
    torch.testing.assert_close(built.load(tmp_path).f(x), (x + 1) * 2)


def test_triple_quoted_string_in_fallback_keeps_its_text(tmp_path: Path, capsys):
    """A fallback statement means what it meant: its multi-line string (and a
    backslash-continued line inside one) is not re-indented."""
    source = (
        "def f(x):\n"
        "    y = x + 1\n"
        '    print("""one\n'
        "  two\n"
        "three \\\n"
        'four""", y.shape, sep="|")\n'
        "    return y\n"
    )
    module = transpile(tmp_path, source, "f", "--example", "x=f32[3]").load(tmp_path)
    module.f(torch.zeros(3))
    want = "one\n  two\nthree four|torch.Size([3])\n"
    assert capsys.readouterr().out == want
    module._source.f(torch.zeros(3))
    assert capsys.readouterr().out == want


SIGNATURES = """\
from typing import Optional

import torch
from torch import Tensor, nn

DEFAULT_SCALE = 2.0
ACT = nn.ReLU()


def f(x: Tensor, mask: Optional[Tensor] = None, *rest: int,
      scale: float = DEFAULT_SCALE, act: nn.Module = ACT, **extra: Tensor
) -> Tensor:
    y = x * scale
    if mask is not None:
        y = y + mask
    return y


def g(x: Tensor, /, y: Tensor) -> Tensor:
    return x + y
"""


def test_signature_needs_no_names_from_the_source(tmp_path: Path) -> None:
    """Annotations are not copied (`Tensor`, `Optional` are not importable there);
    a default that is not a plain literal is the source's own object; `/`, `*`,
    `*args` and `**kwargs` keep their meaning: an argument the variant was not
    compiled for (into `*rest`, `**extra`) runs the source."""
    built = transpile(
        tmp_path, SIGNATURES, "f", "--variant", "x=f32[2], mask=f32[2], act=None"
    )
    assert "Tensor]" not in built.py and "Optional" not in built.py
    exported = 'def f(x, mask=None, *rest, scale=2.0, act=_DEFAULTS_f["act"], **extra)'
    assert exported in built.py
    module = built.load(tmp_path)
    assert module._DEFAULTS_f["act"] is module._source.ACT
    x, m = torch.randn(2), torch.randn(2)
    torch.testing.assert_close(module.f(x, m, act=None), x * 2 + m)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # `act` is not None: eager
        torch.testing.assert_close(module.f(x, mask=m, scale=3.0), x * 3 + m)
    with pytest.raises(TypeError):
        module.f(x, m, 1, 2, act=None, mask=m)  # as the source: mask given twice
    for extra in [(1, 2), ()]:  # the source ignores them; the variant never ran
        kwargs = {} if extra else {"other": m}
        with pytest.warns(RuntimeWarning, match="not rest|not extra"):
            got = module.f(x, m, *extra, act=None, **kwargs)
        torch.testing.assert_close(got, x * 2 + m)
    assert "        if rest:\n" in built.py and "        if extra:\n" in built.py
    built = transpile(tmp_path, SIGNATURES, "g", "--variant", "x=f32[2], y=f32[2]")
    assert "def g(x, /, y):" in built.py
    module = built.load(tmp_path)
    y = torch.randn(2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # the variant runs
        torch.testing.assert_close(module.g(x, y), x + y)
        torch.testing.assert_close(module.g(x, y=y), x + y)
    with pytest.raises(TypeError):
        module.g(x=x, y=y)  # as the source: x is positional-only
    with pytest.warns(RuntimeWarning):  # another shape: the source, positionally
        torch.testing.assert_close(module.g(m[:1], y), m[:1] + y)


COLLISIONS = """\
import torch


def f(x, sum, input, add, empty=None, device=2, runtime_shim=1.0, _source=None, self=0):
    y = (x + sum) * input - add
    print("fallback")
    return y.relu() * device * runtime_shim


def g(x, *, any_=1, isinstance_=2, empty_=3, **kwargs):
    return x * any_ * isinstance_ * empty_
"""


def test_parameter_names_colliding_with_generated_names(tmp_path: Path, capsys):
    """Parameters named like the generated module's own names (`runtime_shim`,
    `_source`, `empty`, `device`, `self`), builtins (`sum`, `input`) or kernel
    buffers (`add`): the variant functions take them under other names, and the
    exported function passes them on where its body would have hidden one."""
    inputs = "x=f32[2,4], sum=f32[2,4], input=f32[2,4], add=f32[2,4]"
    built = transpile(tmp_path, COLLISIONS, "f", "--variant", inputs)
    assert "def _dispatch_f(" in built.py  # `runtime_shim`, `_source` are parameters
    module = built.load(tmp_path)
    args = [torch.randn(2, 4) for _ in range(4)]
    want = module._source.f(*args)
    torch.testing.assert_close(module.f(*args), want)
    torch.testing.assert_close(module._cpu_0(*args), want)
    assert capsys.readouterr().out == "fallback\n" * 3
    with pytest.warns(RuntimeWarning, match="device"):  # another device: eager
        got = module.f(*args, device=3)
    torch.testing.assert_close(got, module._source.f(*args, device=3))
    module = transpile(tmp_path, COLLISIONS, "g", "--example", "x=f32[3]").load(
        tmp_path
    )
    x = torch.randn(3)
    torch.testing.assert_close(module.g(x), x * 6)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        torch.testing.assert_close(module.g(x, any_=2, empty_=1, other=5), x * 4)


TENSORS_NAMED_LIKE_LOCALS = """\
def f(x, empty, runtime_shim, _cpp, device):
    return x + empty * runtime_shim - _cpp + device
"""


def test_tensor_parameters_named_like_generated_locals(tmp_path: Path) -> None:
    """A tensor input is a value of the graph, named after its parameter: the
    graph's namespace must keep it apart from the generated code's own names."""
    variant = "x=f32[3], empty=f32[3], runtime_shim=f32[3], _cpp=f32[3], device=f32[3]"
    built = transpile(tmp_path, TENSORS_NAMED_LIKE_LOCALS, "f", "--variant", variant)
    module = built.load(tmp_path)
    args = [torch.randn(3) for _ in range(5)]
    torch.testing.assert_close(module._cpu_0(*args), module._source.f(*args))


BUILTINS_THE_GUARDS_CALL = """\
def f(x, type=1.0, isinstance=2, any=3, torch=None, top=float("inf"), nan=float("nan")):
    return (x * type * isinstance * any).clamp(max=top)
"""


def test_parameters_named_like_builtins_the_guards_call(tmp_path: Path) -> None:
    """The guards call `type`, `isinstance`, `torch.is_grad_enabled`; scalars are
    compared with literals that mean their value (`float("inf")`; NaN, `x != x`)."""
    built = transpile(tmp_path, BUILTINS_THE_GUARDS_CALL, "f", "--example", "x=f32[3]")
    assert 'type(top_) is float and top_ == float("inf")' not in built.py  # own name
    assert 'type(top) is float and top == float("inf")' in built.py
    assert "type(nan) is float and nan != nan" in built.py
    module = built.load(tmp_path)
    x = torch.randn(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # no fallback to eager
        torch.testing.assert_close(module.f(x), x * 6)
    with pytest.warns(RuntimeWarning, match=r"type\(top\) is float"):
        torch.testing.assert_close(module.f(x, top=0.0), (x * 6).clamp(max=0.0))
    with pytest.warns(RuntimeWarning, match=r"type\(type\) is float and type =="):
        torch.testing.assert_close(module.f(x, 2.0), x * 12)


def test_unimportable_source_file_name(tmp_path: Path, capsys) -> None:
    """`my-model.py` cannot be imported by the generated module: a user error."""
    (tmp_path / "my-model.py").write_text("def f(x):\n    return x + 1\n")
    code = run_cli(tmp_path, "my-model.py::f", "--example", "x=f32[2]")
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1
    assert err.startswith("transpile: error: my-model.py: 'my-model' is not a Python")
    assert "my_model" in err
    assert not (tmp_path / "generated").exists()


@pytest.mark.parametrize(
    "source, kind",
    [
        ("def f(x):\n    yield x + 1\n", "a generator function"),
        ("async def f(x):\n    return x + 1\n", "an async function"),
        ("async def f(x):\n    yield x\n", "an async generator function"),
    ],
)
def test_generator_target(tmp_path: Path, capsys, source: str, kind: str) -> None:
    """A generator (or async) function returns without running its body: a user
    error naming where it is defined, not a module that returns None."""
    stem = unique_name("src")  # a module name of its own: each test imports it
    (tmp_path / f"{stem}.py").write_text(source)
    code = run_cli(tmp_path, f"{stem}.py::f", "--example", "x=f32[2]")
    err = capsys.readouterr().err
    assert code == 2
    assert err.startswith(f"transpile: error: {stem}.py:1: f is {kind}")
    assert err.count("\n") == 1
    assert not (tmp_path / "generated").exists()


# ------------------------------------------------------------------------------------
# Names and keys from the user, on both backends (C++; Triton, interpreted)


@contextlib.contextmanager
def no_fallback() -> Iterator[None]:
    """A context in which running the source (a `RuntimeWarning`) fails the test."""
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        yield


def rand(*names: str, shape=(2, 4)) -> dict[str, torch.Tensor]:
    gen = torch.Generator().manual_seed(len(names))
    return {n: torch.randn(shape, generator=gen) for n in names}


def check_by_position(c: Compiled, inputs: dict[str, torch.Tensor]) -> tuple:
    """`Compiled.check`, with the inputs passed by position: variants take the
    parameters under the wrapper's names for them (`sum_` for `sum`), and a
    positional-only one cannot be passed by name at all. Returns the exported
    class's instance and eager's (with the same weights), or the functions."""
    eager, mine = build_pair(c.eager, getattr(c.module, c.name), {})
    is_module = isinstance(mine, torch.nn.Module)
    for variant in (c.cpu, c.cuda):
        first = (mine,) if is_module else ()

        def run(*, _v=variant, _first=first, **kw):
            return _v(*_first, *kw.values())

        check_call(
            run,
            lambda **kw: eager(*kw.values()),
            inputs,
            where=f"{c.name} {variant.__name__}",
            modules=(mine, eager) if is_module else None,
        )
    return mine, eager


NAMED_LIKE_THE_MODULE = """\
from torch import nn


def f(x, empty, device, type, isinstance, input, torch, runtime_shim, _cpp, _triton,
      _source, self):
    y = (x * empty + device - type) * isinstance
    return (y + input * torch).relu() - runtime_shim * _cpp + _triton * _source * self


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, empty, device, torch, input, _cpp):
        return self.lin(empty * device).relu() + torch * input - _cpp
"""
F_NAMES = (
    "x empty device type isinstance input torch runtime_shim _cpp _triton _source self"
).split()
NET_NAMES = ("empty", "device", "torch", "input", "_cpp")


def test_tensor_parameters_named_like_the_generated_modules_names(tmp_path: Path):
    """Tensor parameters named like the wrapper's locals and globals and the
    builtins its guards call: both variants, and the exported function (which
    runs a variant) give what the source gives."""
    inputs = {"f": rand(*F_NAMES), "Net": rand(*NET_NAMES)}
    compiled = compile_source(NAMED_LIKE_THE_MODULE, inputs, tmp_path)
    f = compiled["f"]
    check_by_position(f, inputs["f"])
    mine, eager = check_by_position(compiled["Net"], inputs["Net"])
    with no_fallback(), torch.no_grad():
        exported = f.module.f  # `Compiled.__call__` takes a `self` of its own
        torch.testing.assert_close(exported(**inputs["f"]), f.eager(**inputs["f"]))
        torch.testing.assert_close(mine(**inputs["Net"]), eager(**inputs["Net"]))


POSITIONAL_ONLY = """\
from torch import nn


def h(x, /):
    return x.relu() * 2


class Pos(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)

    def forward(self, x, /, y):
        return self.lin(x) + y
"""


def test_positional_only_parameters(tmp_path: Path) -> None:
    """`def h(x, /)` and `forward(self, x, /, y)`: traced, and called (variants,
    guards, the source) as the source takes them, positionally."""
    inputs = {"h": rand("x"), "Pos": rand("x", "y")}
    compiled = compile_source(POSITIONAL_ONLY, inputs, tmp_path)
    h = compiled["h"]
    check_by_position(h, inputs["h"])
    mine, eager = check_by_position(compiled["Pos"], inputs["Pos"])
    x, y = inputs["Pos"].values()
    with torch.no_grad():
        with no_fallback():
            torch.testing.assert_close(h(x), h.eager(x))
            torch.testing.assert_close(mine(x, y), eager(x, y))
            torch.testing.assert_close(mine(x, y=y), eager(x, y=y))
        with pytest.warns(RuntimeWarning, match="x.shape == "):  # the source runs
            torch.testing.assert_close(h(x[:1]), h.eager(x[:1]))
        with pytest.warns(RuntimeWarning, match="x.shape == "):
            torch.testing.assert_close(mine(x[:1], y), eager(x[:1], y))
        with pytest.raises(TypeError):
            h(x=x)  # as the source


VARIADIC = """\
def va(x, *args, **kwargs):
    return x * 2 + len(args) + len(kwargs)
"""


def test_extra_arguments_run_the_source(tmp_path: Path) -> None:
    """A variant is compiled for no `*args` and no `**kwargs`: a call with some
    fails its guard (`not args`, `not kwargs`) and runs the source."""
    inputs = rand("x")
    c = compile_source(VARIADIC, {"va": inputs}, tmp_path)["va"]
    c.check(inputs)
    x = inputs["x"]
    with no_fallback():
        torch.testing.assert_close(c(x), x * 2)
    with pytest.warns(RuntimeWarning, match="variant cpu_0 needs not args"):
        torch.testing.assert_close(c(x, 1, 2), x * 2 + 2)
    with pytest.warns(RuntimeWarning, match="variant cpu_0 needs not kwargs"):
        torch.testing.assert_close(c(x, k=1), x * 2 + 1)


KEYS = """\
from torch import nn

KEY = 'a"]; setattr(__import__("builtins"), "PWNED", 1); x = ["b'


class Keyed(nn.Module):
    def __init__(self):
        super().__init__()
        self.d = nn.ModuleDict(
            {KEY: nn.Linear(4, 4), "\u00b2": nn.Linear(4, 4), "01": nn.Linear(4, 4)}
        )

    def forward(self, x):
        return self.d[KEY](x).relu() + self.d["\u00b2"](x) * self.d["01"](x)
"""


def test_module_keys_with_quotes_and_digits_that_are_not_ascii(tmp_path: Path):
    """`nn.ModuleDict` keys holding `"` (read by the guards and the variants as
    string literals, never as code) and `²` (`isdigit`, but no index Python can
    write: `self.d[²]`) or `01`."""
    assert self_path("d.\u00b2.weight") == "getattr(self.d, '\u00b2').weight"
    assert self_path("d.01") == "getattr(self.d, '01')"
    assert self_path("h.10.if") == "getattr(self.h[10], 'if')"
    inputs = rand("x")
    c = compile_source(KEYS, {"Keyed": inputs}, tmp_path)["Keyed"]
    python = Path(c.module.__file__).read_text(encoding="utf-8")
    tokens = tokenize.generate_tokens(io.StringIO(python).readline)
    names = {tok.string for tok in tokens if tok.type == tokenize.NAME}
    assert not names & {"setattr", "__import__", "PWNED"}  # the key is no code
    strings = {
        node.value
        for node in ast.walk(ast.parse(python))
        if isinstance(node, ast.Constant)
    }
    assert c.module._source.KEY in strings  # `d._modules.get(KEY)`, as a string
    c.check(inputs)
    torch.manual_seed(0)
    eager = c.eager().eval()
    mine = c.module.Keyed().eval()
    mine.load_state_dict(eager.state_dict())
    with no_fallback(), torch.no_grad():
        torch.testing.assert_close(mine(**inputs), eager(**inputs))


BRANCHES = f"""\
def branchy(input, y):
    if (input * y).sum() > 0 * len('\"\"\"; {PAYLOAD}; \"\"\"'):  # \"\"\" {PAYLOAD}
        return input * 2
    return input - y
"""


class Replayer:
    """Stands in for a CUDA graph's capture on the CPU: the "graph" reruns the
    segment and writes into its first outputs (as tests/codegen/test_cuda_graphs)."""

    def __call__(self, runner: CudaGraphRunner, run):
        outputs = run()

        def replay() -> None:
            for static, fresh in zip(_tensors(outputs), _tensors(run())):
                static.copy_(fresh)

        return outputs, replay


def test_cuda_graph_segments_quote_the_branch_as_text(tmp_path: Path, monkeypatch):
    """`--cuda-graphs` on a variant that branches on tensor data: the segments'
    docstrings quote the branch's line escaped, and the segments read the input
    `input` under its name in the graph (`input_`)."""
    stem = unique_name("src")
    (tmp_path / f"{stem}.py").write_text(BRANCHES, encoding="utf-8")
    spec = TensorSpec(torch.float32, (2, 4))
    variant = Variant((("input", spec), ("y", spec)), "cuda", cuda_graphs=True)
    targets = (Target(f"{stem}.py::branchy", (variant,)),)
    files = build(Options(targets=targets, root=tmp_path))
    py = files[f"{stem}.py"]
    only_in_text(py, "PWNED")
    assert "def _cuda_0_seg0(input_, y):" in py
    assert "def _cuda_0(graphs, input_, y):" in py
    module = import_generated(files, tmp_path, stem)
    device = "cuda" if REAL_GPU else "cpu"  # real graphs on a GPU (tests/devices.py)
    if not REAL_GPU:
        monkeypatch.setattr(
            CudaGraphRunner, "_record", lambda r, run: Replayer()(r, run)
        )
        monkeypatch.setattr(module, "_guards_cuda_0", lambda *args: None)
    for sign in (1, -1, 1):
        inputs = {k: v.to(device) for k, v in rand("input", "y").items()}
        inputs["input"] = inputs["input"].abs() * sign
        inputs["y"] = inputs["y"].abs()
        got = module.branchy(**inputs).clone()  # the graph's buffer: a copy
        torch.testing.assert_close(got, module._source.branchy(**inputs))


DYNAMIC = """\
import torch
from torch import nn


def f(inp, y):
    return (inp + 1) * y


class Scale(nn.Module):
    def __init__(self):
        super().__init__()
        self.W = nn.Parameter(torch.ones(4))

    def forward(self, inp):
        return inp * self.W + 1
"""


@pytest.mark.parametrize("dim", ["torch", "empty", "if", "sum", "inp"])
def test_bad_dimension_names(tmp_path: Path, capsys, dim: str) -> None:
    """A named dimension is a local of the variant: not a keyword, a builtin, a
    name of the generated module's own nor an input's name, which it would hide."""
    stem = unique_name("src")
    (tmp_path / f"{stem}.py").write_text(DYNAMIC)
    variant = f"inp=f32[{dim},4], y=f32[4]"
    code = run_cli(tmp_path, f"{stem}.py::f", "--variant", variant)
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1
    assert f"bad named dimension {dim!r} in variant" in err
    assert "choose another name" in err
    assert not (tmp_path / "generated").exists()


@pytest.mark.parametrize("dim, code", [("x", "dim_x"), ("tl", "dim_tl")])
def test_dimension_named_like_a_kernels_own_name(tmp_path: Path, dim: str, code: str):
    """`x` is the C++ kernels' loop index, `tl` Triton's module, `W` a parameter
    of the model: the code calls the dimension by a name of its own."""
    stem = unique_name("src")
    (tmp_path / f"{stem}.py").write_text(DYNAMIC)
    spec = TensorSpec(torch.float32, (dim, 4))
    inputs = (("inp", spec), ("y", spec))
    targets = (
        Target(f"{stem}.py::f", (Variant(inputs, "cpu"), Variant(inputs, "cuda"))),
        Target(
            f"{stem}.py::Scale",
            (Variant((("inp", TensorSpec(torch.float32, ("W", 4))),), "cpu"),),
        ),
    )
    files = build(Options(targets=targets, root=tmp_path))
    py = files[f"{stem}.py"]
    assert f"    {code} = inp.shape[0]  # dynamic" in py
    assert "    W_1 = inp.shape[0]  # dynamic" in py
    module = import_generated(files, tmp_path, stem)
    x, y = rand("x", "y", shape=(5, 4)).values()
    for variant in (module._cpu_1, on_gpu(module._cuda_1)):  # cpu_0: size 1 of B
        torch.testing.assert_close(variant(x, y), (x + 1) * y)
    torch.manual_seed(0)
    eager = module._source.Scale().eval()
    mine = module.Scale().eval()
    with no_fallback(), torch.no_grad():
        torch.testing.assert_close(mine(x), eager(x))


# Submodules whose locals in the variant (`module_locals`) would take a name already
# in use: the input `x`, the allocator `empty`, a keyword, another path's joined
# name (`a.b` and `a_b`) and a parameter's local (`w_weight` of `w`, and a module
# named `w_weight`).
LOCALS = """
import torch
from torch import nn


class Two(nn.Module):
    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(8))
        self.bias = nn.Parameter(torch.randn(8))

    def forward(self, x):
        return x * self.weight + self.bias


class Crowded(nn.Module):
    def __init__(self):
        super().__init__()
        self.x = Two()
        self.empty = Two()
        self.add_module("if", Two())
        self.a = nn.Module()
        self.a.b = Two()
        self.a.c = Two()
        self.a_b = Two()
        self.w = Two()
        self.w_weight = Two()

    def forward(self, x):
        y = self.x(x) + self.empty(x) + getattr(self, "if")(x)
        y = y + self.a.b(x) * self.a.c(x) + self.a_b(x)
        return y + self.w(x) * self.w_weight(x)
"""


def test_module_locals_never_take_a_name_in_use(tmp_path: Path):
    inputs = {"x": torch.randn(4, 8)}
    c = compile_source(LOCALS, {"Crowded": inputs}, tmp_path)["Crowded"]
    bound = dict(
        line.strip().split(" = ", 1)
        for line in c.cpu_source.splitlines()
        if "._modules[" in line and "._parameters[" not in line
    )
    assert len(bound) == 9, c.cpu_source  # x, empty, if, a, a.b, a.c, a_b, w, w_weight
    assert not {"x", "empty", "if", "self"} & set(bound), bound
    for name in bound:
        assert name.isidentifier() and name.count("=") == 0, name
    c.check(inputs)  # every module's parameters read from that module
