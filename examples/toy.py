"""From the reference 'PyTorch compilation: TorchScript to torch.compile' (torch.fx
section): `ToyLinear`, the toy module without its data-dependent branch, which
`torch.fx.symbolic_trace` and `torch.compile` both capture as linear -> relu.
"""

from torch import nn


class ToyLinear(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        return self.linear(x).relu()


class ToyModule(nn.Module):
    """The reference's data-dependent branch: `torch.jit.trace` bakes in whichever
    branch the example input took; `transpile` compiles both."""

    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(4, 4)

    def forward(self, x):
        y = self.linear(x)
        if y.sum() > 0:
            return y.relu()
        return y.tanh()
