"""A grammar of the source constructs real model code uses, as a hypothesis strategy.

`programs()` draws a `Program` (source_program.py): an `nn.Module` (or a function)
whose forward is 3-10 random statements, and the inputs it is declared with. Each
statement template reads the generator's typed environment, so most programs run in
eager; some raise on purpose (`Program.planned`), and the generator knows whether the
raise is decided by shapes and Python values (transpile must report a user error) or
by tensor data or by values only fallback code computes (the generated code raises when
called). In doubt a value counts as computed by fallback code: the check is looser.

Statements are drawn from a weighted table whose first entry is a plain assignment, so
hypothesis shrinks towards straight-line code.
"""

from __future__ import annotations

from dataclasses import replace

from hypothesis import strategies as st

from tests.property.source_program import (
    HELPERS,
    LAYERS,
    UNARY,
    Float,
    Fn,
    Gen,
    Int,
    Ints,
    NoneValue,
    Program,
    PyData,
    Seq,
    Str,
    TDict,
    Tensor,
    Var,
    broadcasts_into,
    same_shape_expr,
    tensor_expr,
)

# ----------------------------------------------------------------- statements


def s_assign(g: Gen) -> bool:
    """`h = <tensor expression>`."""
    e = tensor_expr(g)
    if e is None:
        return False
    text, t, _ = e
    opaque = g.opaque(text)
    name = g.bind(g.target(t, "h"), t, opaque)
    g.emit(f"{name} = {text}")
    return True


