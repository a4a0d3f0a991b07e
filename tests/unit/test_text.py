"""The escaping functions of transpiler/text.py, one per context (Note [Text in
generated code]): each gives text that Python (or a C++ compiler) reads back as
exactly the value, on exactly one line where the context is a line, whatever the
input."""

from __future__ import annotations

import ast
import io
import shutil
import subprocess
import tokenize
from pathlib import Path

import black
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transpiler.text import (
    comment,
    cpp_comment,
    docstring,
    identifier,
    is_plain,
    is_reserved,
    py_literal,
    py_str,
    source_lines,
)

# Characters that end, join or hide lines somewhere (str.splitlines, the C
# preprocessor, a terminal), quotes and escapes; mixed with any other text.
TRICKY = [
    "\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028",
    "\u2029", "\x00", "\t", "\\", "\\\n", '"', "'", '"""', "'''", "*/", "/*", "??/",
    "\u202e", "\u200b", "\ufeff", "\ud800", "#", "é", "データ", "\U0001f600",
]  # fmt: skip
TEXT = st.lists(st.sampled_from(TRICKY) | st.text(max_size=4), max_size=8).map("".join)
FUZZ = settings(
    max_examples=100,
    derandomize=True,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


def test_source_lines_split_only_where_python_ends_a_line() -> None:
    text = "a = 1  # x\u2028b = 2\x0c\x85\x1c\r\nc = 3\rd = 4\n"
    assert source_lines(text) == ["a = 1  # x\u2028b = 2\x0c\x85\x1c", "c = 3", "d = 4"]
    assert len(ast.parse(text).body) == 3  # what Python sees: three statements
    assert text.splitlines()[1] == "b = 2"  # what str.splitlines makes of it


def _sourceable(text: str) -> str:
    """`text` without what a line of a source file cannot hold."""
    return "".join(
        c for c in text if c not in "\r\n\x00" and not "\ud800" <= c <= "\udfff"
    )


IN_A_LINE = TEXT.map(_sourceable)


@FUZZ
@given(st.lists(IN_A_LINE, min_size=1, max_size=4))
def test_source_lines_agree_with_the_tokenizer(comments: list[str]) -> None:
    """Each statement is on the line `source_lines` numbers it (what spans say)."""
    text = "".join(f"v{i} = {i}  # {c}\n" for i, c in enumerate(comments))
    tree = ast.parse(text)
    assert len(tree.body) == len(comments)
    lines = source_lines(text)
    for stmt in tree.body:
        assert lines[stmt.lineno - 1].startswith(ast.unparse(stmt.targets[0]))


@FUZZ
@given(TEXT)
def test_py_str_is_one_printable_line_with_the_same_value(text: str) -> None:
    literal = py_str(text)
    assert ast.literal_eval(literal) == text
    assert literal.isprintable()
    formatted = black.format_str(f"x = {literal}\n", mode=black.Mode())
    assert ast.literal_eval(formatted.partition(" = ")[2]) == text


@FUZZ
@given(TEXT)
def test_docstring_keeps_its_value_and_stays_one_string(text: str) -> None:
    source = f'"""{docstring(text)}"""\n'
    assert ast.literal_eval(source) == text
    assert all(line.isprintable() for line in source.split("\n"))
    formatted = black.format_str(f"def f():\n    {source}", mode=black.Mode())
    (fn,) = ast.parse(formatted).body
    assert isinstance(fn, ast.FunctionDef) and len(fn.body) == 1


@FUZZ
@given(TEXT)
def test_comment_is_one_comment_token(text: str) -> None:
    source = f"x = 1  # {comment(text)}\ny = 2\n"
    tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
    comments = [t for t in tokens if t.type == tokenize.COMMENT]
    assert len(comments) == 1 and comments[0].start[0] == 1
    assert len(ast.parse(source).body) == 2
    assert black.format_str(source, mode=black.Mode()).count("\n") == 2


def test_comment_spells_what_is_not_printable() -> None:
    assert comment("a\u2028b\\c\x0c") == "a\\u2028b\\c\\x0c"
    assert comment("é データ") == "é データ"


@pytest.mark.skipif(shutil.which("g++") is None, reason="needs g++")
@settings(max_examples=5, derandomize=True, deadline=None)
@given(texts=st.lists(TEXT, min_size=20, max_size=20))
def test_cpp_comment_never_joins_or_ends_lines(
    texts: list[str], tmp_path_factory
) -> None:
    """Each comment is followed by a declaration that a later line uses: a comment
    that swallowed the next line, or ended early, fails to compile."""
    lines = []
    for i, text in enumerate(texts):
        escaped = cpp_comment(text + "\\")  # a backslash last, as a continued line
        assert escaped.isascii() and escaped.isprintable()
        lines += [f"// {escaped}", f"int v{i} = {i};"]
    lines.append("int total = " + " + ".join(f"v{i}" for i in range(len(texts))) + ";")
    path = Path(tmp_path_factory.mktemp("cpp")) / "comments.cpp"
    path.write_text("\n".join(lines) + "\n", encoding="ascii")
    flags = ["-std=c++17", "-trigraphs", "-fsyntax-only", "-Werror=comment"]
    done = subprocess.run(["g++", *flags, str(path)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_cpp_comment_escapes() -> None:
    assert cpp_comment("x = a + \\") == "x = a + \\x5c"
    assert cpp_comment("x = a + \\  ") == "x = a + \\x5c  "
    assert cpp_comment('"\\n" ??/ */ é') == '"\\n" ?\\x3f/ *\\x2f \\xe9'


@FUZZ
@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.floats() | TEXT | st.binary(),
        lambda inner: st.lists(inner, max_size=3)
        | st.lists(inner, max_size=3).map(tuple)
        | st.dictionaries(TEXT, inner, max_size=3),
        max_leaves=8,
    )
)
def test_py_literal_round_trips(value) -> None:
    text = py_literal(value)
    back = eval(text, {"__builtins__": {"float": float}})  # float("nan") and inf
    assert repr(back) == repr(value)  # NaN != NaN; the reprs agree


def test_is_plain_only_for_exact_immutable_constants() -> None:
    import enum

    class Small(enum.IntEnum):
        ONE = 1

    assert all(is_plain(v) for v in (None, True, 3, 1.5, "s", b"b"))
    assert not any(is_plain(v) for v in (float("inf"), Small.ONE, (1,), [1], {}))


def test_identifier_is_the_name_python_binds() -> None:
    assert identifier("x") == "x"
    assert identifier("\ufb01le") == "file"  # NFKC, as the parser reads it
    assert identifier("my-model") is None
    assert identifier("class") is None


def test_is_reserved_covers_the_generated_modules_own_names() -> None:
    reserved = ["torch", "runtime_shim", "_source", "_cpp", "_triton", "empty"]
    reserved += ["device", "self", "sum", "type", "isinstance", "any", "None"]
    reserved += ["_fallback_3", "_guards_cpu_0", "_cpu_12", "_cuda_1_seg2"]
    reserved += ["_DEFAULTS_Net", "_dispatch_f", "_reads_cuda_0"]
    assert all(is_reserved(n) for n in reserved), [
        n for n in reserved if not is_reserved(n)
    ]
    assert not any(is_reserved(n) for n in ["x", "mask", "weight", "_cpu", "cpu_0"])
