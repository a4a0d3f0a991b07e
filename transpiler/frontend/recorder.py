"""Record ATen ops executed on meta tensors into graph nodes.

The frontend runs the user's tensor code on meta tensors (no data, no allocation) under
a `Recorder`, a TorchDispatchMode. Each ATen op that reaches it becomes a `Node`, with
PyTorch's own shape, stride and dtype rules deciding the result. The frontend sets
`recorder.span` to the user source line being executed, so every node keeps its origin.

With `decompositions` set (see passes/decompose.py) an op in that table is replaced by
PyTorch's decomposition of it, whose ops are recorded instead.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import torch
from torch._decomp import decomposition_table
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from transpiler.ir.graph import DEVICE, Node, Opaque, Ref, Span, TensorMeta, map_refs
from transpiler.ir.ops import CHECKS_DATA, device_strides, on_meta
from transpiler.text import identifier, is_reserved, unreserved


class Unsupported(Exception):
    """Code the compiler does not capture; the variant falls back to eager for it."""

    def __init__(self, reason: str, span: Span | None = None):
        super().__init__(reason)
        self.reason = reason
        self.span = span
        # the graph break that made this one (Note [Graph breaks that spread])
        self.cause: tuple[Span, str] | None = None


# Note [Graph breaks that spread]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A statement that cannot be compiled becomes fallback code where it stands, unless
# fallback code cannot run there: inside a context that sets a context variable
# (transformers' output capturing sets one around a whole encoder), or where the
# stub would need a value it cannot be passed. Then the statement around it breaks
# instead, and so on outwards: one attribute write in a Swin layer made the whole
# encoder fallback code, reported as "passes a function to fallback code". The
# first break travels with the `Unsupported` that spreads it (`cause`, set by
# `Interpreter.fallback`), and the graph break finally recorded names it, as does
# the reason of a variant that runs its source (`trace`), so the report says what
# to change.


def with_cause(reason: str, span: Span, cause: tuple[Span, str] | None) -> str:
    """A graph break's reason, with the break inside it that made it one."""
    if cause is None or cause[0] == span:
        return reason
    where, why = cause
    return f"{reason}, because {where}: {why}"


class OpaqueValue:
    """A value computed by fallback code, known only at run time.

    The interpreter may pass it around (assign it, return it, hand it to more fallback
    code) but any operation on it needs its run-time value, so it raises `Unsupported`,
    which turns the statement doing it into fallback code as well.
    """

    def __init__(self, name: str, maybe_unbound: bool = False):
        self.name = name
        # fallback code may have left the name holding it unassigned (an `if` that
        # assigns it on one branch only): run time holds `runtime_shim.UNBOUND`
        self.maybe_unbound = maybe_unbound

    def _needs_value(self, *args, **kwargs):
        raise Unsupported("uses a value computed by fallback code")

    __getattr__ = __bool__ = __iter__ = __len__ = __call__ = _needs_value
    __getitem__ = __index__ = __int__ = __float__ = __contains__ = _needs_value
    __setitem__ = __delitem__ = __enter__ = __exit__ = __reversed__ = _needs_value
    __complex__ = __round__ = __trunc__ = __floor__ = __ceil__ = _needs_value
    __str__ = __format__ = _needs_value  # text of the value: f"{x}", "%s" % x
    for _op in (
        "add",
        "sub",
        "mul",
        "truediv",
        "floordiv",
        "mod",
        "pow",
        "matmul",
        "and",
        "or",
        "xor",
        "lshift",
        "rshift",
        "eq",
        "ne",
        "lt",
        "le",
        "gt",
        "ge",
        "neg",
        "pos",
        "invert",
        "abs",
    ):
        locals()[f"__{_op}__"] = _needs_value
        locals()[f"__r{_op}__"] = _needs_value
    del _op

    def __hash__(self) -> int:
        return id(self)

    def __repr__(self) -> str:
        return f"<run-time value {self.name}>"


@dataclass(frozen=True)
class Checkpoint:
    """Where a GraphBuilder stood: its node count, journal length and writes."""

    nodes: int
    binds: int
    writes: int = 0


