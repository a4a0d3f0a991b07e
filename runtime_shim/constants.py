"""Values a variant computes from parameters and buffers alone, kept between calls.

A variant whose forward computes something from the model's tensors alone (the
channels-last copy of a convolution's weight, a cast of a weight) computes it on
its first call, keeps it on the instance, and computes it again only when a tensor
it was computed from changed:

    sources = (conv1_weight, layer2_0_conv2_weight)
    constants = runtime_shim.constants(self, "cuda_0", sources)
    if constants is None:
        ...  # compute clone_1, clone_2 from the sources
        values = (clone_1, clone_2)
        constants = runtime_shim.keep_constants(self, "cuda_0", sources, values)
    clone_1, clone_2 = constants

A source has changed when it is another object (a parameter assigned anew), when
its version counter moved (written in place: an optimizer step, `copy_`,
`load_state_dict`), or when its address did (`param.data = ...`, `module.to(...)`).
The kept values hold memory as long as the instance does, the size of what they are
(the generated code says how much, above the block that computes them); `del
module._transpile_constants` frees them until the next call. Copies of the module
(`copy.deepcopy`, pickling) start without them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

__all__ = ["constants", "keep_constants"]

ATTRIBUTE = "_transpile_constants"  # where an instance keeps its values


class Kept(dict):
    """An instance's kept values, by variant: (sources, their versions, their
    addresses, the values). Copies start empty."""

    def __reduce__(self):  # copy, deepcopy and pickle alike
        return (Kept, ())


def constants(owner: Any, key: str, sources: Sequence[torch.Tensor]) -> tuple | None:
    """The values kept under `key` if none of `sources` changed since; else None."""
    kept = owner.__dict__.get(ATTRIBUTE)
    entry = kept.get(key) if kept is not None else None
    if entry is None:
        return None
    then, versions, addresses, values = entry
    for t, before, version, address in zip(sources, then, versions, addresses):
        if t is not before or t._version != version or t.data_ptr() != address:
            return None
    return values


def keep_constants(
    owner: Any, key: str, sources: Sequence[torch.Tensor], values: tuple
) -> tuple:
    """Keep `values`, computed from `sources` as they are now; returns `values`."""
    kept = owner.__dict__.get(ATTRIBUTE)
    if kept is None:
        kept = owner.__dict__[ATTRIBUTE] = Kept()
    versions = tuple(t._version for t in sources)
    addresses = tuple(t.data_ptr() for t in sources)
    kept[key] = (tuple(sources), versions, addresses, values)
    return values
