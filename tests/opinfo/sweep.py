"""Transpile OpInfo cases in batches, run them against eager, and classify each.

Each batch of cases is one source file, one `build` (one C++ compile); a batch that
fails to build (or whose C++ or Triton file does not compile) is split in half until
the failing case stands alone, so one bad case hides no other. Every case runs eager,
then the CPU variant (C++) and the CUDA variant (Triton, interpreted on CPU) on clones
of the same inputs; results *and inputs after the call* are compared (compare.py).

Where a variant's results differ from eager's, they may still agree with eager's
at float32 (f16/bf16 cases), or with eager's in the dtypes CUDA returns (the cuda
variant): see `others`.

Each case gets one class, the worst of its two variants:

    wrong         a result or an input after the call differs from eager's
    error         the generated code raised where eager did not (or the build failed),
                  or ran where eager raised
    fallback      a graph break: some or all of the variant runs the source eagerly
    partly eager  compiled, with extern calls to PyTorch ops (matmul included)
    compiled      all ops in kernels (or views)
    skipped       no source form ("not expressible"), eager raises too, or eager is
                  nondeterministic (or random, and the values cannot be compared)

Generated code is not black-formatted here (`unformatted`): black took most of the
build time, and formatting changes no behaviour.

Counting follows the module header (`codegen/module.py` `_summary`): extern calls
are non-view ExternCalls other than `getitem` and fallback stubs.

    python -m tests.opinfo.sweep --all               # the full sweep, a report
    python -m tests.opinfo.sweep --ops 'softmax|add' # op names matching a regex
    python -m tests.opinfo.sweep --case 'add/f32/transposed/s3' -v   # one case
"""

from __future__ import annotations

import ast
import contextlib
import hashlib
import importlib
import inspect
import io
import signal
import threading
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from unittest import mock

import torch

from tests.compile_helpers import import_generated, specs
from tests.devices import on_gpu
from tests.opinfo.cases import Case
from tests.opinfo.compare import (
    LOW_PRECISION,
    Ran,
    call,
    difference,
    like,
    on_meta,
    upcast_inputs,
)
from transpiler import pipeline
from transpiler.ir.program import ExternCall, KernelCall
from transpiler.options import Options, Target, Variant
from transpiler.pipeline import compile_modules, render

COMPILED, PARTLY, FALLBACK_CLASS = "compiled", "partly eager", "fallback"
WRONG, ERROR, SKIPPED = "wrong", "error", "skipped"
CLASSES = (COMPILED, PARTLY, FALLBACK_CLASS, WRONG, ERROR, SKIPPED)
RUN_SECONDS, BUILD_SECONDS = 120, 900  # then the case or the build is an error
_RANK = {COMPILED: 0, PARTLY: 1, FALLBACK_CLASS: 2, SKIPPED: 3, WRONG: 4, ERROR: 5}


@dataclass(frozen=True)
class Lowered:
    """What one variant of a case became."""

    name: str  # "cpu_3"
    kind: str  # COMPILED, PARTLY or FALLBACK_CLASS
    kernels: int
    externs: tuple[str, ...]  # targets of the extern calls, sorted
    breaks: tuple[str, ...]  # why code runs eagerly
    fn: Callable | None  # `_cpu_3`; None when all fallback
    source: str = ""  # the generated variant function


@dataclass(frozen=True)
class Outcome:
    case: Case
    cls: str
    detail: str = ""
    # per variant: (device, class, detail)
    variants: tuple[tuple[str, str, str], ...] = ()
    lowered: tuple[Lowered, ...] = field(default=(), repr=False)


def run_cases(
    cases: Iterable[Case],
    root: Path,
    batch: int = 48,
    progress: Callable[[str], None] | None = None,
) -> list[Outcome]:
    """Every case classified, in order; builds into folders under `root`."""
    outcomes: list[Outcome] = []
    pending: list[tuple[Case, Ran]] = []

    def flush() -> None:
        built = build_batch([c for c, _ in pending], root)
        outcomes.extend(safe_judge(c, eager, built[c.id]) for c, eager in pending)
        if progress:
            progress(f"{len(outcomes)} cases, last {pending[-1][0].id}")
        pending.clear()

    for case in cases:
        if case.skip:
            outcomes.append(Outcome(case, SKIPPED, f"not expressible: {case.skip}"))
            continue
        try:
            eager, why = run_eager(case)
        except Exception as e:  # the sweep's own failure: not the compiler's
            eager, why = None, f"sweep failed: {one_line(e)}"
        if why:
            outcomes.append(Outcome(case, SKIPPED, why))
            continue
        pending.append((case, eager))
        if len(pending) == batch:
            flush()
    if pending:
        flush()
    return outcomes


def run_eager(case: Case) -> tuple[Ran, str]:
    """Eager's run, and why the case cannot be judged ("" if it can)."""
    fn = eager_function(case)
    first, again = run(fn, case), run(fn, case)
    if first.exc is None and difference(again, first, exact(case)):
        return first, "nondeterministic in eager"
    return first, ""


def run(fn: Callable, case: Case, seed: int = 0) -> Ran:
    return run_on(fn, case.inputs, seed)


