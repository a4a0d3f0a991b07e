"""Schedule: turn fused groups and extern ops into a `Program`.

Before:  group 0 (pointwise, 8 elements): add, relu -- realized: relu
After:   kernel fused_add_relu_0(in_ptr0, in_ptr1, out_ptr0), xnumel=8:
             tmp0 = load(in_ptr0, x);  tmp1 = load(in_ptr1, x)
             tmp2 = add(tmp0, tmp1);   tmp3 = relu(tmp2);  store(out_ptr0, x, tmp3)
         steps: relu = alloc(f32[2,4]); fused_add_relu_0(a, b, relu); return relu

Steps run in a topological order of their dependencies, ties broken by source order.
Kernels whose bodies are identical are emitted once and called by name.

Note [Rounding casts]
~~~~~~~~~~~~~~~~~~~~~
Kernels compute f16/bf16 values in f32 (`ops.compute_dtype`), so a cast to one
changes no computed dtype, yet must still round: `x.to(torch.bfloat16).float()` is
`x` rounded to bf16, not `x`. A cast node to f16/bf16 from another dtype is kept
unrounded in `values` (a store to its f16/bf16 buffer rounds anyway) and marked in
`rounded`; every op of the kernel that reads it reads it through a `round_bf16` /
`round_f16` statement (`tmp1 = tmp0.to(tl.bfloat16).to(tl.float32)`), emitted once.
A literal is rounded here instead. Other narrowing casts (f64 to f32, float to int,
int64 to int32, anything to bool) change the computed dtype: a `cast` statement.

A cast a decomposition made (the node's `origin` is set) does not round: it is the
op's own result in the half type after computing in f32, as `silu`'s is
(`x.float() * sigmoid(x.float())`, then `.to(bf16)`), and kernels round an op's
result only where it is stored, like any other op's in a fused chain (`g * up` of
bf16 tensors is not rounded in the middle of a kernel either). Only a cast of the
program's own, `x.to(torch.bfloat16)`, rounds where it sits.

Note [Ranges in kernels]
~~~~~~~~~~~~~~~~~~~~~~~~
`torch.arange(start, end, step)` of ints is its position: element i is
`start + step * i`, computed in int64 by the kernel that reads it (position ids,
the positions a one-per-row scatter compares with) or by a kernel of its own where
an extern call reads it, never a call of `torch.arange` between kernels. It is
exact in any result dtype, as eager's. A reader reads it in place: where a
buffer of it would be read (through views: `pos[None, :]`, an expand), the
address is the position, so the value is computed there (`x1` in the loop over
a row), and passes/recompute.py counts a range as a leaf, like a buffer, so a
value of it (`pos < n`) is recomputed where it is read broadcast. A data
movement op (a slice, a flip) or a gather reads it from memory, as does an
extern call, for which a kernel of its own writes it.

Two cases stay a call of `torch.arange`: a range of floats, which eager's
kernels compute in their own way (in double on the CPU, then rounded) and a
kernel would have to match bit for bit; and a range whose partial values may
pass int32, the type of a Triton kernel's positions.

Note [Variance]
~~~~~~~~~~~~~~~
A variance is computed in two passes over the row, never as E[x^2] - E[x]^2, which
loses every digit to cancellation when the mean is large against the spread. The
plain two-pass form, sum((x - m)^2) with m = sum(x) / k, still loses some: an f32 sum
of values near 1000 is off by a few ulps of the total, so m is off by some e, and
the sum of squares grows by k * e^2 (0.1% of the variance of 1000 + 1e-3 * randn).
The corrected two-pass algorithm (Chan, Golub and LeVeque, "Algorithms for computing
the sample variance", 1983) also sums the deviations d = x - m, in the same pass:
sum(d) / k is e, the mean is m + e, and sum(d^2) - sum(d) * e is the sum of squares
about it, as accurate as eager's Welford reductions. A Triton kernel whose row
does not fit in a block computes the same sums in one loop over the row (Note
[Welford] in codegen/triton.py).

Note [Scans]
~~~~~~~~~~~~
`cumsum` and `cumprod` are per-element values of a kernel whose rows are those of a
reduction along the scanned dimension (Note [Reduction order] in fuse.py): element
`r` of a row is the sum (product) of the row's elements 0..r, in the result's
dtype (eager's int64 for integers and bools), the input cast to it first. Producers
and consumers of the same shape join the kernel as they join a reduction's
(`position_ids = mask.cumsum(-1) - 1` is one kernel), and so do reductions of the
same rows. A scan's statement is level "r" like any per-element value; each loop
that computes it starts the row's running value anew. The backends carry that
value across the row: Triton scans a block (`tl.cumsum`) and adds the carry, the
last element of the block before; C++ keeps it in a register, in double for
floats as eager's CPU kernel does, and adds a group of elements' own running sum
to it so that the loop waits for one add per group, not one per element.

Note [Scatters]
~~~~~~~~~~~~~~~
`x.index_put(indices, v, accumulate=True)` adds each value of `v` (broadcast to
the shape of `x[indices]`) into the element of a copy of `x` that its position
indexes; repeated indices add up. `index_add` and `scatter_add` decompose into
it (passes/decompose.py), and an embedding's gradient into its masked twin,
`_unsafe_masked_index_put_accumulate`, which adds only where a mask holds
(passes/embedding_gradients.py). Without `accumulate` (`x[idx] = v`), the value
is written instead: `index_copy`, `index_fill` and `scatter` decompose into
that. It is a kernel of its own (kind "scatter" in fuse.py; nothing joins it)
over the positions of `x[indices]`: the indices loaded there (a negative one
counted from the end, as `x[indices]` counts it), the value, and an add (a
store) of the value into the result at the address they give, masked to
indices in range and to the mask if any. passes/check_indices.py raises on an
index out of range before, on a GPU asynchronously: the mask is what keeps the
kernel inside the tensor. Before it a kernel writes the copy of `x`; none where
`x` is memory that nothing reads after (Note [Copies of dead buffers] in
passes/reuse_buffers.py): the matmul's result a tied embedding's gradient adds
into, a zero-filled table, a cache the caller's tensor is written back to.

On a GPU several programs may add into one element at once: `tl.atomic_add`
(relaxed: only the sums are read, after the kernel), for the dtypes Triton adds
atomically (`ATOMIC_TYPES` in ir/ops.py; bf16 and int64 stay calls into
PyTorch). The order of a float sum's terms then varies from run to run, as it
does in eager's `index_add` on CUDA (eager's `index_put` and embedding backward
sort the indices instead; Inductor adds atomically too). The C++ kernel adds one
value after another in the order of the positions, on one thread, as eager's
CPU kernel of `index_put` does, with no `omp simd` (two adds may meet at one
element); a bf16 or f16 element is rounded after each add, as there. Writes to
one element from two positions leave either value: PyTorch documents the result
as undefined then. The C++ kernel writes them in order, as eager's CPU kernel
does below its grain size (the last one stays); a GPU kernel, any.

`x.index_reduce(dim, index, source, "amax")` keeps the larger of each element and
each value scattered into it ("amin": the smaller), x included: the same kernel,
whose store is `tl.atomic_max` (`tl.atomic_min`) on a GPU, for the dtypes of
`EXTREMA_TYPES` in ir/ops.py, and a compare in C++. `scatter_reduce`'s maxima and
minima are that on the flattened x, at each value's address; without x, after a
scatter writing the identity there (passes/decompose.py).

Note [Extrema checked first]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~
An atomic maximum costs more than an add: Triton keeps a float's with two
integer atomics, by the value's sign (Note [Extrema of NaNs]). But an element of
an amax scatter only grows while the kernel runs: a plain load of it reads what
it was at some point, at most what it is, and a value not above that would
change nothing. So the GPU kernel loads the element first, and makes the atomic
only where the value beats it (or is NaN). A value that loses to one of its
element's earlier ones is only a load: of ten random messages a node, about
three set a maximum on the way (1 + 1/2 + ... + 1/10). On an H200, the maximum
of 1M messages of 64 f32 into 100K nodes (PyTorch Geometric's max aggregation)
took 533 us with `tl.atomic_max` alone (one int32 atomic maximum: 360; the same
values added by `tl.atomic_add`: 147), 110 with the load first; eager's
scatter_reduce, a compare-and-swap loop, 300. Values in ascending order each
beat their element and pay the load on top (adversarial for this: an atomic
each, as without it).

Note [Extrema of NaNs]
~~~~~~~~~~~~~~~~~~~~~~
Eager's maximum (minimum) scatter keeps a NaN: a NaN value wins, and a NaN
already in the element stays. Triton keeps a float's maximum atomically by its
bits as an integer: a signed maximum where the value is not negative, an
unsigned minimum where it is. A NaN whose sign bit is clear is then above every
float, and one whose sign bit is set below every float (the minimum: the
reverse). So the kernels of an amax scatter give every NaN, of the values and of
the copy of x, the sign bit clear, and those of an amin set, by a select of a
NaN constant made from its bits (an arithmetic op may give a NaN any sign). The
C++ kernel compares (`max_nan`), whatever the sign. On a GPU, the copy of x is
then not a plain copy, and always made: x's own memory could hold a NaN of the
other sign.
"""

