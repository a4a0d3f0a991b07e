"""`transpile --autotune`: time candidate launch configs of each Triton kernel on this
machine's GPU and write the fastest into the generated source, with a comment.

Runs after lowering, before rendering, on the cuda kernels of every module:

    for each kernel: buffers from its index arithmetic (seeded random inputs)
        → each candidate config (Note [Autotune candidates]): render, import, launch,
          compare its outputs with the heuristic config's, time it
        → the winner (Note [Autotune margin]) becomes `Kernel.tuned`

`launch_config` then returns the tuned config, so the wrapper launches it and the
Triton module renders it (a persistent or a looped reduction), under the note.

Without --autotune none of this runs and the output is what it always was. The timer
is a seam (`Bench.timer`): tests run the whole path in Triton's interpreter on CPU
tensors with a fake timer.

Note [Autotune candidates]
~~~~~~~~~~~~~~~~~~~~~~~~~~
A small, explicit list per kernel, the heuristic config first; every other candidate
keeps each thread's share of a block (`block / (32 * num_warps)` elements) within
`PER_THREAD`, and no block is wider than the work (the next power of two of xnumel):
- pointwise: XBLOCK in `POINTWISE_XBLOCK` x num_warps in `WARPS`;
- persistent reduction (a static row of at most PERSISTENT_MAX): RBLOCK is the row
  (next power of two), XBLOCK rows per program such that XBLOCK * RBLOCK is one of
  `PERSISTENT_ELEMENTS`, x num_warps;
- looped reduction: XBLOCK = 1, RBLOCK in `LOOPED_RBLOCK` (narrower than the row) x
  num_warps. A row that may be persistent gets both kinds of candidate.
That is at most about 20 candidates per kernel.

Note [Autotune margin]
~~~~~~~~~~~~~~~~~~~~~~
Timings are noisy, so the heuristic config is kept unless the fastest candidate beats
it by more than `Bench.margin`: 10% and 2 microseconds. On an H100, kernels of 15 to
40 us measured up to ~7% and ~1 us apart from one run to the next, so a 3% margin
flipped configs between reruns. A candidate that seems to win is timed again with the
heuristic, each keeping its lower time. So a rerun on the same machine chooses the
same configs but for a gain right at the margin; the times in the note always vary.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch

from transpiler.build import Build, ModuleCode, VariantCode
from transpiler.codegen import triton as triton_codegen
from transpiler.codegen.indexing import across_rows
from transpiler.codegen.triton import (
    PERSISTENT_MAX,
    heuristic_config,
    launch_config,
    next_pow2,
)
from transpiler.errors import UserError
from transpiler.ir.dynamic import dims_in, size
from transpiler.ir.graph import TensorMeta, contiguous_strides
from transpiler.ir.ops import HALF_TYPES
from transpiler.ir.program import (
    Index,
    Kernel,
    KernelCall,
    LaunchConfig,
    Matmul,
    MatmulConfig,
    Stmt,
    Store,
    Term,
    Tuned,
)
from transpiler.ir.region import map_programs
from transpiler.options import Options
from transpiler.passes import matmul_epilogue

POINTWISE_XBLOCK = (128, 256, 512, 1024, 2048, 4096)
PERSISTENT_ELEMENTS = (512, 1024, 2048, 4096, 8192)  # XBLOCK * RBLOCK per program
LOOPED_RBLOCK = (512, 1024, 2048, 4096)
WARPS = (1, 2, 4, 8, 16)
PER_THREAD = (4, 64)  # fewest and most elements of a block per thread
MARGIN = (0.10, 0.002)  # faster by this fraction and by these milliseconds
TUNED_AT = 1024  # the size a dynamic dimension is tuned at: the heuristic's typical
WARMUP_MS, REP_MS = 5, 25  # do_bench budget per candidate
# matmul tiles (BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, num_warps, num_stages) for a
# linear layer with its epilogue: the common large-matrix configs for f16/bf16
MATMUL_CONFIGS = tuple(
    MatmulConfig(*c)
    for c in (
        (128, 128, 64, 8, 8, 3),
        (128, 128, 64, 8, 4, 4),
        (128, 256, 64, 8, 8, 3),
        (128, 256, 64, 8, 8, 4),
        (256, 128, 64, 8, 8, 3),
        (128, 128, 32, 8, 4, 4),
        (64, 128, 64, 8, 4, 4),
        (128, 64, 64, 8, 4, 4),
        (64, 64, 32, 8, 4, 3),
    )
)


@dataclass(frozen=True)
class Candidate:
    kernel: str  # "triton_fused_softmax_0"
    config: LaunchConfig | MatmulConfig


# runs `launch` repeatedly, returns its median time in milliseconds
Timer = Callable[[Candidate, Callable[[], object]], float]


def do_bench_timer(candidate: Candidate, launch: Callable[[], object]) -> float:
    """`triton.testing.do_bench` median, with a small budget per candidate."""
    from triton.testing import do_bench

    return float(do_bench(launch, warmup=WARMUP_MS, rep=REP_MS, return_mode="median"))


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass(frozen=True)
class Bench:
    """Where and how candidates run: `device` holds the buffers ("cuda"; "cpu" under
    TRITON_INTERPRET=1 in tests), `machine` names it in the notes."""

    device: str
    machine: str
    timer: Timer = do_bench_timer
    margin: tuple[float, float] = MARGIN
    log: Callable[[str], None] = _stderr


def cuda_bench() -> Bench:
    """The Bench of this machine's CUDA GPU; a UserError where there is none."""
    try:
        import triton
    except ImportError:
        raise UserError(
            "--autotune needs Triton to time kernels, and it is not installed "
            "(pip install triton); run without --autotune"
        ) from None
    if not torch.cuda.is_available():
        raise UserError(
            "--autotune times kernels on a CUDA GPU, and torch sees none on this "
            "machine; run it on a machine with a GPU, or without --autotune"
        )
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise UserError(
            "--autotune times compiled kernels, and TRITON_INTERPRET is set: unset it"
        )
    name = torch.cuda.get_device_name()
    return Bench("cuda", f"{name} (triton {triton.__version__})")