def run_on(fn: Callable, inputs: tuple, seed: int = 0) -> Ran:
    with quiet(), deadline(RUN_SECONDS):
        return call(fn, inputs, seed)


def eager_function(case: Case) -> Callable:
    namespace = {"torch": torch}
    exec(case.source("f"), namespace)
    return namespace["f"]


def safe_judge(case: Case, eager: Ran, built) -> Outcome:
    try:
        return judge(case, eager, built)
    except Exception as e:  # the sweep's own failure: not the compiler's
        return Outcome(case, SKIPPED, f"sweep failed: {one_line(e)}")


def judge(case: Case, eager: Ran, built: list[Lowered] | BaseException) -> Outcome:
    if isinstance(built, BaseException):
        if eager.exc is not None:
            return Outcome(case, SKIPPED, "eager raises")
        return Outcome(case, ERROR, f"build: {one_line(built)}")
    results = [(v.name.split("_")[0], *check(case, eager, v)) for v in built]
    if eager.exc is not None and all(r[1] == SKIPPED for r in results):
        return Outcome(case, SKIPPED, "eager raises", tuple(results), tuple(built))
    worst = max(results, key=lambda r: _RANK[r[1]])
    detail = f"{worst[0]}: {worst[2]}" if worst[2] else ""
    return Outcome(case, worst[1], detail, tuple(results), tuple(built))


def check(case: Case, eager: Ran, v: Lowered) -> tuple[str, str]:
    """The variant's class and why."""
    if v.fn is None:  # all fallback: the source runs, as eager did
        return (SKIPPED, "eager raises") if eager.exc else (v.kind, v.breaks[0])
    if v.name.startswith("cuda") and not case.inputs and not torch.cuda.is_available():
        return SKIPPED, "no tensor input: its cuda variant makes CUDA tensors"
    got = run(v.fn, case)
    if got.exc is not None and eager.exc is not None:
        return SKIPPED, "eager raises"
    if eager.exc is not None:
        return ERROR, f"ran where eager raised {one_line(eager.exc)}"
    if got.exc is not None:
        return ERROR, one_line(got.exc)
    d = difference(got, eager, case.precision)
    if d and any(
        not difference(got, r, case.precision) for r in others(case, eager, v)
    ):
        d = None
    if d and ties_taken_otherwise(case, got, eager):
        d = None
    if d and is_random(case, eager):
        return SKIPPED, "random (eager differs across seeds)"
    if d:
        return WRONG, d
    return v.kind, "; ".join(v.breaks) or ", ".join(v.externs)


def others(case: Case, eager: Ran, v: Lowered) -> Iterator[Ran]:
    """What else than eager a variant may agree with. For f16/bf16, eager run in
    float32 on upcast inputs, rounded to eager's dtypes: kernels compute in float32
    and round once, where eager rounds after every op, and cancellation can blow
    up those roundings (`vecdot`'s products); it is the reference of the other
    differential tests (tests/helpers.py) and of Inductor's OpInfo tests. For
    float32, eager in float64, rounded back: a result as close to the exact one as
    eager's is right (CPU eager's `group_norm` of a nearly constant input is 2e-4
    from it; CUDA's, which a cuda variant calls, is not). For a
    cuda variant, eager and that in the dtypes CUDA returns, which meta kernels
    give: float32 statistics of a bf16 layer norm (Note [Device outputs] in
    transpiler/ir/device_outputs.py)."""
    fn = eager_function(case)
    runs = [eager]
    low = any(t.dtype in LOW_PRECISION for _, t in case.inputs)
    if low and case.precision != "exact":
        runs.append(run_on(fn, upcast_inputs(case.inputs)))
        if runs[-1].exc is None:
            yield like(runs[-1], runs[0])
    single = any(t.dtype == torch.float32 for _, t in case.inputs)
    if single and case.precision != "exact":  # as close to exact as eager is
        exact = run_on(fn, upcast_inputs(case.inputs, (torch.float32,), torch.float64))
        if exact.exc is None:
            yield like(exact, runs[0])
    if v.name.startswith("cuda"):
        meta = run_on(fn, on_meta(case.inputs))
        yield from (like(r, meta) for r in runs if r.exc is None and meta.exc is None)


