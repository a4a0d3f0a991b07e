"""From the reference 'torch.compile deep dive' (32.2.1, "The Problem with Eager Mode"):
the four-kernel eager forward that motivates fusion.

Eager runs one kernel per line and a memory round trip between them; a compiler can keep
the matmul extern and fuse the three pointwise steps into its epilogue.
"""

import torch


def eager_forward(x, weight, bias, scale):
    # The reference reads `bias` and `scale` as module globals; here they are arguments,
    # so the example is self-contained and every input is declared in pyproject.toml.
    y = x @ weight  # Kernel 1
    y = y + bias  # Kernel 2
    y = torch.relu(y)  # Kernel 3
    y = y * scale  # Kernel 4
    return y  # 4 kernel launches, 4 memory round-trips
