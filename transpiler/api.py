"""Build, check or explain every target of a run: the whole compiler as one function.

options → for each target: resolve → instantiate on meta → for each variant:
    trace (frontend) → optimize (graph passes) → lower (fuse + schedule)
→ render modules (wrapper, Triton, C++) → black → write atomically / diff / explain
"""

from __future__ import annotations

import difflib
import inspect
import os
import sys
import tempfile
import time
import types
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path

from torch import nn

from runtime_shim.cpp import current_umask
from runtime_shim.provenance import source_hash
from transpiler.autotune import Bench, bench_for, tune_modules
from transpiler.codegen.module import count, render_module
from transpiler.codegen.signature import Signature
from transpiler.codegen.wrapper import TargetCode, VariantCode
from transpiler.errors import UserError
from transpiler.explain import compiled_nothing
from transpiler.formatting import format_module
from transpiler.frontend.fallback import Stub
from transpiler.frontend.loader import resolve
from transpiler.frontend.source import SourceCache
from transpiler.frontend.trace import direct_reads, instantiate, trace
from transpiler.ir.graph import FALLBACK
from transpiler.ir.program import ExternCall, KernelCall
from transpiler.options import Options, ScalarSpec, Target, Variant
from transpiler.passes.schedule import KernelNames
from transpiler.variants import compile_dynamic, compile_variant


@dataclass
class ModuleBuild:
    source_file: str
    source_module: str
    targets: list[TargetCode] = field(default_factory=list)
    names: dict[str, KernelNames] = field(
        default_factory=lambda: {"cpu": KernelNames(), "cuda": KernelNames()}
    )
    kernels: dict[str, list] = field(default_factory=lambda: {"cpu": [], "cuda": []})
    # variants per device, numbered across the module's targets: their functions
    # (`_cpu_0`, `_guards_cpu_0`) share the generated module's namespace
    counts: dict[str, int] = field(default_factory=dict)
    stubs: dict[Stub, str] = field(default_factory=dict)  # fallback code, named
    # module name -> (path, hash) of every source file its code was read from
    sources: dict[str, tuple[str, str]] = field(default_factory=dict)

    def variant_name(self, variant: Variant) -> str:
        """`cpu_0`, `cuda_0`, `cpu_1`, ...: numbered per device across the module."""
        n = self.counts.get(variant.device, 0)
        self.counts[variant.device] = n + 1
        return f"{variant.device}_{n}"

    def stub_name(self, stub: Stub) -> str:
        return self.stubs.setdefault(stub, f"_fallback_{len(self.stubs)}")


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
            self.say(f"  variant {vc.name} ({vc.describe()}): {_summary(vc)}", 1)


def _kernels(vc: VariantCode) -> set[tuple[str, str]]:
    steps = (s for p in vc.programs for s in p.steps)
    return {(vc.variant.device, s.kernel) for s in steps if isinstance(s, KernelCall)}


def _breaks(vc: VariantCode) -> set[str]:
    steps = (s for p in vc.programs for s in p.steps)
    return {
        s.target
        for s in steps
        if isinstance(s, ExternCall) and s.target.startswith(FALLBACK)
    }


def _summary(vc: VariantCode) -> str:
    if vc.region is None:
        return f"runs the source: {vc.fallback_reason} ({vc.fallback_span})"
    text = count(len(_kernels(vc)), "kernel")
    breaks = len(_breaks(vc))
    return f"{text}, {count(breaks, 'graph break')}" if breaks else text


def run(options: Options, bench: Bench | None = None, verbosity: int = 0) -> int:
    """Build, check or explain; `verbosity` as `Progress` takes it."""
    bench = bench_for(options, bench)  # --autotune without a GPU fails here
    progress = Progress(options, verbosity)
    writing = not (options.check or options.explain)
    out = options.root / options.out
    modules = compile_modules(
        options,
        built=progress.built,
        ready=partial(_check_destination, out) if writing else None,
    )
    for line in compiled_nothing(modules):
        print(f"transpile: warning: {line}", file=sys.stderr)
    if options.explain:
        print(explain(modules, options))
        return 0
    files = render(modules, options, bench)
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
    bench = bench_for(options, bench)
    return render(compile_modules(options), options, bench)


def compile_modules(
    options: Options,
    built: Callable[[str, TargetCode, float], None] | None = None,
    ready: Callable[[str], None] | None = None,
) -> dict[str, ModuleBuild]:
    """Every target compiled, grouped by the generated module (file stem) it is in.

    `ready(stem)` is called before a target is compiled, once its module is known;
    `built(stem, code, seconds)` after it is.
    """
    sources = SourceCache(options.root)
    modules: dict[str, ModuleBuild] = {}
    for target in options.targets:
        start = time.perf_counter()
        stem, code = _build_target(target, options, sources, modules, ready)
        if built is not None:
            built(stem, code, time.perf_counter() - start)
    return modules


