"""The `transpile` command line: parse arguments into one `Options`, call `api.run`.

    transpile                              # every target in [tool.transpile]
    transpile FILE.py::Name --example x=f32[2,4] [--variant ...] [--device cpu] ...

Without a target, the targets come from the first pyproject.toml with a
`[tool.transpile]` table in the current directory or a parent (as black and ruff find
theirs); that file's directory is the project root. Every user error is printed as one
line, `transpile: error: ...`, with exit code 2 and no traceback. The command recorded
in generated headers (`Options.command`) is rebuilt from the parsed arguments, so it is
the same on every machine: `transpile` in config mode, a normalized, shell-quoted
one-off command otherwise (no --root, --check or --explain).
"""

from __future__ import annotations

import argparse
import importlib
import os
import shlex
import sys
import warnings
from pathlib import Path

from transpiler import __version__
from transpiler.errors import UserError

with warnings.catch_warnings():
    # torch warns on import when NumPy is not installed; transpile never uses NumPy
    warnings.filterwarnings("ignore", "Failed to initialize NumPy", UserWarning)
    import torch  # noqa: F401
from transpiler.options import (
    DEVICES,
    Inputs,
    Options,
    Target,
    check_source,
    check_unique_inputs,
    collect_variants,
    describe_inputs,
    find_config,
    for_training,
    format_init,
    load_config,
    parse_example,
    parse_init,
    parse_variant,
    with_cuda_graphs,
)

DEFAULT_OUT = Path("generated")

DESCRIPTION = """\
Ahead-of-time, source-to-source compiler for PyTorch models. With no target,
builds every target in [tool.transpile] of the nearest pyproject.toml that has
one, searching upward from the current directory."""

EPILOG = """\
exit codes:
  0  success
  1  --check found stale files
  2  a user error (bad input, a failed build); nothing was written

Configuration: every key of [tool.transpile] in pyproject.toml, its type, its
default and an example are in "Configuration reference" in README.md."""


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="transpile",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add = parser.add_argument
    add("--version", action="version", version=f"transpile {__version__}")
    add("target", nargs="?", help="one-off target: FILE.py::Name or pkg.mod::Name")
    add(
        "--example",
        action="append",
        default=[],
        metavar="NAME=TYPE",
        help="one input of the variant (repeatable); TYPE: f32[2,4] "
        "bf16[8,128]@cuda i64[4,512] bool[4] f32[] int=3 float=0.5 bool=True None",
    )
    add(
        "--variant",
        action="append",
        default=[],
        metavar='"x=f32[2,4], y=f32[4]"',
        help="a whole variant at once (repeatable)",
    )
    add(
        "--init",
        action="append",
        default=[],
        metavar="K=V",
        help="constructor argument (repeatable); V is a Python literal or a string",
    )
    add("--factory", metavar="FILE.py::fn", help="function that builds the instance")
    add(
        "--device",
        action="append",
        default=[],
        choices=DEVICES,
        help="device to compile for (repeatable; default: cpu and cuda)",
    )
    add("-o", "--out", metavar="DIR", help="output directory (default: generated/)")
    add(
        "--cuda-graphs",
        action="store_true",
        help="replay each cuda variant that can be (static shapes, no graph breaks, "
        "no branch on tensor data) from a CUDA graph captured on its first call; "
        "its outputs are overwritten by the next call",
    )
    add(
        "--train",
        action="store_true",
        help="compile every variant for training: the module in train mode, grad "
        "enabled, its parameters and the inputs declared NAME=f32[..]:grad requiring "
        "gradients, forward and backward compiled",
    )
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument(
        "--check",
        action="store_true",
        help="write nothing; exit 1 with a unified diff if the output is stale",
    )
    mode.add_argument(
        "--explain",
        action="store_true",
        help="write nothing; print variants, guards, breaks and kernels",
    )
    mode.add_argument(
        "--autotune",
        action="store_true",
        help="time candidate launch configs of each Triton kernel on this machine's "
        "CUDA GPU and write the fastest, with a comment",
    )
    add(
        "--config",
        metavar="FILE",
        help="read [tool.transpile] from FILE instead of the pyproject.toml found "
        "upward from here (paths in FILE stay relative to the current directory)",
    )
    add(
        "--force",
        action="store_true",
        help="with a target given here, overwrite files that [tool.transpile] "
        "also builds",
    )
    talk = parser.add_mutually_exclusive_group()
    talk.add_argument(
        "-q",
        "--quiet",
        action="store_true",
        help="print only warnings and errors",
    )
    talk.add_argument(
        "-v", "--verbose", action="store_true", help="also print a line per variant"
    )
    add("--root", type=Path, help=argparse.SUPPRESS)
    return parser


