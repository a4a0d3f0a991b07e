"""Tiny random-weight library models, for `transpile --factory`.

Each factory builds a small instance of a Hugging Face transformers or timm model
class, straight from the library (no hub access, no weights downloaded):

    transpile transformers.models.gpt2.modeling_gpt2::GPT2Model \
        --factory tests/models/factories.py::gpt2 --example input_ids=i64[2,16] ...

`MODELS` (below) lists, for each, the target, the factory and the example inputs;
benchmarks/models_baseline.py runs them all.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass, field
from pathlib import Path

_STUBS = Path(__file__).resolve().parent / "_stubs"


def _torchvision_for_timm() -> None:
    """timm imports torchvision at import time; PyPI's torchvision does not import
    with the CPU build of torch here, so fall back to a stub (see _stubs/)."""
    try:
        import torchvision.ops.misc  # noqa: F401
    except Exception:
        for name in [m for m in sys.modules if m.split(".")[0] == "torchvision"]:
            del sys.modules[name]
        if str(_STUBS) not in sys.path:
            sys.path.insert(0, str(_STUBS))


# Sizes shared by the transformers models
VOCAB = 128
HIDDEN = 64
HEADS = 4
LAYERS = 2
FFN = 128
POSITIONS = 64


# ---------------------------------------------------------------- transformers


def gpt2_config():
    from transformers import GPT2Config

    return GPT2Config(
        vocab_size=VOCAB, n_positions=POSITIONS, n_embd=HIDDEN, n_layer=LAYERS,
        n_head=HEADS, n_inner=FFN, use_cache=False, bos_token_id=None,
        eos_token_id=None,
    )  # fmt: skip


def gpt2():
    from transformers import GPT2Model

    return GPT2Model(gpt2_config())


def llama_config():
    from transformers import LlamaConfig

    return LlamaConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN,
        num_hidden_layers=LAYERS, num_attention_heads=HEADS, num_key_value_heads=2,
        max_position_embeddings=POSITIONS, use_cache=False,
    )  # fmt: skip


def llama():
    from transformers import LlamaModel

    return LlamaModel(llama_config())


def gpt2_lm():
    from transformers import GPT2LMHeadModel

    return GPT2LMHeadModel(gpt2_config())


def llama_lm():
    from transformers import LlamaForCausalLM

    return LlamaForCausalLM(llama_config())


def kv_cache(model, P: int):
    """A causal LM's key/value cache as its prefill of `P` tokens (batch 1) leaves
    it: the decode variant's example of its cache (`CACHE`)."""
    import torch
    from transformers import DynamicCache

    config = model.config
    heads = getattr(config, "num_key_value_heads", None) or config.num_attention_heads
    dim = getattr(config, "head_dim", None) or (
        config.hidden_size // config.num_attention_heads
    )
    cache = DynamicCache(config=config)
    for layer in range(config.num_hidden_layers):
        # as a decode step leaves it: P - 1 tokens, then one more (a sliding
        # window's layer then holds a slice of what it concatenated, as it will)
        for tokens in (P - 1, 1):
            keys, values = torch.zeros(2, 1, heads, tokens, dim)
            cache.update(keys, values, layer)
    return cache


def qwen2_lm():
    from transformers import Qwen2ForCausalLM

    return Qwen2ForCausalLM(qwen2_config())


def mistral_lm():
    """With a sliding window shorter than the generated sequence."""
    from transformers import MistralForCausalLM

    return MistralForCausalLM(mistral_config())


def bert_config():
    from transformers import BertConfig

    return BertConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
        num_attention_heads=HEADS, intermediate_size=FFN,
        max_position_embeddings=POSITIONS,
    )  # fmt: skip


def bert():
    from transformers import BertModel

    return BertModel(bert_config(), add_pooling_layer=True)


def t5_config():
    from transformers import T5Config

    return T5Config(
        vocab_size=VOCAB, d_model=HIDDEN, d_kv=HIDDEN // HEADS, d_ff=FFN,
        num_layers=LAYERS, num_heads=HEADS, use_cache=False,
    )  # fmt: skip