from __future__ import annotations

import heapq
import math
import re
from typing import NamedTuple

import torch

from runtime_shim.modules import self_path
from transpiler.ir import positions
from transpiler.ir.graph import (
    Graph,
    Node,
    Ref,
    TensorMeta,
    iter_refs,
)
from transpiler.ir.ops import (
    EXTREMA,
    GATHERS,
    MOVEMENT,
    POINTWISE,
    RANGES,
    REDUCTIONS,
    ROUNDING,
    SCANS,
    arange_of,
    bind_args,
    compute_dtype,
    correction,
)
from transpiler.ir.program import (
    MATMUL_OPERANDS,
    Alloc,
    Const,
    ExternCall,
    FallbackCall,
    Index,
    Kernel,
    KernelArg,
    KernelCall,
    KernelNames,
    LoopCall,
    Program,
    Stmt,
    Store,
    Term,
    body_key,
)
from transpiler.passes.fuse import (
    KERNEL_KINDS,
    Fusion,
    Group,
    put_how,
    put_parts,
    put_shape,
    reaches,
    reduction_spec,
    resolve,
    sources,
)
from transpiler.passes.places import Place


def schedule(graph: Graph, fusion: Fusion, names: KernelNames) -> Program:
    nodes = graph.by_name()
    units = _units(graph, fusion, nodes)
    steps: list = []
    kernels: list[Kernel] = []

    def launch(kernel: Kernel, allocated: frozenset[str] = frozenset()) -> None:
        key = body_key(kernel)
        name, _ = names.name_for(kernel.name, key)
        kernel = Kernel(
            name,
            *(
                getattr(kernel, f)
                for f in ("xnumel", "rnumel", "inputs", "outputs", "body", "spans")
            ),
        )
        # every kernel it calls, those an earlier program named too (the
        # module writes each once: the first program's)
        if all(k.name != name for k in kernels):
            kernels.append(readable_params(kernel, nodes))
        for out in kernel.outputs:
            if out.buffer not in allocated:  # a scatter's: written before
                steps.append(Alloc(out.buffer, nodes[out.buffer].tensor_meta))
        args = tuple(a.buffer for a in kernel.inputs + kernel.outputs)
        steps.append(KernelCall(name, args, kernel.spans))

    for unit in _toposort(units, graph, fusion, nodes):
        if isinstance(unit, Group):
            scatters = [n for n in unit.nodes if fusion.kinds[n] == "scatter"]
            for n in scatters:  # Note [Scatters]: the copy it adds into, first
                launch(copy_kernel(nodes[n], fusion, nodes))
            kernel = KernelBuilder(unit, fusion, nodes).build()
            launch(kernel, allocated=frozenset(scatters))
        else:
            node = nodes[unit]
            call = STEP_KINDS.get(node.op, ExternCall)
            steps.append(
                call(
                    node.name,
                    node.target,
                    node.args,
                    node.kwargs,
                    node.meta,
                    node.span,
                    fusion.kinds[node.name] == "view",
                )
            )
    inputs = tuple(n.name for n in graph.nodes if n.op == "input")
    params = tuple(
        (n.name, self_path(n.target), n.tensor_meta)
        for n in graph.nodes
        if n.op == "param"
    )
    kernel_ops = sum(
        fusion.kinds[n] in (*KERNEL_KINDS, "scatter")
        for g in fusion.groups
        for n in g.nodes
    ) + sum(kind == "inline" for kind in fusion.kinds.values())
    return Program(
        inputs, params, tuple(steps), tuple(kernels), graph.outputs, kernel_ops
    )


def _units(graph: Graph, fusion: Fusion, nodes) -> list:
    """Groups, plus the nodes the wrapper computes itself (externs, needed views)."""
    wrapper: set[str] = set()

    def need(ref: Ref) -> None:
        name = ref.name
        while fusion.kinds[name] == "view" and name not in wrapper:
            wrapper.add(name)
            name = nodes[name].args[0].name

    for n in graph.nodes:
        kind = fusion.kinds[n.name]
        if kind in ("extern", "extern_item"):
            wrapper.add(n.name)
            for r in n.refs():
                need(r)
    for r in iter_refs(graph.outputs):
        need(r)
    units: list = []
    seen: set[int] = set()
    for n in graph.nodes:
        gid = fusion.group_of.get(n.name)
        if gid is not None and gid not in seen:
            seen.add(gid)
            units.append(fusion.groups[gid])
        elif n.name in wrapper:
            units.append(n.name)
    return units


# index checks (passes/check_indices.py): ops whose result nothing reads
CHECKS = ("aten._assert_async.default", "aten._assert_async.msg")


def _checks_first(units: list, deps: list[set[int]], position, fusion, nodes) -> None:
    """Make a kernel of scatters run after every index check the program makes
    before its last scatter (Note [Sibling scatters] in fuse.py): nothing reads
    a check's result, so nothing else orders them, and a kernel that also
    computes the values it scatters, or another scatter, would run where its
    first statement could. A check that reads what the kernel computes stays
    after it."""
    deps_of = dict(enumerate(deps))  # the same sets, as they grow
    checks = [
        j
        for j, u in enumerate(units)
        if not isinstance(u, Group) and nodes[u].target in CHECKS
    ]
    for i, u in enumerate(units):
        if not isinstance(u, Group):
            continue
        scattered = [position[n] for n in u.nodes if fusion.kinds[n] == "scatter"]
        if not scattered:
            continue
        for j in checks:
            if position[units[j]] < max(scattered) and not reaches(j, i, deps_of):
                deps[i].add(j)