def build_options(args: argparse.Namespace) -> Options:
    """The `Options` for parsed arguments; raises UserError for bad input."""
    here = args.root.absolute() if args.root is not None else Path.cwd()
    out = Path(args.out) if args.out is not None else None
    if args.target is None:
        return _config_options(args, here, out)
    if args.config:
        raise UserError("--config cannot be combined with a one-off target")
    options = _one_off_options(args, here, out or DEFAULT_OUT)
    if not (args.force or options.check or options.explain):
        _check_not_built_by_config(options)
    return options


def _config_options(args: argparse.Namespace, here: Path, out: Path | None) -> Options:
    one_off = ("--example", "--variant", "--init", "--factory", "--device")
    given = [flag for flag in one_off if getattr(args, flag[2:])]
    if given:
        raise UserError(
            f"{given[0]} needs a target (FILE.py::Name); without one, targets and "
            "their variants come from [tool.transpile] in pyproject.toml"
        )
    if args.config:
        root, pyproject = here, here / args.config
    else:
        pyproject = find_config(here)
        root = pyproject.parent
    config_out, targets = load_config(pyproject, root)
    if args.cuda_graphs:
        targets = tuple(with_cuda_graphs(target) for target in targets)
    if args.train:
        targets = tuple(for_training(target) for target in targets)
    return Options(
        targets=targets,
        root=root,
        out=config_out if out is None else _out_from(here, root, out),
        check=args.check,
        explain=args.explain,
        autotune=args.autotune,
        command="transpile"
        + (f" --config {args.config}" if args.config else "")
        + (" --cuda-graphs" if args.cuda_graphs else "")
        + (" --train" if args.train else "")
        + (" --autotune" if args.autotune else ""),
    )


def _out_from(here: Path, root: Path, out: Path) -> Path:
    """`-o OUT`, given in `here`, as a path relative to the project `root`."""
    if root == here or out.is_absolute():
        return out
    path = Path(os.path.normpath(here / out))
    return path.relative_to(root) if path.is_relative_to(root) else path


def _check_not_built_by_config(options: Options) -> None:
    """A one-off target may not replace a file that [tool.transpile] builds."""
    try:
        pyproject = find_config(options.root)
        config_out, targets = load_config(pyproject, pyproject.parent)
    except UserError:  # no usable config: nothing it builds to protect
        return
    built = {
        (
            pyproject.parent / config_out / f"{_stem(t.source, pyproject.parent)}.py"
        ).resolve()
        for t in targets
    }
    (target,) = options.targets
    rel = options.out / f"{_stem(target.source, options.root)}.py"
    if (options.root / rel).resolve() in built:
        config = os.path.relpath(pyproject, options.root)
        raise UserError(
            f"{rel.as_posix()} is also built by [tool.transpile] in {config}; "
            "pass --force to overwrite it, or use another -o"
        )


def _stem(source: str, root: Path) -> str:
    """The name of the generated module of a target: its source module's."""
    left = source.partition("::")[0]
    if left.endswith(".py"):
        return Path(left).stem
    package = root.joinpath(*left.split("."))
    return "__init__" if (package / "__init__.py").is_file() else left.split(".")[-1]


