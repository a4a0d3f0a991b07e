"""Direct views: a chain of view methods in the wrapper becomes one call.

Before:  split_with_sizes = linear.split_with_sizes([768, 768, 768], 2)
         split_0 = split_with_sizes[0]
         view_2 = split_0.view(8, 1024, 12, 64)
         transpose = view_2.transpose(1, 2)
After:   transpose = runtime_shim.view(
             linear, (8, 12, 1024, 64), (2359296, 64, 2304, 1), 0
         )

Note [Direct views]
~~~~~~~~~~~~~~~~~~~
Kernels read views through index arithmetic, but an extern call (a matmul, attention)
takes a tensor, so the wrapper makes the views it passes. Each view method costs a
Python call and torch's shape checks, about as much host time as a small kernel
launch; a transformer block makes a dozen. The variant knows every view's size,
strides and offset ahead of time, so it makes each one in a single call
(`runtime_shim.view`, torch's own `_reinterpret_tensor` where it has it) from the
tensor at the root of its chain, and drops the links in between.

That is sound only where the root's layout at run time is the traced one:
- a buffer a kernel wrote (allocated by the wrapper with the traced strides);
- a tensor input (guarded contiguous, of a static shape);
- a parameter a kernel reads (its strides are guarded: see wrapper.param_guards);
- the result of an extern op that returns a new dense tensor of the same layout on
  every device, or whose layout the wrapper enforces (`ir.ops.FIXED_LAYOUT`).
Offsets are relative to the root's own storage offset, so an input that is a
contiguous slice of a larger tensor is still read right.

Views of anything else (a parameter only extern calls read: its strides are not
guarded), views that change the dtype, and views the variant returns or hands to a
later region stay view methods: a returned tensor must be a real view of its base
for autograd and in-place code outside the variant. Dynamic variants are left as they
are (their sizes are expressions, not constants).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from transpiler.ir.graph import Ref, TensorMeta, iter_refs
from transpiler.ir.ops import FIXED_LAYOUT
from transpiler.ir.program import (
    Alloc,
    ExternCall,
    KernelCall,
    Program,
    kernel_params,
)
from transpiler.ir.region import CompiledRegion, map_programs, programs_of

# What the wrapper calls a direct view: `runtime_shim.view(root, size, stride, offset)`
DIRECT_VIEW = "runtime_shim.view"

# Views that keep the dtype and address memory as strides and an offset
LINKS = frozenset(
    {
        "getitem",
        "aten.view.default",
        "aten._unsafe_view.default",
        "aten.t.default",
        "aten.transpose.int",
        "aten.permute.default",
        "aten.unsqueeze.default",
        "aten.squeeze.dim",
        "aten.squeeze.dims",
        "aten.expand.default",
        "aten.slice.Tensor",
        "aten.select.int",
        "aten.split_with_sizes.default",
        "aten.split.Tensor",
        "aten.unbind.int",
    }
)


@dataclass(frozen=True)
class _Root:
    name: str
    offset: int  # its traced storage offset
    links: int = 0  # view methods from the root to the value it is the root of


def direct_views(region: CompiledRegion, inputs: tuple[str, ...]) -> CompiledRegion:
    """`region` with each view chain the wrapper makes collapsed into direct views
    (see Note [Direct views]); `inputs` are the variant's tensor inputs.

    Chains are followed within one Program: a later region or a loop body sees only
    the values an earlier one hands on, and a direct view must name its root."""
    programs = programs_of(region)
    guarded = set(kernel_params(programs).values())  # their strides are guarded
    chains = {
        id(p): _chains(p, guarded, inputs if p is region.program else ())
        for p in programs
    }
    escaping = {r.name for p in programs for r in iter_refs(p.outputs)}
    direct = {
        id(p): {
            s.out
            for s in p.steps
            if isinstance(s, ExternCall)
            and s.out in chains[id(p)]
            and s.out not in escaping
            and _direct(s, chains[id(p)][s.out])
        }
        for p in programs
    }
    needed = _read_outside(programs, chains)
    grew = True
    while grew:  # a link kept as a method needs the link before it
        grew = False
        for p in programs:
            for s in p.steps:
                if not isinstance(s, ExternCall) or s.out not in chains[id(p)]:
                    continue
                if s.out in needed - direct[id(p)]:
                    new = {r.name for r in iter_refs(s.args)} - needed
                    needed |= new
                    grew = grew or bool(new)
    return map_programs(
        region, lambda p: _rewrite(p, chains[id(p)], direct[id(p)], needed)
    )


def _chains(p: Program, guarded: set[str], inputs: tuple[str, ...]) -> dict:
    """The views of `p` whose chain starts at a value of known layout: view -> the
    chain's root (see Note [Direct views])."""
    roots = {name: _Root(name, 0) for name in inputs}
    roots.update(
        (name, _Root(name, meta.offset))
        for name, _, meta in p.params
        if name in guarded
    )
    chains: dict[str, _Root] = {}
    for s in p.steps:
        if isinstance(s, Alloc):
            roots[s.buffer] = _Root(s.buffer, s.meta.offset)
        elif isinstance(s, ExternCall) and s.target in FIXED_LAYOUT:
            if isinstance(s.meta, TensorMeta):
                roots[s.out] = _Root(s.out, s.meta.offset)
        elif _is_link(s):
            src = s.args[0].name
            root = roots.get(src) or chains.get(src)
            if root is not None:
                chains[s.out] = replace(root, links=root.links + 1)
    return chains


def _is_link(s) -> bool:
    return (
        isinstance(s, ExternCall)
        and s.is_view
        and s.target in LINKS
        and bool(s.args)
        and isinstance(s.args[0], Ref)
    )


def _direct(s: ExternCall, root: _Root) -> bool:
    """Whether a link is better made directly from its root: a tensor of static
    size and strides, at or after the root's start, that takes two view methods or
    more (one, `x.view(8, 64)`, reads better as it is)."""
    m = s.meta
    return (
        root.links >= 2
        and isinstance(m, TensorMeta)
        and all(isinstance(d, int) for d in (*m.shape, *m.stride, m.offset))
        and m.offset >= root.offset
    )


def _read_outside(programs: list[Program], chains: dict) -> set[str]:
    """Names read by anything but a chain's own links: kernels, extern calls,
    outputs, conditions (in any Program: a name read elsewhere is kept)."""
    read: set[str] = set()
    for p in programs:
        read |= {r.name for r in iter_refs(p.outputs)}
        for s in p.steps:
            if isinstance(s, KernelCall):
                read |= set(s.args)
            elif isinstance(s, ExternCall) and s.out not in chains[id(p)]:
                read |= {r.name for r in iter_refs((s.args, s.kwargs))}
    return read


def _rewrite(p: Program, chains: dict, direct: set[str], needed: set[str]) -> Program:
    steps = []
    for s in p.steps:
        if isinstance(s, ExternCall) and s.out in chains:
            if s.out not in needed:
                continue  # only links after it read it
            if s.out in direct:
                root, m = chains[s.out], s.meta
                args = (Ref(root.name), m.shape, m.stride, m.offset - root.offset)
                s = replace(s, target=DIRECT_VIEW, args=args, kwargs=())
        steps.append(s)
    return replace(p, steps=tuple(steps))
