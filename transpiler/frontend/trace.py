"""Frontend entry: one target and one variant → a `Graph` plus the variant's guards."""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from transpiler.errors import UserError
from transpiler.frontend.interpreter import Interpreter
from transpiler.frontend.recorder import GraphBuilder, Recorder, Unsupported
from transpiler.frontend.source import SourceCache
from transpiler.ir.graph import Graph, Ref, map_refs, self_path
from transpiler.options import ScalarSpec, TensorSpec, Variant


@dataclass(frozen=True)
class Traced:
    """What the frontend learned about one variant."""

    graph: Graph | None  # None when the variant is all fallback
    guards: tuple[str, ...]  # from module attributes read (inputs are guarded apart)
    fallback: Unsupported | None = None


def instantiate(obj, init: dict, factory, root: Path) -> nn.Module:
    """Build the module on the meta device, so no weights are allocated."""
    with torch.device("meta"):
        try:
            module = factory() if factory is not None else obj(**init)
        except Exception as e:  # the user's constructor rejected the arguments
            what = "factory" if factory is not None else f"{obj.__name__}(**init)"
            raise UserError(f"{what} failed: {type(e).__name__}: {e}") from None
    if not isinstance(module, nn.Module):
        raise UserError(f"{obj!r} did not build an nn.Module")
    return module.eval()


def trace(
    obj, module: nn.Module | None, variant: Variant, sources: SourceCache
) -> Traced:
    """Interpret `obj` (a function, or `module.forward`) on meta inputs."""
    params: dict[int, str] = {}
    module_paths: dict[int, str] = {}
    if module is not None:
        for name, t in module.named_parameters(remove_duplicate=False):
            params.setdefault(id(t), name)
        for name, t in module.named_buffers(remove_duplicate=False):
            params.setdefault(id(t), name)
        for name, m in module.named_modules(remove_duplicate=False):
            module_paths.setdefault(id(m), self_path(name))
    builder = GraphBuilder(params)
    recorder = Recorder(builder)
    interp = Interpreter(recorder, sources, module_paths)
    fn = type(module).forward if module is not None else obj
    args = _inputs(fn, variant, builder, skip_self=module is not None)
    try:
        with torch.device("meta"), torch.no_grad(), recorder:
            if module is not None:
                result = interp.run_function(fn, (module,), args)
            else:
                result = interp.run_function(fn, (), args)
            outputs = _output_refs(result, builder, recorder)
    except Unsupported as e:
        return Traced(None, tuple(interp.guards), e)
    graph = Graph(tuple(builder.nodes), outputs)
    graph.lint()
    return Traced(graph, tuple(interp.guards))


def _inputs(fn, variant: Variant, builder: GraphBuilder, skip_self: bool) -> dict:
    params = list(inspect.signature(fn).parameters)[1 if skip_self else 0 :]
    args = {}
    for name, spec in variant.inputs:
        if name not in params:
            raise UserError(f"{fn.__qualname__} has no parameter {name!r}")
        if isinstance(spec, TensorSpec):
            t = torch.empty(spec.shape, dtype=spec.dtype, device="meta")
            builder.add_input(name, t)
            args[name] = t
        else:
            assert isinstance(spec, ScalarSpec)
            args[name] = spec.value
    return args


def _output_refs(value, builder: GraphBuilder, recorder: Recorder):
    """Replace result tensors by `Ref`s to the nodes computing them."""
    if isinstance(value, torch.Tensor):
        return builder.ref(value, recorder.span)
    if isinstance(value, (tuple, list)):
        return type(value)(_output_refs(v, builder, recorder) for v in value)
    if isinstance(value, dict):
        return {k: _output_refs(v, builder, recorder) for k, v in value.items()}
    if isinstance(value, (int, float, bool, str, type(None))):
        return value
    raise Unsupported(f"returns a {type(value).__name__}", recorder.span)


__all__ = ["Ref", "Traced", "instantiate", "map_refs", "trace"]
