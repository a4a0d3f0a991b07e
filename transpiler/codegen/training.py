"""The functions of a training variant (Note [Training variants] in pipeline.py).

_cpu_0_forward(self, x)            the forward's program: (outputs, saved)
_cpu_0_backward(self, saved, tangent_0)
                                   the backward's: one gradient per input
                                   declared `:grad`, then per parameter; it
                                   empties the list `saved` and drops each
                                   saved value after its last use
class _cpu_0_autograd(torch.autograd.Function)
                                   forward saves what the backward reads;
                                   backward maps the outputs' gradients onto
                                   the tangents and returns the gradients
_cpu_0(self, x)                    `_cpu_0_autograd.apply(self, x, <params>)`:
                                   the parameters are arguments, so that
                                   autograd gives them their gradients

A variant with graph breaks has these four for each compiled part
(`_cpu_0_part_1_forward`, ...: Note [Training through graph breaks] in
passes/parts.py), which take the values of earlier code they read; `_cpu_0`
calls them and the fallback code in turn.
"""

from __future__ import annotations

import inspect
from dataclasses import replace
from functools import partial

from runtime_shim.modules import self_path
from transpiler.build import TargetCode, VariantCode
from transpiler.codegen.wrapper import (
    _region_lines,
    device_locals,
    megabytes,
    module_locals,
    variant_function,
)
from transpiler.codegen.wrapper import (
    variant_function as inference_function,
)
from transpiler.frontend.signature import Signature
from transpiler.ir.graph import Updated
from transpiler.options import TensorSpec
from transpiler.text import count, docstring


def part_functions(t: TargetCode, vc: VariantCode, kernels: dict) -> list[str]:
    """The functions of each compiled part of training variant `vc` (none for
    another): a part that computes gradients is written as a training variant
    of its own, one that computes none as an inference one. Each takes the
    tensors it reads from earlier code as parameters named after them."""
    lines = []
    for part in vc.parts:
        params = tuple(
            inspect.Parameter(n, inspect.Parameter.POSITIONAL_OR_KEYWORD)
            for n, _ in part.variant.inputs
        )
        own = replace(t, signature=Signature(params), variants=())
        write = training_functions if part.backward else inference_function
        lines += [*write(own, part, kernels), "", ""]
    return lines


def training_functions(t: TargetCode, vc: VariantCode, kernels: dict) -> list[str]:
    """The four functions of training variant `vc` (five with a backward of its
    loss alone)."""
    forward = replace(vc, name=f"{vc.name}_forward", backward=None)
    b = vc.backward
    assert b is not None
    loss = []
    if b.loss is not None:  # Note [The backward of a loss alone]
        metas = tuple(m for m in b.tangent_metas if not m.shape)
        alone = replace(b, region=b.loss, tangents=b.loss_tangents, tangent_metas=metas)
        of_loss = replace(vc, backward=alone)
        loss = [*backward_function(t, of_loss, kernels, loss=True), "", ""]
    return [
        *variant_function(t, forward, kernels, free=True),
        "",
        "",
        *backward_function(t, vc, kernels),
        "",
        "",
        *loss,
        *autograd_class(t, vc),
        "",
        "",
        *apply_function(t, vc),
    ]


LOSS_ALONE = (
    " It is called where only the 0-dim outputs (a loss) have gradients: the other"
    " outputs' are zero, and it reads none."
)


def backward_function(
    t: TargetCode, vc: VariantCode, kernels: dict, loss: bool = False
) -> list[str]:
    """`_cpu_0_backward`: the saved values and the tangents in, the gradients out;
    with `loss`, `_cpu_0_loss_backward`, its backward of the loss alone."""
    b = vc.backward
    assert b is not None
    self_ = "self, " if t.is_module else ""
    params = ", ".join(("saved", *b.tangents))
    of = ", ".join(b.wrt)
    doc = (
        f"The backward of {vc.name}: the gradients of {of}. It empties `saved`, "
        "so that each saved value is freed after its last use."
        + (LOSS_ALONE if loss else "")
    )
    alone = replace(vc, region=b.region, backward=None)
    lines = [
        f"def _{vc.name}{'_loss' if loss else ''}_backward({self_}{params}):",
        f'    """{docstring(doc)}"""',
    ]
    if b.saved:
        lines += [f"    ({', '.join(b.saved)},) = saved", "    saved.clear()"]
    first = (*b.saved, *b.tangents)[0]
    lines += device_locals(f"{first}.device", alone.programs)
    bound, reads = module_locals(t, alone) if t.is_module else ([], {})
    lines += bound
    return lines + _region_lines(
        b.region, kernels, vc.variant.device, reads, "    ", free=True, free_inputs=True
    )


