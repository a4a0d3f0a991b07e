"""What a variant assumes of the model's state: records the wrapper renders as guards.

Note [State guards]
~~~~~~~~~~~~~~~~~~~
The interpreter decides conditions on Python values at transpile time, and layers
from `torch.nn` (and other libraries) run under the recorder without being
interpreted, so a compiled variant is right only while the model is in the state it
was traced in. While it interprets, the `Interpreter` notes in its ordered `guards`
what the code read (`AttrRead`, `ModuleRead`, `GlobalRead`; a statement that becomes
fallback code forgets its own, since it reads them itself at run time), and
`state_guards` turns that into records, which codegen/guards.py renders as checks of
the guard function:

- structure: every submodule on the way to one the variant uses still has the class
  it had (`type(h_0) is examples.gpt_block.Block`: types, not identities: the
  generated module runs on new instances), a container still has the children it had
  (`len(h._modules) == 2`), and a module registered under two names is still one
  (`h._modules.get("1") is h_0`);
- state: the attributes the code read, of modules and of config objects they hold
  (`h_0_attn.n_head == 4`), and for a layer that runs without being interpreted (and
  every module inside it) its `training` flag and every plain value of its `__dict__`
  (`not ln_1.training and ln_1.eps == 1e-05`);
- hooks: no forward or backward hook on any module the variant calls, nor global
  ones (eager would call them; the variant does not);
- globals: the module-level values the code read (`_source.SCALE == 2.0`);
- tensors: the parameters and buffers the variant reads are there (`is not None`),
  and one that another name shares is still shared (`lm_head.weight is wte.weight`).

Order makes every check safe to evaluate: a module is read from its parent's
`_modules` only after the parent's class is checked, and an attribute of a module only
after its own. What no check foresees (an attribute deleted, a tensor where a number
was) still fails the guard, not the call: the guard function catches it.

Cost: each module is read once, into a local, and every value of one module is
checked in one `and` chain, so a check costs tens of nanoseconds, not the microsecond
of `self.h[0].attn` (`nn.Module.__getattr__` and `ModuleList.__getitem__` per step).
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, NamedTuple

import torch
from torch import nn

from runtime_shim.modules import self_path
from transpiler.text import identifier

# ---------------------------------------------------------------- what code reads


class AttrRead(NamedTuple):
    """`<path>.<attr>` evaluated to a plain value (see `guardable`)."""

    path: str  # the object's path: "self.h[0].attn", "self.config"
    attr: str


class ModuleRead(NamedTuple):
    """A submodule read (`called`: False) or called (True) by the code."""

    path: str
    called: bool


class GlobalRead(NamedTuple):
    """A module-level name of the function's globals read as a plain value."""

    module: str  # the globals' `__name__`
    name: str


SCALARS = (bool, int, float, str, type(None), torch.dtype)


def guardable(value: Any) -> bool:
    """Whether a guard can compare `value` with a literal: plain scalars (exactly
    those types: an IntEnum or a NumPy float has no literal), dtypes, and tuples,
    lists and dicts of them."""
    if type(value) in SCALARS:
        return True
    if type(value) in (tuple, list):
        return all(guardable(v) for v in value)
    if type(value) is dict:
        return all(guardable(k) and guardable(v) for k, v in value.items())
    return False


# ---------------------------------------------------------------- what it assumes


@dataclass(frozen=True)
class ModuleGuard:
    """What a variant assumes about one module of the model (Note [State guards])."""

    name: str  # dotted name under the root: "h.0.attn"; "" for the root
    held: str = "_modules"  # how its parent holds it: "_modules", or "getattr"
    cls: str | None = None  # Python naming its class: "torch.nn.LayerNorm"
    qualname: str = ""  # a class `cls` cannot name is checked by `__qualname__`
    imports: tuple[str, ...] = ()  # modules `cls` needs imported
    same_as: str | None = None  # this name holds the module named so: `is` only
    # a container's children: ("_modules", 2) for a list, ("_modules", ("a", "b"))
    children: tuple[str, int | tuple[str, ...]] | None = None
    state: tuple[tuple[str, Any], ...] = ()  # (".n_head", 4), (".config.eps", 1e-05)
    hooks: bool = False  # the variant calls it: no hooks may be registered
    # tensors the variant reads (or that one it reads is shared with): (name, table)
    # where `table` ("_parameters", "_buffers") holds it, None when only `getattr` can
    tensors: tuple[tuple[str, str | None], ...] = ()

    @property
    def parent(self) -> str | None:
        return None if not self.name else self.name.rpartition(".")[0]

    @property
    def key(self) -> str:
        return self.name.rpartition(".")[2]


@dataclass(frozen=True)
class GlobalGuard:
    """A module-level value the code read."""

    module: str  # Python naming the module: "_source", or "examples.utils"
    name: str
    value: Any
    imports: tuple[str, ...] = ()


