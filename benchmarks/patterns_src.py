"""Memory-bound and fusion patterns of real models, the sources of
`benchmarks/patterns.py`.

Each function or module is one pattern as a model library writes it; the comment above
it names where it comes from. Weights are inputs of the functions, parameters of the
modules. `benchmarks/patterns.py` lists the shapes and dtypes each one is measured at.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

# ------------------------------------------------------------------ normalization


def rmsnorm_gated(x, gate, weight):
    # transformers MambaRMSNormGated / Mamba2 gated RMSNorm: RMSNorm(x) * silu(gate)
    dtype = x.dtype
    h = x.to(torch.float32)
    variance = h.pow(2).mean(-1, keepdim=True)
    h = h * torch.rsqrt(variance + 1e-6)
    return weight * h.to(dtype) * F.silu(gate.to(torch.float32)).to(dtype)


class LayerNormGELU(nn.Module):
    # BERT/ViT intermediate: LayerNorm then GELU (erf)
    def __init__(self, dim: int = 4096, bf16: bool = False):
        super().__init__()
        self.norm = nn.LayerNorm(dim, eps=1e-12)
        if bf16:
            self.bfloat16()

    def forward(self, x):
        return F.gelu(self.norm(x))


class BiasDropoutResidualLayerNorm(nn.Module):
    # Megatron bias_dropout_add_fused + post-LayerNorm (BERT output block), eval
    def __init__(self, dim: int = 1024, bf16: bool = False):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(dim) * 0.1)
        self.dropout = nn.Dropout(0.1)
        self.norm = nn.LayerNorm(dim, eps=1e-5)
        if bf16:
            self.bfloat16()

    def forward(self, x, residual):
        out = residual + self.dropout(x + self.bias)
        return self.norm(out)


class GroupNorm(nn.Module):
    # diffusers UNet / ResnetBlock2D: GroupNorm(32 groups) on an NCHW activation
    def __init__(self, channels: int = 256, groups: int = 32):
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels, eps=1e-6)

    def forward(self, x):
        return self.norm(x)


class GroupNormSiLU(nn.Module):
    # diffusers ResnetBlock2D: norm1 then nonlinearity (SiLU)
    def __init__(self, channels: int = 256, groups: int = 32):
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels, eps=1e-6)

    def forward(self, x):
        return F.silu(self.norm(x))


def l2_normalize(x):
    # CLIP / sentence-transformers: unit-norm embeddings
    return F.normalize(x, dim=-1)


def frozen_batchnorm(x, weight, bias, running_mean, running_var):
    # detectron2 FrozenBatchNorm2d: a per-channel affine from the running stats
    scale = weight * (running_var + 1e-5).rsqrt()
    shift = bias - running_mean * scale
    return x * scale[:, None, None] + shift[:, None, None]


def var_std(x):
    # statistics over the last dim (whitening, layer-stat probes)
    return x.var(-1, keepdim=True), x.std(-1, unbiased=False)


# ---------------------------------------------------------------------- reductions


def column_stats(x):
    # per-feature statistics: activation calibration (observers), sums over a batch
    return x.sum(0), x.amax(0)


def mean_hw(x):
    # global average pooling of an NCHW feature map (ResNet/EfficientNet heads, SE)
    return x.mean((2, 3))


def avgmax_pool_head(x):
    # timm's `SelectAdaptivePool2d(pool_type="avgmax")` head: the average of the
    # global average and the global max pool, flattened
    pooled = 0.5 * (F.adaptive_avg_pool2d(x, 1) + F.adaptive_max_pool2d(x, 1))
    return pooled.flatten(1)


def logsumexp_rows(x):
    # log-partition over a long row (CLIP loss, MoE router z-loss)
    return torch.logsumexp(x, dim=-1)


def mask_any_all(mask):
    # attention-mask checks: rows with any / all tokens kept
    return mask.any(-1), mask.all(-1)


def masked_mean_pool(hidden, mask):
    # sentence-transformers mean pooling over the tokens the attention mask keeps
    m = mask.unsqueeze(-1).to(hidden.dtype)
    summed = (hidden * m).sum(1)
    count = m.sum(1).clamp(min=1e-9)
    return summed / count


def cumsum_rows(x):
    # position ids from an attention mask, cumulative sums over a sequence
    return torch.cumsum(x, dim=-1)


def stack_sum(a, b, c, d):
    # summing several feature maps / hidden states (scalar mix, BiFPN inputs)
    return torch.stack([a, b, c, d]).sum(0)


# ------------------------------------------------------------------ softmax, losses


def softmax_rows(x):
    # softmax over a long row (a 32K-vocabulary distribution)
    return torch.softmax(x, dim=-1)


def cross_entropy(logits, target):
    # language-model loss: F.cross_entropy over the vocabulary, mean over tokens
    return F.cross_entropy(logits, target)


def nll_gather(logits, target):
    # per-token log-probabilities of the targets (RLHF/DPO log-probs of a sequence)
    logp = torch.log_softmax(logits, dim=-1)
    return -logp.gather(-1, target.unsqueeze(-1)).squeeze(-1)


def nll_pick(logits, target):
    # the same loss written by hand: each row's target picked by an index
    logp = torch.log_softmax(logits, dim=-1)
    return -logp[torch.arange(logits.shape[0], device=logits.device), target].mean()


def masked_softmax(scores, mask):
    # BERT-style attention: padding mask broadcast over heads and queries, softmax
    scores = scores.masked_fill(~mask, torch.finfo(scores.dtype).min)
    return torch.softmax(scores, dim=-1)


def where_causal(weights, causal):
    # GPT-2 eager attention: torch.where with a broadcast causal mask
    mask_value = torch.finfo(weights.dtype).min
    return torch.where(causal, weights, mask_value)


def argmax_vocab(logits):
    # argmax over the vocabulary (classification, accuracy metrics)
    return logits.argmax(dim=-1)


def greedy_step(logits, input_ids):
    # transformers greedy search step: last position's argmax appended to the ids
    next_logits = logits[:, -1, :].to(torch.float32)
    next_tokens = torch.argmax(next_logits, dim=-1)
    return torch.cat([input_ids, next_tokens[:, None]], dim=-1)


def softcap(logits):
    # Gemma 2 final-logit soft-capping
    cap = 30.0
    return torch.tanh(logits / cap) * cap


# ------------------------------------------------------------------- activations


def silu_nchw(x):
    # EfficientNet swish on an NCHW activation, written out
    return x * torch.sigmoid(x)


def swiglu(gate, up):
    # LLaMA MLP: act_fn(gate_proj(x)) * up_proj(x), the elementwise part
    return F.silu(gate) * up


def swiglu_chunk(gate_up):
    # Phi-3 MLP: fused gate_up projection split in halves
    gate, up = gate_up.chunk(2, dim=-1)
    return up * F.silu(gate)


def geglu(h):
    # diffusers GEGLU: hidden_states, gate = proj(x).chunk(2); h * gelu(gate)
    hidden, gate = h.chunk(2, dim=-1)
    return hidden * F.gelu(gate)


def gelu_tanh(x):
    # transformers NewGELUActivation (GPT-2), written out
    inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))
    return 0.5 * x * (1.0 + torch.tanh(inner))


def quick_gelu(x):
    # CLIP QuickGELU
    return x * torch.sigmoid(1.702 * x)


def mobilenet_hard(x, se):
    # MobileNetV3 block: hardswish, squeeze-excite gate via hardsigmoid, clamp
    y = F.hardswish(x)
    y = y * F.hardsigmoid(se)
    return torch.clamp(y, -6.0, 6.0)


def hard_swish_manual(x):
    # timm hard_swish / hard_sigmoid as written in timm.layers.activations
    return x * F.relu6(x + 3.0) / 6.0


def layer_scale_residual(x, y, gamma):
    # timm/ConvNeXt LayerScale + residual (DropPath is identity in eval)
    return x + gamma * y


# -------------------------------------------------------------- data movement


def rotary(q, k, cos, sin):
    # transformers apply_rotary_pos_emb with rotate_half (cat of the halves)
    cos = cos.unsqueeze(1)
    sin = sin.unsqueeze(1)

    def rotate_half(t):
        t1 = t[..., : t.shape[-1] // 2]
        t2 = t[..., t.shape[-1] // 2 :]
        return torch.cat((-t2, t1), dim=-1)

    q_embed = (q * cos) + (rotate_half(q) * sin)
    k_embed = (k * cos) + (rotate_half(k) * sin)
    return q_embed, k_embed


def cat_relu(a, b, c):
    # DenseNet/Inception: concatenate branches along channels, then an activation
    return torch.relu(torch.cat([a, b, c], dim=1))


def pad_pointwise(x):
    # padding a feature map (timm pad_same, ZeroPad2d) then an elementwise op
    return torch.sigmoid(F.pad(x, (1, 1, 1, 1), value=0.0))


def roll_shift(x):
    # Swin Transformer shifted windows: cyclic shift of a (B, H, W, C) map
    return torch.roll(x, shifts=(-3, -3), dims=(1, 2))


def flip_average(x):
    # test-time augmentation: average with the horizontally flipped map
    return (x + torch.flip(x, dims=[-1])) * 0.5


def int8_dequant(q, scale):
    # per-channel int8 weight dequantization (LLM.int8 / weight-only quant)
    return (q.to(torch.float32) * scale[:, None]).to(torch.bfloat16)


def nan_to_num(x):
    # sanitizing logits or gradients
    return torch.nan_to_num(x, nan=0.0, posinf=1e4, neginf=-1e4)


def adam_step(p, grad, m, v):
    # torch.optim.Adam (foreach=False) at step 10, written functionally
    lr, beta1, beta2, eps, step = 1e-3, 0.9, 0.999, 1e-8, 10
    m = beta1 * m + (1 - beta1) * grad
    v = beta2 * v + (1 - beta2) * grad * grad
    m_hat = m / (1 - beta1**step)
    v_hat = v / (1 - beta2**step)
    p = p - lr * m_hat / (torch.sqrt(v_hat) + eps)
    return p, m, v


class EmbeddingPositionLayerNorm(nn.Module):
    # BERT embeddings: word + position (+ token type) embeddings, then LayerNorm
    def __init__(self, vocab: int = 30522, dim: int = 768, positions: int = 512):
        super().__init__()
        self.word = nn.Embedding(vocab, dim)
        self.position = nn.Embedding(positions, dim)
        self.token_type = nn.Embedding(2, dim)
        self.norm = nn.LayerNorm(dim, eps=1e-12)
        self.dropout = nn.Dropout(0.1)

    def forward(self, input_ids):
        seq = input_ids.shape[1]
        positions = torch.arange(seq, device=input_ids.device)
        h = self.word(input_ids) + self.position(positions)[None]
        h = h + self.token_type.weight[0]
        return self.dropout(self.norm(h))


# -------------------------------------------------------------------- blocks


class ResNetBasicBlock(nn.Module):
    # torchvision/timm BasicBlock in eval: conv-bn-relu, conv-bn, residual, relu
    def __init__(self, channels: int = 64):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x):
        out = torch.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        return torch.relu(out + x)


class LlamaRMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.weight = nn.Parameter(torch.ones(dim))
        self.eps = eps

    def forward(self, x):
        dtype = x.dtype
        h = x.to(torch.float32)
        variance = h.pow(2).mean(-1, keepdim=True)
        h = h * torch.rsqrt(variance + self.eps)
        return self.weight * h.to(dtype)


def _rotate_half(x):
    x1 = x[..., : x.shape[-1] // 2]
    x2 = x[..., x.shape[-1] // 2 :]
    return torch.cat((-x2, x1), dim=-1)


class LlamaDecoderBlock(nn.Module):
    # transformers LlamaDecoderLayer (SDPA attention, grouped-query heads, SwiGLU)
    def __init__(
        self,
        hidden: int = 2048,
        heads: int = 16,
        kv_heads: int = 4,
        intermediate: int = 5632,
        bf16: bool = False,
    ):
        super().__init__()
        self.heads, self.kv_heads = heads, kv_heads
        self.head_dim = hidden // heads
        self.input_layernorm = LlamaRMSNorm(hidden)
        self.q_proj = nn.Linear(hidden, heads * self.head_dim, bias=False)
        self.k_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.v_proj = nn.Linear(hidden, kv_heads * self.head_dim, bias=False)
        self.o_proj = nn.Linear(heads * self.head_dim, hidden, bias=False)
        self.post_attention_layernorm = LlamaRMSNorm(hidden)
        self.gate_proj = nn.Linear(hidden, intermediate, bias=False)
        self.up_proj = nn.Linear(hidden, intermediate, bias=False)
        self.down_proj = nn.Linear(intermediate, hidden, bias=False)
        if bf16:
            self.bfloat16()

    def forward(self, x, cos, sin):
        batch, seq, _ = x.shape
        residual = x
        h = self.input_layernorm(x)
        q = self.q_proj(h).view(batch, seq, self.heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(h).view(batch, seq, self.kv_heads, self.head_dim)
        k = k.transpose(1, 2)
        v = self.v_proj(h).view(batch, seq, self.kv_heads, self.head_dim)
        v = v.transpose(1, 2)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        q = q * cos + _rotate_half(q) * sin
        k = k * cos + _rotate_half(k) * sin
        groups = self.heads // self.kv_heads
        k = k[:, :, None].expand(batch, self.kv_heads, groups, seq, self.head_dim)
        k = k.reshape(batch, self.heads, seq, self.head_dim)
        v = v[:, :, None].expand(batch, self.kv_heads, groups, seq, self.head_dim)
        v = v.reshape(batch, self.heads, seq, self.head_dim)
        attn = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        attn = attn.transpose(1, 2).reshape(batch, seq, -1)
        x = residual + self.o_proj(attn)
        residual = x
        h = self.post_attention_layernorm(x)
        h = self.down_proj(F.silu(self.gate_proj(h)) * self.up_proj(h))
        return residual + h


# ---------------------------------------------------------------------- pooling


class StemPool(nn.Module):
    # torchvision / timm ResNet stem after its convolution: bn1, relu, maxpool
    def __init__(self, channels: int = 64):
        super().__init__()
        self.bn1 = nn.BatchNorm2d(channels)
        self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)

    def forward(self, x):
        return self.maxpool(F.relu(self.bn1(x)))


def transition_pool(x):
    # DenseNet transition / ResNet-D shortcut: a 2 x 2 average pool
    return F.avg_pool2d(x, kernel_size=2, stride=2)


def fpn_upsample_add(top, lateral):
    # torchvision FeaturePyramidNetwork / diffusers Upsample2D: nearest x2, then add
    return F.interpolate(top, size=lateral.shape[-2:], mode="nearest") + lateral


def bilinear_upsample_add(top, lateral):
    # UPerNet / SegFormer decode heads: a coarser map resized bilinearly, then added
    size = lateral.shape[-2:]
    return F.interpolate(top, size=size, mode="bilinear", align_corners=False) + lateral


def reflect_pad_relu(x):
    # CycleGAN / pix2pix ResNet generator: ReLU, then a reflection pad before a conv
    return F.pad(F.relu(x), (1, 1, 1, 1), mode="reflect")


# ---------------------------------------------------------------- scatters that add


def moe_combine(hidden, expert_out, token_idx, weights):
    # Mixtral / Qwen2-MoE sparse block: each routed token's expert output, scaled by
    # its routing weight, added back into its token's row, then the residual
    combined = torch.zeros_like(hidden).index_add_(
        0, token_idx, expert_out * weights[:, None]
    )
    return hidden + combined


def scatter_sum_messages(x, messages, dst):
    # PyG message passing (GIN): each edge's message summed into its destination
    # node (torch_scatter's `scatter(..., reduce="sum")`), plus the node's own
    index = dst[:, None].expand_as(messages)
    return x + torch.zeros_like(x).scatter_add_(0, index, messages)


def scatter_max_mean_messages(messages, dst):
    # PyG's max and mean aggregations (EdgeConv, SAGEConv): torch_geometric's
    # `scatter(..., reduce="max")` is `scatter_reduce_(..., "amax", include_self=
    # False)` into zeros, its mean the sums over the counts, clamped to 1; ten
    # edges a node
    n = dst.shape[0] // 10
    index = dst[:, None].expand_as(messages)
    size = (n, messages.shape[1])
    top = messages.new_zeros(size).scatter_reduce_(
        0, index, messages, "amax", include_self=False
    )
    count = messages.new_zeros(n).scatter_add_(0, dst, messages.new_ones(dst.shape))
    total = messages.new_zeros(size).scatter_add_(0, index, messages)
    return top, total / count.clamp(min=1)[:, None]


class StaticKVCache(nn.Module):
    # transformers' StaticCache during decoding: the step's keys and values written
    # into the preallocated caches at their positions (`index_copy_`), then the
    # step's query attends over the caches
    def __init__(self, batch: int, heads: int, length: int, dim: int, bf16=False):
        super().__init__()
        dtype = torch.bfloat16 if bf16 else torch.float32
        shape = (batch, heads, length, dim)
        self.register_buffer("keys", torch.zeros(shape, dtype=dtype))
        self.register_buffer("values", torch.zeros(shape, dtype=dtype))

    def forward(self, query, key_states, value_states, cache_position):
        self.keys.index_copy_(2, cache_position, key_states)
        self.values.index_copy_(2, cache_position, value_states)
        return F.scaled_dot_product_attention(query, self.keys, self.values)


IMAGE_TOKEN = 32000  # an id past the text vocabulary of `image_features_merge`


def image_features_merge(inputs_embeds, input_ids, image_features):
    # LLaVA / Qwen2-VL: the vision tower's features in place of the image tokens'
    # embeddings (`masked_scatter` with the tokens' mask expanded over the features)
    mask = (input_ids == IMAGE_TOKEN)[..., None].expand_as(inputs_embeds)
    return inputs_embeds.masked_scatter(mask, image_features.to(inputs_embeds.dtype))
