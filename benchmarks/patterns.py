"""Pattern suite: memory-bound and fusion patterns of real models, eager vs
torch.compile vs generated, in one run.

    python benchmarks/patterns.py [--device cpu|cuda] [--suite main|heldout]
        [--cases a,b] [--quick] [--rounds N] [--threads N] [--jobs N] [--keep DIR]
        [--json FILE] [--list] [--build DIR | --prebuilt DIR]

The patterns are the functions and modules of `benchmarks/patterns_src.py`, each as
a model library writes it (RMSNorm * silu(gate) of Mamba2, F.cross_entropy over a
32K vocabulary, the LLaMA decoder layer, rotary embeddings, SwiGLU, GroupNorm,
detectron2's frozen batch norm, a functional Adam step, ...); `PATTERNS` below gives
each one a GPU shape (hundreds of MB of traffic: bandwidth-bound) and a CPU shape (a
few milliseconds on two cores), with their dtypes. `--suite heldout` runs `HELDOUT`
instead, the patterns of `benchmarks/heldout_src.py`: written from model libraries
after the kernels were, to measure the compiler on code it was not tuned for. For
each pattern it

1. transpiles it with the `transpile` command line in a fresh process
   (`transpile benchmarks/patterns_src.py::NAME --example NAME=TYPE ... --device
   DEVICE -o <temp dir>/gen_CASE`), all cases up front, `--jobs` at a time;
2. imports the generated module and reads, from its docstring, the variant's
   kernels and extern calls (ops left to PyTorch: matmuls, convolutions,
   attention, and ops the compiler has no kernel for) and its graph breaks;
3. checks the generated output against eager's on seeded inputs (f32: rtol 1e-3,
   atol 1e-4; bf16: against eager run in f32 on upcast inputs and weights, within
   twice eager's own error there; integer and bool outputs exactly), and that a
   compiled variant ran rather than the guards sending the call to the source;
4. compiles eager with `torch.compile` (default mode) and checks it the same way;
5. times eager, compiled and generated under `torch.no_grad()`, interleaved: each of
   `--rounds` rounds times all of them once, in a rotating order
   (`benchmarks.common.interleaved`); each figure is the median over the rounds
   (GPU: `triton.testing.do_bench` medians, L2 flushed; CPU: `time.perf_counter`
   medians, glibc malloc pinned (thresholds, no mmap), the same `--threads` for all).

First it measures the copy bandwidth (`y.copy_(x)` on float32, bytes read +
written). For memory-bound cases (all but the ResNet block and the LLaMA block) the
table gives the achieved bandwidth of generated and compiled code, the bytes of the
inputs, weights and outputs, each counted once, over the time, as a percentage of
that copy bandwidth.

It prints one markdown table: per case the input shapes, dtype, eager / compiled /
generated milliseconds, the speedups of generated over eager and over compiled (> 1:
generated is faster), % of copy bandwidth (generated / compiled), the generated
variant's kernels / extern calls (+ graph breaks), the generated output's max abs
error against eager (bf16: against eager in f32) and a note; then a geomean row over
the cases where both sides are timed and correct, a summary against the targets, and
a line per failure. A case that fails to transpile, falls back to the source or gives
a wrong result is a row saying so; the run goes on. `--json FILE` also writes the
rows. Progress goes to stderr. Nothing is written into the repository: the generated
code goes to a temporary directory (kept with `--keep DIR`). Exit status 1 if any
case fails to build, falls back to the source or gives wrong results; 2 for bad
arguments or a missing device.

On a GPU machine, `python benchmarks/patterns.py --device cuda --json cuda.json`.
Transpiling needs the transpiler and its dependencies (libcst, black); where the GPU
machine lacks them, transpile elsewhere with `--device cuda --build DIR` (no GPU
needed; the errors of cases that fail to build are kept in DIR/failures.json) and
measure there with `--device cuda --prebuilt DIR`.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script

from benchmarks import common, patterns_src  # noqa: E402
from benchmarks.common import number_cell, ratio_cell  # noqa: E402
from benchmarks.models_speed import (  # noqa: E402
    count_variant_calls,
    max_error,
    variant_counts,
)
from examples.compare import (  # noqa: E402
    LOW_PRECISION,
    TensorSpec,
    call_watching,
    flatten,
    parse_spec,
    reference,
)

F32_TOL = (1e-3, 1e-4)  # (rtol, atol) of the generated and compiled outputs
LOW_SLACK = 2.0  # f16/bf16: error against f32, in units of eager's own
TIMEOUT_S = 900  # of one transpile
COPY_NUMEL = {"cuda": (256 * 2**20, 64 * 2**20), "cpu": (64 * 2**20, 16 * 2**20)}
TARGETS = {  # the done-when of the suite: (each case, geomean) vs torch.compile
    "cuda": "every case >= 0.95x compile, geomean >= 1.05x, memory-bound >= 85% copy",
    "cpu": "every case >= 0.95x compile and >= 1x eager, geomean >= 1.1x compile",
}

# ----------------------------------------------------------------------- inputs
# Input preparations: seeded random inputs made realistic where randn is not
# (masks, rotary tables, positive variances, non-finite values).


def _padding(spec: torch.Tensor, gen: torch.Generator) -> torch.Tensor:
    """A padding mask shaped like `spec`: each row keeps a prefix of random length,
    every fourth row keeps all."""
    s = spec.shape[-1]
    rows = spec.numel() // s
    lengths = torch.randint(s // 4, s + 1, (rows,), generator=gen)
    lengths[::4] = s
    mask = torch.arange(s)[None, :] < lengths[:, None]
    return mask.reshape(spec.shape).to(device=spec.device, dtype=spec.dtype)


def padding_mask(inputs: dict, gen: torch.Generator) -> None:
    inputs["mask"] = _padding(inputs["mask"], gen)


def causal_mask(inputs: dict, gen: torch.Generator) -> None:
    causal = inputs["causal"]
    s = causal.shape[-1]
    tril = torch.ones(s, s, dtype=torch.bool, device=causal.device).tril()
    inputs["causal"] = tril.expand(causal.shape).contiguous()


def rope_tables(inputs: dict, gen: torch.Generator) -> None:
    """cos and sin of LLaMA's rotary embedding (base 10000) for positions 0..S-1."""
    cos = inputs["cos"]
    batch, seq, dim = cos.shape
    inv_freq = 1.0 / 10000 ** (torch.arange(0, dim, 2, dtype=torch.float32) / dim)
    freqs = torch.outer(torch.arange(seq, dtype=torch.float32), inv_freq)
    emb = torch.cat((freqs, freqs), dim=-1)
    for name, table in (("cos", emb.cos()), ("sin", emb.sin())):
        table = table[None].expand(batch, seq, dim).contiguous()
        inputs[name] = table.to(device=cos.device, dtype=cos.dtype)


def nonfinite(inputs: dict, gen: torch.Generator) -> None:
    x = inputs["x"].view(-1)
    index = torch.arange(x.numel(), device=x.device)
    x[index % 97 == 0] = float("nan")
    x[index % 89 == 1] = float("inf")
    x[index % 83 == 2] = float("-inf")


