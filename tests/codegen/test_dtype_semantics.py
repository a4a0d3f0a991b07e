"""Every pointwise op over every dtype, on both backends, against eager.

A backend operator does not always mean what the torch op means: `+` on Triton's
1-bit bool wraps (torch's bool add is a logical or), signed overflow is undefined in
C++ (torch wraps), `std::floor` of an int64 goes through double (Note [Operators that
differ from torch's] in codegen/optable.py). So each row of `ir.ops.POINTWISE` is
swept, without a hand-written list, over bool, int8, int32, int64, float16, bfloat16 and
float32 (where eager accepts the op), over every pairing of values that tell the
semantics apart (0, ±1, the type's extremes, NaN, ±inf, ±0, values that round), over
mixed dtypes and Python scalars; then chains where undefined overflow or a wrapped
bool would show. Integers and bools must match exactly, floats to within an ulp of
their type (f16/bf16 are computed in f32 and rounded once). All cases are built in
one run; inputs must be unchanged after the call.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from tests.compile_helpers import Compiled, compile_source
from transpiler.ir.device_outputs import DEVICE_OUTPUTS
from transpiler.ir.ops import POINTWISE, bind_args, resolve_op

pytestmark = [  # masked-off lanes of Triton's interpreter compute log(0) and such
    pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning"),
    pytest.mark.usefixtures("gpu_bf16_rounding"),  # see tests/codegen/conftest.py
]

aten = torch.ops.aten
DTYPES = (
    torch.bool,
    torch.int8,
    torch.uint8,
    torch.int16,
    torch.int32,
    torch.int64,
    torch.float16,
    torch.bfloat16,
    torch.float32,
)
INF, NAN = math.inf, math.nan
FLOATS = (NAN, INF, -INF, 0.0, -0.0, 1.5, -2.5, 1 + 2**-10, 0.1, 3.0, -7.0, 6e4, 1e-3)
# (tensor dtype, other tensor dtype): type promotion between kinds and widths
MIXED = (
    (torch.bool, torch.int32),
    (torch.int32, torch.bool),
    (torch.int32, torch.int64),
    (torch.int8, torch.int32),
    (torch.int8, torch.float32),
    (torch.int64, torch.float32),
    (torch.bool, torch.float16),
    (torch.int32, torch.bfloat16),
    (torch.float16, torch.bfloat16),
    (torch.float16, torch.float32),
    (torch.uint8, torch.int8),  # into int16
    (torch.uint8, torch.float32),
    (torch.int16, torch.uint8),
    (torch.uint8, torch.int64),
)
# Python scalars for `op(tensor, scalar)`, of every kind, for every tensor dtype
SCALARS = (True, -2, 2.5)
# Rows covered, dtype by dtype, by another test
ELSEWHERE = {
    "aten._to_copy.default": "tests/codegen/test_casts.py",
    **dict.fromkeys(
        ("aten.arange.default", "aten.arange.start", "aten.arange.start_step"),
        "tests/codegen/test_ranges.py",
    ),
}
# Values a row leaves out: C++'s GELU gives 0 at -inf by design, where eager's
# `x * 0.5 * (1 + erf(x / sqrt(2)))` gives NaN (tests/codegen/test_gelu.py); eager's
# own CPU GELU at +inf is NaN in torch 2.11 and inf in 2.13
LEFT_OUT = {"aten.gelu.default": (-INF, INF)}
# Rows whose f16/bf16 results are compared with eager's in float32, rounded: eager's
# vectorized CPU floor division of halves is off by one where its one-element path
# is not (1.001 // 0.0010004: 999 in a vector of 169, 1000 alone); kernels compute
# halves in float32
HALVES_IN_F32 = {"aten.floor_divide.default", "aten.floor_divide.Scalar"}


def values(dtype: torch.dtype) -> list:
    if dtype == torch.bool:
        return [False, True]
    if dtype.is_floating_point:
        return list(FLOATS)
    info = torch.iinfo(dtype)
    return [0, 1, -1, 2, 3, -3, 7, -7, info.max, info.min, info.max - 1]


def tensor(vals: list, dtype: torch.dtype) -> torch.Tensor:
    source = torch.float64 if dtype.is_floating_point else None
    return torch.tensor(vals, dtype=source).to(dtype)


def pairs(a: torch.dtype, b: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """Every value of `a` against every value of `b`."""
    va, vb = values(a), values(b)
    return tensor([x for x in va for _ in vb], a), tensor(
        [y for _ in va for y in vb], b
    )


@dataclass(frozen=True)
class Case:
    name: str
    op: str  # the POINTWISE row
    expr: str
    inputs: dict[str, torch.Tensor]


def _short(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def _scalar_name(s) -> str:
    return repr(s).replace("-", "m").replace(".", "p")


def _defined(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The pairs where converting `b` to `a`'s dtype is defined: a float into an
    integer type only where finite and in range (torch leaves the rest to the
    hardware: x86 gives the smallest integer, a GPU saturates)."""
    if a.dtype.is_floating_point or a.dtype == torch.bool:
        return a, b
    if not b.dtype.is_floating_point:
        return a, b
    keep = b.double().abs() < 2.0 ** (torch.iinfo(a.dtype).bits - 1)  # not NaN
    return a[keep], b[keep]