class GraphBuilder:
    """Accumulates nodes; maps live meta tensors to the node names that hold them."""

    def __init__(self, params: dict[int, str] | None = None):
        self.nodes: list[Node] = []
        self._names: dict[int, str] = {}
        self._alive: list[torch.Tensor] = []  # keeps ids in _names valid
        self._params = params or {}
        self._used: dict[str, int] = {}
        self._taken: set[str] = set()
        self._stale: set[int] = set()
        # (id, name it had, stale it was) before each bind and mark_stale
        self._journal: list[tuple[int, str | None, bool]] = []
        # storages of inputs, parameters and buffers: memory the caller owns
        self._owned: set[int] = set()
        # each input, parameter and buffer by its storage, with the name of its
        # node: what a write into the caller's memory writes back to (Note [Writes
        # into the caller's tensors])
        self._roots: dict[int, tuple[torch.Tensor, str]] = {}
        self._writes: list[int] = []  # the storages of those written, in order
        # whether the code being recorded runs with grad enabled (`with
        # torch.no_grad():` turns it off): what the backward differentiates
        self.grad = True

    def fresh(self, base: str) -> str:
        """A new unique name: `base`, else `base_1`, `base_2`, ...; never a name the
        generated code has a use for (`text.is_reserved`: a keyword, a builtin, a
        local or global of the wrapper), as names become variables there: `sum`
        becomes `sum_`, `empty` `empty_`, `_cpu_0` `v_cpu_0`. A base that is no
        name (a parameter's path through `nn.ModuleDict` keys: `d.a"b.weight`,
        `d.².weight`) becomes one: `d_a_b_weight`, `d_2_weight`."""
        text = re.sub(r"\W", "_", base)
        base = unreserved(identifier(text) or identifier(f"v_{text}") or "v")
        n = self._used.get(base, 0)
        name = f"{base}_{n}" if n else base + "_" * is_reserved(base)
        while name in self._taken or is_reserved(name):
            n += 1
            name = f"{base}_{n}"
        self._used[base] = n + 1
        self._taken.add(name)
        return name

    def reserve(self, names) -> None:
        """Keep `fresh` from handing out these names (a pass keeps them for the
        values that already had them)."""
        self._taken.update(names)

    def rename(self, old: str, new: str) -> None:
        """Rename the node `old` (recently added) and every later use of it."""
        i = next(
            i for i in range(len(self.nodes) - 1, -1, -1) if self.nodes[i].name == old
        )

        def ref(r: Ref) -> Ref:
            return Ref(new) if r.name == old else r

        for j in range(i, len(self.nodes)):
            n = self.nodes[j]
            self.nodes[j] = replace(
                n,
                name=new if j == i else n.name,
                args=map_refs(n.args, ref),
                kwargs=tuple((k, map_refs(v, ref)) for k, v in n.kwargs),
            )
        for key, name in self._names.items():
            if name == old:
                self._names[key] = new
        self._taken.add(new)

    def checkpoint(self) -> Checkpoint:
        return Checkpoint(len(self.nodes), len(self._journal), len(self._writes))

    def rollback(self, mark: Checkpoint) -> None:
        """Forget the nodes added since `checkpoint()` returned `mark`, and give
        each tensor bound or marked stale since the node it held then."""
        del self.nodes[mark.nodes :]
        del self._writes[mark.writes :]
        while len(self._journal) > mark.binds:
            key, name, stale = self._journal.pop()
            if name is None:
                self._names.pop(key, None)
            else:
                self._names[key] = name
            if stale:
                self._stale.add(key)
            else:
                self._stale.discard(key)

    def _note(self, tensor: torch.Tensor) -> None:
        """Journal what `tensor` holds before it changes (see `rollback`)."""
        key = id(tensor)
        self._journal.append((key, self._names.get(key), key in self._stale))

    def keep_opaque(self, node: Node) -> None:
        """Add an existing node whose value is known only at run time."""
        self.nodes.append(node)
        self._taken.add(node.name)

    def keep(self, node: Node, tensor: torch.Tensor) -> None:
        """Add an existing node unchanged (a rewrite keeping inputs and params)."""
        self.nodes.append(node)
        self._taken.add(node.name)
        self.bind(tensor, node.name)
        if node.op in ("input", "param"):
            self._own_root(tensor, node.name)

    def add(self, op, target, args=(), kwargs=(), meta=None, span=None, base=None):
        name = self.fresh(base or target.split(".")[1] if op == "call" else target)
        node = Node(name, op, target, args, tuple(kwargs), meta, span)
        self.nodes.append(node if self.grad else replace(node, grad=False))
        return name

    def bind(self, tensor: torch.Tensor, name: str) -> None:
        self._note(tensor)
        self._stale.discard(id(tensor))
        self._names[id(tensor)] = name
        self._alive.append(tensor)

    def add_input(self, name: str, tensor: torch.Tensor) -> None:
        node = self.add("input", name, meta=TensorMeta.of(tensor))
        self.bind(tensor, node)
        self._own_root(tensor, node)

    def _own_root(self, tensor: torch.Tensor, node: str) -> None:
        self._owned.add(memory_of(tensor))
        self._roots[memory_of(tensor)] = (tensor, node)

    def root_of(self, tensor: torch.Tensor) -> torch.Tensor | None:
        """The input, parameter or buffer whose memory `tensor` shares, where it
        is all of that memory; else None."""
        root, _ = self._roots.get(memory_of(tensor), (None, None))
        return root if root is not None and covers(root) else None

    def wrote(self, tensor: torch.Tensor) -> None:
        """Note that the input, parameter or buffer `tensor` shares memory with
        was written in place."""
        self._writes.append(memory_of(tensor))

    def caller_writes(self) -> tuple[tuple[str, str], ...]:
        """The inputs, parameters and buffers written in place, each as the name
        of its node and the name of the value it holds now, in the order they
        were first written."""
        roots = (self._roots[m] for m in dict.fromkeys(self._writes))
        return tuple((node, self._names[id(t)]) for t, node in roots)

    def owned_by_caller(self, tensor: torch.Tensor) -> bool:
        """Whether `tensor` shares memory with an input, parameter or buffer (is
        one, or a view, `detach` or alias of one): writing it writes the caller's."""
        return memory_of(tensor) in self._owned

    def ref(self, tensor: torch.Tensor, span: Span | None) -> Ref:
        if isinstance(tensor, OpaqueValue):
            return Ref(tensor.name)
        if id(tensor) in self._stale:
            raise Unsupported("reads a tensor after an in-place update of a view", span)
        name = self._names.get(id(tensor))
        if name is None and id(tensor) in self._params:
            path = self._params[id(tensor)]
            name = self.add("param", path, meta=TensorMeta.of(tensor), span=span)
            self.bind(tensor, name)
            self._own_root(tensor, name)
        if name is None:
            raise Unsupported("uses a tensor created outside the compiled code", span)
        return Ref(name)

    def own(self, tensor: torch.Tensor) -> None:
        """Count `tensor`'s memory as the caller's (fallback code returned a tensor
        that is an input, parameter or buffer, or a view of one)."""
        self._owned.add(memory_of(tensor))

    def aliases(self, tensor: torch.Tensor) -> list[torch.Tensor]:
        """The live tensors other than `tensor` that share its memory: views taken
        from it or from its base, `detach`es and other aliases."""
        memory, seen, found = memory_of(tensor), {id(tensor)}, []
        for t in self._alive:
            if id(t) not in seen and id(t) in self._names and memory_of(t) == memory:
                seen.add(id(t))
                found.append(t)
        return found

    def mark_stale(self, tensor: torch.Tensor) -> None:
        """`tensor` no longer holds the value its node computed: reading it is a
        graph break (fallback code reads the real one)."""
        self._note(tensor)
        self._stale.add(id(tensor))

    def knows(self, tensor: torch.Tensor) -> bool:
        return id(tensor) in self._names or id(tensor) in self._params

    def name_of(self, tensor: torch.Tensor) -> str | None:
        return self._names.get(id(tensor))


