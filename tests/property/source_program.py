"""The programs of the source-construct fuzzer, and the state of drawing one.

A `Program` is the source of an `nn.Module` (or a function) and the inputs it is
declared with; `Gen` is the generator's typed environment while its forward is drawn
(every tensor's shape and dtype, the Python ints it knows, which values only fallback
code computes); the expression tables below build well-typed tensor expressions.
The statements are in source_grammar.py.
"""

from __future__ import annotations

import contextlib
import itertools
import math
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
from hypothesis import strategies as st

# ------------------------------------------------------------------------ types


@dataclass(frozen=True)
class Tensor:
    shape: tuple[int, ...]
    dtype: str = "f32"  # f32, f64, i64, bool

    @property
    def numel(self) -> int:
        return math.prod(self.shape)


@dataclass(frozen=True)
class Int:
    value: int | None  # None: known only when the model runs (loop index, data)


@dataclass(frozen=True)
class Float:
    pass


@dataclass(frozen=True)
class Str:
    pass


@dataclass(frozen=True)
class Seq:
    """A list (or tuple) of `n` tensors of one type."""

    item: Tensor
    n: int
    kind: str = "list"


@dataclass(frozen=True)
class Ints:
    values: tuple[int, ...]


@dataclass(frozen=True)
class TDict:
    keys: tuple[str, ...]
    item: Tensor


@dataclass(frozen=True)
class Fn:
    """A callable mapping an f32 tensor to one of the same shape."""


@dataclass(frozen=True)
class PyData:
    """Python values read from tensor data (`t.tolist()`): printed, they would show
    the last bits of a float, which compiled kernels may round differently."""


@dataclass(frozen=True)
class NoneValue:
    """An input declared as None (`mask=None`)."""


Type = Tensor | Int | Float | Str | Seq | Ints | TDict | Fn | PyData | NoneValue


@dataclass(frozen=True)
class Var:
    type: Type
    opaque: bool = False  # computed by fallback code: known only at run time


@dataclass(frozen=True)
class Planned:
    """A statement that raises on purpose when it runs."""

    error: str  # the exception type's name
    static: bool  # decided by shapes and Python values: transpile must report it


# --------------------------------------------------------------- the program


@dataclass(frozen=True)
class Program:
    kind: str  # "module" or "function"
    B: int
    C: int
    inputs: tuple[tuple[str, str], ...]  # parameter -> "x" kinds, see INPUT_KINDS
    helpers: tuple[str, ...]
    layers: tuple[str, ...]
    body: tuple[str, ...]  # the forward's lines, indented from column 0
    planned: Planned | None  # the first raise on purpose that runs, if any
    loose: bool  # reductions, matmuls, norms: compare with looser tolerances
    name: str = "M"
    text: str | None = None  # the source as is (a hand-reduced repro), else built

    def source(self) -> str:
        if self.text is not None:
            return self.text
        parts = [PRELUDE]
        parts += [HELPERS[h] for h in self.helpers]
        params = ", ".join(p + DEFAULTS.get(k, "") for p, k in self.inputs)
        body = "\n".join(self.body)
        if self.kind == "function":
            parts.append(f"def {self.name}({params}):\n{_indent(body, 1)}\n")
        else:
            init = [
                f"        {LAYERS[name].format(B=self.B, C=self.C)}"
                for name in self.layers
            ]
            parts.append(
                BASE
                + f"class {self.name}(Base):\n"
                + "    def __init__(self):\n"
                + "        super().__init__()\n"
                + "".join(line + "\n" for line in init)
                + STATE.format(C=self.C)
                + f"    def forward(self, {params}):\n"
                + _indent(body, 2)
                + "\n"
            )
        return "\n\n".join(parts)

    def declared(self) -> tuple[tuple[str, object], ...]:
        """The variant's inputs: name -> ("tensor", dtype, shape) or ("scalar", v)."""
        out = []
        for p, kind in self.inputs:
            if kind in DEFAULTS:
                continue  # not declared: transpile takes (and guards) the default
            out.append((p, INPUT_KINDS[kind](self.B, self.C)))
        return tuple(out)

    def make_inputs(self, seed: int) -> dict[str, object]:
        """Real inputs matching `declared()`, drawn from `seed`."""
        gen = torch.Generator().manual_seed(seed)
        values: dict[str, object] = {}
        for name, spec in self.declared():
            if spec[0] == "scalar":
                values[name] = spec[1]
            elif spec[1] == torch.int64:
                values[name] = torch.randint(0, self.B, spec[2], generator=gen)
            else:
                values[name] = 1.5 * torch.randn(spec[2], generator=gen)
        return values


