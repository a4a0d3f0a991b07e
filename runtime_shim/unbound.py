"""The value fallback code returns for a local it left unassigned."""

from __future__ import annotations

__all__ = ["UNBOUND"]


class _Unbound:
    """Fallback code returns this for a local that the path it took left
    unassigned (an `if` that assigns it on one branch only); the fallback code that
    reads the local next unbinds it again, so reading it raises as in the source."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "runtime_shim.UNBOUND"

    def __reduce__(self) -> str:
        return "UNBOUND"


UNBOUND = _Unbound()
