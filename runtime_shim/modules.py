"""What a variant assumes of the model's modules, as one table.

A compiled variant depends on the modules its code went through: their classes, the
values it read of them (`self.n_head`, `self.ln_1.eps`, `self.config.n_embd`), how
many children a list of layers has, that no hooks are registered on a module it
calls. Written out as checks, that is a dozen lines per module, most of a wrapper.
Generated code lists them instead, one row per module, parents before children:

    _MODULES_Block = runtime_shim.ModuleStates(
        # name under the model, its class, whether it is called, the values read
        ("", None, False, {"n_layer": 2}, {"children": ("ln_1", "attn")}),
        ("ln_1", torch.nn.LayerNorm, True, {"training": False, "eps": 1e-05}),
        ("h.1", None, False, {}, {"same_as": "h.0"}),
        ...
    )

A variant's `ModelState` (`_MODEL_cuda_0`) adds the parameters and buffers its code
reads and their layouts, and its guard function ends with
`return _MODEL_cuda_0.mismatch(self, x)`: None, or the first check that fails,
spelled as Python reading the model (`"self.ln_1.eps == 1e-05"`,
`"type(self.attn) is examples.gpt_block.CausalSelfAttention"`).

A row is (name, class, called, values[, more]):
- name: dotted, under the model ("h.0.attn"); "" is the model itself, whose class is
  the caller's to check (None);
- class: the module's class, checked by identity; "module:qualname" for a class
  imported when first checked (the generated module does not import it); a plain
  string, the `__qualname__` of a class no name reaches (defined in a function);
- called: the code calls the module, so no hooks may be registered on it (nor any
  global module hook);
- values: attribute (or chain of them) -> the value the code read; True and False
  are checked as truth values, None by identity, NaN as NaN;
- more, where needed: "children", the number (a list of layers) or the names of its
  children; "same_as", the name of the module this name must hold (one module
  under two names); "held": "getattr" for a module that is an attribute of its
  parent but not one of its `_modules`.

Each module is read once from its parent; a row's checks read only what the rows
before it established. Any exception (an attribute deleted) propagates to the guard
function, whose `except` reports it and lets the source run.

Note [Tables compiled once]
---------------------------
A guard runs on every call, so the table is not interpreted row by row (that cost
three times the checks written out, 22 us against 7 for a GPT-2 block): the
constructor writes the checks as one Python function of straight-line tests and
compiles it once, at import, as `dataclasses` and `collections.namedtuple` build
their methods. No value of the table becomes text in that function: keys, classes
and values are bound to names (`_Source.const`); attribute names, which it does
spell, must be Python names.
"""

from __future__ import annotations

import importlib
import keyword
import math
import unicodedata
from collections.abc import Callable, Sequence
from typing import Any

import torch

from runtime_shim.guards import TensorLayouts

__all__ = ["ModelState", "ModuleStates", "self_path"]

HOOKS = (
    "_forward_hooks",
    "_forward_pre_hooks",
    "_backward_hooks",
    "_backward_pre_hooks",
)
_MODULE = torch.nn.modules.module
GLOBAL_HOOKS = tuple(f"_global{h}" for h in HOOKS)


def self_path(name: str) -> str:
    """Python for a submodule, parameter or buffer of `self`, from its dotted name:
    `blocks.0.attn` -> `self.blocks[0].attn`. An index is an integer as Python
    spells one (`"²"` and `"01"` are not); an attribute, a name as Python spells it;
    anything else, `getattr(self.blocks, '01')`."""
    path = "self"
    for part in name.split(".") if name else ():
        if part.isascii() and part.isdigit() and str(int(part)) == part:
            path += f"[{part}]"
        elif _is_name(part):
            path += f".{part}"
        else:
            path = f"getattr({path}, {part!r})"
    return path


def _is_name(text: str) -> bool:
    return (
        unicodedata.normalize("NFKC", text) == text
        and text.isidentifier()
        and not keyword.iskeyword(text)
    )


def check_text(expr: str, value: Any) -> str:
    """The guard a value check stands for: `not m.training`, `m.eps == 1e-05`."""
    if value is None:
        return f"{expr} is None"
    if value is True:
        return expr
    if value is False:
        return f"not {expr}"
    if type(value) is float and math.isnan(value):
        return f"math.isnan({expr})"
    return f"{expr} == {literal(value)}"


def literal(value: Any) -> str:
    """Python for a value a guard compares with, as the guards of generated code
    spell it: `float("inf")`, `torch.float32`, strings in double quotes."""
    if isinstance(value, str):
        text = repr(value)
        if text.startswith("'"):
            text = '"' + text[1:-1].replace("\\'", "'").replace('"', '\\"') + '"'
        return text
    if type(value) is float and not math.isfinite(value):
        return f'float("{value}")'
    if type(value) in (tuple, list):
        items = ", ".join(literal(v) for v in value)
        if type(value) is list:
            return f"[{items}]"
        return f"({items},)" if len(value) == 1 else f"({items})"
    if type(value) is dict:
        return (
            "{"
            + ", ".join(f"{literal(k)}: {literal(v)}" for k, v in value.items())
            + "}"
        )
    return repr(value)


