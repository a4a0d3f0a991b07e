"""Objects that generated code returns by their state."""

from __future__ import annotations

__all__ = ["rebuild"]


def rebuild(cls: type, state: dict) -> object:
    """An instance of `cls` holding `state` as its attributes, made without calling
    `__init__`: the object a model's forward built and filled (a key/value cache
    of transformers), as it stood when the forward returned."""
    obj = object.__new__(cls)
    obj.__dict__.update(state)
    return obj
