"""`transpile --autotune`, end to end without a GPU.

The whole path runs: each candidate rendered, imported and launched in Triton's
interpreter on CPU tensors (TRITON_INTERPRET=1, set by tests/conftest.py), its outputs
compared with the heuristic config's. Only the timer is fake (`Bench.timer`, the
seam): it prefers the configs a test names, so the choice is known.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import re
import sys
from pathlib import Path

import pytest
import torch

from tests.compile_helpers import import_generated, unique_name
from transpiler import autotune
from transpiler.api import build
from transpiler.autotune import PER_THREAD, Bench, Candidate, candidates
from transpiler.cli import build_options, build_parser, main
from transpiler.codegen import triton as triton_codegen
from transpiler.ir.dynamic import Dim
from transpiler.ir.program import Kernel, LaunchConfig
from transpiler.options import Options, Target, TensorSpec, Variant

pytestmark = pytest.mark.slow

SOURCE = """\
import torch


def softmax(x):
    return torch.softmax(x, dim=-1)


def scale_shift(x, y):
    return torch.relu(x * 2.0 + y)


def flags(x, n):
    return (x > 0) | (n > 3)
"""
F32 = torch.float32
SOFTMAX = {"softmax": (("x", TensorSpec(F32, (4, 1024))),)}
POINTWISE = {
    "scale_shift": (("x", TensorSpec(F32, (64, 64))), ("y", TensorSpec(F32, (64,))))
}
DYNAMIC = {"softmax": (("x", TensorSpec(F32, ("B", 16))),)}
OTHER_DTYPES = {
    "softmax": (("x", TensorSpec(torch.bfloat16, (4, 1024))),),
    "flags": (
        ("x", TensorSpec(F32, (64, 64))),
        ("n", TensorSpec(torch.int32, (64, 64))),
    ),
}
SOFTMAX_KERNEL = "fused_softmax_0"
POINTWISE_KERNEL = "fused_mul_add_relu_0"
# what codegen's heuristic gives those kernels (test_without_autotune checks)
SOFTMAX_HEURISTIC = LaunchConfig(1, 1024, 2)
POINTWISE_HEURISTIC = LaunchConfig(1024, 1, 4)


@pytest.fixture(autouse=True)
def interpreter() -> None:
    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("TRITON_INTERPRET is not 1 (set by tests/conftest.py without GPU)")


LOOP_PROBE = """\
import triton
import triton.language as tl


@triton.jit
def probe(out_ptr0, RBLOCK: tl.constexpr):
    rnumel = 4
    for roffset in range(0, rnumel, RBLOCK):
        tl.store(out_ptr0 + roffset + tl.arange(0, RBLOCK), 1.0)
