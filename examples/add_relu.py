"""From the reference 'PyTorch compilation: TorchScript to torch.compile' (Guards
section): the function used to show shape and dtype guards and recompiles.
"""


def f(a, b):
    return (a + b).relu()
