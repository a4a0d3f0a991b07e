"""Kernels that write their output over an input nothing reads after them.

Note [Writing over a dead input]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A kernel that reads a buffer for the last time and writes a buffer of the same
layout holds both while it runs: the input is freed after the kernel, the output
allocated before it. In a backward the chain of such kernels over [B, T, 4C]
activations (a GELU's gradient from the gradient of its output) is where a
training step's memory peaks. So the output takes the input's memory:

    mul_21 = linear  # written over: not read after
    _triton.triton_fused_mul_add_tanh_rsub_0[(12288,)](
        view_9, linear, gelu, mul_21, XBLOCK=1024, num_warps=4
    )

when, for an input `linear` and an output `mul_21` of one Triton kernel call:

- both have the same dtype and span the same memory (a [4096, 3072] buffer takes
  the memory of an [8, 512, 3072] one, as a view of it);
- `linear` is memory the program allocated (a buffer, or the result of an extern
  call that allocates its own: a matmul, `linear`), and nothing shares it that is
  read after the call: no view of it (any extern call that may return an alias
  counts as one, all but those with a layout of their own: matmuls, linear), and it
  is not an input, parameter, kept value or result of the program;
- the kernel reads `linear` only where it writes `mul_21` (every load of it and
  every store of the output at one index, one level, unmasked), and the value
  stored depends on every one of those loads: an element is read before it is
  written over, whatever order the compiler gives loads and stores it takes for
  independent. In a reduction kernel the value stored also depends on every
  reduction and scan: it is stored in the last pass over the row, and the
  passes before it, which may load the input again, are done.

Inductor does the same with its in-place buffers. C++ kernels are left alone:
their pointers are `__restrict__`. Only straight-line programs are rewritten (a
region that branches hands its values to the code of its branches).

Note [Extern calls in place]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~
An extern op that writes into a copy of its first argument (`index_put`, which
clones the table and then adds rows into it) runs as its in-place twin
(`index_put_`) where that argument is memory the program allocated (or a view of
all of it) that nothing reads after the call, by the rules above, and the result
is laid out as it is:
the copy is never made (Note [Tied embeddings] in passes/embedding_gradients.py).
On both backends: the op is PyTorch's.

Note [Copies of dead buffers]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
A kernel that only copies a buffer (each element loaded and stored at the same
index, in the same dtype) into a buffer of the same layout is dropped where the
buffer it copies is memory the program allocated that nothing reads after the
copy, by the rules above: the copy takes that memory, as it is. A scatter that
adds writes such a copy of the tensor it adds into before adding (Note
[Scatters] in passes/schedule.py): an embedding's gradient added into
the output layer's (Note [Tied embeddings]) adds into the matmul's result. On
both backends.

A copy of a tensor of the caller's whose value is written back into it (a write
through a view of an input or a buffer, `x[0].mul_(2)`: functionally a copy of x
with row 0 replaced, copied into x at the return) is dropped the same way, and
so is the write back: the writes go into the caller's tensor, as eager makes
them. On the GPU the buffer copied may also be read after the copy, by kernels
that read it only where they write the copy, each element before the store
needs it (`_in_place`): the scatter of `x[0] * 2` reads row 0 of x where it
writes row 0. A chain of such writes (`for r in x: r.mul_(2)`) is judged from its
last copy back, so its buffers all become the caller's tensor. C++ kernels keep
their copies there: their pointers are `__restrict__`.
"""

from __future__ import annotations

from dataclasses import replace

from transpiler.ir.graph import Ref, TensorMeta, Updated, iter_refs
from transpiler.ir.ops import FIXED_LAYOUT
from transpiler.ir.program import (
    Alloc,
    ExternCall,
    Kernel,
    KernelCall,
    Program,
    Stmt,
    Store,
    last_steps,
    operands,
    reads_writes,
)
from transpiler.ir.region import CompiledRegion


def reuse_buffers(region: CompiledRegion) -> CompiledRegion:
    """`region` with each Triton kernel output that can take a dead input's
    memory taking it (Note [Writing over a dead input])."""
    if region.cond is not None or region.loops:
        return region
    program = _reuse(region.program, frozenset(region.live_outs))
    return replace(region, program=program)


# functional extern op -> its in-place twin (Note [Extern calls in place])
IN_PLACE = {"aten.index_put.default": "aten.index_put_.default"}


def reinplace_externs(region: CompiledRegion) -> CompiledRegion:
    """`region` with each extern call of `IN_PLACE` whose first argument is dead
    after it writing into that argument (Note [Extern calls in place])."""
    if region.cond is not None or region.loops:
        return region
    program = _reinplace(region.program, frozenset(region.live_outs))
    return replace(region, program=program)


