"""Compute a stored value again in the kernels that read it, where that loads no
more memory than reading it back.

Before:  kernel 0: sub = conv - mean;  mul = sub * rstd;  le = relu(...) <= 0
                   -- stored: sub, mul, le (kernel 1 reads them)
         kernel 1: where = where(le, 0, dy);  s = sum(where * mul, [2, 3]); ...
After:   kernel 0: (sub, mul and le are not stored)
         kernel 1: sub_1 = conv - mean;  mul_1 = sub_1 * rstd;  le_1 = ...;
                   where = where(le_1, 0, dy);  s = sum(where * mul_1, [2, 3]); ...

Note [Computing stored values again]
~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
Fusion puts each op in one kernel: a pointwise value two kernels read is computed
in one and stored for the other. Storing costs a write and a read of the value
and the memory it holds between the two kernels; computing it again in the
reader costs the reads of what it is computed from, which the reader often makes
anyway. A batch norm's backward reads the normalized input, the ReLU mask and the
centered input, each a function of the convolution's output and per-channel
statistics: computed again from the convolution's output in the kernel of the
reductions, three stored tensors become one read. This is what TorchInductor's
scheduler does when it inlines pointwise producers into every consumer; here the
choice is made after a first fusion, from what each kernel reads:

- a value is computed again where it is pointwise and a function of memory
  through at most `MAX_NODES` pointwise ops of its own kernel (no reduction, data
  movement or random draw among them), read by the other kernel at its own
  positions: directly, or through views that keep each element's flat index
  (`unsqueeze`, a contiguous `view`; the gather index of a loss), which are
  copied with it; a value of its kernel it reads through a view is read from
  memory, where that kernel stores it anyway;
- for each reading kernel, the values it would compute again are taken together:
  the bytes per element of the memory their ops read that the kernel does not
  read already must not exceed the bytes of the values it no longer reads.
  Broadcast operands (a channel's statistics) count nothing.

The graph is fused again with each copy starting its own kernel, which the
reader's kernel takes in (`fuse`'s `alone`). Where a copy would still be stored,
that reader keeps reading the stored values, and the graph is fused again. A
kernel that took copies in can find other stored values it now reads no more
memory to compute (a loss's row kernel, once it reads the targets for the
gather's index, computes the masks of ignored targets that the last kernel
counts): up to `ROUNDS` rounds, the copies of each kept `alone`.
"""

from __future__ import annotations

import dataclasses

from transpiler.ir.graph import Graph, Node, Ref, map_refs
from transpiler.ir.ops import GATHERS, MOVEMENT, is_random
from transpiler.passes.dce import dce
from transpiler.passes.fuse import KERNEL_KINDS, Fusion, fuse, resolve

MAX_NODES = 12  # ops computed again for one stored value
ROUNDS = 3  # a kernel that took copies in may read others that it then can


def rematerialize(graph: Graph, fusion: Fusion, device: str) -> tuple[Graph, Fusion]:
    alone: frozenset[str] = frozenset()
    for _ in range(ROUNDS):
        again = _round(graph, fusion, device, alone)
        if again is None:
            break
        graph, fusion, alone = again
    return graph, fusion


def _round(
    graph: Graph, fusion: Fusion, device: str, alone: frozenset[str]
) -> tuple[Graph, Fusion, frozenset[str]] | None:
    """One round: the values kernels would compute again, copied into them and
    fused again (with the copies of earlier rounds still `alone`); None where
    no kernel takes any."""
    nodes = graph.by_name()
    kinds, group_of = fusion.kinds, fusion.group_of
    chains = {
        name: chain
        for name in sorted(fusion.realized)
        if (chain := _chain(nodes[name], nodes, kinds, group_of, fusion.realized))
        is not None
    }
    if not chains:
        return None
    reads = _memory_reads(graph, nodes, kinds, group_of)
    taken: dict[int, list[str]] = {}  # reading kernel -> values it computes again
    for gid, values in sorted(
        _direct_readers(graph, chains, nodes, kinds, group_of).items()
    ):
        chosen = _worth_it(values, chains, reads.get(gid, {}), nodes)
        if chosen:
            taken[gid] = chosen
    while taken:
        again, copies = _copied(graph, nodes, kinds, chains, taken, group_of)
        again = dce(again)
        refused = fuse(again, device, alone=alone | copies.keys())
        stored = {copies[c] for c in refused.realized & copies.keys()}
        if not stored:
            return again, refused, alone | copies.keys()
        # a copy its reader's kernel did not take would be stored too: no better
        taken = {gid: v for gid, v in taken.items() if gid not in stored}
    return None


