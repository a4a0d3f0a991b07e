"""Split a joint graph (passes/joint.py) into a forward and a backward: what the
forward saves for the backward, and what the backward computes again.

Before:  the joint graph: forward nodes, tangent inputs, backward nodes;
         outputs (forward outputs, gradients)
After:   forward:  the inputs and parameters -> (forward outputs, saved values)
         backward: the saved values and the tangents -> gradients, with the forward
                   values it reads that were not saved computed again from them

Note [Save or recompute]
~~~~~~~~~~~~~~~~~~~~~~~~
Saving a value costs its bytes twice: written once by the forward, read once by the
backward, and held in memory between them. Recomputing it costs its inputs' reads,
which the backward often makes anyway: `gelu(h)`'s backward reads `h`, so saving
`h` and recomputing `gelu(h)` inside the backward's fused kernel is free where
saving both would write and read one tensor more. So, as AOTAutograd's min-cut
partitioner does, the choice is a minimum cut of the forward's dataflow: every
value is an edge of capacity its bytes (cutting it: saving it), the inputs and
parameters hang from the source, the forward values the backward reads from the
sink. Any cut separates the backward from the inputs by values it can be computed
from; the minimum is the fewest bytes to save. Values that cost much more to compute
than to read, and are not to be computed twice (a matmul, attention, a random draw:
`RECOMPUTABLE` says which ops are cheap), hang from the source too, so the cut falls
at or after them: they are saved, or values after them are.

Inputs and parameters are saved for free: the caller holds them.

Cuts of equal bytes are common: a GPT's residual stream `x1 = x0 + attn(x0)`,
`x2 = x1 + mlp(x1)`, ... can be saved as the sums `x1, x2, ...` or as the outputs
`attn(x0), mlp(x1), ...` added up again. The latter makes every layer's backward
recompute the whole stream up to it; fused, one kernel at the backward's start
computes every layer's input and holds them all. So, as AOTAutograd's partitioner
weighs values by their distance from the backward, each edge costs its bytes times
`1 + dist / DISTANCE`, `dist` the ops between the value and the nearest one the
backward reads: of equal cuts, the one nearest the backward is taken.
"""

from __future__ import annotations

import itertools
from collections import deque
from dataclasses import dataclass

from transpiler.ir.graph import DEVICE, Graph, Node, Ref, TensorMeta, iter_refs
from transpiler.ir.ops import CHECKS_DATA, POINTWISE, REDUCTIONS, is_random, is_view
from transpiler.passes.joint import Joint
from transpiler.passes.retrace import retrace

INFINITE = 1 << 62
DISTANCE = 64  # Note [Save or recompute]: a value 64 ops away costs double
# Ops whose results the backward may compute again rather than save: elementwise
# math, views and reductions (read-bound: recomputing reads what saving would).
RECOMPUTABLE_EXTRA = frozenset({"aten.detach.default"})


@dataclass(frozen=True)
class Partition:
    """The two halves of a joint graph. `forward.outputs` is `(outputs, saved)`;
    the backward's inputs are the saved values (under their names in the forward)
    and the tangents, its outputs the gradients."""

    forward: Graph
    backward: Graph
    saved: tuple[str, ...]  # in the order of `forward.outputs[1]`
    tangents: tuple[str, ...]
    wrt: tuple[str, ...] = ()  # what each gradient is of (`Joint.wrt`)
    differentiable: tuple[bool, ...] = ()  # `Joint.differentiable`
    recomputed: tuple[str, ...] = ()  # forward values the backward computes again

    def saved_bytes(self) -> int:
        """Bytes of the saved values that are not inputs or parameters."""
        nodes = {n.name: n for n in self.forward.nodes}
        return sum(
            _bytes(nodes[name])
            for name in self.saved
            if nodes[name].op not in ("input", "param")
        )


def recomputable(node: Node) -> bool:
    """Whether the backward may compute `node` again: elementwise math, views,
    reductions, and values of nothing (an `arange`, a `full`) but random draws."""
    return (
        node.target in POINTWISE
        or node.target in REDUCTIONS
        or node.target in RECOMPUTABLE_EXTRA
        or is_view(node.target)
        or (node.op == "call" and not any(node.refs()) and not is_random(node.target))
    )