def _indent(text: str, levels: int) -> str:
    pad = "    " * levels
    return "\n".join(pad + line if line else line for line in text.splitlines())


PRELUDE = """\
import contextlib
import math

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
"""

BASE = """\
class Base(nn.Module):
    def __init__(self):
        super().__init__()
        self.offset = 1.0

    def forward(self, x):
        return x * 2 + self.offset

    def shift(self, t, by=1.0):
        return t - by


"""

STATE = """\
        self.register_buffer("buf", torch.zeros({C}))
        self.count = 0
        self.scale = 0.5
        self.flag = True
        self.history = []
        self.last = None

"""

LAYERS = {
    "lin": "self.lin = nn.Linear({C}, {C})",
    "ln": "self.ln = nn.LayerNorm({C})",
    "drop": "self.drop = nn.Dropout(0.25)",
    "conv": "self.conv = nn.Conv1d({C}, {C}, 3, padding=1)",
    "emb": "self.emb = nn.Embedding(10, {C})",
    "blocks": "self.blocks = nn.ModuleList([nn.Linear({C}, {C}) for _ in range(2)])",
    "seq": "self.seq = nn.Sequential(nn.Linear({C}, {C}), nn.ReLU())",
}

# parameter kinds: how each is declared
INPUT_KINDS: dict[str, Callable[[int, int], tuple]] = {
    "x": lambda B, C: ("tensor", torch.float32, (B, C)),
    "y_row": lambda B, C: ("tensor", torch.float32, (C,)),
    "y_full": lambda B, C: ("tensor", torch.float32, (B, C)),
    "idx": lambda B, C: ("tensor", torch.int64, (B,)),
    "n1": lambda B, C: ("scalar", 1),
    "n3": lambda B, C: ("scalar", 3),
    "flag_t": lambda B, C: ("scalar", True),
    "flag_f": lambda B, C: ("scalar", False),
    "mask_none": lambda B, C: ("scalar", None),
    "mask_t": lambda B, C: ("tensor", torch.float32, (B, C)),
}
DEFAULTS = {"scale_default": "=0.5"}  # parameters left to their default

HELPERS = {
    "scale_add": """\
def scale_add(t, k=2, *rest, bias=0.0, **kw):
    out = t * k + bias
    for r in rest:
        out = out + r
    if kw.get("negate", False):
        out = -out
    return out
""",
    "pair": """\
def pair(t):
    return t.relu(), t.sigmoid()
""",
    "gated": """\
def gated(t, g=None):
    if g is None:
        return t
    return t * torch.sigmoid(g)
""",
    "only_kw": """\
def only_kw(t, *, s):
    return t * s
""",
    "noisy": """\
def noisy(t):
    print("noisy", tuple(t.shape))
    return t + 1
""",
    "count_positive": """\
def count_positive(t):
    return int((t > 0).sum().item())
""",
    "apply_twice": """\
def apply_twice(fn, t):
    return fn(fn(t))
""",
    "tower": """\
def tower(t, depth):
    if depth == 0:
        return t
    return tower(t * 0.5 + 1, depth - 1)
""",
}


# --------------------------------------------------------------- the generator


