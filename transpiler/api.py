"""Build, check or explain every target of a run: what the command line runs.

The stages, in order, are in pipeline.py; this module runs them for `transpile` and
writes (atomically), diffs (`--check`) or reports (`--explain`) what they make.
"""

from __future__ import annotations

import difflib
import os
import sys
import tempfile
from functools import partial
from pathlib import Path

from runtime_shim.cpp import current_umask
from transpiler.autotune import Bench, bench_for, tune
from transpiler.build import TargetCode, VariantCode
from transpiler.errors import UserError
from transpiler.explain import compiled_nothing, report
from transpiler.ir.program import KernelCall
from transpiler.options import Options
from transpiler.pipeline import build_files, compile_modules, render
from transpiler.text import count


class Progress:
    """What a run tells the person at the terminal, on stderr.

    `verbosity`: -1 nothing (warnings and errors still print), 0 a line per target
    as it is built and a closing summary, 1 also a line per variant.
    """

    def __init__(self, options: Options, verbosity: int = 0) -> None:
        self.out = options.out.as_posix()
        self.verbosity = verbosity

    def say(self, line: str, level: int = 0) -> None:
        if self.verbosity >= level:
            print(line, file=sys.stderr)

    def built(self, stem: str, code: TargetCode, seconds: float) -> None:
        kernels = {k for vc in code.variants for k in _kernels(vc)}
        breaks = {b for vc in code.variants for b in _breaks(vc)}
        counts = [count(len(code.variants), "variant"), count(len(kernels), "kernel")]
        if breaks:
            counts.append(count(len(breaks), "graph break"))
        self.say(
            f"{code.source} -> {self.out}/{stem}.py: {', '.join(counts)} "
            f"({seconds:.1f} s)"
        )
        for vc in code.variants:
            self.say(f"  variant {vc.name} ({vc.describe()}): {vc.summary()}", 1)


def _kernels(vc: VariantCode) -> set[tuple[str, str]]:
    steps = vc.steps
    return {(vc.variant.device, s.kernel) for s in steps if isinstance(s, KernelCall)}


def _breaks(vc: VariantCode) -> set[str]:
    return {s.target for s in vc.fallback_calls}


def run(options: Options, bench: Bench | None = None, verbosity: int = 0) -> int:
    """Build, check or explain; `verbosity` as `Progress` takes it."""
    bench = bench_for(options, bench)  # --autotune without a GPU fails here
    progress = Progress(options, verbosity)
    writing = not (options.check or options.explain)
    out = options.root / options.out
    compiled = compile_modules(
        options,
        built=progress.built,
        ready=partial(_check_destination, out) if writing else None,
    )
    for line in compiled_nothing(compiled):
        print(f"transpile: warning: {line}", file=sys.stderr)
    if options.explain:
        print(report(compiled, options))
        return 0
    if bench is not None:
        compiled = tune(compiled, bench)  # cuda kernels get their fastest config
    files = render(compiled)
    if options.check:
        code = check(files, options)
        if code == 0:
            progress.say(f"up to date ({count(len(files), 'file')})")
        return code
    written, removed = write(files, out)
    done = [f"wrote {count(written, 'file')}"] if written else []
    done += [f"removed {count(removed, 'file')}"] if removed else []
    progress.say(", ".join(done) or f"{count(len(files), 'file')} unchanged")
    return 0


def build(options: Options, bench: Bench | None = None) -> dict[str, str]:
    """Every output file, by path relative to the output directory. With
    `options.autotune`, kernels are timed on `bench` (default: this machine's GPU)."""
    return build_files(options, bench_for(options, bench))


def _check_destination(out: Path, stem: str) -> None:
    """Fail before compiling a module whose files a directory would be in the way of."""
    names = ("__init__.py", f"{stem}.py", f"{stem}_triton.py", f"{stem}.cpp")
    _check_not_blocked(out, [name for name in names if (out / name).is_dir()])


def _check_not_blocked(out: Path, blocked: list[str]) -> None:
    if blocked:
        raise UserError(
            f"cannot write {out.name}/{sorted(blocked)[0]}: a directory is in the way; "
            "remove it or choose another output directory with -o"
        )


def write(files: dict[str, str], out: Path) -> tuple[int, int]:
    """Replace each file atomically; nothing is written unless all are ready.

    Files get the user's umask, as `open` would give them (0644 under umask 022),
    not mkstemp's 0600: whoever runs the generated module must be able to read it.
    Returns how many files changed (new or different) and how many were removed
    (a module's `_triton.py` or `.cpp` it no longer has).
    """
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise UserError(f"cannot create output directory {out}: {e.strerror}") from None
    _check_not_blocked(out, [rel for rel in files if (out / rel).is_dir()])
    umask = current_umask()
    staged = []
    changed = 0
    try:
        for rel, text in sorted(files.items()):
            changed += not _holds(out / rel, text)
            fd, tmp = tempfile.mkstemp(dir=out, prefix=".transpile-", suffix=".tmp")
            staged.append((tmp, out / rel))
            with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
                f.write(text)
            os.chmod(tmp, 0o666 & ~umask)
    except OSError as e:
        for tmp, _ in staged:
            os.unlink(tmp)
        raise UserError(f"cannot write to {out}: {e.strerror}") from None
    for tmp, dest in staged:
        os.replace(tmp, dest)
    removed = 0
    for stem_file in [r for r in files if r.endswith(".py") and "_triton" not in r]:
        stem = stem_file[:-3]
        for extra in (f"{stem}_triton.py", f"{stem}.cpp"):
            if extra not in files and (out / extra).exists():
                (out / extra).unlink()
                removed += 1
    return changed, removed


def _holds(path: Path, text: str) -> bool:
    """Whether the file at `path` is `text`, as `write` would write it."""
    try:
        return path.read_bytes() == text.encode("utf-8")
    except OSError:
        return False


def check(files: dict[str, str], options: Options) -> int:
    out = options.root / options.out
    diffs = []
    for rel, text in sorted(files.items()):
        path = out / rel
        old = path.read_text("utf-8", "replace") if path.exists() else ""
        if old != text:
            diffs += difflib.unified_diff(
                old.splitlines(keepends=True),
                text.splitlines(keepends=True),
                f"a/{options.out.as_posix()}/{rel}",
                f"b/{options.out.as_posix()}/{rel}",
            )
    if not diffs:
        return 0
    sys.stdout.writelines(diffs)
    print(f"\n{options.out.as_posix()}/ is stale; regenerate with: {options.command}")
    return 1
