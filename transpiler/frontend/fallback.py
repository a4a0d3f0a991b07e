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

import re
from dataclasses import dataclass
from typing import Any

import libcst as cst
import torch
from torch import nn

from transpiler.frontend.recorder import OpaqueValue, Unsupported
from transpiler.ir.graph import ModuleRef, Span


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
        self.in_place = True


def statement_source(stmt: cst.CSTNode) -> str:
    if isinstance(stmt, cst.BaseSmallStatement):  # from a one-line suite
        stmt = cst.SimpleStatementLine(body=[stmt])
    stmt = stmt.with_changes(leading_lines=[])
    return cst.Module(body=[stmt]).code.rstrip() + "\n"


def contains_return(stmt: cst.CSTNode) -> bool:
    found = []

    class _Find(cst.CSTVisitor):
        def visit_Return(self, node: cst.Return) -> None:
            found.append(node)

        def visit_FunctionDef(self, node: cst.FunctionDef) -> bool:
            return False  # a nested def's return is its own

    stmt.visit(_Find())
    return bool(found)


@dataclass
class StubPlan:
    """How to call a stub from here: its arguments, and what to bind after it."""

    stub: Stub
    args: tuple[Any, ...]  # Refs, ModuleRefs and constants, one per parameter
    tensor_outputs: dict[str, torch.Tensor]  # live-outs known to stay these tensors


def plan_stub(
    stmt: cst.CSTNode,
    local: dict,
    globals_: dict,
    span: Span,
    reason: str,
    builder,
    module_paths: dict[int, str],
) -> StubPlan:
    """The stub for `stmt`; raises Unsupported when its inputs cannot be passed."""
    source = statement_source(stmt)
    names = Names()
    stmt.visit(names)
    params = tuple(n for n in names.read if n in local)
    returns = isinstance(stmt, cst.Return) or (
        isinstance(stmt, cst.SimpleStatementLine)
        and any(isinstance(s, cst.Return) for s in stmt.body)
    )
    if not returns and contains_return(stmt):
        raise Unsupported(f"{reason}, in a statement that may return", span)
    writes = _Writes()
    stmt.visit(writes)
    tensors = {n: local[n] for n in params if isinstance(local[n], torch.Tensor)}
    outputs = list(names.assigned)
    tensor_outputs = {}
    if writes.in_place or INPLACE.search(source):
        for n, t in tensors.items():  # may be written: later reads must follow it
            if n not in outputs:
                outputs.append(n)
            if n not in writes.rebound:  # the same tensor: its meta holds
                tensor_outputs[n] = t
    args = tuple(_arg(local[n], builder, module_paths, span) for n in params)
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
    )
    return StubPlan(stub, args, tensor_outputs)


def _arg(value: Any, builder, module_paths: dict[int, str], span: Span) -> Any:
    """A live-in as a graph argument: a tensor's Ref, a module's path, a constant."""
    if isinstance(value, (torch.Tensor, OpaqueValue)):
        return builder.ref(value, span)
    if isinstance(value, nn.Module):
        if id(value) not in module_paths:
            raise Unsupported("passes a module that is not part of the model", span)
        return ModuleRef(module_paths[id(value)])
    if value is None or isinstance(value, (bool, int, float, str, torch.dtype)):
        return value
    if isinstance(value, (list, tuple)):
        return type(value)(_arg(v, builder, module_paths, span) for v in value)
    if isinstance(value, dict) and all(isinstance(k, str) for k in value):
        return {k: _arg(v, builder, module_paths, span) for k, v in value.items()}
    raise Unsupported(f"passes a {type(value).__name__} to fallback code", span)


__all__ = ["Stub", "StubPlan", "plan_stub"]