# Rows whose operand is a constant: how a case calls them, `{s}` the fill value
FILLS = {
    "aten.full.default": "aten.full.default([3, 2], {s}, dtype=a.dtype)",
    "aten.full_like.default": "aten.full_like.default(a, {s})",
    "aten.new_full.default": "aten.new_full.default(a, [2, 3], {s})",
    "aten.scalar_tensor.default": "aten.scalar_tensor.default({s}, dtype=a.dtype) + a",
    "aten.fill.Scalar": "aten.fill.Scalar(a, {s})",
    "aten.fill.Tensor": "aten.fill.Tensor(a, torch.tensor({s}))",  # 0-d, its own dtype
}


def _row_cases(target: str) -> list[Case]:
    """Cases for one row: its operands as tensors of each dtype, mixed dtypes, and
    (for a binary op) Python scalars; a fill value of every kind into each dtype."""
    row = POINTWISE[target]
    base = target.removeprefix("aten.").replace(".", "_")
    out = []
    for dtype in DTYPES:
        left_out = LEFT_OUT.get(target, ())
        a = tensor([v for v in values(dtype) if v not in left_out], dtype)
        name = f"{base}_{_short(dtype)}"
        if target in FILLS:
            for s in (True, 3, -2.5, 0.1):
                expr = FILLS[target].format(s=repr(s))
                out.append(Case(f"{name}_{_scalar_name(s)}", target, expr, {"a": a}))
        elif row.kind == "where":
            a, b = pairs(dtype, dtype)
            c = torch.arange(a.numel()) % 3 == 0
            for s, (x, y) in enumerate(_where_operands(target)):
                expr = f"{target}(c, {x}, {y})"
                inputs = {"c": c, "a": a, "b": b}
                inputs = {k: v for k, v in inputs.items() if k in ("c", x, y)}
                out.append(Case(f"{name}_{s}", target, expr, inputs))
        elif row.operands == (0,):
            out.append(Case(name, target, f"{target}(a)", {"a": a}))
        else:
            out += _binary_cases(target, dtype, a)
    return out


def _where_operands(target: str) -> list[tuple[str, str]]:
    """The value operands of a `where` overload: tensors `a`, `b`, or Python scalars
    of every kind where its schema takes a Scalar."""
    scalar = {"aten.where.ScalarSelf": (0,), "aten.where.ScalarOther": (1,)}.get(
        target, (0, 1) if target == "aten.where.Scalar" else ()
    )
    options = [
        [repr(s) for s in SCALARS] if i in scalar else [name]
        for i, name in enumerate(("a", "b"))
    ]
    return [(x, y) for x in options[0] for y in options[1]]


def _binary_cases(target: str, dtype: torch.dtype, a: torch.Tensor) -> list[Case]:
    base = f"{target.removeprefix('aten.').replace('.', '_')}_{_short(dtype)}"
    out = []
    if not target.endswith(".Scalar"):
        for other in [dtype] + [b for x, b in MIXED if x == dtype]:
            x, y = pairs(dtype, other)
            if POINTWISE[target].kind == "cast":  # `b`'s values into `a`'s dtype
                x, y = _defined(x, y)
            name = base + ("" if other == dtype else f"_{_short(other)}")
            out.append(Case(name, target, f"{target}(a, b)", {"a": x, "b": y}))
    scalar_first = str(resolve_op(target)._schema.arguments[0].type) == "number"
    for s in SCALARS:
        expr = f"{target}({s!r}, a)" if scalar_first else f"{target}(a, {s!r})"
        out.append(Case(f"{base}_s{_scalar_name(s)}", target, expr, {"a": a}))
    return out


