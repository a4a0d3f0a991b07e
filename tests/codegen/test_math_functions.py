"""The C++ helpers `log_f32`, `log1p_f32`, `expm1_f32`, `sin_f32` and `cos_f32`
(runtime_shim/kernels.h) in generated kernels, and `sin_near`, `cos_near` that run
first where those two do (Note [Sines near zero] in transpiler/codegen/cpp.py):
within 1.6 ulp of a float64 reference
on dense grids and on floats of every exponent, torch's values at zeros, infinities,
NaN and the ends of each domain, and loops of each that GCC vectorizes with the
flags runtime_shim compiles with (the libm calls they replace keep a loop scalar)."""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

from tests.compile_helpers import Compiled, compile_source, vectorized_lines

FUNCTIONS = ("log", "log1p", "expm1", "sin", "cos")
SOURCE = "import torch\n" + "".join(
    f"\n\ndef {name}{suffix}(x):\n    return torch.{name}(x)\n"
    for name in FUNCTIONS
    for suffix in ("", "_special")
)
INF, NAN = math.inf, math.nan
N = 1_000_001


def _every_exponent() -> torch.Tensor:
    """Floats of random bits: every sign, exponent (subnormals, inf, NaN), mantissa."""
    g = torch.Generator().manual_seed(0)
    bits = torch.randint(-(2**31), 2**31, (N,), generator=g, dtype=torch.int64)
    return bits.to(torch.int32).view(torch.float32)


def _near_multiples() -> torch.Tensor:
    """The floats next to multiples of pi / 2 below 2^17, where |x| - k pi / 2
    cancels most: the worst case of a reduction by pi / 2."""
    k = torch.arange(1, 83_000, dtype=torch.float64) * (math.pi / 2)
    x = k.float()
    x = torch.cat([x, torch.nextafter(x, x + 1), torch.nextafter(x, x - 1), -x])
    return torch.cat([x, torch.linspace(-131071, 131071, N - len(x))])  # N in all


GRIDS = {
    "log": [torch.linspace(1e-6, 100, N), _every_exponent().abs()],
    "log1p": [
        torch.linspace(-0.999, 100, N),
        torch.linspace(-1e-3, 1e-3, N),
        _every_exponent(),
    ],
    "expm1": [torch.linspace(-20, 20, N), torch.linspace(-1, 1, N), _every_exponent()],
    "sin": [
        torch.linspace(-100, 100, N),
        torch.linspace(-131071, 131071, N),  # within sin_near's range alone
        _near_multiples(),
        torch.linspace(
            -1e6, 1e6, N
        ),  # beyond it too: the kernel runs again  # positions times frequencies
        _every_exponent(),
    ],
    "cos": [
        torch.linspace(-100, 100, N),
        torch.linspace(-131071, 131071, N),  # within sin_near's range alone
        _near_multiples(),
        torch.linspace(-1e6, 1e6, N),  # beyond it too: the kernel runs again
        _every_exponent(),
    ],
}
SPECIAL = torch.tensor(
    [0.0, -0.0, INF, -INF, NAN, 1e-40, -1e-40, 3.4e38, -3.4e38, -1.0, -2.0, 8388608.0]
)


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Compiled]:
    functions = {name: {"x": torch.linspace(-1, 1, N)} for name in FUNCTIONS}
    functions |= {f"{name}_special": {"x": SPECIAL} for name in FUNCTIONS}
    return compile_source(SOURCE, functions, tmp_path_factory.mktemp("math"))


def _ulps(got: torch.Tensor, want: torch.Tensor) -> torch.Tensor:
    """|got - want| in ulps of want rounded to float, where want is finite in float."""
    rounded = want.float()
    ulp = torch.nextafter(rounded.abs(), torch.tensor(INF)) - rounded.abs()
    error = (got.double() - want).abs() / ulp.double()
    return torch.where(rounded.isfinite(), error, torch.zeros_like(error))


