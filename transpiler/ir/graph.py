"""The graph IR: a flat, immutable list of ATen-level nodes.

Note [Graph invariants]
~~~~~~~~~~~~~~~~~~~~~~~
* A `Graph` is a tuple of `Node`s in topological order; every `Ref` in a node's
  arguments names a node that comes earlier. Names are unique.
* `op` is one of:
    - "input":   a tensor argument of the target (`target` is the parameter name);
    - "param":   a parameter or buffer of the module (`target` is its dotted path);
    - "call":    an ATen op (`target` is "aten.add.Tensor") or "getitem" (picks one
                 result of a multi-output node);
    - "fallback": a call of fallback code, in its place among the others (`target`
                 is its number in the trace, then its function's name: `name_stubs`);
    - "loop":    a `while` loop on tensor data (`target` is its number in the trace:
                 its body is a graph of its own, `Traced.loops`);
* Every tensor-valued node carries `TensorMeta`: shape, stride, storage offset and
  dtype, exactly as PyTorch's meta kernels computed them. Views keep the strides and
  offset of their base's storage, so folding a view into indexing needs no per-op rule.
* `outputs` is the returned structure: nested tuples/lists/dicts of `Ref`s and
  constants.
* Every node keeps the `Span` of the user source line that produced it.

`Graph.lint()` checks these; passes call it after they run (see `pipeline.optimize`).
The printout (`str(graph)`) is what goldens and `--explain` show.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import torch


@dataclass(frozen=True)
class Span:
    """A user source line: `file` is relative to the project root."""

    file: str
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class TensorMeta:
    shape: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int
    dtype: torch.dtype

    @staticmethod
    def of(t: torch.Tensor) -> TensorMeta:
        return TensorMeta(
            tuple(t.shape), tuple(t.stride()), t.storage_offset(), t.dtype
        )

    @property
    def numel(self) -> int:
        n = 1
        for d in self.shape:
            n *= d
        return n

    def is_contiguous(self) -> bool:
        return self.stride == contiguous_strides(self.shape) or self.numel <= 1

    def __str__(self) -> str:
        dtype = str(self.dtype).replace("torch.", "")
        dims = ",".join(map(str, self.shape))
        layout = "" if self.is_contiguous() else f" stride={self.stride}"
        offset = f" offset={self.offset}" if self.offset else ""
        return f"{dtype}[{dims}]{layout}{offset}"


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides, acc = [], 1
    for d in reversed(shape):
        strides.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(strides))


@dataclass(frozen=True)
class Ref:
    """A use of another node's value."""

    name: str

    def __repr__(self) -> str:
        return self.name


@dataclass(frozen=True)
class Opaque:
    """The meta of a value computed by fallback code: known only at run time."""

    def __str__(self) -> str:
        return "object"


@dataclass(frozen=True)
class ModuleRef:
    """A submodule passed to fallback code, as Python: `self.layers[5]`."""

    path: str

    def __repr__(self) -> str:
        return self.path


Meta = TensorMeta | Opaque | tuple[TensorMeta | Opaque, ...] | None


@dataclass(frozen=True)
class Node:
    name: str
    op: str  # "input" | "param" | "call" | "fallback" | "loop"
    target: str
    args: tuple[Any, ...] = ()
    kwargs: tuple[tuple[str, Any], ...] = ()
    meta: Meta = None
    span: Span | None = None
    origin: str | None = None  # the op this node was decomposed from, for naming
    grad: bool = True  # False: computed under `torch.no_grad()` (no gradient flows)

    @property
    def tensor_meta(self) -> TensorMeta:
        assert isinstance(self.meta, TensorMeta), self
        return self.meta

    @property
    def is_fallback(self) -> bool:
        """A call of fallback code: runs eagerly, keeps its place among the others."""
        return self.op == "fallback"

    @property
    def is_loop(self) -> bool:
        """A `while` loop on tensor data; its body is a graph of its own."""
        return self.op == "loop"

    def refs(self) -> Iterator[Ref]:
        yield from iter_refs((self.args, self.kwargs))

    def __str__(self) -> str:
        if self.op in ("input", "param"):
            rhs = f"{self.op}({self.target!r})"
        else:
            parts = [_fmt(a) for a in self.args]
            parts += [f"{k}={_fmt(v)}" for k, v in self.kwargs]
            callee = self.target  # a fallback or loop by number: `loop[0]`
            if self.op in ("fallback", "loop") and self.target.isdigit():
                callee = f"{self.op}[{self.target}]"
            rhs = f"{callee}({', '.join(parts)})"
        meta = self.meta
        if isinstance(meta, tuple):
            ann = "(" + ", ".join(map(str, meta)) + ")"
        else:
            ann = str(meta) if meta is not None else "?"
        where = f"  # {self.span}" if self.span else ""
        return f"{self.name}: {ann} = {rhs}{where}"


