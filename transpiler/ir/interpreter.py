"""Reference interpreter: run a graph with eager PyTorch ops.

The oracle for differential tests of every stage: a graph before and after a pass must
compute the same values as eager PyTorch running the user's source.
"""

from __future__ import annotations

from typing import Any

import torch

from transpiler.ir.graph import DEVICE, Graph, map_refs
from transpiler.ir.ops import resolve_op


def run_graph(graph: Graph, inputs: dict[str, Any], module=None) -> Any:
    tensors = [v for v in inputs.values() if isinstance(v, torch.Tensor)]
    device = tensors[0].device if tensors else torch.device("cpu")
    env: dict[str, Any] = {}

    def value(ref):
        return env[ref.name]

    for node in graph.nodes:
        if node.op == "input":
            env[node.name] = inputs[node.target]
        elif node.op == "param":
            env[node.name] = (
                module.get_parameter(node.target)
                if _is_param(module, node.target)
                else module.get_buffer(node.target)
            )
        elif node.target == "getitem":
            seq, i = node.args
            env[node.name] = env[seq.name][i]
        else:
            args = map_refs(node.args, value)
            kwargs = {
                k: (device if v is DEVICE else map_refs(v, value))
                for k, v in node.kwargs
            }
            env[node.name] = resolve_op(node.target)(*args, **kwargs)
    return map_refs(graph.outputs, value)


def _is_param(module, path: str) -> bool:
    try:
        module.get_parameter(path)
        return True
    except AttributeError:
        return False
