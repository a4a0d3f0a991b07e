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
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from transpiler.ir.graph import Graph, Node, Ref, TensorMeta
from transpiler.ir.ops import (
    FLOAT_TYPES,
    INTEGER_ONLY,
    POINTWISE,
    REDUCTIONS,
    SUPPORTED_DTYPES,
    bind_args,
    is_view,
)


@dataclass(frozen=True)
class Group:
    id: int
    nodes: tuple[str, ...]  # members in graph order
    rows: int  # xnumel
    rnumel: int  # 1 for a pointwise group


@dataclass(frozen=True)
class Fusion:
    kinds: dict[str, str]  # node -> buffer|extern|view|item|pointwise|reduction
    groups: tuple[Group, ...]
    group_of: dict[str, int]
    realized: frozenset[str]


# ---- classification -------------------------------------------------------------

# Arguments of casts and factories that do not change the values computed: the
# result's layout and device are the wrapper's to allocate.
CAST_KWARGS = {"dtype", "layout", "device", "pin_memory"}


def classify(node: Node, nodes: dict[str, Node]) -> str:
    if node.op in ("input", "param"):
        return "buffer"
    if node.target == "getitem":
        source = nodes[node.args[0].name]
        if source.target in REDUCTIONS and reduction_ok(source, nodes):
            return "item"
        return "view" if is_view(source.target) else "extern_item"
    if is_view(node.target):
        return "view"
    if pointwise_ok(node, nodes):
        return "pointwise"
    if reduction_ok(node, nodes):
        return "reduction"
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
    allowed = {"memory_format"} | (CAST_KWARGS if row.kind == "cast" else set())
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


def reduction_spec(node: Node, nodes: dict[str, Node]) -> tuple[int, int]:
    """(rows, rnumel) of a reduction over trailing dimensions."""
    bound = bind_args(node.target, node.args, node.kwargs)
    shape = nodes[node.args[0].name].tensor_meta.shape
    dims = bound.get("dim")
    if not dims:
        dims = range(len(shape))
    dims = sorted({d % max(len(shape), 1) for d in dims})
    k = len(dims)
    if dims != list(range(len(shape) - k, len(shape))):
        return (0, 0)
    rnumel = 1
    for d in shape[len(shape) - k :]:
        rnumel *= d
    rows = 1
    for d in shape[: len(shape) - k]:
        rows *= d
    return rows, rnumel


def reduction_ok(node: Node, nodes: dict[str, Node]) -> bool:
    if node.target not in REDUCTIONS or not isinstance(node.args[0], Ref):
        return False
    x = nodes[node.args[0].name].meta
    if not isinstance(x, TensorMeta) or x.dtype not in FLOAT_TYPES:
        return False
    bound = bind_args(node.target, node.args, node.kwargs)
    if bound.get("dtype") is not None:
        return False
    rows, rnumel = reduction_spec(node, nodes)
    return rows >= 1 and rnumel > 1


# ---- fusion ---------------------------------------------------------------------


