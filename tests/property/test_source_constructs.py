"""A fuzzer of source constructs feeding the frontend: random small modules and
functions (tests/property/source_grammar.py) built with a CPU and a CUDA variant.

Every program must end one of three ways:
- compiled (with or without fallback code): the exported module (C++ kernels) and the
  `_cuda_0` variant (Triton's interpreter, called with the instance first) agree with
  the source on outputs, inputs, parameters, buffers and plain attributes after each
  of two calls, and print the same; transpile itself prints nothing;
- a user error: eager raises under the declared inputs, and `build` raises a one-line
  `UserError` naming the exception and a `file:line` of the traceback;
- where the raise depends on tensor data (or on values only fallback code computes),
  the build succeeds and both backends raise the same exception type when called.
A raise decided by shapes and Python values alone must be a user error.

The test counts outcomes and checks the generator reaches every kind. It runs
CI_EXAMPLES derandomized programs (each is a build and a small C++ compile) and stops
at the first failure, printing the program whole (TRANSPILE_FUZZ_SHRINK=1 shrinks it
first, slowly). For a sweep set TRANSPILE_FUZZ_EXAMPLES=500 (and TRANSPILE_FUZZ_SEED=n
for another search): failures are then collected rather than stopping the run, written
as JSON lines to TRANSPILE_FUZZ_REPORT (default: fuzz_failures.jsonl in pytest's temp
dir) and counted at the end.
"""

from __future__ import annotations

import contextlib
import copy
import importlib
import io
import json
import math
import os
import signal
import sys
import threading
import traceback
import warnings
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import torch
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed

from tests.compile_helpers import import_generated, unique_name
from tests.property.source_grammar import programs
from tests.property.source_program import Program
from transpiler.api import build
from transpiler.errors import UserError
from transpiler.options import Options, ScalarSpec, Target, TensorSpec, Variant

pytestmark = [  # masked-off lanes of Triton's interpreter compute inf * 0 and such
    pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore:overflow:RuntimeWarning"),
    pytest.mark.filterwarnings("ignore::UserWarning"),
    pytest.mark.slow,
]

SWEEP = int(os.environ.get("TRANSPILE_FUZZ_EXAMPLES", "0"))
CI_EXAMPLES = 120  # about 40 s on 2 cores with a cold C++ cache
CALLS = 2


class Failure(AssertionError):
    """A program the compiler got wrong; `kind` names the class of failure."""

    def __init__(self, kind: str, detail: str = ""):
        super().__init__(f"{kind}: {detail}" if detail else kind)
        self.kind = kind
        self.detail = detail


# ------------------------------------------------------------------ one program


def _specs(prog: Program) -> tuple:
    out = []
    for name, spec in prog.declared():
        if spec[0] == "scalar":
            out.append((name, ScalarSpec(spec[1])))
        else:
            out.append((name, TensorSpec(spec[1], spec[2])))
    return tuple(out)


def _snapshot(value: Any) -> Any:
    """A copy that later in-place writes cannot change."""
    if isinstance(value, torch.Tensor):
        return value.detach().clone()
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        items = [_snapshot(v) for v in value]
        return items if isinstance(value, list) else type(value)(items)
    if isinstance(value, dict):
        return {k: _snapshot(v) for k, v in value.items()}
    return copy.deepcopy(value)


def _state(obj: Any) -> dict:
    """Parameters, buffers and plain attributes of a module, copied."""
    if not isinstance(obj, torch.nn.Module):
        return {}
    plain = {
        k: _snapshot(v)
        for k, v in vars(obj).items()
        if not k.startswith("_") and k != "training"
    }
    return {**plain, **{k: v.clone() for k, v in obj.state_dict().items()}}