def t5_encoder():
    from transformers import T5EncoderModel

    return T5EncoderModel(t5_config())


def vit_config():
    from transformers import ViTConfig

    return ViTConfig(
        hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        intermediate_size=FFN, image_size=32, patch_size=8, num_channels=3,
    )  # fmt: skip


def vit():
    from transformers import ViTModel

    return ViTModel(vit_config(), add_pooling_layer=True)


def qwen2_config():
    from transformers import Qwen2Config

    return Qwen2Config(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN,
        num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        num_key_value_heads=2, max_position_embeddings=POSITIONS, use_cache=False,
    )  # fmt: skip


def qwen2():
    from transformers import Qwen2Model

    return Qwen2Model(qwen2_config())


def mistral_config():
    """With a sliding window (8) shorter than the example sequence."""
    from transformers import MistralConfig

    return MistralConfig(
        vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN,
        num_hidden_layers=LAYERS, num_attention_heads=HEADS,
        num_key_value_heads=2, max_position_embeddings=POSITIONS,
        sliding_window=8, use_cache=False,
    )  # fmt: skip


def mistral():
    from transformers import MistralModel

    return MistralModel(mistral_config())


def gemma():
    from transformers import GemmaConfig, GemmaModel

    return GemmaModel(
        GemmaConfig(
            vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN,
            num_hidden_layers=LAYERS, num_attention_heads=HEADS,
            num_key_value_heads=2, head_dim=HIDDEN // HEADS,
            max_position_embeddings=POSITIONS, use_cache=False,
        )
    )  # fmt: skip


def gemma2():
    """Gemma 2: soft-capped attention, a sliding window (8) on alternate layers."""
    from transformers import Gemma2Config, Gemma2Model

    return Gemma2Model(
        Gemma2Config(
            vocab_size=VOCAB, hidden_size=HIDDEN, intermediate_size=FFN,
            num_hidden_layers=LAYERS, num_attention_heads=HEADS,
            num_key_value_heads=2, head_dim=HIDDEN // HEADS, sliding_window=8,
            max_position_embeddings=POSITIONS, use_cache=False,
        )
    )  # fmt: skip


def bloom():
    """BLOOM: ALiBi, and a GELU written as a custom autograd Function."""
    from transformers import BloomConfig, BloomModel

    return BloomModel(
        BloomConfig(
            vocab_size=VOCAB, hidden_size=HIDDEN, n_layer=LAYERS, n_head=HEADS,
            use_cache=False,
        )
    )  # fmt: skip


def distilbert():
    from transformers import DistilBertConfig, DistilBertModel

    return DistilBertModel(
        DistilBertConfig(
            vocab_size=VOCAB, dim=HIDDEN, n_layers=LAYERS, n_heads=HEADS,
            hidden_dim=FFN, max_position_embeddings=POSITIONS,
        )
    )  # fmt: skip


def roberta():
    from transformers import RobertaConfig, RobertaModel

    return RobertaModel(
        RobertaConfig(
            vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS,
            num_attention_heads=HEADS, intermediate_size=FFN,
            max_position_embeddings=POSITIONS,
        )
    )  # fmt: skip


def clip_vision():
    from transformers import CLIPVisionConfig, CLIPVisionModel

    return CLIPVisionModel(
        CLIPVisionConfig(
            hidden_size=HIDDEN, intermediate_size=FFN, num_hidden_layers=LAYERS,
            num_attention_heads=HEADS, image_size=32, patch_size=8,
        )
    )  # fmt: skip


# ------------------------------------------------------------------------ timm


def timm_resnet():
    """resnet18's layout (BasicBlock, [2, 2, 2, 2]) with 10 classes, a quarter
    of its widths."""
    _torchvision_for_timm()
    import timm

    return timm.create_model(
        "resnet18", pretrained=False, num_classes=10,
        stem_width=16, channels=(16, 32, 64, 128),
    )  # fmt: skip


