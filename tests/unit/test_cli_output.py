"""What `transpile` tells a person: --version, --help, the lines printed as targets
are built, where the config is found, and the files a one-off target may not touch.

Every assertion compares whole lines. Targets compile for real, in this process, from
small projects under `tmp_path`; the clock is replaced so times print the same."""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
import types
import uuid
from pathlib import Path

import pytest

import transpiler
from transpiler import pipeline
from transpiler.cli import main
from transpiler.options import tomllib

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def half_second_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each build takes 0.5 s, so the times printed are the same on every run."""
    clock = itertools.count(0, 0.5)
    monkeypatch.setattr(
        pipeline, "time", types.SimpleNamespace(perf_counter=clock.__next__)
    )


def module(root: Path, source: str) -> str:
    """A module of `source` in `root`, with a name of its own; its name."""
    stem = f"m_{uuid.uuid4().hex[:8]}"
    (root / f"{stem}.py").write_text(source, encoding="utf-8")
    return stem


def transpile(
    capsys: pytest.CaptureFixture[str], *argv: str, root: Path | None = None
) -> tuple[int, list[str], list[str]]:
    """Run the command (in `root`, as if it were the current directory); its exit
    code, stdout and stderr lines."""
    where = [] if root is None else ["--root", str(root)]
    code = main([*argv, *where])
    out, err = capsys.readouterr()
    return code, out.splitlines(), err.splitlines()


def snapshot(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and "__pycache__" not in p.parts
    }


DOUBLE = "def f(x):\n    return x * 2 + 1\n"
BREAK = "def f(x):\n    y = x * 2\n    print(y)\n    return y + 1\n"
NOTHING = 'def f(x):\n    print("hi")\n    return x\n'


# --------------------------------------------------------------------------------------
# --version and --help


def test_version_is_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    version = pyproject["project"]["version"]
    assert transpiler.__version__ == version
    assert transpile(capsys, "--version") == (0, [f"transpile {version}"], [])


def test_help_ends_with_exit_codes_and_the_readme(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, err = transpile(capsys, "--help")
    assert (code, err) == (0, [])
    assert out[-8:] == [
        "",
        "exit codes:",
        "  0  success",
        "  1  --check found stale files",
        "  2  a user error (bad input, a failed build); nothing was written",
        "",
        "Configuration: every key of [tool.transpile] in pyproject.toml, its type, its",
        'default and an example are in "Configuration reference" in README.md.',
    ]
    for flag in ("--version", "--force", "-q, --quiet", "-v, --verbose"):
        assert any(line.lstrip().startswith(flag) for line in out), flag


# --------------------------------------------------------------------------------------
# Lines printed as targets are built


def test_one_line_per_target_then_what_was_written(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stem = module(project, DOUBLE)
    argv = (f"{stem}.py::f", "--example", "x=f32[2,4]", "--device", "cpu")
    line = f"{stem}.py::f -> generated/{stem}.py: 1 variant, 1 kernel (0.5 s)"
    assert transpile(capsys, *argv, root=project) == (0, [], [line, "wrote 3 files"])
    files = snapshot(project / "generated")
    assert sorted(files) == ["__init__.py", f"{stem}.cpp", f"{stem}.py"]
    again = transpile(capsys, *argv, root=project)
    assert again == (0, [], [line, "3 files unchanged"])
    assert transpile(capsys, *argv, "--check", root=project) == (
        0,
        [],
        [line, "up to date (3 files)"],
    )
    assert snapshot(project / "generated") == files


def test_quiet_and_verbose(project: Path, capsys: pytest.CaptureFixture[str]) -> None:
    stem = module(project, BREAK)
    argv = (f"{stem}.py::f", "--example", "x=f32[2,4]")
    assert transpile(capsys, *argv, "-v", root=project) == (
        0,
        [],
        [
            f"{stem}.py::f -> generated/{stem}.py: 2 variants, 2 kernels, "
            "1 graph break (0.5 s)",
            "  variant cpu_0 (cpu: x=f32[2,4]): 1 kernel, 0 extern calls, "
            "1 graph break",
            "  variant cuda_0 (cuda: x=f32[2,4]): 1 kernel, 0 extern calls, "
            "1 graph break",
            "wrote 4 files",
        ],
    )
    assert transpile(capsys, *argv, "-q", root=project) == (0, [], [])
    assert transpile(capsys, *argv, "--quiet", "--check", root=project) == (0, [], [])
    code, _, err = transpile(capsys, *argv, "-q", "-v", root=project)
    assert code == 2 and err[-1].endswith(
        "argument -v/--verbose: not allowed with argument -q/--quiet"
    )


def test_a_variant_that_compiles_nothing_is_a_warning_even_when_quiet(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stem = module(project, NOTHING)
    argv = (f"{stem}.py::f", "--example", "x=f32[2]", "--device", "cpu")
    warning = (
        f"transpile: warning: {stem}.py::f variant cpu_0 (cpu: x=f32[2]) compiles "
        "nothing: every statement with tensor work is fallback code (see --explain)"
    )
    assert transpile(capsys, *argv, root=project) == (
        0,
        [],
        [
            f"{stem}.py::f -> generated/{stem}.py: 1 variant, 0 kernels, "
            "1 graph break (0.5 s)",
            warning,
            "wrote 2 files",
        ],
    )
    assert transpile(capsys, *argv, "-q", root=project) == (0, [], [warning])


def test_removed_files_are_counted(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stem = module(project, DOUBLE)
    argv = (f"{stem}.py::f", "--example", "x=f32[2]", "--device", "cpu", "-q")
    assert transpile(capsys, *argv, root=project) == (0, [], [])
    (project / f"{stem}.py").write_text(NOTHING, encoding="utf-8")
    del sys.modules[stem]
    _, _, err = transpile(capsys, *argv[:-1], root=project)
    assert err[-1] == "wrote 1 file, removed 1 file"
    assert not (project / "generated" / f"{stem}.cpp").exists()


def test_each_target_of_the_config_gets_its_line(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a, b = module(project, DOUBLE), module(project, BREAK)
    (project / "pyproject.toml").write_text(
        '[tool.transpile]\nout = "gen"\n'
        f'[[tool.transpile.target]]\nsource = "{a}.py::f"\n'
        'variants = [{ x = "f32[4]", device = "cpu" }]\n'
        f'[[tool.transpile.target]]\nsource = "{b}.py::f"\n'
        'variants = [{ x = "f32[4]", device = "cpu" }, { x = "f32[8]" }]\n',
        encoding="utf-8",
    )
    assert transpile(capsys, root=project) == (
        0,
        [],
        [
            f"{a}.py::f -> gen/{a}.py: 1 variant, 1 kernel (0.5 s)",
            f"{b}.py::f -> gen/{b}.py: 3 variants, 3 kernels, 1 graph break (0.5 s)",
            "wrote 6 files",
        ],
    )


# --------------------------------------------------------------------------------------
# Finding [tool.transpile]

CONFIG = """\
[tool.transpile]
out = "gen"
[[tool.transpile.target]]
source = "{stem}.py::f"
variants = [{{ x = "f32[4]", device = "cpu" }}]
"""


def test_config_is_found_upward_and_paths_are_relative_to_it(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    stem = module(project, DOUBLE)
    (project / "pyproject.toml").write_text(CONFIG.format(stem=stem), "utf-8")
    here = project / "src" / "deep"
    here.mkdir(parents=True)
    (project / "src" / "pyproject.toml").write_text("[tool.black]\n", "utf-8")
    monkeypatch.chdir(here)
    assert transpile(capsys) == (
        0,
        [],
        [
            f"{stem}.py::f -> gen/{stem}.py: 1 variant, 1 kernel (0.5 s)",
            "wrote 3 files",
        ],
    )
    assert (project / "gen" / f"{stem}.py").is_file()
    # -o is where the person typed it: here
    assert transpile(capsys, "-o", "out", "-q") == (0, [], [])
    assert (here / "out" / f"{stem}.py").is_file()
    assert snapshot(here / "out") == snapshot(project / "gen")


def test_no_pyproject_anywhere(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert transpile(capsys, root=project) == (
        2,
        [],
        [
            f"transpile: error: no pyproject.toml found in {project} or any parent "
            "directory"
        ],
    )


def test_pyproject_without_the_table(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (project / "pyproject.toml").write_text('[project]\nname = "x"\n', "utf-8")
    (project / "sub").mkdir()
    before = snapshot(project)
    error = "transpile: error: {} has no [tool.transpile] table"
    assert transpile(capsys, root=project) == (
        2,
        [],
        [error.format("pyproject.toml")],
    )
    assert transpile(capsys, root=project / "sub") == (
        2,
        [],
        [error.format(project / "pyproject.toml")],
    )
    assert snapshot(project) == before


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("[tool.black]\n", "other.toml has no [tool.transpile] table"),
        (None, "no such file: other.toml"),
    ],
)
def test_config_flag_errors(
    project: Path, capsys: pytest.CaptureFixture[str], text: str | None, message: str
) -> None:
    if text is not None:
        (project / "other.toml").write_text(text, "utf-8")
    assert transpile(capsys, "--config", "other.toml", root=project) == (
        2,
        [],
        [f"transpile: error: {message}"],
    )


# --------------------------------------------------------------------------------------
# Unknown example names


def test_unknown_example_lists_the_parameters(
    project: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    stem = module(project, "def f(x, y, scale=2):\n    return x * y * scale\n")
    assert transpile(
        capsys, f"{stem}.py::f", "--variant", "x=f32[2], inp=f32[2]", root=project
    ) == (
        2,
        [],
        [
            f"transpile: error: unknown example 'inp': {stem}.py::f has no parameter "
            "'inp'; its parameters are x, y, scale"
        ],
    )
    assert not (project / "generated").exists()


# --------------------------------------------------------------------------------------
# One-off targets and the files [tool.transpile] builds


def test_one_off_does_not_overwrite_what_the_config_builds(
    project: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    stem = module(project, DOUBLE)
    (project / "pyproject.toml").write_text(CONFIG.format(stem=stem), "utf-8")
    (project / "gen").mkdir()
    (project / "gen" / f"{stem}.py").write_text("# built by the config\n", "utf-8")
    argv = (f"{stem}.py::f", "--example", "x=f32[8]", "--device", "cpu", "-o", "gen")
    before = snapshot(project)
    assert transpile(capsys, *argv, root=project) == (
        2,
        [],
        [
            f"transpile: error: gen/{stem}.py is also built by [tool.transpile] in "
            "pyproject.toml; pass --force to overwrite it, or use another -o"
        ],
    )
    assert snapshot(project) == before
    # from a subdirectory, the same file through another path
    (project / "sub").mkdir()
    monkeypatch.chdir(project / "sub")
    code, _, err = transpile(capsys, f"../{stem}.py::f", *argv[1:-1], "../gen")
    assert code == 2
    assert err == [
        f"transpile: error: ../gen/{stem}.py is also built by [tool.transpile] in "
        "../pyproject.toml; pass --force to overwrite it, or use another -o"
    ]
    monkeypatch.chdir(project)
    # checking and explaining write nothing; another -o and --force may write
    assert transpile(capsys, *argv, "--explain", "-q", root=project)[0] == 0
    assert transpile(capsys, *argv[:-1], "elsewhere", "-q", root=project) == (
        0,
        [],
        [],
    )
    assert transpile(capsys, *argv, "--force", "-q", root=project) == (0, [], [])
    assert "# built by the config" not in (project / "gen" / f"{stem}.py").read_text()


# --------------------------------------------------------------------------------------
# Nothing printed that is not ours


def test_no_numpy_warning_without_numpy(project: Path) -> None:
    """Without NumPy, torch's import warns `Failed to initialize NumPy`; a run of
    `transpile` does not show it (it does not use NumPy)."""
    missing = project / "site"
    (missing / "numpy").mkdir(parents=True)
    (missing / "numpy" / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'numpy'\", name='numpy')\n"
    )
    stem = module(project, DOUBLE)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(missing), str(ROOT)])}

    def stderr(*argv: str) -> list[str]:
        run = subprocess.run(
            [sys.executable, *argv],
            cwd=project,
            env=env,
            capture_output=True,
            text=True,
        )
        return run.stderr.splitlines()

    torch_alone = stderr("-c", "import torch")
    assert any("Failed to initialize NumPy" in line for line in torch_alone)
    argv = (f"{stem}.py::f", "--example", "x=f32[2]", "--device", "cpu")
    assert stderr("-m", "transpiler.cli", *argv, "--explain", "-q") == []