@dataclass(frozen=True)
class SameTensor:
    """A parameter (or buffer) the variant reads by `first`, also named `name`."""

    name: str  # "lm_head.weight"
    first: str  # "wte.weight"


# the attributes every nn.Module has: bookkeeping, not configuration
MODULE_BASE = frozenset(nn.Module().__dict__) - {"training"}
# containers whose children the code may count or iterate: (table, keyed by name)
CONTAINERS = (
    (nn.ModuleList, "_modules", False),
    (nn.ParameterList, "_parameters", False),
    (nn.Sequential, "_modules", True),
    (nn.ModuleDict, "_modules", True),
    (nn.ParameterDict, "_parameters", True),
)


def state_guards(
    root: nn.Module | None,
    reads: dict,
    params: Iterable[str],
    tied: dict[str, str],
    source: Any,
    is_user: Callable[[type], bool],
) -> tuple[ModuleGuard | GlobalGuard | SameTensor, ...]:
    """The records of what a variant assumes, modules in `named_modules` order
    (parents first).

    `reads`: what the interpreter noted (Note [State guards]); `params`: the dotted
    names of the parameters and buffers its graphs read; `tied`: other name -> the
    name the graphs read it by; `source`: the module `_source` names in the generated
    module; `is_user(cls)`: whether a class is the user's code (not a library's)."""
    globals_ = [
        _global(key, value, source)
        for key, value in reads.items()
        if isinstance(key, GlobalRead)
    ]
    if root is None:
        return tuple(globals_)
    return (*_module_guards(root, reads, set(params), tied, source, is_user), *globals_)


def _global(key: GlobalRead, value: Any, source: Any) -> GlobalGuard:
    if source is not None and key.module == source.__name__:
        return GlobalGuard("_source", key.name, value)
    return GlobalGuard(key.module, key.name, value, (key.module,))


def _module_guards(
    root: nn.Module,
    reads: dict,
    params: set[str],
    tied: dict[str, str],
    source: Any,
    is_user: Callable[[type], bool],
) -> list[ModuleGuard | SameTensor]:
    names = dict(root.named_modules(remove_duplicate=False))  # pre-order
    first: dict[int, str] = {}  # id -> the first name of each module
    for name, m in names.items():
        first.setdefault(id(m), name)
    used, called, state = _uses(reads, {self_path(n): n for n in first.values()})
    shared = [  # a module under two names shares its tensors: checked as modules
        (n, f)
        for n, f in tied.items()
        if f in params
        and first[id(names[n.rpartition(".")[0]])] == n.rpartition(".")[0]
    ]
    tensors: dict[str, dict[str, None]] = {}  # module -> the names it holds them by
    for name in [*params, *(n for n, _ in shared)]:
        owner, _, leaf = name.rpartition(".")
        tensors.setdefault(owner, {})[leaf] = None
        used[owner] = None
    layers = {
        n
        for n, interpreted in called.items()
        if not interpreted or _is_layer(names[n], is_user)
    }
    inside = {n for n in names if not layers.isdisjoint(_ancestors(n))}
    keep = {a for n in [*used, *inside] for a in _ancestors(n)}
    aliases = {  # other names of modules kept, not under other names themselves
        n
        for n, m in names.items()
        if first[id(m)] != n
        and first[id(m)] in keep
        and all(first[id(names[a])] == a for a in _ancestors(n)[:-1])
    }
    keep |= {a for n in aliases for a in _ancestors(n)[:-1]}
    out: list[ModuleGuard | SameTensor] = []
    for name, m in names.items():
        if name in aliases:
            out.append(ModuleGuard(name, _held(names, name), same_as=first[id(m)]))
        if first[id(m)] != name or name not in keep:
            continue
        values = dict(state.get(name, {}))
        if name in inside:
            values = {**_layer_state(m), **values}
        if not name:
            values.pop(".training", None)  # the wrapper checks `not self.training`
        out.append(
            ModuleGuard(
                name,
                _held(names, name),
                *(_class_text(type(m), source) if name else (None, "", ())),
                children=_children(m),
                state=tuple(values.items()),
                hooks=bool(name) and (name in called or name in inside),
                tensors=tuple(
                    (leaf, _table(m, leaf)) for leaf in tensors.get(name, ())
                ),
            )
        )
    out += [SameTensor(n, f) for n, f in shared if n.rpartition(".")[0] in keep]
    return out