def timm_vit():
    """A tiny VisionTransformer (vit_tiny_patch16_224's layout, smaller)."""
    _torchvision_for_timm()
    from timm.models.vision_transformer import VisionTransformer

    return VisionTransformer(
        img_size=32, patch_size=8, embed_dim=HIDDEN, depth=LAYERS, num_heads=HEADS,
        mlp_ratio=2.0, num_classes=10,
    )  # fmt: skip


def timm_convnext():
    _torchvision_for_timm()
    import timm

    return timm.create_model("convnext_atto", pretrained=False, num_classes=10)


def timm_efficientnet():
    _torchvision_for_timm()
    import timm

    # timm's own small EfficientNet: depthwise-separable, inverted-residual (with
    # and without squeeze-excitation) and edge-residual blocks
    return timm.create_model("test_efficientnet", pretrained=False, num_classes=10)


def timm_swin():
    """Swin's layout, small: windows of 4 on a 64x64 image."""
    _torchvision_for_timm()
    import timm

    return timm.create_model(
        "swin_tiny_patch4_window7_224", pretrained=False, num_classes=10,
        img_size=64, window_size=4, embed_dim=32, depths=(1, 1, 1, 1),
        num_heads=(1, 2, 2, 4),
    )  # fmt: skip


# ---------------------------------------------------------------------- table


@dataclass(frozen=True)
class Model:
    name: str
    target: str  # `module.path::Class` of the library class
    factory: str  # `tests/models/factories.py::fn`
    inputs: dict[str, str] = field(default_factory=dict)  # name -> TYPE spec
    timm: bool = False  # needs the torchvision stand-in on sys.path
    vocab: int = VOCAB  # token ids are drawn below it
    more: tuple[dict[str, str], ...] = ()  # further variants, tried after `inputs`
    # a training step compiles whole (BLOOM's GELU is a custom autograd Function,
    # whose backward a training step leaves to eager: Note [Custom autograd
    # functions] in frontend/interpreter.py)
    trains: bool = True


def _f(fn: str) -> str:
    return f"tests/models/factories.py::{fn}"


MODELS = [
    Model(
        "gpt2",
        "transformers.models.gpt2.modeling_gpt2::GPT2Model",
        _f("gpt2"),
        {"input_ids": "i64[2,16]"},
    ),
    Model(
        "llama",
        "transformers.models.llama.modeling_llama::LlamaModel",
        _f("llama"),
        {"input_ids": "i64[2,16]"},
    ),
    Model(
        "bert",
        "transformers.models.bert.modeling_bert::BertModel",
        _f("bert"),
        {"input_ids": "i64[2,16]"},
    ),
    Model(
        "bert_mask",
        "transformers.models.bert.modeling_bert::BertModel",
        _f("bert"),
        {"input_ids": "i64[2,16]", "attention_mask": "i64[2,16]"},
    ),
    Model(
        "t5_encoder",
        "transformers.models.t5.modeling_t5::T5EncoderModel",
        _f("t5_encoder"),
        {"input_ids": "i64[2,16]"},
    ),
    Model(
        "vit",
        "transformers.models.vit.modeling_vit::ViTModel",
        _f("vit"),
        {"pixel_values": "f32[2,3,32,32]"},
    ),
    Model(
        "qwen2",
        "transformers.models.qwen2.modeling_qwen2::Qwen2Model",
        _f("qwen2"),
        {"input_ids": "i64[2,16]"},
    ),
    Model(
        "mistral_mask",
        "transformers.models.mistral.modeling_mistral::MistralModel",
        _f("mistral"),
        {"input_ids": "i64[2,16]", "attention_mask": "i64[2,16]"},
    ),
    Model(
        "gemma",
        "transformers.models.gemma.modeling_gemma::GemmaModel",
        _f("gemma"),
        {"input_ids": "i64[2,16]"},
    ),
    Model(
        "gemma2_mask",
        "transformers.models.gemma2.modeling_gemma2::Gemma2Model",
        _f("gemma2"),
        {"input_ids": "i64[2,16]", "attention_mask": "i64[2,16]"},
    ),
    Model(
        "bloom_mask",
        "transformers.models.bloom.modeling_bloom::BloomModel",
        _f("bloom"),
        {"input_ids": "i64[2,16]", "attention_mask": "i64[2,16]"},
        trains=False,
    ),
    Model(
        "distilbert_mask",
        "transformers.models.distilbert.modeling_distilbert::DistilBertModel",
        _f("distilbert"),
        {"input_ids": "i64[2,16]", "attention_mask": "i64[2,16]"},
    ),
    Model(
        "roberta",
        "transformers.models.roberta.modeling_roberta::RobertaModel",
        _f("roberta"),
        {"input_ids": "i64[2,16]"},
    ),
    Model(
        "clip_vision",
        "transformers.models.clip.modeling_clip::CLIPVisionModel",
        _f("clip_vision"),
        {"pixel_values": "f32[2,3,32,32]"},
    ),
    Model(
        "timm_resnet",
        "timm.models.resnet::ResNet",
        _f("timm_resnet"),
        {"x": "f32[2,3,32,32]"},
        timm=True,
    ),
    Model(
        "timm_vit",
        "timm.models.vision_transformer::VisionTransformer",
        _f("timm_vit"),
        {"x": "f32[2,3,32,32]"},
        timm=True,
    ),
    Model(
        "timm_convnext",
        "timm.models.convnext::ConvNeXt",
        _f("timm_convnext"),
        {"x": "f32[2,3,64,64]"},
        timm=True,
    ),
    Model(
        "timm_efficientnet",
        "timm.models.efficientnet::EfficientNet",
        _f("timm_efficientnet"),
        {"x": "f32[2,3,64,64]"},
        timm=True,
    ),
    Model(
        "timm_swin",
        "timm.models.swin_transformer::SwinTransformer",
        _f("timm_swin"),
        {"x": "f32[2,3,64,64]"},
        timm=True,
    ),
]


