"""Speed of real-size library models: eager vs torch.compile vs generated.

    python benchmarks/models_speed.py [--models gpt2,bert,vit,resnet50,llama,t5]
        [--batch N] [--seq N] [--device cpu|cuda] [--dtype f32|bf16|f16]
        [--threads N] [--rounds N] [--reps N] [--warmup N] [--no-compile] [--profile]
        [--keep DIR] [--json FILE]

Each model is a Hugging Face transformers or timm class at a realistic size, with
random weights built from a config (no hub access): GPT-2 small, BERT-base,
ViT-B/16 at 224x224, ResNet-50 (timm), a LLaMA-shaped stack (hidden 2048, 16 heads,
4 kv heads, intermediate 5632, `LLAMA_LAYERS` layers) and the T5-base encoder. For
each one it

1. transpiles the library class with the `transpile` command line in a fresh
   process (`transpile pkg.mod::Class --factory benchmarks/models_speed.py::fn
   --example ... --device DEVICE -o <temp dir>`), timing it;
2. imports the generated module, gives a copy of the eager model the generated
   class, and checks its output against eager's (f32: rtol 1e-3, atol 1e-4;
   f16/bf16: against eager run in f32, within twice eager's own error there), and
   that a compiled variant ran rather than the guards sending the call to the
   source;
3. compiles the eager model with `torch.compile` (default mode), timing its first
   call on its own (a cold compile: a fresh TORCHINDUCTOR_CACHE_DIR, unless one is
   set), and checks it the same way;
4. times eager, compiled and generated under `torch.no_grad()` in eval mode, with
   the same `torch.set_num_threads` (and OMP_NUM_THREADS) for all: warmup, then
   `--rounds` rounds, each timing all of them once in a rotating order
   (`benchmarks.common.interleaved`); each figure is the median over the rounds.
   Another busy process on the machine skews CPU timings far more than it slows
   them (OpenMP threads wait on a descheduled one): measure on an idle machine.

It prints one markdown table: per model the input shape, transpile seconds,
torch.compile's compile seconds, eager / compiled / generated milliseconds per call,
the speedups of generated over eager and over compiled (> 1: generated is faster),
the generated output's max abs error against eager (f16/bf16: eager in f32), and
the generated variant's C++/Triton kernels and extern calls (from its module
docstring); then a geomean row over the models where both sides are timed and
correct, and a note per failure.
`--json FILE` also writes the rows. Progress goes to stderr; so does `--profile`:
for each model, the top ops by self time of one generated, one compiled and one eager
call (torch.profiler), the generated module's C++ kernels among them by name; then
the generated call's Python functions with the most host time (cProfile).

Defaults are CPU-sized (batch 1, sequence 128; ResNet-50 batch 2); on a GPU machine,
`--device cuda --batch 8 --seq 512` and the same file. timm needs torchvision at
import time; when the real one does not import, the stand-in of tests/models/_stubs
is used (`tests.models.factories`). Nothing is written into the repository: the
generated code goes to a temporary directory (kept with `--keep DIR`). Exit status 1
if a generated module fails to build, falls back to eager or gives wrong outputs.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import json
import math
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script

from benchmarks import common  # noqa: E402
from benchmarks.common import number_cell, ratio_cell  # noqa: E402
from examples.compare import DTYPES, call_watching, flatten, reference  # noqa: E402
from tests.models.factories import (  # noqa: E402
    STUBS,
    _torchvision_for_timm,
    has_real_torchvision,
)

DTYPE_ENV = "MODELS_SPEED_DTYPE"  # the factories' parameter dtype: f32, bf16, f16
F32_TOL = (1e-3, 1e-4)  # (rtol, atol) of the generated and compiled outputs
LOW_SLACK = 2.0  # f16/bf16: error against f32, in units of eager's own
LLAMA_LAYERS = 2
TIMEOUT_S = 1800  # of one transpile

# ------------------------------------------------------------------- factories
# Module-level functions, for `transpile --factory benchmarks/models_speed.py::fn`.
# Each is called on the meta device by the transpiler and on the real one here;
# both read the parameter dtype from the environment (`DTYPE_ENV`).


def _finish(model: torch.nn.Module) -> torch.nn.Module:
    return model.to(DTYPES[os.environ.get(DTYPE_ENV, "f32")]).eval()


def gpt2_small():
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    return _finish(GPT2Model(GPT2Config(use_cache=False)))  # 12 x 768, 12 heads


def bert_base():
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    return _finish(BertModel(BertConfig(), add_pooling_layer=True))


def vit_b16():
    from transformers import ViTConfig, ViTModel

    torch.manual_seed(0)
    config = ViTConfig(image_size=224, patch_size=16)  # 12 x 768, 12 heads
    return _finish(ViTModel(config, add_pooling_layer=True))


def resnet50():
    _torchvision_for_timm()
    import timm

    _drop_torchvision_stand_in()
    torch.manual_seed(0)
    return _finish(timm.create_model("resnet50", pretrained=False))


def _drop_torchvision_stand_in() -> None:
    """Take tests/models' torchvision stand-in off sys.path and out of sys.modules
    once timm is imported: transformers, importing more of itself later, would take
    it for the real torchvision and fail on what it lacks."""
    if str(STUBS) in sys.path:
        sys.path.remove(str(STUBS))
    for name in [m for m in sys.modules if m.split(".")[0] == "torchvision"]:
        if str(STUBS) in (getattr(sys.modules[name], "__file__", None) or ""):
            del sys.modules[name]


def llama_stack():
    from transformers import LlamaConfig, LlamaModel

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=32000, hidden_size=2048, intermediate_size=5632,
        num_hidden_layers=LLAMA_LAYERS, num_attention_heads=16,
        num_key_value_heads=4, max_position_embeddings=2048, use_cache=False,
    )  # fmt: skip
    return _finish(LlamaModel(config))


def t5_base_encoder():
    from transformers import T5Config, T5EncoderModel

    torch.manual_seed(0)
    config = T5Config(
        vocab_size=32128, d_model=768, d_kv=64, d_ff=3072, num_layers=12,
        num_heads=12, feed_forward_proj="relu", use_cache=False,
    )  # fmt: skip
    return _finish(T5EncoderModel(config))


# ---------------------------------------------------------------------- models


@dataclass(frozen=True)
class Model:
    name: str
    target: str  # `pkg.mod::Class` of the library class
    factory: str  # a function of this file
    input: str  # the forward argument: token ids or an image batch
    vocab: int = 0  # token models: ids are drawn below it; 0: an image model
    batch: int = 1  # default batch
    timm: bool = False  # needs torchvision (or its stand-in) at import

    def specs(self, batch: int | None, seq: int, dtype: str) -> dict[str, str]:
        """The example inputs as TYPE specs, e.g. {"input_ids": "i64[1,128]"}."""
        b = batch or self.batch
        shape = f"i64[{b},{seq}]" if self.vocab else f"{dtype}[{b},3,224,224]"
        return {self.input: shape}


MODELS = [
    Model(
        "gpt2",
        "transformers.models.gpt2.modeling_gpt2::GPT2Model",
        "gpt2_small",
        "input_ids",
        vocab=50257,
    ),
    Model(
        "bert",
        "transformers.models.bert.modeling_bert::BertModel",
        "bert_base",
        "input_ids",
        vocab=30522,
    ),
    Model(
        "vit",
        "transformers.models.vit.modeling_vit::ViTModel",
        "vit_b16",
        "pixel_values",
    ),
    Model(
        "resnet50",
        "timm.models.resnet::ResNet",
        "resnet50",
        "x",
        batch=2,
        timm=True,
    ),
    Model(
        "llama",
        "transformers.models.llama.modeling_llama::LlamaModel",
        "llama_stack",
        "input_ids",
        vocab=32000,
    ),
    Model(
        "t5",
        "transformers.models.t5.modeling_t5::T5EncoderModel",
        "t5_base_encoder",
        "input_ids",
        vocab=32128,
    ),
]


@dataclass
class Row:
    model: str
    shape: str
    transpile_s: float | None = None
    compile_s: float | None = None  # torch.compile's first call
    generated_first_s: float | None = None  # includes building its C++ kernels
    eager_ms: float | None = None
    compile_ms: float | None = None
    generated_ms: float | None = None
    max_err: float | None = None  # generated vs eager (f16/bf16: eager in f32)
    eager_err: float | None = None  # f16/bf16: eager vs eager in f32
    compile_err: float | None = None
    kernels: int | None = None
    extern: int | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def generated_ok(self) -> bool:
        return self.generated_ms is not None and not any(
            p.startswith("generated") for p in self.problems
        )


# --------------------------------------------------------------------- transpile


def _env(model: Model, dtype: str) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(ROOT)]
    if model.timm and not has_real_torchvision():
        paths.append(str(STUBS))
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = os.pathsep.join(paths + ([old] if old else []))
    env.update(HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")
    env[DTYPE_ENV] = dtype
    return env


def transpile_args(model: Model, specs: dict[str, str], device: str, out: Path):
    """The arguments of `transpile` for this model (after the command itself)."""
    args = [model.target, "--factory", f"benchmarks/models_speed.py::{model.factory}"]
    for name, spec in specs.items():
        args += ["--example", f"{name}={spec}"]
    return args + ["--device", device, "-o", str(out)]


def transpile(model: Model, args: list[str], dtype: str) -> tuple[float, str]:
    """Run `transpile ARGS` in a fresh process; (seconds, stderr). Raises
    RuntimeError with its last error line when it fails."""
    command = "import sys; from transpiler.cli import main; sys.exit(main())"
    start = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", command, *args],
        cwd=ROOT,
        env=_env(model, dtype),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    seconds = time.perf_counter() - start
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("transpile: error")]
        raise RuntimeError((errors or lines or ["no output"])[-1])
    return seconds, done.stderr


def variant_counts(path: Path) -> tuple[int | None, int | None, bool]:
    """(kernels, extern calls) of the first variant and whether the module has no
    graph breaks, from the generated module's docstring."""
    text = path.read_text()
    found = re.search(r"(\d+) kernels?, (\d+) extern calls?", text)
    whole = "Graph breaks (code run eagerly):\n    none" in text
    if found is None:
        return None, None, whole
    return int(found[1]), int(found[2]), whole


