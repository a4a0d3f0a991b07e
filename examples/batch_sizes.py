"""From the reference 'torch.compile deep dive' (32.7.1, "Recompilation"): a model
called with several batch sizes. torch.compile recompiles for each; here each declared
batch size is a variant, chosen by its shape guard, generated ahead of time, and a
variant with a named batch dimension (`f32[B,512]`) serves every other size.
"""

import torch.nn.functional as F
from torch import nn


class Classifier(nn.Module):
    def __init__(self, d_in: int = 512, n_classes: int = 10):
        super().__init__()
        self.fc = nn.Linear(d_in, n_classes)

    def forward(self, x):
        return F.log_softmax(self.fc(x), dim=-1)
