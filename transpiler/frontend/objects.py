"""Objects passed in: a key/value cache given to a decode step, declared by example.

Note [Objects passed in]
~~~~~~~~~~~~~~~~~~~~~~~~
A variant input declared `pkg.mod::make_cache(P)` is an object that the user's
function builds (`ObjectSpec`). The frontend calls that function (on the meta device)
and traces with a copy of what it returns in which every tensor is a graph input,
named after its path in the object (`layers[0].keys` is the input `layers_0_keys`).
The code then reads the object as it reads any Python state, and may set attributes
on it (`self.keys = torch.cat([self.keys, k], dim=-2)` in a cache layer's `update`):
those writes are effects of the call, which generated code replays on the caller's
object before it returns (`Updated` in ir/graph.py).

What generated code assumes of the object is its structure as the example has it,
checked on every call (`ObjectInput.checks`): the class of every object in it and
the names of its attributes (code may test for one with `getattr(obj, name, None)`),
the length of every list and tuple, the keys of every dict, every number, string,
dtype and device, and each tensor's dtype, shape and strides (contiguous, or those
of the example: a cache layer keeping the last tokens of a sliding window holds a
slice); an object reached twice is checked to be the same object again. A dynamic
dimension among the function's arguments is a dimension of the tensors, or an int
of the object that is the size itself (`generalize` finds which;
`dimension_source` says where generated code reads it).
"""

from __future__ import annotations

import keyword
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from transpiler.errors import UserError
from transpiler.frontend.fallback import importable
from transpiler.ir.dynamic import Dim
from transpiler.ir.graph import Global, InputObject, contiguous_strides
from transpiler.text import py_literal


@dataclass(frozen=True)
class Check:
    """One fact about the object at `path` (relative to the parameter: `""`,
    `.layers`, `.layers[0].keys`)."""

    path: str
    kind: str  # "type", "attributes", "len", "keys", "value", "device", "same",
    # "tensor". "type": a Global; "attributes": the names in the object's
    # `__dict__`; "len": an int; "keys": a tuple of keys; "value": a number,
    # string, bool, None or dtype; "device": nothing (the variant's); "same": the
    # path of the object it is; "tensor": (dtype, shape)
    value: Any = None


@dataclass(frozen=True)
class ObjectInput:
    """An object parameter of a variant: what its guards check, and the tensors in
    it that are graph inputs, in the order the graph takes them."""

    param: str
    checks: tuple[Check, ...]
    tensors: tuple[str, ...]  # paths of the tensors, graph inputs in this order


# Values an example holds that are checked by value (`Check.kind == "value"`).
VALUES = (bool, int, float, str, type(None), torch.dtype)


@dataclass(frozen=True)
class Example:
    """An object input as the trace reads it: the copy, its `ObjectInput`, and
    where each object and container of the copy is (by id, valid while `copies`
    holds them: code may drop one from the object, freeing its id)."""

    copy: Any
    input: ObjectInput
    places: dict[int, InputObject]
    copies: list


def example_input(
    param: str, spec, function, module: nn.Module | None, add_input
) -> Example:
    """Build the example of `spec` with `function` (the user's), and a copy of it
    whose tensors are meta graph inputs (`add_input(name, tensor)`)."""
    sizes = dict(spec.args)
    try:
        with torch.device("meta"):
            example = (
                function(module, **sizes) if module is not None else function(**sizes)
            )
    except Exception as e:
        raise UserError(
            f"{spec.function}({', '.join(f'{k}={v}' for k, v in sizes.items())}), "
            f"the example of {param!r}, raised {type(e).__name__}: {e}"
        ) from None
    copier = _Copier(param, add_input)
    copy = copier.copy(example, "")
    obj = ObjectInput(param, tuple(copier.checks), tuple(copier.tensors))
    return Example(copy, obj, copier.places, copier.copies)