def render(
    modules: dict[str, ModuleBuild], options: Options, bench: Bench | None = None
) -> dict[str, str]:
    if bench is not None:
        tune_modules(modules, bench)  # cuda kernels get their fastest launch config
    files = {"__init__.py": '"""Modules generated by transpile."""\n'}
    for stem, mb in modules.items():
        out = render_module(
            stem,
            mb.source_file,
            mb.source_module,
            mb.targets,
            options.command,
            mb.kernels["cpu"],
            mb.kernels["cuda"],
            mb.stubs,
            dict(sorted(mb.sources.items())),
        )
        files[f"{stem}.py"] = format_module(out.py)
        if out.triton is not None:
            files[f"{stem}_triton.py"] = format_module(out.triton)
        if out.cpp is not None:
            files[f"{stem}.cpp"] = out.cpp
    return files


def _build_target(
    target: Target,
    options: Options,
    sources: SourceCache,
    modules: dict[str, ModuleBuild],
    ready: Callable[[str], None] | None = None,
) -> tuple[str, TargetCode]:
    resolved = resolve(target.source, options.root)
    obj = resolved.obj
    is_module = isinstance(obj, type) and issubclass(obj, nn.Module)
    if not is_module and not isinstance(obj, types.FunctionType):
        raise UserError(
            f"{target.source} is neither an nn.Module subclass nor a " "function"
        )
    stem = resolved.file.stem
    if ready is not None:
        ready(stem)
    display = sources.display(resolved.file)
    mb = modules.setdefault(stem, ModuleBuild(display, resolved.module_name))
    if mb.source_module != resolved.module_name:
        raise UserError(
            f"two targets would both write {stem}.py: "
            f"{mb.source_module} and {resolved.module_name}"
        )
    sources.read.clear()
    module = None
    if is_module:
        factory = None
        if target.factory:
            factory = resolve(target.factory, options.root).obj
        module = instantiate(obj, dict(target.init), factory, options.root)
    fn = type(module).forward if module is not None else obj
    src, fdef = sources.function(fn)
    params = _params(fn, is_module, src.display, src.line_of(fdef))
    variants = []
    tracer = partial(trace, obj, module, sources=sources)
    for variant in target.variants:
        variant = _complete(variant, fn, is_module, target.source)
        if not variant.dynamic:
            variants.append(
                compile_variant(mb.variant_name(variant), variant, tracer, mb)
            )
            continue
        if len(variant.dynamic) > 1:
            raise UserError(
                f"{target.source}: one named dimension per variant for now "
                f"(got {', '.join(variant.dynamic)})"
            )
        # size 1 broadcasts and squeezes differently: it gets a variant of its own
        one = variant.sized({variant.dynamic[0]: 1})
        code = compile_variant(mb.variant_name(one), one, tracer, mb)
        variants.append(replace(code, specializes=f"size 1 of {variant.dynamic[0]}"))
        variants.append(compile_dynamic(mb.variant_name(variant), variant, tracer, mb))
    for path in sorted(sources.read):
        rel = Path(sources.display(path))
        name = ".".join(rel.with_suffix("").parts)
        mb.sources[name] = (rel.as_posix(), source_hash(path.read_bytes()))
    qual = resolved.qualname.split(".")[-1]
    code = TargetCode(
        qual,
        target.source,
        is_module,
        params,
        tuple(variants),
        reads=direct_reads(module) if module is not None else {},
    )
    mb.targets.append(code)
    return stem, code


_NOT_A_FUNCTION = {  # calling such a def returns this, without running its body
    inspect.isgeneratorfunction: "a generator function (its call returns a generator)",
    inspect.iscoroutinefunction: "an async function (its call returns a coroutine)",
    inspect.isasyncgenfunction: "an async generator function",
}


def _params(fn, is_module: bool, file: str, line: int) -> Signature:
    """The parameters of the target's function (a module's forward), as the
    generated module declares them; `file:line` is where it is defined."""
    what = "forward" if is_module else fn.__qualname__
    for test, kind in _NOT_A_FUNCTION.items():
        if test(inspect.unwrap(fn)):
            raise UserError(
                f"{what} is {kind}: transpile compiles functions that compute and "
                "return their results",
                file,
                line,
            )
    params = list(inspect.signature(fn).parameters.values())
    if is_module and (not params or params[0].kind is params[0].VAR_POSITIONAL):
        raise UserError(
            "forward takes no named first parameter for the module (self)", file, line
        )
    return Signature.of(fn, drop_self=is_module)


def _complete(variant: Variant, fn, is_module: bool, source: str) -> Variant:
    """Give every parameter a spec: undeclared ones take (and guard) their default."""
    sig = list(inspect.signature(fn).parameters.values())[1 if is_module else 0 :]
    sig = [p for p in sig if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)]
    given = dict(variant.inputs)
    for name in given:
        if name not in {p.name for p in sig}:
            known = ", ".join(p.name for p in sig)
            listed = f"its parameters are {known}" if sig else "it has no parameters"
            raise UserError(
                f"unknown example {name!r}: {source} has no parameter {name!r}; "
                + listed
            )
    inputs = []
    for p in sig:
        if p.name in given:
            inputs.append((p.name, given[p.name]))
        elif type(p.default) in (int, float, bool, type(None)):  # not an IntEnum
            inputs.append((p.name, ScalarSpec(p.default)))
        else:
            raise UserError(f"{source}: no example for parameter {p.name!r}")
    return replace(variant, inputs=tuple(inputs))


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


def explain(modules: dict[str, ModuleBuild], options: Options) -> str:
    from transpiler.explain import report

    return report(modules, options)