def positive_variance(inputs: dict, gen: torch.Generator) -> None:
    for name in ("v", "running_var"):
        if name in inputs:
            inputs[name] = inputs[name].abs() + 0.1


def quant_scale(inputs: dict, gen: torch.Generator) -> None:
    inputs["scale"] = inputs["scale"].abs() * 0.01 + 1e-3


def rows_of(index: str, table: str) -> Callable[[dict, torch.Generator], None]:
    """Draws `index` uniformly over the rows of `table` (routed tokens, edges'
    destination nodes), as many rows as the device's shape has."""

    def draw(inputs: dict, gen: torch.Generator) -> None:
        old, rows = inputs[index], inputs[table].shape[0]
        new = torch.randint(0, rows, old.shape, generator=gen)
        inputs[index] = new.to(device=old.device, dtype=old.dtype)

    return draw


def edges_into_nodes(inputs: dict, gen: torch.Generator) -> None:
    """Each edge's destination node drawn uniformly, ten edges a node."""
    old = inputs["dst"]
    new = torch.randint(0, old.shape[0] // 10, old.shape, generator=gen)
    inputs["dst"] = new.to(device=old.device, dtype=old.dtype)


def image_tokens(inputs: dict, gen: torch.Generator) -> None:
    """Each sample's image tokens, as many as the features have rows for, in
    one run after a text prefix (LLaVA's prompt layout)."""
    ids, features = inputs["input_ids"], inputs["image_features"]
    per_sample = features.shape[0] // ids.shape[0]
    ids[:, 16 : 16 + per_sample] = patterns_src.IMAGE_TOKEN


# ----------------------------------------------------------------------- cases


@dataclass(frozen=True)
class Pattern:
    """One case: a function or module of `patterns_src`, its inputs per device."""

    name: str  # the case's name (--cases)
    source: str  # the function or module class in patterns_src
    cuda: dict[str, str]  # input TYPE specs on the GPU
    cpu: dict[str, str]  # input TYPE specs on the CPU
    init: dict[str, dict[str, object]] = field(default_factory=dict)  # by device
    ints: dict[str, tuple[int, int]] = field(default_factory=dict)  # [low, high)
    prepare: Callable[[dict, torch.Generator], None] | None = None
    compute_bound: bool = False  # matmuls or convolutions dominate: no GB/s
    gathered: dict[str, str] = field(default_factory=dict)  # weight -> its indices
    tol: tuple[float, float] = F32_TOL  # f32 (rtol, atol)
    module: str = "patterns_src"  # the module of benchmarks/ that holds `source`

    @property
    def path(self) -> str:
        """The source file, as the `transpile` command line names it."""
        return f"benchmarks/{self.module}.py"

    def specs(self, device: str) -> dict[str, str]:
        return self.cuda if device == "cuda" else self.cpu

    def init_for(self, device: str) -> dict[str, object]:
        return self.init.get(device, {})


def _same(spec: str, *names: str) -> dict[str, str]:
    return dict.fromkeys(names, spec)


VOCAB = (0, 32000)
PATTERNS = [
    Pattern(
        "rmsnorm_gated", "rmsnorm_gated",
        {"x": "bf16[16384,4096]", "gate": "bf16[16384,4096]", "weight": "bf16[4096]"},
        {"x": "bf16[2048,2048]", "gate": "bf16[2048,2048]", "weight": "bf16[2048]"},
    ),
    Pattern(
        "cross_entropy", "cross_entropy",
        {"logits": "f32[8192,32000]", "target": "i64[8192]"},
        {"logits": "f32[256,32000]", "target": "i64[256]"},
        ints={"target": VOCAB},
    ),
    Pattern(
        "cross_entropy_128k", "cross_entropy",  # a Llama 3 vocabulary
        {"logits": "f32[2048,128256]", "target": "i64[2048]"},
        {"logits": "f32[64,128256]", "target": "i64[64]"},
        ints={"target": (0, 128256)},
    ),
    Pattern(
        "nll_gather", "nll_gather",
        {"logits": "f32[8192,32000]", "target": "i64[8192]"},
        {"logits": "f32[256,32000]", "target": "i64[256]"},
        ints={"target": VOCAB},
    ),
    Pattern(
        "nll_pick", "nll_pick",
        {"logits": "f32[8192,32000]", "target": "i64[8192]"},
        {"logits": "f32[256,32000]", "target": "i64[256]"},
        ints={"target": VOCAB},
    ),
    Pattern(
        "nll_gather_decode", "nll_gather",  # a decode step's few rows, split
        {"logits": "f32[16,128256]", "target": "i64[16]"},
        {"logits": "f32[8,128256]", "target": "i64[8]"},
        ints={"target": (0, 128256)},
    ),
    Pattern(
        "column_stats", "column_stats",
        {"x": "f32[16384,4096]"}, {"x": "f32[4096,2048]"},
    ),
    Pattern(
        "mean_hw", "mean_hw", {"x": "f32[128,256,56,56]"}, {"x": "f32[16,128,56,56]"}
    ),
    Pattern(
        "avgmax_pool_head", "avgmax_pool_head",
        {"x": "f32[256,2048,7,7]"}, {"x": "f32[32,2048,7,7]"},
    ),
    Pattern("var_std", "var_std", {"x": "f32[16384,4096]"}, {"x": "f32[2048,2048]"}),
    Pattern(
        "layernorm_gelu", "LayerNormGELU",
        {"x": "bf16[16384,4096]"}, {"x": "f32[4096,1024]"},
        init={"cuda": {"dim": 4096, "bf16": True}, "cpu": {"dim": 1024}},
    ),
    Pattern(
        "softmax_32k", "softmax_rows",
        {"x": "f32[4096,32768]"}, {"x": "f32[256,32768]"},
    ),
    Pattern(
        "logsumexp_32k", "logsumexp_rows",
        {"x": "f32[4096,32768]"}, {"x": "f32[256,32768]"},
    ),
    Pattern(
        "resnet_basic_block", "ResNetBasicBlock",
        {"x": "f32[32,64,56,56]"}, {"x": "f32[1,64,56,56]"},
        init={"cuda": {"channels": 64}, "cpu": {"channels": 64}},
        compute_bound=True,
    ),
    Pattern(
        "llama_block", "LlamaDecoderBlock",
        {"x": "bf16[4,1024,2048]", **_same("bf16[4,1024,128]", "cos", "sin")},
        {"x": "f32[1,64,512]", "cos": "f32[1,64,64]", "sin": "f32[1,64,64]"},
        init={
            "cuda": {"bf16": True},
            "cpu": {"hidden": 512, "heads": 8, "kv_heads": 2, "intermediate": 1408},
        },
        prepare=rope_tables,
        compute_bound=True,
    ),
    Pattern(
        "rotary", "rotary",
        {
            "q": "bf16[8,32,1024,128]", "k": "bf16[8,8,1024,128]",
            "cos": "bf16[8,1024,128]", "sin": "bf16[8,1024,128]",
        },
        {
            "q": "f32[4,16,512,64]", "k": "f32[4,4,512,64]",
            "cos": "f32[4,512,64]", "sin": "f32[4,512,64]",
        },
        prepare=rope_tables,
    ),
    Pattern(
        "swiglu", "swiglu",
        _same("bf16[8192,11008]", "gate", "up"), _same("bf16[2048,2816]", "gate", "up"),
    ),
    Pattern(
        "swiglu_chunk", "swiglu_chunk",
        {"gate_up": "bf16[8192,16384]"}, {"gate_up": "f32[2048,5632]"},
    ),
    Pattern("geglu", "geglu", {"h": "bf16[8192,10240]"}, {"h": "f32[4096,2560]"}),
    Pattern(
        "gelu_tanh", "gelu_tanh", {"x": "f32[16384,3072]"}, {"x": "f32[2048,3072]"}
    ),
    Pattern(
        "quick_gelu", "quick_gelu", {"x": "f32[16384,3072]"}, {"x": "f32[2048,3072]"}
    ),
    Pattern(
        "bias_dropout_residual_ln", "BiasDropoutResidualLayerNorm",
        _same("f32[32768,1024]", "x", "residual"),
        _same("f32[4096,1024]", "x", "residual"),
        init={"cuda": {"dim": 1024}, "cpu": {"dim": 1024}},
    ),
    Pattern(
        "masked_softmax", "masked_softmax",
        {"scores": "f32[8,16,1024,1024]", "mask": "bool[8,1,1,1024]"},
        {"scores": "f32[4,16,256,256]", "mask": "bool[4,1,1,256]"},
        prepare=padding_mask,
    ),
    Pattern(
        "where_causal", "where_causal",
        {"weights": "f32[8,16,1024,1024]", "causal": "bool[1,1,1024,1024]"},
        {"weights": "f32[4,16,256,256]", "causal": "bool[1,1,256,256]"},
        prepare=causal_mask,
    ),
    Pattern(
        "embedding_pos_ln", "EmbeddingPositionLayerNorm",
        {"input_ids": "i64[128,512]"}, {"input_ids": "i64[16,512]"},
        ints={"input_ids": (0, 30522)},
        gathered={"word.weight": "input_ids"},
    ),
    Pattern(
        "cumsum", "cumsum_rows", {"x": "f32[16384,4096]"}, {"x": "f32[2048,2048]"},
        tol=(1e-3, 1e-3),  # running sums of 4096 randn: rounding of order 1e-4
    ),
    Pattern(
        "argmax_vocab", "argmax_vocab",
        {"logits": "f32[8192,32000]"}, {"logits": "f32[256,32000]"},
    ),
    Pattern(
        "greedy_step", "greedy_step",
        {"logits": "bf16[2048,1,32000]", "input_ids": "i64[2048,512]"},
        {"logits": "f32[256,1,32000]", "input_ids": "i64[256,512]"},
        ints={"input_ids": VOCAB},
    ),
    Pattern(
        "softcap", "softcap",
        {"logits": "f32[4096,32000]"}, {"logits": "f32[256,32000]"},
    ),
    Pattern(
        "cat_relu", "cat_relu",
        {"a": "f32[32,128,56,56]", "b": "f32[32,96,56,56]", "c": "f32[32,32,56,56]"},
        {"a": "f32[8,128,56,56]", "b": "f32[8,96,56,56]", "c": "f32[8,32,56,56]"},
    ),
    Pattern(
        "pad_pointwise", "pad_pointwise",
        {"x": "f32[64,256,56,56]"}, {"x": "f32[16,128,56,56]"},
    ),
    Pattern(
        "roll_shift", "roll_shift",
        {"x": "f32[128,56,56,128]"}, {"x": "f32[16,56,56,128]"},
    ),
    Pattern(
        "flip_average", "flip_average",
        {"x": "f32[64,256,56,56]"}, {"x": "f32[16,128,56,56]"},
    ),
    Pattern(
        "stack_sum", "stack_sum",
        _same("f32[8192,4096]", "a", "b", "c", "d"),
        _same("f32[2048,1024]", "a", "b", "c", "d"),
    ),
    Pattern(
        "mobilenet_hard", "mobilenet_hard",
        {"x": "f32[256,240,28,28]", "se": "f32[256,240,1,1]"},
        {"x": "f32[32,240,28,28]", "se": "f32[32,240,1,1]"},
    ),
    Pattern(
        "hard_swish_manual", "hard_swish_manual",
        {"x": "f32[64,256,56,56]"}, {"x": "f32[16,128,56,56]"},
    ),
    Pattern(
        "silu_nchw", "silu_nchw", {"x": "f32[64,256,56,56]"}, {"x": "f32[16,128,56,56]"}
    ),
    Pattern(
        "groupnorm", "GroupNorm", {"x": "f32[32,256,64,64]"}, {"x": "f32[16,256,32,32]"}
    ),
    Pattern(
        "groupnorm_silu", "GroupNormSiLU",
        {"x": "f32[32,256,64,64]"}, {"x": "f32[16,256,32,32]"},
    ),
    Pattern(
        "groupnorm_silu_sd", "GroupNormSiLU",  # Stable Diffusion's first UNet block
        {"x": "f32[2,320,64,64]"}, {"x": "f32[1,320,32,32]"},
        init={"cuda": {"channels": 320}, "cpu": {"channels": 320}},
    ),
    Pattern(
        "stem_pool", "StemPool",
        {"x": "f32[32,64,112,112]"}, {"x": "f32[8,64,112,112]"},
    ),
    Pattern(
        "transition_pool", "transition_pool",
        {"x": "f32[64,256,56,56]"}, {"x": "f32[16,128,56,56]"},
    ),
    Pattern(
        "fpn_upsample_add", "fpn_upsample_add",
        {"top": "f32[16,256,64,64]", "lateral": "f32[16,256,128,128]"},
        {"top": "f32[4,256,32,32]", "lateral": "f32[4,256,64,64]"},
    ),
    Pattern(
        "bilinear_upsample_add", "bilinear_upsample_add",
        {"top": "f32[16,256,64,64]", "lateral": "f32[16,256,128,128]"},
        {"top": "f32[4,256,32,32]", "lateral": "f32[4,256,64,64]"},
    ),
    Pattern(
        "reflect_pad_relu", "reflect_pad_relu",
        {"x": "f32[16,256,64,64]"}, {"x": "f32[4,256,64,64]"},
    ),
    Pattern(
        "moe_combine", "moe_combine",
        {"hidden": "f32[8192,4096]", "expert_out": "f32[16384,4096]",
         "token_idx": "i64[16384]", "weights": "f32[16384]"},
        {"hidden": "f32[1024,1024]", "expert_out": "f32[2048,1024]",
         "token_idx": "i64[2048]", "weights": "f32[2048]"},
        prepare=rows_of("token_idx", "hidden"),
    ),
    Pattern(
        "scatter_sum_messages", "scatter_sum_messages",
        {"x": "f32[100000,64]", "messages": "f32[1000000,64]", "dst": "i64[1000000]"},
        {"x": "f32[10000,64]", "messages": "f32[100000,64]", "dst": "i64[100000]"},
        prepare=rows_of("dst", "x"),
    ),
    Pattern(
        "scatter_max_mean_messages", "scatter_max_mean_messages",
        {"messages": "f32[1000000,64]", "dst": "i64[1000000]"},
        {"messages": "f32[100000,64]", "dst": "i64[100000]"},
        prepare=edges_into_nodes,
    ),
    Pattern(
        "static_kv_cache", "StaticKVCache",
        {**_same("bf16[8,32,1,128]", "query", "key_states", "value_states"),
         "cache_position": "i64[1]"},
        {**_same("f32[1,8,1,64]", "query", "key_states", "value_states"),
         "cache_position": "i64[1]"},
        init={"cuda": {"batch": 8, "heads": 32, "length": 4096, "dim": 128,
                       "bf16": True},
              "cpu": {"batch": 1, "heads": 8, "length": 2048, "dim": 64}},
        ints={"cache_position": (0, 2048)},
    ),
    Pattern(
        "image_features_merge", "image_features_merge",
        {"inputs_embeds": "bf16[8,2048,4096]", "input_ids": "i64[8,2048]",
         "image_features": "bf16[4608,4096]"},
        {"inputs_embeds": "f32[2,1024,1024]", "input_ids": "i64[2,1024]",
         "image_features": "f32[512,1024]"},
        ints={"input_ids": (0, 32000)},
        prepare=image_tokens,
    ),
    Pattern(
        "l2_normalize", "l2_normalize",
        {"x": "f32[65536,1024]"}, {"x": "f32[8192,1024]"},
    ),
    Pattern(
        "frozen_batchnorm", "frozen_batchnorm",
        {
            "x": "f32[64,256,56,56]",
            **_same("f32[256]", "weight", "bias", "running_mean", "running_var"),
        },
        {
            "x": "f32[16,128,56,56]",
            **_same("f32[128]", "weight", "bias", "running_mean", "running_var"),
        },
        prepare=positive_variance,
    ),
    Pattern(
        "mask_any_all", "mask_any_all",
        {"mask": "bool[32768,8192]"}, {"mask": "bool[8192,4096]"},
        prepare=padding_mask,
    ),
    Pattern(
        "masked_mean_pool", "masked_mean_pool",
        {"hidden": "f32[256,512,768]", "mask": "i64[256,512]"},
        {"hidden": "f32[32,256,768]", "mask": "i64[32,256]"},
        prepare=padding_mask,
    ),
    Pattern(
        "int8_dequant", "int8_dequant",
        {"q": "i8[16384,8192]", "scale": "f32[16384]"},
        {"q": "i8[4096,4096]", "scale": "f32[4096]"},
        ints={"q": (-128, 128)},
        prepare=quant_scale,
    ),
    Pattern(
        "nan_to_num", "nan_to_num",
        {"x": "f32[16384,4096]"}, {"x": "f32[2048,2048]"},
        prepare=nonfinite,
    ),
    Pattern(
        "adam_step", "adam_step",
        _same("f32[33554432]", "p", "grad", "m", "v"),
        _same("f32[4194304]", "p", "grad", "m", "v"),
        prepare=positive_variance,
    ),
    Pattern(
        "layer_scale_residual", "layer_scale_residual",
        {"x": "f32[64,56,56,192]", "y": "f32[64,56,56,192]", "gamma": "f32[192]"},
        {"x": "f32[16,56,56,96]", "y": "f32[16,56,56,96]", "gamma": "f32[96]"},
    ),
]  # fmt: skip


def _held(name: str, source: str, cuda: dict, cpu: dict, **kwargs) -> Pattern:
    return Pattern(name, source, cuda, cpu, module="heldout_src", **kwargs)


# `--suite heldout`: patterns written after the kernels were, never tuned for
HELDOUT = [
    _held(
        "t5_bucket", "t5_bucket",
        _same("i64[2048]", "q_pos", "k_pos"), _same("i64[512]", "q_pos", "k_pos"),
        ints={"q_pos": (0, 512), "k_pos": (0, 512)},
    ),
    _held(
        "layernorm2d", "LayerNorm2d",
        {"x": "f32[32,96,56,56]"}, {"x": "f32[8,96,56,56]"},
    ),
    _held(
        "swin_shift_partition", "swin_shift_partition",
        {"x": "f32[32,56,56,128]"}, {"x": "f32[8,56,56,96]"},
    ),
    _held(
        "timestep_embedding", "timestep_embedding",
        {"timesteps": "i64[8192]"}, {"timesteps": "i64[1024]"},
        ints={"timesteps": (0, 1000)},
    ),
    _held(
        "kd_loss", "kd_loss",
        _same("f32[4096,1000]", "student", "teacher"),
        _same("f32[512,1000]", "student", "teacher"),
    ),
    _held(
        "smoothed_ce", "smoothed_ce",
        {"logits": "f32[4096,1000]", "target": "i64[4096]"},
        {"logits": "f32[512,1000]", "target": "i64[512]"},
        ints={"target": (0, 1000)},
    ),
    _held(
        "llama_rmsnorm", "llama_rmsnorm",
        {"hidden_states": "bf16[16384,4096]", "weight": "bf16[4096]"},
        {"hidden_states": "bf16[2048,2048]", "weight": "bf16[2048]"},
    ),
    _held(
        "moe_router", "moe_router",
        {"router_logits": "f32[65536,8]"}, {"router_logits": "f32[8192,8]"},
    ),
    _held(
        "alibi_softmax", "alibi_softmax",
        {"scores": "f32[8,16,1024,1024]", "slopes": "f32[16]"},
        {"scores": "f32[2,16,256,256]", "slopes": "f32[16]"},
    ),
    _held(
        "squeeze_excite", "squeeze_excite",
        {"x": "f32[64,256,28,28]", "w1": "f32[64,256]", "w2": "f32[256,64]"},
        {"x": "f32[16,256,28,28]", "w1": "f32[64,256]", "w2": "f32[256,64]"},
    ),
    _held(
        "sigmoid_focal_loss", "sigmoid_focal_loss",
        _same("f32[65536,91]", "inputs", "targets"),
        _same("f32[8192,91]", "inputs", "targets"),
    ),
    _held(
        "pixel_shuffle_gelu", "pixel_shuffle_gelu",
        {"x": "f32[16,256,64,64]"}, {"x": "f32[4,256,32,32]"},
    ),
    _held(
        "bert_mask_softmax", "bert_extended_mask_softmax",
        {"scores": "f32[32,12,512,512]", "attention_mask": "i64[32,512]"},
        {"scores": "f32[4,12,256,256]", "attention_mask": "i64[4,256]"},
        ints={"attention_mask": (0, 2)},
    ),
    _held(
        "box_convert", "box_cxcywh_to_xyxy",
        {"x": "f32[65536,100,4]"}, {"x": "f32[8192,100,4]"},
    ),
    _held(
        "instance_norm_relu", "instance_norm_relu",
        {"x": "f32[16,256,64,64]"}, {"x": "f32[4,128,64,64]"},
    ),
    _held(
        "normalize_channels", "normalize_channels",
        {"x": "f32[64,256,56,56]"}, {"x": "f32[16,128,56,56]"},
    ),
    _held(
        "masked_fill_softmax", "masked_fill_softmax",
        {"scores": "f32[8,16,1024,1024]", "mask": "bool[8,1024]"},
        {"scores": "f32[2,16,256,256]", "mask": "bool[2,256]"},
    ),
    _held(
        "fake_quant", "fake_quant",
        {"x": "f32[4096,4096]", **_same("f32[4096]", "scale", "zero_point")},
        {"x": "f32[1024,1024]", **_same("f32[1024]", "scale", "zero_point")},
    ),
    _held(
        "selective_decay", "selective_decay",
        {"dt": "f32[4096,4096]", **_same("f32[4096]", "A", "dt_bias")},
        {"dt": "f32[1024,1024]", **_same("f32[1024]", "A", "dt_bias")},
    ),
    _held(
        "grad_norm_clip", "grad_norm_clip",
        {"g1": "f32[4096,4096]", "g2": "f32[4096]", "g3": "f32[1024,4096]"},
        {"g1": "f32[1024,1024]", "g2": "f32[1024]", "g3": "f32[256,1024]"},
    ),
    _held(
        "entropy_rows", "entropy_rows",
        {"logits": "f32[8192,32000]"}, {"logits": "f32[256,32000]"},
    ),
    _held(
        "glu_conv_out", "glu_conv_out",
        {"x": "f32[64,512,4096]"}, {"x": "f32[8,512,1024]"},
    ),
    _held(
        "interp_nearest_exact_add", "interp_nearest_exact_add",
        {"x": "f32[16,256,64,64]", "y": "f32[16,256,128,128]"},
        {"x": "f32[4,128,32,32]", "y": "f32[4,128,64,64]"},
    ),
    _held(
        "topk_filter_softmax", "logit_soft_clip_topk",
        {"logits": "f32[256,32000]"}, {"logits": "f32[64,32000]"},
    ),
]  # fmt: skip
SUITES = {"main": PATTERNS, "heldout": HELDOUT}


def make_inputs(pattern: Pattern, device: str, seed: int = 0) -> dict:
    """Seeded inputs drawn on `device`: floats randn, ints randint in
    `pattern.ints` (default [0, 10)), bools random; then `pattern.prepare`."""
    gen = torch.Generator(device).manual_seed(seed)
    inputs: dict[str, object] = {}
    for name, text in pattern.specs(device).items():
        spec = parse_spec(text)
        if not isinstance(spec, TensorSpec):
            inputs[name] = spec.value
        elif spec.dtype.is_floating_point:
            value = torch.randn(spec.shape, generator=gen, device=device)
            inputs[name] = value.to(spec.dtype)
        else:
            low, high = pattern.ints.get(
                name, (0, 2 if spec.dtype == torch.bool else 10)
            )
            value = torch.randint(low, high, spec.shape, generator=gen, device=device)
            inputs[name] = value.to(spec.dtype)
    if pattern.prepare is not None:
        pattern.prepare(inputs, torch.Generator().manual_seed(seed))
    return inputs


def traffic(pattern: Pattern, inputs: dict, eager, out: object) -> int:
    """Bytes of the inputs, weights and outputs, each counted once; a weight that
    is gathered by rows (`pattern.gathered`) counts only the rows its indices
    read, one per index."""
    weights = dict(eager.state_dict()) if isinstance(eager, torch.nn.Module) else {}
    rows = 0
    for weight, index in pattern.gathered.items():
        table = weights.pop(weight)
        rows += inputs[index].numel() * table[0].numel() * table.element_size()
    return common.tensor_bytes(inputs, list(weights.values()), out) + rows


def build_eager(pattern: Pattern, device: str):
    """The source function, or the seeded module on `device` in eval mode, its norm
    weights and biases and batch-norm statistics moved off their 1 / 0 defaults."""
    source = getattr(
        importlib.import_module(f"benchmarks.{pattern.module}"), pattern.source
    )
    if not isinstance(source, type):
        return source
    torch.manual_seed(0)
    module = source(**pattern.init_for(device))
    with torch.no_grad():
        for name, tensor in [*module.named_parameters(), *module.named_buffers()]:
            if not tensor.is_floating_point():
                continue
            if name.endswith("running_var"):
                tensor.uniform_(0.5, 1.5)
            elif tensor.dim() == 1:
                tensor.add_(torch.randn_like(tensor) * 0.1)
    return module.to(device).eval()


def low_precision(pattern: Pattern, device: str) -> bool:
    specs = [parse_spec(text) for text in pattern.specs(device).values()]
    return any(
        isinstance(s, TensorSpec) and s.dtype in LOW_PRECISION for s in specs
    ) or bool(pattern.init_for(device).get("bf16"))


def describe(pattern: Pattern, device: str) -> tuple[str, str]:
    """(shapes, dtypes): `x=[16384,4096], w=[4096]` and `bf16` (or `f32, i64`)."""
    shapes, dtypes = [], []
    for name, text in pattern.specs(device).items():
        kind, _, dims = text.partition("[")
        shapes.append(f"{name}=[{dims}")
        dtypes.append(kind)
    if pattern.init_for(device).get("bf16"):
        dtypes.insert(0, "bf16")
    return ", ".join(shapes), ", ".join(dict.fromkeys(dtypes))


# ------------------------------------------------------------------- checking


@dataclass
class Judge:
    """Judges an output against eager: integer and bool leaves exactly; floats in
    f32 within `F32_TOL`, in f16/bf16 against eager run in f32 on upcast inputs and
    weights, within `LOW_SLACK` times eager's own error there."""

    expected: object
    eager_err: float | None = None  # f16/bf16: eager's own error against f32
    tol: tuple[float, float] = F32_TOL  # f32 (rtol, atol)

    @classmethod
    def of(cls, eager, inputs: dict, low: bool, tol=F32_TOL) -> Judge:
        if not low:
            return cls(eager(**inputs), tol=tol)
        expected = reference(eager, inputs, low_precision=True)
        return cls(expected, max_error(eager(**inputs), expected), tol)

    def __call__(self, actual: object) -> tuple[float, bool]:
        """(max abs error, whether it is within tolerance)."""
        err = max_error(actual, self.expected)
        if err == math.inf:
            return err, False
        for a, e in zip(flatten(actual), flatten(self.expected)):
            if not isinstance(e, torch.Tensor):
                continue
            if not (e.is_floating_point() or e.is_complex()):
                if a.dtype != e.dtype or not torch.equal(a, e):
                    return err, False
            elif self.eager_err is None and not torch.allclose(
                a.double(), e.double(), *self.tol, equal_nan=True
            ):
                return err, False
        if self.eager_err is not None:
            return err, err <= LOW_SLACK * self.eager_err
        return err, True

    def wrong(self, err: float) -> str:
        if self.eager_err is None:
            return f"wrong, max abs {err:.2e}"
        return f"wrong, max abs {err:.2e} against f32 (eager's: {self.eager_err:.2e})"


# ------------------------------------------------------------------ transpile


@dataclass
class Built:
    """The outcome of transpiling one case."""

    out: Path
    seconds: float | None = None
    error: str | None = None
    stderr: str = ""


def transpile_args(pattern: Pattern, device: str, out: Path) -> list[str]:
    """The arguments of `transpile` for this case (after the command itself)."""
    args = [f"{pattern.path}::{pattern.source}"]
    for name, spec in pattern.specs(device).items():
        args += ["--example", f"{name}={spec}"]
    for key, value in pattern.init_for(device).items():
        args += ["--init", f"{key}={value!r}"]
    return args + ["--device", device, "-o", str(out)]


def transpile(pattern: Pattern, device: str, out: Path) -> Built:
    """`transpile ARGS` in a fresh process; never raises."""
    shutil.rmtree(out, ignore_errors=True)
    command = "import sys; from transpiler.cli import main; sys.exit(main())"
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(
        filter(None, [str(ROOT), env.get("PYTHONPATH")])
    )
    start = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, "-c", command, *transpile_args(pattern, device, out)],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        return Built(out, error=f"transpile took over {TIMEOUT_S} s")
    built = Built(out, time.perf_counter() - start, stderr=done.stderr)
    if done.returncode != 0:
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("transpile: error")]
        built.error = (errors or lines or [f"exit code {done.returncode}"])[-1]
    return built