def _uses(reads: dict, by_path: dict[str, str]) -> tuple[dict, dict, dict]:
    """From what the code read: the modules it uses, those it calls (name ->
    whether their forward was interpreted), and the values it read of each
    (name -> {".n_head": 4})."""
    used: dict[str, None] = {"": None}
    called: dict[str, bool] = {}
    state: dict[str, dict[str, Any]] = {}
    for key, value in reads.items():
        if isinstance(key, ModuleRead) and key.path in by_path:
            used[by_path[key.path]] = None
            if key.called:
                called[by_path[key.path]] = bool(value)
        elif isinstance(key, AttrRead):
            owner, rest = _owner(key.path, by_path)
            state.setdefault(owner, {})[f"{rest}.{key.attr}"] = value
            used[owner] = None
    return used, called, state


def _owner(path: str, by_path: dict[str, str]) -> tuple[str, str]:
    """The module whose attributes `path` reads, and the rest of the path:
    "self.h[0].config" -> ("h.0", ".config")."""
    owner = path
    while owner not in by_path:  # "self" is the root's
        owner = owner[: owner.rindex(".")]
    return by_path[owner], path[len(owner) :]


def _ancestors(name: str) -> list[str]:
    """ "h.0.attn" -> ["", "h", "h.0", "h.0.attn"]."""
    parts = name.split(".") if name else []
    return ["", *(".".join(parts[: i + 1]) for i in range(len(parts)))]


def _is_layer(m: nn.Module, is_user: Callable[[type], bool]) -> bool:
    """A user class derived from a library's layer (`class MyLinear(nn.Linear)`)."""
    return any(c not in (nn.Module, object) and not is_user(c) for c in type(m).__mro__)


def _layer_state(m: nn.Module) -> dict[str, Any]:
    """What a layer that runs without being interpreted may depend on: `training`
    and every plain value of its own `__dict__`."""
    values = {".training": m.training}
    for k, v in vars(m).items():
        # `m.k` in the guard: a name as Python spells it (not `if`, nor `ﬁ`)
        if k not in MODULE_BASE and identifier(k) == k and guardable(v):
            values[f".{k}"] = v
    return values


def _held(names: dict[str, nn.Module], name: str) -> str:
    if not name:
        return "_modules"
    parent, _, key = name.rpartition(".")
    return "_modules" if registered(names[parent], key, "_modules") else "getattr"


def _table(m: nn.Module, leaf: str) -> str | None:
    for table in ("_parameters", "_buffers"):
        if registered(m, leaf, table):
            return table
    return None


def registered(owner: nn.Module, name: str, table: str) -> bool:
    """Whether `owner.<name>` is `owner.<table>[name]`, by `nn.Module.__getattr__`."""
    cls = type(owner)
    return (
        name in getattr(owner, table)
        and name not in owner.__dict__
        and cls.__getattr__ is nn.Module.__getattr__
        and cls.__getattribute__ is object.__getattribute__
        and inspect.getattr_static(cls, name, _MISSING) is _MISSING
    )


_MISSING = object()


def _children(m: nn.Module) -> tuple[str, int | tuple[str, ...]] | None:
    for cls, table, keyed in CONTAINERS:
        if isinstance(m, cls):
            keys = tuple(getattr(m, table))
            return (table, keys if keyed else len(keys))
    return None


def _class_text(cls: type, source: Any) -> tuple[str | None, str, tuple[str, ...]]:
    """(Python naming `cls` in the generated module, its `__qualname__`, the modules
    that needs imported); a class no name reaches (defined in a function) is None."""
    if source is not None and _lookup(source, cls.__name__) is cls:
        return f"_source.{cls.__name__}", cls.__qualname__, ()
    if cls.__module__.split(".")[0] == "torch":
        if getattr(nn, cls.__name__, None) is cls:
            return f"torch.nn.{cls.__name__}", cls.__qualname__, ()
        path = f"{cls.__module__}.{cls.__qualname__}"
        if _lookup(torch, path.partition(".")[2]) is cls:
            return path, cls.__qualname__, ()
    module = sys.modules.get(cls.__module__)
    importable = all(identifier(p) == p for p in cls.__module__.split("."))
    if module is not None and importable and _lookup(module, cls.__qualname__) is cls:
        return (
            f"{cls.__module__}.{cls.__qualname__}",
            cls.__qualname__,
            (cls.__module__,),
        )
    return None, cls.__qualname__, ()


def _lookup(obj: Any, dotted: str) -> Any:
    """`obj.<dotted>`, or None where that is not Python a guard can spell (a part
    that is not a name as written: `<locals>`, a keyword, `ﬁ`) or not there."""
    for part in dotted.split("."):
        if identifier(part) != part:
            return None
        obj = getattr(obj, part, _MISSING)
        if obj is _MISSING:
            return None
    return obj


__all__ = [
    "AttrRead",
    "GlobalGuard",
    "GlobalRead",
    "ModuleGuard",
    "ModuleRead",
    "SameTensor",
    "guardable",
    "registered",
    "state_guards",
]
