"""From the reference 'torch.jit: script vs trace': a loop over `x.dim()` (unrolled for
the declared rank) and a branch on the data, which `torch.jit.trace` gets wrong for
inputs that take the other branch.

The reference names both functions `fn`; here they are `fn_loop` and `fn_branch`.
"""


def fn_loop(x):
    for _ in range(x.dim()):
        x = x * x
    return x


def fn_branch(x):
    if x.sum() > 0:
        return x * 2
    else:
        return x * -1
