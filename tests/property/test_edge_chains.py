"""Random op chains on edge-case inputs, compiled through both backends, vs eager.

Each chain starts from a view the function itself takes of its input (transposed,
stepped, narrowed, expanded: non-contiguous and offset reads), runs pointwise ops
against operands that broadcast either way, and may end in a reduction or a softmax
along the last or the first dim.
Shapes include 0-size and size-1 dims; values include NaN, +-Inf and zeros. One
build compiles a whole batch of chains (one C++ compile); hypothesis draws the
batches (its `randoms()` strategy drives every choice), derandomized, so every run
checks the same chains.

A variant may fall back to eager (the exported function still must equal eager);
where one compiled, its CPU (C++) and CUDA (Triton interpreter) functions must give
what eager gives, NaN where eager has NaN, and leave the inputs as eager leaves them
(`helpers.check_call`).
"""

from __future__ import annotations

import importlib
import random
import sys
import tempfile
import warnings
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from tests.compile_helpers import specs, unique_name
from tests.helpers import check_call
from transpiler.api import build, write
from transpiler.options import Options, Target, Variant

pytestmark = [  # masked-off lanes of Triton's interpreter compute inf * 0 and such
    pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning"),
    pytest.mark.slow,
]

BATCH = 12  # chains per build
BUILDS = 8  # batches hypothesis draws, one build each
DIMS = (0, 1, 1, 2, 3, 5, 8)  # sizes a dim is drawn from: 0-size and size-1 often

VIEWS = {  # the view a chain starts from, by the rank of its input
    "same": ("{0}", (1, 2, 3)),
    "t": ("{0}.t()", (2,)),
    "transpose": ("{0}.transpose(0, -1)", (2, 3)),
    "permute": ("{0}.permute(2, 0, 1)", (3,)),
    "step": ("{0}[..., ::2]", (1, 2, 3)),
    "tail": ("{0}[1:]", (1, 2, 3)),
    "expand": ("{0}.expand(3, *{0}.shape[1:])", (1, 2, 3)),  # first dim is 1
}
UNARY = {
    "neg": "-{0}",
    "abs": "{0}.abs()",
    "relu": "torch.relu({0})",
    "sigmoid": "torch.sigmoid({0})",
    "tanh": "{0}.tanh()",
    "exp": "torch.exp({0})",
    "log_abs": "torch.log({0}.abs())",
    "sqrt_abs": "{0}.abs().sqrt()",
    "reciprocal": "1 / {0}",
    "clamp_min": "{0}.clamp_min(-0.5)",
    "clamp": "{0}.clamp(-1, 1)",
    "sin": "torch.sin({0})",
    "floor": "{0}.floor()",
    "times_zero": "{0} * 0",
    "square": "{0} * {0}",
    "nan_to_zero": "torch.where(torch.isnan({0}), 0.0, {0})",
    "window_max": (  # a max pool of what came before: Note [Windows of computed values]
        "torch.nn.functional.max_pool1d({0}.reshape(-1, 1, {0}.shape[-1]), 3, 1, 1)"
        ".reshape({0}.shape)"
    ),
}
BINARY = {
    "add": "{0} + {1}",
    "sub": "{0} - {1}",
    "mul": "{0} * {1}",
    "div": "{0} / {1}",
    "maximum": "torch.maximum({0}, {1})",
    "minimum": "torch.minimum({0}, {1})",
    "where": "torch.where({0} > {1}, {0}, {1})",
}
REDUCE = {
    "sum": "{0}.sum(-1, keepdim=True)",
    "mean": "{0}.mean(-1, keepdim=True)",
    "amax": "{0}.amax(-1, keepdim=True)",
    "amin": "{0}.amin(-1, keepdim=True)",
    "sum_flat": "{0}.sum(-1)",
    # along the first dim, over a view: decompositions copy it to contiguous
    "sum_first": "{0}.sum(0, keepdim=True)",
    "softmax_first": "torch.softmax({0}, 0)",
    "log_softmax_last": "torch.log_softmax({0}, -1)",
}
AFTER_REDUCE = {"sub": "{0} - {1}", "mul": "{0} * {1}", None: "{1}"}


@dataclass(frozen=True)
class Chain:
    name: str
    shape: tuple[int, ...]  # of x, before the view
    view: str
    operands: tuple[tuple[int, ...], ...]  # broadcast against the view of x
    steps: tuple[tuple[str, int], ...]  # (op, operand index; -1 for unary ops)
    reduce: str | None
    after: str | None

    def source(self) -> str:
        params = ["x", *(f"y{i}" for i in range(len(self.operands)))]
        lines = [f"def {self.name}({', '.join(params)}):"]
        lines.append(f"    t = {VIEWS[self.view][0].format('x')}")
        for op, i in self.steps:
            text = UNARY[op].format("t") if i < 0 else BINARY[op].format("t", f"y{i}")
            lines.append(f"    t = {text}")
        if self.reduce is not None:
            lines.append(f"    r = {REDUCE[self.reduce].format('t')}")
            lines.append(f"    return {AFTER_REDUCE[self.after].format('t', 'r')}")
        else:
            lines.append("    return t")
        return "\n".join(lines) + "\n"


def random_shape(rng: random.Random, rank: int) -> tuple[int, ...]:
    return tuple(rng.choice(DIMS) for _ in range(rank))