def covers(tensor: torch.Tensor) -> bool:
    """Whether `tensor` is all of its memory, laid out contiguously."""
    return (
        tensor.storage_offset() == 0
        and tensor.is_contiguous()
        and tensor.untyped_storage().nbytes() == tensor.numel() * tensor.itemsize
    )


def memory_of(tensor: torch.Tensor) -> int:
    """The identity of a tensor's storage (meta tensors have storages too)."""
    return tensor.untyped_storage()._cdata


# Ops whose CPU and CUDA kernels take tensors of one dtype only (meta kernels do not
# check: a bf16 input into an f32 linear layer runs on meta and raises in eager).
SAME_DTYPE = {
    "aten.mm.default",
    "aten.addmm.default",
    "aten.bmm.default",
    "aten.baddbmm.default",
    "aten.addbmm.default",
    "aten.mv.default",
    "aten.addmv.default",
    "aten.dot.default",
    "aten.convolution.default",
    "aten.scaled_dot_product_attention.default",
}


def check_dtypes(target: str, args, kwargs) -> None:
    """Raise what eager raises for tensors of different dtypes in a SAME_DTYPE op."""
    if target not in SAME_DTYPE:
        return
    flat, _ = tree_flatten((args, kwargs))
    dtypes = list(
        dict.fromkeys(
            t.dtype
            for t in flat
            if isinstance(t, torch.Tensor) and t.dtype != torch.bool  # masks
        )
    )
    if len(dtypes) > 1:
        shown = " and ".join(str(d).removeprefix("torch.") for d in dtypes)
        name = target.split(".")[1]
        raise RuntimeError(f"{name} takes tensors of one dtype, got {shown}")