def partition(j: Joint) -> Partition:
    """`j` split at a minimum cut of its forward (Note [Save or recompute])."""
    graph = j.graph
    nodes = {n.name: n for n in graph.nodes}
    backward_only = _depends_on(graph, set(j.tangents))
    forward = [n for n in graph.nodes if n.name not in backward_only]
    forward_names = {n.name for n in forward}
    outputs, grads = graph.outputs
    needed = {  # forward values the backward (or a gradient itself) reads
        r.name
        for n in graph.nodes
        if n.name in backward_only
        for r in n.refs()
        if r.name in forward_names
    } | {r.name for r in iter_refs(grads) if r.name in forward_names}
    cut = _min_cut(forward, needed)
    bwd = _backward_graph(graph, nodes, backward_only, cut, grads)
    read = {n.name for n in bwd.nodes}  # the values of the cut the backward reads
    saved = tuple(n.name for n in forward if n.name in cut and n.name in read)
    fwd = _forward_graph(graph, forward, outputs, saved)
    again = tuple(  # computed: views and getitems are not work
        n.name
        for n in bwd.nodes
        if n.name in forward_names
        and n.op == "call"
        and n.target != "getitem"
        and not is_view(n.target)
    )
    return Partition(fwd, bwd, saved, j.tangents, j.wrt, j.differentiable, again)


# Note [The backward of a loss alone]
# ~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~~
# A model that computes its own loss returns it beside other outputs (a
# transformers model: the loss and the logits), and the caller differentiates the
# loss alone. Autograd then passes the others' gradients in as zero-filled tensors
# of their size: for a language model's logits one the size of the largest
# activation, filled, then read by the backward. So where a forward returns 0-dim
# outputs and others, a second backward is compiled with the others' gradients
# zero: its kernels read none, and the caller's engine fills none (the autograd
# function asks it not to, and runs this backward where they are None).


def zero_tangents(backward: Graph, names: set[str]) -> Graph:
    """`backward` with the tangents `names` zero: a `full` of 0 each, which kernels
    compute as a constant (Note [The backward of a loss alone])."""
    nodes = []
    for n in backward.nodes:
        if n.name in names:
            m = n.tensor_meta
            kwargs = (("dtype", m.dtype), ("device", DEVICE), ("pin_memory", False))
            shape = list(m.shape)
            n = Node(
                n.name, "call", "aten.full.default", (shape, 0), kwargs, span=n.span
            )
        nodes.append(n)
    return retrace(backward.with_nodes(nodes, backward.outputs))


def _depends_on(graph: Graph, roots: set[str]) -> set[str]:
    """The nodes that read any of `roots`, directly or not, and the roots."""
    out = set(roots)
    for n in graph.nodes:
        if any(r.name in out for r in n.refs()):
            out.add(n.name)
    return out


def _bytes(node: Node) -> int:
    meta = node.meta
    if not isinstance(meta, TensorMeta):
        return INFINITE
    return max(meta.numel * meta.dtype.itemsize, 1)


def _min_cut(forward: list[Node], needed: set[str]) -> set[str]:
    """The forward values to save: a minimum cut between the inputs (and what is
    not recomputable) and what the backward reads."""
    flow = _Flow()
    dist = _distances(forward, needed)
    for n in forward:
        cost = _bytes(n)
        if cost < INFINITE:
            cost = cost * (DISTANCE + min(dist[n.name], 100 * DISTANCE)) // DISTANCE
        if n.op in ("input", "param"):
            flow.edge("source", (n.name, "in"), INFINITE)
            flow.edge((n.name, "in"), (n.name, "out"), 0)  # free to save
        elif n.target == "getitem" or recomputable(n):
            flow.edge((n.name, "in"), (n.name, "out"), cost)
        else:  # computed once: the cut lies at or after it
            flow.edge("source", (n.name, "in"), INFINITE)
            flow.edge((n.name, "in"), (n.name, "out"), cost)
        for r in set(n.refs()):
            flow.edge((r.name, "out"), (n.name, "in"), INFINITE)
        if n.name in needed:
            flow.edge((n.name, "out"), "sink", INFINITE)
    reached = flow.cut("source", "sink")
    return {
        n.name
        for n in forward
        if (n.name, "in") in reached and (n.name, "out") not in reached
    }


def _distances(forward: list[Node], needed: set[str]) -> dict[str, int]:
    """For each forward value, the ops from it to the nearest value the backward
    reads (0 for those; a large number where none follows)."""
    far = 1 << 20
    dist = {n.name: 0 if n.name in needed else far for n in forward}
    for n in reversed(forward):
        for r in n.refs():
            if r.name in dist:
                dist[r.name] = min(dist[r.name], dist[n.name] + 1)
    return dist


def _forward_graph(
    graph: Graph, forward: list[Node], outputs, saved: tuple[str, ...]
) -> Graph:
    """The forward nodes the outputs and the saved values need, and the checks
    of tensor data (an index in range: `dce`)."""
    checks = {n.name for n in forward if n.target in CHECKS_DATA}
    keep = _needed_by(
        forward, {r.name for r in iter_refs(outputs)} | set(saved) | checks
    )
    nodes = [n for n in forward if n.name in keep]
    return graph.with_nodes(nodes, (outputs, tuple(Ref(s) for s in saved)))