# Chains where an operator's semantics would show past a single op: undefined signed
# overflow folded by the C++ compiler, a bool sum reused.
CHAINS = {
    "add_overflow_compare": ("(a + 1) > a", (torch.int32, torch.int64)),
    "sub_overflow_compare": ("(a - 1) < a", (torch.int32, torch.int64)),
    "neg_overflow_compare": ("(-a) < 0", (torch.int32, torch.int64)),
    "abs_overflow_compare": ("a.abs() >= 0", (torch.int32, torch.int64)),
    "mul_overflow": ("(a * 65536) * 65536 + a", (torch.int32,)),
    "bool_sum_scaled": ("(a + a.logical_not()) * 2 + (a + a)", (torch.bool,)),
    "bool_sum_compared": ("(a + a) == a", (torch.bool,)),
    "bool_sum_to_float": ("(a + ~a).float() * 3", (torch.bool,)),
    "bool_product_sum": ("a * ~a + a", (torch.bool,)),
}


def _chain_cases() -> list[Case]:
    out = []
    for name, (expr, dtypes) in CHAINS.items():
        for dtype in dtypes:
            inputs = {"a": tensor(values(dtype), dtype)}
            out.append(Case(f"{name}_{_short(dtype)}", "chain", expr, inputs))
    return out


def _eager_accepts(case: Case) -> bool:
    """Eager runs the case, and so does its meta kernel, which tracing runs (the
    meta kernel of `bool << int` raises where eager's CPU kernel does not)."""
    for device in ("cpu", "meta"):
        inputs = {k: v.to(device) for k, v in case.inputs.items()}
        try:
            eval(case.expr, {"aten": aten, "torch": torch}, inputs)
        except (RuntimeError, TypeError, NotImplementedError):
            return False
    return True


ALL = [c for t in POINTWISE if t not in ELSEWHERE for c in _row_cases(t)]
CASES = [c for c in ALL + _chain_cases() if _eager_accepts(c)]


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Compiled]:
    lines = ["import torch", "", "aten = torch.ops.aten", ""]
    for c in CASES:
        lines += ["", f"def {c.name}({', '.join(c.inputs)}):", f"    return {c.expr}"]
    functions = {c.name: c.inputs for c in CASES}
    root = tmp_path_factory.mktemp("dtype_semantics")
    return compile_source("\n".join(lines) + "\n", functions, root)


def tolerance(dtype: torch.dtype) -> tuple[float, float]:
    """Exact for bools and integers; an ulp of the type for floats."""
    if not dtype.is_floating_point:
        return 0.0, 0.0
    return {torch.float16: (2**-10, 1e-5), torch.bfloat16: (2**-7, 1e-5)}.get(
        dtype, (1e-5, 1e-6)
    )


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.name)
def test_op_matches_eager_for_its_dtypes(
    case: Case, compiled: dict[str, Compiled]
) -> None:
    c = compiled[case.name]
    if case.op != "chain":  # computed in a kernel, not left to an extern call
        packet = case.op.split(".")[1]
        for text in (c.cpu_source, c.cuda_source):
            assert f"torch.ops.aten.{packet}." not in text, text
    want = c.eager(**case.inputs)
    if case.op in HALVES_IN_F32 and want.dtype in (torch.float16, torch.bfloat16):
        inputs = {k: v.float() for k, v in case.inputs.items()}
        want = c.eager(**inputs).to(want.dtype)
    for backend, fn in (("cpu", c.cpu), ("triton", c.cuda)):
        args = {k: v.clone() for k, v in case.inputs.items()}
        got = fn(**args)
        where = f"{case.name} ({backend}): {case.expr}"
        assert (got.dtype, got.shape) == (want.dtype, want.shape), where
        rtol, atol = tolerance(want.dtype)
        torch.testing.assert_close(
            got,
            want,
            rtol=rtol,
            atol=atol,
            equal_nan=True,
            msg=lambda m, w=where: f"{w}\n{m}",
        )
        for k, v in case.inputs.items():
            torch.testing.assert_close(args[k], v, rtol=0, atol=0, equal_nan=True)


