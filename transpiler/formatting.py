"""black, once per text.

Generated modules are black-formatted, and black is most of the time of a run that
rebuilds unchanged targets (`transpile --check` in CI, `transpile` after an edit to
one target): it formats the same texts again. So black's output is kept by the
hash of its input, black's version and its mode, in the per-user cache
(`runtime_shim.cpp.cache_dir()`, folder `black/`), trusted as the C++ kernel cache
is (Note [Trusting the cache] in runtime_shim/cpp.py): a folder of this user's,
mode 0700, and entries owned by this user that no one else can write. A cache that
cannot be trusted or written is not used: every text is formatted afresh. When a
run finds more than MAX_ENTRIES entries, it removes the least recently used half.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import tempfile
from pathlib import Path

import black

from runtime_shim.cpp import _entry_problem, _private_folder, cache_dir

MODE = black.Mode()
MAX_ENTRIES = 2000


def format_module(text: str) -> str:
    """`text` formatted by black, as `black.format_str` formats it."""
    folder = _folder(cache_dir())
    if folder is None:
        return black.format_str(text, mode=MODE)
    entry = folder / _key(text)
    if os.path.lexists(entry) and _entry_problem(entry) is None:
        try:
            cached = entry.read_bytes().decode("utf-8")
        except (OSError, UnicodeDecodeError):
            pass
        else:
            with contextlib.suppress(OSError):
                os.utime(entry)  # recently used: kept when the cache is pruned
            return cached
    formatted = black.format_str(text, mode=MODE)
    _store(entry, formatted)
    return formatted


def _key(text: str) -> str:
    digest = hashlib.sha256()
    for part in (black.__version__, repr(MODE), text):
        digest.update(part.encode("utf-8", "surrogatepass"))
        digest.update(b"\0")
    return digest.hexdigest()[:32]


@functools.cache
def _folder(root: Path) -> Path | None:
    """The cache folder under `root`, pruned; None where it cannot be trusted."""
    folder = root / "black"
    if _private_folder(root) or _private_folder(folder):
        return None
    entries = [p for p in folder.iterdir() if not p.name.startswith(".")]
    if len(entries) > MAX_ENTRIES:
        entries.sort(key=_used_at)
        for old in entries[: len(entries) - MAX_ENTRIES // 2]:
            old.unlink(missing_ok=True)
    return folder


def _used_at(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def _store(entry: Path, text: str) -> None:
    """Write `entry` atomically (a temporary file, then `os.replace`), mode 0600;
    a cache that cannot be written is only slower."""
    try:
        data = text.encode("utf-8")
        fd, tmp = tempfile.mkstemp(dir=entry.parent, prefix=".", suffix=".tmp")
    except (OSError, UnicodeEncodeError):
        return
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, entry)
    except OSError:
        pass
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