def autograd_class(t: TargetCode, vc: VariantCode) -> list[str]:
    """`_cpu_0_autograd`: what the forward saves, and the backward's gradients
    given back in the order of `apply`'s arguments."""
    b = vc.backward
    assert b is not None
    names = [t.local(n) for n, _ in vc.variant.inputs]
    self_ = ["self"] if t.is_module else []
    args = ", ".join([*self_, *names])
    call = t.signature.call(t.local_names, t.local_names)
    outputs = len(b.differentiable)
    saved = count(len(b.saved), "tensor")
    doc = (
        f"{vc.name} for training: its forward saves {saved} "
        f"({megabytes(b.saved_bytes)} beside inputs and parameters) for the "
        f"backward, which computes {count(len(b.recomputed), 'value')} of the "
        "forward again."
    )
    lines = [
        f"class _{vc.name}_autograd(torch.autograd.Function):",
        f'    """{docstring(doc)}"""',
        "",
        "    @staticmethod",
        f"    def forward(ctx, {args}, *differentiated):",
        f"        outputs, saved = _{vc.name}_forward({', '.join([*self_, call])})",
        f"        ctx.module = {'self' if t.is_module else 'None'}",
        "        ctx.save_for_backward(*saved)",
    ]
    if b.loss is not None:  # unused outputs' gradients come as None
        lines.append("        ctx.set_materialize_grads(False)")
    fixed = [i for i, d in enumerate(b.differentiable) if not d]
    if fixed:
        returned = vc.region.program.outputs
        if isinstance(returned, Updated):  # buffers written back before it
            returned = returned.result
        one = outputs == 1 and not isinstance(returned[0], tuple)
        values = ["outputs"] if one else [f"outputs[{i}]" for i in fixed]
        lines.append(f"        ctx.mark_non_differentiable({', '.join(values)})")
    # its kernels record no graph: a second derivative through it is an error,
    # not a gradient that silently does not depend on the inputs
    lines += [
        "        return outputs",
        "",
        "    @staticmethod",
        "    @torch.autograd.function.once_differentiable",
    ]
    grads = [f"grad_{i}" for i in range(outputs)]
    lines.append(f"    def backward(ctx, {', '.join(grads)}):")
    tangents = [g for g, d in zip(grads, b.differentiable) if d]
    module = ["ctx.module"] if t.is_module else []
    layouts = {
        g: f"({tuple(m.shape)!r}, {tuple(m.stride)!r}, {m.dtype})"
        for g, m in zip(tangents, b.tangent_metas)
    }
    call = partial(_call_backward, module=module, layouts=layouts)
    if b.loss is None:
        lines += call(f"_{vc.name}_backward", tangents, "        ")
    else:
        loss = [g for g, m in zip(tangents, b.tangent_metas) if not m.shape]
        test = " and ".join(f"{g} is None" for g in tangents if g not in loss)
        lines.append(f"        if {test}:  # the loss's alone: the rest unused")
        lines += call(f"_{vc.name}_loss_backward", loss, "            ")
        lines.append("        else:")
        lines += call(f"_{vc.name}_backward", tangents, "            ")
    position = {name: i for i, name in enumerate(b.wrt)}
    out = ["None"] * len(self_)
    for n, spec in vc.variant.inputs:
        grad = isinstance(spec, TensorSpec) and n in position
        out.append(f"gradients[{position[n]}]" if grad else "None")
    params = [p for p in b.wrt if p not in dict(vc.variant.inputs)]
    out += [f"gradients[{position[p]}]" for p in params]
    lines.append(f"        return {', '.join(out)}")
    return lines


def _call_backward(
    name: str, tangents: list, indent: str, module: list, layouts: dict
) -> list:
    """A backward's call on `tangents`, each given the layout it was traced with
    first (`runtime_shim.tangents`: any layout in, zeros for None)."""
    given = ", ".join(layouts[g] for g in tangents)
    call_args = ", ".join([*module, "runtime_shim.take_saved(ctx)", *tangents])
    return [
        f"{indent}({', '.join(tangents)},) = runtime_shim.tangents(",
        f"{indent}    ({', '.join(tangents)},), ({given},)",
        f"{indent})",
        f"{indent}gradients = {name}({call_args})",
    ]


def apply_function(t: TargetCode, vc: VariantCode) -> list[str]:
    """`_cpu_0`: the training variant's entry, the wrapper's call."""
    b = vc.backward
    assert b is not None
    self_ = ["self"] if t.is_module else []
    lines = [
        f"def _{vc.name}({', '.join(self_)}{', ' if self_ else ''}"
        f"{t.signature.text(t.defaults, t.local_names)}):"
    ]
    names = [t.local(n) for n, _ in vc.variant.inputs]
    params = [p for p in b.wrt if p not in dict(vc.variant.inputs)]
    args = [*self_, *names, *(t.read(self_path(p)) for p in params)]
    lines.append(f"    return _{vc.name}_autograd.apply(")
    lines += [f"        {a}," for a in args]
    lines.append("    )")
    return lines


__all__ = ["training_functions"]