def bench_for(options: Options, bench: Bench | None = None) -> Bench | None:
    """None without --autotune; else `bench`, or this machine's GPU (or an error)."""
    if not options.autotune:
        return None
    return bench if bench is not None else cuda_bench()


# ---------------------------------------------------------------------- candidates


def candidates(k: Kernel) -> list[LaunchConfig]:
    """The configs to time for `k`, the heuristic first (Note [Autotune candidates])."""
    xmax = next_pow2(size(k.xnumel, TUNED_AT))
    if not k.is_reduction:
        blocks = [(x, 1) for x in POINTWISE_XBLOCK if x <= max(16, xmax)]
    else:
        blocks = []
        if isinstance(k.rnumel, int) and k.rnumel <= PERSISTENT_MAX:
            rblock = next_pow2(k.rnumel)
            rows = dict.fromkeys(max(1, e // rblock) for e in PERSISTENT_ELEMENTS)
            blocks += [(x, rblock) for x in rows if x <= xmax]
        rnumel = size(k.rnumel, TUNED_AT)
        if across_rows(k):  # tiles of rows side by side
            blocks += [(x, r) for x in (32, 64, 128) for r in (4, 8, 16, 32)]
        else:
            blocks += [(1, r) for r in LOOPED_RBLOCK if r < rnumel]
    configs = [heuristic_config(k)]
    for xblock, rblock in blocks:
        for warps in WARPS:
            per_thread = xblock * rblock / (32 * warps)
            config = LaunchConfig(xblock, rblock, warps)
            if PER_THREAD[0] <= per_thread <= PER_THREAD[1] and config not in configs:
                configs.append(config)
    return configs


def describe(k: Kernel, c: LaunchConfig) -> str:
    """`XBLOCK=1024, num_warps=8`, or for a reduction
    `XBLOCK=1, RBLOCK=4096 (looped), num_warps=16`."""
    if not k.is_reduction:
        return f"XBLOCK={c.xblock}, num_warps={c.num_warps}"
    kind = "persistent" if triton_codegen.is_persistent(k, c) else "looped"
    return f"XBLOCK={c.xblock}, RBLOCK={c.rblock} ({kind}), num_warps={c.num_warps}"


# ------------------------------------------------------------------------- buffers


def _sizes(k: Kernel) -> dict[str, int]:
    return {d: TUNED_AT for d in sorted(dims_in(k))}


def _last(index: Index, ranges: dict[str, int]) -> int:
    """The largest address `index` reaches (a value loaded in the kernel, as an
    index: anywhere in its range)."""
    last = size(index.offset, TUNED_AT)
    for t in index.terms:
        div, mod = size(t.div, TUNED_AT), size(t.mod, TUNED_AT)
        reach = (
            mod - 1 if t.var not in ranges else min(mod - 1, (ranges[t.var] - 1) // div)
        )
        last += max(size(t.stride, TUNED_AT) * reach, 0)
    return last


def extents(k: Kernel) -> dict[str, int]:
    """Elements each buffer parameter needs: one past the last address touched."""
    ranges = {"x": size(k.xnumel, TUNED_AT), "r": size(k.rnumel, TUNED_AT)}
    ends = {a.param: 1 for a in k.inputs + k.outputs}
    for s in k.body:
        if isinstance(s, Stmt) and s.op == "load":
            param, index = s.args[:2]
        elif isinstance(s, Store):
            param, index = s.buffer, s.index
            if not index.terms:  # codegen stores at `offset + xindex` (xmask)
                index = Index(index.offset, (Term("x", 1, ranges["x"], 1),))
        else:
            continue
        ends[param] = max(ends[param], _last(index, ranges) + 1)
    return ends


def random_inputs(k: Kernel, device: str, seed: int = 0) -> list[torch.Tensor]:
    """One flat, seeded random buffer per input parameter."""
    gen = torch.Generator(device=device).manual_seed(seed)
    ends = extents(k)
    out = []
    for a in k.inputs:
        n = ends[a.param]
        if a.dtype.is_floating_point:
            t = torch.randn(n, generator=gen, device=device).to(a.dtype)
        elif a.dtype == torch.bool:
            t = torch.randint(0, 2, (n,), generator=gen, device=device).bool()
        else:  # no zeros: integer division stays defined
            t = torch.randint(1, 16, (n,), generator=gen, device=device).to(a.dtype)
        out.append(t)
    return out


def poisoned_outputs(k: Kernel, device: str) -> list[torch.Tensor]:
    """Output buffers filled with NaN (123 for integers, True for bool): an element
    left unwritten shows."""
    ends = extents(k)
    return [
        torch.full((ends[a.param],), _poison(a.dtype), dtype=a.dtype, device=device)
        for a in k.outputs
    ]


def _poison(dtype: torch.dtype) -> float | int | bool:
    if dtype.is_floating_point:
        return float("nan")
    return True if dtype == torch.bool else 123


def same_outputs(got: list[torch.Tensor], want: list[torch.Tensor]) -> bool:
    """Equal up to rounding: reductions in another order round differently."""
    for g, w in zip(got, want):
        if not w.dtype.is_floating_point:
            if not torch.equal(g, w):
                return False
            continue
        low = w.dtype in HALF_TYPES
        tol = 1e-2 if low else 1e-4
        finite = w.float().nan_to_num(0.0, posinf=0.0, neginf=0.0)
        scale = max(1.0, float(finite.abs().max())) if w.numel() else 1.0
        if not torch.allclose(
            g.float(), w.float(), rtol=tol, atol=tol * scale, equal_nan=True
        ):
            return False
    return True


# -------------------------------------------------------------------------- tuning


@dataclass(frozen=True)
class Trial:
    config: LaunchConfig
    ms: float


def load_candidate(k: Kernel, config: LaunchConfig, folder: Path, loaded: dict):
    """The Triton function of `k` rendered for `config`, written to `folder` and
    imported; `loaded` keeps each distinct source's function."""
    text = triton_codegen.kernel_module(k, config, '"""A candidate."""\n')
    if text not in loaded:  # a file name never used before in `folder`
        name = f"_autotune_{len(list(folder.iterdir()))}_{k.name}"
        path = folder / f"{name}.py"
        path.write_text(text)
        spec = importlib.util.spec_from_file_location(name, path)
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        loaded[text] = getattr(module, f"triton_{k.name}")
    return loaded[text]


class _Launcher:
    """Launches of one kernel on seeded random inputs, for any candidate config.

    Candidate modules are written to `folder` and imported; each distinct source
    (persistent or looped) once."""

    def __init__(self, k: Kernel, device: str, folder: Path):
        self.k, self.device, self.folder = k, device, folder
        self.inputs = random_inputs(k, device)
        self.sizes = list(_sizes(k).values())  # dynamic dimensions, by value
        self.functions: dict[str, object] = {}

    def function(self, config: LaunchConfig):
        return load_candidate(self.k, config, self.folder, self.functions)

    def run(self, config: LaunchConfig) -> tuple[Callable[[], None], list]:
        """Run `config` once (compiling it); the launch to time, and the outputs."""
        fn = self.function(config)
        outputs = poisoned_outputs(self.k, self.device)
        args = [*self.inputs, *outputs, *self.sizes]
        kwargs = config.launch_kwargs(self.k.is_reduction)
        grid = (config.grid(size(self.k.xnumel, TUNED_AT)),)

        def launch() -> None:
            fn[grid](*args, **kwargs)

        launch()
        if self.device == "cuda":
            torch.cuda.synchronize()
        return launch, outputs


def tune(build: Build, bench: Bench) -> Build:
    """The build with each module's Triton kernels replaced by their tuned selves,
    and the linear layers whose epilogue runs faster in a Triton matmul fused with
    it (Note [Matmul epilogues])."""
    with tempfile.TemporaryDirectory(prefix="transpile-autotune-") as folder:
        modules = []
        for module in build.modules:
            tuned = tuple(
                tune_kernel(k, bench, Path(folder)) for k in module.kernels_of("triton")
            )
            module = dataclasses.replace(
                module, kernels={**module.kernels, "triton": tuned}
            )
            modules.append(tune_epilogues(module, bench, Path(folder)))
    return dataclasses.replace(build, modules=tuple(modules))


# ------------------------------------------------------------------ matmul epilogues


def tune_epilogues(module: ModuleCode, bench: Bench, folder: Path) -> ModuleCode:
    """`module` with, in each cuda variant, each linear layer and its consumer made
    one matmul kernel where one of `MATMUL_CONFIGS` beats cuBLAS plus the consumer."""
    kernels = {k.name: k for k in module.kernels_of("triton")}
    decided: dict[tuple, Kernel | None] = {}  # same shapes, same consumer: same call

    def tune_program(program, inputs: dict[str, TensorMeta]):
        chosen = []
        for e in matmul_epilogue.find(program, kernels, inputs):
            mm = e.kernel.matmul
            key = (e.consumer.name, mm.m, mm.n, mm.k, mm.dtype)
            if key not in decided:
                # one consumer after matmuls of other shapes: a name for each
                taken = sum(k[0] == e.consumer.name for k in decided)
                if taken:
                    name = f"{e.kernel.name}_{taken}"
                    e = dataclasses.replace(
                        e, kernel=dataclasses.replace(e.kernel, name=name)
                    )
                decided[key] = tune_epilogue(e, bench, folder)
            if decided[key] is not None:
                chosen.append((e, decided[key]))
        return matmul_epilogue.apply(program, chosen) if chosen else program

    def tune_variant(vc: VariantCode) -> VariantCode:
        if vc.backend != "triton" or vc.region is None:
            return vc
        tuned = partial(tune_program, inputs=_input_layouts(vc.variant))
        return dataclasses.replace(vc, region=map_programs(vc.region, tuned))

    targets = tuple(
        dataclasses.replace(t, variants=tuple(map(tune_variant, t.variants)))
        for t in module.targets
    )
    used = {
        s.kernel
        for t in targets
        for vc in t.variants
        if vc.backend == "triton"
        for p in vc.programs
        for s in p.steps
        if isinstance(s, KernelCall)
    }
    fused = [k for k in decided.values() if k is not None]
    triton = tuple(k for k in [*kernels.values(), *fused] if k.name in used)
    return dataclasses.replace(
        module, targets=targets, kernels={**module.kernels, "triton": triton}
    )


def _input_layouts(variant) -> dict[str, TensorMeta]:
    """The tensor inputs of static shape: contiguous, as their guards require."""
    out = {}
    for name, spec in variant.inputs:
        shape = getattr(spec, "shape", None)
        if shape is not None and all(isinstance(d, int) for d in shape):
            out[name] = TensorMeta(shape, contiguous_strides(shape), 0, spec.dtype)
    return out


def matmul_candidates(mm: Matmul) -> list[MatmulConfig]:
    """`MATMUL_CONFIGS` whose tiles are no larger than the matrix needs."""
    fits = [
        c
        for c in MATMUL_CONFIGS
        if c.block_m <= max(16, next_pow2(mm.m))
        and c.block_n <= max(16, next_pow2(mm.n))
        and c.block_k <= max(16, next_pow2(mm.k))
    ]
    return fits or [mm.config]


def tune_epilogue(e, bench: Bench, folder: Path) -> Kernel | None:
    """The matmul kernel of `e` with its fastest config, if that beats cuBLAS and
    the consumer by the margin; else None."""
    consumer, mm = e.consumer, e.kernel.matmul
    name = f"triton_{e.kernel.name}"
    gen = torch.Generator(device=bench.device).manual_seed(0)
    a = torch.randn(mm.m, mm.k, generator=gen, device=bench.device).to(mm.dtype)
    w = torch.randn(mm.n, mm.k, generator=gen, device=bench.device).to(mm.dtype)
    w /= mm.k**0.5  # products of the size a layer's would have
    product = {a.param for a in consumer.inputs} - {a.param for a in e.kernel.inputs}
    others = dict(
        zip([x.param for x in consumer.inputs], random_inputs(consumer, bench.device))
    )
    c = launch_config(consumer)
    loaded: dict = {}
    consumer_fn = load_candidate(consumer, c, folder, loaded)
    kwargs = c.launch_kwargs(consumer.is_reduction)
    grid = (c.grid(consumer.xnumel),)
    want = poisoned_outputs(consumer, bench.device)

    def cublas() -> None:
        out = torch.nn.functional.linear(a, w).view(-1)
        args = [out if p in product else t for p, t in others.items()]
        consumer_fn[grid](*args, *want, **kwargs)

    try:
        cublas()
        base_ms = bench.timer(Candidate(f"linear + triton_{consumer.name}", c), cublas)
    except Exception as err:
        bench.log(f"autotune: {name}: cuBLAS and the consumer failed: {err}")
        return None
    rest = [t for p, t in others.items() if p not in product]
    trials: list[tuple[MatmulConfig, float]] = []
    for config in matmul_candidates(mm):
        k = dataclasses.replace(e.kernel, matmul=dataclasses.replace(mm, config=config))
        try:
            fn = load_candidate(k, launch_config(k), folder, loaded)
            got = poisoned_outputs(k, bench.device)
            kw = config.launch_kwargs()
            g = (config.grid(mm.m, mm.n),)

            def launch(fn=fn, got=got, kw=kw, g=g) -> None:
                fn[g](a, w, *rest, *got, **kw)

            launch()
            if bench.device == "cuda":
                torch.cuda.synchronize()
            if not same_outputs(got, want):
                bench.log(f"autotune: {name}: {describe_matmul(config)}: wrong output")
                continue
            trials.append((config, bench.timer(Candidate(name, config), launch)))
        except Exception as err:  # out of shared memory, a compile error, ...
            why = f"{type(err).__name__}: {err}".splitlines()[0]
            bench.log(f"autotune: {name}: {describe_matmul(config)}: failed: {why}")
    if not trials:
        return None
    config, ms = min(trials, key=lambda t: t[1])
    head = f"autotuned on {bench.machine}, {len(trials)} tile configs timed:"
    ours = f"  {describe_matmul(config)}: {ms:.3f} ms"
    theirs = f"  cuBLAS linear, then triton_{consumer.name}: {base_ms:.3f} ms"
    won = _beats(Trial(config, ms), Trial(c, base_ms), bench.margin)
    bench.log(
        f"autotune: {name}: {ours.strip()} against {theirs.strip()}"
        + (" (chosen)" if won else " (kept cuBLAS)")
    )
    if not won:
        return None
    note = (head, ours + " (chosen)", theirs)
    return dataclasses.replace(
        e.kernel, matmul=dataclasses.replace(mm, config=config, note=note)
    )


def describe_matmul(c: MatmulConfig) -> str:
    return (
        f"BLOCK_M={c.block_m}, BLOCK_N={c.block_n}, BLOCK_K={c.block_k}, "
        f"num_warps={c.num_warps}, num_stages={c.num_stages}"
    )


def tune_kernel(k: Kernel, bench: Bench, folder: Path) -> Kernel:
    """`k` with the winning config and its note (Note [Autotune margin])."""
    configs = candidates(k)
    heuristic = configs[0]
    if len(configs) == 1:
        note = (f"autotune: {describe(k, heuristic)}: the only candidate",)
        return dataclasses.replace(k, tuned=Tuned(heuristic, note))
    launcher = _Launcher(k, bench.device, folder)
    trials: list[Trial] = []
    reference: list[torch.Tensor] | None = None
    dropped = {"failed": 0, "wrong": 0}
    for config in configs:
        try:
            launch, outputs = launcher.run(config)
            if reference is not None and not same_outputs(outputs, reference):
                dropped["wrong"] += 1
                continue
            ms = bench.timer(Candidate(f"triton_{k.name}", config), launch)
        except Exception as err:  # out of resources, a compile error, ...
            if config == heuristic:
                why = f"{type(err).__name__}: {err}".splitlines()[0]
                bench.log(f"autotune: triton_{k.name}: heuristic config failed: {why}")
                return k
            dropped["failed"] += 1
            continue
        reference = outputs if reference is None else reference
        trials.append(Trial(config, ms))
    trials = _confirm(k, trials, bench, launcher)
    tuned = Tuned(*_choose(k, trials, bench, dropped))
    bench.log(f"autotune: triton_{k.name}: " + " ".join(s.strip() for s in tuned.note))
    return dataclasses.replace(k, tuned=tuned)


def _beats(best: Trial, heuristic: Trial, margin: tuple[float, float]) -> bool:
    fraction, ms = margin
    return best.ms < min(heuristic.ms * (1 - fraction), heuristic.ms - ms)


def _confirm(
    k: Kernel, trials: list[Trial], bench: Bench, launcher: _Launcher
) -> list[Trial]:
    """Time the heuristic and the fastest other again when the other seems to win;
    each keeps the lower of its two times."""
    best = min(trials[1:], key=lambda t: t.ms, default=None)
    if best is None or not _beats(best, trials[0], bench.margin):
        return trials
    again = {}
    for t in (trials[0], best):
        launch, _ = launcher.run(t.config)
        ms = bench.timer(Candidate(f"triton_{k.name}", t.config), launch)
        again[t.config] = min(t.ms, ms)
    return [Trial(t.config, again.get(t.config, t.ms)) for t in trials]


def _choose(
    k: Kernel, trials: list[Trial], bench: Bench, dropped: dict[str, int]
) -> tuple[LaunchConfig, tuple[str, ...]]:
    """The winner and the note: the heuristic (`trials[0]`) unless the fastest other
    beats it by more than the margin."""
    heuristic, best = trials[0], min(trials[1:], key=lambda t: t.ms, default=None)
    at = ", ".join(f"{d}={n}" for d, n in _sizes(k).items())
    where = f"autotuned on {bench.machine}" + (f" at {at}" if at else "")
    lost = ", ".join(f"{n} {why}" for why, n in dropped.items() if n)
    count = f"{len(trials)} candidates timed" + (f" ({lost} dropped)" if lost else "")
    head = f"{where}, {count}:"
    timed = f"heuristic {describe(k, heuristic.config)}: {heuristic.ms:.3f} ms"
    if best is None:
        return heuristic.config, (head, f"  {timed} (kept)")
    other = f"{describe(k, best.config)}: {best.ms:.3f} ms"
    if _beats(best, heuristic, bench.margin):
        return best.config, (head, f"  {other} (chosen)", f"  {timed}")
    why = "slower" if best.ms >= heuristic.ms else "within the margin"
    return heuristic.config, (
        head,
        f"  {timed} (kept)",
        f"  best other {other} ({why})",
    )
