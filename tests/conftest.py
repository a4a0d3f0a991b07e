"""Shared test setup: the repo root importable, Triton's CPU interpreter without a GPU.

Runs before any test module is imported, so before anything imports `triton`: Triton
reads `TRITON_INTERPRET` when its kernels are built, and then runs them on CPU tensors.
The C++ kernel cache is runtime_shim's default one on purpose, so reruns are fast.

`gpu_bf16_rounding` (every test): Triton's CPU interpreter converts f32 to bf16 by
cutting off the low 16 bits (`InterpreterBuilder.cast_impl` passes no rounding mode,
whatever `fp_downcast_rounding` says), where a GPU (`cvt.rn.bf16.f32`, what
`x.to(tl.bfloat16)` compiles to) rounds to nearest even, as torch does. The fixture
makes the interpreter convert as the GPU does, so bf16 results compare exactly with
eager, and a kernel that forgets to round still fails. It also keeps a scalar mask
splat to a block bool, as a GPU does (Triton 3.9's interpreter makes it int64 and
then rejects it: `devices.interpreter_splats_bools`).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:  # `import generated.<stem>`, `examples`, `tests.helpers`
    sys.path.insert(0, str(ROOT))

import pytest  # noqa: E402
import torch  # noqa: E402  (after sys.path; torch itself does not import triton)

from tests.devices import REAL_GPU, interpreter_as_gpu  # noqa: E402

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True, scope="session")
def f32_without_tf32():
    """On a real GPU, float32 means float32, as the CPU references compute it:
    cuDNN's default TF32 convolutions (and TF32 matmuls where enabled) round
    operands to 10 mantissa bits."""
    if not REAL_GPU:
        yield
        return
    cudnn, matmul = torch.backends.cudnn, torch.backends.cuda.matmul
    saved = matmul.allow_tf32
    matmul.allow_tf32 = False
    with cudnn.flags(
        enabled=cudnn.enabled,
        benchmark=cudnn.benchmark,
        deterministic=cudnn.deterministic,
        allow_tf32=False,
    ):
        yield
    matmul.allow_tf32 = saved


@pytest.fixture(autouse=True, scope="session")
def gpu_bf16_rounding():
    """In Triton's interpreter, f32 -> bf16 rounds as a GPU does (see above), and
    a scalar mask splat to a block stays bool (`devices.interpreter_splats_bools`)."""
    with interpreter_as_gpu():
        yield


# --------------------------------------------------------------------------- test tiers
# `python -m pytest -q` runs the fast tier; `--runslow` (what .ci/run runs) runs every
# test. A test is slow by its own mark (`pytestmark = pytest.mark.slow` in a module,
# `@pytest.mark.slow` on a test) or by its path here: a file whose tests carry no
# marks of this suite's, or a large parametrized test of which a sample stays fast.
SLOW_FILES = ("tests/codegen/test_op_cases.py",)
# test -> the ids of its parameters that stay in the fast tier; the others are slow
FAST_SAMPLES = {
    "tests/models/test_models.py::"
    "test_library_model_compiles_whole_and_matches_eager": {"gemma"},
    "tests/control_flow/test_call_time_semantics.py::"
    "test_errors_of_the_users_code_fail_the_run": {"normalized shape"},
    "tests/runtime_shim/test_runtime_shim_cli.py::"
    "test_prebuilt_loads_without_compiler": {"False"},
}


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--runslow",
        action="store_true",
        help="also run the tests marked slow: the whole suite, as .ci/run does",
    )


def pytest_collection_modifyitems(
    config: pytest.Config, items: list[pytest.Item]
) -> None:
    for item in items:
        if _slow_by_path(item.nodeid):
            item.add_marker(pytest.mark.slow)
    if config.getoption("--runslow"):
        return
    slow = [item for item in items if item.get_closest_marker("slow") is not None]
    if slow:
        config.hook.pytest_deselected(items=slow)
        items[:] = [item for item in items if item.get_closest_marker("slow") is None]


def _slow_by_path(nodeid: str) -> bool:
    if nodeid.partition("::")[0] in SLOW_FILES:
        return True
    test, _, params = nodeid.partition("[")
    fast = FAST_SAMPLES.get(test)
    return fast is not None and params.removesuffix("]") not in fast
