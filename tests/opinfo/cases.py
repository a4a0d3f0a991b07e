"""OpInfo samples as small source functions: what a user would write to call the op.

For an OpInfo `op`, a dtype and one of its samples (`op.sample_inputs("cpu", dtype)`,
seeded per op and dtype so every run sees the same values), a `Case` is one function:

    def f(a0, a1):
        return torch.add(a0.transpose(-2, -1), a1, alpha=2)

Tensor arguments become parameters, always contiguous (a variant's guards ask for
that); the layout under test is made inside the function, where the compiler sees it:

    contiguous  a0
    transposed  a0.transpose(-2, -1)    a0 holds the sample transposed, so the values
                                        the op sees are the sample's own
    noncontig   a0[..., ::2]            a0 holds each element twice along the last
                                        dim (OpInfo's `noncontiguous=True` layout)
    expanded    a0.expand((5, 5))       a0 is the sample's first slice along its
                                        first dimension of size > 1

A layout applies to every tensor argument it can change; a sample none of whose
tensors it changes gives no case. Python values (ints, floats, tuples, dtypes, None,
strings, slices) become literals. The call takes the first form that fits: an
operator (`__radd__` is `other + a0`), an attribute (`a0.mT`), `torch.<name>`
(`torch.nn.functional.<name>`, `torch.linalg.<name>`, ...) when that is `op.op`
itself, or the method `a0.<name>(...)`. With `inplace`, the call is the in-place
method (`a0.add_(a1)`). A sample that none of these express (a wrapper lambda, a
device argument, a sparse or complex tensor) is a case with `skip` set.
"""

from __future__ import annotations

import math
import random
import zlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch

from transpiler.options import DTYPES

try:
    from torch.testing._internal.common_methods_invocations import op_db
    from torch.testing._internal.opinfo.core import (
        BinaryUfuncInfo,
        OpInfo,
        UnaryUfuncInfo,
    )
except ModuleNotFoundError as e:  # common_utils imports expecttest
    raise ModuleNotFoundError(
        f"the OpInfo sweep needs torch's test utilities, which need {e.name!r}: "
        f"pip install {e.name}"
    ) from e

SHORT = {dtype: name for name, dtype in DTYPES.items()}  # torch.float32 -> "f32"
LAYOUTS = ("contiguous", "transposed", "noncontig", "expanded")

# `op.name` -> the expression, over the rendered input and arguments in order
OPERATORS = {
    "__radd__": "{1} + {0}",
    "__rsub__": "{1} - {0}",
    "__rmul__": "{1} * {0}",
    "__rdiv__": "{1} / {0}",
    "__rmod__": "{1} % {0}",
    "__rpow__": "{1} ** {0}",
    "__rmatmul__": "{1} @ {0}",
    "__rand__": "{1} & {0}",
    "__ror__": "{1} | {0}",
    "__rxor__": "{1} ^ {0}",
    "__getitem__": "{0}[{1}]",
}
ATTRIBUTES = ("T", "H", "mT", "mH")  # OpInfo's op is `lambda x: x.T`
CASTS = {"to", "bfloat16", "half", "float", "double", "int", "long", "short", "bool"}
CASTS |= {"byte", "char", "type_as"}
# results of uninitialized memory: only their dtypes and shapes are compared
UNINITIALIZED = {"empty", "empty_like", "empty_permuted", "empty_strided"}
UNINITIALIZED |= {"new_empty", "new_empty_strided"}


class NotExpressible(Exception):
    """A sample argument with no source form."""


@dataclass(frozen=True)
class Case:
    """One op call as a function: `def f(<params>): return <call>`."""

    id: str  # "add/f32/transposed/s3", then "/inplace" for the method
    op: str  # the OpInfo's full name ("max.reduction_with_dim")
    dtype: torch.dtype  # the dtype the samples were made for
    layout: str = "contiguous"  # one of LAYOUTS
    index: int = -1  # of the sample, in `samples(op, dtype)`
    inplace: bool = False
    call: str = ""  # the returned expression
    inputs: tuple[tuple[str, torch.Tensor], ...] = ()  # parameter -> contiguous tensor
    precision: str = "loose"  # see `precision` below, and compare.py
    skip: str = ""  # why the sample has no source form

    def source(self, fn: str) -> str:
        params = ", ".join(name for name, _ in self.inputs)
        return f"def {fn}({params}):\n    return {self.call}\n"

    def signature(self) -> str:
        """`a0: f32[5,5], a1: i64[5]`, the parameters as `--example` would give them."""
        return ", ".join(
            f"{name}: {SHORT[t.dtype]}[{','.join(map(str, t.shape))}]"
            for name, t in self.inputs
        )


def full_name(op: OpInfo) -> str:
    return f"{op.name}.{op.variant_test_name}" if op.variant_test_name else op.name


def find_op(name: str) -> OpInfo:
    for op in op_db:
        if full_name(op) == name:
            return op
    raise KeyError(f"no OpInfo named {name!r}")