def operand_shape(rng: random.Random, shape: tuple[int, ...]) -> tuple[int, ...]:
    """A shape that broadcasts with `shape`: dims kept, set to 1, or (where `shape`
    has 1) grown; some leading dims dropped."""
    dims = []
    for d in shape:
        choice = rng.random()
        dims.append(1 if choice < 0.3 else rng.choice((2, 4)) if d == 1 else d)
    return tuple(dims[rng.randrange(len(dims) + 1) if rng.random() < 0.3 else 0 :])


def random_chain(rng: random.Random, name: str) -> Chain:
    rank = rng.choice((1, 2, 2, 3))
    view = rng.choice([v for v, (_, ranks) in VIEWS.items() if rank in ranks])
    shape = random_shape(rng, rank)
    if view == "expand":
        shape = (1, *shape[1:])
    viewed = eval(VIEWS[view][0].format("x"), {"x": torch.empty(shape)}).shape
    operands = tuple(operand_shape(rng, tuple(viewed)) for _ in range(rng.randrange(3)))
    steps = []
    for _ in range(rng.randint(1, 5)):
        if operands and rng.random() < 0.5:
            steps.append((rng.choice(sorted(BINARY)), rng.randrange(len(operands))))
        else:
            steps.append((rng.choice(sorted(UNARY)), -1))
    reduce = rng.choice([None, None, *sorted(REDUCE)])
    after = (
        rng.choice([None, "sub", "mul"]) if reduce and reduce != "sum_flat" else None
    )
    return Chain(name, shape, view, operands, tuple(steps), reduce, after)


def edge_values(rng: random.Random, shape: tuple[int, ...]) -> torch.Tensor:
    """Random values, some of them NaN, +-Inf or 0 (for most inputs)."""
    gen = torch.Generator().manual_seed(rng.randrange(2**31))
    t = 2 * torch.randn(shape, generator=gen)
    if rng.random() < 0.8:
        pick = torch.rand(shape, generator=gen)
        for i, special in enumerate((float("nan"), float("inf"), float("-inf"), 0.0)):
            t[(pick >= 0.06 * i) & (pick < 0.06 * (i + 1))] = special
    return torch.empty(shape).copy_(t)  # `2 * randn` may stride 0-size dims oddly


def draw_batch(rng: random.Random) -> list[tuple[Chain, dict[str, torch.Tensor]]]:
    """`BATCH` chains that eager can run, with their inputs."""
    batch = []
    while len(batch) < BATCH:
        chain = random_chain(rng, f"chain_{len(batch)}")
        inputs = {"x": edge_values(rng, chain.shape)}
        for i, shape in enumerate(chain.operands):
            inputs[f"y{i}"] = edge_values(rng, shape)
        namespace: dict = {"torch": torch}
        exec(chain.source(), namespace)
        try:
            namespace[chain.name](**inputs)
        except (RuntimeError, IndexError):  # amax of a 0-size dim, shapes not matching
            continue
        batch.append((chain, inputs))
    return batch


def build_batch(source: str, names: list[str], inputs: list[dict], root: Path):
    """Like `compile_source`, but a variant may fall back (its function is missing).
    Returns the imported generated module."""
    stem, package = unique_name("edge"), unique_name("gen")
    (root / f"{stem}.py").write_text(source)
    targets = tuple(
        Target(
            f"{stem}.py::{name}", (Variant(specs(i), "cpu"), Variant(specs(i), "cuda"))
        )
        for name, i in zip(names, inputs)
    )
    saved_path = list(sys.path)
    try:
        write(build(Options(targets=targets, root=root)), root / package)
        sys.path.insert(0, str(root))
        importlib.invalidate_caches()
        return importlib.import_module(f"{package}.{stem}")
    finally:
        sys.path[:] = saved_path


@settings(max_examples=BUILDS, derandomize=True, deadline=None, database=None)
@given(rng=st.randoms(use_true_random=False))
def test_edge_chains_match_eager(rng: random.Random) -> None:
    batch = draw_batch(rng)
    source = "import torch\n\n\n" + "\n\n".join(c.source() for c, _ in batch)
    names = [c.name for c, _ in batch]
    with tempfile.TemporaryDirectory() as root:
        module = build_batch(source, names, [i for _, i in batch], Path(root))
        check_batch(module, batch)


def check_batch(module, batch) -> None:
    failures, compiled = [], 0
    for i, (chain, inputs) in enumerate(batch):
        eager = getattr(module._source, chain.name)
        backends = {"exported": module.__dict__[chain.name]}
        for device, label in (("cpu", "cpu"), ("cuda", "triton")):
            fn = module.__dict__.get(f"_{device}_{i}")
            if fn is not None:
                backends[label] = fn
        compiled += len(backends) > 1
        for label, fn in backends.items():
            try:
                with warnings.catch_warnings():
                    if len(backends) > 1:  # compiled: its guards must hold
                        warnings.filterwarnings("error", ".*running the source")
                    check_call(fn, eager, inputs, where=label)  # inputs too
            except Exception as e:  # report every chain of the batch at once
                failures.append(f"{label} differs for\n{chain.source()}{e}")
    assert not failures, "\n\n".join(failures)
    assert compiled >= BATCH // 2, f"only {compiled} of {BATCH} chains compiled"


def test_broadcast_maximum_triton(tmp_path: Path) -> None:
    """The smallest chain the property test found failing."""
    source = "import torch\n\n\ndef f(x, y):\n    return torch.maximum(x, y)\n"
    x, y = torch.tensor([float("nan")]), torch.tensor([1.0, -2.0])
    module = build_batch(source, ["f"], [{"x": x, "y": y}], tmp_path)
    check_call(module._cuda_0, module._source.f, {"x": x, "y": y}, where="triton")
