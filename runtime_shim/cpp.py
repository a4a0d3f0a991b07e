"""Compile, cache and load the C++ kernels of a generated module.

Note [Where a library comes from]
---------------------------------
`load_cpp(path)` is lazy: the first `function()` call loads the library, trying
in order:

1. a prebuilt `<dir>/__prebuilt__/<stem>-<key>.so`, keyed by the source text (with
   that of runtime_shim/kernels.h, which every generated file includes) and the
   platform only, so it needs no compiler (`python -m runtime_shim build`); one
   that fails to load is skipped with a warning;
2. the per-user cache, keyed by the source text, kernels.h, compiler identity and
   flags, as far as it can be trusted (Note [Trusting the cache]);
3. a fresh compile into that cache (temp file, then `os.replace`).

Note [Trusting the cache]
-------------------------
Loading a library runs its code, and a cache entry's name is computed from public
inputs, so nothing is loaded from a file someone else could have written:

- The cache folder (`cache_dir()`) and its `cpp/` are created 0700. Before anything
  is loaded from them, each must be a directory owned by this user and not writable
  by group or others. If one is not (or cannot be created), the cache is not used at
  all, neither read nor written: a warning names the folder and the problem, and
  this process compiles into a fresh private folder (`tempfile.mkdtemp`, removed at
  exit). Like pip, which disables a cache it does not own, a suspect folder costs a
  compile, never a load and never a crash; existing folders are not chmod-ed.
- An entry is loaded only if it is a regular file owned by this user and not
  writable by group or others; otherwise it is removed and rebuilt, with a warning.
- Entries are written mode 0700, to a temp file in the same folder, fsync-ed, that
  `os.replace` then renames, so no one ever loads a half-written entry.
- An entry that fails to load (corrupt: ctypes raises OSError; truncated: checked
  against its ELF header first, since the loader would die of SIGBUS on pages past
  the end of the file) is removed and rebuilt once, with a warning; if the rebuilt
  one fails too, one RuntimeShimError says so.

Prebuilt libraries are shipped next to the generated `.py` and trusted like it: no
owner check (an image built by root runs as another user). They are written with
the user's umask (0755 under umask 022) so that other users can load them. One that
fails to load (same checks) is skipped with a warning, for the next prebuilt, the
cache or the compiler; with no compiler, the RuntimeShimError names it too.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import hashlib
import os
import platform
import shlex
import shutil
import stat
import struct
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Sequence
from pathlib import Path

from runtime_shim.warn import warn_once

__all__ = [
    "CXX_FLAGS",
    "INCLUDE_FLAGS",
    "PORTABLE_CXX_FLAGS",
    "CppLibrary",
    "RuntimeShimError",
    "build_prebuilt",
    "cache_dir",
    "current_umask",
    "find_compiler",
    "load_cpp",
    "prebuilt_keys",
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
    # GCC's partial redundancy elimination splits a loop's paths where a select
    # makes a value constant on one (`x < t ? -inf : x` before an exp), and a loop
    # with paths is not vectorized: the last pass of a top-k filtered softmax
    # over 32000 logits ran scalar, 3.6 ms against 2.3. Our kernels' values are
    # computed once each already.
    "-fno-tree-pre",
    "-march=native",
    "-mprefer-vector-width=512",  # where AVX-512 exists, use all of it
)
PORTABLE_CXX_FLAGS = CXX_FLAGS[: CXX_FLAGS.index("-march=native")]
# `#include "runtime_shim/kernels.h"` finds this package's header: the folder that
# holds the package is searched for quoted includes only, never for <cmath>
INCLUDE_FLAGS = ("-iquote", str(Path(__file__).resolve().parent.parent))
KERNELS_H = Path(__file__).resolve().parent / "kernels.h"
COMPILERS = ("g++", "c++", "clang++")
PREBUILT_DIR = "__prebuilt__"
_ERROR_LINES = 40
PRIVATE_MODE = 0o700  # cache folders and entries: Note [Trusting the cache]
_OTHERS_WRITE = stat.S_IWGRP | stat.S_IWOTH

CFunction = Callable[..., None]

# One char of a signature -> the ctypes type of that argument.
_ARG_TYPES = {"p": ctypes.c_void_p, "l": ctypes.c_int64, "d": ctypes.c_double}


class RuntimeShimError(RuntimeError):
    """A generated C++ library cannot be built or loaded."""


@functools.cache
def kernels_h() -> str:
    """The text of the header every generated C++ file includes."""
    return KERNELS_H.read_text()


def _sha256(*parts: str) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part.encode())
        digest.update(b"\0")
    return digest.hexdigest()[:16]


def prebuilt_path(cpp_path: Path, source: str, portable: bool = False) -> Path:
    """Where the prebuilt library for `source` lives; the key needs no compiler."""
    key = _prebuilt_key(source, platform.machine(), sys.platform, portable)
    return cpp_path.parent / PREBUILT_DIR / f"{cpp_path.stem}-{key}.so"


def _prebuilt_key(source: str, machine: str, system: str, portable: bool) -> str:
    portable_key = ["portable"] if portable else []
    return _sha256(source, kernels_h(), machine, system, *portable_key)


# Platforms whose prebuilt libraries of a current source count as current: one tree
# may hold the libraries of several (an image built per CPU architecture).
_PLATFORMS = {
    (machine, system)
    for machine in ("x86_64", "aarch64", "arm64", "ppc64le", "s390x")
    for system in ("linux", "darwin")
}


def prebuilt_keys(source: str) -> set[str]:
    """The keys of every prebuilt library of `source`: native or portable, for this
    platform or another common one."""
    platforms = _PLATFORMS | {(platform.machine(), sys.platform)}
    return {
        _prebuilt_key(source, machine, system, portable)
        for machine, system in platforms
        for portable in (False, True)
    }


def cache_dir() -> Path:
    """The per-user cache: $TRANSPILE_CACHE_DIR, else $XDG_CACHE_HOME/transpile."""
    explicit = os.environ.get("TRANSPILE_CACHE_DIR")
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache")
    return Path(xdg) / "transpile"


def _not_private(path: Path, st: os.stat_result) -> str | None:
    """Why `path` (whose stat is `st`) may hold others' writing, or None."""
    uid = os.getuid()
    if st.st_uid != uid:
        return f"{path} is owned by uid {st.st_uid}, not by you (uid {uid})"
    if st.st_mode & _OTHERS_WRITE:
        mode = stat.S_IMODE(st.st_mode)
        return f"{path} is writable by group or others (mode {mode:04o})"
    return None


