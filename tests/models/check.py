"""Run a generated library model against eager, in a process without the compiler.

    python -m tests.models.check MODEL PACKAGE.MODULE
    python -m tests.models.check --generate MODEL PACKAGE.MODULE DEVICE
    python -m tests.models.check --train MODEL PACKAGE.MODULE

(run with the directory holding PACKAGE on sys.path). It refuses imports of the
compiler's packages (`transpiler`, libcst, black), imports the generated module,
builds the model with its factory (seeded), gives the same instance the generated
class, and calls both on inputs the compiler never saw (`inputs`):

- through the exported class: the dispatch must pick a compiled `_cpu_N` variant
  (no eager fallback), and no ATen op may run inside fallback code;
- each `_cuda_N` variant directly, on CPU tensors: its Triton kernels run in
  Triton's interpreter when TRITON_INTERPRET=1 (on a GPU machine, on the GPU).

Outputs must match eager's in type and values, and the inputs, parameters and
buffers must be unchanged by the call as by eager's. It prints one JSON line: what
it found, with `problems` empty when all of that holds. With --generate, it
checks greedy generation instead (`check_generation`); with --train, a training
step's outputs and gradients (`check_training`).
"""

from __future__ import annotations

import copy
import dataclasses
import importlib
import json
import os
import re
import sys
import warnings
from typing import Any

BLOCKED = ("transpiler", "libcst", "black")
RTOL, ATOL = 1e-4, 1e-5
SEEDS = (1234, 4321)  # inputs the compiler never saw


class NoCompiler:
    """A meta path finder that refuses the compiler's own packages."""

    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in BLOCKED:
            raise ImportError(f"{name} is blocked: generated code must not need it")
        return None