def _same(got: Any, want: Any, where: str, rtol: float, atol: float) -> None:
    if isinstance(want, torch.Tensor):
        if not isinstance(got, torch.Tensor):
            raise AssertionError(f"{where}: {type(got).__name__}, want a tensor")
        if got.dtype != want.dtype or got.shape != want.shape:
            raise AssertionError(
                f"{where}: {got.dtype}{list(got.shape)}, want "
                f"{want.dtype}{list(want.shape)}"
            )
        torch.testing.assert_close(
            got.detach(), want, rtol=rtol, atol=atol, equal_nan=True, msg=where
        )
    elif isinstance(want, (list, tuple)):
        if type(got) is not type(want) or len(got) != len(want):
            raise AssertionError(f"{where}: {got!r}, want {want!r}")
        for i, (g, w) in enumerate(zip(got, want)):
            _same(g, w, f"{where}[{i}]", rtol, atol)
    elif isinstance(want, dict):
        if not isinstance(got, dict) or list(got) != list(want):
            raise AssertionError(f"{where}: {got!r}, want {want!r}")
        for k in want:
            _same(got[k], want[k], f"{where}[{k!r}]", rtol, atol)
    elif isinstance(want, float) and isinstance(got, float):
        if not (got == want or math.isclose(got, want, rel_tol=rtol, abs_tol=atol)):
            if not (math.isnan(got) and math.isnan(want)):
                raise AssertionError(f"{where}: {got!r}, want {want!r}")
    elif type(got) is not type(want) or got != want:
        raise AssertionError(f"{where}: {got!r}, want {want!r}")


class Call:
    """What one call did: its result or exception, and what it left behind."""

    def __init__(self, fn, obj, args: dict, seed: int):
        out = io.StringIO()
        self.error: BaseException | None = None
        self.result = None
        torch.manual_seed(seed)
        with (
            torch.no_grad(),
            contextlib.redirect_stdout(out),
            warnings.catch_warnings(),
        ):
            warnings.simplefilter("ignore")
            try:
                self.result = _snapshot(fn(**args))
            except Failure:  # the time limit
                raise
            except Exception as e:
                self.error = e
        self.stdout = out.getvalue()
        self.inputs = _snapshot(args)
        self.state = _state(obj)


def _eager(module, prog: Program) -> tuple[Any, list[Call]]:
    """Two calls of the source on one instance (the first one raising ends it)."""
    obj = _instance(getattr(module, prog.name), prog)
    calls = []
    for k in range(CALLS):
        calls.append(Call(obj, obj, prog.make_inputs(k), 100 + k))
        if calls[-1].error is not None:
            break
    return obj, calls


def _instance(cls_or_fn, prog: Program):
    if prog.kind == "function":
        return cls_or_fn
    torch.manual_seed(0)
    return cls_or_fn().eval()


def _build(prog: Program, root: Path) -> tuple[str, Any]:
    root.mkdir(parents=True, exist_ok=True)
    stem = unique_name("src")
    (root / f"{stem}.py").write_text(prog.source())
    if str(root) not in sys.path:
        sys.path.insert(0, str(root))
    importlib.invalidate_caches()
    return stem, importlib.import_module(stem)


def _transpile(prog: Program, root: Path, stem: str) -> dict[str, str] | UserError:
    spec = _specs(prog)
    target = Target(
        f"{stem}.py::{prog.name}", (Variant(spec, "cpu"), Variant(spec, "cuda"))
    )
    printed = io.StringIO()
    try:
        with contextlib.redirect_stdout(printed), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            files = build(Options(targets=(target,), root=root))
    except UserError as e:
        return e
    except Failure:
        raise
    except Exception as e:
        raise Failure(f"transpile crashed: {type(e).__name__}", _where(e)) from e
    if printed.getvalue():
        raise Failure("transpile printed to stdout", printed.getvalue()[:200])
    return files


def _where(e: BaseException) -> str:
    """The exception's message and the innermost frame of the transpiler."""
    frames = [
        f for f in traceback.extract_tb(e.__traceback__) if "transpiler" in f.filename
    ]
    at = ""
    if frames:
        f = frames[-1]
        at = f" at {f.filename.split('transpiler/')[-1]}:{f.lineno} ({f.name})"
    return f"{str(e).strip().splitlines()[0] if str(e).strip() else ''}{at}"


