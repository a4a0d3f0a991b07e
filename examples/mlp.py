"""A two-layer MLP (Linear -> GELU -> Linear), the feed-forward half of a transformer.

Not code from the reference docs: the reference 'torch.compile report 2026' (4.1)
credits "attention + MLP fusion" for transformer speedups; this is the smallest MLP to
fuse.
"""

import torch.nn.functional as F
from torch import nn


class MLP(nn.Module):
    def __init__(self, d_in=64, d_hidden=256, d_out=64):
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.fc2 = nn.Linear(d_hidden, d_out)

    def forward(self, x):
        return self.fc2(F.gelu(self.fc1(x)))
