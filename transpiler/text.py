"""Text that lands in generated code: one escaping function per context.

Note [Text in generated code]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Everything taken from user source or config (statements, comments, names, values,
paths, the command line) reaches a generated file through exactly one of these,
chosen by where it lands:

    py_str(text)         a Python string literal, `"..."`
    py_literal(value)    a Python literal of str, int, float, bool, None, bytes and
                         tuples, lists, dicts of them
    docstring(text)      the inside of a `\"\"\"` docstring
    comment(text)        the text of a Python `#` comment: one line
    cpp_comment(text)    the text of a C++ `//` comment: one line, ASCII

Each keeps printable text as it is and spells anything else the way Python's `repr`
does (`\\n`, `\\x0c`, `\\u2028`), so a generated file never holds a character that ends
a line, closes a string or a comment, or reads differently to a reviewer than to the
compiler (bidirectional overrides, zero-width characters). The one exception is a
user statement run by fallback code, which is code, not text: it is kept verbatim
and only re-indented, by libcst (frontend/fallback.py).

Source is split into lines by `source_lines`, as Python's tokenizer splits it: only
`\\n`, `\\r\\n` and `\\r` end a line. `str.splitlines` also splits at `\\x0c`, `\\x1c`,
`\\u2028` and others that Python keeps inside a line, so the rest of a comment would
become a line of code of its own.
"""

from __future__ import annotations

import builtins
import keyword
import math
import re
import unicodedata

_LINE_END = re.compile(r"\r\n|\r|\n")
_SHORT = {"\\": "\\\\", "\n": "\\n", "\r": "\\r", "\t": "\\t"}


def source_lines(text: str) -> list[str]:
    """The lines of Python source, split where the tokenizer ends a line."""
    lines = _LINE_END.split(text)
    return lines[:-1] if lines and lines[-1] == "" else lines


def escape_char(c: str) -> str:
    """One character as Python's `repr` spells it in a string: `\\n`, `\\x85`..."""
    if c in _SHORT:
        return _SHORT[c]
    n = ord(c)
    if n < 0x100:
        return f"\\x{n:02x}"
    return f"\\u{n:04x}" if n < 0x10000 else f"\\U{n:08x}"


def _raw(c: str) -> bool:
    """Whether `c` may stand as itself in generated Python text."""
    return c.isprintable() and c != "\\"


def py_str(text: str) -> str:
    """A double-quoted Python string literal whose value is `text`."""
    body = "".join(
        c if _raw(c) and c != '"' else '\\"' if c == '"' else escape_char(c)
        for c in text
    )
    return f'"{body}"'


def py_literal(value: object) -> str:
    """A Python literal whose value equals `value` (plain data only)."""
    if isinstance(value, str):
        return py_str(value)
    if value is None or isinstance(value, (bool, int, bytes)):
        return repr(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else f'float("{value}")'
    if isinstance(value, (tuple, list)):
        items = ", ".join(py_literal(v) for v in value)
        if isinstance(value, list):
            return f"[{items}]"
        return f"({items},)" if len(value) == 1 else f"({items})"
    if isinstance(value, dict):
        items = ", ".join(f"{py_literal(k)}: {py_literal(v)}" for k, v in value.items())
        return "{" + items + "}"
    raise TypeError(f"no Python literal for a {type(value).__name__}")


def is_plain(value: object) -> bool:
    """Whether `py_literal(value)` is the value itself, not just an equal one: a
    constant of an immutable built-in type (no subclass: an `IntEnum` is not)."""
    if type(value) is float:
        return math.isfinite(value)
    return value is None or type(value) in (bool, int, str, bytes)


def docstring(text: str) -> str:
    """The inside of a `\"\"\"` docstring whose value is `text`. Lines stay lines;
    a quote is escaped where it would end the docstring."""
    out = []
    for i, c in enumerate(text):
        if c == '"' and (text[i + 1 : i + 3] == '""' or i == len(text) - 1):
            out.append('\\"')
        elif _raw(c) or c == "\n":
            out.append(c)
        else:
            out.append(escape_char(c))
    return "".join(out)


def comment(text: str) -> str:
    """The text of a Python `#` comment: printable characters as they are, anything
    else (line ends, form feeds, U+2028, bidirectional controls) escaped."""
    return "".join(c if c.isprintable() else escape_char(c) for c in text)


def cpp_comment(text: str) -> str:
    """The text of a C++ `//` comment: printable ASCII; a backslash that would join
    the next line into the comment, a `??` trigraph and `*/` are escaped too."""
    out = []
    for i, c in enumerate(text):
        prev = text[i - 1] if i else ""
        joins = c == "\\" and not text[i + 1 :].strip(" \t")
        if not (" " <= c <= "~") or joins or (prev, c) in (("?", "?"), ("*", "/")):
            out.append(f"\\x{ord(c):02x}" if ord(c) < 0x100 else escape_char(c))
        else:
            out.append(c)
    return "".join(out)


def identifier(text: str) -> str | None:
    """`text` as Python spells the name (NFKC, as the parser normalizes it), or None
    when it is not a name that can be bound (not an identifier, or a keyword)."""
    name = unicodedata.normalize("NFKC", text)
    if not name.isidentifier() or keyword.iskeyword(name):
        return None
    return name


# --------------------------------------------------------------------------------------
# Names of the generated module


# What the wrapper module binds or reads besides user-derived names: its imports,
# the module-level names it defines (see `is_reserved` for the numbered ones), and
# the locals of its functions. A user-derived name must never be one of them.
WRAPPER_NAMES = frozenset(
    {
        "os",
        "inspect",
        "torch",
        "triton",
        "runtime_shim",
        "self",
        "empty",
        "device",
        "graphs",
        "_source",
        "_cpp",
        "_triton",
        "_Triton",
    }
)
_NUMBERED = re.compile(
    r"_(fallback|guards|reads|dispatch|cpp|DEFAULTS|LAYOUTS|MODULES|MODEL)_\w+"
    r"|_(cpu|cuda)_\d+(_seg\d+)?"
)


def unreserved(base: str) -> str:
    """A base for fresh names (`base`, `base_`, `base_1`, ...) that numbering never
    turns into a reserved one: `base`, or `v` + base where the module has them all
    (`_fallback_0` -> `v_fallback_0`, `_cpu` -> `v_cpu`)."""
    if _NUMBERED.match(base) or is_reserved(f"{base}_1"):
        return f"v{base}"
    return base


def is_reserved(name: str) -> bool:
    """Whether a name the generated code gives to a user-derived value (a parameter
    inside a variant, a graph value, a local) could shadow, or be shadowed by, a
    name of the generated module itself or a builtin it calls."""
    return (
        name in WRAPPER_NAMES
        or keyword.iskeyword(name)
        or hasattr(builtins, name)
        or _NUMBERED.fullmatch(name) is not None
    )


def count(n: int, one: str, many: str | None = None) -> str:
    """`1 kernel`, `3 kernels`; `many` where the plural is not `one` + s."""
    return f"{n} {one}" if n == 1 else f"{n} {many or one + 's'}"
