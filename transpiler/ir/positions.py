"""Values computed from positions alone, evaluated when the program is built.

A range (`torch.arange` of static ints) and pointwise ops of ranges and numbers,
through views (`arange(q)[:, None] + past`, a reflect pad's source positions
`n - 1 - |n - 1 - |p||`), are the same numbers at every call: a gather by them
needs no check of its indices at run time when the numbers are known to lie in
range (passes/check_indices.py), and its kernel no mask (Note [Positions as
indices] in passes/schedule.py).
"""

from __future__ import annotations

import torch

from transpiler.ir.graph import Node, Ref, TensorMeta
from transpiler.ir.ops import POINTWISE, arange_of, is_random, is_view, resolve_op

EVALUATED_NUMEL_MAX = 1 << 20  # elements of a position value evaluated, at most


def bounds(ref: Ref, nodes: dict[str, Node]) -> tuple[int, int] | None:
    """(least, one past the greatest) element of integer position value `ref`;
    None for any other value, or an empty one."""
    value = evaluate(ref, nodes)
    if value is None or value.numel() == 0 or value.is_floating_point():
        return None
    return int(value.min()), int(value.max()) + 1


def evaluate(ref: Ref, nodes: dict[str, Node]) -> torch.Tensor | None:
    """The elements of position value `ref`, computed on the CPU; None where it
    reads anything but positions and numbers, or is large."""
    node = nodes[ref.name]
    meta = node.meta
    if node.op != "call" or not isinstance(meta, TensorMeta):
        return None
    if not all(isinstance(n, int) for n in meta.shape):
        return None
    if meta.numel > EVALUATED_NUMEL_MAX or meta.dtype.is_complex:
        return None
    if not node.target.startswith("aten.") or is_random(node.target):
        return None
    if any(isinstance(v, Ref) for _, v in node.kwargs):
        return None
    kwargs = {k: v for k, v in node.kwargs if k not in ("device", "pin_memory")}
    if arange_of(node) is not None:
        return resolve_op(node.target)(*node.args, **kwargs)
    if not (is_view(node.target) or node.target in POINTWISE):
        return None
    if not any(isinstance(a, Ref) for a in node.args):
        return None  # a factory: its values are not positions
    args = []
    for a in node.args:
        if isinstance(a, Ref):
            a = evaluate(a, nodes)
            if a is None:
                return None
        elif isinstance(a, (list, tuple)) and any(isinstance(e, Ref) for e in a):
            return None
        args.append(a)
    try:
        return resolve_op(node.target)(*args, **kwargs)
    except (RuntimeError, TypeError, ValueError):  # not as recorded: not known
        return None


__all__ = ["EVALUATED_NUMEL_MAX", "bounds", "evaluate"]