def ties_taken_otherwise(case: Case, got: Ran, eager: Ran) -> bool:
    """Whether `got` is a top-k as right as eager's, its positions among equal
    values taken otherwise: eager's own order there is its kernel's (CPU and GPU
    differ, and so do rows of other lengths), kernels take the first (Note [Top-k
    in rounds]). The values must be eager's exactly, and the positions must hold
    them, each once."""
    if case.op != "topk" or difference(got, eager, "exact") is None:
        return False
    call = ast.parse(case.call, mode="eval").body
    if not isinstance(call, ast.Call) or not isinstance(call.func, ast.Attribute):
        return False
    method = call.func.attr == "topk" and not (
        isinstance(call.func.value, ast.Name) and call.func.value.id == "torch"
    )
    args = [call.func.value, *call.args] if method else list(call.args)
    named = {k.arg: k.value for k in call.keywords}
    scope = {"torch": torch, **dict(case.inputs)}
    x = eval(compile(ast.Expression(args[0]), "<case>", "eval"), scope)
    dim = named.get("dim", args[2] if len(args) > 2 else None)
    dim = -1 if dim is None else ast.literal_eval(dim)
    (values, positions), (want, _) = got.out, eager.out
    if not _same(values, want) or not _same(x.gather(dim, positions), values):
        return False
    picked = positions.movedim(dim, -1).sort(-1).values
    return bool((picked.diff(dim=-1) != 0).all())


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Equal, NaN where the other is NaN."""
    return torch.equal(a.isnan(), b.isnan()) and torch.equal(
        a.nan_to_num(), b.nan_to_num()
    )


def is_random(case: Case, eager: Ran) -> bool:
    other = run(eager_function(case), case, seed=1)
    return other.exc is None and difference(other, eager, exact(case)) is not None


def exact(case: Case) -> str:
    """The precision that tells a nondeterministic result from a deterministic one."""
    return "uninitialized" if case.precision == "uninitialized" else "exact"


def one_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    first = next((ln for ln in text if ln.strip()), "")
    return f"{type(e).__name__}: {first[:200]}"


@contextlib.contextmanager
def deadline(seconds: float):
    """TimeoutError after `seconds` (SIGALRM: the main thread only, else no limit)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def expire(signum, frame):
        raise TimeoutError(f"took over {seconds:.0f} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


@contextlib.contextmanager
def quiet():
    """No warnings (Triton's interpreter computes masked-off lanes) and no stderr
    chatter from fallback notices."""
    with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
        warnings.simplefilter("ignore")
        yield


def batch_source(cases: list[Case]) -> str:
    parts = ["import torch\n"]
    for i, case in enumerate(cases):
        parts.append(f"# {case.id}\n{case.source(f'f{i}')}")
    return "\n\n".join(parts)


def build_batch(cases: list[Case], root: Path) -> dict[str, list[Lowered] | Exception]:
    """Per case id, its two variants; or the exception that broke its build."""
    try:
        with quiet(), deadline(BUILD_SECONDS):
            return build(cases, root)
    except Exception as e:  # any failure: bisect to find the case
        if len(cases) == 1:
            return {cases[0].id: e}
        half = len(cases) // 2
        return build_batch(cases[:half], root) | build_batch(cases[half:], root)


def build(cases: list[Case], root: Path) -> dict[str, list[Lowered]]:
    """Build the cases as one module; load its C++ and Triton code (they compile
    here, not at the first call, so a bad file fails the build)."""
    source = batch_source(cases)
    stem = "opinfo_" + hashlib.sha256(source.encode()).hexdigest()[:12]
    root.mkdir(parents=True, exist_ok=True)
    (root / f"{stem}.py").write_text(source)
    targets = []
    for i, case in enumerate(cases):
        inp = specs(dict(case.inputs))
        targets.append(
            Target(f"{stem}.py::f{i}", (Variant(inp, "cpu"), Variant(inp, "cuda")))
        )
    options = Options(targets=tuple(targets), root=root)
    compiled = compile_modules(options)
    with unformatted():
        files = render(compiled)
    module = import_generated(files, root, stem)
    if f"{stem}.cpp" in files:
        module._cpp._load()  # compiles the C++ file
    if f"{stem}_triton.py" in files:
        importlib.import_module(f"{module.__package__}.{stem}_triton")
    (mb,) = compiled.modules
    reasons = {name: stub.reason for name, stub in mb.stubs.items()}
    return {
        case.id: [lowered(vc, module, reasons) for vc in target.variants]
        for case, target in zip(cases, mb.targets)
    }


@contextlib.contextmanager
def unformatted():
    """Render without black, which takes most of a batch's build time: formatting
    changes no behaviour, and the golden tests check it."""
    with mock.patch.object(pipeline, "format_module", lambda text: text):
        yield


def lowered(vc, module, reasons: dict[str, str]) -> Lowered:
    """The variant, counted the way the module header counts it."""
    if vc.region is None:
        why = f"all fallback: {vc.fallback_reason}"
        return Lowered(vc.name, FALLBACK_CLASS, 0, (), (why,), None)
    steps = vc.steps
    stubs = vc.fallback_calls
    externs = sorted(
        {s.target for s in steps if isinstance(s, ExternCall) and s.computes}
    )
    kind = FALLBACK_CLASS if stubs else PARTLY if externs else COMPILED
    fn = module.__dict__[f"_{vc.name}"]
    return Lowered(
        vc.name,
        kind,
        sum(isinstance(s, KernelCall) for s in steps),
        tuple(externs),
        tuple(reasons.get(s.target, s.target) for s in stubs),
        on_gpu(fn) if vc.name.startswith("cuda") else fn,
        inspect_source(fn),
    )


def inspect_source(fn: Callable) -> str:
    try:
        return inspect.getsource(fn)
    except (OSError, TypeError):
        return ""


if __name__ == "__main__":
    from tests.opinfo.cli import main

    raise SystemExit(main())