class Gen:
    """The state of one program being drawn: environment, lines, what it uses."""

    def __init__(self, draw, kind: str, B: int, C: int, inputs) -> None:
        self.draw = draw
        self.kind = kind
        self.B, self.C = B, C
        self.env: dict[str, Var] = {}
        self.lines: list[str] = []
        self.depth = 0  # block nesting
        self.helpers: dict[str, None] = {}
        self.layers: dict[str, None] = {}
        self.loose = False
        self.conditional = False  # after a condition on tensor data
        self.straight = True  # the statement being drawn runs, exactly once
        self.in_loop = 0
        self.frozen: set[str] = set()  # names whose type a loop body must keep
        self.protected: set[str] = set()  # a loop's counter: never written in it
        self.planned: Planned | None = None
        self.done = False  # an unconditional return (or raise) was emitted
        self.counter = itertools.count()
        self.changed_attrs: set[str] = set()  # written by fallback code
        self.inputs = inputs
        self.bools: set[str] = set()  # Int variables holding a bool
        for name, kind_ in inputs:
            self.env[name] = Var(self._input_type(name, kind_))

    def _input_type(self, name: str, kind: str) -> Type:
        if kind in DEFAULTS:
            return Float()
        spec = INPUT_KINDS[kind](self.B, self.C)
        if spec[0] == "tensor":
            return Tensor(spec[2], "i64" if spec[1] == torch.int64 else "f32")
        if spec[1] is None:
            return NoneValue()
        if isinstance(spec[1], bool):
            self.bools.add(name)
        return Int(int(spec[1]))

    # ---- drawing helpers

    def choice(self, options):
        options = list(options)
        return options[self.draw(st.integers(0, len(options) - 1))]

    def chance(self, p_in_8: int) -> bool:
        return self.draw(st.integers(0, 7)) < p_in_8

    def fresh(self, prefix: str) -> str:
        return f"{prefix}{next(self.counter)}"

    def emit(self, line: str) -> None:
        self.lines.append("    " * self.depth + line)

    @contextlib.contextmanager
    def block(self, header: str) -> Iterator[None]:
        self.emit(header)
        self.depth += 1
        start = len(self.lines)
        yield
        if len(self.lines) == start:
            self.emit("pass")
        self.depth -= 1

    def module(self) -> bool:
        return self.kind == "module"

    def use_layer(self, name: str) -> str:
        self.layers[name] = None
        return f"self.{name}"

    def use_helper(self, name: str) -> str:
        self.helpers[name] = None
        return name

    # ---- environment

    def vars_of(
        self, pred: Callable[[Type], bool], opaque_ok: bool = True
    ) -> list[str]:
        return [
            n
            for n, v in self.env.items()
            if pred(v.type) and (opaque_ok or not v.opaque)
        ]

    def tensors(self, pred=lambda t: True, opaque_ok=True, dtype="f32") -> list[str]:
        return self.vars_of(
            lambda t: isinstance(t, Tensor) and t.dtype == dtype and pred(t),
            opaque_ok,
        )

    def pick_tensor(self, pred=lambda t: True, opaque_ok=True, dtype="f32"):
        names = self.tensors(pred, opaque_ok, dtype)
        if not names:
            return None
        # recent values are likelier: the program reads as a chain
        if len(names) > 2 and self.chance(5):
            names = names[-2:]
        name = self.choice(names)
        return name, self.env[name].type

    def bind(self, name: str, type_: Type, opaque: bool = False) -> str:
        """Assign `name`; in a loop body a name seen before keeps its type (a fresh
        name is used instead), so every iteration is well-typed."""
        if name in self.protected or (
            name in self.frozen and self.env.get(name, Var(None)).type != type_
        ):
            name = self.fresh(name.rstrip("0123456789") or "v")
        self.env[name] = Var(type_, opaque)
        return name

    def target(self, type_: Type, prefix: str) -> str:
        """A name to assign a value of `type_`: often an existing one (rebinding)."""
        same = [
            n
            for n, v in self.env.items()
            if v.type == type_ and n not in self.input_names and not v.opaque
        ]
        if same and self.chance(3):
            return self.choice(same)
        return self.fresh(prefix)

    @property
    def input_names(self) -> set[str]:
        return {n for n, _ in self.inputs}

    def scalar(self, opaque_ok: bool = True) -> str:
        """A Python number: literal, Int or Float variable, a module attribute."""
        options = ["0.5", "2", "-1.5"]
        options += [
            n
            for n in self.vars_of(lambda t: isinstance(t, (Int, Float)), opaque_ok)
            if n not in self.bools
        ]
        if self.module():
            options += ["self.scale", "self.offset"]
        return self.choice(options)

    def opaque(self, text: str) -> bool:
        """Whether an expression reads a value known only at run time: a name bound
        by fallback code, an attribute fallback code changed, or tensor data."""
        if any(marker in text for marker in DATA_MARKERS):
            return True
        for name in re.findall(r"(?<![.\w])[A-Za-z_]\w*", text):
            if name in self.env and self.env[name].opaque:
                return True
        return any(f"self.{a}" in text for a in self.changed_attrs)

    def is_static(self, text: str) -> bool:
        """Whether an error raised by this text is decided at transpile time."""
        return not self.conditional and not self.opaque(text)

    def plan(self, error: str, static: bool) -> None:
        if self.straight and self.planned is None and not self.done:
            self.planned = Planned(error, static and not self.conditional)