def s_augassign(g: Gen) -> bool:
    """`h += <expr>` on a tensor (in place) or `k += 1` on an int."""
    if g.chance(2):
        ks = g.vars_of(lambda t: isinstance(t, Int) and t.value is not None)
        ks = [k for k in ks if k not in g.bools and k not in g.input_names]
        if ks:
            k = g.choice(ks)
            op, by = g.choice([("+", 1), ("*", 2), ("//", 2), ("-", 1)])
            v = g.env[k].type.value
            new = {"+": v + by, "*": v * by, "//": v // by, "-": v - by}[op]
            g.env[k] = Var(Int(new), g.env[k].opaque)
            g.emit(f"{k} {op}= {by}")
            return True
    picked = g.pick_tensor()
    if picked is None or picked[0] in g.protected:
        return False
    a, t = picked
    other = g.pick_tensor(lambda u: broadcasts_into(u.shape, t.shape))
    if other is not None and g.chance(5):
        value = same_shape_expr(g, other[0], other[1])
    else:
        value = g.scalar()
    op = g.choice(["+", "-", "*"])
    g.emit(f"{a} {op}= {value}")
    if g.opaque(value):
        g.env[a] = replace(g.env[a], opaque=True)
    return True


def s_int(g: Gen) -> bool:
    """Python ints from shapes and other ints; tuple and starred unpacking."""
    picked = g.pick_tensor(lambda t: len(t.shape) >= 1)
    if picked is None:
        return False
    a, t = picked
    s = t.shape
    options = [
        (f"{{k}} = {a}.shape[0]", s[0]),
        (f"{{k}} = {a}.size(-1)", s[-1]),
        (f"{{k}} = len({a})", s[0]),
        (f"{{k}} = {a}.dim()", len(s)),
        (f"{{k}} = {a}.numel()", t.numel),
        (f"{{k}} = sum({a}.shape)", sum(s)),
        (f"{{k}} = {a}.shape[-1] // 2", s[-1] // 2),
        (f"{{k}} = min({a}.shape)", min(s)),
        (f"{{k}} = max({a}.shape[-1], 2)", max(s[-1], 2)),
    ]
    ns = [
        n
        for n in g.vars_of(lambda t: isinstance(t, Int) and t.value is not None)
        if n not in g.bools
    ]
    if ns:
        n = g.choice(ns)
        v = g.env[n].type.value
        options += [
            (f"{{k}} = {n} * 2 + 1", v * 2 + 1),
            (f"{{k}} = abs({n} - 3)", abs(v - 3)),
        ]
    if len(s) == 2 and g.chance(3):
        b, c = g.fresh("k"), g.fresh("k")
        star = g.chance(4)
        line = f"*{b}, {c} = {a}.shape" if star else f"{b}, {c} = {a}.shape"
        opaque = g.opaque(a)
        g.emit(line)
        g.bind(b, Ints((s[0],)) if star else Int(s[0]), opaque)
        g.bind(c, Int(s[1]), opaque)
        return True
    line, value = g.choice(options)
    opaque = g.opaque(line)
    k = g.bind(g.fresh("k"), Int(value), opaque)
    g.emit(line.format(k=k))
    return True


def s_float(g: Gen) -> bool:
    ks = [
        n
        for n in g.vars_of(lambda t: isinstance(t, Int) and t.value is not None)
        if n not in g.bools and g.env[n].type.value >= 0
    ]
    options = ["{s} = 0.25"]
    if ks:
        k = g.choice(ks)
        options += [
            f"{{s}} = 0.5 * {k}",
            f"{{s}} = float({k})",
            f"{{s}} = math.sqrt({k})",
        ]
    if g.module():
        options.append("{s} = self.scale * 2")
    picked = g.pick_tensor()
    if picked is not None:
        a = picked[0]
        options += [f"{{s}} = {a}.sum().item()", f"{{s}} = float({a}.mean())"]
    line = g.choice(options)
    opaque = g.opaque(line) or (line.startswith("{s} = float(") and ".mean()" in line)
    s = g.bind(g.fresh("s"), Float(), opaque)
    g.emit(line.format(s=s))
    return True


def s_unpack(g: Gen) -> bool:
    """Tuple unpacking of tensors: chunk, unbind with a star, swaps, helpers."""
    picked = g.pick_tensor(lambda t: len(t.shape) >= 1 and t.shape[0] >= 1)
    if picked is None:
        return False
    a, t = picked
    s = t.shape
    p, q = g.fresh("p"), g.fresh("q")
    kind = g.choice(["chunk", "unbind", "swap", "pair", "nested"])
    opaque = g.opaque(a)
    if kind == "chunk" and s[-1] % 2 == 0:
        half = Tensor((*s[:-1], s[-1] // 2))
        g.emit(f"{p}, {q} = {a}.chunk(2, dim=-1)")
        g.bind(p, half, opaque), g.bind(q, half, opaque)
    elif kind == "unbind":
        g.emit(f"{p}, *{q} = {a}.unbind(0)")
        g.bind(p, Tensor(s[1:]), opaque)
        g.bind(q, Seq(Tensor(s[1:]), s[0] - 1), opaque)
    elif kind == "pair":
        g.emit(f"{p}, {q} = {g.use_helper('pair')}({a})")
        g.bind(p, t, opaque), g.bind(q, t, opaque)
    elif kind == "nested":
        r = g.fresh("r")
        g.emit(f"({p}, {q}), {r} = ({a}, {a} * 2), {a}.sum()")
        g.bind(p, t, opaque), g.bind(q, t, opaque), g.bind(r, Tensor(()), opaque)
    else:
        other = g.pick_tensor()
        b, u = other
        g.emit(f"{p}, {q} = {b}, {a}")
        g.bind(p, u, g.opaque(b)), g.bind(q, t, opaque)
        if b != a and g.chance(4):
            g.emit(f"{p}, {q} = {q}, {p}")
            g.bind(p, t, opaque), g.bind(q, u, g.opaque(b))
    return True


def s_comprehension(g: Gen) -> bool:
    """List/dict/set comprehensions and generator expressions."""
    seqs = g.vars_of(lambda t: isinstance(t, Seq) and t.n >= 1)
    picked = g.pick_tensor()
    if picked is None:
        return False
    a, t = picked
    kind = g.choice(
        ["range", "blocks", "unbind", "stack", "sum", "dict", "set", "shape", "all"]
    )
    opaque = g.opaque(a)
    if kind == "blocks" and g.module() and t.shape and t.shape[-1] == g.C:
        ts = g.bind(g.fresh("ts"), Seq(t, 2), opaque)
        g.emit(f"{ts} = [layer({a}) for layer in {g.use_layer('blocks')}]")
        g.loose = True
    elif kind == "unbind" and t.shape:
        ts = g.bind(g.fresh("ts"), Seq(Tensor(t.shape[1:]), t.shape[0]), opaque)
        g.emit(f"{ts} = list({a}.unbind(0))")
    elif kind in ("stack", "sum", "dict", "set") and seqs:
        ts = g.choice(seqs)
        seq = g.env[ts].type
        opaque |= g.env[ts].opaque
        if kind == "stack":
            z = g.bind(g.fresh("h"), Tensor((seq.n, *seq.item.shape)), opaque)
            g.emit(f"{z} = torch.stack([e.relu() for e in {ts}])")
        elif kind == "sum":  # a generator expression: not compiled
            z = g.bind(g.fresh("h"), seq.item, True)
            g.emit(f"{z} = sum(e * 2 for e in {ts})")
        elif kind == "dict":
            keys = tuple(f"k{i}" for i in range(seq.n))
            d = g.bind(g.fresh("d"), TDict(keys, seq.item), True)
            g.emit(f'{d} = {{f"k{{i}}": e for i, e in enumerate({ts})}}')
            z = g.bind(g.fresh("h"), seq.item, True)
            g.emit(f'{z} = {d}["k0"] + 1')
        else:
            k = g.bind(g.fresh("k"), Int(1 if seq.n else 0), True)
            g.emit(f"{k} = len({{e.dim() for e in {ts}}})")
    elif kind == "shape" and t.shape:
        big = [d for d in t.shape if d > 1]
        sizes = g.bind(g.fresh("sizes"), Ints(tuple(big)), opaque)
        g.emit(f"{sizes} = [d for d in {a}.shape if d > 1]")
        k = g.bind(g.fresh("k"), Int(sum(big)), opaque)
        g.emit(f"{k} = sum({sizes}) + len({sizes})")
        g.env[k] = Var(Int(sum(big) + len(big)), opaque)
    elif kind == "all":
        k = g.fresh("ok")
        g.emit(f"{k} = all(d > 0 for d in {a}.shape)")
        g.bind(k, Int(1), True)
        g.bools.add(k)
    else:
        n = g.choice([1, 2, 3])
        ts = g.bind(g.fresh("ts"), Seq(t, n), opaque)
        g.emit(f"{ts} = [{a} * i for i in range({n})]")
    return True


def s_fstring(g: Gen) -> bool:
    picked = g.pick_tensor()
    ks = [
        n
        for n in g.vars_of(lambda t: isinstance(t, Int) and t.value is not None)
        if n not in g.bools
    ]
    options = ['f"step"']
    if picked is not None:
        a = picked[0]
        options += [
            f'f"{{tuple({a}.shape)}}"',
            f'f"{{{a}.dim()}}d:{{{a}.shape[-1] if {a}.dim() else 0}}"',
        ]
    if ks:
        k = g.choice(ks)
        options += [f'f"k={{{k}:03d}}"', f'f"{{{k}!r}}_{{{k} * 2}}"']
    text = g.choice(options)
    tag = g.bind(g.fresh("tag"), Str(), g.opaque(text))
    g.emit(f"{tag} = {text}")
    return True


def s_walrus(g: Gen) -> bool:
    picked = g.pick_tensor()
    if picked is None:
        return False
    a, t = picked
    w, z = g.fresh("w"), g.fresh("h")
    g.emit(f"{z} = ({w} := {a} * 0.5) + {w}.tanh()")
    g.bind(w, t, g.opaque(a))
    g.bind(z, t, g.opaque(a))
    return True


def s_lambda(g: Gen) -> bool:
    """Lambdas and nested defs (with defaults, *args, **kwargs), then calls."""
    picked = g.pick_tensor()
    if picked is None:
        return False
    a, t = picked
    kind = g.choice(["lambda", "def", "varargs", "closure", "apply"])
    z = g.fresh("h")
    if kind == "lambda":
        f = g.fresh("f")
        g.emit(f"{f} = lambda t, s=2.0: {UNARY[g.choice(range(10))].format(a='t')} * s")
        g.bind(f, Fn(), True)
        g.emit(f"{z} = {f}({a})")
    elif kind == "def":
        f = g.fresh("inner")
        g.emit(f"def {f}(t, s=2.0):")
        g.emit(f"    return {UNARY[g.choice(range(10))].format(a='t')} * s")
        g.bind(f, Fn(), True)
        g.emit(f"{z} = {f}({a}, s={g.scalar()})" if g.chance(4) else f"{z} = {f}({a})")
    elif kind == "varargs":
        f = g.fresh("inner")
        g.emit(f"def {f}(t, *args, scale=1.0, **kw):")
        g.emit("    for e in args:")
        g.emit("        t = t + e")
        g.emit('    return t * scale if not kw.get("flip") else -t')
        g.bind(f, Fn(), True)
        g.emit(f"{z} = {f}({a}, {a}, scale=0.5, flip={g.choice(['True', 'False'])})")
    elif kind == "closure":
        other = g.pick_tensor(lambda u: broadcasts_into(u.shape, t.shape))
        f = g.fresh("inner")
        g.emit(f"def {f}(t):")
        g.emit(f"    return t * {other[0]}")
        g.bind(f, Fn(), True)
        g.emit(f"{z} = {f}({a})")
    else:
        fns = g.vars_of(lambda u: isinstance(u, Fn))
        fn = g.choice(["torch.tanh", "torch.relu", "(lambda t: t * 2)", *fns])
        g.emit(f"{z} = {g.use_helper('apply_twice')}({fn}, {a})")
    g.bind(z, t, True)
    return True


def s_helper(g: Gen) -> bool:
    """Calls of module-level helpers: defaults, *args, **kwargs, keyword-only."""
    picked = g.pick_tensor()
    if picked is None:
        return False
    a, t = picked
    other = g.pick_tensor(lambda u: broadcasts_into(u.shape, t.shape))
    b = other[0]
    calls = [
        f"scale_add({a})",
        f"scale_add({a}, 3)",
        f"scale_add({a}, 2, {b}, bias=0.5)",
        f"scale_add({a}, negate=True)",
        f"scale_add({a}, *[{b}, {b}])",
        f'scale_add({a}, **{{"bias": 1.0, "negate": False}})',
        f"scale_add(k={g.scalar()}, t={a})",
        f"gated({a})",
        f"gated({a}, {b})",
        f"gated({a}, g=None)",
        f"only_kw({a}, s=2)",
        f"noisy({a})",
        f"tower({a}, {g.choice([0, 1, 3])})",
    ]
    call = g.choice(calls)
    g.use_helper(call.split("(")[0])
    z = g.bind(g.target(t, "h"), t, g.opaque(call) or call.startswith("noisy"))
    g.emit(f"{z} = {call}")
    return True


def s_super(g: Gen) -> bool:
    if not g.module():
        return False
    picked = g.pick_tensor()
    if picked is None:
        return False
    a, t = picked
    call = g.choice(
        [
            f"super().forward({a})",
            f"super().shift({a}, by=0.5)",
            f"Base.forward(self, {a})",
            f"self.shift({a})",
        ]
    )
    z = g.bind(g.target(t, "h"), t, g.opaque(call))
    g.emit(f"{z} = {call}")
    return True


def s_inplace(g: Gen) -> bool:
    """In-place methods and item assignments on intermediates and inputs."""
    picked = g.pick_tensor()
    if picked is None or picked[0] in g.protected:
        return False
    a, t = picked
    s = t.shape
    other = g.pick_tensor(lambda u: broadcasts_into(u.shape, t.shape))
    options = [
        f"{a}.add_(1)",
        f"{a}.mul_(0.5)",
        f"{a}.clamp_(-1.0, 1.0)",
        f"{a}.relu_()",
        f"{a}.sigmoid_()",
        f"{a}.masked_fill_({a} > 0.5, 0.0)",
        f"{a}.copy_({other[0]})",
        f"{a}.add_({other[0]}, alpha=0.5)",
        f"{a}[{a} < 0] = 0.0",
    ]
    if s and s[0] > 0:
        options += [f"{a}[0] = 0", f"{a}[-1] += 2", f"{a}[0].mul_(3)"]
    if len(s) >= 2 and s[1] > 1:
        options += [
            f"{a}[:, 1] += 2",
            f"{a}[:, :1] = {a}[:, 1:2]",
            f"{a}[..., 0].mul_(2)",
        ]
    if s:
        v = g.fresh("v")
        options.append(f"{v} = {a}.view(-1)\n{v}.add_(1)")
    line = g.choice(options)
    for part in line.split("\n"):
        g.emit(part)
    if "\n" in line:
        g.bind(line.split(" ")[0], Tensor((t.numel,)), g.opaque(a))
    if g.opaque(line):
        g.env[a] = replace(g.env[a], opaque=True)
    return True


def s_state(g: Gen) -> bool:
    """Reads and writes of module attributes, lists and buffers."""
    if not g.module():
        return False
    picked = g.pick_tensor()
    a, t = picked if picked is not None else ("x", Tensor((g.B, g.C)))
    options = [
        ("self.count += 1", "count"),
        ("self.scale = self.scale * 0.5", "scale"),
        (f"self.history.append({a}.shape[0])", "history"),
        ("self.history.append(len(self.history))", "history"),
        (f"self.last = {a}.detach().clone()", "last"),
        ("self.flag = not self.flag", "flag"),
        ('setattr(self, "scale", 2.0)', "scale"),
        ("self.buf.add_(1)", None),
        ("self.buf[0] = 2.0", None),
        ("self.buf.mul_(0.5)", None),
    ]
    if t.shape and t.shape[-1] == g.C and len(t.shape) <= 2:
        red = f"{a}.mean(0)" if len(t.shape) == 2 else a
        options.append((f"self.buf.copy_({red})", None))
    z = g.fresh("h")
    options += [
        (f"{z} = {a} * self.count", ""),
        (
            (
                f"{z} = {a} + self.buf"
                if t.shape and t.shape[-1] == g.C
                else f"{z} = {a} * self.scale"
            ),
            "",
        ),
        (f"{z} = {a} * len(self.history)", ""),
    ]
    line, attr = g.choice(options)
    g.emit(line)
    if attr:
        g.changed_attrs.add(attr)
    if attr == "":
        g.bind(z, t if "self.buf" not in line else Tensor(t.shape), g.opaque(line))
    return True


def s_graph_break(g: Gen) -> bool:
    """print, .item(), .tolist(), NumPy: code that runs eagerly."""
    picked = g.pick_tensor()
    if picked is None:
        return False
    a, t = picked
    tags = g.vars_of(lambda u: isinstance(u, Str))
    kind = g.choice(["print", "tolist", "numpy", "argmax", "print_tag", "np_scalar"])
    z = g.fresh("h")
    if kind == "tolist":
        lst = g.bind(g.fresh("lst"), PyData(), True)
        g.emit(f"{lst} = {a}.tolist()")
        g.emit(f"{z} = torch.tensor({lst})")
        g.bind(z, t, True)
    elif kind == "numpy":
        g.emit(f"{z} = torch.from_numpy(np.tanh({a}.numpy()))")
        g.bind(z, t, True)
    elif kind == "argmax":
        k = g.bind(g.fresh("k"), Int(None), True)
        g.emit(f"{k} = int({a}.argmax())")
    elif kind == "print_tag" and tags:
        g.emit(f"print({g.choice(tags)}, {a}.dtype)")
    elif kind == "np_scalar":
        g.emit(f"{z} = {a} * np.float32(0.5)")
        g.bind(z, t, True)
    else:
        g.emit(
            g.choice(
                [
                    f"print({a}.shape)",
                    f'print("step", {a}.dim(), tuple({a}.shape))',
                    f'print(f"mean {{{a}.float().mean().item():.2f}}")',
                ]
            )
        )
    return True


def s_assert(g: Gen) -> bool:
    picked = g.pick_tensor()
    if picked is None:
        return False
    a, t = picked
    options = [
        f"assert {a}.dim() == {len(t.shape)}",
        f'assert {a}.shape == {t.shape!r}, "shape"',
        f"assert isinstance({a}, torch.Tensor)",
        f"assert ({a} == {a}).all()",
        f"assert not torch.isnan({a}).any(), 'nan'",
    ]
    g.emit(g.choice(options))
    return True


def s_del(g: Gen) -> bool:
    names = [n for n in g.env if n not in g.input_names and n not in g.frozen]
    if not names or g.in_loop:
        return False
    n = g.choice(names)
    g.emit(f"del {n}")
    del g.env[n]
    return True


def s_with(g: Gen) -> bool:
    if g.depth >= 2:
        return False
    ctx = g.choice(["torch.no_grad()", "contextlib.nullcontext()"])
    fallback = "nullcontext" in ctx
    saved = g.straight
    g.straight = saved and not fallback
    before = dict(g.env)
    with g.block(f"with {ctx}:"):
        block(g, g.draw(st.integers(1, 2)))
    g.straight = saved
    if fallback:  # what the block binds comes from fallback code
        for n, v in g.env.items():
            if before.get(n) is not v:
                g.env[n] = replace(v, opaque=True)
    return True


def s_try(g: Gen) -> bool:
    picked = g.pick_tensor(lambda t: t.numel > 0)
    if picked is None or g.depth >= 2:
        return False
    a, t = picked
    z = g.fresh("h")
    raising = g.chance(4)
    with g.block("try:"):
        if raising:
            g.emit(f"{z} = {a}.view({t.numel + 1})")
        else:
            g.emit(f"{z} = {same_shape_expr(g, a, t)}")
    exc = g.choice(["RuntimeError", "Exception", "(ValueError, RuntimeError) as e"])
    with g.block(f"except {exc}:"):
        g.emit(f"{z} = {a} * 2")
    if g.chance(2):
        with g.block("finally:"):
            g.emit(f"{z} = {z} + 1")
    g.bind(z, t, True)
    return True


def block(g: Gen, count: int) -> None:
    for _ in range(count):
        if g.done:
            return
        statement(g)


def branch(g: Gen, header: str, runs: bool | None, count: int | None = None):
    """Draw a block under `header`; `runs`: whether it runs (None: unknown). Returns
    the environment after it and whether it surely returned; restores `g`."""
    env, straight, done, frozen = dict(g.env), g.straight, g.done, g.frozen
    g.straight = straight and runs is True
    with g.block(header):
        block(g, count if count is not None else g.draw(st.integers(1, 3)))
    after, returned = g.env, g.done
    g.env, g.straight, g.done, g.frozen = env, straight, done, frozen
    return after, returned


def merge(a: dict[str, Var], b: dict[str, Var], opaque: bool) -> dict[str, Var]:
    """The names bound after either of two paths, with the same type on both."""
    out = {}
    for n, v in a.items():
        if n in b and b[n].type == v.type:
            out[n] = Var(v.type, v.opaque or b[n].opaque or opaque)
    return out


def static_conditions(g: Gen) -> list[tuple[str, bool | None]]:
    out: list[tuple[str, bool | None]] = [("x.dim() == 2", True)]
    out.append((f"x.shape[0] > {g.B - 1}", True))
    out.append((f"x.shape[-1] == {g.C + 1}", False))
    out.append(("x.dtype == torch.float32", True))
    for n, v in g.env.items():
        if isinstance(v.type, Int) and v.type.value is not None and not v.opaque:
            if n in g.bools:
                out.append((n, bool(v.type.value)))
                out.append((f"not {n}", not v.type.value))
            else:
                out.append((f"{n} > 1", v.type.value > 1))
                out.append((f"{n} % 2 == 0", v.type.value % 2 == 0))
                out.append((f"isinstance({n}, int)", True))
        if isinstance(v.type, NoneValue):
            out.append((f"{n} is None", True))
        if isinstance(v.type, Tensor) and v.type.dtype == "f32" and n == "mask":
            out.append((f"{n} is not None", True))
        if isinstance(v.type, Seq):
            out.append((f"len({n}) > 1", None if v.opaque else v.type.n > 1))
    if g.module():
        out.append(("self.training", False))
        out.append(('hasattr(self, "scale")', True))
        out.append(("self.flag", None if "flag" in g.changed_attrs else True))
        out.append(("self.count == 0", None if "count" in g.changed_attrs else True))
    return out


def data_conditions(g: Gen, a: str) -> list[str]:
    return [
        f"{a}.sum() > 0",
        f"({a} > 0).any()",
        f"{a}.mean() < 0.5",
        f"not ({a} < 0).all()",
        f"{a}.max() > 1",
        f"torch.isfinite({a}).all() and x.shape[0] > 1",
        f"{a}.sum().item() > 0",
    ]


def s_if(g: Gen) -> bool:
    if g.depth >= 2:
        return False
    picked = g.pick_tensor(lambda t: t.numel > 0)
    data = picked is not None and g.chance(3)
    if data:
        cond = g.choice(data_conditions(g, picked[0]))
        g.conditional = True
        runs: bool | None = None
        in_python = ".item()" in cond or g.opaque(cond)
    else:
        cond, runs = g.choice(static_conditions(g))
        if g.chance(1) and runs is not None:  # a walrus in the condition
            k = g.fresh("k")
            cond, runs = f"({k} := x.shape[-1]) > {g.C - 1}", True
            g.bind(k, Int(g.C))
        in_python = runs is None
    then, then_returns = branch(g, f"if {cond}:", runs)
    if g.chance(4):
        other, other_returns = branch(g, "else:", None if runs is None else not runs)
    else:
        other, other_returns = dict(g.env), False
    if runs is True:
        g.env, g.done = then, then_returns
    elif runs is False:
        g.env, g.done = other, other_returns
    else:
        g.env = merge(then, other, in_python)
    return True


def s_loop(g: Gen) -> bool:
    """`for` over range, enumerate(ModuleList), tuples, lists, zip; `while` on
    Python values and on tensor data; break and continue; `for ... else`."""
    if g.depth >= 2:
        return False
    picked = g.pick_tensor(lambda t: t.numel > 0)
    if picked is None:
        return False
    a, t = picked
    seqs = g.vars_of(lambda u: isinstance(u, Seq))
    kind = g.choice(["range", "blocks", "tuple", "seq", "zip", "while", "while_data"])
    if kind == "blocks" and not (g.module() and t.shape and t.shape[-1] == g.C):
        kind = "range"
    if kind in ("seq", "zip") and not seqs:
        kind = "tuple"
    before, frozen, straight = dict(g.env), g.frozen, g.straight
    g.frozen = frozen | set(g.env)
    g.in_loop += 1
    g.straight = False
    i = g.fresh("i")
    first: list[str] = []
    if kind == "range":
        n = g.choice(["1", "2", "3"] + [k for k in ("n",) if k in g.env])
        header = f"for {i} in range({n}):"
        g.bind(i, Int(None))
    elif kind == "blocks":
        header = f"for {i}, layer in enumerate({g.use_layer('blocks')}):"
        g.bind(i, Int(None))
        first = [f"{a} = layer({a}) + {i}"]
        g.loose = True
    elif kind == "tuple":
        header = f"for {i} in (0.5, 1.0, 2.0):"
        g.bind(i, Float())
    elif kind == "seq":
        ts = g.choice(seqs)
        header = f"for {i} in {ts}:"
        g.bind(i, g.env[ts].type.item, g.env[ts].opaque)
    elif kind == "zip":
        ts = g.choice(seqs)
        e = g.fresh("e")
        header = f"for {i}, {e} in zip(range(3), {ts}):"
        g.bind(i, Int(None))
        g.bind(e, g.env[ts].type.item, g.env[ts].opaque)
    elif kind == "while":
        g.emit(f"{i} = 0")
        header = f"while {i} < {g.choice(['2', '3'])}:"
        first = [f"{i} += 1"]
        g.bind(i, Int(None))
    else:
        header = f"while {a}.abs().max() > 1.0:"
        first = [f"{a} = {a}.clamp(-1000.0, 1000.0) * 0.5"]
    protected = g.protected
    if kind == "while":
        g.protected = protected | {i}
    elif kind == "while_data":
        g.protected = protected | {a}
    with g.block(header):
        for line in first:
            g.emit(line)
        jump = g.choice(["", "", "break", "continue"])
        if jump and kind not in ("while_data",):
            cond = (
                f"{i} == 1"
                if kind in ("range", "blocks", "while", "zip")
                else f"{a}.sum() > 0"
            )
            g.conditional |= cond.endswith("> 0")
            if g.chance(4):
                g.emit(f"if {cond}:")
                g.emit(f"    {jump}")
                block(g, g.draw(st.integers(1, 2)))
            else:
                block(g, g.draw(st.integers(1, 2)))
                g.emit(f"if {cond}:")
                g.emit(f"    {jump}")
        elif kind != "while_data" or g.chance(4):
            block(g, g.draw(st.integers(1, 2)))
    if kind in ("range", "tuple") and g.chance(1):
        with g.block("else:"):
            block(g, 1)
    after = g.env
    g.env = {
        n: Var(v.type, v.opaque or after[n].opaque or (kind == "while_data" and n == a))
        for n, v in before.items()
        if n in after and after[n].type == v.type
    }
    g.in_loop -= 1
    g.frozen, g.straight, g.done, g.protected = frozen, straight, False, protected
    return True


def ret_expr(g: Gen) -> str:
    tensors = g.vars_of(lambda u: isinstance(u, Tensor))
    others = g.vars_of(lambda u: isinstance(u, (Int, Float, Str, Seq, TDict)))
    if not tensors:
        return "None"
    a = tensors[-1]
    b = g.choice(tensors)
    options = [
        a,
        f"{a}, {b}",
        f"[{a}, {b}]",
        f'{{"out": {a}, "other": {b}}}',
        "None",
    ]
    if others:
        k = g.choice(others)
        options += [f"({a}, {k})", f'{{"out": {a}, "extra": {k}}}']
    t = g.env[a].type
    if t.dtype == "f32":
        options.append(same_shape_expr(g, a, t))
    if g.module():
        options.append(f"{a}, self.count, len(self.history)")
    return g.choice(options)


def s_early_return(g: Gen) -> bool:
    if g.depth >= 2 or g.in_loop:
        return False
    picked = g.pick_tensor(lambda t: t.numel > 0)
    if picked is not None and g.chance(4):
        cond = g.choice(data_conditions(g, picked[0]))
        g.conditional = True
        runs = None
    else:
        cond, runs = g.choice(static_conditions(g))
    with g.block(f"if {cond}:"):
        g.emit(f"return {ret_expr(g)}")
    if runs is True:
        g.done = True
    return True


def s_raise(g: Gen) -> bool:
    """`raise` on purpose, under a condition on static values or on tensor data."""
    if not g.straight or g.in_loop:
        return False
    picked = g.pick_tensor(lambda t: t.numel > 0)
    kind = g.choice(["static", "static", "never", "data", "data_never"])
    error = g.choice(["ValueError", "RuntimeError", "NotImplementedError", "TypeError"])
    message = g.choice(['"unsupported configuration"', 'f"batch of {x.shape[0]}"'])
    if kind in ("static", "never"):
        cond, runs = g.choice(
            [(c, r) for c, r in static_conditions(g) if r is (kind == "static")]
            or [("x.dim() == 2", True)]
        )
        with g.block(f"if {cond}:"):
            g.emit(f"raise {error}({message})")
        if runs:
            g.plan(error, g.is_static(cond))
            g.done = True
        return True
    if picked is None:
        return False
    a = picked[0]
    cond = f"{a}.abs().sum() >= 0" if kind == "data" else f"{a}.abs().sum() < 0"
    g.conditional = True
    with g.block(f"if {cond}:"):
        g.emit(f"raise {error}({message})")
    if kind == "data":
        g.plan(error, False)
        g.done = True
    return True


def s_error(g: Gen) -> bool:
    """A statement that raises when it runs (a bug of the user's)."""
    if not g.straight or g.in_loop:
        return False
    picked = g.pick_tensor(lambda t: len(t.shape) >= 1)
    if picked is None:
        return False
    a, t = picked
    s = t.shape
    z = g.fresh("h")
    ks = [
        n
        for n in g.vars_of(lambda u: isinstance(u, Int) and u.value is not None)
        if n not in g.bools
    ]
    options: list[tuple[str, str, bool]] = [  # line, error, decided statically
        (f"{z} = {a}.view({t.numel + 1})", "RuntimeError", True),
        (f"{z} = {a} + torch.ones({s[-1] + 1})", "RuntimeError", True),
        (f"{z} = torch.cat([{a}, {a}.unsqueeze(0)])", "RuntimeError", True),
        (f"{z} = {a}[{s[0] + 3}]", "IndexError", True),
        (
            f'assert {a}.dim() == {len(s) + 1}, "expects {len(s) + 1}-d input"',
            "AssertionError",
            True,
        ),
        (f"{z} = {g.use_helper('pair')}()", "TypeError", True),
        (f"{z} = {g.use_helper('only_kw')}({a}, 2)", "TypeError", True),
        ("k_bad = [1, 2, 3][5]", "IndexError", True),
        ('k_bad = {"a": 1}["b"]', "KeyError", True),
        (f"{z} = undefined_name + 1", "NameError", True),
        (f"{z} = {a}.no_such_method()", "AttributeError", True),
        ('k_bad = int("abc")', "ValueError", True),
        (f"{z} = {a} @ torch.ones({s[-1] + 1}, 2)", "RuntimeError", True),
        (f'assert {a}.sum() > 1e9, "too small"', "AssertionError", False),
    ]
    if ks:
        k = g.choice(ks)
        options.append((f'assert {k} < 0, f"{k}={{{k}}}"', "AssertionError", True))
        options.append((f"k_bad = {g.C} // ({k} - {k})", "ZeroDivisionError", True))
    if g.module():
        if s[-1] != g.C:
            options.append((f"{z} = {g.use_layer('lin')}({a})", "RuntimeError", True))
        options.append((f"{z} = self.missing_layer({a})", "AttributeError", True))
        if "idx" in g.env:
            options.append(
                (f"{z} = {g.use_layer('emb')}(idx + 10)", "IndexError", False)
            )
    if "idx" in g.env:
        options.append((f"{z} = {a}[idx + {s[0]}]", "IndexError", False))
    line, error, static = g.choice(options)
    g.emit(line)
    g.plan(error, static and g.is_static(line))
    g.done = True
    return True


STATEMENTS = [  # (template, weight); the first is what hypothesis shrinks towards
    (s_assign, 10),
    (s_augassign, 2),
    (s_int, 2),
    (s_float, 1),
    (s_unpack, 2),
    (s_comprehension, 2),
    (s_fstring, 1),
    (s_walrus, 1),
    (s_lambda, 2),
    (s_helper, 2),
    (s_super, 1),
    (s_inplace, 3),
    (s_state, 2),
    (s_graph_break, 2),
    (s_assert, 1),
    (s_del, 1),
    (s_with, 1),
    (s_try, 1),
    (s_if, 3),
    (s_loop, 3),
    (s_early_return, 1),
    (s_raise, 1),
    (s_error, 1),
]
_TABLE = [s for s, w in STATEMENTS for _ in range(w)]


def statement(g: Gen) -> None:
    for _ in range(4):
        if _TABLE[g.draw(st.integers(0, len(_TABLE) - 1))](g):
            return
    if not s_assign(g):
        g.emit("pass")


OPTIONAL_INPUTS = [  # parameter name, kinds it may be declared as
    ("y", ("y_row", "y_full")),
    ("idx", ("idx",)),
    ("n", ("n1", "n3")),
    ("flag", ("flag_t", "flag_f")),
    ("mask", ("mask_none", "mask_t")),
    ("scale", ("scale_default",)),
]


@st.composite
def programs(draw) -> Program:
    kind = draw(st.sampled_from(["module", "module", "module", "function"]))
    B = draw(st.sampled_from([2, 3, 4]))
    C = draw(st.sampled_from([4, 6, 8]))
    inputs = [("x", "x")]
    for name, kinds in OPTIONAL_INPUTS:
        if draw(st.integers(0, 3)) == 0:
            inputs.append((name, draw(st.sampled_from(kinds))))
    g = Gen(draw, kind, B, C, inputs)
    block(g, draw(st.integers(3, 10)))
    if not g.done and draw(st.integers(0, 7)):
        g.emit(f"return {ret_expr(g)}")
    return Program(
        kind,
        B,
        C,
        tuple(inputs),
        tuple(h for h in HELPERS if h in g.helpers),
        tuple(name for name in LAYERS if name in g.layers),
        tuple(g.lines),
        g.planned,
        g.loose,
        "M" if kind == "module" else "f",
    )