# Note [Writes into the caller's tensors]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# An in-place op on an input, a parameter or a buffer (`num_batches_tracked.add_(1)`,
# a running mean's update, `cache[:, pos] = k`, `x.mul_(2)`) is recorded like any
# in-place op: as its functional op, whose result the written tensor is bound to,
# so that what reads it after reads the new value (views and other aliases of it
# are derived again from the new value of the whole memory, `_update_aliases`).
# What the caller sees is written back at the return: `Updated.copies` names each
# input, parameter or buffer whose value changed and the value it holds then, and
# the generated code copies it there before it returns (`x.copy_(add)`), as
# AOTAutograd applies the mutations of a functionalized graph's inputs.
#
# Ops that write into arguments other than their first are recorded as PyTorch's
# decomposition of them, whose writes are `copy_`s into those arguments: a batch
# norm in train mode updates its running statistics so, though `native_batch_norm`'s
# schema declares no write.
aten = torch.ops.aten
WRITES_ARGUMENTS = {
    op: decomposition
    for op, decomposition in decomposition_table.items()
    if op
    in (
        aten.native_batch_norm.default,
        aten._native_batch_norm_legit.default,
        aten._batch_norm_with_update.default,
    )
}


def _writes_arguments(func, args, kwargs) -> bool:
    """Whether `func` writes into an argument other than its first: a batch norm
    updating running statistics (training, with running statistics)."""
    if func not in WRITES_ARGUMENTS:
        return False
    if func == aten._batch_norm_with_update.default:
        return True

    def argument(i: int, name: str):
        return args[i] if len(args) > i else kwargs.get(name)

    return bool(argument(5, "training")) and argument(3, "running_mean") is not None


def op_name(func) -> str:
    return str(func)  # "aten.add.Tensor"


# In-place ops whose functional overload has another name: `x.bernoulli_(p)` (a
# float p) is `bernoulli.p`, which draws as it does (timm's drop path fills a fresh
# tensor so)
FUNCTIONAL_OVERLOADS = {
    "aten.bernoulli_.float": torch.ops.aten.bernoulli.p,
    "aten.bernoulli_.Tensor": torch.ops.aten.bernoulli.Tensor,
}