# ---------------------------------------------------------------- expressions

# Text that reads tensor data into Python or makes a shape depend on data: the
# statement becomes fallback code and what it binds is known only at run time.
DATA_MARKERS = (".item()", ".tolist()", ".numpy()", "> 0]", "nonzero", "count_positive")

UNARY = [
    "{a} + 1",
    "{a} * 0.5",
    "-{a}",
    "{a}.abs()",
    "torch.relu({a})",
    "F.gelu({a})",
    "{a}.sigmoid()",
    "torch.tanh({a})",
    "{a}.clamp(-1.0, 1.0)",
    "F.silu({a})",
    "torch.where({a} > 0, {a}, {a} * 0.1)",
    "{a}.exp().clamp(max=8.0)",
    "({a}.abs() + 1).sqrt()",
    "1 / ({a}.abs() + 1)",
    "{a}.clone()",
    "{a}.detach()",
    "{a}.contiguous()",
    "{a}.float()",
    "{a} * {a}.tanh()",
    "torch.nan_to_num({a})",
    "F.max_pool1d({a}[None], 3, 1, 1)[0]",  # windows of a computed value
]
UNARY_REDUCING = [  # same shape, but a reduction inside (looser tolerance)
    "F.avg_pool1d({a}[None], 3, 1, 1, count_include_pad=False)[0]",
    "F.softmax({a}, dim=-1)",
    "{a} - {a}.mean(-1, keepdim=True)",
    "F.normalize({a}, dim=-1)",
    "{a}.cumsum(-1)",
    "F.layer_norm({a}, {a}.shape[-1:])",
    "torch.log_softmax({a}, -1)",
]
BINARY = [
    "{a} + {b}",
    "{a} * {b}",
    "{a} - {b}",
    "torch.maximum({a}, {b})",
    "{a} / ({b}.abs() + 1)",
    "torch.where({b} > 0, {a}, {b})",
    "torch.add({a}, {b}, alpha=2)",
    "{a}.mul({b})",
]
SCALAR = ["{a} * {s}", "{a} + {s}", "{a} - {s}", "{a} / (abs({s}) + 1)", "{s} * {a}"]


def broadcasts_into(b: tuple[int, ...], a: tuple[int, ...]) -> bool:
    if len(b) > len(a):
        return False
    return all(x == y or x == 1 for x, y in zip(reversed(b), reversed(a)))


