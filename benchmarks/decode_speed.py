"""Greedy decoding speed of causal language models: eager vs torch.compile vs generated.

    python benchmarks/decode_speed.py [--models gpt2,llama] [--device cpu|cuda]
        [--prompt N] [--tokens N] [--rounds N] [--no-compile] [--profile] [--keep DIR]

Each model is a transformers causal LM at a realistic size with random weights
(GPT-2 small; the LLaMA-shaped stack of models_speed.py with its LM head). For each:

1. `transpile` (a fresh process) compiles two variants of its class: the prefill,
   `input_ids=i64[1,PROMPT], use_cache=bool=True`, which returns the key/value cache
   it built, and the decode step, `input_ids=i64[1,1],
   cache=benchmarks.decode_speed::kv_cache(P), use_cache=bool=True` (the cache is
   `past_key_values` before transformers 5.24), for any cache length P (Note
   [Objects passed in]);
2. eager, `torch.compile(model)` (default mode; its automatic dynamic shapes
   recompile once for a second cache length) and the generated module each
   generate `--tokens` tokens greedily from the same random prompt; compiled and
   generated must give eager's tokens, and every generated call must run a compiled
   variant;
3. the whole generation (prefill, then `--tokens - 1` decode steps) is timed for all
   three in `--rounds` interleaved rounds (`benchmarks.common.interleaved`), after a
   warmup generation each: the median, in ms per generated token.

Prints one markdown table; `--profile` also prints to stderr the Python functions
with the most host time over one generated generation (cProfile). Exit status 1
when a generated module fails to build, runs the source, or gives other tokens.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import inspect
import shutil
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script

from benchmarks import common  # noqa: E402
from benchmarks.models_speed import (  # noqa: E402
    LLAMA_LAYERS,
    Model,
    _finish,
    count_variant_calls,
    sync,
    transpile,
)


def gpt2_lm():
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    return _finish(GPT2LMHeadModel(GPT2Config()))  # 12 x 768, 12 heads


def llama_lm():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=32000, hidden_size=2048, intermediate_size=5632,
        num_hidden_layers=LLAMA_LAYERS, num_attention_heads=16,
        num_key_value_heads=4, max_position_embeddings=2048,
    )  # fmt: skip
    return _finish(LlamaForCausalLM(config))


def kv_cache(model, P: int):
    """The decode variant's example cache, of P tokens, as a decode step leaves it."""
    from transformers import DynamicCache

    config = model.config
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    dim = config.hidden_size // config.num_attention_heads
    dtype = next(model.parameters()).dtype
    cache = DynamicCache(config=config)
    for layer in range(config.num_hidden_layers):
        for tokens in (P - 1, 1):  # a prefill, then a decode step
            keys, values = torch.zeros(2, 1, heads, tokens, dim, dtype=dtype)
            cache.update(keys, values, layer)
    return cache


MODELS = {
    "gpt2": Model(
        "gpt2",
        "transformers.models.gpt2.modeling_gpt2::GPT2LMHeadModel",
        "gpt2_lm",
        "input_ids",
    ),
    "llama": Model(
        "llama",
        "transformers.models.llama.modeling_llama::LlamaForCausalLM",
        "llama_lm",
        "input_ids",
    ),
}


def cache_argument(model_class) -> str:
    """What transformers names the key/value cache, as an argument of `forward`
    and a field of its output: `cache` from 5.24, `past_key_values` before."""
    forward = inspect.signature(model_class.forward).parameters
    return "cache" if "cache" in forward else "past_key_values"


def generate(forward, prompt: torch.Tensor, tokens: int, cache: str) -> torch.Tensor:
    out = forward(input_ids=prompt, use_cache=True)
    new = [out.logits[:, -1:].argmax(-1)]
    for _ in range(tokens - 1):
        past = {cache: getattr(out, cache)}
        out = forward(input_ids=new[-1], **past, use_cache=True)
        new.append(out.logits[:, -1:].argmax(-1))
    return torch.cat(new, dim=1)


