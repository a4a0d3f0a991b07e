"""Compute a sigmoid from the exponential a log-sigmoid of the same value computes.

Before:  p = aten.sigmoid.default(x)
         e = aten.exp.default(aten.neg.default(aten.abs.default(x)))
         ce = ... aten.log1p.default(e) ...        # binary_cross_entropy_with_logits
After:   e = aten.exp.default(aten.neg.default(aten.abs.default(x)))
         p = aten.div.Tensor(aten.where.self(x >= 0, 1.0, e), 1.0 + e)
         ce = ... aten.log1p.default(e) ...

Note [Shared exponentials]
~~~~~~~~~~~~~~~~~~~~~~~~~~
The stable forms of a log-sigmoid, of `binary_cross_entropy_with_logits` and of
a softplus all compute `e = exp(-|x|)`: `log(sigmoid(x)) = min(x, 0) - log1p(e)`.
A loss that also needs the probability, `sigmoid(x)` (a focal loss, the
probabilities a detection head reports beside its loss), computes a second
exponential of each element for it, `1 / (1 + exp(-x))`. The same `e` gives it:
`sigmoid(x)` is `1 / (1 + e)` where x >= 0 and `e / (1 + e)` where x < 0, one
select and one division, both as accurate as eager's (no cancellation: `1 + e`
lies in [1, 2]). An exponential is the costliest op of such a kernel (a
special-function unit's op on a GPU, a polynomial on a CPU); a focal loss's
partials kernel went from 28.9 to 26.5 us on the H100 with it.

The sigmoid is rewritten only where the graph computes that `e` of the same
value, so that the rewrite adds no exponential; its own `abs`, `neg` and `exp`
are the same ops of the same value, which a kernel computes once
(`KernelBuilder.emit`), or computes where the sigmoid's kernel reads them. f32
and f64 only: a half-precision value's ops each round in eager, and a kernel
could store `e` rounded between them.
"""

from __future__ import annotations

import torch

from transpiler.ir.graph import Graph, Node, Ref
from transpiler.passes.retrace import retrace

SIGMOID = "aten.sigmoid.default"
EXP = "aten.exp.default"
NEG = "aten.neg.default"
ABS = "aten.abs.default"
EXACT = (torch.float32, torch.float64)


def shared_exponentials(graph: Graph) -> Graph:
    nodes = graph.by_name()
    shared = {_exp_of_minus_abs(n, nodes) for n in graph.nodes} - {None}
    found = {
        n.name
        for n in graph.nodes
        if n.target == SIGMOID
        and isinstance(n.args[0], Ref)
        and n.args[0].name in shared
        and n.tensor_meta.dtype in EXACT
    }
    if not found:
        return graph

    def from_exp(node: Node, args, kwargs):
        if node.name not in found:
            return NotImplemented
        (x,) = args
        e = torch.exp(torch.neg(torch.abs(x)))
        return torch.where(x >= 0, 1.0, e) / (e + 1.0)

    return retrace(graph, rewrites={SIGMOID: from_exp})


def _exp_of_minus_abs(node: Node, nodes: dict[str, Node]) -> str | None:
    """The value `x` of which `node` is `exp(-|x|)`, or None."""
    if node.target != EXP or not isinstance(node.args[0], Ref):
        return None
    neg = nodes[node.args[0].name]
    if neg.target != NEG or not isinstance(neg.args[0], Ref):
        return None
    a = nodes[neg.args[0].name]
    if a.target != ABS or not isinstance(a.args[0], Ref):
        return None
    return a.args[0].name


__all__ = ["shared_exponentials"]
