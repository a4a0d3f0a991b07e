"""Render what a variant assumes of the model (the frontend's records, see Note [State
guards] in frontend/guards.py) as checks of its guard function.

    ln_1 = self._modules.get("ln_1")
    if not (type(ln_1) is torch.nn.LayerNorm):
        return "type(self.ln_1) is torch.nn.LayerNorm"
    if not (not ln_1.training and ln_1.normalized_shape == (64,) and ...):
        return "not self.ln_1.training and self.ln_1.normalized_shape == (64,) and ..."
    if not (not (ln_1._forward_hooks or ln_1._forward_pre_hooks or ...)):
        return "self.ln_1 has no hooks"

Each module is read once into a local, from its parent's `_modules` (`.get`: a module
deleted reads as None and fails its type check), after the parent's class is checked.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import torch

from runtime_shim.modules import self_path
from transpiler.frontend.guards import GlobalGuard, ModuleGuard, SameTensor
from transpiler.text import identifier, is_reserved, py_literal, py_str


@dataclass(frozen=True)
class Guard:
    """One check of a variant's guard function.

    `test` is the Python it evaluates; `text` is what `--explain` and the fallback
    warning show: the test itself, unless it reads locals that `binds` assigns first
    (`ln_1 = self._modules.get("ln_1")`), where text has the path (`self.ln_1`).
    `failure`, where given, is the Python of what the guard function returns when
    the test fails, in place of `text`: a check of many things names the one that
    failed.
    """

    test: str
    text: str
    binds: tuple[tuple[str, str], ...] = ()  # (local name, the Python it reads)
    failure: str | None = None
    # a check of a tensor input's metadata alone: skipped while the inputs are as
    # on the last call that passed (Note [Inputs seen before], runtime_shim/guards.py)
    seen: bool = False


MODULE_HOOKS = (
    "_forward_hooks",
    "_forward_pre_hooks",
    "_backward_hooks",
    "_backward_pre_hooks",
)
GLOBAL_HOOKS = tuple(f"torch.nn.modules.module._global{h}" for h in MODULE_HOOKS)


@dataclass
class StateCode:
    """The rendered checks, and what the parameter guards need to read tensors."""

    guards: list[Guard] = field(default_factory=list)
    imports: list[str] = field(default_factory=list)  # "examples.gpt_block [as _x]"
    modules: dict[str, str] = field(default_factory=dict)  # how imports are spelled
    locals: dict[str, str] = field(default_factory=dict)  # module name -> local
    tensors: dict[str, str] = field(default_factory=dict)  # "self.ln_1.weight" -> read
    tied: list[SameTensor] = field(default_factory=list)
    # "self.ln_1.weight" -> ("ln_1.weight", the table of its module that holds it)
    held: dict[str, tuple[str, str]] = field(default_factory=dict)
    globals: list[Guard] = field(default_factory=list)  # module-level values
    global_imports: list[str] = field(default_factory=list)  # what those need


def state_code(records: Iterable[Any], taken: set[str]) -> StateCode:
    """Checks for `records` (ModuleGuard, GlobalGuard; SameTensor is kept for the
    parameter guards); locals get names not in `taken`, which gains them."""
    records = list(records)
    out = StateCode()
    roots: set[str] = set()  # what `import a.b` binds: `a`
    for m in sorted({m for r in records for m in getattr(r, "imports", ())}):
        root = m.partition(".")[0]
        if root in roots or not (root in taken or is_reserved(root)):
            roots.add(root)
            out.imports.append(m)
            out.modules[m] = m
        else:
            alias = out.modules[m] = fresh("_" + m.replace(".", "_"), taken)
            out.imports.append(f"{m} as {alias}")
    taken |= roots
    modules = [r for r in records if isinstance(r, ModuleGuard)]
    if any(r.hooks for r in modules):
        test = f"not ({' or '.join(GLOBAL_HOOKS)})"
        out.guards.append(Guard(test, "no global module hooks"))
    for r in modules:
        out.guards += _module(r, out, taken)
    for r in records:
        if isinstance(r, GlobalGuard):
            expr = f"{out.modules.get(r.module, r.module)}.{r.name}"
            guard = Guard(check(expr, r.value), check(expr, r.value, True))
            out.guards.append(guard)
            out.globals.append(guard)
            for m in r.imports:
                alias = out.modules[m]
                out.global_imports.append(m if alias == m else f"{m} as {alias}")
        elif isinstance(r, SameTensor):
            out.tied.append(r)
    return out


def _module(r: ModuleGuard, out: StateCode, taken: set[str]) -> list[Guard]:
    path = self_path(r.name)
    if r.parent is None:
        local = out.locals[r.name] = "self"
        guards = []
    else:
        parent = out.locals[r.parent]
        read = (
            f"{parent}._modules.get({py_str(r.key)})"
            if r.held == "_modules"
            else f"getattr({parent}, {py_str(r.key)}, None)"
        )
        if r.same_as is not None:  # one module under two names
            out.locals[r.name] = first = out.locals[r.same_as]
            return [Guard(f"{read} is {first}", f"{path} is {self_path(r.same_as)}")]
        local = out.locals[r.name] = fresh(_local_name(r.name), taken)
        if r.cls is not None:
            cls = r.cls
            for m in r.imports:  # spelled as imported
                if cls.startswith(m + "."):
                    cls = out.modules[m] + cls[len(m) :]
            test, text = f"type({local}) is {cls}", f"type({path}) is {cls}"
        else:
            name = py_str(r.qualname)
            test = f"type({local}).__qualname__ == {name}"
            text = f"type({path}).__qualname__ == {name}"
        guards = [Guard(test, text, ((local, read),))]
    if r.children is not None:
        table, keys = r.children
        if isinstance(keys, int):  # a list: `len(self.h) == 2`
            test, text = f"len({local}.{table}) == {keys}", f"len({path}) == {keys}"
        else:
            test = f"tuple({local}.{table}) == {py_literal(keys)}"
            text = f"tuple({path}.{table}) == {py_literal(keys)}"
        guards.append(Guard(test, text))
    if r.state:
        test = " and ".join(check(f"{local}{k}", v) for k, v in r.state)
        text = " and ".join(check(f"{path}{k}", v, True) for k, v in r.state)
        guards.append(Guard(test, text))
    if r.hooks:
        test = f"not ({' or '.join(f'{local}.{h}' for h in MODULE_HOOKS)})"
        guards.append(Guard(test, f"{path} has no hooks"))
    for leaf, table in r.tensors:
        dotted = f"{r.name}.{leaf}" if r.name else leaf
        tensor = self_path(dotted)
        out.held[tensor] = (dotted, table or "getattr")
        out.tensors[tensor] = (
            f"{local}.{table}.get({py_str(leaf)})"
            if table is not None
            else f"getattr({local}, {py_str(leaf)}, None)"
        )
    return guards


def check(expr: str, value: Any, readable: bool = False) -> str:
    """Python testing that `expr` still has `value`: `not m.training`,
    `m.eps == 1e-05`, `m.bias_k is None`. NaN equals nothing, itself included: it
    is tested as `x != x` (`math.isnan(x)` where `readable`)."""
    if value is None:
        return f"{expr} is None"
    if value is True:
        return expr
    if value is False:
        return f"not {expr}"
    if type(value) is float and math.isnan(value):
        return f"math.isnan({expr})" if readable else f"{expr} != {expr}"
    return f"{expr} == {value_text(value)}"


def value_text(value: Any) -> str:
    """A literal of a guarded value (frontend.guards.guardable): `py_literal`, with
    dtypes as `torch.float32`; infinities as `float("inf")`."""
    if isinstance(value, torch.dtype):
        return str(value)
    if type(value) in (tuple, list):
        items = ", ".join(value_text(v) for v in value)
        if type(value) is list:
            return f"[{items}]"
        return f"({items},)" if len(value) == 1 else f"({items})"
    if type(value) is dict:
        items = ", ".join(f"{value_text(k)}: {value_text(v)}" for k, v in value.items())
        return "{" + items + "}"
    return py_literal(value)


def _local_name(name: str) -> str:
    """ "h.0.attn" -> "h_0_attn": a module's local in the guard function, as
    Python spells the name (`d.²` -> `d_2`: see `text.identifier`)."""
    text = re.sub(r"\W", "_", name.replace(".", "_"))
    return identifier(text) or identifier(f"m_{text}") or "m"


def fresh(base: str, taken: set[str]) -> str:
    base = identifier(base) or "m"
    name, n = base, 0
    while name in taken or is_reserved(name) or identifier(name) != name:
        n += 1
        name = f"{base}_{n}"
    taken.add(name)
    return name


__all__ = ["Guard", "StateCode", "check", "fresh", "state_code", "value_text"]


# ------------------------------------------------------------------ as one table
#
# What a module target's variant assumes of the model, rendered as data for
# `runtime_shim.ModuleStates` and `runtime_shim.ModelState` (runtime_shim/modules.py)
# rather than as checks: a dozen lines of checks per module become one or two of a
# table. `state_code` above still renders each check, for `--explain`.

WIDTH = 88  # the tables are laid out by hand (`# fmt: off`), a row or two each


def module_rows(records: Iterable[Any]) -> list[str]:
    """The rows of a `runtime_shim.ModuleStates`, one per module, parents first."""
    rows = []
    for r in records:
        if not isinstance(r, ModuleGuard):
            continue
        more = {}
        if r.held != "_modules":
            more["held"] = "getattr"
        if r.same_as is not None:
            more["same_as"] = r.same_as
            rows.append(_row(r.name, "None", False, {}, more))
            continue
        if r.children is not None:
            more["children"] = r.children[1]
        values = {k.removeprefix("."): v for k, v in r.state}
        if r.name or values or more:  # the model itself is read anyway
            rows.append(_row(r.name, _class(r), r.hooks, values, more))
    return rows


def _class(r: ModuleGuard) -> str:
    """A module's class as a row gives it: the class itself where the generated
    module has its name (`torch.nn.LayerNorm`, `_source.Block`), "module:qualname"
    for one imported when first checked, its `__qualname__` for one no name
    reaches, None for the model itself (the caller's class)."""
    if not r.name:
        return "None"
    if r.cls is None:
        return py_str(r.qualname)
    if r.imports:
        (module,) = r.imports
        return py_str(f"{module}:{r.cls[len(module) + 1 :]}")
    return r.cls


def _row(name: str, cls: str, called: bool, values: dict, more: dict) -> str:
    head = f"    ({py_str(name)}, {cls}, {called}, "
    tail = f", {_dict(more)})," if more else "),"
    return _wrapped(
        head, [f"{py_str(k)}: {value_text(v)}" for k, v in values.items()], tail
    )


def _dict(values: dict) -> str:
    return (
        "{"
        + ", ".join(f"{py_str(k)}: {value_text(v)}" for k, v in values.items())
        + "}"
    )


def _wrapped(head: str, items: list[str], tail: str) -> str:
    """`head{item, item, ...}tail` on one line where it fits, else its items wrapped
    under the brace (on lines of their own after a long head)."""
    one = head + "{" + ", ".join(items) + "}" + tail
    if len(one) <= WIDTH:
        return one
    if len(head) > WIDTH // 2:
        head = head.rstrip() + "\n" + " " * 8
    indent = len(head.rpartition("\n")[2]) + 1
    lines, line = [], head + "{"
    for i, item in enumerate(items):
        text = item + ("," if i < len(items) - 1 else "")
        last = line.rpartition("\n")[2]
        if last.endswith("{"):
            line += text
        elif len(last) + 1 + len(text) + len(tail) + 1 > WIDTH:
            lines.append(line)
            line = " " * indent + text
        else:
            line += " " + text
    return "\n".join([*lines, line + "}" + tail])
