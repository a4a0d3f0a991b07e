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

from transpiler.frontend.guards import GlobalGuard, ModuleGuard, SameTensor
from transpiler.ir.graph import self_path
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
            out.guards.append(Guard(check(expr, r.value), check(expr, r.value, True)))
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
        tensor = self_path(f"{r.name}.{leaf}" if r.name else leaf)
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
