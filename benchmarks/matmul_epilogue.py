"""Matmul epilogues on a CUDA GPU: each tile config against cuBLAS plus the kernel.

    python benchmarks/matmul_epilogue.py [--target gpt_block::BlockBF16] [--out FILE.md]

Compiles the cuda variants of one target of `benchmarks/pyproject.toml` and runs the
step of `transpile --autotune` that weighs each linear layer's matmul epilogue
(Note [Matmul epilogues] in transpiler/passes/matmul_epilogue.py) with a timer that
keeps every timing. Prints, per linear layer whose consumer could be its epilogue:
cuBLAS followed by the consumer's kernel, and the Triton matmul with the epilogue for
each tile config, all on the same seeded inputs (each checked against the other).
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import tempfile
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run as a script

from benchmarks import common
from transpiler import autotune
from transpiler.cli import build_options, build_parser
from transpiler.ir.program import MatmulConfig
from transpiler.pipeline import compile_modules


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--target", default="gpt_block::BlockBF16")
    parser.add_argument("--out", type=Path, help="also write the table to FILE.md")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: no CUDA device", file=sys.stderr)
        return 2
    stem, name = args.target.split("::")
    options = build_options(build_parser().parse_args(["--config", str(common.CONFIG)]))
    targets = tuple(
        dataclasses.replace(
            t, variants=tuple(v for v in t.variants if v.device == "cuda")
        )
        for t in options.targets
        if t.source.endswith(f"{stem}.py::{name}")
    )
    options = dataclasses.replace(options, targets=targets, autotune=True)
    timings: list[tuple[str, object, float]] = []

    def timer(candidate: autotune.Candidate, launch) -> float:
        ms = autotune.do_bench_timer(candidate, launch)
        timings.append((candidate.kernel, candidate.config, ms))
        return ms

    bench = dataclasses.replace(autotune.cuda_bench(), timer=timer)
    compiled = compile_modules(options)  # heuristic launch configs
    with tempfile.TemporaryDirectory(prefix="transpile-epilogue-") as folder:
        for module in compiled.modules:
            autotune.tune_epilogues(module, bench, Path(folder))
    lines = [
        f"# Matmul epilogues: {args.target} (cuda)",
        "",
        f"- machine: {bench.machine}; torch {torch.__version__}",
        "- timing: triton.testing.do_bench median "
        f"(warmup {autotune.WARMUP_MS} ms, rep {autotune.REP_MS} ms)",
        "",
        "| matmul kernel | how | ms |",
        "|---|---|---|",
    ]
    for kernel, config, ms in timings:
        how = (
            autotune.describe_matmul(config)
            if isinstance(config, MatmulConfig)
            else "cuBLAS `linear`, then the consumer kernel"
        )
        label = kernel.removeprefix("linear + ")
        lines.append(f"| {label} | {how} | {ms:.4f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        args.out.write_text(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