def _chain(
    node: Node, nodes, kinds, group_of, stored: frozenset[str]
) -> dict[str, dict[str, int]] | None:
    """The ops of `node`'s kernel that compute it (it last), each with the memory
    it reads and the bytes per element of each read (0: broadcast); None where
    it cannot be computed again. A value of the kernel read through a view, or
    a reduction's result, is read from memory where the kernel stores it anyway
    (a split reduction's `x.view(16, 256, n).float()` of a bf16 `x` a matmul
    reads too; `m == -inf` of a split softmax's partial maxima)."""
    out: dict[str, dict[str, int]] = {}

    def visit(n: Node) -> bool:
        if n.name in out:
            return True
        if (
            kinds[n.name] != "pointwise"
            or n.target in MOVEMENT + GATHERS
            or is_random(n.target)
            or any(isinstance(v, Ref) for _, v in n.kwargs)
        ):
            return False
        memory: dict[str, int] = {}
        for r in n.refs():
            how, via, root = resolve(r, nodes, kinds)
            if how == "virtual" and group_of.get(root) == group_of[node.name]:
                if r.name != root and root in stored and root != node.name:
                    via = r.name  # through a view: read back where it is stored
                elif root in stored and kinds[root] != "pointwise":
                    via = root  # a reduction's result: read back likewise
                elif r.name != root or not visit(nodes[root]):
                    return False
                else:
                    continue
            if how == "inline":
                return False
            meta = nodes[via].tensor_meta
            full = meta.numel == n.tensor_meta.numel and 0 not in meta.stride
            memory[root] = max(memory.get(root, 0), meta.dtype.itemsize if full else 0)
        out[n.name] = memory
        return len(out) <= MAX_NODES

    return out if visit(node) else None


def _memory_reads(graph: Graph, nodes, kinds, group_of) -> dict[int, dict[str, int]]:
    """For each kernel, the memory it reads with the bytes per element."""
    out: dict[int, dict[str, int]] = {}
    for n in graph.nodes:
        gid = group_of.get(n.name)
        if gid is None or kinds[n.name] not in KERNEL_KINDS:
            continue
        for r in n.refs():
            how, via, root = resolve(r, nodes, kinds)
            if how == "virtual" and group_of.get(root) == gid:
                continue
            size = nodes[via].tensor_meta.dtype.itemsize
            mine = out.setdefault(gid, {})
            mine[root] = max(mine.get(root, 0), size)
    return out


def _direct_readers(
    graph: Graph, chains, nodes, kinds, group_of
) -> dict[int, list[str]]:
    """For each other kernel reading values of `chains`, those it reads at their
    own positions only: directly, or through views that keep each element's
    flat index (`unsqueeze`, a contiguous `view`), which are copied with them; a
    view that moves positions would read the copy elsewhere."""
    direct: dict[int, set[str]] = {}
    viewed: dict[int, set[str]] = {}
    for n in graph.nodes:
        gid = group_of.get(n.name)
        if gid is None or kinds[n.name] not in KERNEL_KINDS:
            continue
        for r in n.refs():
            how, _, root = resolve(r, nodes, kinds)
            if root not in chains or group_of[root] == gid:
                continue
            same = r.name == root or how == "virtual"
            (direct if same else viewed).setdefault(gid, set()).add(root)
    return {
        gid: sorted(values - viewed.get(gid, set()))
        for gid, values in direct.items()
        if values - viewed.get(gid, set())
    }