def _private_folder(path: Path) -> str | None:
    """Create `path` mode 0700 if missing; why it cannot be trusted, or None."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            path.mkdir(mode=PRIVATE_MODE)
            os.chmod(path, PRIVATE_MODE)  # mkdir's mode went through the umask
        except FileExistsError:
            pass
        st = path.stat()
    except FileExistsError as e:
        return f"{e.filename} is not a directory"
    except OSError as e:
        return f"cannot create {e.filename or path}: {e.strerror}"
    if not stat.S_ISDIR(st.st_mode):
        return f"{path} is not a directory"
    return _not_private(path, st)


@functools.cache
def _scratch_folder() -> Path:
    """A fresh private folder for this process only, removed at exit."""
    try:
        path = Path(tempfile.mkdtemp(prefix="transpile-cpp-"))
    except OSError as e:
        raise RuntimeShimError(
            f"cannot create a private temporary folder for C++ kernels: {e}"
        ) from None
    atexit.register(shutil.rmtree, path, ignore_errors=True)
    return path


def _cache_folder() -> Path:
    """Where cache entries live; see Note [Trusting the cache]."""
    root = cache_dir()
    problem = _private_folder(root) or _private_folder(root / "cpp")
    if problem is None:
        return root / "cpp"
    scratch = _scratch_folder()
    warn_once(
        f"runtime_shim.cpp:cache:{root}",
        f"not using the C++ kernel cache {root}: {problem}; compiling into "
        f"{scratch} for this process only (make the cache a folder of your own "
        "with mode 700, or set TRANSPILE_CACHE_DIR to one)",
    )
    return scratch


def _entry_problem(entry: Path) -> str | None:
    """Why the existing cache entry `entry` must not be loaded, or None."""
    try:
        st = entry.lstat()
    except OSError as e:
        return f"cannot stat {entry}: {e.strerror}"
    if not stat.S_ISREG(st.st_mode):
        return f"{entry} is not a regular file"
    return _not_private(entry, st)


# ELF class (32/64-bit) -> (e_shoff's struct code, its offset, e_shentsize's offset)
_ELF_SECTION_TABLE = {1: ("I", 0x20, 0x2E), 2: ("Q", 0x28, 0x3A)}
_ELF_BYTE_ORDER = {1: "<", 2: ">"}


def _cut_short(path: Path) -> str | None:
    """Why the ELF library at `path` is incomplete, or None (also for non-ELF).

    The linker writes the section header table last, so a file cut short ends
    before that table does."""
    with open(path, "rb") as f:
        head = f.read(64)
        size = os.fstat(f.fileno()).st_size
    if head[:4] != b"\x7fELF" or len(head) < 16:
        return None  # the loader rejects it with an OSError of its own
    layout = _ELF_SECTION_TABLE.get(head[4])
    order = _ELF_BYTE_ORDER.get(head[5])
    if layout is None or order is None or len(head) < layout[2] + 4:
        return None
    code, at, sizes_at = layout
    (offset,) = struct.unpack_from(order + code, head, at)
    entry_size, count = struct.unpack_from(order + "HH", head, sizes_at)
    end = offset + entry_size * count
    return f"file cut short ({size} of {end} bytes)" if size < end else None


def _dlopen(path: Path) -> ctypes.CDLL:
    """`ctypes.CDLL(path)`, raising OSError for a library cut short too: its headers
    may survive, and the loader touching pages past the end of the file would kill
    the process (SIGBUS) instead of raising."""
    short = _cut_short(path)
    if short is not None:
        raise OSError(f"{path}: {short}")
    return ctypes.CDLL(str(path))


def current_umask() -> int:
    """This process's umask, read by setting it; for that instant it errs private."""
    mask = os.umask(0o077)
    os.umask(mask)
    return mask


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
    cxx: Sequence[str],
    cpp_path: Path,
    out_path: Path,
    flags: Sequence[str],
    *,
    mode: int,
) -> None:
    """Compile `cpp_path` into `out_path` with `mode`, atomically (temp file in the
    same folder, chmod, then replace)."""
    out_path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(
        prefix=f".{out_path.stem}-", suffix=".so", dir=out_path.parent
    )
    os.close(fd)
    command = [*cxx, *flags, *INCLUDE_FLAGS, str(cpp_path), "-o", tmp]
    try:
        done = subprocess.run(command, check=False, capture_output=True, text=True)
        if done.returncode != 0:
            stderr = "\n".join(done.stderr.splitlines()[-_ERROR_LINES:])
            raise RuntimeShimError(
                f"C++ compile of {cpp_path} failed (exit {done.returncode})\n"
                f"command: {shlex.join(command)}\n{stderr}"
            )
        os.chmod(tmp, mode)  # the linker kept mkstemp's 0600 (and added x: 0711)
        _fsync(tmp)  # so a crash cannot leave the new name on an empty file
        os.replace(tmp, out_path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def build_prebuilt(cpp_path: Path, portable: bool = False) -> Path:
    """Compile `cpp_path` into its `__prebuilt__` folder; return the library path.

    The library gets the user's umask (0755 under 022): it ships with the generated
    module and is loaded by whoever runs it."""
    cxx = find_compiler()
    if cxx is None:
        raise RuntimeShimError("no C++ compiler found (set CXX or install g++)")
    out = prebuilt_path(cpp_path, cpp_path.read_text(), portable)
    flags = PORTABLE_CXX_FLAGS if portable else CXX_FLAGS
    compile_shared(cxx, cpp_path, out, flags, mode=0o777 & ~current_umask())
    return out


def _entry_name(cpp_path: Path, source: str, cxx: tuple[str, ...]) -> str:
    """The cache entry's file name: keyed by source, compiler identity and flags."""
    key = _sha256(source, kernels_h(), _compiler_identity(cxx), *CXX_FLAGS)
    return f"{cpp_path.stem}-{key}.so"


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
            self._dll = self._open()
        return self._dll

    def _open(self) -> ctypes.CDLL:
        """See Note [Where a library comes from]."""
        try:
            source = self.path.read_text()
        except OSError as e:
            raise RuntimeShimError(f"cannot load {self.display_path}: {e}") from None
        broken = []
        for portable in (False, True):
            prebuilt = prebuilt_path(self.path, source, portable)
            if prebuilt.is_file():
                try:
                    return _dlopen(prebuilt)
                except OSError as e:
                    broken.append(f"prebuilt {prebuilt} fails to load ({e})")
                    warn_once(
                        f"runtime_shim.cpp:prebuilt:{prebuilt}",
                        f"{self.display_path}: {broken[-1]}; skipping it",
                    )
        cxx = find_compiler()
        if cxx is None:
            raise RuntimeShimError(self._no_compiler(broken))
        return self._open_cached(cxx, source)

    def _no_compiler(self, broken: list[str]) -> str:
        """The error for a library that no prebuilt or compiler can provide."""
        folder = os.path.join(os.path.dirname(self.display_path) or ".", "")
        found = "; ".join(broken) + " and" if broken else "no prebuilt library and"
        return (
            f"cannot load {self.display_path}: {found} no C++ compiler found "
            "(set CXX or install g++); prebuild with: "
            f"python -m runtime_shim build {folder}"
        )

    def _open_cached(self, cxx: tuple[str, ...], source: str) -> ctypes.CDLL:
        """Load from the cache, building the entry if it is missing, untrusted or
        broken; see Note [Trusting the cache]."""
        entry = _cache_folder() / _entry_name(self.path, source, cxx)
        if os.path.lexists(entry):
            problem = _entry_problem(entry)
            if problem is None:
                try:
                    return _dlopen(entry)
                except OSError as e:
                    problem = f"it fails to load ({e})"
            warn_once(
                f"runtime_shim.cpp:entry:{entry}",
                f"{self.display_path}: rebuilding its C++ cache entry: {problem}",
            )
        self._build(cxx, entry)
        try:
            return _dlopen(entry)
        except OSError as e:
            raise RuntimeShimError(
                f"cannot load {self.display_path}: the library just built "
                f"fails to load ({e})"
            ) from None

    def _build(self, cxx: tuple[str, ...], entry: Path) -> None:
        """Compile into the cache `entry`, replacing whatever is there."""
        try:
            if os.path.lexists(entry):
                entry.unlink()
            compile_shared(cxx, self.path, entry, CXX_FLAGS, mode=PRIVATE_MODE)
        except OSError as e:
            raise RuntimeShimError(
                f"cannot build {self.display_path} into {entry.parent}: {e} "
                "(set TRANSPILE_CACHE_DIR to a writable folder)"
            ) from None


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