def test_every_pointwise_row_is_swept() -> None:
    """A row added to the tables is swept here with no edit; one that no case
    reaches (eager takes it for no dtype here) would go unchecked."""
    missing = sorted(set(POINTWISE) - {c.op for c in CASES} - set(ELSEWHERE))
    assert not missing, f"rows no case reaches: {missing}"


# Normalizations whose statistics a device returns in another dtype or shape than
# the meta kernel (Note [Device outputs] in ir/device_outputs.py): their arguments
STATISTICS = {
    "aten.native_layer_norm.default": "x, [4], w[:4], b[:4], 0.1",
    "aten.native_group_norm.default": "x, w, b, 2, 6, 4, 3, 0.1",
    "aten.native_batch_norm.default": "x, w, b, rm, rv, training, 0.1, 0.1",
    "aten._native_batch_norm_legit.default": "x, w, b, rm, rv, training, 0.1, 0.1",
    "aten._native_batch_norm_legit.no_stats": "x, w, b, True, 0.1, 0.1",
    "aten._native_batch_norm_legit_no_training.default": "x, w, b, rm, rv, 0.1, 0.1",
    "aten._batch_norm_no_update.default": "x, w, b, rm, rv, 0.1, 0.1",
}


def _statistics_arguments() -> list[dict]:
    """An f16/bf16 input `x`; weights of its dtype, float32 or none (running
    statistics of the weights' dtype, or the input's); training or not."""
    out = []
    for x, params, training in itertools.product(
        (torch.bfloat16, torch.float16), ("input", torch.float32, None), (True, False)
    ):
        dtype = x if params == "input" else params
        running = dtype or x
        out.append(
            {
                "x": torch.randn(2, 6, 4).to(x),
                "w": None if dtype is None else torch.rand(6).to(dtype) + 0.5,
                "b": None if dtype is None else torch.rand(6).to(dtype),
                "rm": torch.zeros(6).to(running),
                "rv": torch.ones(6).to(running),
                "training": training,
            }
        )
    return out


def _call(op: str, args: dict, device: str) -> tuple:
    on = {
        k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in args.items()
    }
    text = STATISTICS[op]
    if on["w"] is None:  # no weights, for a layer norm too
        text = text.replace("w[:4]", "w").replace("b[:4]", "b")
    return eval(f"op({text})", {"op": resolve_op(op)}, on)


class _Bound(TorchDispatchMode):
    """Records the arguments, by name, of a call of `op` under it."""

    def __init__(self, op: str):
        super().__init__()
        self.op = op

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if str(func) == self.op:
            self.arguments = bind_args(self.op, args, tuple(kwargs.items()))
        return func(*args, **kwargs)


@pytest.mark.parametrize("device", ["cpu", "cuda"])
@pytest.mark.parametrize("op", STATISTICS)
def test_device_outputs_say_what_eager_returns(op: str, device: str) -> None:
    """`DEVICE_OUTPUTS` names each result that the device's eager returns unlike
    the meta kernel, and what it returns; the others are as the meta kernel says."""
    if device == "cuda" and not torch.cuda.is_available():
        pytest.skip("no GPU")
    rule = DEVICE_OUTPUTS[device].get(op)
    for args in _statistics_arguments():
        try:
            with _Bound(op) as bound:
                meta = _call(op, args, "meta")
        except TypeError:  # the meta kernel takes no None weights: never traced
            continue
        want = [(t.dtype, t.shape) for t in meta]
        if rule is not None:
            dtypes = {k: getattr(v, "dtype", v) for k, v in bound.arguments.items()}
            for i, r in rule.results(dtypes).items():
                want[i] = (r.dtype, (0,) if r.empty else want[i][1])
        try:
            got = [(t.dtype, t.shape) for t in _call(op, args, device)]
        except RuntimeError:  # CUDA's kernels take no mixed types: eager raises
            assert device == "cuda", f"{op}({STATISTICS[op]}) raises on {device}"
            continue
        where = [getattr(v, "dtype", v) for v in args.values()]
        assert got == want, f"{op}({STATISTICS[op]}) on {device}: {where}"


