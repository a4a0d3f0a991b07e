"""CUDA-graph variants on a GPU: right answers over many calls, re-capture, latency.

    python benchmarks/cuda_graphs_check.py [--quick]

Builds, with the transpiler's API into a temporary directory, two packages from
examples/toy.py::ToyLinear, examples/toy.py::ToyModule (a branch on tensor data:
a CUDA graph per segment) and examples/gpt_block.py::Block (GPT-2 small's width, at
a launch-bound and a larger shape): one with `cuda_graphs = true` on every variant,
one without. Then, for each case, on seeded random inputs, under `torch.no_grad()`:

1. the graph variant's call site is `runtime_shim.cuda_graph(...)`, or for ToyModule
   `runtime_shim.cuda_graph_tree(...)`;
2. six calls with different inputs match eager (f32: rtol 1e-4, atol 1e-5), each
   output is the same tensor (the graph's buffer), a clone taken after the first
   call still holds the first result, and the graph was captured once. ToyModule's
   inputs alternate between its branches (twelve calls): each branch returns its
   own graph's buffer, and its three segments (`y = linear(x)` and `y.sum() > 0`,
   then relu or tanh) were captured once each;
3. an input passed as the graph's own input buffer needs no copy and is right;
4. a weight changed in place is seen without a re-capture; a replaced weight and a
   `load_state_dict(..., assign=True)` each re-capture once; all are right, and so
   is a `.cpu().cuda()` round trip (its memory may come back at the same addresses);
5. a second instance with other weights keeps graphs of its own (calls interleaved);
6. no call ran the source (eager) code or ran without its graph (no warning);

and prints per-call latency in microseconds (back-to-back calls, synchronized once
per batch; median of batches) of eager, `torch.compile(mode="reduce-overhead")`,
the generated variant and the generated CUDA-graph variant. ToyModule's timed calls
alternate between an input of each branch, as its checked calls do.

Exit status: 0 when every check passed, 1 on any mismatch or failed check (each is
printed), 2 without a CUDA device. A `torch.compile` that fails or disagrees is
reported in its column, not counted: it is the reference, not the code checked.
"""

from __future__ import annotations

import argparse
import importlib
import itertools
import sys
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import torch
from torch import nn

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script

from benchmarks import common  # noqa: E402
from examples.compare import compare_outputs  # noqa: E402
from runtime_shim.cuda_graphs import (  # noqa: E402
    ATTRIBUTE,
    CudaGraphRunner,
    CudaGraphTree,
)

CALLS = 6
F32 = torch.float32


@dataclass(frozen=True)
class Case:
    label: str
    source: str  # FILE.py::Name
    init: tuple[tuple[str, object], ...]
    shape: tuple[int, ...]  # of the one input, x
    branch: Callable[[nn.Module, torch.Tensor], bool] | None = None  # on tensor data

    @property
    def module(self) -> str:
        return Path(self.source.split("::")[0]).stem

    @property
    def name(self) -> str:
        return self.source.split("::")[1]


GPT2 = (("n_embd", 768), ("n_head", 12))
CASES = (
    Case("ToyLinear x=f32[2,4]", "examples/toy.py::ToyLinear", (), (2, 4)),
    Case(
        "ToyModule x=f32[2,4], branches alternate",
        "examples/toy.py::ToyModule",
        (),
        (2, 4),
        lambda m, x: bool(m.linear(x).sum() > 0),  # its `if y.sum() > 0:`
    ),
    Case(
        "Block 768 x=f32[1,16,768]", "examples/gpt_block.py::Block", GPT2, (1, 16, 768)
    ),
    Case(
        "Block 768 x=f32[8,128,768]",
        "examples/gpt_block.py::Block",
        GPT2,
        (8, 128, 768),
    ),
)