class Recorder(TorchDispatchMode):
    def __init__(self, builder: GraphBuilder, decompositions: dict | None = None):
        super().__init__()
        self.builder = builder
        self.decompositions = decompositions or {}
        self.span: Span | None = None
        # nodes whose origin a rewrite set as the op's own, None included
        # (passes/retrace.py: `recomputed`)
        self.own_origin: set[str] = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        check_dtypes(op_name(func), args, kwargs)
        if func in self.decompositions:
            with self:
                out = self.decompositions[func](*args, **kwargs)
                if out is not NotImplemented:
                    return out
        if _writes_arguments(
            func, args, kwargs
        ):  # as its decomposition, which `copy_`s
            with self:
                return WRITES_ARGUMENTS[func](*args, **kwargs)
        if func._schema.is_mutable:
            return self._functionalize(func, args, kwargs)
        out = on_meta(op_name(func), args, kwargs)
        if isinstance(out, torch.Tensor):
            stride = device_strides(op_name(func), out, args)
            if stride != out.stride():
                out = torch.empty_strided(
                    out.shape, stride, dtype=out.dtype, device=out.device
                )
        self.record(op_name(func), args, kwargs, out)
        return out

    def record(self, target: str, args, kwargs, out) -> None:
        flat, _ = tree_flatten(out)
        checks = target in CHECKS_DATA  # may return nothing: `_linalg_check_errors`
        if not checks and not any(isinstance(t, torch.Tensor) for t in flat):
            return  # metadata-only query; nothing to compute at run time
        ir_args = self._to_ir(tuple(args))
        ir_kwargs = tuple((k, self._to_ir(v)) for k, v in kwargs.items())
        b = self.builder
        if out is None:  # a check of tensor data, run for the error it may raise
            b.add("call", target, ir_args, ir_kwargs, (), self.span)
            return
        if isinstance(out, torch.Tensor):
            meta = TensorMeta.of(out)
            b.bind(out, b.add("call", target, ir_args, ir_kwargs, meta, self.span))
            return
        # an op's result left out (a gradient not asked for) is None: no value
        metas = tuple(Opaque() if t is None else TensorMeta.of(t) for t in out)
        name = b.add("call", target, ir_args, ir_kwargs, metas, self.span)
        for i, t in enumerate(out):
            if t is None:
                continue
            item = b.add(
                "call",
                "getitem",
                (Ref(name), i),
                (),
                metas[i],
                self.span,
                base=f"{name}_{i}",
            )
            b.bind(t, item)

    def _to_ir(self, value: Any) -> Any:
        if isinstance(value, torch.Tensor):
            if value.device.type != "meta":
                if value.numel() == 1 and not self.builder.knows(value):
                    return value.item()  # a Python-created scalar tensor
                raise Unsupported("uses a real (non-meta) tensor constant", self.span)
            return self.builder.ref(value, self.span)
        if isinstance(value, torch.device):
            return DEVICE
        if isinstance(value, (list, tuple)):
            return type(value)(self._to_ir(v) for v in value)
        return value

    def _functionalize(self, func, args, kwargs):
        """Record `x.add_(y)` as `x' = add(x, y)` and rebind x to x'."""
        schema = func._schema
        if (
            any(
                a.alias_info is not None and a.alias_info.is_write and i > 0
                for i, a in enumerate(schema.arguments)
            )
            or "out" in kwargs
        ):
            raise Unsupported(f"{func} writes into an argument", self.span)
        packet = schema.name.split("::")[1]
        functional = getattr(torch.ops.aten, packet.rstrip("_"), None)
        overload = func._overloadname
        if not packet.endswith("_") or functional is None:
            raise Unsupported(f"{func} mutates its input", self.span)
        target = args[0]
        if id(target) not in self.builder._names and self.builder.knows(target):
            self.builder.ref(target, self.span)  # a parameter first read here
        name = self.builder._names.get(id(target))
        node = next((n for n in self.builder.nodes if n.name == name), None)
        base = target._base
        caller = self.builder.owned_by_caller(target)
        if node is None or (
            not caller
            and (
                node.op != "call" or (base is not None and not self.builder.knows(base))
            )
        ):
            raise Unsupported(f"in-place {packet} on an input or parameter", self.span)
        if caller and self.builder.root_of(target) is None:
            # memory of the caller's that no input or parameter is all of (a view
            # fallback code returned): only eager code writes it
            raise Unsupported(
                f"in-place {packet} writes into an input, parameter or buffer",
                self.span,
            )
        fn: Callable | None = FUNCTIONAL_OVERLOADS.get(str(func))
        if fn is None:
            fn = getattr(functional, overload, None)
        if fn is None or (caller and torch.Tag.inplace_view in func.tags):
            # `transpose_`: changes the metadata, not the data; of the caller's
            # tensor, the change would outlive the call
            raise Unsupported(f"{func} changes its input in place", self.span)
        result = fn(*args, **kwargs)
        inplace_view = torch.Tag.inplace_view in func.tags
        if not inplace_view and result.shape != target.shape:
            # `s.addbmm_(a, b)` of a 0-dim `s` resizes it to the product's shape;
            # `x.add_(y)` of a larger `y` raises: eager code does either
            raise Unsupported(
                f"in-place {packet} of a {list(target.shape)} tensor computes "
                f"{list(result.shape)}",
                self.span,
            )
        if not inplace_view and result.dtype != target.dtype:
            # `x.eq_(y)` computes a bool and stores it in x's dtype; a store eager
            # refuses (an integer `div_`) raises there, at run time
            if not torch.can_cast(result.dtype, target.dtype):
                raise Unsupported(
                    f"in-place {packet} stores {result.dtype} into {target.dtype}",
                    self.span,
                )
            self.record(op_name(fn), args, kwargs, result)
            args, kwargs = (result,), {"dtype": target.dtype}
            fn = torch.ops.aten._to_copy.default
            result = fn(*args, **kwargs)
        self.record(op_name(fn), args, kwargs, result)
        if inplace_view:
            # `y.squeeze_(0)` (F.linear of a vector does it): the same data, seen
            # with other sizes and strides from now on, as `target` itself is
            with torch.utils._python_dispatch._disable_current_modes():
                target.as_strided_(
                    result.shape, result.stride(), result.storage_offset()
                )
            self.builder.bind(target, self.builder._names[id(result)])
            return target
        self._update_aliases(target, result)
        # The mutated tensor now holds the functional result.
        self.builder.bind(target, self.builder._names[id(result)])
        if caller:
            self.builder.wrote(target)
        return target

    def _update_aliases(self, target: torch.Tensor, result: torch.Tensor) -> None:
        """After `target` was written (its new value is `result`), every other live
        tensor sharing its memory (a view taken before the write, its base, a
        `detach`) holds new values too: each is re-derived with its own strides and
        offset (`as_strided`) from the new value of the whole memory, which is
        `result` when `target` is all of it and `result` is laid out alike, and
        `result` scattered into the old whole (`as_strided_scatter`) when `target`
        is a part of it. Otherwise (memory no tensor covers, a change of dtype)
        reading one is a graph break. Only memory the variant allocated gets here
        (`owned_by_caller`), so traced offsets are the run-time ones."""
        aliases = self.builder.aliases(target)
        if not aliases:
            return
        whole = next((t for t in [target, *aliases] if covers(t)), None)
        if whole is target and covers(result):
            new = result
        elif whole is not None and whole.dtype == target.dtype:
            new = self._call(
                torch.ops.aten.as_strided_scatter.default,
                whole,
                result,
                list(target.shape),
                list(target.stride()),
                target.storage_offset(),
            )
            if not covers(new):
                new = None
        else:
            new = None
        for alias in aliases:
            if new is None or alias.dtype != target.dtype:
                self.builder.mark_stale(alias)
            else:
                self.rederive(alias, new)

    def rederive(self, alias: torch.Tensor, memory: torch.Tensor) -> None:
        """`alias` read again from `memory`, the new value of all of its memory:
        with its own size, strides and offset (`as_strided`)."""
        view = self._call(
            torch.ops.aten.as_strided.default,
            memory,
            list(alias.shape),
            list(alias.stride()),
            alias.storage_offset(),
        )
        self.builder.bind(alias, self.builder.name_of(view))

    def _call(self, op, *args) -> torch.Tensor:
        """Run `op` on meta tensors and record it."""
        out = op(*args)
        self.record(op_name(op), args, {}, out)
        return out
