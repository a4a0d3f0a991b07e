"""Bounds of a kernel's values computed from positions (ir/value_ranges.py).

A fuzzer builds kernels of random position arithmetic: coordinates of the loop
index (`(x // d) % m * s + o`), integer and float ops with constants and with
each other, clamps, conversions either way. Torch computes every statement's
values over the whole loop, as the kernel would, and each statement the
analysis gives bounds must lie within them. A few hand-made kernels check that
bounds are found where the C++ code needs them (a bilinear source pixel) and not
where a value can leave int32 or reads memory.
"""

from __future__ import annotations

import random

import pytest
import torch

from transpiler.ir.program import Const, Index, Kernel, Stmt, Term
from transpiler.ir.value_ranges import kernel_bounds

I64, F32 = torch.int64, torch.float32
INT_OPS = ("add", "sub", "mul", "maximum", "minimum", "floor_divide", "remainder")
FLOAT_OPS = ("add", "sub", "mul", "maximum", "minimum", "truediv")
GEN = torch.Generator().manual_seed(0)
UNARY = {I64: ("neg", "abs", "relu"), F32: ("neg", "abs", "relu", "floor", "trunc")}


def evaluate(k: Kernel, body: list[Stmt]) -> dict[str, torch.Tensor]:
    """Every statement's values at every position of the loop, as torch computes
    them (int64 wraps around; a float converted to int64 is truncated)."""
    x = torch.arange(k.xnumel)
    values: dict[str, torch.Tensor] = {}

    def arg(a):
        if isinstance(a, Const):
            return torch.tensor(a.value, dtype=a.dtype)
        return values[a]

    for s in body:
        a = [arg(v) for v in s.args if s.op not in ("load", "index")]
        if s.op == "index":
            index = s.args[0]
            v = torch.full_like(x, index.offset)
            for t in index.terms:
                v = v + t.stride * ((x // t.div) % t.mod)
        elif s.op == "load":
            v = torch.randint(-(2**40), 2**40, x.shape, generator=GEN)
        elif s.op == "cast":
            v = a[0].to(s.dtype)
        elif s.op == "where":
            v = torch.where(a[0], a[1], a[2])
        elif s.op == "lt":
            v = a[0] < a[1]
        elif s.op == "relu":
            v = torch.relu(a[0])
        elif s.op == "truediv":
            v = a[0] / a[1]
        else:
            v = getattr(torch, s.op)(*a)
        values[s.name] = v.to(s.dtype).expand(x.shape)
    return values


def random_body(rng: random.Random, n: int) -> list[Stmt]:
    body: list[Stmt] = []
    names: dict[torch.dtype, list[str]] = {I64: [], F32: [], torch.bool: []}

    def add(op, args, dtype):
        s = Stmt(f"tmp{len(body)}", op, tuple(args), dtype, "x")
        body.append(s)
        names[dtype].append(s.name)

    for _ in range(rng.randint(1, 3)):
        terms = tuple(
            Term(
                "x",
                rng.choice((1, 2, 3, 7, 64)),
                rng.choice((2, 5, 64, 10**6)),
                rng.choice((1, -1, 3, 1024, 2**20)),
            )
            for _ in range(rng.randint(1, 2))
        )
        add("index", (Index(rng.randint(-100, 100), terms),), I64)
    if rng.random() < 0.3:  # memory: no bounds, nor anything it reaches
        add("load", ("in_ptr", Index(0, (Term("x", 1, 10**9, 1),))), I64)
    for _ in range(n):
        dtype = rng.choice((I64, F32))
        if not names[dtype] or rng.random() < 0.25:  # a conversion
            other = F32 if dtype == I64 else I64
            if names[other]:
                add("cast", (rng.choice(names[other]),), dtype)
            continue
        a = rng.choice(names[dtype])
        kind = rng.random()
        if kind < 0.2:
            add(rng.choice(UNARY[dtype]), (a,), dtype)
        elif kind < 0.3:
            cond = f"tmp{len(body)}"
            add("lt", (a, rng.choice(names[dtype])), torch.bool)
            add("where", (cond, a, rng.choice(names[dtype])), dtype)
        else:
            op = rng.choice(INT_OPS if dtype == I64 else FLOAT_OPS)
            if op in ("floor_divide", "remainder", "truediv") or rng.random() < 0.5:
                value = rng.choice((1, 2, 3, 31, 1000, 2**33))
                b = Const(value if dtype == I64 else value + 0.5, dtype)
            else:
                b = rng.choice(names[dtype])
            add(op, (a, b), dtype)
    return body


@pytest.mark.parametrize("seed", range(300))
def test_values_lie_within_their_bounds(seed: int) -> None:
    rng = random.Random(seed)
    xnumel = rng.choice((1, 7, 64, 1000, 4096))
    body = random_body(rng, rng.randint(3, 12))
    k = Kernel("k", xnumel, 1, (), (), tuple(body), ())
    bounds = kernel_bounds(k)
    values = evaluate(k, body)
    for name, (lo, hi) in bounds.items():
        v = values[name]
        if v.dtype == torch.bool:
            v = v.long()
        assert lo <= v.min().item() and v.max().item() <= hi, (
            name,
            (lo, hi),
            (v.min().item(), v.max().item()),
            body,
        )


def bilinear_body() -> list[Stmt]:
    """`F.interpolate(scale_factor=2, mode="bilinear")`'s source column of a
    64-wide output: `(x + 0.5) * 0.5 - 0.5`, at least 0, truncated, and its
    right neighbour clamped to 31."""
    at = Index(0, (Term("x", 1, 64, 1),))
    return [
        Stmt("c", "index", (at,), I64, "x"),
        Stmt("f", "cast", ("c",), F32, "x"),
        Stmt("g", "add", ("f", Const(0.5, F32)), F32, "x"),
        Stmt("h", "mul", ("g", Const(0.5, F32)), F32, "x"),
        Stmt("i", "sub", ("h", Const(0.5, F32)), F32, "x"),
        Stmt("j", "maximum", ("i", Const(0.0, F32)), F32, "x"),
        Stmt("p", "cast", ("j",), I64, "x"),
        Stmt("q", "add", ("p", Const(1, I64)), I64, "x"),
        Stmt("r", "minimum", ("q", Const(31, I64)), I64, "x"),
        Stmt("big", "mul", ("c", Const(2**26, I64)), I64, "x"),
        Stmt("m", "load", ("in_ptr", at), I64, "x"),
        Stmt("n", "add", ("m", Const(1, I64)), I64, "x"),
    ]


def test_bounds_of_a_bilinear_source_pixel() -> None:
    body = bilinear_body()
    k = Kernel("k", 4096, 1, (), (), tuple(body), ())
    bounds = kernel_bounds(k)
    assert bounds["c"] == (0, 63)
    assert bounds["p"] == (0, 31)  # 31.25 at most, truncated
    assert bounds["r"] == (1, 31)
    assert bounds["big"] == (0, 63 * 2**26)  # past int32: the C++ keeps int64
    assert "m" not in bounds and "n" not in bounds  # read from memory