class _State:
    def __init__(self, gid: int, node: Node, rows: int, rnumel: int):
        self.id = gid
        self.nodes = [node.name]
        self.rows = rows
        self.rnumel = rnumel
        self.reads: set[str] = set()  # buffers the group's kernel loads


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
    """
    name = ref.name
    node = nodes[name]
    chain_ok = True
    while kinds[name] == "view":
        base = nodes[node.args[0].name]
        if not alias_ok(node, base):
            chain_ok = False
        name, node = base.name, base
        if kinds[name] != "view" and not chain_ok:
            return ("buffer", ref.name, name)
    if kinds[name] in ("pointwise", "reduction", "item") and chain_ok:
        return ("virtual", name, name)
    return ("buffer", ref.name, name)


def splits(shape: tuple[int, ...], rnumel: int) -> bool:
    """Whether trailing dims of `shape` multiply to exactly `rnumel`."""
    acc = 1
    for d in reversed(shape):
        if acc == rnumel:
            return True
        acc *= d
    return acc == rnumel


def fuse(graph: Graph) -> Fusion:
    nodes = graph.by_name()
    kinds = {n.name: classify(n, nodes) for n in graph.nodes}
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
        if kind not in ("pointwise", "reduction"):
            continue
        best, best_score = None, 0
        reads = _buffer_reads(node, nodes, kinds)
        candidates = _producer_groups(node, nodes, kinds, group_of)
        if not _broadcasts_only(node, nodes, kinds):
            candidates |= {g.id for g in groups if g.reads & reads.keys()}
        for gid in sorted(candidates):
            g = groups[gid]
            if can_fuse(g, node, nodes, kinds, group_of, ancestors, reads_from):
                s = score(g, node, nodes, kinds, group_of, reads)
                if s > best_score:
                    best, best_score = g, s
        if best is None:
            rows, rnumel = (
                reduction_spec(node, nodes)
                if kind == "reduction"
                else (node.tensor_meta.numel, 1)
            )
            best = _State(len(groups), node, rows, rnumel)
            groups.append(best)
        else:
            best.nodes.append(node.name)
            if kind == "reduction":
                best.rows, best.rnumel = reduction_spec(node, nodes)
            through_memory = {
                group_of.get(root)
                for how, _, root in (resolve(r, nodes, kinds) for r in node.refs())
                if how == "buffer"
            }
            for gid in sorted(candidates - {best.id} - through_memory):
                g = groups[gid]
                if _mergeable(g, best, nodes, reads_from, ancestors) and not (
                    _read_elsewhere(g, node, users, kinds)
                ):
                    _merge(g, best, group_of, order)
        best.reads |= reads.keys()
        group_of[node.name] = best.id
        producers = {group_of.get(resolve(r, nodes, kinds)[2]) for r in node.refs()}
        reads_from.setdefault(best.id, set()).update(producers - {None, best.id})
    return _frozen(graph, nodes, kinds, groups, group_of)


def _mergeable(g: _State, into: _State, nodes, reads_from, ancestors) -> bool:
    """Whether pointwise group `g`, which reads only memory no kernel writes and
    which no kernel reads yet, can be computed in `into`, per row or per element of
    it: a value recomputed at its reader's shape (passes/recompute.py) starts a
    group of its own, having no producer to join, and belongs in its reader's
    kernel."""
    if g.rnumel != 1 or not g.nodes:
        return False
    at = level(into, g.rows)
    if at is None or (
        at == "r"
        and not all(splits(_meta(nodes, m).shape, into.rnumel) for m in g.nodes)
    ):
        return False
    if reads_from.get(g.id) or any(g.id in r for r in reads_from.values()):
        return False
    members, others = set(g.nodes), set(into.nodes[:-1])
    return not any(ancestors[m] & members for m in others) and not any(
        ancestors[m] & others for m in members
    )


def _read_elsewhere(g: _State, node: Node, users, kinds) -> bool:
    """Whether anything but `node`, `g`'s own members and the graph's result
    reads a value of `g`, directly or through views (an extern call reading it
    could not run between the parts of one kernel)."""
    members = set(g.nodes)
    todo = [u for m in g.nodes for u in users.get(m, ())]
    while todo:
        user = todo.pop()
        if kinds.get(user) == "view":
            todo += users.get(user, ())
        elif user not in members and user not in (node.name, "<output>"):
            return True
    return False


def _merge(g: _State, into: _State, group_of: dict[str, int], order) -> None:
    into.nodes = sorted(into.nodes + g.nodes, key=order.__getitem__)
    into.reads |= g.reads
    for m in g.nodes:
        group_of[m] = into.id
    g.nodes = []


def _frozen(graph: Graph, nodes, kinds, groups: list[_State], group_of) -> Fusion:
    """The groups left after merges, numbered in order."""
    ids = {g.id: i for i, g in enumerate(g for g in groups if g.nodes)}
    group_of = {name: ids[gid] for name, gid in group_of.items()}
    frozen = tuple(
        Group(ids[g.id], tuple(g.nodes), g.rows, g.rnumel) for g in groups if g.nodes
    )
    realized = _realized(graph, nodes, kinds, group_of)
    return Fusion(kinds, frozen, group_of, realized)


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


def _producer_groups(node, nodes, kinds, group_of) -> set[int]:
    out = set()
    for r in node.refs():
        how, _, root = resolve(r, nodes, kinds)
        if how == "virtual" and root in group_of:
            out.add(group_of[root])
    return out


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
    members = set(g.nodes)
    for r in node.refs():  # a kernel it reads must not (transitively) read this one
        producer = group_of.get(resolve(r, nodes, kinds)[2])
        if producer not in (None, g.id) and _reaches(producer, g.id, reads_from or {}):
            return False
    if kinds[node.name] == "reduction":
        rows, rnumel = reduction_spec(node, nodes)
        src = nodes[node.args[0].name].tensor_meta
        if g.rnumel == 1:  # a pointwise group becomes this reduction's prologue
            if g.rows != rows * rnumel or not splits(src.shape, rnumel):
                return False
            if any(not splits(_meta(nodes, m).shape, rnumel) for m in g.nodes):
                return False
        elif (g.rows, g.rnumel) != (rows, rnumel):
            return False
        node_level, shape = "r", src.shape
    else:
        meta = node.tensor_meta
        node_level = level(g, meta.numel)
        shape = meta.shape
        if node_level is None or (node_level == "r" and not splits(shape, g.rnumel)):
            return False
    for r in node.refs():
        how, _, root = resolve(r, nodes, kinds)
        if how == "virtual" and root in members:
            if not _virtual_ok(g, _meta(nodes, root), node_level, shape):
                return False
        elif root in members or ancestors[root] & members:
            return False  # would read back what this kernel writes
    return True


def _reaches(src: int, dst: int, reads_from: dict[int, set[int]]) -> bool:
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
    value_level = level(g, value.numel)
    if g.rnumel == 1 or value_level == node_level:
        return True
    if value_level == "r":  # a per-element value cannot feed a per-row one
        return False
    padded = (1,) * (len(shape) - len(value.shape)) + value.shape
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