@pytest.mark.parametrize("name", FUNCTIONS)
def test_kernel_calls_the_helper(compiled: dict[str, Compiled], name: str) -> None:
    kernels = compiled[name].cpp_text.split('extern "C"', 1)[1]
    assert f"{name}_f32(" in kernels and "std::" not in kernels, kernels
    if name in ("sin", "cos"):  # first near zero, then anywhere if need be
        kernel = next(
            text
            for text in compiled[name].cpp_text.split('extern "C"')
            if f"{name}_near(" in text
        )
        near = kernel.index(f"{name}_near(")
        assert "reduction(|:far)" in kernel[:near]
        assert near < kernel.index("if (!far)") < kernel.index(f"{name}_f32(")
    assert "torch.ops" not in compiled[name].cpu_source


@pytest.mark.parametrize("name", FUNCTIONS)
def test_within_ulps_of_float64(compiled: dict[str, Compiled], name: str) -> None:
    for x in GRIDS[name]:
        got = compiled[name].cpu(x)
        want = getattr(torch, name)(x.double())
        error = _ulps(got, want)
        worst = int(error.argmax())
        assert error[worst] < 1.6, (x[worst].item(), got[worst].item(), want[worst])
        # where float64's result is not finite in float, the same inf or NaN
        outside = ~want.float().isfinite()
        assert torch.equal(got[outside].isnan(), want[outside].isnan())
        same = got[outside] == want[outside].float()
        assert bool((same | got[outside].isnan()).all())


@pytest.mark.parametrize("name", FUNCTIONS)
def test_special_values(compiled: dict[str, Compiled], name: str) -> None:
    got = compiled[f"{name}_special"].cpu(SPECIAL)
    want = getattr(torch, name)(SPECIAL.double())
    assert torch.equal(got.isnan(), want.isnan()), (got, want)
    finite = ~want.isnan()
    assert bool((_ulps(got, want)[finite] < 1.6).all()), (got, want)
    exact = got[finite] == want[finite].float()
    # zeros and infinities exactly, the sign of a zero included
    ends = want[finite].isinf() | (want[finite] == 0)
    assert bool(exact[ends].all()), (got, want)
    signs = torch.signbit(got[finite][ends]) == torch.signbit(want[finite][ends])
    assert bool(signs.all()), (got, want)


# loop bodies of `y[i]` from `v = x[i]`: each helper, and compositions as models
# write them, which GCC once failed to vectorize where each alone did (a select of
# booleans of two widths after inlining)
LOOPS = {
    **{name: f"{name}_f32(v)" for name in ("exp", "tanh", "sigmoid", "erf", "gelu")},
    **{name: f"{name}_f32(v)" for name in FUNCTIONS},
    **{f"{name}_near": f"{name}_near(v)" for name in ("sin", "cos")},
    "softplus": "v > 20.0f ? v : log1p_f32(exp_f32(v))",
    "bce_with_logits": "std::min(v, 0.0f) - log1p_f32(exp_f32(-std::abs(v)))",
    "log_of_sum": "log_f32(exp_f32(v) + 1.0f)",
    "elu": "v > 0.0f ? v : expm1_f32(v)",
    "sinusoid": "sin_f32(v * exp_f32(-v)) + cos_f32(v)",
    "mish": "v * tanh_f32(log1p_f32(exp_f32(v)))",
}


def test_loops_vectorize(tmp_path: Path) -> None:
    """Each of `LOOPS` in an `omp simd` loop, compiled as runtime_shim compiles
    kernels: GCC reports each loop vectorized."""
    loops = "".join(
        f'extern "C" void loop_{name}(const float* __restrict__ x, '
        "float* __restrict__ y, int64_t n) {\n"
        "    #pragma omp simd\n"
        f"    for (int64_t i = 0; i < n; ++i) {{ float v = x[i]; y[i] = {body}; }}\n"
        "}\n"
        for name, body in LOOPS.items()
    )
    found = vectorized_lines('#include "runtime_shim/kernels.h"\n' + loops, tmp_path)
    lines = ["#include", *loops.splitlines()]  # GCC numbers lines from 1
    # the loop's line is the third of its function's
    vectorized = {re.search(r"void loop_(\w+)\(", lines[n - 3])[1] for n in found}
    assert vectorized == set(LOOPS)
