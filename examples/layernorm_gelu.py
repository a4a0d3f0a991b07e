"""LayerNorm followed by GELU: a row reduction with a pointwise epilogue.

Not code from the reference docs: it is the "pointwise + reduction fusion" the reference
'torch.compile report 2026' (3.4) describes, in its most common transformer form.
"""

import torch.nn.functional as F
from torch import nn


class LayerNormGELU(nn.Module):
    def __init__(self, dim=256):
        super().__init__()
        self.norm = nn.LayerNorm(dim)

    def forward(self, x):
        return F.gelu(self.norm(x))
