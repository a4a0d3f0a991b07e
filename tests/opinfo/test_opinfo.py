"""A fast, fixed subset of the OpInfo sweep: no case may be wrong or an error.

One sweep of the ops below (two samples per op and dtype as they are, one per other
layout, the in-place method too), built in batches, then one test per op. A failure
lists each bad case with its call and the command that reruns it. The whole sweep:
`python -m tests.opinfo.sweep --all` (see sweep.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.opinfo.cases import case_by_id, find_op, sweep_cases
from tests.opinfo.report import describe, report
from tests.opinfo.sweep import ERROR, FALLBACK_CLASS, WRONG, Outcome, run_cases
from transpiler.options import DTYPES

pytestmark = pytest.mark.slow

# op -> dtypes; every op in float32, and an integer, bool or low-precision dtype
# where it says something the float32 case does not
SUBSET = {
    # pointwise unary
    "abs": "f32,i64",
    "neg": "f32,i64",
    "exp": "f32,bf16",
    "sigmoid": "f32,f16",
    "tanh": "f32,bf16",
    "rsqrt": "f32",
    "nn.functional.relu": "f32,i64",
    "nn.functional.gelu": "f32,bf16",
    "nn.functional.silu": "f32",
    "floor": "f32,i64",
    "round": "f32,bf16",
    "clamp": "f32,i64",
    "logical_not": "f32,bool",
    "sign": "f32,i64",
    # pointwise binary and ternary
    "add": "f32,i64,bf16,bool",
    "sub": "f32,i64",
    "mul": "f32,bf16,bool",
    "div.no_rounding_mode": "f32,i64",
    "div.floor_rounding": "f32,i64",
    "pow": "f32,i64",
    "maximum": "f32,i64",
    "eq": "f32,i64",
    "lt": "f32,bf16",
    "where": "f32,i64",
    "bitwise_and": "i64,bool",
    "remainder": "f32,i64",
    "lerp": "f32",
    "addcmul": "f32",
    "__rsub__": "f32,i64",
    # reductions and scans
    "sum": "f32,i64,bf16",
    "mean": "f32,bf16",
    "amax": "f32,i64",
    "prod": "f32,i64",
    "argmax": "f32,i64",
    "max.reduction_with_dim": "f32,i64",
    "var": "f32",
    "logsumexp": "f32",
    "cumsum": "f32,i64",
    "linalg.vector_norm": "f32,bf16",
    # views and shapes
    "view": "f32",
    "reshape": "f32",
    "permute": "f32",
    "transpose": "f32",
    "squeeze": "f32",
    "unsqueeze": "f32",
    "expand": "f32",
    "narrow": "f32",
    "select": "i64",
    "mT": "f32",
    "__getitem__": "f32",
    "split": "f32",
    "contiguous": "f32",
    "cat": "f32,i64",
    "stack": "f32",
    "tril": "f32",
    # softmax and norms
    "softmax": "f32,bf16",
    "log_softmax": "f32,f16",
    "nn.functional.layer_norm": "f32,bf16",
    "nn.functional.rms_norm": "f32",
    "nn.functional.normalize": "f32",
    "nn.functional.group_norm": "f32",
    # indexing
    "gather": "f32,i64",
    "index_select": "f32",
    "take_along_dim": "f32",
    "scatter": "f32",
    "index_add": "f32",
    "masked_fill": "f32,i64",
    "index_put": "f32",
    "index_fill": "f32",
    # matmul
    "matmul": "f32",
    "nn.functional.linear": "f32",
    "addmm": "f32",
    # casts (exact: a rounding error is a bug) and fills
    "to": "f32,bf16",
    "bfloat16": "f32",
    "half": "f32",
    "float": "i64",
    "fill": "f32",
    "zero_": "f32",
}
PER_OP = 2
PER_LAYOUT = 1


def subset_cases():
    for name, dtypes in SUBSET.items():
        dtypes = [DTYPES[d] for d in dtypes.split(",")]
        yield from sweep_cases([find_op(name)], dtypes, PER_OP, PER_LAYOUT)


@pytest.fixture(scope="module")
def outcomes(tmp_path_factory) -> dict[str, list[Outcome]]:
    root: Path = tmp_path_factory.mktemp("opinfo")
    done = run_cases(subset_cases(), root)
    print(report(done, "OpInfo subset\n"))  # shown with -s, or on failure
    by_op: dict[str, list[Outcome]] = {name: [] for name in SUBSET}
    for o in done:
        by_op[o.case.op].append(o)
    return by_op


@pytest.mark.parametrize("op", list(SUBSET))
def test_op_matches_eager(op: str, outcomes: dict[str, list[Outcome]]) -> None:
    ran = outcomes[op]
    assert ran, f"{op}: no cases"
    bad = [o for o in ran if o.cls in (WRONG, ERROR)]
    if bad:
        lines = [line for o in bad for line in describe(o)]
        message = f"{len(bad)} of {len(ran)} cases of {op}:\n" + "\n".join(lines)
        pytest.fail(message, pytrace=False)


def test_the_sweep_judges_every_case_it_can(
    outcomes: dict[str, list[Outcome]],
) -> None:
    """A case is skipped for what the case is (eager raises, not expressible in
    source), never because the sweep itself failed on it: that would hide the
    case's result, as it hid every case with a graph break once."""
    failed = [
        f"{o.case.id}: {o.detail}"
        for ran in outcomes.values()
        for o in ran
        if o.detail.startswith("sweep failed")
    ]
    assert not failed, "\n".join(failed)


def test_a_graph_break_is_judged(tmp_path: Path) -> None:
    """A case with a graph break runs its fallback code and is compared with
    eager: `nonzero` (a data-dependent shape) is fallback, not skipped."""
    outcome = judge("nonzero/f32/contiguous/s0", tmp_path)
    assert outcome.cls == FALLBACK_CLASS, describe(outcome)


def judge(case_id: str, root: Path) -> Outcome:
    (outcome,) = run_cases([case_by_id(case_id)], root)
    return outcome


def test_low_precision_is_judged_against_eager_in_float32_too(tmp_path: Path) -> None:
    """bf16 `vecdot` of values that cancel: eager rounds each product to bf16
    before summing, the kernel sums float32 products, closer to the exact dot
    product; it agrees with eager run in float32 (see `sweep.others`)."""
    outcome = judge("linalg.vecdot/bf16/contiguous/s43", tmp_path)
    assert outcome.cls not in (WRONG, ERROR), describe(outcome)
    for device, cls, _ in outcome.variants:
        assert cls not in (WRONG, ERROR), device


def test_cuda_variants_are_judged_by_what_cuda_returns(tmp_path: Path) -> None:
    """`native_layer_norm` of bf16 returns float32 statistics on CUDA and bf16
    ones on the CPU: each variant returns its device's."""
    outcome = judge("native_layer_norm/bf16/contiguous/s0", tmp_path)
    assert outcome.cls not in (WRONG, ERROR), describe(outcome)
    lowered_cpu, lowered_cuda = outcome.lowered
    inputs = dict(outcome.case.inputs)
    assert lowered_cpu.fn(**inputs)[1].dtype == torch.bfloat16
    assert lowered_cuda.fn(**inputs)[1].dtype == torch.float32