# Statistics that the code after the op reads or returns, where the CPU's differ
# from the meta kernel's: bf16 (not float32), empty (not [C]), float32 (not bf16)
READ_STATISTICS = {
    "layer_norm": "torch.native_layer_norm(x, [4], w[:4], b[:4], 1e-5)",
    "batch_norm": "torch.native_batch_norm(x, w, b, w * 0, w.abs(), True, 0.1, 1e-5)",
    "batch_norm_eval": (
        "torch.native_batch_norm(x, w, b, w * 0, w.abs(), False, 0.1, 1e-5)"
    ),
    "group_norm_mixed": (
        "torch.native_group_norm(x, w.float(), b.float(), 2, 6, 4, 3, 1e-5)"
    ),
}


@pytest.fixture(scope="module")
def read_statistics(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Compiled]:
    lines = ["import torch", ""]
    for name, call in READ_STATISTICS.items():
        lines += ["", f"def {name}(x, w, b):", f"    y, m, r = {call}"]
        lines += ["    return y, m * 2, r", ""]
    inputs = {"x": torch.empty(2, 6, 4), "w": torch.empty(6), "b": torch.empty(6)}
    inputs = {k: v.bfloat16() for k, v in inputs.items()}
    root = tmp_path_factory.mktemp("read_statistics")
    return compile_source(
        "\n".join(lines), dict.fromkeys(READ_STATISTICS, inputs), root
    )


@pytest.mark.parametrize("name", READ_STATISTICS)
def test_results_a_device_returns_unlike_the_meta_kernel(
    name: str, read_statistics: dict[str, Compiled]
) -> None:
    """The CPU variant returns, and computes on, what CPU eager returns; a CUDA
    variant what CUDA eager returns (float32 statistics of a layer norm), where
    the op runs in its kernels (Note [Device outputs] in ir/device_outputs.py)."""
    c = read_statistics[name]
    gen = torch.Generator().manual_seed(0)
    args = [torch.randn(s, generator=gen).bfloat16() for s in ((2, 6, 4), (6,), (6,))]
    want = c.eager(*args)
    variants = [("cpu", c.cpu, want)]
    if name == "layer_norm":  # on CUDA: eager's statistics in float32
        f32 = c.eager(*(a.float() for a in args))
        variants.append(("triton", c.cuda, (want[0], f32[1], f32[2])))
    for backend, fn, expected in variants:
        got = fn(*(a.clone() for a in args))
        for i, (g, e) in enumerate(zip(got, expected)):
            where = f"{name} ({backend}) result {i}"
            assert (g.dtype, g.shape) == (e.dtype, e.shape), where
            torch.testing.assert_close(g, e, rtol=2e-2, atol=2e-2, msg=where)


@pytest.fixture(scope="module")
def dot(tmp_path_factory: pytest.TempPathFactory) -> Compiled:
    source = "import torch\n\n\ndef dot(a, b):\n    return torch.linalg.vecdot(a, b)\n"
    spec = torch.empty(8, 512, dtype=torch.bfloat16)
    root = tmp_path_factory.mktemp("dot")
    return compile_source(source, {"dot": {"a": spec, "b": spec}}, root)["dot"]


def test_low_precision_reductions_accumulate_in_float32(dot: Compiled) -> None:
    """A bf16 sum of products that cancel: the kernels multiply and add in float32
    and round once, so the result is float32's, rounded to bf16 (eager rounds each
    product to bf16 first, and a bf16 accumulator would be off by far more)."""
    gen = torch.Generator().manual_seed(0)
    a, b = (torch.randn(8, 512, generator=gen).bfloat16() for _ in range(2))
    want = (a.float() * b.float()).sum(-1).bfloat16()
    for backend, fn in (("cpu", dot.cpu), ("triton", dot.cuda)):
        got = fn(a.clone(), b.clone())
        assert got.dtype == torch.bfloat16, backend
        torch.testing.assert_close(got, want, rtol=2**-8, atol=1e-3, msg=backend)