def _check_user_error(err: UserError, want: BaseException, stem: str) -> None:
    text = str(err)
    if "\n" in text:
        raise Failure("user error is not one line", text)
    if type(want).__name__ not in text:
        raise Failure("user error does not name the exception", text)
    lines = {
        f.lineno
        for f in traceback.extract_tb(want.__traceback__)
        if Path(f.filename).name == f"{stem}.py"
    }
    if err.file != f"{stem}.py" or err.line not in lines:
        raise Failure(
            "user error points elsewhere",
            f"{text} (eager raised at lines {sorted(lines)})",
        )


def _variant(generated, device: str):
    return generated.__dict__.get(f"_{device}_0"), generated.__dict__.get(
        f"_guards_{device}_0"
    )


def _run_backend(generated, prog, backend: str, eager: list[Call], rtol, atol):
    exported = getattr(generated, prog.name)
    obj = _instance(exported, prog)
    _, cpu_guards = _variant(generated, "cpu")
    cuda, _ = _variant(generated, "cuda")
    self_ = (obj,) if prog.kind == "module" else ()
    for k, want in enumerate(eager):
        args = prog.make_inputs(k)
        if cpu_guards is not None:
            with torch.no_grad(), warnings.catch_warnings():
                warnings.simplefilter("ignore")
                missed = cpu_guards(*self_, **args)
            if missed is not None and k == 0:
                raise Failure("guards fail for the declared inputs", missed)
            if missed is not None and backend == "triton":
                return  # the variant does not serve this call; eager would
        if backend == "cpu":
            fn = obj if prog.kind == "module" else exported
        else:
            fn = lambda **kw: cuda(*self_, **kw)  # noqa: E731
        got = Call(fn, obj, args, 100 + k)
        where = f"{backend} call {k}"
        if want.error is not None:
            if got.error is None:
                raise Failure(
                    "generated code does not raise",
                    f"{where}: eager raised {type(want.error).__name__}: "
                    f"{_first(want.error)}",
                )
            if type(got.error) is not type(want.error):
                raise Failure(
                    "generated code raises another exception",
                    f"{where}: {type(got.error).__name__}: {_first(got.error)}; eager "
                    f"{type(want.error).__name__}: {_first(want.error)}",
                )
            if got.stdout != want.stdout:
                raise Failure(
                    "stdout differs", f"{where}: {got.stdout!r}, want {want.stdout!r}"
                )
            return
        if got.error is not None:
            raise Failure(
                f"generated code raises {type(got.error).__name__}",
                f"{where}: {_first(got.error)}{_at(got.error)}",
            ) from got.error
        for what, g, w in (
            ("output", got.result, want.result),
            ("inputs", got.inputs, want.inputs),
            ("state", got.state, want.state),
        ):
            try:
                _same(g, w, f"{where} {what}", rtol, atol)
            except AssertionError as e:
                raise Failure(f"{what} differs", str(e)[:600]) from None
        if got.stdout != want.stdout:
            raise Failure(
                "stdout differs", f"{where}: {got.stdout!r}, want {want.stdout!r}"
            )


def _first(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0][:300] if text else ""


def _at(e: BaseException) -> str:
    tb = traceback.extract_tb(e.__traceback__)
    return f" (at {Path(tb[-1].filename).name}:{tb[-1].lineno})" if tb else ""


TIME_LIMIT = 120  # seconds for one program: eager, build and both backends


@contextlib.contextmanager
def _time_limit(seconds: int):
    """Fail a program that hangs (a loop the generated code never leaves)."""
    if not hasattr(signal, "setitimer") or threading.current_thread() is not (
        threading.main_thread()
    ):
        yield
        return

    def expire(signum, frame):
        raise Failure("timeout", f"no result after {seconds} s")

    old = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def check_program(prog: Program, root: Path) -> str:
    """Build and run one program; returns its outcome, raises Failure."""
    with _time_limit(TIME_LIMIT):
        return _check_program(prog, root)


