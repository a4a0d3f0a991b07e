"""A GPT-2 language model in the style of nanoGPT's `GPT` in `model.py`: token and
position embeddings, a stack of transformer `Block`s (from `gpt_block.py`), a final
LayerNorm and a language-model head tied to the token embedding. Plain int arguments
instead of a config dataclass, nanoGPT's weight init, no dropout, and no loss:
`forward(idx)` returns the logits of every position.

Not code from the reference docs: the reference 'torch.compile report 2026' (4.1) lists
GPT-2 among the generative models torch.compile speeds up; at n_layer=12, n_embd=768,
n_head=12 this is GPT-2 small.
"""

import math

import torch
from torch import nn

from examples.gpt_block import Block


class GPT(nn.Module):
    def __init__(self, vocab_size=256, block_size=64, n_layer=2, n_embd=64, n_head=4):
        super().__init__()
        self.block_size = block_size
        self.wte = nn.Embedding(vocab_size, n_embd)  # token embeddings
        self.wpe = nn.Embedding(block_size, n_embd)  # position embeddings
        self.h = nn.ModuleList(Block(n_embd, n_head) for _ in range(n_layer))
        self.ln_f = nn.LayerNorm(n_embd)
        self.lm_head = nn.Linear(n_embd, vocab_size, bias=False)
        self.lm_head.weight = self.wte.weight  # weight tying
        self.apply(self._init_weights)
        # GPT-2's scaled init of the projections into the residual stream
        for name, p in self.named_parameters():
            if name.endswith("c_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * n_layer))

    def _init_weights(self, module):
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, nn.Embedding):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)

    def forward(self, idx):
        _, T = idx.size()  # batch size, sequence length
        assert T <= self.block_size, "sequence longer than block_size"
        pos = torch.arange(0, T, dtype=torch.long, device=idx.device)
        x = self.wte(idx) + self.wpe(pos)  # (B, T, n_embd)
        for block in self.h:
            x = block(x)
        x = self.ln_f(x)
        return self.lm_head(x)  # (B, T, vocab_size)
