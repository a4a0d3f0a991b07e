"""black's output is cached per text in the user's cache, trusted as the C++ kernel
cache is: what comes back is always what black writes."""

from __future__ import annotations

import os
from pathlib import Path

import black
import pytest

from transpiler import formatting

TEXT = "def f( x ):\n  return [x,\n x]\n"
FORMATTED = "def f(x):\n    return [x, x]\n"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TRANSPILE_CACHE_DIR", str(tmp_path / "cache"))
    return tmp_path / "cache" / "black"


@pytest.fixture
def calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The texts black formats."""
    seen: list[str] = []
    real = black.format_str

    def format_str(text: str, mode: black.Mode) -> str:
        seen.append(text)
        return real(text, mode=mode)

    monkeypatch.setattr(formatting.black, "format_str", format_str)
    return seen


def test_a_text_is_formatted_once(cache: Path, calls: list[str]) -> None:
    assert formatting.format_module(TEXT) == FORMATTED
    assert formatting.format_module(TEXT) == FORMATTED
    assert calls == [TEXT]
    (entry,) = cache.iterdir()
    assert entry.read_text() == FORMATTED
    assert oct(entry.stat().st_mode & 0o777) == oct(0o600)


def test_an_entry_others_can_write_is_not_read(cache: Path, calls: list[str]) -> None:
    formatting.format_module(TEXT)
    (entry,) = cache.iterdir()
    entry.write_text("import os  # not black's\n")
    os.chmod(entry, 0o666)
    assert formatting.format_module(TEXT) == FORMATTED
    assert calls == [TEXT, TEXT]
    assert entry.read_text() == FORMATTED  # replaced by a private one


def test_a_cache_others_can_write_is_not_used(cache: Path, calls: list[str]) -> None:
    cache.parent.mkdir(mode=0o700)
    os.chmod(cache.parent, 0o777)
    assert formatting.format_module(TEXT) == FORMATTED
    assert formatting.format_module(TEXT) == FORMATTED
    assert calls == [TEXT, TEXT]
    assert not cache.exists()


def test_the_least_recently_used_half_is_removed(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(formatting, "MAX_ENTRIES", 4)
    cache.mkdir(parents=True, mode=0o700)
    os.chmod(cache.parent, 0o700)
    for age in range(6):
        entry = cache / f"entry{age}"
        entry.write_text("x = 1\n")
        os.utime(entry, (1000 - age, 1000 - age))
    formatting.format_module(TEXT)
    left = sorted(p.name for p in cache.iterdir())
    assert left == sorted(["entry0", "entry1", formatting._key(TEXT)])
