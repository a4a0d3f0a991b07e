"""Fold conversions to a device's results into the extern calls that return them.

Before:  native_batch_norm: (bf16[2,6,4], f32[6], f32[6]) = aten.native_batch_norm...
         native_batch_norm_1_meta: f32[6] = getitem(native_batch_norm, 1)
         native_batch_norm_1: bf16[6] = aten._to_copy.default(native_batch_norm_1_meta,
             dtype=torch.bfloat16)
After:   native_batch_norm: (bf16[2,6,4], bf16[6], f32[6]) = aten.native_batch_norm...
         native_batch_norm_1: bf16[6] = getitem(native_batch_norm, 1)

The frontend follows each result that a device returns otherwise than the op's meta
kernel by its conversion to the device's, which takes the result's name (Note
[Device outputs] in ir/device_outputs.py). Where the op is an extern call, the call
returns the device's result itself: the result takes the conversion's name and meta,
and the conversion goes. This runs after the other passes, since a retrace would
give the result its meta kernel's dtype back.
"""

from __future__ import annotations

from dataclasses import replace

from transpiler.ir.device_outputs import DEVICE_OUTPUTS, Result
from transpiler.ir.graph import Graph, Node, Ref
from transpiler.ir.ops import bind_args

CONVERSIONS = ("aten._to_copy.default", "aten.new_empty.default")


def fold_device_outputs(graph: Graph, device: str) -> Graph:
    rules = DEVICE_OUTPUTS.get(device, {})
    nodes = graph.by_name()
    users = graph.users()
    folded: dict[str, Node] = {}  # a result -> its conversion
    for n in graph.nodes:
        item = _converted(n, nodes, rules)
        if item is not None:
            assert users[item.name] == [n.name], f"{item.name} is read unconverted"
            folded[item.name] = n
    if not folded:
        return graph
    metas = {}  # the tuples of results of the ops, with the device's
    for item, conversion in folded.items():
        op = nodes[item].args[0].name
        results = list(metas.get(op, nodes[op].meta))
        results[nodes[item].args[1]] = conversion.meta
        metas[op] = tuple(results)
    dropped = {c.name for c in folded.values()}
    kept = []
    for n in graph.nodes:
        if n.name in folded:  # the result, as its conversion: name, meta and uses
            c = folded[n.name]
            n = replace(n, name=c.name, meta=c.meta)
        elif n.name in dropped:
            continue
        kept.append(replace(n, meta=metas.get(n.name, n.meta)))
    return graph.with_nodes(kept)


def _converted(n: Node, nodes: dict[str, Node], rules: dict) -> Node | None:
    """The result of an extern call that `n` converts into what the device returns
    (so the call returns that itself), if `n` is such a conversion."""
    if n.target not in CONVERSIONS or not isinstance(n.args[0], Ref):
        return None
    item = nodes[n.args[0].name]
    op = nodes[item.args[0].name] if item.target == "getitem" else None
    if op is None or op.target not in rules:
        return None
    result = _result(op, item.args[1], nodes, rules)
    meta, old = n.tensor_meta, item.tensor_meta
    if result is None or (meta.dtype, meta.shape) == (old.dtype, old.shape):
        return None
    empty = meta.shape == (0,)
    return item if (meta.dtype, empty) == (result.dtype, result.empty) else None


def _result(op: Node, index: int, nodes: dict[str, Node], rules: dict) -> Result | None:
    """What the device returns as result `index` of `op`, where it differs."""
    bound = bind_args(op.target, op.args, op.kwargs)
    dtypes = {
        k: nodes[v.name].tensor_meta.dtype if isinstance(v, Ref) else v
        for k, v in bound.items()
    }
    return rules[op.target].results(dtypes).get(index)