class _Copier:
    def __init__(self, param: str, add_input):
        self.param = param
        self.add_input = add_input
        self.checks: list[Check] = []
        self.tensors: list[str] = []
        self.seen: dict[int, tuple[str, Any]] = {}  # id -> (path, copy)
        self.held: list = []  # keeps the ids above valid
        # id of each object and container of the copy -> where it is
        self.places: dict[int, InputObject] = {}
        self.copies: list = []

    def copy(self, value: Any, path: str) -> Any:
        if id(value) in self.seen and not isinstance(value, VALUES):
            first, copied = self.seen[id(value)]
            self.checks.append(Check(path, "same", first))
            return copied
        copied = self._copy(value, path)
        self.seen[id(value)] = (path, copied)
        self.held.append(value)
        if not isinstance(copied, (torch.Tensor, *VALUES, type, torch.device)):
            self.places[id(copied)] = InputObject(self.param, path)
            self.copies.append(copied)
        return copied

    def _copy(self, value: Any, path: str) -> Any:
        if isinstance(value, torch.Tensor):
            if type(value) is not torch.Tensor:  # a Parameter, a subclass
                self._fail(path, f"a {type(value).__qualname__}")
            shape = tuple(value.shape)
            # strides as the example has them: None where it is contiguous
            stride = None if value.is_contiguous() else tuple(value.stride())
            self.checks.append(Check(path, "tensor", (value.dtype, shape, stride)))
            self.tensors.append(path)
            t = torch.empty_strided(
                shape, stride or contiguous_strides(shape), dtype=value.dtype,
                device="meta",
            )  # fmt: skip
            self.add_input(_input_name(path), t)
            return t
        if isinstance(value, VALUES):
            self.checks.append(Check(path, "value", value))
            return value
        if isinstance(value, torch.device):
            self.checks.append(Check(path, "device"))
            return torch.device("meta")
        if isinstance(value, type):
            self.checks.append(Check(path, "value", self._global(value, path)))
            return value
        if type(value) in (list, tuple):
            self.checks.append(
                Check(
                    path,
                    "type",
                    Global(type(value).__module__, type(value).__qualname__),
                )
            )
            self.checks.append(Check(path, "len", len(value)))
            items = [self.copy(v, f"{path}[{i}]") for i, v in enumerate(value)]
            return type(value)(items)
        if type(value) is dict:
            if not all(isinstance(k, (str, int)) for k in value):
                self._fail(path, "a dict with keys other than strings and integers")
            self.checks.append(Check(path, "type", Global("builtins", "dict")))
            self.checks.append(Check(path, "keys", tuple(value)))
            return {
                k: self.copy(v, f"{path}[{py_literal(k)}]") for k, v in value.items()
            }
        if isinstance(value, nn.Module) or not _plain_object(value):
            self._fail(path, f"a {type(value).__qualname__}")
        self.checks.append(Check(path, "type", self._global(type(value), path)))
        self.checks.append(Check(path, "attributes", tuple(vars(value))))
        copied = object.__new__(type(value))
        self.seen[id(value)] = (path, copied)  # an attribute may refer back to it
        for name, v in vars(value).items():
            if not name.isidentifier() or keyword.iskeyword(name):
                self._fail(path, f"an attribute named {name!r}")
            vars(copied)[name] = self.copy(v, f"{path}.{name}")
        return copied

    def _global(self, cls: type, path: str) -> Global:
        where = importable(cls)
        if where is None or not where[1]:
            self._fail(
                path,
                f"the class {cls.__qualname__}, which generated code cannot import",
            )
        return Global(*where)

    def _fail(self, path: str, what: str) -> None:
        raise UserError(
            f"the example of {self.param!r} holds {what} at {self.param}{path}: "
            "examples may hold tensors, numbers, strings, dtypes, devices, "
            "classes, lists, tuples, dicts and objects of importable classes"
        )


def _plain_object(value: Any) -> bool:
    """An instance of a Python class whose state is its `__dict__`, set the plain
    way (generated code replays attribute writes with `obj.name = value`)."""
    cls = type(value)
    return (
        hasattr(value, "__dict__")
        and cls.__setattr__ is object.__setattr__
        and "__slots__" not in vars(cls)
    )


def _input_name(path: str) -> str:
    """The graph input's name for the tensor at `path`: `layers[0].keys` is
    `layers_0_keys` (`GraphBuilder.fresh` makes it unique)."""
    return "_".join(
        filter(None, "".join(c if c.isalnum() else " " for c in path).split())
    )


def dimension_source(
    inputs: tuple, objects: tuple[ObjectInput, ...], dim: str
) -> tuple[str, int | None]:
    """Where generated code reads the size of named dimension `dim`: the first
    input tensor that has it (a parameter, or a tensor in an object passed in:
    `past_key_values.layers[0].keys`) and the axis; else the first integer in an
    object that is the size itself (a cache's `cumulative_length`), axis None."""
    by_param = {o.param: o for o in objects}
    found = None
    for param, spec in inputs:
        if dim in getattr(spec, "shape", ()):
            return param, spec.shape.index(dim)
        for check in by_param[param].checks if param in by_param else ():
            value = check.value
            if check.kind == "tensor":
                for axis, size in enumerate(value[1]):
                    if _is(size, dim):
                        return param + check.path, axis
            elif check.kind == "value" and _is(value, dim) and found is None:
                found = (param + check.path, None)
    if found is None:
        raise AssertionError(f"no input has dimension {dim}")
    return found


def _is(size: Any, dim: str) -> bool:
    return isinstance(size, Dim) and (size.name, size.a, size.b) == (dim, 1, 0)