class _Row:
    __slots__ = (
        "called",
        "checks",
        "children",
        "cls",
        "cls_text",
        "getattr",
        "key",
        "name",
        "parent",
        "path",
        "same_as",
    )

    def __init__(self, row: Sequence[Any]) -> None:
        name, cls, called, values, *rest = row
        more = rest[0] if rest else {}
        self.name, self.cls, self.called = name, cls, called
        self.parent, _, self.key = name.rpartition(".")
        self.path = self_path(name)
        self.getattr = more.get("held") == "getattr"
        self.same_as = more.get("same_as")
        self.children = more.get("children")
        if isinstance(cls, str) and ":" in cls:  # imported on first use
            module, _, qualname = cls.partition(":")
            self.cls_text = f"type({self.path}) is {module}.{qualname}"
        elif isinstance(cls, str):
            self.cls_text = f"type({self.path}).__qualname__ == {literal(cls)}"
        elif cls is not None:
            self.cls_text = f"type({self.path}) is {class_text(cls)}"
        for attr in values:  # read as written: `m.config.eps`
            if not all(_is_name(part) for part in attr.split(".")):
                raise ValueError(f"{self.path}: {attr!r} is not an attribute path")
        self.checks = tuple(
            (attr, value, check_text(f"{self.path}.{attr}", value))
            for attr, value in values.items()
        )


class ModuleStates:
    """The modules of a model that a variant's code depends on (module docstring)."""

    def __init__(self, *rows: Sequence[Any]) -> None:
        self.rows = tuple(_Row(row) for row in rows)
        self.global_hooks = any(row.called for row in self.rows)
        source = _Source()
        self.read(source)
        self.mismatch = source.function("root")
        self.mismatch.__doc__ = """None where the model `root` is as the rows say;
        else the first check that fails, as the guard's text."""

    def read(self, source: _Source) -> dict[str, str]:
        """Add the checks of the rows to `source`; the local of each module read."""
        local = {"": "root"}
        if self.global_hooks:
            test = " or ".join(f"_MODULE.{h}" for h in GLOBAL_HOOKS)
            source.fail(test, "no global module hooks")
        for i, row in enumerate(self.rows):
            m = "root" if not row.name else f"m{i}"
            if row.name:
                up, key = local[row.parent], source.const(row.key)
                held = f"getattr({up}, {key}, None)" if row.getattr else None
                source.line(f"{m} = {held or f'{up}._modules.get({key})'}")
                if row.same_as is not None:
                    first = local[row.same_as]
                    source.fail(
                        f"{m} is not {first}", f"{row.path} is {self_path(row.same_as)}"
                    )
                    local[row.name] = m
                    continue
                source.fail(_class_test(row, m, source), row.cls_text)
            if isinstance(row.children, int):
                source.fail(
                    f"len({m}._modules) != {row.children}",
                    f"len({row.path}) == {row.children}",
                )
            elif row.children is not None:
                names = tuple(row.children)
                text = f"tuple({row.path}._modules) == {literal(names)}"
                source.fail(f"tuple({m}._modules) != {source.const(names)}", text)
            for attr, value, text in row.checks:
                source.fail(_value_test(f"{m}.{attr}", value, source), text)
            if row.called:
                test = " or ".join(f"{m}.{h}" for h in HOOKS)
                source.fail(test, f"{row.path} has no hooks")
            local[row.name] = m
        return local


class _Source:
    """Python for a check, built from a table and compiled once, as `dataclasses`
    and `collections.namedtuple` build their methods: one function of straight-line
    checks, as fast as written out. Values from the table are never text in it: each
    is a name bound to the value itself (`const`)."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.names: dict[str, Any] = {"_MODULE": _MODULE, "torch": torch}

    def const(self, value: Any) -> str:
        name = f"_k{len(self.names)}"
        self.names[name] = value
        return name

    def line(self, text: str) -> None:
        self.lines.append(f"    {text}")

    def fail(self, test: str, text: str) -> None:
        """`if test: return text`."""
        self.lines += [f"    if {test}:", f"        return {self.const(text)}"]

    def function(self, params: str) -> Callable[..., str | None]:
        body = "\n".join([*self.lines, "    return None"])
        code = compile(f"def mismatch({params}):\n{body}\n", _FILENAME, "exec")
        exec(code, self.names)
        return self.names["mismatch"]


_FILENAME = "<runtime_shim.modules: a table's checks>"


def _class_test(row: _Row, m: str, source: _Source) -> str:
    """Python true when module `m` is not of the row's class."""
    cls = row.cls
    if isinstance(cls, str) and ":" in cls:  # imported when first checked
        return f"type({m}) is not {source.const(_LazyClass(cls))}.get()"
    if isinstance(cls, str):
        return f"type({m}).__qualname__ != {source.const(cls)}"
    return f"type({m}) is not {source.const(cls)}"


