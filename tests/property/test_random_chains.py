"""Random pointwise chains, with a reduction and a broadcast now and then (its
result read back kept, through a view, or from other rows), compiled
through both backends (C++, and Triton's interpreter) and compared with eager:
outputs, and inputs after the call (`Compiled.check`).

Each example is one build and one C++ compile, so examples are few; the search is
derandomized so CI sees the same chains every run.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.compile_helpers import compile_function

pytestmark = [  # masked-off lanes of Triton's interpreter compute inf * 0 and such
    pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning"),
    pytest.mark.slow,
]

UNARY = {  # all defined and finite-ish on any finite input
    "neg": "-{0}",
    "abs": "{0}.abs()",
    "relu": "torch.relu({0})",
    "sigmoid": "torch.sigmoid({0})",
    "tanh": "{0}.tanh()",
    "sin": "torch.sin({0})",
    "cos": "{0}.cos()",
    "erf": "torch.erf({0})",
    "gelu": "torch.nn.functional.gelu({0})",
    "exp_tanh": "torch.exp({0}.tanh())",
    "log1p_abs": "torch.log({0}.abs() + 1)",
    "sqrt_abs": "({0}.abs() + 0.5).sqrt()",
    "rsqrt_abs": "torch.rsqrt({0}.abs() + 0.5)",
    "scale": "{0} * 0.5",
    "shift": "{0} - 1.25",
    "clamp": "{0}.clamp_min(-0.5)",
    "window_max": (  # a max pool of what came before: Note [Windows of computed values]
        "torch.nn.functional.max_pool1d({0}.reshape(-1, 1, {0}.shape[-1]), 3, 1, 1)"
        ".reshape({0}.shape)"
    ),
}
BINARY = {
    "add": "{0} + {1}",
    "sub": "{0} - {1}",
    "rsub": "{1} - {0}",
    "mul": "{0} * {1}",
    "div": "{0} / ({1}.abs() + 1)",
    "maximum": "torch.maximum({0}, {1})",
    "minimum": "torch.minimum({0}, {1})",
    "where": "torch.where({0} > {1}, {0}, {1} * 2)",
}
REDUCE = {
    "sum": "{0}.sum(-1, keepdim=True)",
    "amax": "{0}.amax(-1, keepdim=True)",
    "mean": "{0}.mean(-1, keepdim=True)",
    "amax_unsqueezed": "{0}.amax(-1).unsqueeze(-1)",  # kept through a view
    "sum_rows_reversed": "torch.flip({0}.sum(-1, keepdim=True), [0])",  # moved
    "column_sum": "{0}.sum(0, keepdim=True)",
}
AFTER_REDUCE = {"sub": "{0} - {1}", "mul": "{0} * {1}", "div": "{0} / ({1}.abs() + 1)"}


@dataclass(frozen=True)
class Chain:
    shape: tuple[int, ...]
    operands: tuple[tuple[int, ...], ...]  # shapes broadcasting to `shape`
    steps: tuple[tuple[str, int], ...]  # (op, operand index; -1 for unary ops)
    reduce: str | None
    after: str | None  # how the reduced row combines with the chain; None: return it

    def source(self) -> str:
        params = ["x", *(f"y{i}" for i in range(len(self.operands)))]
        lines = ["import torch", "", "", f"def f({', '.join(params)}):", "    t = x"]
        for op, i in self.steps:
            if i < 0:
                lines.append(f"    t = {UNARY[op].format('t')}")
            else:
                lines.append(f"    t = {BINARY[op].format('t', f'y{i}')}")
        if self.reduce is not None:
            lines.append(f"    r = {REDUCE[self.reduce].format('t')}")
            if self.after is None:
                lines.append("    return r")
            else:
                lines.append(f"    return {AFTER_REDUCE[self.after].format('t', 'r')}")
        else:
            lines.append("    return t")
        return "\n".join(lines) + "\n"


def broadcastable(shape: tuple[int, ...]) -> st.SearchStrategy[tuple[int, ...]]:
    """A shape broadcasting to `shape`: some dims 1, some leading dims dropped."""
    return st.tuples(
        st.integers(0, len(shape) - 1),
        st.lists(st.booleans(), min_size=len(shape), max_size=len(shape)),
    ).map(lambda p: tuple(1 if one else d for d, one in zip(shape, p[1]))[p[0] :])


@st.composite
def chains(draw) -> Chain:
    shape = tuple(draw(st.lists(st.integers(1, 9), min_size=1, max_size=3)))
    operands = tuple(draw(st.lists(broadcastable(shape), min_size=0, max_size=3)))
    ops = st.sampled_from(sorted(UNARY)).map(lambda op: (op, -1))
    if operands:
        ops = ops | st.tuples(
            st.sampled_from(sorted(BINARY)), st.integers(0, len(operands) - 1)
        )
    steps = tuple(draw(st.lists(ops, min_size=1, max_size=6)))
    reduce = draw(st.none() | st.sampled_from(sorted(REDUCE)))
    after = None
    if reduce is not None:
        after = draw(st.none() | st.sampled_from(sorted(AFTER_REDUCE)))
    return Chain(shape, operands, steps, reduce, after)


@settings(
    max_examples=30,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(chain=chains(), seed=st.integers(0, 2**16))
def test_random_chain_matches_eager(
    chain: Chain, seed: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    gen = torch.Generator().manual_seed(seed)
    inputs = {"x": 2 * torch.randn(chain.shape, generator=gen)}
    for i, shape in enumerate(chain.operands):
        inputs[f"y{i}"] = 2 * torch.randn(shape, generator=gen)
    source = chain.source()
    compiled = compile_function(source, "f", inputs, tmp_path_factory.mktemp("chain"))
    try:  # both backends: outputs, and inputs after the call
        compiled.check(inputs)
    except AssertionError as e:
        raise AssertionError(f"{e}\nfor\n{source}") from e
