"""Fusion: group graph nodes into kernels.

Before:  add = aten.add.Tensor(x, y);  relu = aten.relu.default(add);  return relu
After:   group 0 (pointwise, 8 elements): add, relu   -- realized: relu

Each pointwise or reduction node joins the group of one of its producers when that is
legal (`can_fuse`) and, among legal groups, the one sharing the most data with it
(`score`); otherwise it starts a group. A node is *realized* (stored to memory) when
anything outside its group reads it. Views are not nodes of groups: a view of a buffer
is folded into the reader's indexing; a view of a value computed in a group is either
a contiguous reshape (the same flat order, so it stays in registers) or forces its
base to be realized. See Note [Kernel iteration] in ir/program.py for the levels.

Note [Reduction order]
~~~~~~~~~~~~~~~~~~~~~~
A kernel's rows are what a reduction keeps and its row elements what it reduces
into each, whichever dimensions those are: `x.sum(0)` of an [M, N] `x` has N rows
of M elements, the k-th element of row j being x[k, j]; a batch norm's statistics
over (0, 2, 3) of NCHW have C rows of N*H*W. The group's `order` lists the input's
dimensions kept ones first, reduced ones last, and the per-element values of the
kernel are enumerated in that order (a permutation of the input, read through its
strides), so the index arithmetic of Note [Kernel iteration] holds unchanged. A
reduction over trailing dimensions has `order == ()`. For another order, every
per-element value of the group has the shape of the reduction's input, and a
per-row value is read by per-element code only where it broadcasts over the reduced
dimensions (a `keepdim` mean); two reductions share a kernel only with one order.
Whether the rows or the row elements are adjacent in memory is the backends'
concern: a column reduction reads contiguous rows, several at a time.

Note [Sibling scatters]
~~~~~~~~~~~~~~~~~~~~~~~
Two scatters over as many positions share a kernel (Note [Scatters] in
schedule.py) where neither reads what the other writes into, nor what the other
computes: a static cache's keys and values written at one step's positions
(`keys.index_copy_(2, pos, k)`, then `values`), one launch for both. The kernel
runs where both scatters' inputs are ready, after every index check before
either (`_checks_first` in schedule.py), and each of its stores is masked to its
own indices in range, as a scatter's kernel alone is.

Note [Sibling reductions]
~~~~~~~~~~~~~~~~~~~~~~~~~
Two reductions over the same rows share a kernel though they share no input: the
totals of a split `x.sum(0)` and `x.amax(0)`, each reading its own partials, or a
split variance's sums of squares within its parts and between them. Each kernel
of a few thousand values costs a launch (about 5 us on the H100) and nothing else.
A reduction node counts such a group as a candidate with the lowest score (any
group it shares data with wins), where `can_fuse` allows it, and where it reads
at most `SIBLING_NUMEL` elements. A larger one gains a launch and loses more:
the shared kernel runs where the first of them could, keeping the values every
later one computes alive from there, with all their loads and stores in one
program (a 12-layer GPT-2's backward would compute its 24 layer norms again in
one kernel, at its start, 24 rows a program). A reduction group
that a value of another group's kernel reads joins that kernel too, where every
kernel it reads runs before that one (`_mergeable`): one launch, and neither
result written.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from transpiler.ir.graph import Graph, Node, Ref, TensorMeta, read_before_fallback
from transpiler.ir.ops import (
    ATOMIC_TYPES,
    EXTREMA,
    EXTREMA_TYPES,
    FLOAT_TYPES,
    GATHERS,
    INDEX_REDUCE,
    INDEX_TYPES,
    INTEGER_ONLY,
    MASKED_PUT,
    MOVEMENT,
    POINTWISE,
    PUTS,
    RANGES,
    REDUCTIONS,
    SCANS,
    SUPPORTED_DTYPES,
    arange_of,
    bind_args,
    is_random,
    is_view,
)
from transpiler.passes.places import maps_into

# the dtypes a device's scatter kernel adds (keeps extrema of) atomically, by what
# the scatter does (a write: any dtype kernels hold)
SCATTER_TYPES = {"add": ATOMIC_TYPES, **dict.fromkeys(EXTREMA, EXTREMA_TYPES)}
PAD = "aten.constant_pad_nd.default"
# ops computed again for all the windows that read one value (a 3 x 3 pool of a
# batch norm and ReLU: 9 windows of 5 ops)
WINDOW_OPS_MAX = 96
INDEX_OPS_MAX = 8  # ops of an index computed from memory where gathers read it
# elements a reduction reads at most to share a kernel with one it shares no data
# with (Note [Sibling reductions]): 1 MB of f32 is read in well under a launch
SIBLING_NUMEL = 1 << 18
# elements of a literal table (`torch.tensor([...])`) kernels compute where they
# read it, choosing each element by position
LITERAL_NUMEL = 16


@dataclass(frozen=True)
class Group:
    id: int
    nodes: tuple[str, ...]  # members in graph order
    rows: int  # xnumel
    rnumel: int  # 1 for a pointwise group
    order: tuple[int, ...] = ()  # Note [Reduction order]; () for trailing reductions


@dataclass(frozen=True)
class Fusion:
    kinds: dict[str, str]  # node -> buffer|extern|view|item|pointwise|reduction|scan
    groups: tuple[Group, ...]
    group_of: dict[str, int]
    realized: frozenset[str]
    device: str = "cpu"  # whose kernels they are


# ---- classification -------------------------------------------------------------

# Arguments of casts and factories that do not change the values computed: the
# result's layout and device are the wrapper's to allocate.
CAST_KWARGS = {"dtype", "layout", "device", "pin_memory"}


def classify(node: Node, nodes: dict[str, Node], device: str = "cpu") -> str:
    if node.op in ("input", "param"):
        return "buffer"
    if node.op in ("fallback", "loop"):  # run as they are, between the kernels
        return "extern"
    if node.target == "getitem":
        source = nodes[node.args[0].name]
        if source.target in REDUCTIONS and reduction_ok(source, nodes):
            return "item"
        return "view" if is_view(source.target) else "extern_item"
    if is_view(node.target):
        return "view"
    if pointwise_ok(node, nodes) or movement_ok(node, nodes) or gather_ok(node, nodes):
        return "pointwise"
    if reduction_ok(node, nodes):
        return "reduction"
    if scan_ok(node, nodes):
        return "scan"
    if scatter_ok(node, nodes, device):
        return "scatter"
    return "extern"


def pointwise_ok(node: Node, nodes: dict[str, Node]) -> bool:
    row = POINTWISE.get(node.target)
    meta = node.meta
    if row is None or not isinstance(meta, TensorMeta) or meta.numel == 0:
        return False
    if meta.dtype not in SUPPORTED_DTYPES:
        return False
    if row.op in INTEGER_ONLY and meta.dtype.is_floating_point:
        return False
    if row.kind == "iota" and not _int32_range(node):
        return False
    cast = row.kind in ("cast", "iota")
    allowed = {"memory_format"} | (CAST_KWARGS if cast else set())
    if any(k not in allowed and (k, v) not in row.keywords for k, v in node.kwargs):
        return False
    if dict(node.kwargs).get("layout") not in (None, torch.strided):
        return False
    if len(node.args) > max(row.operands) + 1:
        return False
    for i, a in enumerate(node.args):
        if isinstance(a, Ref):
            m = nodes[a.name].meta
            if not isinstance(m, TensorMeta) or m.dtype not in SUPPORTED_DTYPES:
                return False
        elif isinstance(a, (list, tuple)) and i not in row.operands:
            if not all(isinstance(d, int) for d in a):  # a factory's size
                return False
        elif not isinstance(a, (int, float, bool)):
            return False
    return True


def _int32_range(node: Node) -> bool:
    """Whether `arange` node is of ints whose every partial value fits in int32,
    the type of a Triton kernel's positions (Note [Ranges in kernels] in
    schedule.py): a range of floats is computed as eager's kernel computes it,
    by a call."""
    values = arange_of(node)
    if values is None:
        return False
    start, step, count = values
    return abs(start) + abs(step) * count < 2**31


def movement_ok(node: Node, nodes: dict[str, Node]) -> bool:
    """Whether kernels compute a data movement op (Note [Data movement in kernels]
    in schedule.py): static shapes, supported dtypes, one constant pad value,
    rolls along named dimensions."""
    if node.target not in MOVEMENT or not _static_result(node):
        return False
    meta = node.meta
    refs = node.refs()
    for r in refs:
        m = nodes[r.name].meta
        if not isinstance(m, TensorMeta) or m.dtype not in SUPPORTED_DTYPES:
            return False
        if len(m.shape) != len(meta.shape) and m.numel != 0:
            return False
    bound = bind_args(node.target, node.args, node.kwargs)
    if node.target == "aten.roll.default":
        return len(bound.get("dims") or ()) == len(bound["shifts"]) <= 3
    if node.target == "aten.constant_pad_nd.default":
        return isinstance(bound.get("value", 0), (int, float, bool))
    return True


def _static_result(node: Node) -> bool:
    """A tensor result of static shape and a supported dtype, no keywords."""
    meta = node.meta
    return (
        isinstance(meta, TensorMeta)
        and meta.numel > 0
        and meta.dtype in SUPPORTED_DTYPES
        and not node.kwargs
        and all(isinstance(n, int) for n in meta.shape)
    )


def gather_indices(node: Node) -> list:
    """A gather's index tensors: `gather`'s one, or `x[i0, i1, ...]`'s (None
    where it takes a whole dimension)."""
    if node.target == "aten.gather.default":
        return [node.args[2]]
    return list(node.args[1])


def index_in_place(node: Node, ref: Ref, nodes: dict[str, Node]) -> bool:
    """Whether gather `node` reads `ref` as an index tensor of its result's own
    shape: each element's index read at that element's own position, where a
    kernel computing it has it (Note [Indices computed in the kernel] in
    schedule.py). A tensor it gathers from is read elsewhere."""
    if node.target not in GATHERS or node.args[0] == ref:
        return False
    return (
        any(isinstance(i, Ref) and i.name == ref.name for i in gather_indices(node))
        and nodes[ref.name].tensor_meta.shape == node.tensor_meta.shape
    )


def gather_ok(node: Node, nodes: dict[str, Node]) -> bool:
    """Whether kernels compute an indirect load (Note [Indirect loads] in
    schedule.py): `x[i0, i1, ...]` with index tensors of integers, or `gather`."""
    if node.target not in GATHERS or not _static_result(node):
        return False
    x = nodes[node.args[0].name].meta
    if not isinstance(x, TensorMeta) or x.dtype not in SUPPORTED_DTYPES:
        return False
    if not x.shape or not all(isinstance(n, int) for n in x.shape):
        return False
    if node.target == "aten.gather.default" and len(node.args) > 3 and node.args[3]:
        return False  # sparse_grad
    indices = [i for i in gather_indices(node) if i is not None]
    return bool(indices) and all(
        isinstance(i, Ref)
        and isinstance(m := nodes[i.name].meta, TensorMeta)
        and m.dtype in INDEX_TYPES
        and m.numel > 0
        for i in indices
    )


def put_parts(node: Node) -> tuple | None:
    """(x, indices, values, mask) of a scatter (`PUTS`), mask None but for the
    masked put; None for another op."""
    if node.target == MASKED_PUT and len(node.args) == 4 and not node.kwargs:
        x, mask, indices, values = node.args
        return x, indices, values, mask
    if node.target == INDEX_REDUCE:  # along a dimension, counted from the start
        given = bind_args(node.target, node.args, node.kwargs)
        dim, x = given["dim"], given["self"]
        if given["reduce"] not in EXTREMA or not given.get("include_self", True):
            return None
        if not isinstance(dim, int) or dim < 0:
            return None
        return x, [None] * dim + [given["index"]], given["source"], None
    if node.target not in PUTS[:2]:
        return None
    given = bind_args(node.target, node.args, node.kwargs)
    return given["self"], given["indices"], given["values"], None


def put_how(node: Node) -> str:
    """What scatter `node` does with a value at its element: "add" it, "write"
    it there, keep the larger ("amax") or the smaller ("amin") of the two."""
    if node.target == MASKED_PUT:
        return "add"
    given = bind_args(node.target, node.args, node.kwargs)
    if node.target == INDEX_REDUCE:
        return given["reduce"]
    return "add" if given.get("accumulate") else "write"


def put_adds(node: Node) -> bool:
    """Whether scatter `node` adds its values into their elements."""
    return put_how(node) == "add"


def put_shape(node: Node, nodes: dict[str, Node]) -> tuple[int, ...]:
    """The shape of `x[indices]` for scatter `node`: where its values go, one
    kernel position each (Note [Scatters] in schedule.py)."""
    x, indices, _, _ = put_parts(node)
    meta = nodes[x.name].tensor_meta
    at = tuple(
        (
            slice(None)
            if i is None
            else torch.empty(nodes[i.name].tensor_meta.shape, dtype=torch.int64)
        )
        for i in indices
    )
    return tuple(torch.empty(meta.shape, device="meta")[at].shape)


def scatter_ok(node: Node, nodes: dict[str, Node], device: str = "cpu") -> bool:
    """Whether a kernel computes scatter `node` (Note [Scatters] in
    schedule.py): static shapes, a dtype the device adds atomically (any for a
    scatter that writes), index
    tensors of integers, values (and a mask) broadcasting to `x[indices]`."""
    parts = put_parts(node)
    meta = node.meta
    if parts is None or not isinstance(meta, TensorMeta) or meta.numel == 0:
        return False
    x, indices, values, mask = parts
    by_device = SCATTER_TYPES.get(put_how(node))
    types = by_device.get(device, ()) if by_device else SUPPORTED_DTYPES
    if meta.dtype not in types:
        return False
    tensors = [x, values, *(i for i in indices if i is not None)]
    tensors += [mask] if mask is not None else []
    if not all(isinstance(t, Ref) for t in tensors):
        return False
    metas = [nodes[t.name].meta for t in tensors]
    if not all(
        isinstance(m, TensorMeta) and all(isinstance(n, int) for n in m.shape)
        for m in (meta, *metas)
    ):
        return False
    x_meta, v_meta, *i_metas = metas
    if mask is not None:
        *i_metas, m_meta = i_metas
        if m_meta.dtype != torch.bool:
            return False
    if not x_meta.shape or x_meta.dtype != meta.dtype or v_meta.dtype != meta.dtype:
        return False
    if not i_metas or len(indices) > len(x_meta.shape):
        return False
    if any(m.dtype not in INDEX_TYPES or m.numel == 0 for m in i_metas):
        return False
    try:
        shape = put_shape(node, nodes)
        reads = [v_meta.shape] + ([m_meta.shape] if mask is not None else [])
        return all(torch.broadcast_shapes(r, shape) == shape for r in reads)
    except (IndexError, RuntimeError):
        return False


def reduced_dims(node: Node, nodes: dict[str, Node]) -> list[int]:
    """The dimensions of its input a reduction node reduces, sorted; a scan's one
    dimension (a scan's rows are those of a reduction along it)."""
    bound = bind_args(node.target, node.args, node.kwargs)
    rank = len(nodes[node.args[0].name].tensor_meta.shape)
    dims = bound.get("dim")
    if isinstance(dims, int):  # argmax's one dimension
        dims = [dims]
    if dims is None or len(dims) == 0:
        dims = range(rank)
    return sorted({d % max(rank, 1) for d in dims})


def reduction_spec(node: Node, nodes: dict[str, Node]) -> tuple[int, int]:
    """(rows, rnumel) of a reduction: the elements it keeps and those it reduces
    into each of them, over whichever dimensions (Note [Reduction order])."""
    shape = nodes[node.args[0].name].tensor_meta.shape
    reduced = reduced_dims(node, nodes)
    rows, rnumel = 1, 1
    for d, n in enumerate(shape):
        if d in reduced:
            rnumel *= n
        else:
            rows *= n
    return rows, rnumel


def reduction_order(node: Node, nodes: dict[str, Node]) -> tuple[int, ...]:
    """The dimensions of a reduction's input, kept ones first, reduced ones last;
    () when the reduced ones already are the last (Note [Reduction order])."""
    shape = nodes[node.args[0].name].tensor_meta.shape
    reduced = reduced_dims(node, nodes)
    if trailing(shape, reduced):
        return ()
    kept = tuple(d for d in range(len(shape)) if d not in reduced)
    return kept + tuple(reduced)


def trailing(shape, reduced) -> bool:
    """Whether the dimensions `reduced` of `shape` are its last ones, dimensions
    of size 1 aside: they go anywhere."""
    sized = [d for d in range(len(shape)) if shape[d] != 1]
    sized_reduced = [d for d in sized if d in reduced]
    return sized_reduced == sized[len(sized) - len(sized_reduced) :]


# what kernels reduce integers by: sums and products (in int64, as eager computes
# them), max and min
INTEGER_REDUCE = ("sum", "prod", "max", "min", "argmax", "argmin")


def reduction_ok(node: Node, nodes: dict[str, Node]) -> bool:
    if node.target not in REDUCTIONS or not isinstance(node.args[0], Ref):
        return False
    x = nodes[node.args[0].name].meta
    if not isinstance(x, TensorMeta) or x.dtype not in SUPPORTED_DTYPES:
        return False
    if x.dtype not in FLOAT_TYPES and REDUCTIONS[node.target] not in INTEGER_REDUCE:
        return False
    if x.dtype == torch.bool and REDUCTIONS[node.target] not in ("sum", "prod"):
        return False
    bound = bind_args(node.target, node.args, node.kwargs)
    if bound.get("dtype") is not None:
        return False
    rows, rnumel = reduction_spec(node, nodes)
    return rows >= 1 and rnumel > 1


def scan_ok(node: Node, nodes: dict[str, Node]) -> bool:
    """Whether kernels compute a scan (Note [Scans] in schedule.py): of a supported
    dtype, into a float result or an integer one (eager's int64 for integers and
    bools); along a dimension of one element (or of a 0-d tensor) it is a cast."""
    if node.target not in SCANS or not isinstance(node.args[0], Ref):
        return False
    x, out = nodes[node.args[0].name].meta, node.meta
    if not isinstance(x, TensorMeta) or not isinstance(out, TensorMeta):
        return False
    if x.dtype not in SUPPORTED_DTYPES or out.dtype not in SUPPORTED_DTYPES:
        return False
    return out.dtype != torch.bool and x.numel > 0 and x.shape == out.shape


# what a group's kernel computes: values of the kernel itself, which its readers in
# the group read from registers
KERNEL_KINDS = ("pointwise", "reduction", "scan")


# ---- fusion ---------------------------------------------------------------------


class _State:
    def __init__(self, gid: int, node: Node, rows: int, rnumel: int):
        self.id = gid
        self.nodes = [node.name]
        self.rows = rows
        self.rnumel = rnumel
        self.reads: set[str] = set()  # buffers the group's kernel loads
        self.order: tuple[int, ...] = ()  # Note [Reduction order]
        self.shape: tuple[int, ...] = ()  # ... of the values at level "r" if any
        self.scatter = False  # a scatter's kernel: it alone (Note [Scatters])

    def reduce(self, node: Node, nodes: dict[str, Node]) -> None:
        """Make this the group of reduction (or scan) `node`."""
        self.rows, self.rnumel, self.order, self.shape = _rows_of(node, nodes)

    def rows_spec(self) -> tuple:
        """(rows, rnumel, order, shape): equal for groups reducing the same rows."""
        return self.rows, self.rnumel, self.order, self.shape


def _rows_of(node: Node, nodes: dict[str, Node]) -> tuple:
    """The rows reduction (or scan) `node` reduces, as `_State.rows_spec`."""
    rows, rnumel = reduction_spec(node, nodes)
    order = reduction_order(node, nodes)
    shape = nodes[node.args[0].name].tensor_meta.shape if order else ()
    return rows, rnumel, order, shape


def alias_ok(view: Node, base: Node) -> bool:
    """A view reading its base in the same flat order (a contiguous reshape)."""
    v, b = view.meta, base.meta
    return (
        isinstance(v, TensorMeta)
        and isinstance(b, TensorMeta)
        and v.is_contiguous()
        and b.is_contiguous()
        and v.offset == b.offset
        and v.numel == b.numel
    )


def resolve(
    ref: Ref, nodes: dict[str, Node], kinds: dict[str, str]
) -> tuple[str, str, str]:
    """Follow views from `ref` to where its value lives.

    ("virtual", root, root): a value computed in a kernel, read at the same flat index.
    ("buffer", name, root): read `root`'s memory through `name`'s meta (a view or root).
    ("inline", name, root): a value computed where it is read, at the positions
    `name` reads (Note [Places] in places.py).
    """
    name = ref.name
    node = nodes[name]
    chain_ok = True
    while kinds[name] == "view":
        base = nodes[node.args[0].name]
        if not alias_ok(node, base):
            chain_ok = False
        name, node = base.name, base
    if kinds[name] == "inline" and (
        name == ref.name
        or node.target in RANGES
        or maps_into(nodes[ref.name].tensor_meta, node.tensor_meta)
    ):
        return ("inline", ref.name, name)
    if not chain_ok:
        return ("buffer", ref.name, name)
    if kinds[name] in (*KERNEL_KINDS, "item") and chain_ok:
        return ("virtual", name, name)
    return ("buffer", ref.name, name)


def splits(shape: tuple[int, ...], rnumel: int) -> bool:
    """Whether a value of `shape` can be enumerated as rows of `rnumel` elements by
    index arithmetic: the trailing dimensions that make a row either multiply to
    exactly `rnumel`, or one dimension straddles rows, each row taking a whole
    number of its steps and the dimension a whole number of rows ([512, 1024] as
    rows of 16384: 16 steps of the first dimension per row, 32 rows)."""
    inner = 1
    for d in reversed(shape):
        if inner * d >= rnumel:
            return rnumel % inner == 0 and (inner * d) % rnumel == 0
        inner *= d
    return inner == rnumel


def fuse(
    graph: Graph, device: str = "cpu", alone: frozenset[str] = frozenset()
) -> Fusion:
    """`graph`'s nodes in kernels. A node of `alone` joins only the kernel of
    another it reads (its reader's kernel takes them in: passes/rematerialize.py)."""
    nodes = graph.by_name()
    kinds = {n.name: classify(n, nodes, device) for n in graph.nodes}
    _mark_inlined(graph, kinds, device)
    ancestors = _ancestors(graph)
    groups: list[_State] = []
    group_of: dict[str, int] = {}
    reads_from: dict[int, set[int]] = {}  # group -> groups whose values it reads
    order = {n.name: i for i, n in enumerate(graph.nodes)}
    users = graph.users()
    for node in graph.nodes:
        kind = kinds[node.name]
        if kind == "item":
            g = groups[group_of[node.args[0].name]]
            g.nodes.append(node.name)
            group_of[node.name] = g.id
        if kind == "scatter":  # the kernel of its values, over `x[indices]`
            g = _values_group(node, nodes, kinds, groups, group_of, reads_from)
            if g is None:  # Note [Sibling scatters]
                g = _sibling_scatter(node, nodes, kinds, groups, ancestors)
                if g is not None and not can_join(
                    g, node, nodes, kinds, group_of, reads_from
                ):
                    g = None
            if g is None:
                g = _State(len(groups), node, math.prod(put_shape(node, nodes)), 1)
                groups.append(g)
            else:
                g.nodes.append(node.name)
            g.scatter = True
            g.reads |= _buffer_reads(node, nodes, kinds).keys()
            _joined(g, node, nodes, kinds, group_of, reads_from)
            continue
        if kind not in KERNEL_KINDS:
            continue
        best, best_score = None, 0
        reads = _buffer_reads(node, nodes, kinds)
        candidates = _producer_groups(node, nodes, kinds, group_of)
        if node.name in alone:  # with the copies it reads only
            candidates = {
                group_of[r.name]
                for r in node.refs()
                if r.name in alone and r.name in group_of
            }
        elif not _broadcasts_only(node, nodes, kinds):
            candidates |= {g.id for g in groups if g.reads & reads.keys()}
        siblings = (
            _siblings(node, nodes, kinds, groups) if kind == "reduction" else set()
        )
        for gid in sorted(candidates | siblings):
            g = groups[gid]
            if can_fuse(g, node, nodes, kinds, group_of, ancestors, reads_from):
                s = score(g, node, nodes, kinds, group_of, reads)
                if gid in siblings:  # sharing nothing, it saves a launch
                    s = max(s, 1)
                if s > best_score:
                    best, best_score = g, s
        if best is None:
            rows, rnumel = (
                reduction_spec(node, nodes)
                if kind != "pointwise"
                else (node.tensor_meta.numel, 1)
            )
            best = _State(len(groups), node, rows, rnumel)
            groups.append(best)
            if kind != "pointwise":
                best.reduce(node, nodes)
        else:
            best.nodes.append(node.name)
            if kind != "pointwise":
                best.reduce(node, nodes)
            through_memory = {
                group_of.get(root)
                for r in node.refs()
                for how, _, root in [resolve(r, nodes, kinds)]
                if how == "buffer"
                or (
                    node.target in MOVEMENT + GATHERS
                    and not index_in_place(node, r, nodes)
                )
            }
            for gid in sorted(candidates - {best.id} - through_memory):
                g = groups[gid]
                if _mergeable(g, best, nodes, kinds, reads_from, ancestors) and not (
                    _read_elsewhere(g, node, users, kinds)
                ):
                    _merge(g, best, group_of, order)
                    reads_from.setdefault(best.id, set()).update(
                        reads_from.pop(g.id, set())
                    )
                    for read in reads_from.values():  # g's readers read best
                        if g.id in read:
                            read.discard(g.id)
                            read.add(best.id)
                    reads_from[best.id].discard(best.id)
        best.reads |= reads.keys()
        _joined(best, node, nodes, kinds, group_of, reads_from)
    return _frozen(graph, nodes, kinds, groups, group_of, device)


def _sibling_scatter(node: Node, nodes, kinds, groups, ancestors) -> _State | None:
    """A scatter's group that scatter `node` joins (Note [Sibling scatters]):
    over as many positions, neither reading what the other writes into."""
    rows = math.prod(put_shape(node, nodes))
    x = resolve(put_parts(node)[0], nodes, kinds)[2]
    reads = _buffer_reads(node, nodes, kinds).keys() | {x}
    for g in reversed(groups):
        if not g.scatter or (g.rows, g.rnumel) != (rows, 1):
            continue
        members = set(g.nodes)
        if ancestors[node.name] & members:
            continue  # it reads what the group computes
        written = {
            resolve(put_parts(nodes[m])[0], nodes, kinds)[2]
            for m in g.nodes
            if kinds[m] == "scatter"
        }
        if written & reads or x in g.reads:
            continue  # one reads what the other writes into
        return g
    return None


def can_join(g: _State, node: Node, nodes, kinds, group_of, reads_from) -> bool:
    """Whether no kernel that `node` reads reads, directly or through others,
    what group `g`'s kernel writes: else `node` in `g` makes a cycle."""
    for producer in _producers(node, nodes, kinds, group_of):
        if producer != g.id and reaches(producer, g.id, reads_from):
            return False
    return True


def _joined(g: _State, node: Node, nodes, kinds, group_of, reads_from) -> None:
    """Record `node` in group `g`, and the groups whose values it reads."""
    group_of[node.name] = g.id
    producers = _producers(node, nodes, kinds, group_of)
    reads_from.setdefault(g.id, set()).update(producers - {g.id})


def _producers(node: Node, nodes, kinds, group_of) -> set[int]:
    """The kernels whose values `node` reads: directly, or through calls that
    are not kernels (a convolution between two kernels: HRNet's fuse layers add
    each branch's convolved neighbours, and a kernel of one branch that took in a
    sum reading the other's convolution closed a cycle through it)."""
    out: set[int] = set()
    todo = [resolve(r, nodes, kinds)[2] for r in sources(node, nodes, kinds)]
    seen: set[str] = set()
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in group_of:
            out.add(group_of[name])
        elif name in nodes:
            todo += [resolve(r, nodes, kinds)[2] for r in nodes[name].refs()]
    return out


def _values_group(node: Node, nodes, kinds, groups, group_of, reads_from):
    """The pointwise group computing scatter `node`'s values (or its mask) at the
    positions of `x[indices]`, which the scatter's kernel then is (Note
    [Scatters] in schedule.py): `x` and the indices come from
    elsewhere, read from memory (the copy of `x` is written before the kernel
    runs), and no kernel that `x` or an index needs reads the group."""
    x, indices, values, mask = put_parts(node)
    shape = put_shape(node, nodes)
    found = None
    for ref in (values, mask):
        if ref is None:
            continue
        how, _, root = resolve(ref, nodes, kinds)
        gid = group_of.get(root)
        if how != "virtual" or gid is None or _meta(nodes, ref.name).shape != shape:
            continue
        g = groups[gid]
        if g.rnumel == 1 and not g.scatter and g.rows == math.prod(shape):
            found = found or g
    if found is None:
        return None
    for ref in (x, *(i for i in indices if i is not None)):
        gid = group_of.get(resolve(ref, nodes, kinds)[2])
        if gid is not None and reaches(gid, found.id, reads_from):
            return None
    return found


def sources(node: Node, nodes, kinds) -> list[Ref]:
    """What computing `node` reads: its arguments, and for values computed where
    they are read ("inline"), what they read, in turn."""
    out: list[Ref] = []
    for r in node.refs():
        how, _, root = resolve(r, nodes, kinds)
        if how == "inline":
            out += sources(nodes[root], nodes, kinds)
        else:
            out.append(r)
    return out


def _mark_inlined(graph: Graph, kinds: dict[str, str], device: str) -> None:
    """Kind "inline" for pointwise values read only by data movement, directly or
    through other such values of their shape (`-x2` in `cat((-x2, x1), -1)`):
    each is computed where the movement reads it, at the positions it reads,
    never written (Note [Data movement in kernels] in schedule.py). A number
    made a tensor of one element (`torch.where(mask, x, -inf)`) is one where
    kernels read it. Pointwise values and data movement read through views that
    move positions (the slices of a pool's windows, a transpose) are computed
    where they are read (`_read_through_views`).
    """
    windows = device == "cuda"
    users = graph.users()
    nodes = graph.by_name()
    positions = position_values(graph, nodes, kinds)
    indices = positions | _index_values(graph, nodes, kinds, positions)
    varying = _of_the_call(graph)
    indexing: set[str] = set()  # Note [Positions as indices] in schedule.py
    for node in reversed(graph.nodes):
        if kinds[node.name] != "pointwise":
            continue
        if node.target in MOVEMENT:
            if _literal(node, nodes, kinds) and _read_by_kernels(
                node, node.name, nodes, kinds, users
            ):
                kinds[node.name] = "inline"
            elif node.name in varying and _read_through_views(
                node, nodes, kinds, users, device
            ):
                kinds[node.name] = "inline"
            continue
        if node.target not in POINTWISE:
            continue
        if node.target in RANGES:  # Note [Ranges in kernels]
            if _read_in_place(node.name, nodes, kinds, users, indexing):
                kinds[node.name] = "inline"
            continue
        if node.name in indices and _indexes(node.name, nodes, kinds, users, indexing):
            kinds[node.name] = "inline"
            indexing.add(node.name)
            continue
        readers = users[node.name]
        if _constant(node) and _read_by_kernels(node, node.name, nodes, kinds, users):
            kinds[node.name] = "inline"  # a literal in each kernel that reads it
            continue
        shape = node.tensor_meta.shape
        if readers and all(
            (kinds.get(u) == "pointwise" and nodes[u].target in MOVEMENT)
            or (kinds.get(u) == "inline" and nodes[u].tensor_meta.shape == shape)
            for u in readers
        ):
            kinds[node.name] = "inline"
        elif _gathered_only(node, nodes, kinds, users, windows):
            kinds[node.name] = "inline"
        elif node.name in varying and _read_through_views(
            node, nodes, kinds, users, device
        ):
            kinds[node.name] = "inline"


def _of_the_call(graph: Graph) -> set[str]:
    """Values that depend on what the call passes in or runs as it is: not on
    parameters and buffers alone, which a variant computes once and keeps (Note
    [Values of parameters alone] in passes/hoist_constants.py), never again in
    each kernel that reads them."""
    out: set[str] = set()
    for n in graph.nodes:
        if n.op in ("input", "fallback", "loop") or any(
            r.name in out for r in n.refs()
        ):
            out.add(n.name)
    return out


def _read_through_views(node: Node, nodes, kinds, users, device: str) -> bool:
    """Whether pointwise or data movement `node` is read through views that move
    its positions (`t`, `permute`, a slice, a dimension split; Note [Places] in
    places.py), by kernels alone, and is cheap enough to compute again at each
    reading: then each reader computes it at the positions it reads, and it is
    never written. On GPUs, each reading adds its ops to the reader's, within the
    bound of windows. On CPUs, where the vector units bound such kernels (Note
    [Windows of computed values] in schedule.py), the readers together compute
    it at no more positions than it has: slices that part it, a transpose; not
    a broadcast, nor windows that overlap."""
    if not _read_by_kernels(node, node.name, nodes, kinds, users):
        return False
    views, readers = _readers(node.name, nodes, kinds, users)
    moves = any(
        isinstance(nodes[v].meta, TensorMeta) and not alias_ok(nodes[v], node)
        for v in views
    )
    sites, positions = 0, 0
    for reader in readers:
        for r in reader.refs():
            if resolve(r, nodes, kinds)[2] != node.name:
                continue
            sites += 1
            if reader.target in MOVEMENT:  # each element where one piece lies
                moves = True
                positions += nodes[r.name].tensor_meta.numel
            elif kinds[reader.name] in ("reduction", "scan"):
                positions += nodes[reader.args[0].name].tensor_meta.numel
            else:
                positions += reader.tensor_meta.numel
    if not moves or not sites:
        return False
    if device != "cuda":
        return positions <= node.tensor_meta.numel
    return sites * _inline_ops(node, nodes, kinds, users) <= WINDOW_OPS_MAX


def _readers(name: str, nodes, kinds, users) -> tuple[list[str], list[Node]]:
    """The views of `name`, through views of them in turn, and the other nodes
    that read `name` or those views (the result among them as "<output>")."""
    views: list[str] = []
    readers: dict[str, Node | str] = {}
    todo = list(users[name])
    while todo:
        u = todo.pop()
        if u in views or u in readers:
            continue
        if kinds.get(u) == "view":
            views.append(u)
            todo += users[u]
        else:
            readers[u] = nodes.get(u, u)
    return views, list(readers.values())


def _gathered_only(node: Node, nodes, kinds, users, again: bool) -> bool:
    """Whether every reader of pointwise `node` is a gather kernels compute that
    gathers from it (not by it), what it reads is in memory (not values kernels
    compute: a loss's gather from a log-softmax computes it from its row's
    statistics, `row_gather`), and computing it at each gathered position is
    cheap enough: `again` (on GPUs), within the bound of windows; else where one
    gather reads it, once for each element it writes (Note [Gathers of computed
    values] in schedule.py)."""
    if any(kinds[resolve(r, nodes, kinds)[2]] in KERNEL_KINDS for r in node.refs()):
        return False
    readers = users[node.name]
    if not readers or any(
        u not in nodes
        or kinds.get(u) != "pointwise"
        or nodes[u].target not in GATHERS
        or nodes[u].args[0].name != node.name
        or _indexes_only(nodes[u], node.name)
        for u in readers
    ):
        return False
    sites = len(readers)
    if not again:
        return sites == 1
    return sites * _inline_ops(node, nodes, kinds, users) <= WINDOW_OPS_MAX


def position_values(graph: Graph, nodes, kinds) -> set[str]:
    """Values computed from positions alone: ranges kernels compute, and
    pointwise values whose operands are numbers, such values, or views of them
    (Note [Positions as indices] in schedule.py)."""
    out: set[str] = set()
    for node in graph.nodes:
        if kinds[node.name] != "pointwise" or node.target in MOVEMENT + GATHERS:
            continue
        refs = list(node.refs())
        if node.target in RANGES or (
            refs and all(resolve(r, nodes, kinds)[2] in out for r in refs)
        ):
            out.add(node.name)
    return out


def _index_values(graph: Graph, nodes, kinds, positions: set[str]) -> set[str]:
    """Integer values computed from memory that no kernel writes, numbers and
    positions by at most INDEX_OPS_MAX pointwise ops (`(ids + 1) % n`,
    `t.clamp(0, n - 1)`): where gathers alone read them, as indices, each gather
    computes them where it reads them, as it does positions (Note [Indices
    computed in the kernel] in schedule.py). Not a value that fallback code
    writes the memory of after it is computed."""
    pinned = read_before_fallback(graph)
    ops: dict[str, int] = {}
    for node in graph.nodes:
        if (
            kinds[node.name] != "pointwise"
            or node.target not in POINTWISE
            or not any(True for _ in node.refs())  # a range or a factory
            or node.name in pinned
            or is_random(node.target)
            or node.tensor_meta.dtype not in INDEX_TYPES
            or any(isinstance(v, Ref) for _, v in node.kwargs)
        ):
            continue
        total, ok = 1, True
        for r in node.refs():
            how, _, root = resolve(r, nodes, kinds)
            if root in ops:
                total += ops[root]
            elif root not in positions and (
                how != "buffer" or kinds[root] in (*KERNEL_KINDS, "item")
            ):
                ok = False
        if ok and total <= INDEX_OPS_MAX:
            ops[node.name] = total
    return set(ops)


def _indexes(name: str, nodes, kinds, users, indexing: set[str]) -> bool:
    """Whether position value `name` is read only as the index of gathers
    kernels compute, directly or through other such values."""
    readers = users[name]
    return bool(readers) and all(
        u in indexing
        or (
            u in nodes
            and kinds[u] in ("pointwise", "scatter")
            and _indexes_only(nodes[u], name)
        )
        for u in readers
    )


def _read_in_place(
    name: str,
    nodes: dict[str, Node],
    kinds: dict[str, str],
    users: dict,
    indexing: set[str],
) -> bool:
    """Whether every reader of `name` is a kernel's pointwise op, reduction or
    scan, or a position computed where a gather reads it, reading it directly or
    through views: each reads it at an address, which for a range is the value
    there (its position)."""
    readers = users[name]
    for u in readers:
        if u == "<output>":
            return False
        node = nodes[u]
        if u in indexing:
            continue
        if kinds[u] == "view":  # its strides address the range's positions
            if not _read_in_place(u, nodes, kinds, users, indexing):
                return False
        elif kinds[u] in ("pointwise", "inline"):
            if node.target in MOVEMENT + GATHERS and not _indexes_only(node, name):
                return False
        elif kinds[u] == "scatter":
            if not _indexes_only(node, name):
                return False
        elif kinds[u] not in ("reduction", "scan"):
            return False
    return bool(readers)


def _indexes_only(node: Node, name: str) -> bool:
    """Whether gather `node` reads `name` as its index alone, not as the tensor
    it gathers from; or scatter `node`, not as what it adds into or adds."""
    parts = put_parts(node)
    if parts is not None:
        x, indices, values, mask = parts
        if name in {r.name for r in (x, values, mask) if isinstance(r, Ref)}:
            return False
        return any(isinstance(i, Ref) and i.name == name for i in indices)
    if node.target not in GATHERS or node.args[0].name == name:
        return False
    return any(isinstance(i, Ref) and i.name == name for i in gather_indices(node))


def _literal(node: Node, nodes, kinds) -> bool:
    """A small tensor of numbers alone: one element (`_constant`), or a `cat` or
    `stack` of such (`torch.tensor([0.299, 0.587, 0.114])`), of at most
    LITERAL_NUMEL elements. Each kernel that reads it chooses its element by
    position (Note [Data movement in kernels] in schedule.py)."""
    if _constant(node):
        return True
    if node.target not in MOVEMENT or node.tensor_meta.numel > LITERAL_NUMEL:
        return False
    return all(
        _literal(nodes[resolve(r, nodes, kinds)[2]], nodes, kinds) for r in node.refs()
    )


def _read_by_kernels(base: Node, name: str, nodes, kinds, users) -> bool:
    """Whether kernels alone read `name` (`base` or a view of it), through views
    that map into `base` (Note [Places] in places.py), none gathering from it."""
    views, readers = _readers(name, nodes, kinds, users)
    for v in views:  # (a split's pieces are views of their own)
        meta = nodes[v].meta
        if isinstance(meta, TensorMeta) and not maps_into(meta, base.tensor_meta):
            return False
    for reader in readers:
        if not isinstance(reader, Node):  # the result
            return False
        kind = kinds.get(reader.name)
        if kind == "scatter":
            if not _constant(base):
                return False
        elif kind not in ("pointwise", "reduction", "scan", "inline"):
            return False
        elif reader.target in GATHERS:
            return False
    return bool(readers)


def _constant(node: Node) -> bool:
    """A one-element tensor made of a number (`torch.where(mask, x, -inf)`'s
    `scalar_tensor`, a `full` of one element)."""
    return node.tensor_meta.numel == 1 and not any(
        isinstance(a, Ref) for a in (*node.args, *(v for _, v in node.kwargs))
    )


def _inline_ops(node: Node, nodes, kinds, users) -> int:
    """The ops computing `node` again takes: it, and the pointwise values of its
    shape that only it reads (those become "inline" with it)."""
    total = 1
    for r in node.refs():
        operand = nodes[r.name]
        if (
            kinds.get(r.name) == "pointwise"
            and operand.target in POINTWISE
            and (
                operand.tensor_meta.shape == node.tensor_meta.shape
                or node.target in MOVEMENT
            )
            and users[r.name] == [node.name]
        ):
            total += _inline_ops(operand, nodes, kinds, users)
    return total


def _mergeable(g: _State, into: _State, nodes, kinds, reads_from, ancestors) -> bool:
    """Whether group `g`, which no kernel reads yet, can be computed in `into`.

    A pointwise `g` is computed per row or per element of `into`: a value
    recomputed at its reader's shape (passes/recompute.py), or a reduction's
    result broadcast back over its input (a mean's backward), starts a group of
    its own, having no producer it can join, and belongs in its reader's kernel.
    The kernels it reads must not read `into`. A reduction `g` over the same rows as
    reduction `into` must read only kernels `into` reads, so that `into`'s place
    in the program follows them (Note [Sibling reductions])."""
    if not g.nodes or g.scatter or into.scatter:
        return False
    if g.rnumel == 1:
        at = level(into, g.rows)
        if at is None or (
            at == "r"
            and not all(r_shape_ok(into, _meta(nodes, m).shape) for m in g.nodes)
        ):
            return False
        if any(reaches(p, into.id, reads_from) for p in reads_from.get(g.id, ())):
            return False
    else:
        same_rows = g.rows_spec() == into.rows_spec()
        scans = any(kinds[m] == "scan" for m in g.nodes + into.nodes)
        if not same_rows or scans:
            return False
        if not reads_from.get(g.id, set()) <= reads_from.get(into.id, set()):
            return False
    if any(g.id in r for r in reads_from.values()):
        return False
    members, others = set(g.nodes), set(into.nodes[:-1])
    return not any(ancestors[m] & members for m in others) and not any(
        ancestors[m] & others for m in members
    )


def _read_elsewhere(g: _State, node: Node, users, kinds) -> bool:
    """Whether anything but kernels and the graph's result reads a value of
    `g`, directly or through views (an extern call reading it could not run
    between the parts of one kernel). Another kernel reading it reads it from
    memory, after the merged kernel (a distillation loss's teacher softmax, read
    by the student's row kernel and by the kernel of its terms)."""
    members = set(g.nodes)
    todo = [u for m in g.nodes for u in users.get(m, ())]
    while todo:
        user = todo.pop()
        if kinds.get(user) == "view":
            todo += users.get(user, ())
        elif user in members or user in (node.name, "<output>"):
            continue
        elif kinds.get(user) not in (*KERNEL_KINDS, "inline"):
            return True
    return False


def _merge(g: _State, into: _State, group_of: dict[str, int], order) -> None:
    into.nodes = sorted(into.nodes + g.nodes, key=order.__getitem__)
    into.reads |= g.reads
    for m in g.nodes:
        group_of[m] = into.id
    g.nodes = []


def _frozen(
    graph: Graph, nodes, kinds, groups: list[_State], group_of, device: str
) -> Fusion:
    """The groups left after merges, numbered in order."""
    ids = {g.id: i for i, g in enumerate(g for g in groups if g.nodes)}
    group_of = {name: ids[gid] for name, gid in group_of.items()}
    frozen = tuple(
        Group(ids[g.id], tuple(g.nodes), g.rows, g.rnumel, g.order)
        for g in groups
        if g.nodes
    )
    realized = _realized(graph, nodes, kinds, group_of)
    return Fusion(kinds, frozen, group_of, realized, device)


def _buffer_reads(node: Node, nodes, kinds) -> dict[str, int]:
    """Buffers `node` reads from memory, with the number of elements it reads."""
    out: dict[str, int] = {}
    for r in node.refs():
        how, via, root = resolve(r, nodes, kinds)
        if how == "buffer":
            out[root] = max(out.get(root, 0), _meta(nodes, via).numel)
    return out


def _broadcasts_only(node: Node, nodes, kinds) -> bool:
    """Whether every buffer `node` reads, it reads broadcast (a few values, each at
    many positions: batch norm's statistics read per channel). Sharing such reads
    with another kernel saves nothing; its values belong in the kernel of their
    reader (`_mergeable`)."""
    reads = [resolve(r, nodes, kinds) for r in node.refs()]
    return bool(reads) and all(
        how == "buffer" and 0 in _meta(nodes, via).stride for how, via, _ in reads
    )


def _siblings(node: Node, nodes, kinds, groups: list[_State]) -> set[int]:
    """Groups reducing rows like reduction `node`'s, where it is small enough for
    its launch to outweigh its memory traffic (Note [Sibling reductions])."""
    rows = _rows_of(node, nodes)
    if rows[0] * rows[1] > SIBLING_NUMEL:
        return set()
    return {
        g.id
        for g in groups
        if g.nodes
        and g.rows_spec() == rows
        and g.rnumel != 1
        and not any(kinds[m] == "scan" for m in g.nodes)
    }


def _producer_groups(node, nodes, kinds, group_of) -> set[int]:
    out = set()
    for r in node.refs():
        how, _, root = resolve(r, nodes, kinds)
        if how == "virtual" and root in group_of:
            out.add(group_of[root])
    return out


def r_shape_ok(g: _State, shape: tuple[int, ...]) -> bool:
    """Whether a value of `shape` can be computed per element of `g`'s rows: its
    trailing dimensions make a row, or, for a reduction over other dimensions, it
    has the shape of the reduction's input (Note [Reduction order])."""
    return shape == g.shape if g.order else splits(shape, g.rnumel)


def level(g: _State, numel: int) -> str | None:
    if g.rnumel == 1:
        return "x" if numel == g.rows else None
    if numel == g.rows * g.rnumel:
        return "r"
    return "x" if numel == g.rows else None


def can_fuse(
    g: _State, node: Node, nodes, kinds, group_of, ancestors, reads_from=None
) -> bool:
    """Is it legal to compute `node` in group `g`'s kernel?"""
    if g.scatter:
        return False
    members = set(g.nodes)
    if not can_join(g, node, nodes, kinds, group_of, reads_from or {}):
        return False  # a kernel it reads must not read this one
    if kinds[node.name] in ("reduction", "scan"):
        rows, rnumel = reduction_spec(node, nodes)
        src = nodes[node.args[0].name].tensor_meta
        order = reduction_order(node, nodes)
        if g.rnumel == 1:  # a pointwise group becomes this reduction's prologue
            if g.rows != rows * rnumel:
                return False
            if not order and not splits(src.shape, rnumel):
                return False
            for m in g.nodes:
                shape = _meta(nodes, m).shape
                if shape != src.shape if order else not splits(shape, rnumel):
                    return False
        elif (g.rows, g.rnumel) != (rows, rnumel):
            return False
        elif (g.order or order) and (g.order, g.shape) != (order, src.shape):
            return False
        node_level, shape = "r", src.shape
    else:
        meta = node.tensor_meta
        node_level = level(g, meta.numel)
        shape = meta.shape
        if node_level is None or (node_level == "r" and not r_shape_ok(g, shape)):
            return False
    if row_gather(g, node, nodes, kinds, members):
        return True
    # a gather reads what it gathers from elsewhere than it writes, and values
    # computed where it reads them read their operands there too
    reads = sources(node, nodes, kinds) if node.target in GATHERS else node.refs()
    for r in reads:
        how, _, root = resolve(r, nodes, kinds)
        if how == "virtual" and root in members:
            if node.target in MOVEMENT + GATHERS and not index_in_place(node, r, nodes):
                return False  # it reads elsewhere than it writes
            if not _virtual_ok(g, _meta(nodes, r.name), node_level, shape):
                return False
        elif root in members or ancestors[root] & members:
            return False  # would read back what this kernel writes
    return True


def row_gather(g: _State, node: Node, nodes, kinds, members: set[str]) -> bool:
    """Whether `node` gathers one element per row of reduction group `g` from a
    value the group computes per element (`gather(log_softmax(x), -1, t)` of a
    loss): the element is computed again at the gathered position from what it
    is a function of, the row's own values and memory (Note [Indirect loads]),
    the index read where the result is."""
    if node.target != "aten.gather.default" or g.rnumel == 1 or g.order:
        return False
    source, index = nodes[node.args[0].name], nodes[node.args[2].name]
    meta = node.tensor_meta
    shape = source.tensor_meta.shape
    if not shape or node.args[1] % len(shape) != len(shape) - 1:
        return False  # along the row's one dimension only
    if shape[-1] != g.rnumel or meta.numel != g.rows or meta.shape[-1] != 1:
        return False
    if (
        level(g, index.tensor_meta.numel) != "x"
        or index.tensor_meta.shape != meta.shape
    ):
        return False
    return _recomputable(node.args[0], g, nodes, kinds, members)


def _recomputable(ref: Ref, g: _State, nodes, kinds, members: set[str]) -> bool:
    """Whether a value of group `g` can be computed at another element of its row:
    memory, the row's values, or pointwise ops of those."""
    how, _, root = resolve(ref, nodes, kinds)
    if how == "buffer":
        return root not in members
    if root not in members:
        return False  # another kernel's, read from memory at its own positions
    node = nodes[root]
    if nodes[ref.name].meta != node.meta:
        return False  # a view of it that moves positions (`unsqueeze`, `t`)
    if level(g, node.tensor_meta.numel) == "x":
        return True  # the row's own
    if node.target not in POINTWISE:
        return False
    return all(_recomputable(r, g, nodes, kinds, members) for r in node.refs())


def reaches(src: int, dst: int, reads_from: dict[int, set[int]]) -> bool:
    """Whether kernel `src` reads, directly or through others, what `dst` writes."""
    seen, todo = set(), [src]
    while todo:
        gid = todo.pop()
        if gid == dst:
            return True
        if gid not in seen:
            seen.add(gid)
            todo += reads_from.get(gid, ())
    return False


def _virtual_ok(g: _State, value: TensorMeta, node_level: str, shape) -> bool:
    """Whether a value computed in `g`'s kernel, read through a view of the
    same flat order whose meta is `value`, is there for a node of `shape`
    computed at `node_level`: a per-row value is, where its view broadcasts
    along the row's dimensions alone (`m.unsqueeze(-1)` of a row's maximum, not
    `m.view(1, -1)`)."""
    value_level = level(g, value.numel)
    if g.rnumel == 1 or value_level == node_level:
        return True
    if value_level == "r":  # a per-element value cannot feed a per-row one
        return False
    padded = (1,) * (len(shape) - len(value.shape)) + value.shape
    if g.order:  # kept dimensions first (Note [Reduction order])
        shape = tuple(shape[d] for d in g.order)
        padded = tuple(padded[d] for d in g.order)
    acc, i = 1, len(shape)
    while acc < g.rnumel:
        i -= 1
        acc *= shape[i]
    return padded[:i] == shape[:i] and all(d == 1 for d in padded[i:])


def score(g: _State, node: Node, nodes, kinds, group_of, reads: dict[str, int]) -> int:
    """How much memory traffic fusing saves: the elements of the values it shares
    with the group, computed there (kept in registers) or read there (read once)."""
    total = sum(n for root, n in reads.items() if root in g.reads)
    for r in node.refs():
        how, _, root = resolve(r, nodes, kinds)
        if how == "virtual" and group_of.get(root) == g.id:
            total += _meta(nodes, root).numel
    return total


def _meta(nodes, name) -> TensorMeta:
    return nodes[name].tensor_meta


def _ancestors(graph: Graph) -> dict[str, frozenset[str]]:
    out: dict[str, frozenset[str]] = {}
    for n in graph.nodes:
        acc: set[str] = set()
        for r in n.refs():
            acc.add(r.name)
            acc |= out[r.name]
        out[n.name] = frozenset(acc)
    return out


def _realized(graph: Graph, nodes, kinds, group_of) -> frozenset[str]:
    """Group members read from outside their group, through any views."""
    realized: set[str] = set()

    def need(ref: Ref, reader_group: int | None) -> None:
        how, _, root = resolve(ref, nodes, kinds)
        if root not in group_of:
            return
        if how == "virtual" and reader_group == group_of[root]:
            return
        realized.add(root)

    for n in graph.nodes:
        kind = kinds[n.name]
        if kind in ("view", "item"):
            continue
        reader = group_of.get(n.name)
        for r in n.refs():
            need(r, reader)
    from transpiler.ir.graph import iter_refs

    for r in iter_refs(graph.outputs):
        need(r, None)
    return frozenset(realized)
