"""One-time warnings for generated modules (e.g. a guard that sent a call to eager)."""

from __future__ import annotations

import threading
import warnings

__all__ = ["warn_fallback", "warn_once"]

_SEEN: set[str] = set()
_SEEN_LOCK = threading.Lock()


def warn_once(key: str, message: str, category: type[Warning] = RuntimeWarning) -> None:
    """Warn with `message` the first time `key` is seen in this process only."""
    with _SEEN_LOCK:
        if key in _SEEN:
            return
        _SEEN.add(key)
    # stacklevel 3: skip warn_once and the generated caller; point at the user.
    warnings.warn(message, category, stacklevel=3)


def warn_fallback(target: str, misses: list[tuple[str, str | None]]) -> None:
    """Warn once that `target` ran its source (eager) code, naming failed guards.

    `misses` pairs each variant's name with the first of its guards that failed.
    """
    if misses:
        why = "; ".join(f"variant {name} needs {guard}" for name, guard in misses)
    else:
        why = "it has no compiled variant"
    message = f"{target}: running the source (eager) code: {why}"
    with _SEEN_LOCK:
        if message in _SEEN:
            return
        _SEEN.add(message)
    warnings.warn(message, RuntimeWarning, stacklevel=3)