def drop_dead_copies(
    region: CompiledRegion, in_place_reads: bool = False
) -> CompiledRegion:
    """`region` with each kernel copying a dead buffer dropped, the copy taking
    the buffer's memory (Note [Copies of dead buffers]); or copying a tensor of
    the caller's that its value is written back to. `in_place_reads`: kernels
    may read the buffer where they write the copy (Triton's, whose pointers may
    alias)."""
    if region.cond is not None or region.loops:
        return region
    p = region.program
    kernels = {k.name: k for k in p.kernels}
    steps = list(p.steps)
    shares, owned = _ownership(p, steps, frozenset(region.live_outs))
    kept = frozenset(shares.kept)
    allocs = {s.buffer: i for i, s in enumerate(steps) if isinstance(s, Alloc)}
    back = _written_back(p)
    dropped: set[int] = set()
    in_place: set[tuple[str, str]] = set()  # (caller's tensor, value written there)

    def unread(src: str, out: str, i: int) -> bool:
        """Whether nothing reads `src`'s memory after step `i`, but kernels
        reading it where they write `out`, if they may."""
        return shares.unused_after(src, i) or (
            in_place_reads
            and _read_where_written(p, steps, kernels, shares, src, out, i)
        )

    # last first: a chain of copies (each write through a view of the caller's
    # tensor copies the value before it) joins its buffers before its first copy
    # is judged, whose buffer then holds the value written back
    for i, step in reversed(list(enumerate(steps))):
        if not isinstance(step, KernelCall) or not _copies(kernels[step.kernel]):
            continue
        src, out = step.args
        if allocs.get(out, i) >= i or shares.same(src, out):
            continue
        alloc, as_view = steps[allocs[out]], False
        caller, value = next(
            (back[b] for b in back if shares.same(b, out)), (None, None)
        )
        if (
            caller is not None
            and (caller == src or owned.get(src) == alloc.meta)
            and {n for n in kept if shares.same(n, src)} == {caller}
        ):  # its value goes back to the caller's tensor, which `src` is or
            # shares memory with alone, as it is laid out (the copy loads it
            # where it stores it)
            dead = unread(src, out, i)
            if dead:
                in_place.add((caller, value))
                as_view = value != out  # the buffer of a view of it, seen so
        elif owned.get(src) == alloc.meta:
            dead = not shares.is_kept(src) and unread(src, out, i)
        else:
            dead = False
        if dead:
            steps[allocs[out]] = replace(alloc, reuses=src, as_view=as_view)
            shares.join(src, out)
            dropped.add(i)
    if not dropped:
        return region
    steps = [s for i, s in enumerate(steps) if i not in dropped]
    called = {s.kernel for s in steps if isinstance(s, KernelCall)}
    outputs = p.outputs
    if in_place:  # nothing to copy back: the caller's tensor holds the value
        copies = tuple(
            (t, t if (t.name, v.name) in in_place else v) for t, v in outputs.copies
        )
        outputs = replace(outputs, copies=copies)
        steps = _unread_views_dropped(p, steps, outputs)
    program = replace(
        p,
        steps=tuple(steps),
        kernels=tuple(k for k in p.kernels if k.name in called),
        outputs=outputs,
    )
    return replace(region, program=program)


def _unread_views_dropped(p: Program, steps: list, outputs) -> list:
    """`steps` without the views nothing reads (of a value written back that no
    longer is), last first."""
    kept = {r.name for r in iter_refs(outputs)}
    out = []
    for step in reversed(steps):
        if isinstance(step, ExternCall) and step.is_view and step.out not in kept:
            continue
        out.append(step)
        kept.update(reads_writes(step, p)[0])
    return out[::-1]


def _read_where_written(
    p: Program,
    steps: list,
    kernels: dict,
    shares: _Storage,
    src: str,
    out: str,
    i: int,
) -> bool:
    """Whether each step after `i` that reads or writes `src`'s memory is a call
    of a kernel that takes it once, as `src`, and reads it only where it stores
    `out`, each element before the store needs it (`_in_place`): writing `out`
    over `src` then changes no value a kernel reads."""
    for step in steps[i + 1 :]:
        read, written = reads_writes(step, p)
        if not any(shares.same(n, src) for n in (*read, *written)):
            continue
        if not isinstance(step, KernelCall) or src not in read or out not in written:
            return False
        k = kernels[step.kernel]
        sharing = [n for n in step.args if shares.same(n, src)]
        if k.matmul is not None or sharing != [src]:
            return False
        params = dict(zip(step.args, (a.param for a in (*k.inputs, *k.outputs))))
        if not _in_place(k, params[src], params[out]):
            return False
    return True