def cache_argument() -> str:
    """What transformers names a causal LM's key/value cache, as an argument and as
    a field of its output: `cache` from 5.24, `past_key_values` before."""
    from importlib.metadata import version

    major, minor = (int(part) for part in version("transformers").split(".")[:2])
    return "cache" if (major, minor) >= (5, 24) else "past_key_values"


CACHE = cache_argument()

# Causal language models for greedy generation (tests/models/test_generation.py):
# the prefill variant takes the prompt and returns the key/value cache it built; the
# decode variant takes one token and that cache, for any length of it (P).
_DECODE = {
    "input_ids": "i64[1,1]",
    CACHE: "tests.models.factories::kv_cache(P)",
    "use_cache": "bool=True",
}
GENERATORS = [
    Model(
        "gpt2_lm",
        "transformers.models.gpt2.modeling_gpt2::GPT2LMHeadModel",
        _f("gpt2_lm"),
        {"input_ids": "i64[1,8]", "use_cache": "bool=True"},
        more=(_DECODE,),
    ),
    Model(
        "llama_lm",
        "transformers.models.llama.modeling_llama::LlamaForCausalLM",
        _f("llama_lm"),
        {"input_ids": "i64[1,8]", "use_cache": "bool=True"},
        more=(_DECODE,),
    ),
    Model(
        "qwen2_lm",
        "transformers.models.qwen2.modeling_qwen2::Qwen2ForCausalLM",
        _f("qwen2_lm"),
        {"input_ids": "i64[1,8]", "use_cache": "bool=True"},
        more=(_DECODE,),
    ),
    # a sliding window of 8: the cache keeps the last 7 tokens, and its length is
    # an int of the cache (`cumulative_length`), not a tensor's dimension
    Model(
        "mistral_lm",
        "transformers.models.mistral.modeling_mistral::MistralForCausalLM",
        _f("mistral_lm"),
        {"input_ids": "i64[1,8]", "use_cache": "bool=True"},
        more=(_DECODE,),
    ),
]

STUBS = _STUBS


def has_real_torchvision() -> bool:
    if importlib.util.find_spec("torchvision") is None:
        return False
    try:
        import torchvision.ops.misc  # noqa: F401
    except Exception:
        return False
    return True