# ------------------------------------------------------------------- checking


def make_inputs(model: Model, specs: dict[str, str], device: str) -> dict:
    """Seeded inputs: token ids below the vocabulary size, or randn images."""
    gen = torch.Generator().manual_seed(0)
    inputs = {}
    for name, spec in specs.items():
        kind, dims = re.fullmatch(r"(\w+)\[([\d,]+)\]", spec).groups()
        shape = tuple(int(d) for d in dims.split(","))
        if model.vocab:
            value = torch.randint(0, model.vocab, shape, generator=gen)
        else:
            value = torch.randn(shape, generator=gen).to(DTYPES[kind])
        inputs[name] = value.to(device)
    return inputs


def max_error(actual: object, expected: object) -> float:
    """Max abs error over the tensors of two outputs (inf where they differ in
    structure, shape or a value that is not a tensor)."""
    a_leaves, e_leaves = flatten(actual), flatten(expected)
    if len(a_leaves) != len(e_leaves):
        return math.inf
    worst = 0.0
    for a, e in zip(a_leaves, e_leaves):
        if not isinstance(e, torch.Tensor):
            if a != e:
                return math.inf
        elif not isinstance(a, torch.Tensor) or a.shape != e.shape:
            return math.inf
        elif e.numel():
            diff = (a.detach().double() - e.detach().double()).abs().max().item()
            worst = max(worst, diff)
    return worst