def _written_back(p: Program) -> dict[str, tuple[str, str]]:
    """Each buffer whose value the program writes back into a tensor of the
    caller's, and returns nothing else of -> (that tensor, the value written
    back): the buffer itself, or a view of all of it in its order (a slice
    assigned into a cache: the flat buffer its scatter wrote, seen with the
    cache's shape)."""
    outputs = p.outputs
    if not isinstance(outputs, Updated):
        return {}
    seen = {r.name for r in iter_refs((outputs.result, outputs.writes))}
    values = [v for _, v in outputs.copies]
    views = {
        s.out: s
        for s in p.steps
        if isinstance(s, ExternCall)
        and s.is_view
        and s.args
        and isinstance(s.args[0], Ref)
    }
    allocs = {s.buffer: s.meta for s in p.steps if isinstance(s, Alloc)}
    back = {}
    for t, v in outputs.copies:
        if not (isinstance(t, Ref) and isinstance(v, Ref)) or v.name in seen:
            continue
        if values.count(v) > 1:
            continue
        name = v.name
        while name in views and name not in allocs:
            name = views[name].args[0].name
        meta, whole = allocs.get(name), views.get(v.name)
        if meta is None:
            continue
        if whole is not None and not _same_order(whole.meta, meta):
            continue
        back[name] = (t.name, v.name)
    return back


def _same_order(view: TensorMeta, memory: TensorMeta) -> bool:
    """Whether `view` sees all of `memory`'s elements in its order (both dense
    and in order from the start)."""
    return (
        isinstance(view, TensorMeta)
        and view.is_contiguous()
        and memory.is_contiguous()
        and view.offset == memory.offset == 0
        and view.numel == memory.numel
        and view.dtype == memory.dtype
    )


def _copies(k: Kernel) -> bool:
    """Whether `k` copies its one input into its one output, element for element
    at the same index, in one dtype."""
    if len(k.inputs) != 1 or len(k.outputs) != 1 or k.rnumel != 1 or k.matmul:
        return False
    if k.inputs[0].dtype != k.outputs[0].dtype or len(k.body) != 2:
        return False
    load, store = k.body
    return (
        isinstance(load, Stmt)
        and isinstance(store, Store)
        and load.op == "load"
        and len(load.args) == 2
        and store.value == load.name
        and store.index == load.args[1]
        and store.scatter is None
        and store.mask is None
    )


def _reinplace(p: Program, live_outs: frozenset[str]) -> Program:
    steps = list(p.steps)
    if not any(isinstance(s, ExternCall) and s.target in IN_PLACE for s in steps):
        return p
    shares, owned = _ownership(p, steps, live_outs)
    for i, step in enumerate(steps):
        if not isinstance(step, ExternCall) or step.target not in IN_PLACE:
            continue
        table, rest = step.args[0], (step.args[1:], step.kwargs)
        if not isinstance(table, Ref) or step.layout is not None:
            continue
        memory = [m for n, m in owned.items() if shares.same(n, table.name)]
        if (
            memory == [step.meta]  # the table, or a view of all of it
            and shares.dead_after(table.name, i)
            and not any(shares.same(r.name, table.name) for r in iter_refs(rest))
        ):
            steps[i] = replace(step, target=IN_PLACE[step.target])
            shares.join(table.name, step.out)
    return replace(p, steps=tuple(steps))


def _ownership(p: Program, steps: list, live_outs: frozenset[str]):
    """Which names may share memory (`_Storage`), and the memory the program
    allocated, by name: buffers, and the results of extern calls that allocate
    their own (matmuls, linear)."""
    kept = {*p.inputs, *(n for n, _, _ in p.params), *p.kept, *live_outs}
    kept |= {r.name for r in iter_refs(p.outputs)}
    shares = _Storage(kept, last_steps(p, steps))
    for step in steps:
        if (
            isinstance(step, ExternCall)
            and step.target not in FIXED_LAYOUT
            and step.target not in IN_PLACE  # a copy: shares nothing
        ):
            for r in iter_refs((step.args, step.kwargs)):
                shares.join(r.name, step.out)  # may be a view of it
    owned = {s.buffer: s.meta for s in steps if isinstance(s, Alloc)}
    owned |= {
        s.out: s.meta
        for s in steps
        if isinstance(s, ExternCall)
        and s.target in FIXED_LAYOUT
        and isinstance(s.meta, TensorMeta)
    }
    return shares, owned


