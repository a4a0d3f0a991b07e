"""Compile, cache and call generated C++ through runtime_shim, in process."""

from __future__ import annotations

import threading
import warnings
from pathlib import Path

import pytest
import torch

from runtime_shim import RuntimeShimError, cpp, load_cpp, warn_once

SOURCE = """\
#include <cstdint>
extern "C" void add_one(float* x, int64_t n) {
  #pragma omp parallel for
  for (int64_t i = 0; i < n; ++i) x[i] += 1.0f;
}
extern "C" void axpy(float* y, const float* x, double a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += static_cast<float>(a) * x[i];
}
"""


@pytest.fixture(autouse=True)
def isolated(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A private cache dir and a fresh library memo for every test."""
    monkeypatch.setenv("TRANSPILE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(cpp, "_LIBRARIES", {})


def write_source(tmp_path: Path, text: str = SOURCE) -> Path:
    path = tmp_path / "gen" / "toy.cpp"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def count_compiles(monkeypatch: pytest.MonkeyPatch) -> list[Path]:
    calls: list[Path] = []
    real = cpp.compile_shared

    def counting(cxx, cpp_path, out_path, flags, **kw):  # type: ignore[no-untyped-def]
        calls.append(out_path)
        real(cxx, cpp_path, out_path, flags, **kw)

    monkeypatch.setattr(cpp, "compile_shared", counting)
    return calls


def test_add_one_matches_eager(tmp_path: Path) -> None:
    lib = load_cpp(write_source(tmp_path))
    x = torch.randn(1000)
    expected = x + 1
    lib.function("add_one", "pl")(x.data_ptr(), x.numel())
    torch.testing.assert_close(x, expected)


def test_pointer_double_and_int_arguments(tmp_path: Path) -> None:
    axpy = load_cpp(write_source(tmp_path)).function("axpy", "ppdl")
    x, y = torch.randn(37), torch.randn(37)
    expected = y + 0.5 * x
    axpy(y.data_ptr(), x.data_ptr(), 0.5, y.numel())
    torch.testing.assert_close(y, expected)


def test_load_is_lazy_and_memoized(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = count_compiles(monkeypatch)
    path = write_source(tmp_path)
    lib = load_cpp(path)
    assert calls == []
    assert load_cpp(str(path)) is lib
    add_one = lib.function("add_one", "pl")
    assert lib.function("add_one", "pl") is add_one
    assert len(calls) == 1


def test_second_load_uses_cache(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = count_compiles(monkeypatch)
    path = write_source(tmp_path)
    load_cpp(path).function("add_one", "pl")
    monkeypatch.setattr(cpp, "_LIBRARIES", {})  # as if in a new process
    x = torch.zeros(4)
    load_cpp(path).function("add_one", "pl")(x.data_ptr(), 4)
    assert len(calls) == 1
    assert x.tolist() == [1.0] * 4
    assert len(list((tmp_path / "cache").rglob("*.so"))) == 1


def test_changed_source_recompiles(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = count_compiles(monkeypatch)
    path = write_source(tmp_path)
    load_cpp(path).function("add_one", "pl")
    monkeypatch.setattr(cpp, "_LIBRARIES", {})
    write_source(tmp_path, SOURCE.replace("1.0f", "2.0f"))
    x = torch.zeros(3)
    load_cpp(path).function("add_one", "pl")(x.data_ptr(), 3)
    assert len(calls) == 2
    assert x.tolist() == [2.0] * 3


def test_threads_compile_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = count_compiles(monkeypatch)
    lib = load_cpp(write_source(tmp_path))
    found = []
    threads = [
        threading.Thread(target=lambda: found.append(lib.function("add_one", "pl")))
        for _ in range(8)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1
    assert len(found) == 8 and all(f is found[0] for f in found)


def test_compile_error_shows_stderr_and_command(tmp_path: Path) -> None:
    lib = load_cpp(write_source(tmp_path, 'extern "C" void f() { oops; }\n'))
    with pytest.raises(RuntimeShimError) as info:
        lib.function("f", "")
    message = str(info.value)
    assert "oops" in message
    assert "command: " in message and "-fopenmp" in message


def test_missing_function_and_bad_signature(tmp_path: Path) -> None:
    lib = load_cpp(write_source(tmp_path))
    with pytest.raises(RuntimeShimError, match="no extern \"C\" function 'nope'"):
        lib.function("nope", "")
    with pytest.raises(RuntimeShimError, match="bad signature 'px'"):
        lib.function("add_one", "px")
    lib.function("add_one", "pl")
    with pytest.raises(RuntimeShimError, match="was bound with signature 'pl'"):
        lib.function("add_one", "pd")


def test_missing_source(tmp_path: Path) -> None:
    lib = load_cpp(tmp_path / "absent.cpp")
    with pytest.raises(RuntimeShimError, match=r"cannot load .*absent\.cpp"):
        lib.function("f", "")


def test_no_compiler_and_no_prebuilt_message(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write_source(tmp_path)
    monkeypatch.chdir(tmp_path)
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    monkeypatch.delenv("CXX", raising=False)
    lib = load_cpp("gen/toy.cpp")
    with pytest.raises(RuntimeShimError) as info:
        lib.function("add_one", "pl")
    assert str(info.value) == (
        "cannot load gen/toy.cpp: no prebuilt library and no C++ compiler found "
        "(set CXX or install g++); prebuild with: "
        "python -m runtime_shim build gen/"
    )


def test_cxx_env_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CXX", "g++ -DUNUSED=1")
    cxx = cpp.find_compiler()
    assert cxx is not None and cxx[0].endswith("g++") and cxx[1:] == ("-DUNUSED=1",)
    monkeypatch.setenv("CXX", "no-such-compiler-xyz")
    assert cpp.find_compiler() is None


def test_warn_once() -> None:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            warn_once("test_warn_once:key", "fell back to eager")
        warn_once("test_warn_once:other", "other", UserWarning)
    assert [(str(w.message), w.category) for w in caught] == [
        ("fell back to eager", RuntimeWarning),
        ("other", UserWarning),
    ]