@dataclass
class Judge:
    """Judges an output: in f32, against eager's (rtol, atol: `F32_TOL`); in f16 or
    bf16, against eager run in f32 on upcast weights and inputs, allowed up to
    `LOW_SLACK` times eager's own error there (both round to the low precision, in
    different orders)."""

    expected: object
    eager_err: float | None = None  # f16/bf16: eager's own error against f32

    @classmethod
    def of(cls, eager, inputs: dict, low: bool) -> Judge:
        if not low:
            return cls(eager(**inputs))
        expected = reference(eager, inputs, low_precision=True)
        return cls(expected, max_error(eager(**inputs), expected))

    def __call__(self, actual: object) -> tuple[float, bool]:
        """(max abs error, whether it is within tolerance)."""
        err = max_error(actual, self.expected)
        if self.eager_err is not None:
            return err, err <= LOW_SLACK * self.eager_err
        ok = err < math.inf and all(
            torch.allclose(a.double(), e.double(), *F32_TOL, equal_nan=True)
            for a, e in zip(flatten(actual), flatten(self.expected))
            if isinstance(e, torch.Tensor)
        )
        return err, ok

    def wrong(self, err: float) -> str:
        """Why an output with max abs error `err` is judged wrong."""
        if self.eager_err is None:
            return f"wrong, max abs {err:.2e}"
        return f"wrong, max abs {err:.2e} against f32 (eager's: {self.eager_err:.2e})"


