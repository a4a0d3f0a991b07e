"""From the reference 'torch.compile deep dive' (32.8.1, "Avoid graph breaks"): a
loop over layers with a `print` at layer 5. The loop is unrolled; the print runs
eagerly between compiled layers, as fallback code.
"""

from torch import nn


class LayerLoop(nn.Module):
    def __init__(self, width: int = 32, depth: int = 8):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width, width) for _ in range(depth))

    def forward(self, x):
        for i, layer in enumerate(self.layers):
            x = layer(x)
            if i == 5:
                print(x.mean())  # Graph break
        return x