def graph_breaks(path: Path) -> list[str]:
    """The lines of the generated module's "Graph breaks" section (none: [])."""
    text = path.read_text()
    found = re.search(r"Graph breaks \(code run eagerly\):\n((?:    .*\n)+)", text)
    if found is None:
        return []
    lines = [line.strip() for line in found[1].splitlines()]
    return [line for line in lines if line and line != "none"]


FAILURES = "failures.json"  # in a --build directory: the cases that did not build


def build_all(
    patterns: list[Pattern], device: str, work: Path, jobs: int, since: float
) -> list[Built]:
    """Transpile every case into `work/gen_CASE`, `jobs` at a time."""
    common.progress(
        f"transpiling {len(patterns)} cases for {device}, {jobs} at a time", since
    )
    work.mkdir(parents=True, exist_ok=True)

    def build(pattern: Pattern) -> Built:
        built = transpile(pattern, device, work / f"gen_{pattern.name}")
        state = f"failed: {built.error}" if built.error else "ok"
        took = number_cell(built.seconds, 1)
        common.progress(f"{pattern.name}: transpile {took} s, {state}", since)
        return built

    with ThreadPoolExecutor(jobs) as pool:
        return list(pool.map(build, patterns))


def write_failures(work: Path, builds: list[Built], patterns: list[Pattern]) -> None:
    """Record, for `--prebuilt`, why cases did not build (merged with earlier)."""
    path = work / FAILURES
    failures = json.loads(path.read_text()) if path.exists() else {}
    for pattern, built in zip(patterns, builds):
        failures.pop(pattern.name, None)
        if built.error is not None:
            failures[pattern.name] = built.error
    path.write_text(json.dumps(failures, indent=1) + "\n")


