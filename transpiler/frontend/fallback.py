"""Graph breaks: statements the compiler does not capture become fallback code.

When a statement of the user's source cannot be compiled (a `print`, a call into
NumPy, `.item()` feeding Python, a `try`), the frontend turns it into a `Stub`: the
statement's source, verbatim, to run eagerly in a module-level function of the generated
module. The names it reads (live-ins) become its parameters, the names it assigns
(live-outs) its results; compiled code runs before and after it. Values it computes
are known only at run time (`OpaqueValue`): a later statement that needs one becomes
fallback code too.
"""

from __future__ import annotations

import collections
import dataclasses
import re
import sys
import types
from dataclasses import dataclass
from typing import Any

import libcst as cst
import torch
from torch import nn

from transpiler.frontend.recorder import OpaqueValue, Unsupported
from transpiler.ir.graph import DEVICE, ModuleRef, Span
from transpiler.text import docstring


class ObjectPaths(dict[int, str]):
    """id(object) -> its path from the model ("self.attn", "self.config"), for the
    model's submodules and the settings objects read from them. It holds the objects
    as well: an id names an object only while the object lives, and a property may
    give a fresh object on every read (transformers' `config.per_layer_config`);
    had that object died, one the call makes later could take its address and its
    attributes would be read as the model's, guards the model cannot pass."""

    def __init__(self) -> None:
        super().__init__()
        self._held: list[Any] = []

    def add(self, obj: Any, path: str) -> None:
        """Name `obj` by `path`, unless it already has a path."""
        if id(obj) not in self:
            self[id(obj)] = path
            self._held.append(obj)


@dataclass(frozen=True)
class Stub:
    """One statement of the user's source, run eagerly by the generated module."""

    source: str  # the statement, verbatim (dedented)
    params: tuple[str, ...]  # live-ins, in order of first use
    outputs: tuple[str, ...]  # live-outs, returned in this order
    returns: bool  # the statement is a `return`: its value is the function's
    module: str  # the user module whose globals the statement reads
    global_names: tuple[str, ...]  # the names it reads from that module
    span: Span
    reason: str
    # params that earlier fallback code may have left unassigned, and outputs that
    # this statement assigns on some paths only (and that had no value before)
    unbound_params: tuple[str, ...] = ()
    unbound_outputs: tuple[str, ...] = ()
    # locals holding a module's function or class: (local, module, its name there)
    imports: tuple[tuple[str, str, str], ...] = ()


class _Targets(cst.CSTVisitor):
    """Calls `_target` on what each assignment, loop and `as` binds."""

    def _target(self, target: cst.CSTNode | None) -> None:
        raise NotImplementedError

    def visit_AssignTarget(self, node: cst.AssignTarget) -> None:
        self._target(node.target)

    def visit_AnnAssign(self, node: cst.AnnAssign) -> None:
        self._target(node.target)

    def visit_For(self, node: cst.For) -> None:
        self._target(node.target)

    def visit_AsName(self, node: cst.AsName) -> None:
        self._target(node.name)


class Names(_Targets):
    """Names a statement reads (any `Name` but attribute and keyword names) and
    assigns, each in order of first appearance."""

    def __init__(self) -> None:
        self.read: dict[str, None] = {}
        self.assigned: dict[str, None] = {}
        self.deleted: dict[str, None] = {}  # `del x`: unbound after the statement
        self._targets = 0

    def visit_Attribute(self, node: cst.Attribute) -> bool:
        node.value.visit(self)
        return False

    def visit_Arg(self, node: cst.Arg) -> bool:
        node.value.visit(self)
        return False

    def visit_Name(self, node: cst.Name) -> None:
        self.read.setdefault(node.value)
        if self._targets:
            self.assigned.setdefault(node.value)

    def _target(self, target: cst.CSTNode | None) -> None:
        if target is None:
            return
        self._targets += 1
        if isinstance(target, (cst.Name, cst.Tuple, cst.List, cst.StarredElement)):
            target.visit(self)
        self._targets -= 1

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._target(node.target)

    def visit_NamedExpr(self, node: cst.NamedExpr) -> None:
        self._target(node.target)

    def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
        """A nested def binds its name; what its body assigns is its own, what its
        body and defaults read may come from the enclosing frame."""
        self.assigned.setdefault(node.name.value)
        inner = Names()
        for part in (node.params, node.body, *node.decorators):
            part.visit(inner)
        self.read.update(dict.fromkeys(inner.read))
        return False

    def visit_ClassDef(self, node: cst.ClassDef) -> bool:
        self.assigned.setdefault(node.name.value)
        inner = Names()
        for part in (node.body, *node.bases, *node.keywords, *node.decorators):
            part.visit(inner)
        self.read.update(dict.fromkeys(inner.read))
        return False

    def leave_ExceptHandler(self, node: cst.ExceptHandler) -> None:
        """`except E as e`: Python unbinds `e` when the handler ends."""
        if node.name is not None and isinstance(node.name.name, cst.Name):
            self.deleted.setdefault(node.name.name.value)

    def visit_ImportAlias(self, node: cst.ImportAlias) -> None:
        if node.asname is None:  # `import a.b` binds `a`
            name = node.name
            while isinstance(name, cst.Attribute):
                name = name.value
            self.assigned.setdefault(name.value)

    def visit_Del(self, node: cst.Del) -> None:
        targets = node.target.elements if isinstance(node.target, cst.Tuple) else ()
        for t in (node.target, *(e.value for e in targets)):
            if isinstance(t, cst.Name):
                self.deleted.setdefault(t.value)