def _toposort(units: list, graph: Graph, fusion: Fusion, nodes) -> list:
    position = {n.name: i for i, n in enumerate(graph.nodes)}
    owner: dict[str, int] = {}
    for i, u in enumerate(units):
        for name in (u.nodes if isinstance(u, Group) else (u,)):
            owner[name] = i
    deps: list[set[int]] = []
    for i, u in enumerate(units):
        d: set[int] = set()
        for name in (u.nodes if isinstance(u, Group) else (u,)):
            for r in sources(nodes[name], nodes, fusion.kinds):
                _, _, root = resolve(r, nodes, fusion.kinds)
                # a kernel reads a view through its index arithmetic, from the root
                # buffer: it needs the root, not the wrapper's view of it
                via_view = isinstance(u, Group) and fusion.kinds[r.name] == "view"
                for dep in (root,) if via_view else (r.name, root):
                    j = owner.get(dep)
                    if j is not None and j != i:
                        d.add(j)
        deps.append(d)
    _checks_first(units, deps, position, fusion, nodes)
    users: list[list[int]] = [[] for _ in units]
    for i, d in enumerate(deps):
        for j in d:
            users[j].append(i)
    first = [
        min(position[n] for n in (u.nodes if isinstance(u, Group) else (u,)))
        for u in units
    ]
    waiting = [len(d) for d in deps]
    ready = [(first[i], i) for i in range(len(units)) if waiting[i] == 0]
    heapq.heapify(ready)
    order = []
    while ready:
        _, i = heapq.heappop(ready)
        order.append(units[i])
        for j in users[i]:
            waiting[j] -= 1
            if waiting[j] == 0:
                heapq.heappush(ready, (first[j], j))
    assert len(order) == len(units), "cycle between kernels"
    return order


# ops whose scatters are named after them (Note [Scatters]); others `index_put`
NAMED_SCATTERS = (
    "index_add",
    "scatter_add",
    "embedding_dense_backward",
    "index_copy",
    "index_fill",
    "scatter",
    "scatter_reduce",
)


class Mask(NamedTuple):
    """A bool statement, and the kernel's dimensions it varies along."""

    name: str
    dims: frozenset[int]


