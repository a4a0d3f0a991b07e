"""Held-out patterns of real models, the sources of `benchmarks/patterns.py --suite
heldout`: written from model libraries after the compiler's kernels were, and never
tuned for (Hugging Face's T5, BLOOM, BERT and Mixtral code, timm's ConvNeXt and Swin,
diffusers' timestep embeddings, torchvision's focal loss, DETR, Mamba, ...). The
comment above each names where it comes from.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn


def t5_bucket(q_pos, k_pos):
    # T5Attention._relative_position_bucket (bidirectional, 32 buckets, 128 max)
    relative_position = k_pos[None, :] - q_pos[:, None]
    num_buckets = 16
    relative_buckets = (relative_position > 0).to(torch.long) * num_buckets
    relative_position = torch.abs(relative_position)
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    rel_if_large = max_exact + (
        torch.log(relative_position.float() / max_exact)
        / math.log(128 / max_exact)
        * (num_buckets - max_exact)
    ).to(torch.long)
    rel_if_large = torch.min(
        rel_if_large, torch.full_like(rel_if_large, num_buckets - 1)
    )
    relative_buckets += torch.where(is_small, relative_position, rel_if_large)
    return relative_buckets


class LayerNorm2d(nn.Module):
    # ConvNeXt's channels-first LayerNorm
    def __init__(self, channels=96):
        super().__init__()
        self.weight = nn.Parameter(torch.rand(channels) + 0.5)
        self.bias = nn.Parameter(torch.randn(channels) * 0.1)
        self.eps = 1e-6

    def forward(self, x):
        u = x.mean(1, keepdim=True)
        s = (x - u).pow(2).mean(1, keepdim=True)
        x = (x - u) / torch.sqrt(s + self.eps)
        return self.weight[:, None, None] * x + self.bias[:, None, None]


def swin_shift_partition(x):
    # Swin: cyclic shift, then window partition (B, H, W, C) -> (nW*B, ws*ws, C)
    B, H, W, C = x.shape
    ws = 7
    x = torch.roll(x, shifts=(-3, -3), dims=(1, 2))
    x = x.view(B, H // ws, ws, W // ws, ws, C)
    windows = x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, ws * ws, C)
    return windows


def timestep_embedding(timesteps):
    # diffusers get_timestep_embedding (flip_sin_to_cos=True)
    half_dim = 160
    exponent = -math.log(10000) * torch.arange(
        0, half_dim, dtype=torch.float32, device=timesteps.device
    )
    exponent = exponent / half_dim
    emb = torch.exp(exponent)
    emb = timesteps[:, None].float() * emb[None, :]
    emb = torch.cat([torch.sin(emb), torch.cos(emb)], dim=-1)
    emb = torch.cat([emb[:, half_dim:], emb[:, :half_dim]], dim=-1)
    return emb


def kd_loss(student, teacher):
    # knowledge distillation, temperature 4
    T = 4.0
    return (
        F.kl_div(
            F.log_softmax(student / T, dim=-1),
            F.softmax(teacher / T, dim=-1),
            reduction="batchmean",
        )
        * T
        * T
    )


def smoothed_ce(logits, target):
    # cross entropy with label smoothing (timm, ViT training)
    return F.cross_entropy(logits, target, label_smoothing=0.1)


def llama_rmsnorm(hidden_states, weight):
    # transformers LlamaRMSNorm: f32 statistics of a bf16 tensor
    input_dtype = hidden_states.dtype
    hidden_states = hidden_states.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + 1e-6)
    return weight * hidden_states.to(input_dtype)


def moe_router(router_logits):
    # Mixtral: softmax in f32, top-2, renormalized
    routing_weights = F.softmax(router_logits, dim=1, dtype=torch.float)
    routing_weights, selected_experts = torch.topk(routing_weights, 2, dim=-1)
    routing_weights = routing_weights / routing_weights.sum(dim=-1, keepdim=True)
    return routing_weights, selected_experts


def alibi_softmax(scores, slopes):
    # BLOOM/MPT ALiBi: a linear bias by distance, then softmax
    L = scores.shape[-1]
    pos = torch.arange(L, device=scores.device)
    rel = (pos[None, :] - pos[:, None]).to(scores.dtype)
    bias = slopes[:, None, None] * rel[None]
    return torch.softmax(scores + bias[None], dim=-1)


def squeeze_excite(x, w1, w2):
    # SE block with linear layers
    s = x.mean((2, 3))
    s = F.relu(s @ w1.t())
    s = torch.sigmoid(s @ w2.t())
    return x * s[:, :, None, None]


def sigmoid_focal_loss(inputs, targets):
    # torchvision.ops.sigmoid_focal_loss, alpha 0.25, gamma 2, mean
    p = torch.sigmoid(inputs)
    ce_loss = F.binary_cross_entropy_with_logits(inputs, targets, reduction="none")
    p_t = p * targets + (1 - p) * (1 - targets)
    loss = ce_loss * ((1 - p_t) ** 2)
    alpha_t = 0.25 * targets + 0.75 * (1 - targets)
    loss = alpha_t * loss
    return loss.mean()


def pixel_shuffle_gelu(x):
    # ESPCN/SR upsampling head
    return F.gelu(F.pixel_shuffle(x, 2))


def bert_extended_mask_softmax(scores, attention_mask):
    # BERT's get_extended_attention_mask, added to scores, softmax
    ext = attention_mask[:, None, None, :].to(scores.dtype)
    ext = (1.0 - ext) * torch.finfo(scores.dtype).min
    return torch.softmax(scores + ext, dim=-1)


def box_cxcywh_to_xyxy(x):
    # DETR box conversion
    x_c, y_c, w, h = x.unbind(-1)
    b = [(x_c - 0.5 * w), (y_c - 0.5 * h), (x_c + 0.5 * w), (y_c + 0.5 * h)]
    return torch.stack(b, dim=-1)


def instance_norm_relu(x):
    # style transfer / CycleGAN blocks
    return F.relu(F.instance_norm(x, eps=1e-5))


def normalize_channels(x):
    # F.normalize over channels of an NCHW map (SimCLR/FPN heads)
    return F.normalize(x, dim=1)


def masked_fill_softmax(scores, mask):
    # masked rows give NaN, zeroed afterwards
    s = scores.masked_fill(~mask[:, None, None, :], float("-inf"))
    return torch.softmax(s, dim=-1).nan_to_num(0.0)


def fake_quant(x, scale, zero_point):
    # per-channel fake quantization written out (QAT)
    q = torch.clamp(torch.round(x / scale[:, None]) + zero_point[:, None], 0, 255)
    return (q - zero_point[:, None]) * scale[:, None]


def selective_decay(dt, A, dt_bias):
    # Mamba-style: softplus step, exp decay, cumulative log decay
    dt = F.softplus(dt + dt_bias)
    dA = dt * A[:, None]
    return torch.exp(torch.cumsum(dA, dim=-1))


def grad_norm_clip(g1, g2, g3):
    # clip_grad_norm_ over three gradients (computed, returned scaled)
    norms = torch.stack([torch.linalg.vector_norm(g, 2.0) for g in (g1, g2, g3)])
    total = torch.linalg.vector_norm(norms, 2.0)
    coef = torch.clamp(1.0 / (total + 1e-6), max=1.0)
    return g1 * coef, g2 * coef, g3 * coef


def entropy_rows(logits):
    # entropy of a categorical (RL policies, confidence)
    logp = F.log_softmax(logits, dim=-1)
    return -(logp.exp() * logp).sum(-1)


def glu_conv_out(x):
    # F.glu over channels (ConvS2S, wav2vec2 feature projection)
    return F.glu(x, dim=1)


def interp_nearest_exact_add(x, y):
    # nearest-exact upsampling + skip (UNet decoders)
    return F.interpolate(x, scale_factor=2, mode="nearest-exact") + y


def logit_soft_clip_topk(logits):
    # sampling: temperature, top-k filter
    logits = logits / 0.7
    v, _ = torch.topk(logits, 50)
    return logits.masked_fill(logits < v[:, [-1]], float("-inf")).softmax(-1)
