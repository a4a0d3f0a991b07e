"""From the reference 'torch.compile deep dive' (32.2): Dynamo's examples of a
data-dependent branch, a graph break (`print`), and specialization on a Python
argument (`multiplier == 2` becomes a guard).
"""


def my_function(x):
    y = x * 2
    if y.sum() > 0:  # Dynamic control flow!
        y = y + 1
    return y


def problematic(x):
    y = x * 2  # captured

    # graph break: Python print
    print(f"Shape: {y.shape}")

    z = y + 1  # compiled after the break
    return z


def func(x, multiplier):
    return x * multiplier