def count_variant_calls(module, call: Callable[[], object]) -> tuple[object, int]:
    """Run `call` with the generated variants (`_cpu_N`, `_cuda_N`) of `module`
    counted; (its result, how many of them ran)."""
    names = [n for n in vars(module) if re.fullmatch(r"_(cpu|cuda)_\d+", n)]
    original = {name: getattr(module, name) for name in names}
    calls = [0]

    def counting(fn):
        def wrapper(*args, **kwargs):
            calls[0] += 1
            return fn(*args, **kwargs)

        return wrapper

    for name, fn in original.items():
        setattr(module, name, counting(fn))
    try:
        return call(), calls[0]
    finally:
        for name, fn in original.items():
            setattr(module, name, fn)


# ---------------------------------------------------------------------- timing


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def cpu_reps_timer(reps: int) -> common.Timer:
    """perf_counter: the median ms of `reps` back-to-back calls (no warmup: the
    caller warms up once, before the rounds)."""

    def time_ms(fn: Callable[[], object]) -> float:
        times = []
        for _ in range(reps):
            start = time.perf_counter()
            fn()
            times.append(time.perf_counter() - start)
        return statistics.median(times) * 1e3

    return time_ms


class RecordedKernels:
    """A generated module's `_cpp` whose C++ kernels each show in the profiler under
    their own name (ctypes calls are otherwise invisible to it)."""

    def __init__(self, cpp) -> None:
        self.cpp = cpp

    def function(self, name: str, signature: str) -> Callable[..., object]:
        kernel = self.cpp.function(name, signature)

        def call(*args):
            with torch.profiler.record_function(name):
                return kernel(*args)

        return call

    def __getattr__(self, name: str):
        return getattr(self.cpp, name)