def inputs(model, seed: int) -> dict:
    """Random inputs for the model's declared examples; an `attention_mask` pads
    the second half of the last row."""
    import torch

    gen = torch.Generator().manual_seed(seed)
    out = {}
    for name, spec in model.inputs.items():
        m = re.fullmatch(r"(\w+)\[([\d,]*)\]", spec)
        shape = tuple(int(d) for d in m[2].split(",") if d)
        if name == "attention_mask":
            mask = torch.ones(shape, dtype=torch.int64)
            mask[-1, shape[-1] // 2 :] = 0
            out[name] = mask
        elif m[1] == "i64":
            out[name] = torch.randint(0, model.vocab, shape, generator=gen)
        else:
            out[name] = torch.randn(shape, generator=gen)
    return out


def differences(want: Any, got: Any, where: str = "output") -> list[str]:
    """Where `got` differs from `want`: type, structure, shape, dtype, values."""
    import torch

    if type(want) is not type(got):
        return [f"{where}: {type(got).__name__}, not {type(want).__name__}"]
    if isinstance(want, torch.Tensor):
        if want.shape != got.shape or want.dtype != got.dtype:
            return [
                f"{where}: {got.dtype}{list(got.shape)}, not "
                f"{want.dtype}{list(want.shape)}"
            ]
        if not torch.allclose(want, got, rtol=RTOL, atol=ATOL, equal_nan=True):
            err = (want.double() - got.double()).abs().max().item()
            return [f"{where}: values differ by up to {err:.3g}"]
        return []
    if dataclasses.is_dataclass(want):
        want, got = vars(want), vars(got)
    if isinstance(want, dict):
        if list(want) != list(got):
            return [f"{where}: keys {list(got)}, not {list(want)}"]
        return [d for k in want for d in differences(want[k], got[k], f"{where}.{k}")]
    if isinstance(want, (list, tuple)):
        if len(want) != len(got):
            return [f"{where}: {len(got)} items, not {len(want)}"]
        return [
            d
            for i, (a, b) in enumerate(zip(want, got))
            for d in differences(a, b, f"{where}[{i}]")
        ]
    return [] if want == got else [f"{where}: {got!r}, not {want!r}"]


def _counting(gen, pattern: str, counts: dict, key: str, depth: dict | None = None):
    """Wrap every function of `gen` whose name matches `pattern`, counting calls."""
    for name, fn in list(vars(gen).items()):
        if not (callable(fn) and re.fullmatch(pattern, name)):
            continue

        def wrapper(*args, __fn=fn, **kwargs):
            counts[key] += 1
            if depth is not None:
                depth["n"] += 1
            try:
                return __fn(*args, **kwargs)
            finally:
                if depth is not None:
                    depth["n"] -= 1

        setattr(gen, name, wrapper)


def _watched(gen):
    """Count the calls of `gen`'s `_cpu_N` variants and fallback code (`counts`),
    and a dispatch mode counting the ATen ops run inside fallback code (its
    `ops`)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    counts = {"variant": 0, "fallback": 0}
    depth = {"n": 0}
    _counting(gen, r"_cpu_\d+", counts, "variant")
    _counting(gen, r"_fallback_\d+", counts, "fallback", depth)

    class FallbackOps(TorchDispatchMode):
        ops = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            FallbackOps.ops += depth["n"] > 0
            return func(*args, **(kwargs or {}))

    return counts, FallbackOps


def _on_device(variant, module, kwargs: dict):
    """A `_cuda_N` variant called as the tests call one (tests/devices.py): on CPU
    tensors in Triton's interpreter, or on the GPU in GPU mode, outputs back on
    the CPU and inputs written back."""
    import torch

    if os.environ.get("TRANSPILE_TEST_DEVICE") != "cuda":
        return variant(module, **kwargs)
    from tests.devices import on_gpu

    def run(module, **kw):
        return variant(module, **kw)

    out = on_gpu(run)(module, **kwargs)
    torch.cuda.synchronize()
    return out


def check(name: str, module: str) -> dict:
    sys.meta_path.insert(0, NoCompiler())
    import torch

    from tests.models import factories

    # float32 means float32 on the GPU too: cuDNN's default TF32 convolutions
    # round their inputs to 10 bits, which turns last-bit differences upstream
    # into differences no tolerance of float32 allows, in eager as in ours
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    model = next(m for m in factories.MODELS if m.name == name)
    result: dict = {"model": name, "problems": []}
    problems = result["problems"]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gen = importlib.import_module(module)
    result["import_warnings"] = [str(w.message) for w in caught]
    if any(m.split(".")[0] in BLOCKED for m in sys.modules):
        problems.append("importing the generated module loaded the compiler")

    counts, FallbackOps = _watched(gen)

    torch.manual_seed(0)
    eager = getattr(factories, model.factory.split("::")[1])().eval()
    compiled = copy.deepcopy(eager)
    compiled.__class__ = getattr(gen, model.target.split("::")[1])
    cuda = sorted(n for n in vars(gen) if re.fullmatch(r"_cuda_\d+", n))
    result["cuda_variants"] = cuda

    def source(module, **kw):
        return module(**kw)

    # (label, the variant's call, eager's call on the variant's device)
    runs = [("cpu", lambda m, kw: m(**kw), lambda m, kw: m(**kw))]
    runs += [
        (
            v,
            lambda m, kw, v=v: _on_device(getattr(gen, v), m, kw),
            lambda m, kw: _on_device(source, m, kw),
        )
        for v in cuda
    ]
    for seed in SEEDS:
        args = inputs(model, seed)
        for label, call, reference in runs:
            with torch.no_grad():
                want = reference(eager, copy.deepcopy(args))
            given = copy.deepcopy(args)
            with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                with FallbackOps():
                    got = call(compiled, given)
            where = f"{label}, seed {seed}"
            eager_ran = [str(w.message) for w in caught if "(eager)" in str(w.message)]
            if eager_ran:
                problems.append(f"{where}: ran the source: {eager_ran[0]}")
            problems += [f"{where}: {d}" for d in differences(want, got)]
            problems += [f"{where}: {d}" for d in differences(args, given, "inputs")]
            problems += [
                f"{where}: {d}"
                for d in differences(eager.state_dict(), compiled.state_dict(), "state")
            ]
    result["cpu_variant_calls"] = counts["variant"]
    result["fallback_calls"] = counts["fallback"]
    result["fallback_ops"] = FallbackOps.ops
    if counts["variant"] != len(SEEDS):
        problems.append(f"{counts['variant']} compiled CPU calls of {len(SEEDS)}")
    if FallbackOps.ops:
        problems.append(f"{FallbackOps.ops} ATen ops ran inside fallback code")
    return result


GRAD_RTOL, GRAD_ATOL = 1e-5, 1e-7  # of the gradient's largest element


def check_training(name: str, module: str) -> dict:
    """A module transpiled with `--train`: both models in train mode, called
    with the same seed (dropout draws alike), then a backward from the same
    random gradients of every floating-point output. Through the exported class
    the dispatch must pick the compiled `_cpu_N` variant, and each `_cuda_N`
    variant is called directly (on CPU tensors in Triton's interpreter; not in GPU
    mode). The outputs, every parameter's gradient (None where eager's is None)
    and the parameters and buffers after the call must match eager's, and no ATen
    op may run inside fallback code."""
    sys.meta_path.insert(0, NoCompiler())
    import torch

    from tests.models import factories

    model = next(m for m in factories.MODELS if m.name == name)
    gen = importlib.import_module(module)
    problems: list[str] = []
    counts, FallbackOps = _watched(gen)

    torch.manual_seed(0)
    eager = getattr(factories, model.factory.split("::")[1])().train()
    compiled = copy.deepcopy(eager)
    compiled.__class__ = getattr(gen, model.target.split("::")[1])
    runs = [("cpu", lambda m, kw: m(**kw))]
    if os.environ.get("TRANSPILE_TEST_DEVICE") != "cuda":
        cuda = sorted(n for n in vars(gen) if re.fullmatch(r"_cuda_\d+", n))
        runs += [(v, lambda m, kw, v=v: getattr(gen, v)(m, **kw)) for v in cuda]
    exact = copy.deepcopy(eager).double()  # the reference of both: float64

    def step(m, run, args: dict, seed: int):
        """The call and a backward from the same random output gradients."""
        m.zero_grad(set_to_none=True)
        torch.manual_seed(seed)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with FallbackOps():
                out = run(m, copy.deepcopy(args))
        tangents = torch.Generator().manual_seed(seed + 1)
        loss = sum(
            (t * torch.randn(t.shape, generator=tangents, dtype=t.dtype)).sum()
            for t in _tensors(out)
            if t.is_floating_point() and t.requires_grad
        )
        loss.backward()
        return out, [str(w.message) for w in caught if "(eager)" in str(w.message)]

    def wide(args: dict) -> dict:
        return {
            k: v.double() if torch.is_tensor(v) and v.is_floating_point() else v
            for k, v in args.items()
        }

    grads = 0
    for seed in SEEDS:
        args = inputs(model, seed)
        for label, call in runs:
            where = f"{label}, seed {seed}"
            want, _ = step(eager, lambda m, kw: m(**kw), args, seed)
            best, _ = step(exact, lambda m, kw: m(**kw), wide(args), seed)
            got, ran = step(compiled, call, args, seed)
            if ran:
                problems.append(f"{where}: ran the source: {ran[0]}")
            found = differences(want, got)
            if all("values differ" in d for d in found):  # float32's own error?
                found = _off(_tensors(want), _tensors(got), _tensors(best))
            problems += [f"{where}: {d}" for d in found]
            named = zip(
                eager.named_parameters(),
                compiled.named_parameters(),
                exact.parameters(),
            )
            for (p, a), (_, b), e in named:
                if (a.grad is None) != (b.grad is None):
                    has = "has" if b.grad is not None else "has no"
                    problems.append(f"{where}: {p} {has} gradient, unlike eager")
                    continue
                if a.grad is None:
                    continue
                grads += 1
                # against float64: eager's float32 error is what float32 allows
                # here (a batch norm over two values is ill-conditioned)
                allowed = (a.grad.double() - e.grad).abs().max().item()
                err = (b.grad.double() - e.grad).abs().max().item()
                scale = e.grad.abs().max().item()
                if err > 4 * allowed + GRAD_RTOL * scale + GRAD_ATOL:
                    problems.append(
                        f"{where}: {p}.grad is {err:.3g} off float64's, eager's "
                        f"{allowed:.3g} (largest {scale:.3g})"
                    )
            problems += [
                f"{where}: {d}"
                for d in differences(eager.state_dict(), compiled.state_dict(), "state")
            ]
    if counts["variant"] != len(SEEDS):
        problems.append(f"{counts['variant']} compiled CPU calls of {len(SEEDS)}")
    if FallbackOps.ops:
        problems.append(f"{FallbackOps.ops} ATen ops ran inside fallback code")
    return {
        "model": name,
        "problems": problems,
        "gradients": grads,
        "fallback_calls": counts["fallback"],
    }


def _off(want: list, got: list, exact: list) -> list[str]:
    """Where a float32 result `got` is further from the float64 one `exact` than
    4 times eager's float32 result `want` is, and than float32 rounding."""
    out = []
    for i, (w, g, e) in enumerate(zip(want, got, exact)):
        if not w.is_floating_point():
            continue
        allowed = (w.double() - e).abs().max().item()
        err = (g.double() - e).abs().max().item()
        scale = e.abs().max().item()
        if err > 4 * allowed + GRAD_RTOL * scale + GRAD_ATOL:
            out.append(f"output {i}: {err:.3g} off float64's, eager's {allowed:.3g}")
    return out


