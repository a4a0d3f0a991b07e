"""Training steps: eager vs torch.compile (default) vs the generated training variant.

    python benchmarks/training.py --device cuda --build DIR      # transpile (no GPU)
    python benchmarks/training.py --device cuda --prebuilt DIR   # check, then time

A step is the forward, a loss, the backward and an optimizer step (the same
`torch.optim.AdamW` for all three: fused on cuda, foreach on cpu), so the three
differ in their forward and backward alone. Each case is first checked in the same
run: one step of eager and of the generated module from the same weights and
inputs, the loss, every parameter's gradient and every buffer (a batch norm's
running statistics) compared. Then rounds of steps, the three interleaved, with the
median time per step and the peak memory of a step (cuda) beside it, each measured
after every contestant has taken a step, so that all three optimizers' states are
allocated alike. The generated modules are built with `--build` where `transpile`
is installed and imported from DIR with `--prebuilt`.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import statistics
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script


@dataclass(frozen=True)
class Case:
    name: str
    source: str  # FILE.py::Class, or a library's pkg.mod::Class
    init: dict
    inputs: dict  # name -> (dtype, shape, grad)
    tokens: int = 0  # > 0: the input is token ids below this
    factory: str = ""  # a function of this file building the model (a library's)


# Library models, as their users train them: random weights from a config
def hf_gpt2_lm():
    """transformers' GPT-2 small with its language-model head; called with
    `labels`, it computes its own cross-entropy loss (dropout 0.1 throughout)."""
    from transformers import GPT2Config, GPT2LMHeadModel

    return GPT2LMHeadModel(GPT2Config(n_positions=512))


def hf_bert_mlm():
    """transformers' BERT-base with its masked-language-model head and loss."""
    from transformers import BertConfig, BertForMaskedLM

    return BertForMaskedLM(BertConfig())


def hf_gpt2_small():
    """The same GPT-2 small at CPU size: 2 layers, hidden 256."""
    from transformers import GPT2Config, GPT2LMHeadModel

    config = GPT2Config(n_positions=128, n_layer=2, n_embd=256, n_head=4)
    return GPT2LMHeadModel(config)


CASES = {
    "cuda": [
        Case(
            "gpt2_block_f32",
            "examples/gpt_block.py::Block",
            {"n_embd": 768, "n_head": 12},
            {"x": (torch.float32, (8, 512, 768), True)},
        ),
        Case(
            "gpt2_block_bf16",
            "examples/gpt_block.py::BlockBF16",
            {"n_embd": 768, "n_head": 12},
            {"x": (torch.bfloat16, (8, 512, 768), True)},
        ),
        Case(
            "gpt2_12_layers",
            "examples/gpt.py::GPT",
            {
                "vocab_size": 50304,
                "block_size": 512,
                "n_layer": 12,
                "n_embd": 768,
                "n_head": 12,
            },
            {"idx": (torch.int64, (8, 512), False)},
            tokens=50304,
        ),
        Case(
            "resnet_basic_block",
            "benchmarks/patterns_src.py::ResNetBasicBlock",
            {"channels": 64},
            {"x": (torch.float32, (32, 64, 56, 56), True)},
        ),
        Case(
            "hf_gpt2_lm",
            "transformers.models.gpt2.modeling_gpt2::GPT2LMHeadModel",
            {},
            {
                "input_ids": (torch.int64, (8, 512), False),
                "labels": (torch.int64, (8, 512), False),
            },
            tokens=50257,
            factory="hf_gpt2_lm",
        ),
        Case(
            "hf_bert_mlm",
            "transformers.models.bert.modeling_bert::BertForMaskedLM",
            {},
            {
                "input_ids": (torch.int64, (16, 256), False),
                "labels": (torch.int64, (16, 256), False),
            },
            tokens=30522,
            factory="hf_bert_mlm",
        ),
    ],
    "cpu": [
        Case(
            "gpt2_block_f32",
            "examples/gpt_block.py::Block",
            {"n_embd": 256, "n_head": 4},
            {"x": (torch.float32, (4, 128, 256), True)},
        ),
        Case(
            "gpt_4_layers",
            "examples/gpt.py::GPT",
            {
                "vocab_size": 4096,
                "block_size": 128,
                "n_layer": 4,
                "n_embd": 256,
                "n_head": 4,
            },
            {"idx": (torch.int64, (4, 128), False)},
            tokens=4096,
        ),
        Case(
            "resnet_basic_block",
            "benchmarks/patterns_src.py::ResNetBasicBlock",
            {"channels": 64},
            {"x": (torch.float32, (4, 64, 28, 28), True)},
        ),
        Case(
            "hf_gpt2_lm",
            "transformers.models.gpt2.modeling_gpt2::GPT2LMHeadModel",
            {},
            {
                "input_ids": (torch.int64, (4, 128), False),
                "labels": (torch.int64, (4, 128), False),
            },
            tokens=50257,
            factory="hf_gpt2_small",
        ),
    ],
}