def _value_test(expr: str, value: Any, source: _Source) -> str:
    """Python true when `expr` does not have `value` (`check_text` says how)."""
    if value is None:
        return f"{expr} is not None"
    if value is True:
        return f"not {expr}"
    if value is False:
        return expr
    if type(value) is float and math.isnan(value):
        return f"{source.const(_not_nan)}({expr})"
    return f"not {expr} == {source.const(value)}"


def _not_nan(v: Any) -> bool:
    return v == v


class _LazyClass:
    """A class by "module:qualname", imported on first use (it raises if it cannot
    be: the guard function then reports that and lets the source run)."""

    def __init__(self, spec: str) -> None:
        self.spec = spec
        self.cls: type | None = None

    def get(self) -> type:
        if self.cls is None:
            self.cls = _import(self.spec)
        return self.cls


def class_text(cls: type) -> str:
    """A class as a guard names it: `torch.nn.LayerNorm`, `examples.gpt.Block`."""
    if getattr(torch.nn, cls.__name__, None) is cls:
        return f"torch.nn.{cls.__name__}"
    return f"{cls.__module__}.{cls.__qualname__}"


def _import(spec: str) -> type:
    """The class "module:qualname" names."""
    module, _, qualname = spec.partition(":")
    obj = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


class ModelState:
    """Everything a variant assumes of the model, checked in one call: its modules
    (a `ModuleStates`), the parameters and buffers its code reads, there (a
    `Linear(bias=False)` has None), the layouts of those its kernels read (a
    `TensorLayouts`), tensors shared under two names still shared, and, where
    `grad` is given, that nothing it reads requires grad while grad is enabled.

    `tensors` maps a table of the modules that hold them (`"_parameters"`,
    `"_buffers"`; `"getattr"` for an attribute) to their names under the model;
    `tied` rows are (name, its table, the name of the tensor it must be); `grad` is
    "read" (the inputs and the tensors read must not require grad), "all" (nor
    may any parameter of the model: fallback code may read any) or "train" (a
    training variant's: grad enabled, and every parameter it reads requiring it).
    """

    def __init__(
        self,
        modules: ModuleStates,
        tensors: dict[str, Sequence[str]],
        layouts: TensorLayouts | None = None,
        tied: Sequence[tuple[str, str, str]] = (),
        grad: str | None = None,
    ) -> None:
        self.modules, self.layouts, self.grad = modules, layouts, grad
        source = _Source()
        local = modules.read(source)
        read = {}  # path -> the local holding the tensor
        for table, names in tensors.items():
            for name in names:
                t = read[self_path(name)] = f"t{len(read)}"
                source.line(f"{t} = {_tensor_read(name, table, local, source)}")
                source.fail(f"{t} is None", f"{self_path(name)} is not None")
        if layouts is not None:
            args = ", ".join(read[row[0]] for row in layouts.rows)
            source.line(f"failed = {source.const(layouts)}.mismatch({args})")
            source.lines += ["    if failed is not None:", "        return failed"]
        for name, table, first in tied:
            tensor = _tensor_read(name, table, local, source)
            text = f"{self_path(name)} is {self_path(first)}"
            source.fail(f"{tensor} is not {read[self_path(first)]}", text)
        if grad == "train":  # a training variant's: its inputs are checked apart
            needs = [
                f"{read[self_path(name)]}.requires_grad"
                for name in tensors.get("_parameters", ())
            ]
            test = " and ".join(["torch.is_grad_enabled()", *needs])
            source.fail(
                f"not ({test})",
                "torch.is_grad_enabled() and the parameters it reads require grad",
            )
        elif grad is not None:
            needs = ["any(t.requires_grad for t in inputs)"]
            needs += [f"{t}.requires_grad" for t in read.values()]
            if grad == "all":
                needs.append("any(p.requires_grad for p in root.parameters())")
            test = f"torch.is_grad_enabled() and ({' or '.join(needs)})"
            source.fail(
                test, "not torch.is_grad_enabled() or nothing it reads requires grad"
            )
        self.mismatch = source.function("root, *inputs")
        self.mismatch.__doc__ = """None where the model `root` is as compiled; else
        the first check that fails. `inputs` are the variant's tensor inputs, for
        the autograd check."""


def _tensor_read(name: str, table: str, local: dict[str, str], source: _Source) -> str:
    """Python reading tensor `name` from its module's table (None when absent)."""
    owner, _, leaf = name.rpartition(".")
    key = source.const(leaf)
    if table == "getattr":
        return f"getattr({local[owner]}, {key}, None)"
    if table not in ("_parameters", "_buffers"):
        raise ValueError(f"{name}: no table {table!r}")
    return f"{local[owner]}.{table}.get({key})"