def read_prebuilt(work: Path, patterns: list[Pattern], device: str) -> list[Built]:
    """The cases `--build` transpiled into `work`, or why they are not there."""
    path = work / FAILURES
    failures = json.loads(path.read_text()) if path.exists() else {}
    builds = []
    for pattern in patterns:
        out = work / f"gen_{pattern.name}"
        built = Built(out, stderr="")
        if pattern.name in failures:
            built.error = failures[pattern.name]
        elif not (out / f"{pattern.module}.py").exists():
            built.error = f"not in {work} (build it with --build {work})"
        elif f"--device {device}" not in (out / f"{pattern.module}.py").read_text():
            built.error = f"{out} was not built for --device {device}"
        builds.append(built)
    return builds


# ------------------------------------------------------------------------ run


@dataclass
class Row:
    case: str
    shape: str
    dtype: str
    memory_bound: bool
    transpile_s: float | None = None
    eager_ms: float | None = None
    compile_ms: float | None = None
    generated_ms: float | None = None
    nbytes: int = 0  # inputs, weights and outputs, each once
    max_err: float | None = None  # generated vs eager (bf16: eager in f32)
    eager_err: float | None = None  # bf16: eager vs eager in f32
    compile_err: float | None = None
    kernels: int | None = None
    extern: int | None = None
    breaks: int = 0
    problems: list[str] = field(default_factory=list)

    @property
    def generated_ok(self) -> bool:
        return self.generated_ms is not None and not any(
            p.startswith("generated") for p in self.problems
        )

    @property
    def compile_ok(self) -> bool:
        return self.compile_ms is not None and not any(
            p.startswith("compile") for p in self.problems
        )

    def gbps(self, ms: float | None) -> float | None:
        if not self.memory_bound or ms is None or not self.nbytes:
            return None
        return self.nbytes / (ms * 1e-3) / 1e9


def sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def generated_like(module, pattern: Pattern, eager):
    """The generated function, or a copy of the eager module (its weights) of the
    generated class."""
    generated = getattr(module, pattern.source)
    if not isinstance(eager, torch.nn.Module):
        return generated
    gen = copy.deepcopy(eager)
    gen.__class__ = generated
    return gen


def run_generated(
    module, pattern: Pattern, eager, inputs: dict, judge: Judge, row: Row
):
    """The generated function or class (holding eager's weights), checked by
    `judge`; its timed call, or None (the reason added to `row.problems`)."""
    gen = generated_like(module, pattern, eager)
    eager_warned = call_watching(eager, inputs)[1]
    (actual, warned), ran = count_variant_calls(
        module, lambda: call_watching(gen, inputs)
    )
    sync(row_device(inputs))
    row.max_err, ok = judge(actual)
    del actual
    fell_back = [m for m in warned if m not in eager_warned]
    if fell_back or not ran:
        why = fell_back[0] if fell_back else "no compiled variant ran"
        row.problems.append(f"generated: ran the source: {why}")
    elif not ok:
        row.problems.append(f"generated: {judge.wrong(row.max_err)}")
    else:
        return lambda: gen(**inputs)
    return None


def run_compiled(eager, inputs: dict, judge: Judge, row: Row):
    """`torch.compile(eager)` (default mode), checked by `judge`; its timed call,
    or None."""
    compiled = torch.compile(eager)
    try:
        got = compiled(**inputs)
    except Exception as e:
        row.problems.append(f"compile: raised {type(e).__name__}: {first_line(e)}")
        return None
    row.compile_err, ok = judge(got)
    del got
    if not ok:
        row.problems.append(f"compile: {judge.wrong(row.compile_err)}")
        return None
    return lambda: compiled(**inputs)


