"""The C++ kernel cache loads only what this user wrote, and recovers from a broken
entry or prebuilt (Note [Trusting the cache] in runtime_shim/cpp.py).

A planted library adds 100 where the real one adds 1, so a test that loaded it
sees 100 in the result. No test loads a library before it breaks it: the dynamic
loader would hand back the copy it already mapped under that path.
"""

from __future__ import annotations

import ctypes
import os
import stat
from pathlib import Path

import pytest

from runtime_shim import RuntimeShimError, cpp, load_cpp
from tests.helpers import umask

SOURCE = """\
#include <cstdint>
extern "C" void add_one(float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += 1.0f;
}
"""
PLANTED = SOURCE.replace("1.0f", "100.0f")
NOBODY = 65534
as_root = pytest.mark.skipif(os.getuid() != 0, reason="chown needs root")


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A private cache dir and a fresh library memo for every test."""
    monkeypatch.setenv("TRANSPILE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cpp, "_LIBRARIES", {})


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def compiler() -> tuple[str, ...]:
    cxx = cpp.find_compiler()
    assert cxx is not None, "these tests need a C++ compiler"
    return cxx


def write_source(tmp_path: Path, text: str = SOURCE, name: str = "toy") -> Path:
    path = tmp_path / "gen" / f"{name}.cpp"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def entry_for(tmp_path: Path, cpp_path: Path) -> Path:
    """Where the cache keeps the library of `cpp_path` (an attacker can compute it)."""
    name = cpp._entry_name(cpp_path, cpp_path.read_text(), compiler())
    return tmp_path / "cache" / "cpp" / name


def plant(tmp_path: Path, at: Path, file_mode: int = 0o700) -> None:
    """Compile PLANTED into `at` with `file_mode`, as an attacker would."""
    evil = write_source(tmp_path / "evil", PLANTED)
    at.parent.mkdir(parents=True, exist_ok=True)
    cpp.compile_shared(compiler(), evil, at, cpp.CXX_FLAGS, mode=file_mode)


def add_one(cpp_path: Path | str) -> list[float]:
    """Load `cpp_path` through the shim and run its add_one on [0, 1, 2]."""
    x = (ctypes.c_float * 3)(0.0, 1.0, 2.0)
    load_cpp(cpp_path).function("add_one", "pl")(ctypes.addressof(x), 3)
    return list(x)


def test_cache_folders_and_entries_are_private(tmp_path: Path) -> None:
    path = write_source(tmp_path)
    with umask(0o022):
        assert add_one(path) == [1.0, 2.0, 3.0]
    cache = tmp_path / "cache"
    assert (mode(cache), mode(cache / "cpp")) == (0o700, 0o700)
    assert mode(entry_for(tmp_path, path)) == 0o700
    assert [p.name for p in (cache / "cpp").iterdir()] == [
        entry_for(tmp_path, path).name
    ], "no temp file is left behind"


@pytest.mark.parametrize("planted_mode", [0o777, 0o775, 0o702])
def test_entry_writable_by_others_is_rebuilt(tmp_path: Path, planted_mode: int) -> None:
    path = write_source(tmp_path)
    entry = entry_for(tmp_path, path)
    plant(tmp_path, entry, planted_mode)
    with pytest.warns(RuntimeWarning) as caught:
        assert add_one(path) == [1.0, 2.0, 3.0]
    assert [str(w.message) for w in caught] == [
        f"{path}: rebuilding its C++ cache entry: {entry} is writable by group or "
        f"others (mode {planted_mode:04o})"
    ]
    assert mode(entry) == 0o700


@as_root
def test_entry_owned_by_another_user_is_rebuilt(tmp_path: Path) -> None:
    path = write_source(tmp_path)
    entry = entry_for(tmp_path, path)
    plant(tmp_path, entry, 0o755)
    os.chown(entry, NOBODY, NOBODY)
    with pytest.warns(RuntimeWarning, match=r"is owned by uid 65534, not by you"):
        assert add_one(path) == [1.0, 2.0, 3.0]
    assert entry.stat().st_uid == os.getuid()


def test_symlinked_entry_is_rebuilt(tmp_path: Path) -> None:
    path = write_source(tmp_path)
    entry = entry_for(tmp_path, path)
    elsewhere = tmp_path / "elsewhere" / "lib.so"
    plant(tmp_path, elsewhere, 0o700)
    entry.parent.mkdir(parents=True)
    entry.symlink_to(elsewhere)
    with pytest.warns(RuntimeWarning, match=r"is not a regular file"):
        assert add_one(path) == [1.0, 2.0, 3.0]
    assert not entry.is_symlink() and elsewhere.is_file()


@pytest.mark.parametrize("folder", ["cache", "cache/cpp"])
def test_cache_folder_writable_by_others_is_not_used(
    tmp_path: Path, folder: str
) -> None:
    path = write_source(tmp_path)
    entry = entry_for(tmp_path, path)
    plant(tmp_path, entry, 0o700)  # a well-formed entry, in a folder others can write
    os.chmod(tmp_path / folder, 0o777)
    planted = entry.read_bytes()
    with pytest.warns(RuntimeWarning) as caught:
        assert add_one(path) == [1.0, 2.0, 3.0]
    [message] = [str(w.message) for w in caught]
    assert message.startswith(
        f"not using the C++ kernel cache {tmp_path / 'cache'}: {tmp_path / folder} "
        "is writable by group or others (mode 0777); compiling into "
    )
    assert message.endswith(
        " for this process only (make the cache a folder of your own with mode "
        "700, or set TRANSPILE_CACHE_DIR to one)"
    )
    assert entry.read_bytes() == planted, "nothing is written into a suspect folder"
    assert os.listdir(entry.parent) == [entry.name]
    assert mode(tmp_path / folder) == 0o777, "the user's folder is left as it is"


@as_root
def test_cache_folder_owned_by_another_user_is_not_used(tmp_path: Path) -> None:
    path = write_source(tmp_path)
    plant(tmp_path, entry_for(tmp_path, path), 0o700)
    os.chown(tmp_path / "cache", NOBODY, NOBODY)
    with pytest.warns(RuntimeWarning, match=r"cache is owned by uid 65534, not by"):
        assert add_one(path) == [1.0, 2.0, 3.0]


def test_cache_that_cannot_be_created_falls_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "file").write_text("")
    monkeypatch.setenv("TRANSPILE_CACHE_DIR", str(tmp_path / "file" / "cache"))
    path = write_source(tmp_path)
    with pytest.warns(
        RuntimeWarning, match=r"file is not a directory; compiling into "
    ):
        assert add_one(path) == [1.0, 2.0, 3.0]


@pytest.mark.parametrize("keep", [0, 100, 2000])
def test_truncated_entry_is_rebuilt(tmp_path: Path, keep: int) -> None:
    path = write_source(tmp_path)
    entry = entry_for(tmp_path, path)
    cpp._private_folder(tmp_path / "cache")
    cpp._private_folder(entry.parent)
    cpp.compile_shared(compiler(), path, entry, cpp.CXX_FLAGS, mode=0o700)
    size = entry.stat().st_size
    with open(entry, "r+b") as f:
        f.truncate(keep)  # a crash or full disk mid-copy, say
    with pytest.warns(RuntimeWarning) as caught:
        assert add_one(path) == [1.0, 2.0, 3.0]
    [message] = [str(w.message) for w in caught]
    assert message.startswith(f"{path}: rebuilding its C++ cache entry: it fails ")
    assert entry.stat().st_size == size


def test_rebuilt_entry_that_fails_to_load_raises(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def broken_compiler(cxx, cpp_path, out_path, flags, *, mode):  # type: ignore[no-untyped-def]
        out_path.write_bytes(b"\x7fELF not really")
        os.chmod(out_path, mode)

    monkeypatch.setattr(cpp, "compile_shared", broken_compiler)
    lib = load_cpp(write_source(tmp_path))
    with pytest.raises(RuntimeShimError) as info:
        lib.function("add_one", "pl")
    assert str(info.value).startswith(
        f"cannot load {tmp_path / 'gen' / 'toy.cpp'}: the library just built fails "
        "to load ("
    )


def test_broken_prebuilt_falls_back_to_the_cache(tmp_path: Path) -> None:
    path = write_source(tmp_path)
    prebuilt = cpp.build_prebuilt(path)
    prebuilt.write_bytes(prebuilt.read_bytes()[:100])
    with pytest.warns(RuntimeWarning) as caught:
        assert add_one(path) == [1.0, 2.0, 3.0]
    [message] = [str(w.message) for w in caught]
    assert message.startswith(f"{path}: prebuilt {prebuilt} fails to load (")
    assert message.endswith("); skipping it")
    assert entry_for(tmp_path, path).is_file()


def test_broken_prebuilt_without_compiler_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_source(tmp_path)
    cpp.build_prebuilt(path, portable=True).write_bytes(b"")
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(cpp, "find_compiler", lambda: None)
    with pytest.warns(RuntimeWarning, match="fails to load"):
        with pytest.raises(RuntimeShimError) as info:
            add_one("gen/toy.cpp")
    message = str(info.value)
    assert message.startswith("cannot load gen/toy.cpp: prebuilt ")
    assert message.endswith(
        ") and no C++ compiler found (set CXX or install g++); prebuild with: "
        "python -m runtime_shim build gen/"
    )
    assert "fails to load (" in message


@pytest.mark.parametrize(("mask", "expected"), [(0o022, 0o755), (0o027, 0o750)])
def test_prebuilt_libraries_follow_the_umask(
    tmp_path: Path, mask: int, expected: int
) -> None:
    path = write_source(tmp_path)
    with umask(mask):
        prebuilt = cpp.build_prebuilt(path)
    assert mode(prebuilt) == expected
    assert add_one(path) == [1.0, 2.0, 3.0]
    assert not (tmp_path / "cache").exists()