def _reuse(p: Program, live_outs: frozenset[str]) -> Program:
    kernels = {k.name: k for k in p.kernels}
    steps = list(p.steps)
    shares, owned = _ownership(p, steps, live_outs)
    allocs = {s.buffer: i for i, s in enumerate(steps) if isinstance(s, Alloc)}
    for i, step in enumerate(steps):
        if not isinstance(step, KernelCall):
            continue
        kernel = kernels[step.kernel]
        if kernel.matmul is not None:
            continue
        n = len(kernel.inputs)
        for out_arg, out in zip(kernel.outputs, step.args[n:]):
            if out not in allocs or steps[allocs[out]].reuses is not None:
                continue  # (memory of its own already: the caller's tensor)
            meta = steps[allocs[out]].meta
            for in_arg, name in zip(kernel.inputs, step.args[:n]):
                memory = owned.get(name)
                if (
                    memory is not None
                    and _fits(memory, meta, out in shares.kept)
                    and shares.dead_after(name, i)
                    and [a for a in step.args if shares.same(a, name)] == [name]
                    and _in_place(kernel, in_arg.param, out_arg.param)
                ):
                    steps[allocs[out]] = replace(
                        steps[allocs[out]], reuses=name, as_view=memory != meta
                    )
                    shares.join(name, out)
                    break
    return replace(p, steps=tuple(steps))


class _Storage:
    """Which names may share memory, and the last step reading or writing any of
    them; a group holding a name the program must keep is never dead."""

    def __init__(self, kept: set[str], last: dict[str, int]):
        self.root: dict[str, str] = {}
        self.last = last
        self.kept = kept

    def find(self, name: str) -> str:
        while self.root.get(name, name) != name:
            name = self.root[name]
        return name

    def join(self, a: str, b: str) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.root[rb] = ra
            self.last[ra] = max(self.last.get(ra, -1), self.last.get(rb, -1))
            if rb in self.kept:
                self.kept.add(ra)

    def same(self, a: str, b: str) -> bool:
        return self.find(a) == self.find(b)

    def is_kept(self, name: str) -> bool:
        return self.find(name) in self.kept

    def unused_after(self, name: str, i: int) -> bool:
        return self.last.get(self.find(name), -1) <= i

    def dead_after(self, name: str, i: int) -> bool:
        return not self.is_kept(name) and self.unused_after(name, i)


def _fits(memory: TensorMeta, meta: TensorMeta, returned: bool) -> bool:
    """Whether a buffer of `meta` can take the memory of one of `memory`: the
    same dtype over the same elements (the kernel's indices say they line up),
    seen as a view of it (not recorded as one: never for a value returned)."""
    if memory == meta:
        return True
    return (
        not returned
        and memory.dtype == meta.dtype
        and memory.offset == meta.offset == 0
        and _extent(memory) == _extent(meta)
    )


def _extent(m: TensorMeta) -> int:
    return m.offset + 1 + sum((n - 1) * s for n, s in zip(m.shape, m.stride))


def _in_place(k: Kernel, param: str, out: str) -> bool:
    """Whether `k` reads its parameter `param` only where it stores `out`, each
    such read before the store needs it (Note [Writing over a dead input])."""
    stores = [s for s in k.body if isinstance(s, Store) and s.buffer == out]
    loads = [
        s
        for s in k.body
        if isinstance(s, Stmt) and s.op == "load" and s.args[0] == param
    ]
    if not stores or not loads:
        return False
    where = (stores[0].index, stores[0].level)
    if any((s.index, s.level) != where for s in stores):
        return False
    if any(len(s.args) != 2 or (s.args[1], s.level) != where for s in loads):
        return False
    needs = _needs(k)
    passes = [s.name for s in k.body if isinstance(s, Stmt) and s.op in _PASSES]
    return all(
        set(needs[store.value]) >= {*(load.name for load in loads), *passes}
        for store in stores
    )


_PASSES = ("reduce", "scan")  # ops that may end a pass over the row


def _needs(k: Kernel) -> dict[str, set[str]]:
    """Each statement of `k` -> the statements its value depends on, itself
    included."""
    needs: dict[str, set[str]] = {}
    for s in k.body:
        if isinstance(s, Stmt):
            deps = {s.name}
            for a in operands(s):
                deps |= needs.get(a, set())
            needs[s.name] = deps
    return needs


__all__ = ["drop_dead_copies", "reinplace_externs", "reuse_buffers"]