@dataclass
class Report:
    case: Case
    worst: float = 0.0
    failures: list[str] = field(default_factory=list)
    times: dict[str, str] = field(default_factory=dict)

    def check(self, ok: bool, what: str) -> None:
        if not ok:
            self.failures.append(what)

    def close(self, got: object, want: object, what: str) -> None:
        c = compare_outputs(got, want, low_precision=False)
        self.worst = max(self.worst, c.max_abs)
        self.check(c.ok, f"{what}: max abs {c.max_abs:.3g}, max rel {c.max_rel:.3g}")


# ---------------------------------------------------------------------- building


def build_packages(tmp: Path) -> tuple[str, str]:
    """`cg_graphs` (CUDA graphs on) and `cg_plain` under `tmp`; their names."""
    from transpiler.api import build, write
    from transpiler.options import Options, Target, TensorSpec, Variant

    names = []
    for package, graphs in (("cg_graphs", True), ("cg_plain", False)):
        targets = []
        for source in dict.fromkeys(c.source for c in CASES):
            cases = [c for c in CASES if c.source == source]
            variants = tuple(
                Variant((("x", TensorSpec(F32, c.shape)),), "cuda", cuda_graphs=graphs)
                for c in cases
            )
            targets.append(Target(source, variants, cases[0].init))
        write(build(Options(targets=tuple(targets), root=ROOT)), tmp / package)
        names.append(package)
    sys.path.insert(0, str(tmp))
    importlib.invalidate_caches()
    return names[0], names[1]