def row_device(inputs: dict) -> str:
    tensors = [v for v in inputs.values() if isinstance(v, torch.Tensor)]
    return tensors[0].device.type if tensors else "cpu"


def first_line(e: BaseException) -> str:
    text = str(e).strip()
    return text.splitlines()[0] if text else ""


def run_case(
    pattern: Pattern, built: Built, args: argparse.Namespace, since: float
) -> Row:
    """Check and time one transpiled case; never raises for a broken one."""
    device = args.device
    shape, dtype = describe(pattern, device)
    row = Row(pattern.name, shape, dtype, not pattern.compute_bound)
    row.transpile_s = built.seconds
    say = lambda message: common.progress(f"{pattern.name}: {message}", since)  # noqa

    module = None
    stem = pattern.module
    if built.error is not None:
        row.problems.append(f"generated: transpile failed: {built.error}")
    else:
        path = built.out / f"{stem}.py"
        row.kernels, row.extern, _ = variant_counts(path)
        breaks = graph_breaks(path)
        row.breaks = len(breaks)
        if breaks:
            row.problems.append(f"graph breaks ({len(breaks)}): {breaks[0]}")
        warnings = [line for line in built.stderr.splitlines() if "warning" in line]
        if warnings:
            row.problems.append(f"transpile warned: {warnings[0].strip()}")
        try:
            package = built.out.name
            sys.modules.pop(f"{package}.{stem}", None)
            module = importlib.import_module(f"{package}.{stem}")
        except Exception as e:
            row.problems.append(
                f"generated: import raised {type(e).__name__}: {first_line(e)}"
            )

    torch._dynamo.reset()
    try:
        eager = build_eager(pattern, device)
        inputs = make_inputs(pattern, device)
    except Exception as e:
        row.problems.append(f"eager: raised {type(e).__name__}: {first_line(e)}")
        return row
    with torch.no_grad():
        try:
            low = low_precision(pattern, device)
            judge = Judge.of(eager, inputs, low, pattern.tol)
            out = eager(**inputs)
        except Exception as e:
            row.problems.append(f"eager: raised {type(e).__name__}: {first_line(e)}")
            return row
        row.eager_err = judge.eager_err
        row.nbytes = traffic(pattern, inputs, eager, out)
        del out
        timed: dict[str, Callable[[], object] | None] = {
            "eager": lambda: eager(**inputs)
        }
        if module is not None:
            try:
                timed["generated"] = run_generated(
                    module, pattern, eager, inputs, judge, row
                )
            except Exception as e:
                row.problems.append(
                    f"generated: raised {type(e).__name__}: {first_line(e)}"
                )
        try:
            start = time.perf_counter()
            timed["compile"] = run_compiled(eager, inputs, judge, row)
            sync(device)
            say(f"torch.compile first call {time.perf_counter() - start:.1f} s")
        except Exception as e:  # torch.compile itself failing
            row.problems.append(f"compile: raised {type(e).__name__}: {first_line(e)}")
        del judge
        timed = {name: fn for name, fn in timed.items() if fn is not None}
        for fn in timed.values():
            fn()
        sync(device)
        ms = common.interleaved(args.timer, args.rounds)(timed)
        say(", ".join(f"{name} {value:.3f}" for name, value in ms.items()) + " ms")
        row.eager_ms = ms.get("eager")
        row.compile_ms = ms.get("compile")
        row.generated_ms = ms.get("generated")
        del timed
    torch._dynamo.reset()  # drop the compiled code and its memory
    if device == "cuda":
        torch.cuda.empty_cache()
    return row