def _backward_graph(
    graph: Graph,
    nodes: dict[str, Node],
    backward_only: set[str],
    saved: set[str],
    grads,
) -> Graph:
    """The backward nodes, the saved values as inputs, and the forward values it
    reads that were not saved, computed again from saved ones."""
    wanted = {r.name for r in iter_refs(grads)}
    order = list(graph.nodes)
    keep: set[str] = set()
    stack = list(wanted)
    while stack:  # what the gradients read, back to saved values and tangents
        name = stack.pop()
        if name in keep:
            continue
        keep.add(name)
        if name in saved:
            continue
        stack += [r.name for r in nodes[name].refs()]
    out = []
    for n in order:
        if n.name not in keep:
            continue
        if n.name in saved and n.op not in ("input", "param"):
            out.append(Node(n.name, "input", n.name, meta=n.meta, span=n.span))
        elif n.name in saved or n.name in backward_only or n.op != "input":
            out.append(n)
    return graph.with_nodes(_late(out, backward_only), grads)


def _late(nodes: list[Node], backward_only: set[str]) -> list[Node]:
    """`nodes` with each value computed again from the forward placed just before
    the first backward node that needs it, not at the start: it is alive from
    there on only (the first layer's normalized input, read by the last matmul of
    the backward, is computed at the end)."""
    by_name = {n.name: n for n in nodes}
    placed: set[str] = set()
    out: list[Node] = []

    def place(root: Node) -> None:
        stack = [(root, False)]
        while stack:
            n, ready = stack.pop()
            if n.name in placed:
                continue
            if ready:
                placed.add(n.name)
                out.append(n)
                continue
            stack.append((n, True))
            for r in reversed(list(n.refs())):
                if r.name in by_name and r.name not in placed:
                    stack.append((by_name[r.name], False))

    for n in nodes:
        if n.op in ("input", "param"):
            place(n)
    for n in nodes:
        if n.name in backward_only:
            place(n)
    for n in nodes:
        place(n)
    return out


def _needed_by(nodes: list[Node], roots: set[str]) -> set[str]:
    by_name = {n.name: n for n in nodes}
    keep: set[str] = set()
    stack = list(roots)
    while stack:
        name = stack.pop()
        if name in keep or name not in by_name:
            continue
        keep.add(name)
        stack += [r.name for r in by_name[name].refs()]
    return keep


class _Flow:
    """A flow network, and its minimum cut by Dinic's algorithm."""

    def __init__(self) -> None:
        self.capacity: dict[tuple, int] = {}
        self.next: dict[object, list] = {}

    def edge(self, u, v, capacity: int) -> None:
        if (u, v) not in self.capacity:
            self.next.setdefault(u, []).append(v)
            self.next.setdefault(v, []).append(u)
            self.capacity.setdefault((v, u), 0)
        self.capacity[(u, v)] = self.capacity.get((u, v), 0) + capacity

    def cut(self, source, sink) -> set:
        """The nodes on the source's side of a minimum cut."""
        while True:
            level = self._levels(source)
            if sink not in level:
                return set(level)
            pointer = {u: 0 for u in self.next}
            while self._push(source, sink, INFINITE, level, pointer):
                pass

    def _levels(self, source) -> dict:
        level = {source: 0}
        queue = deque([source])
        while queue:
            u = queue.popleft()
            for v in self.next.get(u, ()):
                if v not in level and self.capacity[(u, v)] > 0:
                    level[v] = level[u] + 1
                    queue.append(v)
        return level

    def _push(self, source, sink, limit: int, level: dict, pointer: dict) -> int:
        """One augmenting path of the level graph (iterative depth-first search);
        the flow it carries, 0 when there is none left."""
        path = [source]
        while path:
            u = path[-1]
            if u == sink:
                edges = list(itertools.pairwise(path))
                pushed = min(self.capacity[e] for e in edges)
                for a, b in edges:
                    self.capacity[(a, b)] -= pushed
                    self.capacity[(b, a)] += pushed
                return pushed
            nexts = self.next.get(u, [])
            while pointer[u] < len(nexts):
                v = nexts[pointer[u]]
                if level.get(v) == level[u] + 1 and self.capacity[(u, v)] > 0:
                    path.append(v)
                    break
                pointer[u] += 1
            else:
                path.pop()
                if path:
                    pointer[path[-1]] += 1
        return 0


__all__ = ["Partition", "partition", "recomputable", "zero_tangents"]