def _worth_it(values: list[str], chains, reads: dict[str, int], nodes) -> list[str]:
    """The values of `values` a kernel reading `reads` computes again: dropped one
    at a time, the costliest first, until the memory their ops read that the
    kernel does not read already costs no more than the values (Note [Computing
    stored values again])."""
    values = list(values)
    while values:
        if _cost(values, chains, reads) <= _bytes(values, nodes):
            return values
        values.remove(
            max(values, key=lambda v: _cost([v], chains, reads) - _bytes([v], nodes))
        )
    return []


def _cost(values: list[str], chains, reads: dict[str, int]) -> int:
    """Bytes per element of the new reads computing `values` again takes."""
    new: dict[str, int] = {}
    for v in values:
        for memory in chains[v].values():
            for name, size in memory.items():
                if size > reads.get(name, 0):
                    new[name] = max(new.get(name, 0), size)
    return sum(new.values())


def _bytes(values: list[str], nodes) -> int:
    return sum(nodes[v].tensor_meta.dtype.itemsize for v in values)


def _copied(
    graph: Graph, nodes, kinds, chains, taken, group_of
) -> tuple[Graph, dict[str, int]]:
    """`graph` with, for each reading kernel, a copy of the ops of the values it
    computes again, placed after each original, and its reads rewired to them;
    and the kernel each copy is for."""
    used = set(nodes)
    copy_of: dict[tuple[int, str], str] = {}  # (kernel, original) -> copy
    views = _views_read(graph, nodes, kinds, taken, group_of)
    for gid, values in taken.items():
        for v in values:
            for name in (*chains[v], *views.get(gid, ())):
                if (gid, name) not in copy_of:
                    fresh, k = f"{name}_{gid}", 1
                    while fresh in used:
                        fresh, k = f"{name}_{gid}_{k}", k + 1
                    used.add(fresh)
                    copy_of[gid, name] = fresh
    by_original: dict[str, list[int]] = {}
    for gid, name in copy_of:
        by_original.setdefault(name, []).append(gid)

    def reads_copies(n: Node, gid: int, of: set[str]) -> Node:
        """`n` reading kernel `gid`'s copies of the values `of`."""
        return _rewired(n, lambda r: Ref(copy_of[gid, r.name]) if r.name in of else r)

    out: list[Node] = []
    for n in graph.nodes:
        gid = group_of.get(n.name)
        if gid in taken:
            n = reads_copies(n, gid, {*taken[gid], *views.get(gid, ())})
        out.append(n)
        for g in sorted(by_original.get(n.name, ())):
            copied = {name for (k, name) in copy_of if k == g}
            copy = reads_copies(n, g, copied)
            out.append(dataclasses.replace(copy, name=copy_of[g, n.name]))
    return graph.with_nodes(out), {c: gid for (gid, _), c in copy_of.items()}


def _views_read(graph: Graph, nodes, kinds, taken, group_of) -> dict[int, list[str]]:
    """For each reading kernel, the views through which it reads the values it
    computes again, in the graph's order: each is copied onto the copies."""
    out: dict[int, set[str]] = {}
    for n in graph.nodes:
        gid = group_of.get(n.name)
        if gid not in taken:
            continue
        for r in n.refs():
            chain, name = [], r.name
            while kinds[name] == "view":
                chain.append(name)
                name = nodes[name].args[0].name
            if name in taken[gid] and name != r.name:
                out.setdefault(gid, set()).update(chain)
    order = {n.name: i for i, n in enumerate(graph.nodes)}
    return {gid: sorted(v, key=order.__getitem__) for gid, v in out.items()}


def _rewired(n: Node, fn) -> Node:
    return dataclasses.replace(
        n, args=map_refs(n.args, fn), kwargs=map_refs(n.kwargs, fn)
    )


__all__ = ["rematerialize"]
