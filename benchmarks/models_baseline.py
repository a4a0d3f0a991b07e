"""Where transpile stands on real library model code.

    python benchmarks/models_baseline.py [--models gpt2,bert] [--keep DIR] [--json FILE]
                                         [--unwrap] [--interpret-library] [--verbose]

For each tiny random-weight model of tests/models/factories.py (Hugging Face
transformers and timm classes, transpiled straight from the library), it

1. runs `transpile <library class> --factory ... --device cpu -o <temp dir>` and
   `transpile ... --explain`, timing the first and keeping both outputs;
2. imports the generated module in a fresh process in which `transpiler` (and
   libcst, black) cannot be imported, builds the model with the factory, moves the
   same instance onto the generated class, and calls both on new random inputs;
3. prints one table: transpile time and exit code, whether the generated module
   imports, whether its outputs match eager (values and output type), whether a
   compiled variant ran (or the guards sent the call to eager), the number of graph
   breaks, the ATen ops in generated kernels / extern calls (from --explain) / ATen
   ops dispatched at run time by fallback code or eager fallback, and the first
   graph-break reason (or the error).

Nothing is written into the repository's generated/ directory: every output goes to
a temporary directory (removed afterwards unless --keep names one).

--unwrap and --interpret-library are probes, not the baseline. --unwrap transpiles
with each library class's `forward` replaced by `inspect.unwrap(forward)` (the
decorators of transformers stripped), to show the graph breaks that the decorator
problem hides. --interpret-library makes the compiler treat the source files of the
target's top-level package (transformers, timm) as the user's, so their functions and
modules are interpreted instead of being called (modules) or becoming graph breaks
(functions): it shows what stands behind "outside PyTorch". Both patch the compiler
in the child process only; no file is changed.

timm needs torchvision at import time; when the real one does not import, the
stand-in in tests/models/_stubs is put on PYTHONPATH for the timm models only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.models.factories import MODELS, STUBS, Model  # noqa: E402

F32_TOL = (1e-4, 1e-5)  # (rtol, atol)
CHECK_SEED = 1234  # inputs the compiler never saw
TIMEOUT_S = 600

# --------------------------------------------------------------------- driver


def _env(model: Model, extra: list[str] = ()) -> dict[str, str]:
    env = dict(os.environ)
    paths = [str(ROOT), *extra]
    if model.timm and not _real_torchvision():
        paths.append(str(STUBS))
    old = env.get("PYTHONPATH")
    env["PYTHONPATH"] = os.pathsep.join(paths + ([old] if old else []))
    env.setdefault("TRANSFORMERS_VERBOSITY", "error")
    env["HF_HUB_OFFLINE"] = "1"
    return env


_TV: list[bool] = []


def _real_torchvision() -> bool:
    if not _TV:
        probe = "import torchvision.ops.misc"
        r = subprocess.run([sys.executable, "-c", probe], capture_output=True)
        _TV.append(r.returncode == 0)
    return _TV[0]


def _transpile_cmd(model: Model, out: Path, probes: list, explain: bool) -> list:
    args = [model.target, "--factory", model.factory, "--device", "cpu"]
    for name, spec in model.inputs.items():
        args += ["--example", f"{name}={spec}"]
    args += ["--explain"] if explain else ["-o", str(out)]
    prefix = [sys.executable, str(Path(__file__).resolve()), "--_transpile"]
    return [*prefix, *probes, "--", *args]


def _run_transpile(argv: list[str], probes: list[str]) -> int:
    """In a child process: `transpile argv`, with the probes asked for applied
    first (see --unwrap and --interpret-library)."""
    import importlib
    import inspect

    mod, _, qual = argv[0].partition("::")
    cls = getattr(importlib.import_module(mod), qual)
    if "--_unwrap" in probes:
        for klass in _library_classes(cls):
            fwd = klass.__dict__.get("forward")
            if fwd is not None and hasattr(fwd, "__wrapped__"):
                klass.forward = inspect.unwrap(fwd)
    if "--_interpret" in probes:
        from transpiler.frontend.source import SourceCache

        package = Path(sys.modules[cls.__module__.split(".")[0]].__file__).parent
        is_user_file = SourceCache.is_user_file

        def library_is_user(self, path):
            if path and Path(path).resolve().is_relative_to(package):
                return str(path).endswith(".py")
            return is_user_file(self, path)

        SourceCache.is_user_file = library_is_user
    from transpiler.cli import main

    return main(argv)


def _library_classes(cls) -> list[type]:
    """The target class and every nn.Module class defined in its package."""
    import inspect

    from torch import nn

    package = cls.__module__.split(".")[0]
    found = [cls]
    for name, mod in list(sys.modules.items()):
        if not name.startswith(package + ".") or mod is None:
            continue
        for value in list(vars(mod).values()):
            if (
                inspect.isclass(value)
                and issubclass(value, nn.Module)
                and value.__module__ == name
                and value not in found
            ):
                found.append(value)
    return found


def _parse_explain(text: str) -> dict:
    info: dict = {"breaks": [], "kernel_ops": None, "total_ops": None, "extern": 0}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        s = line.strip()
        m = re.match(r"ATen ops in generated kernels: (\d+) of (\d+)", s)
        if m:
            info["kernel_ops"], info["total_ops"] = int(m[1]), int(m[2])
        m = re.match(r"extern calls: (\d+)", s)
        if m:
            info["extern"] = int(m[1])
        m = re.match(r"graph break: (\S+): (.*)", s)
        if m:
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            info["breaks"].append({"at": m[1], "reason": m[2], "code": code})
        m = re.match(r"runs the source: (.*) \((\S+): (.*)\)$", s)
        if m:
            info["breaks"].append({"at": m[2], "reason": m[1], "code": m[3]})
            info["all_fallback"] = True
    return info


def _last_json(stdout: str) -> dict | None:
    for line in reversed(stdout.splitlines()):
        if line.startswith("{"):
            try:
                return json.loads(line)
            except ValueError:
                return None
    return None


def measure(model: Model, work: Path, probes: list, verbose: bool) -> dict:
    row: dict = {"model": model.name}
    out = work / f"gen_{model.name}"
    env = _env(model)
    cmd = _transpile_cmd(model, out, probes, explain=False)
    start = time.perf_counter()
    r = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    row["seconds"] = time.perf_counter() - start
    row["rc"] = r.returncode
    row["stderr"] = r.stderr.strip()
    ex = subprocess.run(
        _transpile_cmd(model, out, probes, explain=True),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    row["explain"] = ex.stdout
    row.update(_parse_explain(ex.stdout))
    if verbose:
        print(f"== {model.name}: transpile rc={r.returncode}", file=sys.stderr)
        print(r.stderr, ex.stdout, ex.stderr, sep="\n", file=sys.stderr)
    if r.returncode != 0:
        row["error"] = _error_line(r.stderr)
        return row
    stem = Path(model.target.split("::")[0].replace(".", "/")).name
    check = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--_check", model.name],
        cwd=work,
        env=_env(model, [str(work)]) | {"MODELS_BASELINE_MODULE": f"{out.name}.{stem}"},
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    result = _last_json(check.stdout)
    if result is None:
        tail = (check.stderr or check.stdout).strip().splitlines()
        result = {"imports": False, "import_error": tail[-1] if tail else "no output"}
    row.update(result)
    if verbose:
        print(check.stdout, check.stderr, sep="\n", file=sys.stderr)
    return row


def _error_line(stderr: str) -> str:
    lines = [x for x in stderr.splitlines() if x.strip()]
    errors = [x for x in lines if x.startswith("transpile: error")]
    return (errors or lines or ["(no message)"])[-1]


# ------------------------------------------------------------- check (child)


class _NoCompiler:
    """A meta path finder that refuses the compiler's own packages, so the import
    check proves the generated module runs without them."""

    BLOCKED = ("transpiler", "libcst", "black")

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in self.BLOCKED:
            raise ImportError(f"{name} is blocked: generated code must not need it")
        return None


def _inputs(model: Model, torch) -> dict:
    gen = torch.Generator().manual_seed(CHECK_SEED)
    out = {}
    for name, spec in model.inputs.items():
        m = re.fullmatch(r"(\w+)\[([\d,]*)\]", spec)
        shape = tuple(int(d) for d in m[2].split(",") if d)
        if name == "attention_mask":
            mask = torch.ones(shape, dtype=torch.int64)
            mask[-1, shape[-1] // 2 :] = 0  # the last row is padded
            out[name] = mask
        elif m[1] == "i64":
            out[name] = torch.randint(0, 128, shape, generator=gen)
        else:
            out[name] = torch.randn(shape, generator=gen)
    return out


def _flatten(value) -> list:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, dict):  # ModelOutput is an OrderedDict of its set fields
        return [t for v in value.values() for t in _flatten(v)]
    if isinstance(value, (tuple, list)):
        return [t for v in value for t in _flatten(v)]
    return [] if value is None else [value]


def _check(name: str) -> None:
    """In a fresh process: import the generated module, run it against eager."""
    import copy
    import importlib
    import warnings

    sys.meta_path.insert(0, _NoCompiler())
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    from tests.models import factories

    model = next(m for m in MODELS if m.name == name)
    result: dict = {"imports": False}
    try:
        with warnings.catch_warnings(record=True) as import_warnings:
            warnings.simplefilter("always")
            gen = importlib.import_module(os.environ["MODELS_BASELINE_MODULE"])
        result["imports"] = True
        result["import_warnings"] = [str(w.message) for w in import_warnings]
        result["compiler_loaded"] = any(
            m.split(".")[0] in _NoCompiler.BLOCKED for m in sys.modules
        )
    except Exception as e:
        result["import_error"] = f"{type(e).__name__}: {e}"
        print(json.dumps(result))
        return
    qualname = model.target.split("::")[1]
    torch.manual_seed(0)
    eager = getattr(factories, model.factory.split("::")[1])().eval()
    compiled = copy.deepcopy(eager)
    compiled.__class__ = getattr(gen, qualname)  # same instance, generated class

    # which generated functions run, and ATen ops dispatched outside kernels
    counts = {"variant": 0, "fallback": 0}
    where = {"depth": 0}

    def counting(fn, kind):
        def wrapper(*args, **kwargs):
            counts[kind] += 1
            where["depth"] += kind == "fallback"
            try:
                return fn(*args, **kwargs)
            finally:
                where["depth"] -= kind == "fallback"

        return wrapper

    for key, value in list(vars(gen).items()):
        if re.fullmatch(r"_cpu_\d+", key):
            setattr(gen, key, counting(value, "variant"))
        elif re.fullmatch(r"_fallback_\d+", key):
            setattr(gen, key, counting(value, "fallback"))

    class Ops(TorchDispatchMode):
        def __init__(self):
            super().__init__()
            self.fallback = 0
            self.outside = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if where["depth"]:
                self.fallback += 1
            else:
                self.outside += 1
            return func(*args, **(kwargs or {}))

    inputs = _inputs(model, torch)
    try:
        with torch.no_grad(), warnings.catch_warnings(record=True) as run_warnings:
            warnings.simplefilter("always")
            want = eager(**inputs)
            got = compiled(**inputs)
            ops = Ops()
            with ops:
                compiled(**inputs)
    except Exception as e:
        result["run_error"] = f"{type(e).__name__}: {str(e).splitlines()[0]}"
        print(json.dumps(result))
        return
    eager_fallback = [
        str(w.message)
        for w in run_warnings
        if "running the source (eager) code" in str(w.message)
    ]
    result["eager_fallback"] = eager_fallback
    result["variant_calls"] = counts["variant"]
    result["fallback_calls"] = counts["fallback"]
    result["compiled_ran"] = counts["variant"] > 0 and not eager_fallback
    # ops of the run that compiled nothing count as fallback too
    result["fallback_ops"] = ops.fallback + (0 if counts["variant"] else ops.outside)
    result["want_type"] = type(want).__name__
    result["got_type"] = type(got).__name__
    a, b = _flatten(want), _flatten(got)
    if len(a) != len(b):
        result["matches"] = False
        result["mismatch"] = f"{len(a)} eager outputs, {len(b)} compiled"
    else:
        err = 0.0
        ok = True
        for x, y in zip(a, b):
            if isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor):
                if x.shape != y.shape or x.dtype != y.dtype:
                    ok = False
                    continue
                err = max(err, (x.double() - y.double()).abs().max().item())
                ok &= torch.allclose(x, y, rtol=F32_TOL[0], atol=F32_TOL[1])
            else:
                ok &= x == y
        result["matches"] = bool(ok)
        result["max_abs_err"] = err
    print(json.dumps(result))


# ---------------------------------------------------------------------- table


def _yes(value) -> str:
    return {True: "yes", False: "NO", None: "-"}[value]


def table(rows: list[dict]) -> str:
    head = [
        "model",
        "transpile s",
        "exit",
        "imports?",
        "matches eager?",
        "compiled ran?",
        "#breaks",
        "ops kern/extern/fallback",
        "first break reason (or error)",
    ]
    body = []
    for r in rows:
        ok = r.get("rc") == 0
        matches = r.get("matches") if ok else None
        match_text = _yes(matches)
        if matches and r.get("want_type") != r.get("got_type"):
            match_text = f"values; {r['got_type']}, not {r['want_type']}"
        elif "run_error" in r:
            match_text = "raises"
        first = r.get("error") or ""
        if not first and r.get("breaks"):
            b = r["breaks"][0]
            first = f"{b['at']}: {b['reason']}"
        if not first and "import_error" in r:
            first = r["import_error"]
        if not first and "run_error" in r:
            first = r["run_error"]
        kern = r.get("kernel_ops")
        ops = "-"
        if ok:
            fb = r.get("fallback_ops", "?")
            ops = f"{kern if kern is not None else 0}/{r.get('extern', 0)}/{fb}"
        body.append(
            [
                r["model"],
                f"{r['seconds']:.1f}",
                str(r["rc"]),
                _yes(r.get("imports")) if ok else "-",
                match_text,
                _yes(r.get("compiled_ran")) if ok and "run_error" not in r else "-",
                str(len(r.get("breaks", []))) if ok else "-",
                ops,
                first[:110],
            ]
        )
    widths = [max(len(x[i]) for x in [head, *body]) for i in range(len(head))]
    fmt = lambda cells: " | ".join(c.ljust(w) for c, w in zip(cells, widths))  # noqa
    lines = [fmt(head), "-+-".join("-" * w for w in widths)]
    return "\n".join(lines + [fmt(b) for b in body])


def breaks_report(rows: list[dict]) -> str:
    out = []
    for r in rows:
        items = r.get("breaks", [])
        if r.get("error"):
            out.append(f"{r['model']}: transpile failed: {r['error']}")
        for b in items:
            out.append(f"{r['model']}: {b['at']}: {b['reason']}\n      {b['code']}")
        if r.get("import_warnings"):
            out.append(f"{r['model']}: import warned: {r['import_warnings']}")
        if r.get("eager_fallback"):
            out.append(f"{r['model']}: ran eager: {r['eager_fallback'][0]}")
        if r.get("run_error"):
            out.append(f"{r['model']}: calling it raised {r['run_error']}")
        if r.get("mismatch"):
            out.append(f"{r['model']}: {r['mismatch']}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["--_transpile"]:
        split = argv.index("--")
        return _run_transpile(argv[split + 1 :], argv[1:split])
    if argv[:1] == ["--_check"]:
        _check(argv[1])
        return 0
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    names = [m.name for m in MODELS]
    p.add_argument("--models", default=",".join(names), help=",".join(names))
    p.add_argument("--keep", type=Path, help="keep the generated code here")
    p.add_argument("--unwrap", action="store_true", help="probe (see docstring)")
    p.add_argument(
        "--interpret-library", action="store_true", help="probe (see docstring)"
    )
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--json", type=Path, help="also write every row as JSON here")
    args = p.parse_args(argv)
    wanted = [n.strip() for n in args.models.split(",") if n.strip()]
    unknown = [n for n in wanted if n not in names]
    if unknown:
        p.error(f"unknown models {unknown}; known: {', '.join(names)}")
    if args.keep is not None:
        args.keep = args.keep.resolve()
        if args.keep.is_relative_to(ROOT / "generated"):
            p.error("--keep must not be inside the repository's generated/")
        args.keep.mkdir(parents=True, exist_ok=True)
    work = args.keep or Path(tempfile.mkdtemp(prefix="models_baseline_"))
    probes = ["--_unwrap"] * args.unwrap + ["--_interpret"] * args.interpret_library
    rows = []
    try:
        for model in (m for m in MODELS if m.name in wanted):
            print(f"... {model.name}", file=sys.stderr, flush=True)
            rows.append(measure(model, work, probes, args.verbose))
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print(table(rows))
    print()
    print("Graph breaks and failures:")
    print(breaks_report(rows) or "  none")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