"""


@pytest.fixture(scope="module")
def loops(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Skip where Triton's interpreter cannot run a looped reduction's
    `for roffset in range(0, rnumel, RBLOCK)` (Triton 3.6's cannot)."""
    path = tmp_path_factory.mktemp("probe") / "loop_probe.py"
    path.write_text(LOOP_PROBE)
    spec = importlib.util.spec_from_file_location("loop_probe", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    try:
        module.probe[(1,)](torch.zeros(4), RBLOCK=2)
    except Exception as err:
        pytest.skip(f"this Triton's interpreter cannot run loops: {err}")


class FakeTimer:
    """`fast` ms for the preferred configs, `heuristic` ms for the heuristic ones,
    `slow` for the rest; remembers what it timed."""

    def __init__(self, *preferred, fast=0.5, heuristic=1.0, slow=2.0):
        self.preferred = preferred
        self.times = {"fast": fast, "heuristic": heuristic, "slow": slow}
        self.timed: list[Candidate] = []

    def __call__(self, candidate: Candidate, launch) -> float:
        self.timed.append(candidate)
        if candidate.config in self.preferred:
            return self.times["fast"]
        if candidate.config in (SOFTMAX_HEURISTIC, POINTWISE_HEURISTIC):
            return self.times["heuristic"]
        return self.times["slow"]


def fake_bench(timer, log: list[str] | None = None) -> Bench:
    sink = log if log is not None else []
    return Bench("cpu", "Test GPU (triton 0.0)", timer=timer, log=sink.append)


class Built:
    def __init__(self, files: dict[str, str], module, stem: str):
        self.files, self.module, self.stem = files, module, stem

    @property
    def source(self):
        return self.module._source

    def launch(self, kernel: str) -> str:
        """The wrapper's launch of `kernel`, on one line."""
        text = " ".join(self.files[f"{self.stem}.py"].split())
        return re.search(rf"triton_{kernel}\[.*?num_warps=\d+", text).group(0)

    def note(self, kernel: str) -> list[str]:
        """The comment lines right above `kernel`'s @triton.jit."""
        text = self.files[f"{self.stem}_triton.py"]
        lines = text[: text.index(f"def triton_{kernel}(")].splitlines()[:-1]
        comment: list[str] = []
        while lines and lines[-1].startswith("#"):
            comment.insert(0, lines.pop())
        return comment


def transpile(root: Path, targets: dict, bench: Bench | None) -> Built:
    """Build `targets` (function -> inputs) of SOURCE for cuda; write and import."""
    stem = unique_name("src")
    (root / f"{stem}.py").write_text(SOURCE)
    variants = {fn: (Variant(inputs, "cuda"),) for fn, inputs in targets.items()}
    options = Options(
        targets=tuple(Target(f"{stem}.py::{fn}", v) for fn, v in variants.items()),
        root=root,
        autotune=bench is not None,
    )
    files = build(options, bench)
    return Built(files, import_generated(files, root, stem), stem)


def heading(timed: int, dropped: str = "") -> str:
    return f"# autotuned on Test GPU (triton 0.0), {timed} candidates timed{dropped}:"


# --------------------------------------------------------------------- candidates


def kernel(xnumel, rnumel) -> Kernel:
    return Kernel("k", xnumel, rnumel, (), (), (), ())


@pytest.mark.parametrize(
    ("xnumel", "rnumel"),
    [(1 << 26, 1), (4096, 1), (16384, 4096), (8192, 768), (32, 64), (64, 1 << 16)],
)
def test_candidates_are_few_distinct_and_start_with_the_heuristic(
    xnumel: int, rnumel: int
) -> None:
    k = kernel(xnumel, rnumel)
    configs = candidates(k)
    assert configs[0] == triton_codegen.heuristic_config(k)
    assert len(set(configs)) == len(configs) <= 24
    for c in configs[1:]:
        assert PER_THREAD[0] <= c.xblock * c.rblock / (32 * c.num_warps)
        assert c.xblock * c.rblock / (32 * c.num_warps) <= PER_THREAD[1]
        assert c.xblock <= max(16, triton_codegen.next_pow2(xnumel))


def test_row_reductions_get_persistent_and_looped_candidates() -> None:
    k = kernel(16384, 4096)
    looped = [c for c in candidates(k) if not triton_codegen.is_persistent(k, c)]
    assert {c.rblock for c in looped} == {512, 1024, 2048}
    assert {c.xblock for c in looped} == {1}
    assert any(triton_codegen.is_persistent(k, c) for c in candidates(k))
    # rows too long for registers, or of a dynamic length: looped only
    for k in (kernel(64, 1 << 16), kernel(64, Dim(16, 0, "B"))):
        assert not any(triton_codegen.is_persistent(k, c) for c in candidates(k))


def test_a_tiny_kernel_has_only_the_heuristic() -> None:
    assert candidates(kernel(8, 1)) == [LaunchConfig(16, 1, 2)]


# ------------------------------------------------------------------- end to end


def test_without_autotune(tmp_path: Path) -> None:
    built = transpile(tmp_path, {**SOFTMAX, **POINTWISE}, None)
    assert "XBLOCK=1, RBLOCK=1024, num_warps=2" in built.launch(SOFTMAX_KERNEL)
    assert "XBLOCK=1024, num_warps=4" in built.launch(POINTWISE_KERNEL)
    assert "autotune" not in built.files[f"{built.stem}_triton.py"]
    assert built.note(SOFTMAX_KERNEL) == []


def test_a_faster_config_wins_and_still_matches_eager(
    tmp_path: Path, loops: None
) -> None:
    looped, narrow = LaunchConfig(1, 512, 4), LaunchConfig(256, 1, 2)
    timer, log = FakeTimer(looped, narrow), []
    built = transpile(tmp_path, {**SOFTMAX, **POINTWISE}, fake_bench(timer, log))

    assert "XBLOCK=1, RBLOCK=512, num_warps=4" in built.launch(SOFTMAX_KERNEL)
    assert built.note(SOFTMAX_KERNEL) == [
        heading(len(candidates(kernel(4, 1024)))),
        "#   XBLOCK=1, RBLOCK=512 (looped), num_warps=4: 0.500 ms (chosen)",
        "#   heuristic XBLOCK=1, RBLOCK=1024 (persistent), num_warps=2: 1.000 ms",
    ]
    assert (
        "for roffset in range(0, rnumel, RBLOCK):"
        in built.files[f"{built.stem}_triton.py"]
    )
    assert "XBLOCK=256, num_warps=2" in built.launch(POINTWISE_KERNEL)
    assert built.note(POINTWISE_KERNEL) == [
        heading(len(candidates(kernel(4096, 1)))),
        "#   XBLOCK=256, num_warps=2: 0.500 ms (chosen)",
        "#   heuristic XBLOCK=1024, num_warps=4: 1.000 ms",
    ]
    assert [line.split(":")[1] for line in log] == [
        f" triton_{SOFTMAX_KERNEL}",
        f" triton_{POINTWISE_KERNEL}",
    ]
    # every candidate timed once, the winner and the heuristic once more
    assert (
        len(timer.timed)
        == len(candidates(kernel(4, 1024))) + len(candidates(kernel(4096, 1))) + 4
    )

    torch.manual_seed(0)
    x, a, b = torch.randn(4, 1024), torch.randn(64, 64), torch.randn(64)
    torch.testing.assert_close(built.module._cuda_0(x), built.source.softmax(x))
    torch.testing.assert_close(
        built.module._cuda_1(a, b), built.source.scale_shift(a, b)
    )


def test_bf16_int_and_bool_buffers(tmp_path: Path, loops: None) -> None:
    looped, narrow = LaunchConfig(1, 512, 4), LaunchConfig(256, 1, 2)
    built = transpile(tmp_path, OTHER_DTYPES, fake_bench(FakeTimer(looped, narrow)))
    assert "XBLOCK=1, RBLOCK=512, num_warps=4" in built.launch(SOFTMAX_KERNEL)
    # f32 and i32 in, bool out: both comparisons and their `|` in one kernel
    assert "XBLOCK=256, num_warps=2" in built.launch("fused_gt_bitwise_or_0")
    torch.manual_seed(0)
    x = torch.randn(4, 1024, dtype=torch.bfloat16)
    a, n = torch.randn(64, 64), torch.randint(0, 8, (64, 64), dtype=torch.int32)
    torch.testing.assert_close(built.module._cuda_0(x), built.source.softmax(x))
    torch.testing.assert_close(built.module._cuda_1(a, n), built.source.flags(a, n))


@pytest.mark.parametrize(
    ("fast", "heuristic"),
    [(0.92, 1.0), (0.0088, 0.010)],  # 8% faster; 12% but only 1.2 microseconds
    ids=["relative", "absolute"],
)
def test_heuristic_kept_within_the_margin(
    tmp_path: Path, fast: float, heuristic: float
) -> None:
    narrow = LaunchConfig(256, 1, 2)
    timer = FakeTimer(narrow, fast=fast, heuristic=heuristic)
    built = transpile(tmp_path, POINTWISE, fake_bench(timer))
    assert "XBLOCK=1024, num_warps=4" in built.launch(POINTWISE_KERNEL)
    assert built.note(POINTWISE_KERNEL) == [
        heading(len(candidates(kernel(4096, 1)))),
        f"#   heuristic XBLOCK=1024, num_warps=4: {heuristic:.3f} ms (kept)",
        f"#   best other XBLOCK=256, num_warps=2: {fast:.3f} ms (within the margin)",
    ]


def test_a_failing_candidate_is_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    broken = LaunchConfig(3, 1, 1)  # tl.arange needs a power of two
    listed = autotune.candidates
    monkeypatch.setattr(autotune, "candidates", lambda k: [*listed(k), broken])
    timer = FakeTimer(broken)
    built = transpile(tmp_path, POINTWISE, fake_bench(timer))
    assert "XBLOCK=1024, num_warps=4" in built.launch(POINTWISE_KERNEL)
    timed = len(listed(kernel(4096, 1)))  # all but the broken one
    assert built.note(POINTWISE_KERNEL)[0] == heading(timed, " (1 failed dropped)")
    assert broken not in [c.config for c in timer.timed]


def test_a_candidate_with_other_outputs_is_dropped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wrong = LaunchConfig(256, 1, 2)
    render = triton_codegen.kernel_module

    def sabotaged(k, config, header):  # elements past the third are never written
        text = render(k, config, header)
        if config == wrong:
            head = "xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)\n"
            assert head in text, text
            text = text.replace(
                head, f"{head}    xindex = tl.where(xindex < 3, xindex, 0)\n"
            )
        return text

    monkeypatch.setattr(triton_codegen, "kernel_module", sabotaged)
    timer = FakeTimer(wrong)
    built = transpile(tmp_path, POINTWISE, fake_bench(timer))
    assert "XBLOCK=1024, num_warps=4" in built.launch(POINTWISE_KERNEL)
    timed = len(candidates(kernel(4096, 1))) - 1
    assert built.note(POINTWISE_KERNEL)[0] == heading(timed, " (1 wrong dropped)")
    assert wrong not in [c.config for c in timer.timed]


def test_a_failing_heuristic_leaves_the_kernel_untuned(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    render = triton_codegen.kernel_module

    def sabotaged(k, config, header):
        text = render(k, config, header)
        return text.replace("tl.arange(0, XBLOCK)", "tl.arange(0, 3)")

    monkeypatch.setattr(triton_codegen, "kernel_module", sabotaged)
    log: list[str] = []
    built = transpile(tmp_path, SOFTMAX, fake_bench(FakeTimer(), log))
    assert "XBLOCK=1, RBLOCK=1024, num_warps=2" in built.launch(SOFTMAX_KERNEL)
    assert built.note(SOFTMAX_KERNEL) == []
    assert log[0].startswith(
        f"autotune: triton_{SOFTMAX_KERNEL}: heuristic config failed: "
    )


def test_dynamic_kernels_are_tuned_at_a_named_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    wide = LaunchConfig(256, 16, 4)
    listed = autotune.candidates  # only two, as 1024 rows are slow to interpret
    monkeypatch.setattr(autotune, "candidates", lambda k: [*listed(k)[:1], wide])
    built = transpile(tmp_path, DYNAMIC, fake_bench(FakeTimer(wide)))
    text = built.files[f"{built.stem}_triton.py"]
    assert "# autotuned on Test GPU (triton 0.0) at B=1024, " in text
    assert "XBLOCK=256, RBLOCK=16, num_warps=4" in built.launch("fused_softmax_1")
    assert "(B + 255) // 256" in built.launch("fused_softmax_1")
    x = torch.randn(300, 16)
    torch.testing.assert_close(built.module._cuda_1(x), built.source.softmax(x))


# -------------------------------------------------------------------------- CLI


def options_for(*argv: str) -> Options:
    return build_options(build_parser().parse_args([*argv, "--root", "/r"]))


def test_cli_flag_reaches_options_and_the_recorded_command() -> None:
    assert not options_for("f.py::g", "--example", "x=f32[2]").autotune
    one_off = options_for("f.py::g", "--example", "x=f32[2]", "--autotune")
    assert one_off.autotune
    assert one_off.command == "transpile f.py::g --example 'x=f32[2]' --autotune"


def test_cli_config_mode_records_autotune(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(
        '[tool.transpile]\n[[tool.transpile.target]]\nsource = "m.py::f"\n'
        'variants = [{ x = "f32[2]" }]\n'
    )
    args = build_parser().parse_args(["--autotune", "--root", str(tmp_path)])
    options = build_options(args)
    assert options.autotune and options.command == "transpile --autotune"


@pytest.mark.parametrize("other", ["--check", "--explain"])
def test_cli_autotune_excludes_check_and_explain(
    other: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["--autotune", other]) == 2
    assert "not allowed with argument" in capsys.readouterr().err


def run_cli_without_gpu(root: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """`transpile --autotune` on a small project: exit 2, one line, nothing written."""
    (root / "m.py").write_text("def f(x):\n    return x + 1\n")
    before = sorted(root.rglob("*"))
    argv = ["m.py::f", "--example", "x=f32[2]", "--autotune", "--root", str(root)]
    code = main(argv)
    out, err = capsys.readouterr()
    assert (code, out, err.count("\n")) == (2, "", 1), err
    assert sorted(root.rglob("*")) == before
    return err


def test_no_gpu_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert run_cli_without_gpu(tmp_path, capsys) == (
        "transpile: error: --autotune times kernels on a CUDA GPU, and torch sees "
        "none on this machine; run it on a machine with a GPU, or without --autotune\n"
    )


def test_no_triton_is_one_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    monkeypatch.setitem(sys.modules, "triton", None)  # import triton fails
    assert run_cli_without_gpu(tmp_path, capsys) == (
        "transpile: error: --autotune needs Triton to time kernels, and it is not "
        "installed (pip install triton); run without --autotune\n"
    )
