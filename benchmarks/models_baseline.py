"""Where transpile stands on real library model code.

    python benchmarks/models_baseline.py [--models gpt2,bert] [--keep DIR] [--json FILE]
                                         [--verbose]

For each tiny random-weight model of tests/models/factories.py (Hugging Face
transformers and timm classes, transpiled straight from the library), it

1. runs `transpile <library class> --factory ... --device cpu -o <temp dir>` and
   `transpile ... --explain`, timing the first and keeping both outputs;
2. runs tests/models/check.py on it: a fresh process in which `transpiler` (and
   libcst, black) cannot be imported imports the generated module and calls it
   next to eager on new inputs;
3. prints one table: transpile time and exit code, whether the generated module
   imports, whether its outputs match eager (values and output type), whether a
   compiled variant ran (or the guards sent the call to eager), the number of graph
   breaks, the ATen ops in generated kernels / extern calls (from --explain) / ATen
   ops run inside fallback code, and the first graph-break reason (or the error).

Nothing is written into the repository's generated/ directory: every output goes to
a temporary directory (removed afterwards unless --keep names one).

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


def _transpile_cmd(model: Model, out: Path, explain: bool) -> list:
    args = [model.target, "--factory", model.factory, "--device", "cpu"]
    for name, spec in model.inputs.items():
        args += ["--example", f"{name}={spec}"]
    args += ["--explain"] if explain else ["-o", str(out)]
    command = "import sys; from transpiler.cli import main; sys.exit(main())"
    return [sys.executable, "-c", command, *args]


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


def measure(model: Model, work: Path, verbose: bool) -> dict:
    row: dict = {"model": model.name}
    out = work / f"gen_{model.name}"
    env = _env(model)
    cmd = _transpile_cmd(model, out, explain=False)
    start = time.perf_counter()
    r = subprocess.run(
        cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=TIMEOUT_S
    )
    row["seconds"] = time.perf_counter() - start
    row["rc"] = r.returncode
    row["stderr"] = r.stderr.strip()
    ex = subprocess.run(
        _transpile_cmd(model, out, explain=True),
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
        [sys.executable, "-m", "tests.models.check", model.name, f"{out.name}.{stem}"],
        cwd=ROOT,
        env=_env(model, [str(work)]),
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
    )
    result = _last_json(check.stdout)
    if result is None:
        tail = (check.stderr or check.stdout).strip().splitlines()
        row.update(imports=False, import_error=tail[-1] if tail else "no output")
        return row
    problems = result["problems"]
    row.update(
        imports=True,
        problems=problems,
        matches=not any("output" in p or "state" in p for p in problems),
        compiled_ran=result["cpu_variant_calls"] > 0
        and not any("ran the source" in p for p in problems),
        fallback_ops=result["fallback_ops"],
        import_warnings=result["import_warnings"],
    )
    if verbose:
        print(check.stdout, check.stderr, sep="\n", file=sys.stderr)
    return row


def _error_line(stderr: str) -> str:
    lines = [x for x in stderr.splitlines() if x.strip()]
    errors = [x for x in lines if x.startswith("transpile: error")]
    return (errors or lines or ["(no message)"])[-1]


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
        first = r.get("error") or ""
        if not first and r.get("breaks"):
            b = r["breaks"][0]
            first = f"{b['at']}: {b['reason']}"
        if not first and "import_error" in r:
            first = r["import_error"]
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
                _yes(r.get("compiled_ran")) if ok else "-",
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
        for problem in r.get("problems", []):
            out.append(f"{r['model']}: {problem}")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    names = [m.name for m in MODELS]
    p.add_argument("--models", default=",".join(names), help=",".join(names))
    p.add_argument("--keep", type=Path, help="keep the generated code here")
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
    rows = []
    try:
        for model in (m for m in MODELS if m.name in wanted):
            print(f"... {model.name}", file=sys.stderr, flush=True)
            rows.append(measure(model, work, args.verbose))
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