def same_shape_expr(g: Gen, a: str, t: Tensor, depth: int = 0) -> str:
    """An f32 expression of `t`'s shape built from `a` (and whatever else is there)."""
    kind = g.choice(["unary", "unary", "binary", "scalar", "reducing", "layer"])
    if kind == "binary":
        other = g.pick_tensor(lambda u: broadcasts_into(u.shape, t.shape))
        if other is not None:
            text = g.choice(BINARY).format(a=a, b=other[0])
            return text
    if kind == "scalar":
        return g.choice(SCALAR).format(a=a, s=g.scalar())
    if kind == "reducing" and t.shape and t.shape[-1] > 0:
        g.loose = True
        return g.choice(UNARY_REDUCING).format(a=a)
    if kind == "layer":
        text = layer_expr(g, a, t)
        if text is not None:
            return text
    text = g.choice(UNARY).format(a=a)
    if depth < 1 and g.chance(2):
        return same_shape_expr(g, f"({text})", t, depth + 1)
    return text


def layer_expr(g: Gen, a: str, t: Tensor) -> str | None:
    """A layer (or functional form) applied to `a`, keeping its shape."""
    C = g.C
    options = []
    if t.shape and t.shape[-1] == C:
        options += ["lin", "ln", "F.linear", "blocks", "seq"]
        if len(t.shape) == 2:
            options.append("conv")
    options += ["drop", "F.dropout"]
    if not g.module():  # no layers: functional forms only
        options = ["F.dropout"]
        if t.shape and t.shape[-1] == C:
            options.append("F.layer_norm")
    if not options:
        return None
    which = g.choice(options)
    if which in ("lin", "ln", "drop", "seq"):
        g.loose |= which != "drop"
        return f"{g.use_layer(which)}({a})"
    if which == "F.linear":
        g.loose = True
        return f"F.linear({a}, {g.use_layer('lin')}.weight, {g.use_layer('lin')}.bias)"
    if which == "blocks":
        g.loose = True
        return f"{g.use_layer('blocks')}[{g.choice(['0', '1', '-1'])}]({a})"
    if which == "conv":
        g.loose = True
        return f"{g.use_layer('conv')}({a}.t().unsqueeze(0))[0].t()"
    if which == "F.layer_norm":
        g.loose = True
        return f"F.layer_norm({a}, ({C},))"
    if which == "F.dropout":
        training = "self.training" if g.module() else "False"
        return f"F.dropout({a}, p=0.5, training={training})"
    return None


