"""Gather the operands of an elementwise value instead of the value.

Before:  ls: f32[8,128256] = aten.sub.Tensor(aten.sub.Tensor(x, m), log_s)
         g: f32[8,1] = aten.gather.default(ls, 1, t)
After:   x_t: f32[8,1] = aten.gather.default(x, 1, t)
         g: f32[8,1] = aten.sub.Tensor(aten.sub.Tensor(x_t, m), log_s)

Note [Gathered values]
~~~~~~~~~~~~~~~~~~~~~~
An elementwise op commutes with a gather: element j of `f(a, b).gather(d, t)`
is `f` of `a` and `b` at the position `t` names, so the operands can be gathered
first and `f` computed at the gathered positions alone. An operand broadcast
along `d` (a row's maximum, `[8, 1]`, in a log-softmax) is the same at every
position of its row and is read as it is; one that varies along `d` is gathered,
or, if it is elementwise itself, its own operands are, down to values that are
not (inputs, reductions, extern results, views).

This matters where the value would be written for the gather alone. A token's
log-probability, `log_softmax(logits).gather(-1, t)`, and the cross-entropy that
`nll_loss` gathers the same way, read one element of each row. Where a row is
one kernel's, that kernel computes the element from the row's statistics
(`row_gather` in fuse.py); where the row is split among programs (Note [Split
softmax] in split_reductions.py: few long rows, a decode step's logits over a
vocabulary), the statistics come from another kernel, and the log-softmax was
written whole, every element of every row, to be read at one position a row.
Gathered first, the loss reads the logits at the targets, and the whole matrix
is neither written nor read again.

The rewrite is taken only where some value the same along `d` that the
gathered value reads (through views and elementwise ops) is a reduction of
something other than rows of its size: the totals of a split reduction, from a
kernel of their own. Where the statistics reduce the rows themselves, the
kernel of the rows computes the gathered element already (`row_gather`), and
gathers of the operands would be more values for the fusion to place. And only
where the value is read by such gathers alone (else it is computed anyway, and
the gathered copy would be computed twice), by a gather whose index spans the
value in every dimension but `d` (so that an operand broadcast along `d` lines
up with the gathered values as it lines up with the value), through
elementwise ops of the kernel tables, not ranges or fills, whose values depend
on positions rather than operands. A gather's index is checked where it was
(passes/check_indices.py): the gather of an operand reads the same positions.
Each op computed again keeps its own origin: a program's own cast to bf16
still rounds (`recomputed` in retrace.py).
"""

from __future__ import annotations

import torch

from transpiler.ir.graph import Graph, Node, Ref, TensorMeta
from transpiler.ir.ops import POINTWISE, REDUCTIONS, is_view, resolve_op
from transpiler.passes.dce import dce
from transpiler.passes.retrace import arguments, recomputed, retrace

GATHER = "aten.gather.default"
# elementwise ops whose values are functions of their operands' values alone
POSITION_FREE = ("arith", "compare", "where", "cast")
FILLS = (
    "aten.full.default",
    "aten.full_like.default",
    "aten.fill.Scalar",
    "aten.fill.Tensor",
    "aten.new_full.default",
    "aten.scalar_tensor.default",
)


def gathered_values(graph: Graph) -> Graph:
    graph = dce(graph)  # dead readers: a `new_full` of nll_loss's unused weight
    nodes = graph.by_name()
    users = graph.users()
    found = {n.name for n in graph.nodes if _pushable_gather(n, nodes, users)}
    if not found:
        return graph
    values: dict[str, object] = {}

    def gather_first(node: Node, args, kwargs):
        if node.name not in found:
            return NotImplemented
        src, dim, index = node.args[0].name, args[1], args[2]
        shape = nodes[src].tensor_meta.shape
        dim %= len(shape)
        done: dict[str, torch.Tensor] = {}

        def gathered(name: str) -> torch.Tensor:
            """The value of `name`, broadcast to the source's shape, gathered."""
            if name not in done:
                n = nodes[name]
                if _elementwise(n):
                    args, kwargs = arguments(n, values, operand)
                    with recomputed(n):
                        done[name] = resolve_op(n.target)(*args, **kwargs)
                else:
                    value = values[name]
                    if value.shape != shape:  # broadcast along other dimensions
                        value = value.expand(shape)
                    done[name] = torch.gather(value, dim, index)
            return done[name]

        def operand(ref: Ref):
            meta = nodes[ref.name].tensor_meta
            at = dim - (len(shape) - len(meta.shape))
            if at < 0 or meta.shape[at] == 1:  # the same all along `dim`
                return values[ref.name]
            return gathered(ref.name)

        return gathered(src)

    return retrace(graph, rewrites={GATHER: gather_first}, values=values)


def _elementwise(node: Node) -> bool:
    row = POINTWISE.get(node.target) if node.op == "call" else None
    return row is not None and row.kind in POSITION_FREE and node.target not in FILLS


def _pushable_gather(node: Node, nodes: dict[str, Node], users) -> bool:
    """Whether `node` gathers from an elementwise value that only gathers read,
    with an index that spans the value in every other dimension."""
    if node.target != GATHER or node.kwargs or len(node.args) != 3:
        return False
    src, dim, index = node.args
    if not isinstance(src, Ref) or not isinstance(index, Ref):
        return False
    source = nodes[src.name]
    if not _elementwise(source):
        return False
    shape, at = source.tensor_meta.shape, nodes[index.name].tensor_meta.shape
    if not shape or len(at) != len(shape):
        return False
    d = dim % len(shape)
    if any(a != s for k, (a, s) in enumerate(zip(at, shape)) if k != d):
        return False
    if not all(
        u in nodes and nodes[u].target == GATHER and nodes[u].args[0] == src
        for u in users[src.name]
    ):
        return False
    return _statistics_elsewhere(source, d, nodes)


def _statistics_elsewhere(source: Node, d: int, nodes: dict[str, Node]) -> bool:
    """Whether a value the same along `d` that `source` reads comes from a
    reduction of something other than rows of `source`'s size: the totals of a
    split reduction, computed in a kernel of their own. Where every such value
    reduces rows of the source's size, the kernel of those rows computes the
    gathered element itself (`row_gather` in fuse.py)."""
    shape = source.tensor_meta.shape
    per_row: list[str] = []
    todo, seen = [source.name], set()
    while todo:  # the elementwise values varying along `d`, and what they read
        node = nodes[todo.pop()]
        if node.name in seen or not _elementwise(node):
            continue
        seen.add(node.name)
        for r in node.refs():
            meta = nodes[r.name].tensor_meta
            at = d - (len(shape) - len(meta.shape))
            (todo if at >= 0 and meta.shape[at] != 1 else per_row).append(r.name)
    while per_row:  # back through views and elementwise ops to reductions
        node = nodes[per_row.pop()]
        if node.name in seen or not isinstance(node.meta, TensorMeta):
            continue
        seen.add(node.name)
        if node.target in REDUCTIONS:
            if nodes[node.args[0].name].tensor_meta.numel != source.tensor_meta.numel:
                return True
        elif _elementwise(node) or (node.op == "call" and is_view(node.target)):
            per_row += [r.name for r in node.refs()]
    return False


__all__ = ["gathered_values"]