# ---------------------------------------------------------------------- table


def _pct(row: Row, ms: float | None, copy_gbps: float) -> str:
    gbps = row.gbps(ms)
    return "-" if gbps is None else f"{100 * gbps / copy_gbps:.0f}%"


def speedups(rows: list[Row], baseline: str) -> list[float]:
    """baseline ms / generated ms of the cases where both are timed and correct."""
    ratios = []
    for r in rows:
        base = r.eager_ms if baseline == "eager" else r.compile_ms
        ok = r.generated_ok and (baseline == "eager" or r.compile_ok)
        if ok and base is not None:
            ratios.append(base / r.generated_ms)
    return ratios


def note(row: Row) -> str:
    """The first problem, shortened (all of them are listed under the table)."""
    if not row.problems:
        return ""
    first = row.problems[0].replace("|", "/")
    return first if len(first) <= 60 else first[:57] + "..."


def markdown_table(rows: list[Row], copy_gbps: float) -> str:
    head = (
        "case", "shape", "dtype", "eager ms", "compile ms", "generated ms",
        "gen vs eager", "gen vs compile", "% copy BW gen / compile",
        "kernels / extern", "max err", "notes",
    )  # fmt: skip
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        err = "-" if r.max_err is None else f"{r.max_err:.1e}"
        kernels = "-" if r.kernels is None else f"{r.kernels} / {r.extern}"
        if r.breaks:
            kernels += f" +{r.breaks} breaks"
        bandwidth = "-"
        if r.memory_bound:
            gen, comp = _pct(r, r.generated_ms, copy_gbps), _pct(
                r, r.compile_ms, copy_gbps
            )
            bandwidth = f"{gen} / {comp}"
        cells = (
            r.case, r.shape, r.dtype,
            number_cell(r.eager_ms), number_cell(r.compile_ms),
            number_cell(r.generated_ms) if r.generated_ok else "failed",
            ratio_cell(r.eager_ms, r.generated_ms),
            ratio_cell(r.compile_ms, r.generated_ms),
            bandwidth, kernels, err, note(r),
        )  # fmt: skip
        lines.append("| " + " | ".join(cells) + " |")
    n = len(rows)
    cells = (
        "geomean", f"{n} cases", "", "", "", "",
        common.geomean_cell(speedups(rows, "eager"), n),
        common.geomean_cell(speedups(rows, "compile"), n), "", "", "", "",
    )  # fmt: skip
    lines.append("| " + " | ".join(cells) + " |")
    notes = [f"- {r.case}, {p}" for r in rows for p in r.problems]
    return "\n".join(lines + ([""] + notes if notes else []))


def summary(rows: list[Row], copy_gbps: float, device: str) -> list[str]:
    """Lines measuring the run against the suite's targets (`TARGETS`)."""
    lines = [f"- targets ({device}): {TARGETS[device]}"]
    failed = [r.case for r in rows if not r.generated_ok]
    if failed:
        lines.append(f"- failed (not built, fell back or wrong): {', '.join(failed)}")
    vs_compile = [
        (r.compile_ms / r.generated_ms, r.case)
        for r in rows
        if r.generated_ok and r.compile_ok
    ]
    slow = sorted((x, c) for x, c in vs_compile if x < 0.95)
    lines.append(
        f"- below 0.95x compile: {len(slow)} of {len(vs_compile)}"
        + (": " + ", ".join(f"{c} {x:.2f}x" for x, c in slow) if slow else "")
    )
    if device == "cpu":
        slower = sorted(
            (r.eager_ms / r.generated_ms, r.case)
            for r in rows
            if r.generated_ok and r.eager_ms is not None
            and r.eager_ms < r.generated_ms
        )  # fmt: skip
        lines.append(
            f"- slower than eager: {len(slower)}"
            + (": " + ", ".join(f"{c} {x:.2f}x" for x, c in slower) if slower else "")
        )
    else:
        low_bw = sorted(
            (100 * r.gbps(r.generated_ms) / copy_gbps, r.case)
            for r in rows
            if r.generated_ok and r.gbps(r.generated_ms) is not None
        )
        under = [(p, c) for p, c in low_bw if p < 85]
        lines.append(
            f"- memory-bound below 85% of copy bandwidth: {len(under)} of {len(low_bw)}"
            + (": " + ", ".join(f"{c} {p:.0f}%" for p, c in under) if under else "")
        )
    return lines