def _check_program(prog: Program, root: Path) -> str:
    stem, source_module = _build(prog, root)
    _, eager = _eager(source_module, prog)
    files = _transpile(prog, root, stem)
    first = eager[0].error
    if isinstance(files, UserError):
        if first is None:
            raise Failure("user error where eager runs", str(files))
        _check_user_error(files, first, stem)
        return "user error"
    planned = prog.planned
    if (
        first is not None
        and planned is not None
        and planned.static
        and planned.error == type(first).__name__
    ):
        raise Failure(
            "static error not reported",
            f"eager raises {type(first).__name__}: {_first(first)}",
        )
    try:
        generated = import_generated(files, root, stem)
    except Failure:
        raise
    except Exception as e:
        raise Failure(
            f"generated module does not import: {type(e).__name__}", _first(e)
        ) from e
    rtol, atol = (1e-4, 1e-5) if prog.loose else (1e-5, 1e-6)
    backends = ["cpu"]
    if _variant(generated, "cuda")[0] is not None:
        backends.append("triton")
    for backend in backends:
        _run_backend(generated, prog, backend, eager, rtol, atol)
    if first is not None:
        return "raises when called"
    if _variant(generated, "cpu")[0] is None:
        return "all eager"
    return "fallback" if "_fallback_" in files[f"{stem}.py"] else "compiled"


# ------------------------------------------------------------------------ tests


def _report(prog: Program, failure: Failure) -> dict:
    return {
        "kind": failure.kind,
        "detail": failure.detail,
        "declared": [[n, repr(s)] for n, s in prog.declared()],
        "planned": repr(prog.planned),
        "source": prog.source(),
    }


def _settings(examples: int):
    """Derandomized (CI sees the same programs every run) unless TRANSPILE_FUZZ_SEED
    is set; no shrinking unless TRANSPILE_FUZZ_SHRINK=1 (each step is a build, and a
    program's source is printed whole anyway)."""
    phases = [Phase.explicit, Phase.generate]
    if os.environ.get("TRANSPILE_FUZZ_SHRINK") == "1":
        phases.append(Phase.shrink)
    seed = os.environ.get("TRANSPILE_FUZZ_SEED")
    decorate = settings(
        max_examples=examples,
        deadline=None,
        derandomize=not seed,
        phases=phases,
        report_multiple_bugs=False,
        suppress_health_check=list(HealthCheck),
        database=None,
    )
    if seed:
        return lambda f: hypothesis_seed(int(seed))(decorate(f))
    return decorate


def test_source_constructs_compile_fall_back_or_fail_cleanly(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    pytest.importorskip("triton")
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("TRITON_INTERPRET is not 1 (set by tests/conftest.py without GPU)")
    counts: Counter[str] = Counter()
    failures: list[dict] = []
    report = Path(
        os.environ.get("TRANSPILE_FUZZ_REPORT")
        or tmp_path_factory.getbasetemp() / "fuzz_failures.jsonl"
    )

    @_settings(SWEEP or CI_EXAMPLES)
    @given(prog=programs())
    def run(prog: Program) -> None:
        root = tmp_path_factory.mktemp("fuzz")
        try:
            counts[check_program(prog, root)] += 1
        except Failure as failure:
            if not SWEEP:
                raise AssertionError(
                    f"{failure}\n\ndeclared: {prog.declared()}\n\n{prog.source()}"
                ) from failure
            counts["FAILED"] += 1
            failures.append(_report(prog, failure))
            with report.open("a") as f:
                f.write(json.dumps(failures[-1]) + "\n")

    run()
    print(f"\noutcomes: {dict(counts)}")
    if failures:
        kinds = Counter(f["kind"] for f in failures)
        raise AssertionError(
            f"{len(failures)} failing programs (written to {report}): {dict(kinds)}"
        )
    for outcome in ("compiled", "fallback", "user error"):
        assert counts[outcome], f"the generator never reached {outcome!r}: {counts}"