def _fmt(value: Any) -> str:
    if isinstance(value, (list, tuple)):
        inner = ", ".join(_fmt(v) for v in value)
        return f"[{inner}]" if isinstance(value, list) else f"({inner})"
    if isinstance(value, torch.dtype):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    return repr(value)


@dataclass(frozen=True)
class Record:
    """A result object made of named fields, built by generated code from the
    class it imports. `built="init"`: by keyword, `module.qualname(field=value,
    ...)` (a dataclass such as transformers' `ModelOutput`, a named tuple);
    `built="state"`: an object the forward made and filled (a key/value cache),
    from its attributes as they stood at the return (`runtime_shim.rebuild`)."""

    module: str
    qualname: str
    fields: tuple[tuple[str, Any], ...]
    built: str = "init"

    def __repr__(self) -> str:
        inner = ", ".join(f"{k}={_fmt(v)}" for k, v in self.fields)
        return f"{self.qualname}({inner})"


@dataclass(frozen=True)
class Global:
    """A class or function in a result, as its module's global."""

    module: str
    qualname: str

    def __repr__(self) -> str:
        return f"{self.module}.{self.qualname}"


@dataclass(frozen=True)
class InputObject:
    """An object passed in, or one inside it, by its path from the parameter
    (`past_key_values.layers[0]`: param `past_key_values`, path `.layers[0]`);
    see Note [Objects passed in] in frontend/objects.py."""

    param: str
    path: str = ""

    def __repr__(self) -> str:
        return f"{self.param}{self.path}"


@dataclass(frozen=True)
class Updated:
    """A path's result, and its effects on what the caller owns: the attributes it
    set on objects passed in, each with its value at the return, and the inputs,
    parameters and buffers it wrote in place (`copies`: the `Ref` of the input or
    parameter node, then of its value at the return; Note [Writes into the
    caller's tensors] in frontend/recorder.py). Generated code sets and copies
    them, then returns."""

    result: Any
    writes: tuple[tuple[InputObject, str, Any], ...] = ()
    copies: tuple[tuple[Ref, Ref], ...] = ()

    def __repr__(self) -> str:
        sets = [f"{o}.{a} = {_fmt(v)}" for o, a, v in self.writes]
        sets += [f"{_fmt(t)} <- {_fmt(v)}" for t, v in self.copies]
        return f"{_fmt(self.result)} after {'; '.join(sets)}"

    def effects(self) -> list[Any]:
        """The values the effects read: each attribute's value, each written
        tensor and its new value."""
        return [*(v for _, _, v in self.writes), *(x for c in self.copies for x in c)]


def iter_refs(value: Any) -> Iterator[Ref]:
    return (v for v in leaves(value) if isinstance(v, Ref))