def run_model(model: Model, args: argparse.Namespace, work: Path) -> list[str]:
    out = work / model.name
    decode = "benchmarks.decode_speed::kv_cache(P)"
    module, name = model.target.split("::")
    cache = cache_argument(getattr(importlib.import_module(module), name))
    command = [
        model.target, "--factory", f"benchmarks/decode_speed.py::{model.factory}",
        "--variant", f"input_ids=i64[1,{args.prompt}], use_cache=bool=True",
        "--variant",
        f"input_ids=i64[1,1], {cache}={decode}, use_cache=bool=True",
        "--device", args.device, "-o", str(out),
    ]  # fmt: skip
    seconds, _ = transpile(model, command, "f32")
    sys.path.insert(0, str(work))
    gen = importlib.import_module(
        f"{model.name}.{model.target.split('::')[0].split('.')[-1]}"
    )
    eager = globals()[model.factory]().to(args.device)
    generated = copy.deepcopy(eager)
    generated.__class__ = getattr(gen, model.target.split("::")[1])
    prompt = torch.randint(
        0, eager.config.vocab_size, (1, args.prompt),
        generator=torch.Generator().manual_seed(0),
    ).to(args.device)  # fmt: skip
    fns = {
        "eager": lambda: generate(eager, prompt, args.tokens, cache),
        "generated": lambda: generate(generated, prompt, args.tokens, cache),
    }
    problems = []
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        want = fns["eager"]()
        got, calls = count_variant_calls(gen, fns["generated"])
        if calls != args.tokens:
            problems.append(f"{calls} of {args.tokens} calls ran compiled variants")
        if not torch.equal(got, want):
            problems.append("generated tokens differ from eager's")
        compile_s = None
        if not args.no_compile:
            compiled = torch.compile(eager)
            start = time.perf_counter()
            first = generate(compiled, prompt, args.tokens, cache)
            sync(args.device)
            compile_s = time.perf_counter() - start
            if not torch.equal(first, want):
                problems.append("torch.compile's tokens differ from eager's")
            fns["compiled"] = lambda: generate(compiled, prompt, args.tokens, cache)

        def timer(fn) -> float:
            sync(args.device)
            start = time.perf_counter()
            fn()
            sync(args.device)
            return (time.perf_counter() - start) * 1e3 / args.tokens

        for fn in fns.values():  # warm up
            fn()
        ms = common.interleaved(timer, args.rounds)(fns)
        if args.profile:
            _host_profile(model.name, fns["generated"])
    comp = ms.get("compiled")
    ratio = f"{comp / ms['generated']:.2f}x" if comp else "-"
    row = (
        f"| {model.name} | {args.prompt}+{args.tokens} | {seconds:.1f} | "
        f"{'-' if compile_s is None else f'{compile_s:.1f}'} | {ms['eager']:.2f} | "
        f"{'-' if comp is None else f'{comp:.2f}'} | {ms['generated']:.2f} | "
        f"{ms['eager'] / ms['generated']:.2f}x | {ratio} |"
    )
    print(f"{model.name}: {row} {problems}", file=sys.stderr)
    return [row, *(f"{model.name}: {p}" for p in problems)]


def _host_profile(name: str, fn) -> None:
    import cProfile
    import io
    import pstats

    profiler = cProfile.Profile()
    profiler.runcall(fn)
    text = io.StringIO()
    pstats.Stats(profiler, stream=text).sort_stats("tottime").print_stats(18)
    print(
        f"{name}: host time of one generated generation\n{text.getvalue()}",
        file=sys.stderr,
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="gpt2,llama")
    parser.add_argument(
        "--device", default="cuda" if torch.cuda.is_available() else "cpu"
    )
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--tokens", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-compile", action="store_true")
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--keep", type=Path)
    args = parser.parse_args(argv)
    work = args.keep or Path(tempfile.mkdtemp(prefix="decode_speed_"))
    lines, failed = [], False
    try:
        for name in args.models.split(","):
            try:
                row, *problems = run_model(MODELS[name], args, work)
            except Exception as e:  # a failed build is a row of the report
                row, problems = f"| {name} | failed: {e} |", [f"{name}: {e}"]
            lines.append(row)
            failed |= bool(problems)
            lines += [f"\n{p}" for p in problems]
    finally:
        if args.keep is None:
            shutil.rmtree(work, ignore_errors=True)
    print(
        f"Greedy decoding, batch 1, {args.device}, f32; ms per generated token "
        "(prefill included), median of interleaved rounds\n"
    )
    print(
        "| model | prompt+new | transpile s | compile s | eager | compile | "
        "generated | vs eager | vs compile |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(line for line in lines if line.startswith("|")))
    for line in lines:
        if not line.startswith("|"):
            print(line.strip())
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
