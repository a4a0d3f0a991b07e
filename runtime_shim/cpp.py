"""Compile, cache and load the C++ kernels of a generated module.

Note [Where a library comes from]
---------------------------------
`load_cpp(path)` is lazy: the first `function()` call loads the library, trying
in order:

1. a prebuilt `<dir>/__prebuilt__/<stem>-<key>.so`, keyed by the source text and
   the platform only, so it needs no compiler (`python -m runtime_shim build`);
2. the per-user cache, keyed by source text, compiler identity and flags;
3. a fresh compile into that cache (temp file, then `os.replace`).
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import os
import platform
import shlex
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

__all__ = [
    "CXX_FLAGS",
    "PORTABLE_CXX_FLAGS",
    "CppLibrary",
    "RuntimeShimError",
    "build_prebuilt",
    "cache_dir",
    "find_compiler",
    "load_cpp",
    "prebuilt_path",
]

CXX_FLAGS = (
    "-O3",
    "-shared",
    "-fPIC",
    "-std=c++17",
    "-fopenmp",
    "-fno-math-errno",
    "-fno-trapping-math",
    "-march=native",
    "-mprefer-vector-width=512",  # where AVX-512 exists, use all of it
)
PORTABLE_CXX_FLAGS = CXX_FLAGS[: CXX_FLAGS.index("-march=native")]
COMPILERS = ("g++", "c++", "clang++")
PREBUILT_DIR = "__prebuilt__"
_ERROR_LINES = 40

CFunction = Callable[..., None]

# One char of a signature -> the ctypes type of that argument.
_ARG_TYPES = {"p": ctypes.c_void_p, "l": ctypes.c_int64, "d": ctypes.c_double}


class RuntimeShimError(RuntimeError):
    """A generated C++ library cannot be built or loaded."""


def _sha256(*parts: str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def prebuilt_path(cpp_path: Path, source: str, portable: bool = False) -> Path:
    """Where the prebuilt library for `source` lives; the key needs no compiler."""
    parts = [source, platform.machine(), sys.platform]
    if portable:
        parts.append("portable")
    key = _sha256(*parts)
    return cpp_path.parent / PREBUILT_DIR / f"{cpp_path.stem}-{key}.so"


def cache_dir() -> Path:
    """The per-user cache: $TRANSPILE_CACHE_DIR, else $XDG_CACHE_HOME/transpile."""
    explicit = os.environ.get("TRANSPILE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(xdg) / "transpile"


def find_compiler() -> tuple[str, ...] | None:
    """$CXX (may carry arguments) if set, else the first of g++, c++, clang++."""
    cxx = shlex.split(os.environ.get("CXX", ""))
    if cxx:
        found = shutil.which(cxx[0])
        return (found, *cxx[1:]) if found else None
    for name in COMPILERS:
        found = shutil.which(name)
        if found:
            return (found,)
    return None


@functools.cache
def _compiler_identity(cxx: tuple[str, ...]) -> str:
    try:
        done = subprocess.run(
            [*cxx, "--version"],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
        version = done.stdout
    except (OSError, subprocess.SubprocessError):
        version = ""
    return " ".join(cxx) + "\n" + version


def compile_shared(
    cxx: Sequence[str], cpp_path: Path, out_path: Path, flags: Sequence[str]
) -> None:
    """Compile `cpp_path` into `out_path` atomically (temp file, then replace)."""
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(
        prefix=f".{out_path.stem}-", suffix=".so", dir=out_path.parent
    )
    os.close(fd)
    command = [*cxx, *flags, str(cpp_path), "-o", tmp]
    try:
        done = subprocess.run(command, check=False, capture_output=True, text=True)
        if done.returncode != 0:
            stderr = "\n".join(done.stderr.splitlines()[-_ERROR_LINES:])
            raise RuntimeShimError(
                f"C++ compile of {cpp_path} failed (exit {done.returncode})\n"
                f"command: {shlex.join(command)}\n{stderr}"
            )
        os.replace(tmp, out_path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def build_prebuilt(cpp_path: Path, portable: bool = False) -> Path:
    """Compile `cpp_path` into its `__prebuilt__` folder; return the library path."""
    cxx = find_compiler()
    if cxx is None:
        raise RuntimeShimError("no C++ compiler found (set CXX or install g++)")
    out = prebuilt_path(cpp_path, cpp_path.read_text(), portable)
    flags = PORTABLE_CXX_FLAGS if portable else CXX_FLAGS
    compile_shared(cxx, cpp_path, out, flags)
    return out


class CppLibrary:
    """The `extern "C"` functions of one generated `.cpp`, loaded on first use."""

    def __init__(self, cpp_path: str | os.PathLike[str]) -> None:
        self.display_path = os.fspath(cpp_path)
        self.path = Path(cpp_path).resolve()
        self._lock = threading.Lock()
        self._dll: ctypes.CDLL | None = None
        self._functions: dict[str, tuple[str, CFunction]] = {}

    def __repr__(self) -> str:
        state = "loaded" if self._dll is not None else "not loaded"
        return f"<CppLibrary {self.display_path} ({state})>"

    def function(self, name: str, signature: str) -> CFunction:
        """The ctypes function `name`; `signature` has one of p/l/d per argument."""
        cached = self._functions.get(name)
        if cached is not None and cached[0] == signature:
            return cached[1]
        with self._lock:
            return self._bind(name, signature)

    def _bind(self, name: str, signature: str) -> CFunction:
        cached = self._functions.get(name)
        if cached is not None:
            if cached[0] != signature:
                raise RuntimeShimError(
                    f"{self.display_path}: {name} was bound with signature "
                    f"{cached[0]!r}, now asked for {signature!r}"
                )
            return cached[1]
        bad = sorted(set(signature) - set(_ARG_TYPES))
        if bad:
            raise RuntimeShimError(
                f"{self.display_path}: bad signature {signature!r} for {name} "
                f"(use p=pointer, l=int64, d=double)"
            )
        dll = self._load()
        try:
            fn = dll[name]
        except AttributeError:
            raise RuntimeShimError(
                f'{self.display_path}: no extern "C" function {name!r}'
            ) from None
        fn.argtypes = [_ARG_TYPES[c] for c in signature]
        fn.restype = None
        self._functions[name] = (signature, fn)
        return fn

    def _load(self) -> ctypes.CDLL:
        if self._dll is None:
            self._dll = ctypes.CDLL(str(self._locate()))
        return self._dll

    def _locate(self) -> Path:
        """See Note [Where a library comes from]."""
        try:
            source = self.path.read_text()
        except OSError as e:
            raise RuntimeShimError(f"cannot load {self.display_path}: {e}") from None
        for portable in (False, True):
            prebuilt = prebuilt_path(self.path, source, portable)
            if prebuilt.is_file():
                return prebuilt
        cxx = find_compiler()
        if cxx is None:
            folder = os.path.join(os.path.dirname(self.display_path) or ".", "")
            raise RuntimeShimError(
                f"cannot load {self.display_path}: no prebuilt library and no C++ "
                "compiler found (set CXX or install g++); prebuild with: "
                f"python -m runtime_shim build {folder}"
            )
        key = _sha256(source, _compiler_identity(cxx), *CXX_FLAGS)
        cached = cache_dir() / "cpp" / f"{self.path.stem}-{key}.so"
        if not cached.is_file():
            try:
                compile_shared(cxx, self.path, cached, CXX_FLAGS)
            except OSError as e:
                raise RuntimeShimError(
                    f"cannot build {self.display_path} into {cached.parent}: {e} "
                    "(set TRANSPILE_CACHE_DIR to a writable folder)"
                ) from None
        return cached


_LIBRARIES: dict[Path, CppLibrary] = {}
_LIBRARIES_LOCK = threading.Lock()


def load_cpp(cpp_path: str | os.PathLike[str]) -> CppLibrary:
    """The library for a generated `.cpp`, one per resolved path; compiles lazily."""
    resolved = Path(cpp_path).resolve()
    with _LIBRARIES_LOCK:
        library = _LIBRARIES.get(resolved)
        if library is None:
            library = _LIBRARIES[resolved] = CppLibrary(cpp_path)
        return library