def leaves(value: Any) -> Iterator[Any]:
    """Every value in a nested output structure that holds no other."""
    if isinstance(value, Updated):
        value = [value.result, value.effects()]
    if isinstance(value, Record):
        value = [v for _, v in value.fields]
    if isinstance(value, (list, tuple)):
        for v in value:
            yield from leaves(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from leaves(v)
    else:
        yield value


def records_in(value: Any) -> Iterator[Record | Global]:
    """The `Record`s and `Global`s in a nested output structure, outermost first."""
    if isinstance(value, Global):
        yield value
    if isinstance(value, Updated):
        value = [value.result, value.effects()]
    if isinstance(value, Record):
        yield value
        value = [v for _, v in value.fields]
    if isinstance(value, (list, tuple)):
        for v in value:
            yield from records_in(v)
    elif isinstance(value, dict):
        for v in value.values():
            yield from records_in(v)


def read_before_fallback(graph: Graph) -> set[str]:
    """Values read before fallback code writes what they were computed from (the
    `_reads` of fallback calls): a copy among them must stay a copy."""
    return {
        r.name
        for n in graph.nodes
        if n.is_fallback
        for key, value in n.kwargs
        if key == "_reads"
        for r in iter_refs(value)
    }


def map_refs(value: Any, fn) -> Any:
    """Rebuild `value` with every `Ref` replaced by `fn(ref)`."""
    return map_leaves(value, lambda v: fn(v) if isinstance(v, Ref) else v)


def map_leaves(value: Any, fn) -> Any:
    """Rebuild a nested output structure with every leaf `v` replaced by `fn(v)`
    (the objects an `Updated` writes to are leaves too)."""
    if isinstance(value, list):
        return [map_leaves(v, fn) for v in value]
    if isinstance(value, tuple):
        items = [map_leaves(v, fn) for v in value]
        if hasattr(value, "_make"):  # a collections.namedtuple
            return value._make(items)
        return tuple(items) if type(value) is tuple else type(value)(items)
    if isinstance(value, dict):
        return {k: map_leaves(v, fn) for k, v in value.items()}
    if isinstance(value, Record):
        fields = tuple((k, map_leaves(v, fn)) for k, v in value.fields)
        return replace(value, fields=fields)
    if isinstance(value, Updated):
        writes = tuple((fn(o), a, map_leaves(v, fn)) for o, a, v in value.writes)
        copies = tuple((fn(t), fn(v)) for t, v in value.copies)
        return Updated(map_leaves(value.result, fn), writes, copies)
    return fn(value)


@dataclass(frozen=True)
class Graph:
    nodes: tuple[Node, ...]
    outputs: Any  # nested structure of Ref / constants

    def by_name(self) -> dict[str, Node]:
        return {n.name: n for n in self.nodes}

    def users(self) -> dict[str, list[str]]:
        """Node name -> names of the nodes using it ("<output>" for the result)."""
        users: dict[str, list[str]] = {n.name: [] for n in self.nodes}
        for n in self.nodes:
            for r in n.refs():
                users[r.name].append(n.name)
        for r in iter_refs(self.outputs):
            users[r.name].append("<output>")
        return users

    def read_once(self) -> set[str]:
        """Names of the nodes that one node reads (once or more), not the result."""
        return {
            name
            for name, users in self.users().items()
            if len(set(users)) == 1 and users[0] != "<output>"
        }

    def with_nodes(self, nodes, outputs=None) -> Graph:
        return replace(
            self,
            nodes=tuple(nodes),
            outputs=self.outputs if outputs is None else outputs,
        )

    def lint(self) -> None:
        """Check Note [Graph invariants]; raises AssertionError on a broken graph."""
        seen: set[str] = set()
        for n in self.nodes:
            assert n.name not in seen, f"duplicate node name {n.name}"
            assert n.op in ("input", "param", "call", "fallback", "loop"), n
            for r in n.refs():
                assert r.name in seen, f"{n.name} uses {r.name} before it is defined"
            assert n.meta is not None, f"{n.name} has no meta"
            seen.add(n.name)
        for r in iter_refs(self.outputs):
            assert r.name in seen, f"output uses undefined {r.name}"

    def __str__(self) -> str:
        lines = [str(n) for n in self.nodes]
        lines.append(f"return {_fmt_out(self.outputs)}")
        return "\n".join(lines)

    def renamed(self, mapping: dict[str, str]) -> Graph:
        """The same graph with nodes renamed by `mapping` (and every use of them)."""

        def ref(r: Ref) -> Ref:
            return Ref(mapping.get(r.name, r.name))

        nodes = [
            replace(
                n,
                name=mapping.get(n.name, n.name),
                target=mapping.get(n.target, n.target) if n.op == "input" else n.target,
                args=map_refs(n.args, ref),
                kwargs=tuple((k, map_refs(v, ref)) for k, v in n.kwargs),
            )
            for n in self.nodes
        ]
        return Graph(tuple(nodes), map_refs(self.outputs, ref))


def _fmt_out(value: Any) -> str:
    if isinstance(value, dict):
        return "{" + ", ".join(f"{k!r}: {_fmt_out(v)}" for k, v in value.items()) + "}"
    return _fmt(value)


@dataclass(frozen=True)
class RuntimeDevice:
    """The device of the variant's inputs, in a factory op's `device=` argument."""

    def __repr__(self) -> str:
        return "device"


DEVICE = RuntimeDevice()


def _keep_local(value: Any, defined: set[str]) -> Any:
    """An ordering argument (a Ref or a list of them) without its outside Refs."""
    if isinstance(value, Ref):
        return value if value.name in defined else None
    return [r for r in value if r.name in defined]


def subgraph(nodes: list[Node], start: int, end: int, outputs: Any) -> Graph:
    """Nodes [start, end) as a graph of their own: values they use from before
    `start` become its inputs (same names), and ordering arguments of fallback code
    (`_after`, `_reads`) that point outside are dropped: control flow keeps that
    order."""
    body = nodes[start:end]
    defined = {n.name for n in body}
    earlier = {n.name: n for n in nodes[:start]}

    def local(n: Node) -> Node:
        kwargs = tuple(
            (k, _keep_local(v, defined)) if k.startswith("_") else (k, v)
            for k, v in n.kwargs
        )
        kwargs = tuple((k, v) for k, v in kwargs if v not in (None, []))
        return replace(n, kwargs=kwargs) if kwargs != n.kwargs else n

    body = [local(n) for n in body]
    used: dict[str, None] = {}
    for n in body:
        for r in n.refs():
            used.setdefault(r.name)
    for r in iter_refs(outputs):
        used.setdefault(r.name)
    inputs = [
        Node(name, "input", name, meta=earlier[name].meta)
        for name in used
        if name not in defined and name in earlier
    ]
    return Graph(tuple(inputs + body), outputs)