def new_shape_expr(g: Gen, a: str, t: Tensor) -> tuple[str, Tensor] | None:
    """An expression of a new shape (or dtype) from `a`: views, reductions, ..."""
    s = t.shape
    options: list[tuple[str, Tensor]] = []
    if s:
        options += [
            (f"{a}.sum(-1)", Tensor(s[:-1])),
            (f"{a}.mean(0, keepdim=True)", Tensor((1, *s[1:]))),
            (f"{a}.amax(-1, keepdim=True)", Tensor((*s[:-1], 1))),
            (f"{a}.max(dim=-1).values", Tensor(s[:-1])),
            (f"{a}.norm(dim=-1)", Tensor(s[:-1])),
            (f"{a}.unsqueeze(0)", Tensor((1, *s))),
            (f"{a}[None]", Tensor((1, *s))),
            (f"{a}[..., None]", Tensor((*s, 1))),
            (f"{a}.view(-1)", Tensor((t.numel,))),
            (f"{a}.reshape(-1)", Tensor((t.numel,))),
            (f"{a}.flatten()", Tensor((t.numel,))),
            (f"torch.stack([{a}, {a} * 2])", Tensor((2, *s))),
            (f"torch.cat([{a}, {a}.flip(-1)], dim=-1)", Tensor((*s[:-1], 2 * s[-1]))),
            (f"{a}.double()", Tensor(s, "f64")),
            (f"{a}.to(torch.float64)", Tensor(s, "f64")),
            (f"({a} > 0)", Tensor(s, "bool")),
            (f"({a} * 4).long()", Tensor(s, "i64")),
            (f"{a}.sum()", Tensor(())),
            (f"{a}[{a} > 0].sum()", Tensor(())),
            (f"torch.zeros_like({a})", Tensor(s)),
            (f"{a}.new_ones({a}.shape)", Tensor(s)),
        ]
        if s[0] > 0:
            options += [
                (f"{a}[0]", Tensor(s[1:])),
                (f"{a}[-1]", Tensor(s[1:])),
                (f"{a}[::2]", Tensor((len(range(s[0])[::2]), *s[1:]))),
                (f"{a}[1:]", Tensor((s[0] - 1, *s[1:]))),
                (f"{a}[torch.arange({s[0]}).flip(0)]", Tensor(s)),
                (
                    f"{a}.index_select(0, torch.tensor([0, {s[0] - 1}]))",
                    Tensor((2, *s[1:])),
                ),
            ]
        if s[0] == 1:
            options.append((f"{a}.squeeze(0)", Tensor(s[1:])))
        if "idx" in g.env and s[0] >= g.B:
            options.append((f"{a}[idx]", Tensor((g.B, *s[1:]))))
    if len(s) >= 2:
        r = (*s[:-2], s[-1], s[-2])
        options += [
            (f"{a}.transpose(-1, -2)", Tensor(r)),
            (f"{a}.t()" if len(s) == 2 else f"{a}.mT", Tensor(r)),
            (f"{a}[:, 1:3]", Tensor((s[0], len(range(s[1])[1:3]), *s[2:]))),
            (f"{a}[..., 0]", Tensor(s[:-1])),
            (f"{a}[:, None, 0]", Tensor((s[0], 1, *s[2:]))),
            (f"{a}.reshape({s[-1]}, -1)", Tensor((s[-1], t.numel // max(s[-1], 1)))),
            (f"{a}.view({', '.join(map(str, r))})", Tensor(r)),
            (f"{a}[:, [0, -1]]", Tensor((s[0], 2, *s[2:]))),
        ]
        g_ = s
        options.append((f"{a} @ {a}.transpose(-1, -2)", Tensor((*g_[:-1], g_[-2]))))
        if len(s) == 2:
            options.append(
                (f"torch.einsum('ij,kj->ik', {a}, {a})", Tensor((s[0], s[0])))
            )
            options.append((f"{a}.permute(1, 0)", Tensor((s[1], s[0]))))
        if len(s) == 3:
            options.append((f"{a}.permute(2, 0, 1)", Tensor((s[2], s[0], s[1]))))
    if not options:
        options = [(f"{a}.unsqueeze(0)", Tensor((1,)))]
    if g.module() and "idx" in g.env:  # an embedding of the index input
        options.append(("self.emb(idx)", Tensor((g.B, g.C))))
        options.append(
            (f"self.emb(torch.arange({g.B}) % 10) + {a}.sum()", Tensor((g.B, g.C)))
        )
    text, out = g.choice(options)
    if "self.emb" in text:
        g.use_layer("emb")
    if any(k in text for k in ("sum", "mean", "norm", "@", "einsum", "max")):
        g.loose = True
    return text, out


def tensor_expr(g: Gen, opaque_ok: bool = True) -> tuple[str, Tensor, bool] | None:
    """Some f32 expression and its type; whether it reads an opaque value."""
    picked = g.pick_tensor(opaque_ok=opaque_ok)
    if picked is None:
        return None
    a, t = picked
    opaque = g.env[a].opaque
    if g.chance(5):
        return same_shape_expr(g, a, t), t, opaque
    new = new_shape_expr(g, a, t)
    if new is None:
        return None
    return new[0], new[1], opaque