# ----------------------------------------------------------------------- main


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    p.add_argument(
        "--suite",
        choices=tuple(SUITES),
        default="main",
        help="main: the suite; heldout: patterns never tuned for (heldout_src.py)",
    )
    p.add_argument("--cases", help="comma-separated case names (default: all)")
    p.add_argument("--quick", action="store_true", help="fewer rounds, shorter timing")
    p.add_argument("--rounds", type=int, help="interleaved rounds (default 5, quick 3)")
    p.add_argument("--threads", type=int, help="torch and OpenMP threads (CPU)")
    p.add_argument(
        "--jobs", type=int, help="transpiles at a time (default: CPUs, <= 8)"
    )
    p.add_argument("--keep", type=Path, help="keep the generated code in DIR")
    p.add_argument(
        "--build",
        type=Path,
        metavar="DIR",
        help="only transpile the cases for --device into DIR (no GPU needed)",
    )
    p.add_argument(
        "--prebuilt",
        type=Path,
        metavar="DIR",
        help="use the code --build wrote into DIR instead of transpiling",
    )
    p.add_argument("--json", type=Path, help="also write the rows as JSON to FILE")
    p.add_argument("--list", action="store_true", help="print the case names and exit")
    args = p.parse_args(argv)
    if args.list:
        return args
    names = [p.name for p in SUITES[args.suite]]
    args.cases = names if not args.cases else [
        n.strip() for n in args.cases.split(",") if n.strip()
    ]  # fmt: skip
    unknown = sorted(set(args.cases) - set(names))
    if unknown:
        p.error(f"unknown cases {unknown}; known: {', '.join(names)}")
    if args.build and (args.prebuilt or args.keep):
        p.error("--build DIR writes DIR: no --prebuilt or --keep with it")
    if args.device == "cuda" and not args.build and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA GPU here")
    args.rounds = args.rounds or (3 if args.quick else common.ROUNDS)
    args.jobs = args.jobs or max(1, min(8, os.cpu_count() or 1))
    return args


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
    except SystemExit as e:
        return int(e.code or 0)
    if args.list:
        for p in SUITES[args.suite]:
            print(
                f"{p.name}: cuda {describe(p, 'cuda')[0]}; cpu {describe(p, 'cpu')[0]}"
            )
        return 0
    device = args.device
    threads = args.threads or torch.get_num_threads()
    torch.set_num_threads(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)  # generated and inductor C++ kernels
    note = ""
    if device == "cuda":
        args.timer, how = common.cuda_timer(args.quick, args.rounds)
        # f32 is f32: cuDNN's TF32 convolutions are off by 1e-4 whichever way
        # each side picks its algorithm
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
        note = "; TF32 off (cuDNN and cuBLAS)"
    else:
        pinned = importlib.import_module("benchmarks.cpu").pin_malloc_thresholds()
        args.timer, how = common.cpu_timer(args.quick, args.rounds)
        note = "; glibc malloc pinned (thresholds, no mmap)" if pinned else ""
    patterns = [p for p in SUITES[args.suite] if p.name in args.cases]
    start, load_before = time.perf_counter(), os.getloadavg()[0]
    if args.build:
        builds = build_all(patterns, device, args.build.resolve(), args.jobs, start)
        write_failures(args.build.resolve(), builds, patterns)
        return 0 if all(b.error is None for b in builds) else 1
    if args.prebuilt:
        work = args.prebuilt.resolve()
    elif args.keep:
        work = args.keep.resolve()
    else:
        work = Path(tempfile.mkdtemp(prefix="pat_"))
    work.mkdir(parents=True, exist_ok=True)
    if str(work) not in sys.path:
        sys.path.insert(0, str(work))
    rows: list[Row] = []
    try:
        if args.prebuilt:
            builds = read_prebuilt(work, patterns, device)
        else:
            builds = build_all(patterns, device, work, args.jobs, start)

        numel = COPY_NUMEL[device][1 if args.quick else 0]
        race = common.interleaved(args.timer, args.rounds)
        copy_gbps = common.copy_bandwidth(
            device, numel, lambda fn: race({"copy": fn})["copy"]
        )
        if device == "cuda":
            torch.cuda.empty_cache()
        common.progress(f"copy bandwidth {copy_gbps:.0f} GB/s", start)
        for i, (pattern, built) in enumerate(zip(patterns, builds), 1):
            common.progress(f"case {i}/{len(patterns)}: {pattern.name}", start)
            try:
                rows.append(run_case(pattern, built, args, start))
            except Exception as e:  # a bug of this script's own, or out of memory
                shape, dtype = describe(pattern, device)
                row = Row(pattern.name, shape, dtype, not pattern.compute_bound)
                row.problems.append(
                    f"generated: the case raised {type(e).__name__}: {first_line(e)}"
                )
                rows.append(row)
                torch._dynamo.reset()
                if device == "cuda":
                    torch.cuda.empty_cache()
    finally:
        if args.keep is None and args.prebuilt is None:
            shutil.rmtree(work, ignore_errors=True)

    copied = f"`y.copy_(x)`, {numel / 2**20:.0f}M float32, bytes read + written"
    load = f"{load_before:.1f} / {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs"
    lines = [
        f"# pattern suite: eager vs torch.compile vs generated ({device}"
        f"{', quick' if args.quick else ''})",
        "",
        f"- machine: {common.environment(device)}",
        f"- copy bandwidth: {copy_gbps:.0f} GB/s ({copied})",
        f"- load average (1 min) at start / end: {load}",
        f"- timing: {how}{note}; median of {args.rounds} rounds, each timing eager,"
        " compiled (torch.compile default mode) and generated once, interleaved;"
        " torch.no_grad(), eval mode",
        "- gen vs X: X ms / generated ms (> 1: generated faster); % copy BW: inputs,"
        " weights and outputs, each counted once, over the time, against the copy"
        " bandwidth (memory-bound cases); max err: generated vs eager (bf16: vs eager"
        " in f32); geomean over the cases where both are timed and correct",
        "",
        markdown_table(rows, copy_gbps),
        "",
        *summary(rows, copy_gbps, device),
    ]
    print("\n".join(lines))
    if args.json:
        payload = {
            "device": device,
            "machine": common.environment(device),
            "copy_gbps": copy_gbps,
            "rounds": args.rounds,
            "quick": args.quick,
            "rows": [
                {
                    **asdict(r),
                    "generated_ok": r.generated_ok,
                    "compile_ok": r.compile_ok,
                    "generated_gbps": r.gbps(r.generated_ms),
                    "compile_gbps": r.gbps(r.compile_ms),
                }
                for r in rows
            ],
        }
        args.json.write_text(json.dumps(payload, indent=1) + "\n")
    return 0 if all(r.generated_ok for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