def _one_off_options(args: argparse.Namespace, root: Path, out: Path) -> Options:
    source = check_source(args.target)
    input_sets: list[Inputs] = []
    if args.example:
        examples = tuple(parse_example(text) for text in args.example)
        input_sets.append(check_unique_inputs(examples, "--example"))
    input_sets += [parse_variant(text) for text in args.variant]
    if not input_sets:
        raise UserError(
            f"target {source!r} needs example inputs: give --example NAME=TYPE "
            '(e.g. --example x=f32[2,4]) or --variant "x=f32[2,4], y=f32[4]"'
        )
    init = tuple(parse_init(text) for text in args.init)
    check_unique_inputs(init, "--init")
    factory = (
        None if args.factory is None else check_source(args.factory, "factory", "fn")
    )
    if init and factory:
        raise UserError("give --init or --factory, not both")
    devices = tuple(dict.fromkeys(args.device)) or DEVICES
    variants = collect_variants(
        ((inputs, None) for inputs in input_sets),
        devices,
        [args.train] * len(input_sets),
    )
    target = Target(source, variants, init, factory)
    if args.cuda_graphs:
        target = with_cuda_graphs(target)
    command = _one_off_command(target, input_sets, bool(args.example), args.device, out)
    return Options(
        targets=(target,),
        root=root,
        out=out,
        check=args.check,
        explain=args.explain,
        autotune=args.autotune,
        command=command + (" --autotune" if args.autotune else ""),
    )


def _one_off_command(
    target: Target,
    input_sets: list[Inputs],
    has_examples: bool,
    devices: list[str],
    out: Path,
) -> str:
    """The normalized command that regenerates a one-off target, for file headers."""
    words = ["transpile", target.source]
    variant_sets = input_sets[1:] if has_examples else input_sets
    if has_examples:
        for name, spec in input_sets[0]:
            words += ["--example", f"{name}={spec}"]
    for inputs in variant_sets:
        words += ["--variant", describe_inputs(inputs)]
    for key, value in target.init:
        words += ["--init", format_init(key, value)]
    if target.factory is not None:
        words += ["--factory", target.factory]
    for device in dict.fromkeys(devices):
        words += ["--device", device]
    if any(v.train for v in target.variants):
        words.append("--train")
    if any(v.cuda_graphs for v in target.variants):
        words.append("--cuda-graphs")
    if out != DEFAULT_OUT:
        words += ["-o", out.as_posix()]
    return shlex.join(words)


def check_out_dir(root: Path, out: Path) -> None:
    """Fail before compiling when `out` (relative to `root`) cannot be a directory."""
    path = root / out
    while not path.exists() and path.parent != path:
        path = path.parent
    blocker = path.relative_to(root).as_posix() if path.is_relative_to(root) else path
    where = f"cannot write to {out.as_posix()}"
    if not path.is_dir():
        what = "it" if path == root / out else blocker
        raise UserError(f"{where}: {what} is not a directory; choose another with -o")
    if not os.access(path, os.W_OK | os.X_OK):
        raise UserError(f"{where}: {blocker} is read-only; choose another with -o")


def main(argv: list[str] | None = None) -> int:
    """Console entry point; the exit code: 0 ok, 1 stale with --check, 2 error."""
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exit_:  # --help, --version, or a usage error argparse printed
        return exit_.code if isinstance(exit_.code, int) else 2
    try:
        options = build_options(args)
        if not options.check and not options.explain:
            check_out_dir(options.root, options.out)
        api = importlib.import_module("transpiler.api")
        verbosity = -1 if args.quiet else 1 if args.verbose else 0
        code = api.run(options, verbosity=verbosity)
    except UserError as err:
        lines = (line.strip() for line in str(err).splitlines())
        message = " ".join(line for line in lines if line)  # one line, always
        print(f"transpile: error: {message}", file=sys.stderr)
        return 2
    return 0 if code is None else int(code)


if __name__ == "__main__":
    sys.exit(main())