NAMES = {torch.float32: "f32", torch.bfloat16: "bf16", torch.int64: "i64"}


def build(device: str, out: Path) -> None:
    from transpiler.api import build as transpile_build
    from transpiler.api import write
    from transpiler.options import Options, Target, TensorSpec, Variant

    for case in CASES[device]:
        specs = tuple(
            (n, TensorSpec(dtype, shape, grad=grad))
            for n, (dtype, shape, grad) in case.inputs.items()
        )
        factory = f"benchmarks/training.py::{case.factory}" if case.factory else None
        target = Target(
            case.source,
            (Variant(specs, device, train=True),),
            tuple(case.init.items()),
            factory,
        )
        start = time.perf_counter()
        files = transpile_build(Options(targets=(target,), root=ROOT))
        write(files, out / f"train_{case.name}")
        took = time.perf_counter() - start
        print(f"{case.name}: transpiled in {took:.1f} s", file=sys.stderr)


def _inputs(case: Case, device: str, seed: int) -> dict:
    gen = torch.Generator(device="cpu").manual_seed(seed)
    out = {}
    for n, (dtype, shape, grad) in case.inputs.items():
        if case.tokens:
            t = torch.randint(0, case.tokens, shape, generator=gen)
        else:
            t = torch.randn(shape, generator=gen).to(dtype)
        out[n] = t.to(device).requires_grad_(grad)
    return out


def _loss(out) -> torch.Tensor:
    if not isinstance(out, torch.Tensor):  # a library model's output: its loss
        return out.loss
    return out.float().pow(2).mean()


def _models(case: Case, device: str, work: Path):
    path, cls_name = case.source.split("::")
    stem = path.removesuffix(".py").replace("/", ".").split(".")[-1]
    generated = importlib.import_module(f"train_{case.name}.{stem}")
    torch.manual_seed(0)
    if case.factory:  # the same instance, given the generated class
        eager = globals()[case.factory]().to(device).train()
        mine = copy.deepcopy(eager)
        mine.__class__ = getattr(generated, cls_name)
        return eager, mine
    source = importlib.import_module(path.removesuffix(".py").replace("/", "."))
    eager = getattr(source, cls_name)(**case.init).to(device).train()
    mine = getattr(generated, cls_name)(**case.init).to(device).train()
    mine.load_state_dict(eager.state_dict())
    return eager, mine


def _optimizer(model, device: str):
    if device == "cuda":
        return torch.optim.AdamW(model.parameters(), lr=1e-4, fused=True)
    return torch.optim.AdamW(model.parameters(), lr=1e-4, foreach=True)


def steps_to_inspect(doc: str, top: int, argv=None):
    """The command line of the scripts that look inside one step (`--prebuilt
    DIR`, `--cases`, `--top`): its arguments, and (case, name, step) of each
    contestant of each case asked for, warm (`warm_steps`)."""
    p = argparse.ArgumentParser(description=doc.splitlines()[0])
    p.add_argument("--prebuilt", type=Path, required=True)
    p.add_argument("--cases", default="")
    p.add_argument("--top", type=int, default=top)
    args = p.parse_args(argv)
    work = args.prebuilt.resolve()
    sys.path.insert(0, str(work))
    wanted = set(filter(None, args.cases.split(",")))

    def steps():
        for case in CASES["cuda"]:
            if not wanted or case.name in wanted:
                for name, step in warm_steps(case, work):
                    yield case, name, step

    return args, steps()


def warm_steps(case: Case, work: Path):
    """(name, step) of eager, torch.compile and the generated module on cuda,
    each a training step with its own AdamW, taken twice already: for the
    scripts that look inside one step (memory_peak.py, profile_training.py)."""
    eager, mine = _models(case, "cuda", work)
    compiled_src = copy.deepcopy(eager)
    contestants = {
        "eager": (eager, eager),
        "compile": (torch.compile(compiled_src), compiled_src),
        "generated": (mine, mine),
    }
    inputs = _inputs(case, "cuda", 2)
    for name, (model, owner) in contestants.items():
        opt = _optimizer(owner, "cuda")

        def step(model=model, opt=opt) -> None:
            _loss(model(**inputs)).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)

        step()
        step()
        torch.cuda.synchronize()
        yield name, step


