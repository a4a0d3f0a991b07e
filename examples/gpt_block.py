"""A GPT-2 transformer block in the style of nanoGPT's `model.py`, written as user
modules with plain int arguments instead of a config dataclass, and without dropout.

Not code from the reference docs: the reference 'torch.compile report 2026' (4.1) lists
GPT-2 among the generative models torch.compile speeds up. `Block` is the unit that
repeats: `GPT` in `gpt.py` stacks them; `BlockBF16` is `Block` in bfloat16.
"""

import torch.nn.functional as F
from torch import nn


class CausalSelfAttention(nn.Module):
    def __init__(self, n_embd, n_head):
        super().__init__()
        assert n_embd % n_head == 0
        # key, query, value projections for all heads, in a batch
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        # output projection
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.n_embd = n_embd
        self.n_head = n_head

    def forward(self, x):
        B, T, C = x.size()  # batch size, sequence length, embedding dimensionality
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        # split heads: (B, T, C) -> (B, nh, T, hs)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        y = y.transpose(1, 2).contiguous().view(B, T, C)  # re-assemble all head outputs
        return self.c_proj(y)


class MLP(nn.Module):
    def __init__(self, n_embd):
        super().__init__()
        self.c_fc = nn.Linear(n_embd, 4 * n_embd)
        self.c_proj = nn.Linear(4 * n_embd, n_embd)

    def forward(self, x):
        x = self.c_fc(x)
        x = F.gelu(x, approximate="tanh")
        x = self.c_proj(x)
        return x


class Block(nn.Module):
    def __init__(self, n_embd=64, n_head=4):
        super().__init__()
        self.ln_1 = nn.LayerNorm(n_embd)
        self.attn = CausalSelfAttention(n_embd, n_head)
        self.ln_2 = nn.LayerNorm(n_embd)
        self.mlp = MLP(n_embd)

    def forward(self, x):
        x = x + self.attn(self.ln_1(x))
        x = x + self.mlp(self.ln_2(x))
        return x


class BlockBF16(Block):
    """`Block` with bfloat16 parameters, for bfloat16 inputs. `transpile` builds a
    module from its class and init arguments, so a bfloat16 model is a class (or a
    factory) of its own."""

    def __init__(self, n_embd=64, n_head=4):
        super().__init__(n_embd, n_head)
        self.bfloat16()
