"""Library models that no test holds, transpiled from their classes and checked.

    python benchmarks/library_models.py                  # every model below
    python benchmarks/library_models.py bloom t_hrnet    # some of them

Each model is built from a tiny configuration with random weights (no hub
access), transpiled as a user would (`transpile pkg.mod::Class --factory
benchmarks/library_models.py::NAME --device cpu --device cuda`), then checked by
tests/models/check.py in a process that cannot import the compiler: both
variants against eager on inputs the compiler never saw, outputs, inputs and
state after the call, and the ATen ops run inside fallback code. It prints one
line a model: `whole` (no graph break, no problem), `breaks` with the first
graph break, or why it failed. Generated code goes to a temporary directory.
For finding what fails on code we did not write, not for timing.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from tests.models.factories import (  # noqa: E402
    FFN,
    HEADS,
    HIDDEN,
    LAYERS,
    POSITIONS,
    STUBS,
    VOCAB,
    Model,
    _torchvision_for_timm,
    has_real_torchvision,
)


def _decoder(model: str, config: str, **extra):
    import transformers

    built = getattr(transformers, config)(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN,
        num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        max_position_embeddings=POSITIONS, use_cache=False, **extra,
    )  # fmt: skip
    return getattr(transformers, model)(built)


def _hf(model: str, config: str, **fields):
    import transformers

    return getattr(transformers, model)(getattr(transformers, config)(**fields))


def _timm(name: str, **kwargs):
    _torchvision_for_timm()
    import timm

    return timm.create_model(name, pretrained=False, num_classes=10, **kwargs)


STAND_IN = not has_real_torchvision()  # asked before a timm model imports one
KV = {"num_key_value_heads": 2}
TEXT = {"input_ids": "i64[2,16]", "attention_mask": "i64[2,16]"}
IMAGE = {"pixel_values": "f32[2,3,32,32]"}
FACTORIES = {
    "mixtral": (lambda: _decoder("MixtralModel", "MixtralConfig", **KV,
                                 num_local_experts=4, num_experts_per_tok=2), TEXT),
    "qwen2_moe": (lambda: _decoder("Qwen2MoeModel", "Qwen2MoeConfig", **KV,
                                   num_experts=4, num_experts_per_tok=2,
                                   moe_intermediate_size=32,
                                   shared_expert_intermediate_size=64), TEXT),
    "phi3": (lambda: _decoder("Phi3Model", "Phi3Config", **KV, pad_token_id=0), TEXT),
    "qwen3": (lambda: _decoder("Qwen3Model", "Qwen3Config", **KV, head_dim=16), TEXT),
    "gemma2": (lambda: _decoder("Gemma2Model", "Gemma2Config", **KV, head_dim=16,
                                sliding_window=8), TEXT),
    "granite": (lambda: _decoder("GraniteModel", "GraniteConfig", **KV), TEXT),
    "olmo2": (lambda: _decoder("Olmo2Model", "Olmo2Config", **KV), TEXT),
    "stablelm": (lambda: _decoder("StableLmModel", "StableLmConfig", **KV), TEXT),
    "gpt_neox": (lambda: _decoder("GPTNeoXModel", "GPTNeoXConfig"), TEXT),
    "falcon": (lambda: _hf("FalconModel", "FalconConfig", vocab_size=VOCAB,
                           hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                           num_attention_heads=HEADS, use_cache=False), TEXT),
    "bloom": (lambda: _hf("BloomModel", "BloomConfig", vocab_size=VOCAB,
                          hidden_size=HIDDEN, n_layer=LAYERS, n_head=HEADS,
                          use_cache=False), TEXT),
    "electra": (lambda: _hf("ElectraModel", "ElectraConfig", vocab_size=VOCAB,
                            embedding_size=32, hidden_size=HIDDEN,
                            num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                            intermediate_size=FFN,
                            max_position_embeddings=POSITIONS), TEXT),
    "albert": (lambda: _hf("AlbertModel", "AlbertConfig", vocab_size=VOCAB,
                           embedding_size=32, hidden_size=HIDDEN,
                           num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                           intermediate_size=FFN,
                           max_position_embeddings=POSITIONS), TEXT),
    "deberta_v2": (lambda: _hf("DebertaV2Model", "DebertaV2Config", vocab_size=VOCAB,
                               hidden_size=HIDDEN, num_hidden_layers=LAYERS,
                               num_attention_heads=HEADS, intermediate_size=FFN,
                               max_position_embeddings=POSITIONS,
                               relative_attention=True, position_buckets=16,
                               pos_att_type=["p2c", "c2p"]), TEXT),
    "dinov2": (lambda: _hf("Dinov2Model", "Dinov2Config", hidden_size=HIDDEN,
                           num_hidden_layers=LAYERS, num_attention_heads=HEADS,
                           image_size=32, patch_size=8), IMAGE),
    "hf_convnext": (lambda: _hf("ConvNextModel", "ConvNextConfig", num_channels=3,
                                hidden_sizes=[16, 32], depths=[1, 1],
                                num_stages=2), IMAGE),
    "hf_swin": (lambda: _hf("SwinModel", "SwinConfig", image_size=32, patch_size=4,
                            embed_dim=16, depths=[1, 1], num_heads=[2, 4],
                            window_size=4), IMAGE),
    "segformer": (lambda: _hf("SegformerModel", "SegformerConfig",
                              num_encoder_blocks=2, depths=[1, 1], sr_ratios=[2, 1],
                              hidden_sizes=[16, 32], num_attention_heads=[1, 2],
                              patch_sizes=[7, 3], strides=[4, 2], mlp_ratios=[2, 2],
                              decoder_hidden_size=32), IMAGE),
}  # fmt: skip
TIMM = {
    "t_mobilenetv3": ("mobilenetv3_small_050", {}),
    "t_regnet": ("regnetx_002", {}),
    "t_ghostnet": ("ghostnet_050", {}),
    "t_efficientvit": ("efficientvit_b0", {}),
    "t_rexnet": ("rexnet_100", {}),
    "t_deit": ("deit_tiny_patch16_224", {"img_size": 64}),
    "t_levit": ("levit_128s", {"img_size": 64}),
    "t_mixer": ("mixer_s32_224", {"img_size": 64}),
    "t_poolformer": ("poolformer_s12", {}),
    "t_repvgg": ("repvgg_a0", {}),
    "t_eva": ("eva02_tiny_patch14_224", {"img_size": 56}),
    "t_densenet": ("densenet121", {}),
    "t_dla": ("dla34", {}),
    "t_cspnet": ("cspresnet50", {}),
    "t_beit": ("beit_base_patch16_224", {"img_size": 64, "depth": 2}),
    "t_hrnet": ("hrnet_w18_small", {}),
    "t_coat": ("coatnet_0_rw_224", {"img_size": 64}),
    "t_maxvit": ("maxvit_tiny_tf_224", {"img_size": 64}),
}
for _name, (_arch, _kwargs) in TIMM.items():
    _size = _kwargs.get("img_size", 64)
    FACTORIES[_name] = (
        lambda arch=_arch, kwargs=_kwargs: _timm(arch, **kwargs),
        {"x": f"f32[2,3,{_size},{_size}]"},
    )


def build(name: str):
    """The factory `--factory benchmarks/library_models.py::NAME` calls."""
    return FACTORIES[name][0]()


def __getattr__(name: str):  # `tests/models/check.py` calls factories by name
    if name in FACTORIES:
        return FACTORIES[name][0]
    raise AttributeError(name)


def model_of(name: str, target: str | None = None) -> Model:
    """The model's entry; its target is the built model's class (built in this
    process unless given: timm's torchvision stand-in stays in the process)."""
    if target is None:
        built = build(name)
        target = f"{type(built).__module__}::{type(built).__name__}"
    factory = f"benchmarks/library_models.py::{name}"
    return Model(name, target, factory, FACTORIES[name][1], timm=name in TIMM)


def _env(model: Model, *paths: Path) -> dict[str, str]:
    stubs = [str(STUBS)] if model.timm and STAND_IN else []
    extra = [str(ROOT), *stubs, *map(str, paths)]
    return dict(
        os.environ,
        PYTHONPATH=os.pathsep.join(extra + [os.environ.get("PYTHONPATH", "")]),
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_VERBOSITY="error",
        TRITON_INTERPRET="1",
    )


def run(name: str, work: Path) -> str:
    found = subprocess.run(
        [sys.executable, __file__, "--target", name],
        cwd=ROOT, env=_env(model_of(name, "?")), capture_output=True, text=True,
    )  # fmt: skip
    if found.returncode:
        return f"build failed: {found.stderr.strip().splitlines()[-1]}"
    model = model_of(name, found.stdout.strip().splitlines()[-1])
    out = work / name
    args = [model.target, "--factory", model.factory, "-o", str(out)]
    args += ["--device", "cpu", "--device", "cuda"]
    for key, spec in model.inputs.items():
        args += ["--example", f"{key}={spec}"]
    command = "import sys; from transpiler.cli import main; sys.exit(main())"
    built = subprocess.run(
        [sys.executable, "-c", command, *args],
        cwd=ROOT, env=_env(model), capture_output=True, text=True,
    )  # fmt: skip
    if built.returncode:
        return f"transpile failed: {built.stderr.strip().splitlines()[-1]}"
    stem = model.target.split("::")[0].rsplit(".", 1)[-1]
    text = (out / f"{stem}.py").read_text()
    breaks = re.search(r"Graph breaks \(code run eagerly\):\n    (.*)", text)
    first = breaks[1] if breaks and breaks[1] != "none" else None
    checked = subprocess.run(
        [sys.executable, __file__, "--check", name, f"{name}.{stem}"],
        cwd=ROOT, env=_env(model, work), capture_output=True, text=True,
    )  # fmt: skip
    if checked.returncode:
        return f"check failed: {checked.stderr.strip().splitlines()[-1]}"
    result = json.loads(checked.stdout.splitlines()[-1])
    found = {k: result[k] for k in ("problems", "fallback_ops") if result.get(k)}
    if first is None and not found:
        return "whole"
    return f"breaks at {first}; {found}" if first else f"problems: {found}"


def main(argv: list[str]) -> int:
    if argv[:1] == ["--target"]:  # in a process of its own
        print(model_of(argv[1]).target)
        return 0
    if argv[:1] == ["--check"]:  # in a process of its own, without the compiler
        from tests.models import check, factories

        factories.MODELS.append(model_of(argv[1]))
        setattr(factories, argv[1], FACTORIES[argv[1]][0])
        print(json.dumps(check.check(argv[1], argv[2])))
        return 0
    with tempfile.TemporaryDirectory() as work:
        for name in argv or list(FACTORIES):
            print(f"{name}: {run(name, Path(work))}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
