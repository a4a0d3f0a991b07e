"""Stale-source detection: a generated module knows the sources it was built from.

Each generated module calls `check_sources` once, on import, with the hash of every
source file it was built from. If a source changed since, it warns once, naming the
file and the fix, and keeps working: the generated code is still what was reviewed.
Sources that cannot be found (a deployment without them) are not checked.
"""

from __future__ import annotations

import hashlib
import importlib.util
import os

from runtime_shim.warn import warn_once

__all__ = ["check_sources", "source_hash"]


def source_hash(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


def check_sources(generated: str, sources: dict[str, tuple[str, str]]) -> None:
    """`generated` is the module's `__file__`; `sources` maps module name -> (path as
    recorded, hash of its text)."""
    for module, (path, expected) in sources.items():
        try:
            spec = importlib.util.find_spec(module)
            origin = spec.origin if spec is not None else None
            if origin is None or not origin.endswith(".py"):
                continue
            with open(origin, "rb") as f:
                actual = source_hash(f.read())
        except (ImportError, OSError, ValueError):
            continue
        if actual != expected:
            try:
                where = os.path.relpath(generated)
            except ValueError:  # another drive
                where = generated
            warn_once(
                f"stale:{generated}:{module}",
                f"{where} is stale: {path} changed since it was generated; "
                "run transpile",
            )