FRAME_READERS = {"locals", "vars", "dir"}  # builtins reading the caller's frame
INPLACE = re.compile(r"\b[a-z]\w*_\(")  # `x.add_(`: a method writing its tensor


class _Writes(_Targets):
    """Whether a statement may write a tensor it reads, anywhere in it (also inside
    `try`, `with`, `if`): an item or attribute assignment (`x[0] = 1`, `del x[0]`),
    an augmented assignment (`x += 1` updates a tensor in place) or an in-place
    method (`x.add_(1)`, see INPLACE); and the names it rebinds (`y = y.sum()`),
    whose values after it are new, of unknown shape."""

    def __init__(self) -> None:
        self.in_place = False
        self.rebound: set[str] = set()

    def _target(self, target: cst.CSTNode) -> None:
        if isinstance(target, (cst.Subscript, cst.Attribute)):
            self.in_place = True
        elif isinstance(target, cst.Name):
            self.rebound.add(target.value)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for e in target.elements:
                self._target(e.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self.in_place = True

    def visit_Del(self, node: cst.Del) -> None:
        targets = node.target.elements if isinstance(node.target, cst.Tuple) else ()
        for t in (node.target, *(e.value for e in targets)):
            if not isinstance(t, cst.Name):  # `del x[0]`, `del x.a`
                self.in_place = True


MUTATORS = {  # methods of Python containers that change them in place
    "append",
    "extend",
    "insert",
    "pop",
    "popitem",
    "remove",
    "clear",
    "sort",
    "reverse",
    "update",
    "setdefault",
    "add",
    "discard",
    "intersection_update",
    "difference_update",
    "symmetric_difference_update",
    "appendleft",
    "extendleft",
    "popleft",
    "rotate",
}


CONTAINERS = (list, dict, set, bytearray, collections.deque)  # mutable ones


class ContainerWrites(_Targets):
    """The names a statement may change the container of: item assignment and
    deletion (`d[k] = v`), augmented assignment, a mutating method (`xs.append`,
    see MUTATORS), or passing it to a call (`f(xs)`, `f(**kw)`), which may change
    it too."""

    def __init__(self) -> None:
        self.names: set[str] = set()

    def _target(self, target: cst.CSTNode | None) -> None:
        while isinstance(target, (cst.Subscript, cst.Attribute)):
            target = target.value
        if isinstance(target, cst.Name):
            self.names.add(target.value)
        elif isinstance(target, (cst.Tuple, cst.List)):
            for e in target.elements:
                self._target(e.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._target(node.target)

    def visit_Del(self, node: cst.Del) -> None:
        self._target(node.target)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if isinstance(func, cst.Attribute) and func.attr.value in MUTATORS:
            self._target(func.value)
        for arg in node.args:
            if isinstance(arg.value, cst.Name):
                self.names.add(arg.value.value)


class StateWrites(_Targets):
    """The object attributes a statement may change, as (object expression,
    attribute) pairs: `self.steps += 1` and `self.cache[k] = v` give (self, steps),
    `self.seen.append(x)` gives (self, seen), `setattr(self, "n", 1)` gives (self,
    n), and (self, None) when the attribute is not a literal. Values read from
    those attributes after the statement runs are known only at run time."""

    def __init__(self) -> None:
        self.found: list[tuple[cst.BaseExpression, str | None]] = []

    def _target(self, target: cst.CSTNode | None) -> None:
        if isinstance(target, cst.Subscript):
            target = target.value  # `self.cache[k] = v` changes `self.cache`
        if isinstance(target, cst.Attribute):
            self.found.append((target.value, target.attr.value))
        elif isinstance(target, (cst.Tuple, cst.List)):
            for e in target.elements:
                self._target(e.value)

    def visit_AugAssign(self, node: cst.AugAssign) -> None:
        self._target(node.target)

    def visit_Del(self, node: cst.Del) -> None:
        self._target(node.target)

    def visit_Call(self, node: cst.Call) -> None:
        func = node.func
        if (
            isinstance(func, cst.Attribute)
            and func.attr.value in MUTATORS
            and isinstance(func.value, cst.Attribute)
        ):
            self.found.append((func.value.value, func.value.attr.value))
        if isinstance(func, cst.Name) and func.value in ("setattr", "delattr"):
            if node.args:
                name = node.args[1].value if len(node.args) > 1 else None
                literal = isinstance(name, cst.SimpleString)
                attr = name.evaluated_value if literal else None
                self.found.append((node.args[0].value, attr))


def statement_source(stmt: cst.CSTNode) -> str:
    """The statement's source as libcst renders it at the top level: verbatim,
    dedented (a string literal's lines and a comment's text are as they were)."""
    if isinstance(stmt, cst.BaseSmallStatement):  # from a one-line suite
        stmt = cst.SimpleStatementLine(body=[stmt])
    stmt = stmt.with_changes(leading_lines=[])
    return cst.Module(body=[stmt]).code.rstrip(" \t\f\r\n") + "\n"


def stub_function(name: str, stub: Stub) -> str:
    """The stub as a module-level function: its statement, verbatim, in the body.

    libcst indents the statement into the body: a multi-line string literal, or a
    line continued by a backslash inside one, keeps its text (indenting each line
    of the source would change it). The statement's names are its own (a parameter
    is a local the statement reads), so nothing in the body is renamed."""
    head = [
        f"def {name}({', '.join(stub.params)}):",
        f'    """{docstring(f"{stub.span}: {stub.reason}.")}"""',
    ]
    if stub.global_names:
        head.append(f"    from {stub.module} import {', '.join(stub.global_names)}")
    for local, module, name in stub.imports:
        alias = "" if local == (name or module) else f" as {local}"
        if name:
            head.append(f"    from {module} import {name}{alias}")
        else:  # the module itself
            head.append(f"    import {module}{alias}")
    function = cst.parse_statement("\n".join(head) + "\n")
    assert isinstance(function, cst.FunctionDef)
    body = list(function.body.body)
    for n in stub.unbound_params:  # unassigned in the source too: reading it raises
        body.append(
            cst.parse_statement(f"if {n} is runtime_shim.UNBOUND:\n    del {n}\n")
        )
    body += list(cst.parse_module(stub.source).body)
    if stub.outputs and not stub.returns:
        outputs = ", ".join(
            (
                f'locals().get("{n}", runtime_shim.UNBOUND)'
                if n in stub.unbound_outputs
                else n
            )
            for n in stub.outputs
        )
        outputs += "," if len(stub.outputs) == 1 else ""
        body.append(cst.parse_statement(f"return ({outputs})\n"))
    function = function.with_changes(body=function.body.with_changes(body=body))
    return cst.Module(body=[function]).code


def contains_return(stmt: cst.CSTNode) -> bool:
    found = []

    class _Find(cst.CSTVisitor):
        def visit_Return(self, node: cst.Return) -> None:
            found.append(node)

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return False  # a nested def's return is its own

    stmt.visit(_Find())
    return bool(found)


def leaves_loop(stmt: cst.CSTNode) -> bool:
    """Whether `stmt` has a `break` or `continue` of a loop around it (a function
    of its own could not run it)."""
    found = []

    class _Find(cst.CSTVisitor):
        def visit_Break(self, node: cst.Break) -> None:
            found.append(node)

        visit_Continue = visit_Break

        def visit_For(self, node: cst.For) -> bool:
            node.iter.visit(self)
            if node.orelse is not None:  # `else:` runs after the loop, outside it
                node.orelse.visit(self)
            return False

        def visit_While(self, node: cst.While) -> bool:
            node.test.visit(self)
            if node.orelse is not None:
                node.orelse.visit(self)
            return False

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return False

    stmt.visit(_Find())
    return bool(found)


@dataclass
class StubPlan:
    """How to call a stub from here: its arguments, and what to bind after it."""

    stub: Stub
    args: tuple[Any, ...]  # Refs, ModuleRefs and constants, one per parameter
    tensor_outputs: dict[str, torch.Tensor]  # live-outs known to stay these tensors
    deleted: tuple[str, ...] = ()  # names the statement unbinds (`del x`)


def plan_stub(
    stmt: cst.CSTNode,
    local: dict,
    globals_: dict,
    span: Span,
    reason: str,
    builder,
    module_paths: ObjectPaths,
    self_name: str = "",
) -> StubPlan:
    """The stub for `stmt`; raises Unsupported when its inputs cannot be passed."""
    stmt = _explicit_super(stmt, local, globals_, self_name, span)
    source = statement_source(stmt)
    names = Names()
    stmt.visit(names)
    params = tuple(n for n in names.read if n in local)
    if FRAME_READERS & set(names.read):  # `locals()` sees every local
        params += tuple(n for n in local if n not in params and n != "__class__")
    returns = isinstance(stmt, cst.Return) or (
        isinstance(stmt, cst.SimpleStatementLine)
        and any(isinstance(s, cst.Return) for s in stmt.body)
    )
    if not returns and contains_return(stmt):
        raise Unsupported(f"{reason}, in a statement that may return", span)
    if leaves_loop(stmt):  # the loop around it becomes fallback code instead
        raise Unsupported(f"{reason}, in a statement that may leave its loop", span)
    writes = _Writes()
    stmt.visit(writes)
    tensors = {n: local[n] for n in params if isinstance(local[n], torch.Tensor)}
    outputs = [n for n in names.assigned if n not in names.deleted]
    tensor_outputs = {}
    if writes.in_place or INPLACE.search(source):
        for n, t in tensors.items():  # may be written: later reads must follow it
            if n not in outputs and n not in names.deleted:
                outputs.append(n)
            if n not in writes.rebound:  # the same tensor: its meta holds
                tensor_outputs[n] = t
    changed = ContainerWrites()
    stmt.visit(changed)
    for n in params:  # a list or dict it may change: later reads see the change
        if isinstance(local[n], CONTAINERS) and n in changed.names and n not in outputs:
            outputs.append(n)
    where = {n: importable(local[n]) for n in params}
    imports = tuple((n, *where[n]) for n in params if where[n])
    params = tuple(n for n in params if not where[n])
    args = tuple(_arg(local[n], builder, module_paths, span) for n in params)
    unbound_params = tuple(
        n for n in params if getattr(local[n], "maybe_unbound", False)
    )
    sure = always_assigned(stmt)
    unbound_outputs = tuple(
        n for n in outputs if n not in sure and (n not in local or n in unbound_params)
    )
    global_names = tuple(
        n
        for n in names.read
        if n not in local and n in globals_ and n not in names.assigned
    )
    stub = Stub(
        source,
        params,
        tuple(outputs),
        returns,
        globals_.get("__name__", ""),
        global_names,
        span,
        reason,
        unbound_params,
        unbound_outputs,
        imports,
    )
    return StubPlan(stub, args, tensor_outputs, tuple(names.deleted))


def importable(value: Any) -> tuple[str, str] | None:
    """(module, name) where `value`, a function or class, is a global of a module
    that fallback code can import it from, (module, "") for a module itself; None
    for anything else (a closure, a method, a value)."""
    if isinstance(value, types.ModuleType):
        name = getattr(value, "__name__", "")
        return (name, "") if sys.modules.get(name) is value else None
    if not isinstance(value, (types.FunctionType, type)):
        return None
    module, name = getattr(value, "__module__", None), value.__qualname__
    if not module or not name.isidentifier() or module == "__main__":
        return None
    found = getattr(sys.modules.get(module), name, None)
    return (module, name) if found is value else None


def is_record(cls: Any) -> bool:
    """A class whose instances are their fields (a dataclass, a named tuple):
    building one at transpile time has no effect beyond the object."""
    return isinstance(cls, type) and (
        dataclasses.is_dataclass(cls)
        or (issubclass(cls, tuple) and hasattr(cls, "_fields"))
    )


def record_fields(value: Any) -> list[tuple[str, Any]] | None:
    """(name, value) of each field a record instance is built from, by keyword;
    None for anything else."""
    if isinstance(value, type) or not is_record(type(value)):
        return None
    if isinstance(value, tuple):
        return list(zip(value._fields, value))
    return [
        (f.name, getattr(value, f.name)) for f in dataclasses.fields(value) if f.init
    ]


def always_assigned(stmt: cst.CSTNode) -> set[str]:
    """The names `stmt` assigns on every path through it that ends normally (what
    Python's compiler calls definitely assigned): both branches of an `if`, none of
    a loop's body (it may run no time), a `try`'s `finally` only."""
    if isinstance(stmt, cst.If):
        if stmt.orelse is None:
            return set()
        other = stmt.orelse if isinstance(stmt.orelse, cst.If) else stmt.orelse.body
        return _block(stmt.body) & (
            always_assigned(other) if isinstance(other, cst.If) else _block(other)
        )
    if isinstance(stmt, (cst.For, cst.While)):
        return set()
    if isinstance(stmt, cst.Try):
        return set() if stmt.finalbody is None else _block(stmt.finalbody.body)
    if isinstance(stmt, cst.With):
        names = Names()
        for item in stmt.items:
            item.visit(names)
        return set(names.assigned) | _block(stmt.body)
    names = Names()
    stmt.visit(names)
    return set(names.assigned) - set(names.deleted)


def _block(body) -> set[str]:
    stmts = body.body if isinstance(body, cst.BaseSuite) else body
    sure: set[str] = set()
    for stmt in stmts:
        names = Names()
        stmt.visit(names)
        sure = (sure - set(names.deleted)) | always_assigned(stmt)
    return sure


def _explicit_super(
    stmt: cst.CSTNode, local: dict, globals_: dict, self_name: str, span: Span
) -> cst.CSTNode:
    """`super()` as `super(Block, self)`: fallback code runs in a module-level
    function, which has no `__class__` cell; the class comes from the user's
    module like any other global the statement reads."""
    cls = local.get("__class__")
    if not isinstance(cls, type) or not _calls_bare_super(stmt):
        return stmt
    top = cls.__qualname__.split(".")[0]
    if "<locals>" in cls.__qualname__ or globals_.get(top) is None:
        raise Unsupported("super() in a class that is not a module global", span)
    owner = cst.parse_expression(cls.__qualname__)
    args = [cst.Arg(owner), cst.Arg(cst.Name(self_name))]

    class _Explicit(cst.CSTTransformer):
        def leave_Call(self, original: cst.Call, updated: cst.Call) -> cst.Call:
            if _is_bare_super(updated):
                return updated.with_changes(args=args)
            return updated

    return stmt.visit(_Explicit())


def _is_bare_super(node: cst.CSTNode) -> bool:
    return (
        isinstance(node, cst.Call)
        and isinstance(node.func, cst.Name)
        and node.func.value == "super"
        and not node.args
    )


def _calls_bare_super(stmt: cst.CSTNode) -> bool:
    found = []

    class _Find(cst.CSTVisitor):
        def visit_Call(self, node: cst.Call) -> None:
            if _is_bare_super(node):
                found.append(node)

    stmt.visit(_Find())
    return bool(found)


def _arg(value: Any, builder, module_paths: ObjectPaths, span: Span) -> Any:
    """A live-in as a graph argument: a tensor's Ref, a module's path, a constant."""
    if isinstance(value, (torch.Tensor, OpaqueValue)):
        return builder.ref(value, span)
    if isinstance(value, torch.device):  # meta here: the variant's at run time
        return DEVICE
    if id(value) in module_paths:  # a submodule, a config: `self.config`
        return ModuleRef(module_paths[id(value)])
    owner = getattr(value, "__self__", None)
    if isinstance(value, types.MethodType) and id(owner) in module_paths:
        name = value.__func__.__name__  # `self.attn._split_heads`
        if name.isidentifier() and getattr(owner, name, None) == value:
            return ModuleRef(f"{module_paths[id(owner)]}.{name}")
    if isinstance(value, nn.Module):
        raise Unsupported("passes a module that is not part of the model", span)
    if value is None or isinstance(value, (bool, int, float, str, torch.dtype)):
        return value
    parts = (value.start, value.stop, value.step) if isinstance(value, slice) else ()
    if parts and all(p is None or type(p) is int for p in parts):
        return value  # `hidden[:, slice_indices, :]`: a constant
    if isinstance(value, (list, tuple)):
        return type(value)(_arg(v, builder, module_paths, span) for v in value)
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _arg(v, builder, module_paths, span) for k, v in value.items()}
    raise Unsupported(f"passes a {type(value).__name__} to fallback code", span)


__all__ = ["Stub", "StubPlan", "plan_stub", "stub_function"]
