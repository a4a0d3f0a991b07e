"""Fuzz the text that lands in generated code (Note [Text in generated code]).

Hypothesis writes small sources whose comments, string literals, parameter names,
defaults and `--init` values hold adversarial text: Unicode line separators, form
feeds, backslashes (a line continued in a comment), quotes and triple quotes, `*/`,
`??/`, bidirectional controls. Text planted only inside comments and strings carries
the marker `PWNED`, some of it written as code would be (`PWNED = 1`). For every
example, transpiled for the CPU and CUDA (whose Triton file is checked, not run):

- each generated Python file parses, and the marker is only in its strings and
  comments (a statement the source did not have would put it elsewhere); in the
  C++ file, only in `//` comments;
- the module imports, its C++ builds, and the function and the module give what
  the source gives (printing what it prints);
- building twice gives byte-identical files.
"""

from __future__ import annotations

import ast
import builtins
import io
import tokenize
from contextlib import redirect_stdout
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.compile_helpers import import_generated, unique_name
from transpiler.api import build
from transpiler.cli import build_options, build_parser

pytestmark = pytest.mark.slow

MARK = "PWNED"
FRAGMENTS = [
    "\u2028", "\u2029", "\x85", "\x0c", "\x0b", "\x1c", "\x1e", "\t", "\\", "\\\\",
    '"', "'", '"""', "'''", "*/", "/*", "??/", "#", "\u202e", "\u200b", "é", "データ",
    "\U0001f600", " ", f"{MARK} = 1", f"; {MARK} = 1;", f'"""; {MARK} = 1; """',
    f"\\\n{MARK} = 1", f"__import__('builtins').__setattr__('{MARK}', 1)",
]  # fmt: skip
LINE = st.characters(
    blacklist_categories=("Cs",), blacklist_characters="\r\n\x00"
)  # what one line of a source file can hold


def _in_a_line(text: str) -> str:
    """Without line ends and NUL: for comments, which end at a line end."""
    return "".join(c for c in text if c not in "\r\n\x00")


TEXT = st.lists(
    st.sampled_from(FRAGMENTS) | st.text(LINE, max_size=3), min_size=1, max_size=6
).map(lambda parts: "".join(parts) + MARK)
COMMENT = TEXT.map(_in_a_line)
# parameter names: the generated module's own names, builtins, non-ASCII
NAMES = [
    "sum", "input", "add", "empty", "device", "graphs", "runtime_shim", "_source",
    "os", "inspect", "_cpp", "_triton", "_Triton", "self", "super", "_fallback_0",
    "_guards_cpu_0", "_cpu_0", "_DEFAULTS_f", "_reads_cpu_0", "ñ", "データ", "x_",
]  # fmt: skip
DEFAULTS = st.none() | st.booleans() | st.integers(-5, 5) | st.sampled_from([0.5, -2.0])

SOURCE = """\
import torch
from torch import nn

LABEL = {label!r}


def f(x, {params}):
    y = x + 1  # {comment1}
    print({quoted}, LABEL, end="|")  # {comment2}
    # {comment3}
    return (y * 2).relu()


class Net(nn.Module):
    def __init__(self, note=""):
        super().__init__()
        self.note = note
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x).relu()  # {comment1}
"""


@st.composite
def sources(draw) -> tuple[str, str]:
    """A source file, and an `--init` value for its `Net`."""
    names = draw(st.lists(st.sampled_from(NAMES), max_size=4, unique=True))
    params = ", ".join(f"{n}={draw(DEFAULTS)!r}" for n in names)
    raw = draw(COMMENT.map(lambda t: t.replace('"', "").replace("\\", "")))
    source = SOURCE.format(
        label=draw(TEXT),
        params=params or "z=None",
        comment1=draw(COMMENT),
        comment2=draw(COMMENT),
        comment3=draw(COMMENT),
        quoted=f'"{raw}"',  # as the source holds it: U+2028 and all, unescaped
    )
    return source, draw(TEXT)


def only_in_text(python: str) -> None:
    """The marker is only in strings and comments; a comment of the generated
    code's own is printable (`\\u2028` spelled out)."""
    tokens = tokenize.generate_tokens(io.StringIO(python).readline)
    for tok in tokens:
        if MARK in tok.string:
            assert tok.type in (tokenize.STRING, tokenize.COMMENT), tok
        if tok.type == tokenize.COMMENT and tok.line.lstrip().startswith("#"):
            assert tok.string.isprintable(), tok


def transpile(root: Path, stem: str, *argv: str) -> dict[str, str]:
    args = [*argv, "--device", "cpu", "--device", "cuda", "--root", str(root)]
    options = build_options(build_parser().parse_args(args))
    files = build(options)
    assert build(options) == files, "not byte-identical when built twice"
    assert f"{stem}_triton.py" in files and f"{stem}.cpp" in files
    for name, text in files.items():
        if name.endswith(".py"):
            ast.parse(text)
            only_in_text(text)
        else:  # the C++ kernels
            assert text.isascii()
            for line in text.split("\n"):
                assert MARK not in line or line.startswith("//"), line
    return files


def run(fn, *args) -> tuple[object, str]:
    out = io.StringIO()
    with redirect_stdout(out), torch.no_grad():
        return fn(*args), out.getvalue()


@settings(
    max_examples=6,
    derandomize=True,  # the same examples on every run: a CI check, not a search
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(example=sources())
def test_text_in_generated_code(example: tuple[str, str], tmp_path_factory) -> None:
    source, note = example
    root = tmp_path_factory.mktemp("fuzz")
    stem = unique_name("fz")
    (root / f"{stem}.py").write_text(source, encoding="utf-8")
    files = transpile(root, stem, f"{stem}.py::f", "--example", "x=f32[2,4]")
    module = import_generated(files, root, stem)
    x = torch.randn(2, 4)
    got, printed = run(module.f, x)
    want, printed_eager = run(module._source.f, x)
    torch.testing.assert_close(got, want)
    assert printed == printed_eager
    assert module.__dict__.get("_cpu_0") is not None, module.__doc__
    target = (f"{stem}.py::Net", "--example", "x=f32[2,4]", "--init", f"note={note}")
    files = transpile(root, stem, *target)
    module = import_generated(files, root, stem)
    net = module.Net(note=note).eval()
    got, _ = run(net, x)
    torch.testing.assert_close(got, run(module._source.Net.forward, net, x)[0])
    assert not hasattr(builtins, MARK)