def samples(op: OpInfo, dtype: torch.dtype) -> list:
    """The op's samples for `dtype`, the same on every run (seeded by name)."""
    seed = zlib.crc32(f"{full_name(op)}/{dtype}".encode())
    torch.manual_seed(seed)
    random.seed(seed)
    return list(op.sample_inputs("cpu", dtype))


def spread(n: int, k: int) -> list[int]:
    """`k` indices spread evenly over range(n): the middle one, or first and last
    and evenly between."""
    if k >= n:
        return list(range(n))
    if k <= 1:
        return [n // 2] if k == 1 else []
    return sorted({round(i * (n - 1) / (k - 1)) for i in range(k)})


def op_cases(
    op: OpInfo,
    dtype: torch.dtype,
    per_op: int,
    per_layout: int = 1,
    layouts: tuple[str, ...] = LAYOUTS,
    inplace: bool = True,
) -> Iterator[Case]:
    """Cases of `op` in `dtype`: `per_op` of its samples (spread over them) as they
    are, and `per_layout` of the samples each other layout changes; each as the
    call and, where the op has one, the in-place method (not on expanded tensors,
    which eager refuses to write)."""
    try:
        all_samples = samples(op, dtype)
    except Exception as e:  # OpInfo's own sample code failed
        yield skipped(op, dtype, f"sample_inputs raised {type(e).__name__}")
        return
    for layout in layouts:
        made = [make_case(op, dtype, s, layout, i) for i, s in enumerate(all_samples)]
        made = [c for c in made if c is not None]
        k = per_op if layout == "contiguous" else per_layout
        for case in (made[i] for i in spread(len(made), k)):
            yield case
            if inplace and layout != "expanded" and op.inplace_variant is not None:
                sample = all_samples[case.index]
                in_place = make_case(op, dtype, sample, layout, case.index, True)
                if in_place is not None:
                    yield in_place


def make_id(op: str, dtype: torch.dtype, layout: str, index: int, inplace: bool) -> str:
    tail = "/inplace" if inplace else ""
    return f"{op}/{SHORT[dtype]}/{layout}/s{index}{tail}"


def parse_id(case_id: str) -> tuple[str, torch.dtype, str, int, bool]:
    """`make_id` backwards: (op, dtype, layout, sample index, inplace)."""
    op, dtype, layout, index, *tail = case_id.split("/")
    return op, DTYPES[dtype], layout, int(index[1:]), tail == ["inplace"]


def case_by_id(case_id: str) -> Case | None:
    op, dtype, layout, index, inplace = parse_id(case_id)
    info = find_op(op)
    return make_case(info, dtype, samples(info, dtype)[index], layout, index, inplace)


def skipped(op: OpInfo, dtype: torch.dtype, why: str) -> Case:
    name = full_name(op)
    return Case(f"{name}/{SHORT[dtype]}/contiguous/s*", name, dtype, skip=why)


def make_case(
    op: OpInfo,
    dtype: torch.dtype,
    sample,
    layout: str,
    index: int,
    inplace: bool = False,
) -> Case | None:
    """The case, one with `skip` set if the sample has no source form (counted in
    the contiguous layout only), or None if `layout` changes none of its tensors."""
    render = Render(layout)
    name = full_name(op)
    case_id = make_id(name, dtype, layout, index, inplace)
    try:
        call = render_call(op, sample, render, inplace)
    except NotExpressible as e:
        if layout != "contiguous":
            return None
        return Case(case_id, name, dtype, layout, index, inplace, skip=str(e))
    if layout != "contiguous" and not render.changed:
        return None
    return Case(
        case_id,
        name,
        dtype,
        layout,
        index,
        inplace,
        call,
        tuple(render.params),
        precision=precision(op),
    )


def precision(op: OpInfo) -> str:
    """How closely the case must match eager: casts exactly (a rounding error is a
    bug there), ufuncs to the tighter tolerance, others (sums) a looser one, and
    `torch.empty` and such by dtype and shape only."""
    if op.name in UNINITIALIZED:
        return "uninitialized"
    if op.name in CASTS:
        return "exact"
    return "pointwise" if isinstance(op, (UnaryUfuncInfo, BinaryUfuncInfo)) else "loose"


def render_call(op: OpInfo, sample, r: Render, inplace: bool) -> str:
    name = op.name
    args = [sample.input, *sample.args]
    kwargs = dict(sample.kwargs)
    if inplace:
        method = getattr(op.inplace_variant, "__name__", "")
        if getattr(torch.Tensor, method, None) is not op.inplace_variant:
            raise NotExpressible("the in-place variant is a wrapper")
        return r.method(method, args, kwargs)
    if name in OPERATORS:
        if kwargs:
            raise NotExpressible("an operator with keyword arguments")
        subscript = name == "__getitem__"
        texts = [r.value(args[0])] + [r.value(a, subscript) for a in args[1:]]
        return OPERATORS[name].format(*texts)
    if name in ATTRIBUTES:
        return f"{r.value(args[0])}.{name}"
    if resolve(name) is op.op:
        return f"torch.{name}({r.arguments(args, kwargs)})"
    if op.method_variant is not None and getattr(torch.Tensor, name, None) is (
        op.method_variant
    ):
        return r.method(name, args, kwargs)
    raise NotExpressible("op.op is a wrapper, not torch.<name> nor a method")


def resolve(name: str):
    obj = torch
    for part in name.split("."):
        obj = getattr(obj, part, None)
        if obj is None:
            return None
    return obj


class Render:
    """Python values as source text; tensors become parameters `a0`, `a1`, ..."""

    def __init__(self, layout: str) -> None:
        self.layout = layout
        self.params: list[tuple[str, torch.Tensor]] = []
        self.changed = False  # whether the layout changed any tensor

    def method(self, name: str, args: list, kwargs: dict) -> str:
        if not isinstance(args[0], torch.Tensor):
            raise NotExpressible("a method call on a non-tensor")
        return f"{self.value(args[0])}.{name}({self.arguments(args[1:], kwargs)})"

    def arguments(self, args: list, kwargs: dict) -> str:
        texts = [self.value(a) for a in args]
        texts += [f"{k}={self.value(v)}" for k, v in kwargs.items()]
        return ", ".join(texts)

    def value(self, v, subscript: bool = False) -> str:
        if isinstance(v, torch.Tensor):
            return self.tensor(v)
        if v is None or isinstance(v, (bool, int, str)):
            return repr(v)
        if isinstance(v, float):
            return repr(v) if math.isfinite(v) else f"float({str(v)!r})"
        if isinstance(v, (torch.dtype, torch.memory_format, torch.layout)):
            return str(v)  # "torch.float32", "torch.channels_last"
        if isinstance(v, torch.Size):
            return f"torch.Size({self.value(list(v))})"
        if subscript and isinstance(v, tuple):
            return ", ".join(self.value(x, True) for x in v) if v else "()"
        if isinstance(v, (list, tuple)):
            items = [self.value(x) for x in v]
            if isinstance(v, list):
                return f"[{', '.join(items)}]"
            return f"({items[0]},)" if len(items) == 1 else f"({', '.join(items)})"
        if isinstance(v, slice):
            parts = [v.start, v.stop, v.step]
            if subscript:
                text = ":".join("" if p is None else self.value(p) for p in parts)
                return text[:-1] if text.endswith(":") and v.step is None else text
            return f"slice({', '.join(self.value(p) for p in parts)})"
        if v is Ellipsis:
            return "..."
        raise NotExpressible(f"an argument of type {type(v).__name__}")

    def tensor(self, t: torch.Tensor) -> str:
        if t.layout != torch.strided or t.dtype not in SHORT:
            raise NotExpressible(f"a {t.layout} {t.dtype} tensor")
        name = f"a{len(self.params)}"
        param, text = t.detach().clone().contiguous(), name
        made = LAYOUT_OF[self.layout](param, name)
        if made is not None:
            param, text = made
            self.changed = True
        self.params.append((name, param))
        return text


def transposed(t: torch.Tensor, name: str) -> tuple[torch.Tensor, str] | None:
    if t.dim() < 2 or t.shape[-1] < 2 or t.shape[-2] < 2:
        return None
    return t.transpose(-2, -1).contiguous(), f"{name}.transpose(-2, -1)"


def noncontig(t: torch.Tensor, name: str) -> tuple[torch.Tensor, str] | None:
    if t.dim() < 1 or t.shape[-1] < 2:
        return None
    return t.repeat_interleave(2, dim=-1), f"{name}[..., ::2]"


def expanded(t: torch.Tensor, name: str) -> tuple[torch.Tensor, str] | None:
    dims = [d for d, size in enumerate(t.shape) if size > 1]
    if not dims:
        return None
    shape = tuple(t.shape)
    return t.narrow(dims[0], 0, 1).contiguous(), f"{name}.expand({shape})"


def contiguous(t: torch.Tensor, name: str) -> None:
    return None  # the parameter as it is


LAYOUT_OF = {
    "contiguous": contiguous,
    "transposed": transposed,
    "noncontig": noncontig,
    "expanded": expanded,
}


def sweep_cases(
    ops: Iterable[OpInfo],
    dtypes: Iterable[torch.dtype],
    per_op: int,
    per_layout: int = 1,
    inplace: bool = True,
) -> Iterator[Case]:
    """`op_cases` of each op in each of `dtypes` that it supports on the CPU."""
    dtypes = tuple(dtypes)
    for op in ops:
        supported = op.supported_dtypes("cpu")
        for dtype in dtypes:
            if dtype in supported:
                yield from op_cases(op, dtype, per_op, per_layout, inplace=inplace)