def profile(
    label: str, fn: Callable[[], object], device: str, module=None, top: int = 10
) -> str:
    """The top ops of one call of `fn` by self time, with the C++ kernels of the
    generated `module` (if given) among them."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    activities = [ProfilerActivity.CPU]
    if device == "cuda":
        activities.append(ProfilerActivity.CUDA)
    cpp = getattr(module, "_cpp", None)
    if cpp is not None:
        module._cpp = RecordedKernels(cpp)
    try:
        with torch_profile(activities=activities) as prof:
            start = time.perf_counter()
            fn()
            sync(device)
            wall_ms = (time.perf_counter() - start) * 1e3
    finally:
        if cpp is not None:
            module._cpp = cpp
    key = "self_cuda_time_total" if device == "cuda" else "self_cpu_time_total"
    events = prof.key_averages()
    table = events.table(sort_by=key, row_limit=top, max_name_column_width=40)
    kernels = [e for e in events if e.key.startswith("cpp_")]
    launches = sum(e.count for e in kernels)
    kernel_ms = sum(e.self_cpu_time_total for e in kernels) / 1e3
    summary = f"wall {wall_ms:.1f} ms (profiled)"
    if cpp is not None:
        summary += f"; C++ kernels {kernel_ms:.1f} ms in {launches} launches"
    return f"--- {label}: {summary}\n{table}"


def host_profile(label: str, fn: Callable[[], object], calls: int = 20) -> str:
    """The Python functions with the most host time of their own over `calls`
    calls of `fn` (cProfile, which adds its own cost to each call: compare counts
    and relative costs)."""
    import cProfile
    import io
    import pstats

    prof = cProfile.Profile()
    prof.enable()
    for _ in range(calls):
        fn()
    prof.disable()
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(15)
    return f"--- {label}, generated: host time of {calls} calls\n{out.getvalue()}"


# ------------------------------------------------------------------------- run


def run_generated(
    module, model: Model, eager, inputs: dict, judge: Judge, row: Row
) -> Callable[[], object] | None:
    """The same model instance as `eager` with the generated class, checked against
    `judge`; its timed call, or None (the reason added to `row.problems`)."""
    gen = copy.deepcopy(eager)
    gen.__class__ = getattr(module, model.target.split("::")[1])
    eager_warned = call_watching(eager, inputs)[1]
    start = time.perf_counter()
    (actual, warned), ran = count_variant_calls(
        module, lambda: call_watching(gen, inputs)
    )
    sync(inputs[model.input].device.type)
    row.generated_first_s = time.perf_counter() - start  # with its C++ build
    row.max_err, ok = judge(actual)
    fell_back = [m for m in warned if "(eager)" in m and m not in eager_warned]
    if fell_back or not ran:
        why = fell_back[0] if fell_back else "no compiled variant ran"
        row.problems.append(f"generated: ran the source: {why}")
    elif not ok:
        row.problems.append(f"generated: {judge.wrong(row.max_err)}")
    else:
        return lambda: gen(**inputs)
    return None


def run_compiled(
    eager, inputs: dict, judge: Judge, row: Row
) -> Callable[[], object] | None:
    """`torch.compile(eager)`, its first call (the compile) timed and checked
    by `judge`; its timed call, or None."""
    compiled = torch.compile(eager)
    try:
        start = time.perf_counter()
        got = compiled(**inputs)
        sync(next(iter(inputs.values())).device.type)
        row.compile_s = time.perf_counter() - start
    except Exception as e:
        row.problems.append(f"compile: raised {type(e).__name__}: {e}")
        return None
    row.compile_err, ok = judge(got)
    if not ok:
        row.problems.append(f"compile: {judge.wrong(row.compile_err)}")
        return None
    return lambda: compiled(**inputs)


def run_model(model: Model, args: argparse.Namespace, work: Path, since: float) -> Row:
    """Transpile, check and time one model; never raises for a broken one."""
    specs = model.specs(args.batch, args.seq, args.dtype)
    row = Row(model.name, ", ".join(f"{k}={v}" for k, v in specs.items()))
    say = lambda message: common.progress(f"{model.name}: {message}", since)  # noqa

    package = f"gen_{model.name}"
    out = work / package
    shutil.rmtree(out, ignore_errors=True)
    targs = transpile_args(model, specs, args.device, out)
    say("transpile " + " ".join(targs))
    try:
        row.transpile_s, stderr = transpile(model, targs, args.dtype)
    except (RuntimeError, subprocess.TimeoutExpired) as e:
        row.problems.append(f"generated: transpile failed: {e}")
        return row
    stem = model.target.split("::")[0].rsplit(".", 1)[-1]
    row.kernels, row.extern, whole = variant_counts(out / f"{stem}.py")
    if not whole or "warning" in stderr:
        note = stderr.strip().splitlines()[-1] if stderr.strip() else "graph breaks"
        row.problems.append(f"generated: not compiled whole: {note}")
    counts = f"{row.kernels} kernels, {row.extern} extern calls"
    say(f"transpiled in {row.transpile_s:.1f} s ({counts})")

    eager = globals()[model.factory]().to(args.device)
    inputs = make_inputs(model, specs, args.device)
    torch._dynamo.reset()
    with torch.no_grad():
        judge = Judge.of(eager, inputs, low=args.dtype != "f32")
        row.eager_err = judge.eager_err
        timed: dict[str, Callable[[], object] | None] = {
            "eager": lambda: eager(**inputs)
        }
        module = None  # the generated module
        try:
            if str(work) not in sys.path:
                sys.path.insert(0, str(work))
            module = importlib.import_module(f"{package}.{stem}")
            timed["generated"] = run_generated(module, model, eager, inputs, judge, row)
            say(f"generated first call {row.generated_first_s:.1f} s")
        except Exception as e:
            row.problems.append(f"generated: raised {type(e).__name__}: {e}")
        if not args.no_compile:
            timed["compile"] = run_compiled(eager, inputs, judge, row)
            say(f"torch.compile first call {number_cell(row.compile_s, 1)} s")
        del judge
        timed = {name: fn for name, fn in timed.items() if fn is not None}

        for fn in timed.values():
            for _ in range(args.warmup):
                fn()
        sync(args.device)
        ms = common.interleaved(args.timer, args.rounds)(timed)
        say(", ".join(f"{name} {value:.1f}" for name, value in ms.items()) + " ms")
        row.eager_ms = ms.get("eager")
        row.compile_ms = ms.get("compile")
        row.generated_ms = ms.get("generated")
        if args.profile:
            for name in ("generated", "compile", "eager"):
                if name in timed:
                    label = f"{model.name}, {name}"
                    gen_module = module if name == "generated" else None
                    report = profile(label, timed[name], args.device, gen_module)
                    print(report, file=sys.stderr)
            if "generated" in timed:
                print(host_profile(model.name, timed["generated"]), file=sys.stderr)
    torch._dynamo.reset()  # drop the compiled code and its memory
    if args.device == "cuda":
        torch.cuda.empty_cache()
    return row


# ----------------------------------------------------------------------- table


def speedups(rows: list[Row], baseline: str) -> list[float]:
    """baseline ms / generated ms where both are timed (and so correct)."""
    pairs = [(getattr(r, f"{baseline}_ms"), r.generated_ms) for r in rows]
    return [b / g for b, g in pairs if b is not None and g is not None]


def geomean_cell(ratios: list[float], models: int) -> str:
    mean = common.geomean(ratios)
    if mean is None:
        return "-"
    counted = "" if len(ratios) == models else f" ({len(ratios)} of {models})"
    return f"{mean:.2f}x{counted}"


def markdown_table(rows: list[Row]) -> str:
    head = (
        "model", "shape", "transpile s", "compile s", "eager ms", "compile ms",
        "generated ms", "gen vs eager", "gen vs compile", "max err", "kernels / extern",
    )  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        err = "-" if r.max_err is None else f"{r.max_err:.1e}"
        kernels = "-" if r.kernels is None else f"{r.kernels} / {r.extern}"
        figures = (r.transpile_s, r.compile_s, r.eager_ms, r.compile_ms, r.generated_ms)
        cells = (
            r.model, r.shape, *(number_cell(f, 1) for f in figures),
            ratio_cell(r.eager_ms, r.generated_ms),
            ratio_cell(r.compile_ms, r.generated_ms),
            err, kernels,
        )  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    n = len(rows)
    cells = (
        "geomean", f"{n} models", "", "", "", "", "",
        geomean_cell(speedups(rows, "eager"), n),
        geomean_cell(speedups(rows, "compile"), n), "", "",
    )  # fmt: skip
    lines.append("| " + " | ".join(cells) + " |")
    notes = [f"- {r.model}, {p}" for r in rows for p in r.problems]
    return "\n".join(lines + ([""] + notes if notes else []))


# ------------------------------------------------------------------------ main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    names = [m.name for m in MODELS]
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--models", default=",".join(names), help=",".join(names))
    p.add_argument("--batch", type=int, help="default: 1 (resnet50: 2)")
    p.add_argument("--seq", type=int, default=128, help="tokens per sequence")
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument("--dtype", choices=("f32", "bf16", "f16"), default="f32")
    p.add_argument("--threads", type=int, help="torch and OpenMP threads (CPU)")
    p.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    p.add_argument("--reps", type=int, default=3, help="calls per round (CPU)")
    p.add_argument("--warmup", type=int, default=1, help="calls before the rounds")
    p.add_argument("--no-compile", action="store_true", help="skip torch.compile")
    p.add_argument("--profile", action="store_true", help="print top ops per model")
    p.add_argument("--keep", type=Path, help="keep the generated code in DIR")
    p.add_argument("--json", type=Path, help="also write the rows as JSON to FILE")
    args = p.parse_args(argv)
    args.models = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = sorted(set(args.models) - set(names))
    if unknown:
        p.error(f"unknown models {unknown}; known: {', '.join(names)}")
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA GPU here")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)  # generated and inductor C++ kernels
    os.environ.update(HF_HUB_OFFLINE="1", TRANSFORMERS_VERBOSITY="error")
    os.environ[DTYPE_ENV] = args.dtype
    if args.device == "cuda":
        args.timer, how = common.cuda_timer(False, args.rounds)
    else:
        pinned = importlib.import_module("benchmarks.cpu").pin_malloc_thresholds()
        args.timer = cpu_reps_timer(args.reps)
        how = f"time.perf_counter, median of {args.reps} call(s) per round"
        how += ", glibc malloc pinned (thresholds, no mmap)" if pinned else ""
    work = args.keep.resolve() if args.keep else Path(tempfile.mkdtemp(prefix="ms_"))
    work.mkdir(parents=True, exist_ok=True)
    # a cold compile, unless the caller points inductor at a cache of their own
    os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", str(work / "inductor_cache"))
    start, load_before = time.perf_counter(), os.getloadavg()[0]
    rows = []
    try:
        for model in (m for m in MODELS if m.name in args.models):
            rows.append(run_model(model, args, work, start))
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)

    print(f"# library models: eager vs torch.compile vs generated ({args.device})\n")
    print(f"- machine: {common.environment(args.device)}; dtype {args.dtype}")
    load = f"{load_before:.1f} / {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    print(f"- load average (1 min) at start / end: {load} (other work skews timings)")
    rounds = f"{args.warmup} warmup call(s), then the median of {args.rounds} rounds"
    print(f"- timing: {how}; {rounds}, interleaved; torch.no_grad(), eval mode")
    print(
        "- compile s: torch.compile's first call (default mode); gen vs X: X ms /"
        " generated ms (> 1: generated faster); max err: generated vs eager"
        + (" in f32" if args.dtype != "f32" else "")
        + "\n"
    )
    print(markdown_table(rows))
    if args.json:
        args.json.write_text(json.dumps([asdict(r) for r in rows], indent=1) + "\n")
    return 0 if all(r.generated_ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