def _tensors(value) -> list:
    """The tensors of a model's result, in order: tensors, tuples, dicts and
    dataclasses (transformers' outputs) of them."""
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if dataclasses.is_dataclass(value):
        value = vars(value)
    if isinstance(value, dict):
        value = list(value.values())
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


NEW_TOKENS = 32


def check_generation(name: str, module: str, device: str) -> dict:
    """Greedy generation of NEW_TOKENS tokens from a random prompt, every token
    through the generated module: the prompt through its prefill variant, which
    builds the key/value cache, each later token through its decode variant with
    that cache, against eager all the way; the tokens must be the same, and every
    call must have run a compiled variant of `device`. Without a GPU, the cuda
    variants run on CPU tensors in Triton's interpreter, chosen by the guards of
    their cpu twins (the same variant, numbered alike)."""
    sys.meta_path.insert(0, NoCompiler())
    import torch

    from tests.models import factories

    model = next(m for m in factories.GENERATORS if m.name == name)
    gen = importlib.import_module(module)
    real_gpu = os.environ.get("TRANSPILE_TEST_DEVICE") == "cuda"
    if device == "cuda" and not real_gpu:
        for attr in [a for a in vars(gen) if re.fullmatch(r"_cuda_\d+", a)]:
            setattr(gen, attr.replace("cuda", "cpu"), getattr(gen, attr))
    on = "cuda" if device == "cuda" and real_gpu else "cpu"
    counts = {"variant": 0}
    _counting(gen, rf"_{on}_\d+", counts, "variant")
    torch.manual_seed(0)
    eager = getattr(factories, model.factory.split("::")[1])().eval()
    compiled = copy.deepcopy(eager)
    compiled.__class__ = getattr(gen, model.target.split("::")[1])
    eager.to(on), compiled.to(on)
    shape = re.fullmatch(r"i64\[(\d+),(\d+)\]", model.inputs["input_ids"])
    prompt = torch.randint(
        0, model.vocab, (int(shape[1]), int(shape[2])),
        generator=torch.Generator().manual_seed(SEEDS[0]),
    ).to(on)  # fmt: skip

    def greedy(forward) -> tuple[torch.Tensor, list]:
        out = forward(input_ids=prompt, use_cache=True)
        prefill = out
        tokens = [out.logits[:, -1:].argmax(-1)]
        for _ in range(NEW_TOKENS - 1):
            cache = {factories.CACHE: getattr(out, factories.CACHE)}
            out = forward(input_ids=tokens[-1], **cache, use_cache=True)
            tokens.append(out.logits[:, -1:].argmax(-1))
        return torch.cat(tokens, dim=1).cpu(), prefill

    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        want, want_prefill = greedy(eager)
        got, got_prefill = greedy(compiled)
    problems = [
        f"warned: {w.message}" for w in caught if "running the source" in str(w.message)
    ]
    if counts["variant"] != NEW_TOKENS:
        problems.append(
            f"{counts['variant']} of {NEW_TOKENS} calls ran a compiled {device} variant"
        )
    problems += differences(
        want_prefill.logits.cpu(), got_prefill.logits.cpu(), "prefill logits"
    )
    cache = type(getattr(got_prefill, factories.CACHE)).__name__
    if cache != type(getattr(want_prefill, factories.CACHE)).__name__:
        problems.append(f"the prefill returned a {cache}")
    if not torch.equal(want, got):
        problems.append(f"tokens {got.tolist()}, not {want.tolist()}")
    return {"model": name, "problems": problems, "tokens": got.shape[1]}


if __name__ == "__main__":
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    if sys.argv[1] == "--generate":
        print(json.dumps(check_generation(*sys.argv[2:5])))
    elif sys.argv[1] == "--train":
        print(json.dumps(check_training(*sys.argv[2:4])))
    else:
        print(json.dumps(check(sys.argv[1], sys.argv[2])))