class KernelBuilder:
    """Builds one kernel's statements from a group, reading and writing buffers."""

    def __init__(self, group: Group, fusion: Fusion, nodes: dict[str, Node]):
        self.group = group
        self.fusion = fusion
        self.nodes = nodes
        self.body: list[Stmt | Store] = []
        self.cse: dict[tuple, str] = {}
        self.values: dict[str, str] = {}  # graph node -> statement name
        self.rounded: dict[str, torch.dtype] = {}  # Note [Rounding casts]
        self.inputs: dict[str, KernelArg] = {}
        self.outputs: list[KernelArg] = []
        self.order = group.order or _memory_order(group, fusion, nodes)

    def build(self) -> Kernel:
        g = self.group
        for name in g.nodes:
            node = self.nodes[name]
            kind = self.fusion.kinds[name]
            if kind == "pointwise" and node.target in MOVEMENT:
                self.values[name] = self.movement(node)
            elif kind == "pointwise" and node.target in GATHERS:
                self.values[name] = self.indirect(node)
            elif kind == "pointwise":
                self.values[name] = self.pointwise(node)
            elif kind == "reduction":
                self.reduction(node)
            elif kind == "scan":
                self.values[name] = self.scan(node)
            elif kind == "scatter":
                self.scatter(node)
                continue
            if name in self.fusion.realized:
                self.store(node)
        spans = []
        for name in g.nodes:
            span = self.nodes[name].span
            if span is not None and span not in spans:
                spans.append(span)
        return Kernel(
            self._name(),
            g.rows,
            g.rnumel,
            tuple(self.inputs.values()),
            tuple(self.outputs),
            tuple(self.body),
            tuple(spans),
        )

    def _name(self) -> str:
        labels: list[str] = []
        for name in self.group.nodes:
            node = self.nodes[name]
            if node.target == "getitem":
                continue
            label = node.origin or node.target.split(".")[1]
            if self.fusion.kinds[name] == "scatter" and label not in NAMED_SCATTERS:
                label = "index_put"  # not the `add` a tied embedding's came from
            label = label.lstrip("_")
            if label not in labels:
                labels.append(label)
        return "fused_" + "_".join(labels[:4])

    # ---- statements -----------------------------------------------------------

    def emit(self, op: str, args: tuple, dtype, level: str, reduce=None) -> str:
        key = (op, args, dtype, level, reduce)
        if key in self.cse:
            return self.cse[key]
        name = f"tmp{sum(isinstance(s, Stmt) for s in self.body)}"
        self.body.append(Stmt(name, op, args, dtype, level, reduce))
        self.cse[key] = name
        return name

    def dtype_of(self, name: str) -> torch.dtype:
        return next(
            s.dtype for s in self.body if isinstance(s, Stmt) and s.name == name
        )

    def cast(self, value, dtype, level: str):
        if isinstance(value, Const):
            return Const(value.value, dtype)
        if self.dtype_of(value) == dtype:
            return value
        return self.emit("cast", (value,), dtype, level)

    def level_of(self, numel: int) -> str:
        g = self.group
        return "r" if g.rnumel > 1 and numel == g.rows * g.rnumel else "x"

    def operand(self, value, shape: tuple[int, ...], level: str):
        """A statement name (or Const) for an argument read at `shape`'s positions."""
        if not isinstance(value, Ref):
            return Const(value, _scalar_dtype(value))
        how, _, root = resolve(value, self.nodes, self.fusion.kinds)
        if how == "inline":  # computed here (Note [Places])
            view = self.nodes[value.name].tensor_meta
            return self.read_at(value, Place.reading(view.shape, shape), level, None)
        if how == "virtual" and self.fusion.group_of.get(root) == self.group.id:
            if root in self.rounded:  # Note [Rounding casts]
                meta = self.nodes[root].tensor_meta
                return self.emit(
                    ROUNDING[self.rounded[root]],
                    (self.values[root],),
                    compute_dtype(meta.dtype),
                    self.level_of(meta.numel),
                )
            return self.values[root]
        # Read `root`'s buffer through the ref's own meta: a view's strides address
        # its base's storage, and a contiguous reshape's shape is the one read here.
        view = self.nodes[value.name].tensor_meta
        base = self.nodes[root].tensor_meta
        arg = self.input_arg(root)
        index = self.index(shape, level, view, view.offset - base.offset)
        return self.emit("load", (arg.param, index), compute_dtype(base.dtype), level)

    def input_arg(self, root: str) -> KernelArg:
        """The kernel parameter through which `root`'s buffer is read."""
        arg = self.inputs.get(root)
        if arg is None:
            dtype = self.nodes[root].tensor_meta.dtype
            arg = KernelArg(f"in_ptr{len(self.inputs)}", root, dtype)
            self.inputs[root] = arg
        return arg

    def index(self, shape, level: str, view: TensorMeta, offset: int) -> Index:
        """Address of `view`'s element at each flat position of `shape` (broadcast)."""
        g = self.group
        pad = len(shape) - len(view.shape)
        terms: list[Term] = []
        inner = 1
        # a reduction's order permutes its per-element values only: per-row ones
        # are in the order of the dimensions it keeps (Note [Reduction order])
        ordered = len(shape) == len(self.order) and (level == "r" or g.rnumel == 1)
        order = self.order if ordered else range(len(shape))
        for d in reversed(order):
            size, vd = shape[d], d - pad
            stride = view.stride[vd] if vd >= 0 and view.shape[vd] != 1 else 0
            if size != 1 and stride != 0:
                if level == "r" and inner * size > g.rnumel > inner:
                    # a dimension straddling rows (fuse.splits): some of its
                    # steps within the row, the rest from one row to the next
                    within = g.rnumel // inner
                    terms.append(Term("r", inner, within, stride))
                    terms.append(Term("x", 1, size // within, stride * within))
                elif level == "r" and inner < g.rnumel:
                    terms.append(Term("r", inner, size, stride))
                elif level == "r":
                    terms.append(Term("x", inner // g.rnumel, size, stride))
                else:
                    terms.append(Term("x", inner, size, stride))
            inner *= size
        return Index(offset, tuple(_coalesce(reversed(terms))))

    def pointwise(self, node: Node, read=None, level: str | None = None) -> str:
        row = POINTWISE[node.target]
        meta = node.tensor_meta
        level = level or self.level_of(meta.numel)
        if node.target in RANGES:
            return self.iota(node, level)
        read = read or self.operand
        values = [read(node.args[i], meta.shape, level) for i in row.operands]
        out = compute_dtype(meta.dtype)
        if row.kind == "compare":
            op_dtype = compute_dtype(_promote(node, row.operands, self.nodes))
            values = [self.cast(v, op_dtype, level) for v in values]
        elif row.kind == "where":
            values = [self.cast(values[0], torch.bool, level)] + [
                self.cast(v, out, level) for v in values[1:]
            ]
        else:
            values = [self.cast(v, out, level) for v in values]
        if row.kind == "cast" and self._rounds(node, row):
            if isinstance(values[0], Const):
                values[0] = _rounded(values[0], meta.dtype)
            else:
                self.rounded[node.name] = meta.dtype
        if row.op == "identity":
            return (
                values[0]
                if isinstance(values[0], str)
                else self.emit("identity", tuple(values), out, level)
            )
        return self.emit(row.op, tuple(values), out, level)

    def iota(self, node: Node, level: str) -> str:
        """`torch.arange(start, end, step)` of ints: `start + step * i` at each
        position i, in int64, then cast to the result's dtype (Note [Ranges in
        kernels])."""
        meta = node.tensor_meta
        unit = TensorMeta(meta.shape, (1,), 0, torch.int64)
        return self.iota_at(node, self.index(meta.shape, level, unit, 0), level)

    def iota_at(self, node: Node, index: Index, level: str) -> str:
        """Range `node`'s element at `index`, its position in the range."""
        start, step, _ = arange_of(node)
        value = self.emit("index", (index,), torch.int64, level)
        if step != 1:
            value = self.emit(
                "mul", (value, Const(step, torch.int64)), torch.int64, level
            )
        if start != 0:
            value = self.emit(
                "add", (value, Const(start, torch.int64)), torch.int64, level
            )
        return self.cast(value, compute_dtype(node.tensor_meta.dtype), level)

    def movement(self, node: Node) -> str:
        """A data movement op: each piece of the result a load of an input at
        positions shifted or reversed from the result's, masked to the piece, the
        pieces chosen by `where` (Note [Data movement in kernels])."""
        shape = node.tensor_meta.shape
        level = self.level_of(math.prod(shape))
        return self.moved(node, Place.reading(shape, shape), level, None)

    def moved(self, node: Node, place: Place, level: str, mask: Mask | None) -> str:
        """Data movement `node` at `place`, where `mask` holds (None: everywhere)."""
        out = compute_dtype(node.tensor_meta.dtype)
        pieces, fill = _pieces(node, self.nodes)
        value = None if fill is None else Const(fill, out)
        for source, maps, bounds in pieces:
            within = self.within(place, level, bounds)
            if within is False:
                continue  # no position of `place` lies in the piece
            both = self.both_masks(mask, within, level)
            load = self.read_at(source, place.moved(maps), level, both)
            load = self.cast(load, out, level)
            if value is None or within is None:  # (no mask: the piece is everywhere)
                value = load
            else:
                value = self.emit("where", (within.name, load, value), out, level)
        return value

    def within(self, place: Place, level: str, bounds: dict):
        """Whether each position's coordinates at `place` lie within `bounds`
        ({dim: (lo, hi)}): a Mask, None where they always do, False where they
        never do."""
        conditions, dims = [], frozenset()
        for d, (lo, hi) in sorted(bounds.items()):
            low, high = place.span(d)
            if high < lo or low >= hi:
                return False
            if lo <= low and high < hi:
                continue
            coord = self.emit(
                "index",
                (self.index(place.at, level, place.coordinate(d), place.offsets[d]),),
                torch.int64,
                level,
            )
            dims |= place.varies(d)
            if low < lo:
                lo = Const(lo, torch.int64)
                conditions.append(self.emit("ge", (coord, lo), torch.bool, level))
            if high >= hi:
                hi = Const(hi, torch.int64)
                conditions.append(self.emit("lt", (coord, hi), torch.bool, level))
        mask = conditions[0] if conditions else None
        for c in conditions[1:]:
            mask = self.emit("logical_and", (mask, c), torch.bool, level)
        return None if mask is None else Mask(mask, dims)

    def both_masks(self, a: Mask | None, b: Mask | None, level: str) -> Mask | None:
        """Masks `a` and `b`, either None for none."""
        if a is None or b is None:
            return b if a is None else a
        name = self.emit("logical_and", (a.name, b.name), torch.bool, level)
        return Mask(name, a.dims | b.dims)

    def read_at(
        self, ref: Ref, place: Place, level: str, mask: Mask | None, operand=False
    ) -> str:
        """`ref` at `place` where `mask` holds (Note [Places]): loaded from
        memory, or computed there where it is an "inline" value. An `operand` of
        a value computed there that is broadcast along what the mask varies with
        (a channel's weight in a window) is loaded without it."""
        how, _, root = resolve(ref, self.nodes, self.fusion.kinds)
        view = self.nodes[ref.name].tensor_meta
        base = self.nodes[root].tensor_meta
        node = self.nodes[root]
        if how == "inline" and node.target in RANGES:
            # Note [Ranges in kernels]: the address its buffer would be read at
            meta = place.meta(view)
            return self.iota_at(
                node, self.index(place.at, level, meta, meta.offset), level
            )
        if how == "inline":
            if root != ref.name:
                place = place.through(view, base)
            return self.computed_at(node, place, level, mask)
        meta = place.meta(view)
        if (
            operand
            and mask is not None
            and place.inside(view)
            and not any(meta.stride[i] for i in mask.dims)
        ):
            mask = None
        arg = self.input_arg(root)
        index = self.index(place.at, level, meta, meta.offset - base.offset)
        args = (arg.param, index) + ((mask.name,) if mask is not None else ())
        return self.emit("load", args, compute_dtype(base.dtype), level)

    def computed_at(self, node: Node, place: Place, level: str, mask) -> str:
        """Pointwise or data movement `node` computed at `place`, what it reads
        read there too (Note [Places])."""
        if node.target in MOVEMENT:
            return self.moved(node, place, level, mask)

        def read(value, _shape, _level):
            if not isinstance(value, Ref):
                return Const(value, _scalar_dtype(value))
            shape = self.nodes[value.name].tensor_meta.shape
            return self.read_at(value, place.operand(shape), level, mask, True)

        return self._rounded_value(node, self.pointwise(node, read, level), level)

    def indirect(self, node: Node) -> str:
        """An indirect load (Note [Indirect loads]): the index at each position of
        the result, then the input there, masked to indices in range."""
        meta = node.tensor_meta
        shape, level = meta.shape, self.level_of(meta.numel)
        x = node.args[0]
        x_shape = self.nodes[x.name].tensor_meta.shape
        if node.target == "aten.gather.default":
            dim = node.args[1] % len(x_shape)
            # the index's dimension j is the result's j
            indices = [(node.args[2], dim, list(range(len(x_shape))))]
            x_at = [None if d == dim else d for d in range(len(x_shape))]
        else:
            indices, x_at = self.index_places(x, node.args[1])
        loaded, ok = [], None
        wraps = node.target != "aten.gather.default"  # counted from the end
        for index, dim, index_at in indices:
            at = (index, shape, level, index_at)
            i, within = self.loaded_index(*at, x_shape[dim], wraps)
            ok = self.both(ok, within, level)
            loaded.append((i, dim))
        value = self.gathered(x, shape, level, x_at, tuple(loaded), ok)
        return self.cast(value, compute_dtype(meta.dtype), level)

    def loaded_index(self, index: Ref, shape, level: str, at, size: int, wraps: bool):
        """Index tensor `index` loaded at each position of `shape` (`placed_load`)
        into a dimension of `size`, in int64, and whether it is in range there
        (None: positions known in range, ir/positions.py); with `wraps`, a
        negative index counted from the end."""
        i = self.cast(self.placed_load(index, shape, level, at), torch.int64, level)
        if _in_range(index, size, self.nodes):
            return i, None
        zero, n = Const(0, torch.int64), Const(size, torch.int64)
        if wraps:
            below = self.emit("lt", (i, zero), torch.bool, level)
            wrapped = self.emit("add", (i, n), torch.int64, level)
            i = self.emit("where", (below, wrapped, i), torch.int64, level)
        low = self.emit("ge", (i, zero), torch.bool, level)
        high = self.emit("lt", (i, n), torch.bool, level)
        return i, self.emit("logical_and", (low, high), torch.bool, level)

    def both(self, a: str | None, b: str | None, level: str) -> str | None:
        """Conditions `a` and `b`, either None for none."""
        if a is None or b is None:
            return b if a is None else a
        return self.emit("logical_and", (a, b), torch.bool, level)

    def index_places(self, x: Ref, given: list) -> tuple[list, list]:
        """Where `x[i0, i1, ...]`'s index tensors and `x` are read (Note [Indirect
        loads]): for each index tensor, the dimension of x it indexes and the
        result's dimension each of its own is at; for each dimension of x, the
        result's dimension it is at, None for an indexed one. The index tensors
        broadcast together into the result's dimensions where the first of them
        is, if they are neighbours in x, else first of all, as torch places them."""
        x_rank = len(self.nodes[x.name].tensor_meta.shape)
        tensors = [(d, t) for d, t in enumerate(given) if t is not None]
        dims = [d for d, _ in tensors]
        ranks = [len(self.nodes[t.name].tensor_meta.shape) for _, t in tensors]
        width = max(ranks)
        together = dims == list(range(dims[0], dims[-1] + 1))
        start = dims[0] if together else 0
        indices = [
            (t, d, [start + width - m + j for j in range(m)])
            for (d, t), m in zip(tensors, ranks)
        ]
        kept = [d for d in range(x_rank) if d not in dims]

        def place(d: int) -> int | None:
            if d in dims:
                return None
            if not together:  # after the indices' dimensions, in order
                return width + kept.index(d)
            return d if d < start else d - len(dims) + width

        return indices, [place(d) for d in range(x_rank)]

    def gathered(self, ref: Ref, shape, level: str, at, indirect, mask):
        """`ref` at the gathered element: loaded, or if this kernel computes it per
        element (fuse.row_gather), computed again there from the row's values
        and memory."""
        how, _, root = resolve(ref, self.nodes, self.fusion.kinds)
        node = self.nodes[root]
        if how != "inline":  # (inline: Note [Gathers of computed values])
            if self.fusion.group_of.get(root) != self.group.id:
                return self.placed_load(ref, shape, level, at, indirect, mask)
            if self.level_of(node.tensor_meta.numel) == "x":  # the row's own value
                return self.operand(ref, shape, level)
        rank = len(node.tensor_meta.shape)

        def read(value, _shape, _level):
            if not isinstance(value, Ref):
                return Const(value, _scalar_dtype(value))
            vshape = self.nodes[value.name].tensor_meta.shape
            pad = rank - len(vshape)
            v_at = [at[j + pad] for j in range(len(vshape))]
            pairs = []
            for i, d in indirect:
                along = d - pad  # the gathered dimension, if `value` has it
                if along >= 0 and vshape[along] != 1:  # else broadcast along it
                    pairs.append((i, along))
            return self.gathered(value, shape, level, v_at, tuple(pairs), mask)

        return self._rounded_value(node, self.pointwise(node, read, level), level)

    def _rounded_value(self, node: Node, value, level: str):
        """`node`'s value computed again elsewhere, rounded if a cast of it rounds
        (Note [Rounding casts])."""
        rounding = self.rounded.get(node.name)
        if rounding is None:
            return value
        dtype = compute_dtype(node.tensor_meta.dtype)
        return self.emit(ROUNDING[rounding], (value,), dtype, level)

    def placed_load(self, ref: Ref, shape, level: str, at, indirect=(), mask=None):
        """`ref` loaded at each position of `shape`, its dimension d at the
        result's dimension `at[d]` (None: at the loaded index i of a pair (i, d)
        of `indirect` instead)."""
        how, _, root = resolve(ref, self.nodes, self.fusion.kinds)
        if how == "virtual" and self.fusion.group_of.get(root) == self.group.id:
            # Note [Indices computed in the kernel]: at the result's positions
            assert not indirect and list(at) == list(range(len(shape))), ref
            return self.operand(ref, shape, level)
        view = self.nodes[ref.name].tensor_meta
        base = self.nodes[root].tensor_meta
        index = self.placed_index(ref, shape, level, at)
        if self.fusion.kinds[root] == "inline":
            # a gather's index computed from positions, where it is read (Note
            # [Positions as indices])
            assert not indirect and mask is None, root
            node = self.nodes[root]
            if node.target in RANGES:
                return self.iota_at(node, index, level)
            return self.position_at(node, shape, level, at)
        for i, d in indirect:
            term = Term(i, 1, view.shape[d], view.stride[d])
            index = Index(index.offset, (*index.terms, term))
        arg = self.input_arg(root)
        args = (arg.param, index) + ((mask,) if mask is not None else ())
        return self.emit("load", args, compute_dtype(base.dtype), level)

    def placed_index(self, ref: Ref, shape, level: str, at) -> Index:
        """Where `placed_load` reads `ref`'s root at each position of `shape`."""
        _, _, root = resolve(ref, self.nodes, self.fusion.kinds)
        view = self.nodes[ref.name].tensor_meta
        offset = view.offset - self.nodes[root].tensor_meta.offset
        return self.index(shape, level, _placed(view, shape, at, offset), offset)

    def range_address(self, ref: Ref, shape, level: str, at, unit: int):
        """Position value `ref` at each position of `shape` as address terms in
        steps of `unit`, where it is a range computed where it is read, or a sum
        of such ranges and integers (a slice's positions, decompose.py's
        `_strided_scatter_as_put`); else None (Note [Ranges in kernels])."""
        _, _, root = resolve(ref, self.nodes, self.fusion.kinds)
        node = self.nodes[root]
        if node.target in RANGES and self.fusion.kinds[root] == "inline":
            return _range_address(self.placed_index(ref, shape, level, at), node, unit)
        if root != ref.name or node.target != "aten.add.Tensor" or node.kwargs:
            return None
        total = Index(0, ())
        for value in node.args:
            if isinstance(value, bool) or not isinstance(value, (int, Ref)):
                return None
            if isinstance(value, int):
                total = Index(total.offset + value * unit, total.terms)
                continue
            rank = len(self.nodes[value.name].tensor_meta.shape)
            part = self.range_address(value, shape, level, at[len(at) - rank :], unit)
            if part is None:
                return None
            total = Index(total.offset + part.offset, (*total.terms, *part.terms))
        return total

    def position_at(self, node: Node, shape, level: str, at) -> str:
        """Position value `node` computed at each position of `shape`, its
        dimension d at the result's dimension `at[d]`, its operands read there
        (broadcast from the right, as `node` reads them)."""

        def read(value, _shape, _level):
            if not isinstance(value, Ref):
                return Const(value, _scalar_dtype(value))
            rank = len(self.nodes[value.name].tensor_meta.shape)
            return self.placed_load(value, shape, level, at[len(at) - rank :])

        return self._rounded_value(node, self.pointwise(node, read, level), level)

    def _rounds(self, node: Node, row) -> bool:
        """A cast to f16/bf16 from another dtype that the program itself makes,
        not one of a decomposition (Note [Rounding casts])."""
        dtype = node.tensor_meta.dtype
        if dtype not in ROUNDING or node.origin is not None:
            return False
        source = node.args[row.operands[0]]
        if isinstance(source, Ref):
            return self.nodes[source.name].tensor_meta.dtype != dtype
        return True

    def reduction(self, node: Node) -> None:
        kind = REDUCTIONS[node.target]
        src = self.nodes[node.args[0].name].tensor_meta
        x = self.operand(node.args[0], src.shape, "r")
        dtype = compute_dtype(src.dtype)
        if not src.dtype.is_floating_point:  # an integer sum: in int64
            dtype = node.tensor_meta.dtype
        x = self.cast(x, dtype, "r")
        _, k = reduction_spec(node, self.nodes)
        if kind in ("sum", "prod", "max", "min"):
            self.values[node.name] = self.emit("reduce", (x,), dtype, "x", kind)
            return
        if kind in ("argmax", "argmin"):  # the position within the row
            self.values[node.name] = self.emit("reduce", (x,), torch.int64, "x", kind)
            return
        total = self.emit("reduce", (x,), dtype, "x", "sum")
        mean = self.emit("truediv", (total, Const(k, dtype)), dtype, "x")
        if kind == "mean":
            self.values[node.name] = mean
            return
        mean, ss = self.centered_squares(x, mean, k, dtype)
        divisor = Const(
            max(k - correction(node.target, node.args, node.kwargs), 0), dtype
        )
        var = self.emit("truediv", (ss, divisor), dtype, "x")
        if kind == "var":
            self.values[node.name] = var
            return
        for item in self.group.nodes:  # var_mean: its getitems pick the results
            n = self.nodes[item]
            if n.target == "getitem" and n.args[0].name == node.name:
                self.values[item] = (var, mean)[n.args[1]]

    def scan(self, node: Node) -> str:
        """A running sum or product along the row (Note [Scans])."""
        src = self.nodes[node.args[0].name].tensor_meta
        level = self.level_of(src.numel)  # "x" along one element: the element
        x = self.operand(node.args[0], src.shape, level)
        dtype = compute_dtype(node.tensor_meta.dtype)
        x = self.cast(x, dtype, level)
        if level == "x":
            return x
        return self.emit("scan", (x,), dtype, "r", SCANS[node.target])

    def centered_squares(self, x: str, mean: str, k: int, dtype) -> tuple[str, str]:
        """A row's mean, from its first estimate `mean`, and the sum of squared
        deviations from it: the corrected two-pass algorithm (Note [Variance])."""
        centered = self.emit("sub", (x, mean), dtype, "r")
        square = self.emit("mul", (centered, centered), dtype, "r")
        ss = self.emit("reduce", (square,), dtype, "x", "sum")
        residual = self.emit("reduce", (centered,), dtype, "x", "sum")
        error = self.emit("truediv", (residual, Const(k, dtype)), dtype, "x")
        excess = self.emit("mul", (residual, error), dtype, "x")
        ss = self.emit("sub", (ss, excess), dtype, "x")
        ss = self.emit("relu", (ss,), dtype, "x")  # rounding may leave it below 0
        corrected = self.emit("add", (mean, error), dtype, "x")
        # an inf in the row makes the first mean inf and every deviation NaN: the
        # mean is the first one then (inf, as eager's), the variance NaN
        undefined = self.emit("isnan", (error,), torch.bool, "x")
        return self.emit("where", (undefined, mean, corrected), dtype, "x"), ss

    def scatter(self, node: Node) -> None:
        """Scatter `node` (Note [Scatters]): at each position of `x[indices]`,
        the value there added into (or written at) the element of the result it
        indexes, the copy of `x` written before. An index out of range (which
        passes/check_indices.py raises on) adds (writes) nothing, nor does a
        value the mask leaves out."""
        x, given, values, mask = put_parts(node)
        meta = node.tensor_meta
        shape, level = put_shape(node, self.nodes), "x"
        dtype = compute_dtype(meta.dtype)
        indices, x_at = self.index_places(x, list(given))
        value = self.cast(self.operand(values, shape, level), dtype, level)
        value = self.signed_nans(value, put_how(node), dtype, level)
        ok = None if mask is None else self.operand(mask, shape, level)
        loaded, ranges = [], []
        for tensor, dim, at in indices:
            size = meta.shape[dim]
            address = None
            if _in_range(tensor, size, self.nodes):  # its values may be addresses
                address = self.range_address(tensor, shape, level, at, meta.stride[dim])
            if address is not None:
                ranges.append(address)
                continue
            i, within = self.loaded_index(tensor, shape, level, at, size, True)
            ok = self.both(ok, within, level)
            loaded.append((i, dim))
        index = self.index(shape, level, _placed(meta, shape, x_at, 0), 0)
        for r in ranges:
            index = Index(index.offset + r.offset, (*index.terms, *r.terms))
        index = Index(index.offset, tuple(_coalesce(index.terms)))
        for i, dim in loaded:
            term = Term(i, 1, meta.shape[dim], meta.stride[dim])
            index = Index(index.offset, (*index.terms, term))
        param = f"out_ptr{len(self.outputs)}"
        self.outputs.append(KernelArg(param, node.name, meta.dtype))
        how = put_how(node)
        self.body.append(Store(param, index, value, level, meta.dtype, how, ok))

    def signed_nans(self, value, how: str, dtype: torch.dtype, level: str):
        """`value`'s NaNs with the sign bit a GPU's scatter keeping extrema `how`
        needs (Note [Extrema of NaNs]); `value` as it is for another scatter, or
        on the CPU."""
        if how not in EXTREMA or not dtype.is_floating_point:
            return value
        if self.fusion.device != "cuda":
            return value
        nan = Const(math.nan if how == "amax" else -math.nan, dtype)
        isnan = self.emit("isnan", (value,), torch.bool, level)
        return self.emit("where", (isnan, nan, value), dtype, level)

    def store(self, node: Node) -> None:
        meta = node.tensor_meta
        level = self.level_of(meta.numel)
        param = f"out_ptr{len(self.outputs)}"
        self.outputs.append(KernelArg(param, node.name, meta.dtype))
        index = self.index(meta.shape, level, meta, 0)
        self.body.append(Store(param, index, self.values[node.name], level, meta.dtype))


def copy_kernel(node: Node, fusion: Fusion, nodes: dict[str, Node]) -> Kernel:
    """The kernel writing scatter `node`'s result as a copy of the `x` it adds
    or writes into (Note [Scatters])."""
    x = put_parts(node)[0]
    meta = node.tensor_meta
    rank = len(meta.shape)
    group = Group(-1, (), meta.numel, 1, tuple(range(rank)))
    b = KernelBuilder(group, fusion, nodes)
    value = b.cast(b.operand(x, meta.shape, "x"), compute_dtype(meta.dtype), "x")
    if not isinstance(value, str):  # a number: x is a constant's fill
        value = b.emit("identity", (value,), compute_dtype(meta.dtype), "x")
    if not _nan_free(x, nodes):  # Note [Extrema of NaNs]
        value = b.signed_nans(value, put_how(node), compute_dtype(meta.dtype), "x")
    b.outputs.append(KernelArg("out_ptr0", node.name, meta.dtype))
    index = b.index(meta.shape, "x", meta, 0)
    b.body.append(Store("out_ptr0", index, value, "x", meta.dtype))
    return Kernel(
        "fused_copy",
        meta.numel,
        1,
        tuple(b.inputs.values()),
        tuple(b.outputs),
        tuple(b.body),
        (node.span,) if node.span is not None else (),
    )


# factories of a tensor of one number: the number, or the argument holding it
FILLS = {
    "aten.zeros.default": 0,
    "aten.new_zeros.default": 0,
    "aten.zeros_like.default": 0,
    "aten.ones.default": 1,
    "aten.new_ones.default": 1,
    "aten.ones_like.default": 1,
    "aten.full.default": "fill_value",
    "aten.new_full.default": "fill_value",
    "aten.full_like.default": "fill_value",
    "aten.scalar_tensor.default": "s",
}


def _nan_free(ref, nodes: dict[str, Node]) -> bool:
    """Whether value `ref` holds no NaN: a factory's fill of a number that is not
    NaN (zeros, the identity a scatter of extrema without x writes first), or
    such numbers written into such a fill."""
    if not isinstance(ref, Ref):
        return isinstance(ref, (int, float)) and not math.isnan(ref)
    node = nodes[ref.name]
    parts = put_parts(node)
    if parts is not None and put_how(node) == "write":
        x, _, values, _ = parts
        return _nan_free(x, nodes) and _nan_free(values, nodes)
    value = FILLS.get(node.target)
    if isinstance(value, str):
        value = bind_args(node.target, node.args, node.kwargs).get(value)
    return value is not None and _nan_free(value, nodes)


# The step a node of the graph is, other than an ATen op's call (an ExternCall)
STEP_KINDS = {"fallback": FallbackCall, "loop": LoopCall}


def readable_params(kernel: Kernel, nodes: dict[str, Node]) -> Kernel:
    """`kernel` with its parameters named after the buffers they carry at its first
    launch, for the reviewer: an input `x_ptr`, a parameter `ln_1_weight_ptr` (the
    last two names of its path), a value `linear_ptr` (its op); the one output
    `out_ptr`, several `out_<value>_ptr`. Kernels of identical bodies are shared
    whatever their parameters are named (`body_key`), so a later launch may pass
    another layer's buffers, in the same positions."""
    taken = set(MATMUL_OPERANDS)
    renames = {}
    several = len(kernel.outputs) > 1
    for arg in kernel.inputs + kernel.outputs:
        base = _buffer_stem(nodes[arg.buffer])
        if arg in kernel.outputs:
            base = f"out_{base}" if several else "out"
        name, n = f"{base}_ptr", 0
        while name in taken:
            n += 1
            name = f"{base}_{n}_ptr"
        taken.add(name)
        renames[arg.param] = name
    return kernel.renamed(renames)


def _buffer_stem(node: Node) -> str:
    """What a buffer is, as an ASCII identifier: a tensor input's parameter name,
    a parameter's or buffer's last two names (`h.0.ln_1.weight`: `ln_1_weight`), a
    computed value's op (`native_layer_norm_3`: `native_layer_norm`)."""
    if node.op == "param":
        words = [w for w in node.target.split(".") if not w.isdigit()][-2:]
    elif node.op == "input":
        words = [node.target]
    else:
        words = [re.sub(r"(_\d+)+$", "", node.name)]
    text = re.sub(r"\W+", "_", "_".join(words).encode("ascii", "ignore").decode())
    text = text.strip("_")
    return text if text and not text[0].isdigit() else f"buf_{text}".rstrip("_")


def _memory_order(group: Group, fusion: Fusion, nodes) -> tuple[int, ...]:
    """The order of dimensions (outermost first) a pointwise kernel enumerates its
    elements in: that of the memory of the values it stores, when they all have one
    dense layout and one shape, as every value of the kernel has (a channels-last
    activation: N, H, W, C); row-major otherwise. Stores are then contiguous and
    loads of values laid out alike too, whatever the layout."""
    metas = [nodes[n].meta for n in group.nodes if fusion.kinds[n] == "pointwise"]
    stored = [nodes[n].meta for n in group.nodes if n in fusion.realized]
    if group.rnumel != 1 or not stored or not metas:
        return ()
    shape, stride = stored[0].shape, stored[0].stride
    if any(m.shape != shape for m in metas) or any(m.stride != stride for m in stored):
        return ()
    order = tuple(sorted(range(len(shape)), key=lambda d: (shape[d] != 1, -stride[d])))
    expect = 1
    for d in reversed(order):
        if shape[d] != 1 and stride[d] != expect:
            return ()  # not dense in any order of dimensions
        expect *= shape[d]
    return order


# Note [Data movement in kernels]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# cat, constant_pad_nd, roll and flip compute nothing: each element of the result
# is an element of an input (or the pad value) at a coordinate that is the
# result's own, shifted or reversed, within a range. A kernel reads them so, in
# the kernel of whatever consumes them, never writing the moved tensor: per
# piece, a load of the input through a view of it with the result's shape whose
# offset and strides shift (`c - start`) or reverse (`n - 1 - c`) the coordinate,
# masked to the positions the piece covers, and `where` choosing among pieces.
# cat([a, b], d): a where c_d < len(a), else b at c_d - len(a). pad: the input
# where it lies, else the value. roll by s along d: the input at c_d - s where
# c_d >= s, else at c_d - s + n (two pieces per rolled dimension). flip: one
# piece, reversed. Inputs are read from memory: a value computed in the same
# kernel exists only at the kernel's own positions (fuse.can_fuse).


# Note [Windows of computed values]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A pool's windows are strided slices of its input, some padded (Note [Pooling as
# windows] in passes/decompose.py). Where that input is a pointwise value (ResNet's
# stem pools the ReLU of a batch norm) read by nothing but slices, it is "inline"
# (fuse._read_through_views): each window computes it again at the positions it
# reads, from its operands loaded there, under the pad's mask where the window
# reaches the padding. Nothing is written between the batch norm and the pool:
# a kernel reads x and writes the pooled result, where two kernels wrote and read
# the ReLU back, four times the pooled size. Each window's slices map its
# coordinates into the value's (Note [Places] in passes/places.py), composed with
# a pad's shift. Only values cheap enough are computed again
# (`fuse.WINDOW_OPS_MAX` ops for all the windows), and only where every reader
# reads them through views: read where it is too, the value is written anyway.
# This is for GPUs, where memory bounds such kernels: on the H100 the stem pool
# of [32, 64, 112, 112] took one kernel of 48 us against two of 64 and 48
# (torch.compile: 64 and 52). On two CPU cores the vector units bound it
# instead: the batch norm computed in nine windows took 4.9 ms against 4.4 for
# the two C++ kernels, so there it is written, unless the windows part the
# value (a 2 x 2 pool of stride 2): then each element is computed once either
# way, and the kernel that writes it is saved.


# Note [Positions as indices]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A gather's index that is computed from positions alone (a range, and
# pointwise ops of ranges and numbers: a reflect pad's `n - 1 - |n - 1 - |p||`,
# an interpolation's `int((p + 0.5) * scale - 0.5)`) is computed where the gather
# reads it, as a range is (Note [Ranges in kernels]), never written and loaded.
# passes/recompute.py computes such an index again with the views between its
# ops applied to its ranges (`p.view(-1, 1)` before the arithmetic, not after),
# so that what the gather reads is pointwise ops of its own shape over ranges
# read in place; fuse marks those "inline" where gathers alone read them
# (`_indexes`), and `placed_load` computes each at the positions the gather
# reads its index at (`position_at`), its operands read there in turn. The
# numbers are the same at every call: ir/positions.py evaluates them when the
# program is built, and where they lie in range the gather neither wraps
# negative indices nor masks its load, and passes/check_indices.py checks
# nothing at run time (the `arange(q) + past` of a decoder's mask).

# Note [Gathers of computed values]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A pointwise value that gathers alone read, from (the f32 copy of a bf16 image
# an interpolation reads), is computed again at each gathered position, from its
# operands gathered there (`gathered`), when it is cheap enough for all its
# readers (`fuse._gathered_only`, the bound of windows). On the CPU, only where
# one gather reads it, so it is computed once for each element written (the ReLU
# before a reflect pad), as for windows (Note [Windows of computed values]): on
# its vector units a value computed at four gathered positions costs more than
# writing it.

# Note [Indirect loads]
# ~~~~~~~~~~~~~~~~~~~~~
# `x[idx]` (embedding and index_select decompose to it) and `gather(x, d, idx)`
# read x at positions another tensor holds. A kernel loads the index at each
# position of the result (idx's dimensions are some of the result's), then x at
# an address whose term for the indexed dimension is the loaded value: `Term(i,
# 1, n, stride)` with the statement `i` as its variable, printed as `stride * i`.
# The load of x is masked to indices in range, so that no index reads outside x;
# whether all are in range is checked apart (Note [Indirect loads in range] in
# passes/check_indices.py). x and idx are read from memory, as data movement's
# inputs are (Note [Data movement in kernels]), but for an index computed from
# positions (Note [Positions as indices]) and a cheap x that gathers alone read
# (Note [Gathers of computed values]). `x[i, j]` with several index
# tensors (a sequence's last token, `h[arange(b), lengths - 1]`; a mask's
# `positions[batch, q]`) loads each, and x at an address with a term for each:
# the index tensors broadcast together into the result's dimensions where the
# first indexed dimension of x was, or first of all when other dimensions of x
# lie between them, as torch places them (`index_places`). An index of the
# result's own shape that the kernel computes (`where(t != -100, t, 0)` of a loss
# that ignores padding) is the kernel's value at the result's position (Note
# [Indices computed in the kernel]).
#
# Note [Indices computed in the kernel]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A gather reads its index tensor at its result's positions where the index has
# the result's shape (`gather`'s always does). Such an index computed from
# memory by pointwise ops is then computed in the gather's kernel like any
# operand at its own positions, and read there from a statement, not loaded:
# fuse lets the gather join the kernel of its index (`index_in_place`), and
# rematerialize computes it again in a reader rather than storing it for one
# (a cross-entropy's index, read by its row kernel, costs the targets' read
# either way). An integer index computed from memory by a few pointwise ops
# (`e[(ids + 1) % n]`, whose index picks rows: fewer dimensions than the
# result) that gathers alone read is computed where each gather reads it, at
# the positions it reads, as positions are (`fuse._index_values`): never
# stored. What the gather gathers from is still read elsewhere than the
# result's position, from memory or computed again (row_gather).


def _pieces(node: Node, nodes) -> tuple[list, object]:
    """(pieces, fill) of a data movement node: each piece (input, {dim: (a, b)},
    {dim: (lo, hi)}) in the order they are chosen last to first, and the value
    where no piece lies (a pad's), or None."""
    bound = bind_args(node.target, node.args, node.kwargs)
    shape = node.tensor_meta.shape
    rank = len(shape)
    if node.target == "aten.cat.default":
        d = bound["dim"] % rank
        pieces, start = [], 0
        for t in bound["tensors"]:
            m = nodes[t.name].tensor_meta
            if m.numel == 0:
                continue
            n = m.shape[d]
            pieces.append(
                (t, {d: (1, -start)}, _bounds(shape, {d: (start, start + n)}))
            )
            start += n
        return pieces[::-1], None
    x = node.args[0]
    if node.target == "aten.flip.default":
        return [
            (x, {d % rank: (-1, shape[d % rank] - 1) for d in bound["dims"]}, {})
        ], None
    if node.target == "aten.constant_pad_nd.default":
        pad, maps, bounds = bound["pad"], {}, {}
        for i in range(len(pad) // 2):
            d = rank - 1 - i
            lo, n = pad[2 * i], nodes[x.name].tensor_meta.shape[d]
            maps[d] = (1, -lo)
            bounds[d] = (lo, lo + n)
        return [(x, maps, _bounds(shape, bounds))], bound.get("value", 0)
    pieces = [(x, {}, {})]  # roll: two pieces per rolled dimension
    for shift, d in zip(bound["shifts"], bound["dims"]):
        d, n = d % rank, shape[d % rank]
        s = shift % n
        if s:
            options = [((1, -s), (s, n)), ((1, n - s), (0, s))]
            pieces = [
                (x, {**maps, d: a}, {**bounds, d: span})
                for _, maps, bounds in pieces
                for a, span in options
            ]
    return [(x, m, _bounds(shape, b)) for x, m, b in pieces][::-1], None


def _bounds(shape, bounds: dict) -> dict:
    """`bounds` without the ranges that every position lies within."""
    return {d: (lo, hi) for d, (lo, hi) in bounds.items() if lo > 0 or hi < shape[d]}


def _coalesce(terms) -> list[Term]:
    out: list[Term] = []
    for t in terms:
        if out:
            p = out[-1]
            if (
                p.var == t.var
                and p.div == t.div * t.mod
                and p.stride == t.stride * t.mod
            ):
                out[-1] = Term(t.var, t.div, p.mod * t.mod, t.stride)
                continue
        out.append(t)
    return out


def _placed(view: TensorMeta, shape, at, offset: int) -> TensorMeta:
    """`view` read at each position of `shape`, its dimension d at the result's
    dimension `at[d]` (None: not at any; broadcast where it has one element)."""
    stride = [0] * len(shape)
    for d, p in enumerate(at):
        if p is not None and view.shape[d] != 1:
            stride[p] = view.stride[d]
    return TensorMeta(shape, tuple(stride), offset, view.dtype)


def _in_range(index: Ref, size: int, nodes) -> bool:
    """Whether position value `index` is known in [0, size) (ir/positions.py)."""
    known = positions.bounds(index, nodes)
    return known is not None and 0 <= known[0] and known[1] <= size


def _range_address(at: Index, node: Node, unit: int) -> Index:
    """The address of range `node`'s value `start + step * i` at its positions
    `at`, in steps of `unit` (Note [Ranges in kernels])."""
    start, step, _ = arange_of(node)
    terms = tuple(Term(t.var, t.div, t.mod, t.stride * step * unit) for t in at.terms)
    return Index(unit * (start + step * at.offset), terms)


def _rounded(value: Const, dtype: torch.dtype) -> Const:
    """A literal rounded to `dtype`, in its compute dtype (a dynamic size stays)."""
    if not isinstance(value.value, (bool, int, float)):
        return value
    rounded = torch.tensor(value.value, dtype=dtype).item()
    return Const(rounded, value.dtype)


def _scalar_dtype(value) -> torch.dtype:
    if isinstance(value, bool):
        return torch.bool
    if isinstance(value, int):
        return torch.int64
    return torch.float64


def _promote(node: Node, operands, nodes) -> torch.dtype:
    vals = []
    for i in operands:
        a = node.args[i]
        if isinstance(a, Ref):
            m = nodes[a.name].tensor_meta
            vals.append(
                torch.empty((1,) if m.shape else (), dtype=m.dtype, device="meta")
            )
        else:
            vals.append(a)
    if len(vals) == 1:
        return vals[0].dtype
    return torch.result_type(*vals[:2])


__all__ = ["schedule"]