def instance(cls: type, case: Case, seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return cls(**dict(case.init)).cuda().eval()


def randn(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(shape, generator=gen).cuda()


def runners(module: nn.Module) -> list[CudaGraphRunner]:
    return list(module.__dict__.get(ATTRIBUTE, {}).values())


def inputs(case: Case, eager: nn.Module, seed: int, n: int) -> list[torch.Tensor]:
    """`n` seeded inputs; for a case with a branch, alternating between its sides
    (true first), each the first seed on from the last that takes the side."""
    if case.branch is None:
        return [randn(case.shape, seed=seed + i) for i in range(n)]
    out: list[torch.Tensor] = []
    while len(out) < n:
        x = randn(case.shape, seed=seed)
        if case.branch(eager, x) == (len(out) % 2 == 0):
            out.append(x)
        seed += 1
    return out


# ---------------------------------------------------------------------- checking


def check_case(case: Case, graphs: str, plain: str, timer: Timer) -> Report:
    report = Report(case)
    source = getattr(importlib.import_module(f"examples.{case.module}"), case.name)
    generated = importlib.import_module(f"{graphs}.{case.module}")
    text = Path(generated.__file__).read_text()
    call = "cuda_graph_tree" if case.branch else "cuda_graph"
    report.check(f"return runtime_shim.{call}(self, " in text, "no CUDA graph")
    eager = instance(source, case, 0)
    model = getattr(generated, case.name)(**dict(case.init)).cuda().eval()
    model.load_state_dict(eager.state_dict())
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        check_calls(report, case, eager, model)
        check_moves(report, case, eager, model)
        check_two_instances(report, case, source, getattr(generated, case.name))
    for w in caught:  # a fallback to eager, or a variant run without its graph
        if issubclass(w.category, RuntimeWarning):
            report.failures.append(f"warning: {str(w.message).splitlines()[0]}")
    plain_cls = getattr(importlib.import_module(f"{plain}.{case.module}"), case.name)
    with torch.no_grad():
        report.times = time_all(case, eager, model, plain_cls, timer)
    return report


def check_calls(report: Report, case: Case, eager: nn.Module, model: nn.Module) -> None:
    sides = 2 if case.branch else 1  # a buffer per side of the branch
    xs = inputs(case, eager, 100, CALLS * sides)
    outputs, first_kept = [], None
    for i, x in enumerate(xs):
        out = model(x)
        report.close(out, eager(x), f"call {i + 1}")
        outputs.append(out)
        if i == 0:
            first_kept = out.clone()
    for side in range(sides):
        same = all(o is outputs[side] for o in outputs[side::sides])
        report.check(same, f"outputs of side {side + 1} are not one buffer")
    if sides == 2:
        report.check(outputs[0] is not outputs[1], "the sides share a buffer")
    report.close(first_kept, eager(xs[0]), "clone of call 1")
    # the buffer returned last holds the last result (only that: the graphs of a
    # tree share a memory pool, so a call may overwrite the other side's buffer)
    report.close(outputs[-1], eager(xs[-1]), "buffer")
    rs = runners(model)
    report.check(len(rs) == 1, f"{len(rs)} runners, not 1")
    if len(rs) != 1:
        return
    (runner,) = rs
    report.check(runner.disabled is None, f"runs without a graph: {runner.disabled}")
    want = 3 if case.branch else 1  # ToyModule: before the branch, relu, tanh
    report.check(runner.captures == want, f"{runner.captures} captures, not {want}")
    is_tree = isinstance(runner, CudaGraphTree)
    report.check(is_tree == bool(case.branch), f"runner is a {type(runner).__name__}")
    (static,) = runner.static_inputs
    static.copy_(randn(case.shape, seed=200))
    report.close(model(static), eager(randn(case.shape, seed=200)), "static input")


def check_moves(report: Report, case: Case, eager: nn.Module, model: nn.Module) -> None:
    """In place: no re-capture. Replaced, assigned, moved: one re-capture each.

    New weights are the old ones perturbed (random weights of GPT-2's width make
    attention's softmax one-hot, where any rounding difference flips it). Each result
    is also compared with the same variant run without its graph: the same kernels
    on the same tensors, so only the graph can make them differ."""
    x = randn(case.shape, seed=300)
    if len(runners(model)) != 1:
        return  # check_calls said so
    (runner,) = runners(model)
    # a re-capture captures every graph a call runs: for ToyModule, two of three
    first, again = (3, 2) if case.branch else (1, 1)

    def same(what: str) -> None:
        out = model(x)
        report.close(out, eager(x), what)
        c = compare_outputs(
            out, runner.run_without_graph(model, x), low_precision=False
        )
        report.check(c.ok, f"{what}: {c.max_abs:.3g} off the variant without graph")

    name, _ = next(iter(eager.named_parameters()))
    eager.get_parameter(name).mul_(0.5)
    model.get_parameter(name).mul_(0.5)
    same("weight changed in place")
    report.check(runner.captures == first, "re-captured after an in-place change")
    owner, _, attr = name.rpartition(".")
    weight = perturbed(eager.get_parameter(name))
    setattr(eager.get_submodule(owner), attr, nn.Parameter(weight))
    setattr(model.get_submodule(owner), attr, nn.Parameter(weight.clone()))
    same("weight replaced")
    n = runner.captures
    report.check(n == first + again, f"{n} captures after a new weight")
    state = {k: perturbed(v) for k, v in eager.state_dict().items()}
    eager.load_state_dict(state)
    model.load_state_dict({k: v.clone() for k, v in state.items()}, assign=True)
    same("load_state_dict(assign=True)")
    n = runner.captures
    report.check(n == first + 2 * again, f"{n} captures after assign")
    model.cpu().cuda()  # new memory, which may be at the old addresses again
    same(".cpu().cuda()")
    n, ok = runner.captures, (first + 2 * again, first + 3 * again)
    report.check(n in ok, f"{n} captures, not {' or '.join(map(str, ok))}")


def perturbed(t: torch.Tensor) -> torch.Tensor:
    return t + 0.1 * t.abs().mean() * torch.randn_like(t)


def check_two_instances(report: Report, case: Case, source: type, cls: type) -> None:
    eagers = [instance(source, case, seed) for seed in (1, 2)]
    models = [cls(**dict(case.init)).cuda().eval() for _ in eagers]
    for e, m in zip(eagers, models):
        m.load_state_dict(e.state_dict())
    for i, x in enumerate(inputs(case, eagers[0], 400, 4 if case.branch else 3)):
        outs = [m(x) for m in models]  # both before either is compared
        for j, (e, out) in enumerate(zip(eagers, outs)):
            report.close(out, e(x), f"instance {j + 1}, call {i + 1}")
    first, second = (runners(m) for m in models)
    report.check(len(first) == len(second) == 1, "a runner per instance")
    report.check(not set(first) & set(second), "instances share a graph")


# ---------------------------------------------------------------------- timing

Timer = Callable[[Callable[[], object]], float]


def latency_timer(quick: bool) -> Timer:
    """Microseconds per call: benchmarks/common.py's wall-clock latency timer."""
    time_ms, _ = common.latency_timer(quick, torch.cuda.synchronize)
    return lambda fn: time_ms(fn) * 1e3


def time_all(
    case: Case, eager: nn.Module, model: nn.Module, plain_cls: type, timer: Timer
) -> dict[str, str]:
    xs = inputs(case, eager, 500, 2 if case.branch else 1)  # a call takes the next
    plain = plain_cls(**dict(case.init)).cuda().eval()
    plain.load_state_dict(eager.state_dict())

    def alternating(fn: Callable[[torch.Tensor], object]) -> Callable[[], object]:
        """`fn` on the next of `xs` at each call (the same one when there is one)."""
        xs_ = itertools.cycle(xs)
        return lambda: fn(next(xs_))

    times = {
        "eager": f"{timer(alternating(eager)):.1f}",
        "generated": f"{timer(alternating(plain)):.1f}",
        "generated + CUDA graph": f"{timer(alternating(model)):.1f}",
    }
    try:
        compiled = torch.compile(eager, mode="reduce-overhead")
        for _ in range(3):
            for x in xs:
                compiled(x)
        got = [compiled(x).clone() for x in xs]
        c = compare_outputs(got, [eager(x) for x in xs], low_precision=False)
        ms = f"{timer(alternating(compiled)):.1f}"
        times["compile(reduce-overhead)"] = ms if c.ok else f"{ms} (wrong)"
    except Exception as err:  # the reference failing is reported, not fatal
        times["compile(reduce-overhead)"] = f"failed: {type(err).__name__}"
    return times


# ---------------------------------------------------------------------- main

COLUMNS = ("eager", "compile(reduce-overhead)", "generated", "generated + CUDA graph")


def table(reports: list[Report]) -> str:
    head = ["case", "checks", "worst abs err", *(f"{c} us" for c in COLUMNS)]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in reports:
        ok = "ok" if not r.failures else f"{len(r.failures)} FAILED"
        cells = [r.case.label, ok, f"{r.worst:.2g}"]
        cells += [r.times.get(c, "-") for c in COLUMNS]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer timing batches")
    parser.add_argument(
        "--build",
        type=Path,
        metavar="DIR",
        help="only write the two generated packages into DIR (needs the transpiler)",
    )
    parser.add_argument(
        "--prebuilt",
        type=Path,
        metavar="DIR",
        help="check the packages --build wrote there (a GPU machine without it)",
    )
    args = parser.parse_args(argv)
    if args.build:
        print(" ".join(build_packages(args.build)))
        return 0
    if not torch.cuda.is_available():
        print("error: no CUDA device", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="cuda-graphs-") as tmp:
        if args.prebuilt:
            sys.path.insert(0, str(args.prebuilt.resolve()))
            graphs, plain = "cg_graphs", "cg_plain"
        else:
            graphs, plain = build_packages(Path(tmp))
        timer = latency_timer(args.quick)
        reports = [check_case(case, graphs, plain, timer) for case in CASES]
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}\n")
    print(table(reports))
    failed = [(r.case.label, f) for r in reports for f in r.failures]
    for label, failure in failed:
        print(f"FAILED {label}: {failure}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