def check(case: Case, device: str, work: Path) -> float:
    """The largest error of the loss and the gradients of one step, relative to
    the largest gradient (eager against generated)."""
    eager, mine = _models(case, device, work)
    inputs = _inputs(case, device, 1)
    theirs = {
        n: t.detach().clone().requires_grad_(t.requires_grad) for n, t in inputs.items()
    }
    with torch.autocast(device, enabled=False):
        torch.manual_seed(3)  # dropout: the same masks
        loss_a = _loss(eager(**theirs))
        torch.manual_seed(3)
        loss_b = _loss(mine(**inputs))
    loss_a.backward()
    loss_b.backward()
    grads = [
        (a.grad.float(), b.grad.float())
        for a, b in zip(eager.parameters(), mine.parameters())
    ]
    scale = max(float(a.abs().max()) for a, _ in grads) or 1.0
    err = max(float((a - b).abs().max()) for a, b in grads) / scale
    for a, b in zip(eager.buffers(), mine.buffers()):  # running statistics
        a, b = a.double(), b.double()
        err = max(err, float((a - b).abs().max()) / (float(a.abs().max()) or 1.0))
    rel = abs(loss_a.item() - loss_b.item()) / max(abs(loss_a.item()), 1e-12)
    return max(err, rel)


def measure(case: Case, device: str, work: Path, rounds: int, steps: int) -> dict:
    eager, mine = _models(case, device, work)
    compiled_src = copy.deepcopy(eager)
    compiled = torch.compile(compiled_src)
    contestants = {"eager": eager, "compile": compiled, "generated": mine}
    owners = {"eager": eager, "compile": compiled_src, "generated": mine}
    opts = {k: _optimizer(owners[k], device) for k in contestants}
    inputs = _inputs(case, device, 2)
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)

    def step(name: str) -> None:
        out = contestants[name](**inputs)
        _loss(out).backward()
        opts[name].step()
        opts[name].zero_grad(set_to_none=True)

    start = time.perf_counter()
    step("compile")
    sync()
    first = time.perf_counter() - start
    times = {k: [] for k in contestants}
    peaks = {}
    for name in contestants:  # warm: every optimizer's state exists from here on
        step(name)
        sync()
    for name in contestants:  # the peak memory of one step
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()
            step(name)
            sync()
            peaks[name] = torch.cuda.max_memory_allocated() / 2**20
    for _ in range(rounds):
        for name in contestants:
            sync()
            t0 = time.perf_counter()
            for _ in range(steps):
                step(name)
            sync()
            times[name].append((time.perf_counter() - t0) / steps * 1e3)
    ms = {k: statistics.median(v) for k, v in times.items()}
    return {"ms": ms, "peak": peaks, "compile_first_s": first}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=["cpu", "cuda"], default="cuda")
    p.add_argument("--build", type=Path)
    p.add_argument("--prebuilt", type=Path)
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--cases", default="")
    args = p.parse_args(argv)
    if args.build:
        build(args.device, args.build.resolve())
        return 0
    if args.prebuilt is None:
        p.error("give --build DIR or --prebuilt DIR")
    work = args.prebuilt.resolve()
    sys.path.insert(0, str(work))
    if args.device == "cpu":
        torch.set_num_threads(torch.get_num_threads())
    wanted = set(filter(None, args.cases.split(",")))
    rows = []
    for case in CASES[args.device]:
        if wanted and case.name not in wanted:
            continue
        err = check(case, args.device, work)
        print(f"{case.name}: check, largest error {err:.1e}", file=sys.stderr)
        r = measure(case, args.device, work, args.rounds, args.steps)
        ms, peak = r["ms"], r["peak"]
        rows.append((case, err, ms, peak, r["compile_first_s"]))
        print(f"{case.name}: {ms}", file=sys.stderr)
    head = (
        "| case | eager ms | compile ms | generated ms | gen vs eager | gen vs compile"
    )
    head += " | peak MiB eager / compile / gen | max err |"
    print(head)
    print("|---" * 8 + "|")
    ratios = []
    for case, err, ms, peak, _ in rows:
        e, c, g = ms["eager"], ms["compile"], ms["generated"]
        ratios.append(c / g)
        mem = " / ".join(f"{peak[k]:.0f}" for k in peak)  # cuda only
        print(
            f"| {case.name} | {e:.3f} | {c:.3f} | {g:.3f} | {e / g:.2f}x | {c / g:.2f}x"
            f" | {mem or '-'} | {err:.1e} |"
        )
    if ratios:
        geo = statistics.geometric_mean(ratios)
        print(f"| geomean vs compile | | | | | {geo:.2f}x | | |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
