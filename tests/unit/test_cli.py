"""The `transpile` command line: Options built, commands recorded, errors, exit codes.

`transpiler.api.run` is replaced by a fake that records the Options it is given.
"""

from __future__ import annotations

import shlex
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch

from transpiler.cli import main
from transpiler.errors import UserError
from transpiler.options import Options, ScalarSpec, TensorSpec, Variant

F32 = torch.float32
X24 = (("x", TensorSpec(F32, (2, 4))),)


class FakeApi:
    """Stands in for `transpiler.api`; `result` is what `run` returns or raises."""

    def __init__(self) -> None:
        self.calls: list[Options] = []
        self.result: object = 0

    def run(self, options: Options, verbosity: int = 0) -> object:
        self.calls.append(options)
        self.verbosity = verbosity
        if isinstance(self.result, Exception):
            raise self.result
        return self.result

    @property
    def options(self) -> Options:
        assert len(self.calls) == 1
        return self.calls[0]


@pytest.fixture
def api(monkeypatch: pytest.MonkeyPatch) -> FakeApi:
    fake = FakeApi()
    module = types.ModuleType("transpiler.api")
    module.run = fake.run  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "transpiler.api", module)
    return fake


def run_cli(tmp_path: Path, *argv: str) -> int:
    return main([*argv, "--root", str(tmp_path)])


def test_one_off_examples_form_one_variant_per_device(
    api: FakeApi, tmp_path: Path
) -> None:
    code = run_cli(tmp_path, "examples/toy.py::ToyLinear", "--example", "x=f32[2,4]")
    assert code == 0
    options = api.options
    assert options.root == tmp_path
    assert options.out == Path("generated")
    assert not options.check and not options.explain
    (target,) = options.targets
    assert target.source == "examples/toy.py::ToyLinear"
    assert target.variants == (Variant(X24, "cpu"), Variant(X24, "cuda"))
    assert target.init == () and target.factory is None
    assert (
        options.command == "transpile examples/toy.py::ToyLinear --example 'x=f32[2,4]'"
    )


def test_one_off_everything(api: FakeApi, tmp_path: Path) -> None:
    argv = [
        "pkg.mod::Net",
        "--example", "x = f32[ 2, 4 ]",
        "--example", "n=int=3",
        "--variant", "x=f32[8,4],n=None",
        "--variant", "x=bf16[8,4]@cuda, n=int=1",
        "--init", "hidden=64",
        "--init", "act=gelu",
        "--device", "cpu",
        "--device", "cpu",
        "-o", "out/gen/",
        "--explain",
    ]  # fmt: skip
    assert run_cli(tmp_path, *argv) == 0
    options = api.options
    assert options.explain and not options.check
    assert options.out == Path("out/gen")
    (target,) = options.targets
    assert target.init == (("hidden", 64), ("act", "gelu"))
    assert [v.describe() for v in target.variants] == [
        "cpu: x=f32[2,4], n=int=3",
        "cpu: x=f32[8,4], n=None",
        "cuda: x=bf16[8,4]@cuda, n=int=1",
    ]
    assert target.variants[0].inputs[1] == ("n", ScalarSpec(3))
    assert options.command == (
        "transpile pkg.mod::Net --example 'x=f32[2,4]' --example n=int=3"
        " --variant 'x=f32[8,4], n=None' --variant 'x=bf16[8,4]@cuda, n=int=1'"
        " --init hidden=64 --init act=gelu --device cpu -o out/gen"
    )


def test_one_off_command_is_the_same_for_equivalent_spellings(
    api: FakeApi, tmp_path: Path
) -> None:
    run_cli(tmp_path, "a.py::f", "--variant", "x=f32[2,4]", "--factory", "a.py::mk")
    run_cli(tmp_path, "a.py::f", "--factory=a.py::mk", "--variant= x = f32[2, 4] ")
    first, second = api.calls
    assert first == second
    assert (
        first.command == "transpile a.py::f --variant 'x=f32[2,4]' --factory a.py::mk"
    )
    assert first.targets[0].factory == "a.py::mk"


def test_command_round_trips(api: FakeApi, tmp_path: Path) -> None:
    run_cli(
        tmp_path, "a.py::A", "--example", "x=f16[]@cpu", "--init", "s='3'", "-o", "g2"
    )
    again = api.calls[0].command.removeprefix("transpile ")
    run_cli(tmp_path, *shlex.split(again))
    assert api.calls[0] == api.calls[1]


CONFIG = """
[tool.transpile]
out = "gen"
[[tool.transpile.target]]
source = "examples/toy.py::ToyModule"
init = {}
variants = [{ x = "f32[2,4]" }, { x = "f32[8,4]", device = "cuda" }]
"""


def test_config_mode(api: FakeApi, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(CONFIG, encoding="utf-8")
    assert run_cli(tmp_path, "--check") == 0
    options = api.options
    assert options.check
    assert options.command == "transpile"
    assert options.out == Path("gen")
    assert [v.describe() for v in options.targets[0].variants] == [
        "cpu: x=f32[2,4]",
        "cuda: x=f32[2,4]",
        "cuda: x=f32[8,4]",
    ]


def test_config_mode_out_override_keeps_command(api: FakeApi, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(CONFIG, encoding="utf-8")
    assert run_cli(tmp_path, "-o", "/tmp/elsewhere") == 0
    assert api.options.out == Path("/tmp/elsewhere")
    assert api.options.command == "transpile"


def test_cuda_graphs_flag_one_off(api: FakeApi, tmp_path: Path) -> None:
    run_cli(tmp_path, "a.py::A", "--example", "x=f32[2,4]", "--cuda-graphs")
    (target,) = api.options.targets
    assert [(v.device, v.cuda_graphs) for v in target.variants] == [
        ("cpu", False),
        ("cuda", True),
    ]
    command = api.options.command
    assert command == "transpile a.py::A --example 'x=f32[2,4]' --cuda-graphs"
    run_cli(tmp_path, *shlex.split(command.removeprefix("transpile ")))
    assert api.calls[1].targets[0].variants[1].cuda_graphs


def test_cuda_graphs_flag_config_mode(api: FakeApi, tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text(CONFIG, encoding="utf-8")
    assert run_cli(tmp_path, "--cuda-graphs") == 0
    assert api.options.command == "transpile --cuda-graphs"
    variants = api.options.targets[0].variants
    assert [v.cuda_graphs for v in variants] == [False, True, True]


@pytest.mark.parametrize("code", [0, 1, None])
def test_exit_code_comes_from_api(
    api: FakeApi, tmp_path: Path, code: int | None
) -> None:
    api.result = code
    assert run_cli(tmp_path, "a.py::A", "--example", "x=f32[2]", "--check") == (
        code or 0
    )


USER_ERRORS = [
    (
        ["--example", "x=f32[2]"],
        (
            "--example needs a target (FILE.py::Name); without one, targets and their "
            "variants come from [tool.transpile] in pyproject.toml"
        ),
    ),
    (["--variant", "x=f32[2]"], "--variant needs a target (FILE.py::Name); "),
    (["--device", "cpu"], "--device needs a target (FILE.py::Name); "),
    (
        ["toy.py", "--example", "x=f32[2]"],
        "bad target 'toy.py': expected FILE.py::Name or pkg.mod::Name",
    ),
    (["::A", "--example", "x=f32[2]"], "bad target '::A'"),
    (["a.py::", "--example", "x=f32[2]"], "bad target 'a.py::'"),
    (
        ["a.py::A"],
        (
            "target 'a.py::A' needs example inputs: give --example NAME=TYPE "
            '(e.g. --example x=f32[2,4]) or --variant "x=f32[2,4], y=f32[4]"'
        ),
    ),
    (
        ["a.py::A", "--example", "x=f8[2]"],
        (
            "unknown dtype 'f8' in 'f8[2]' (known: bf16, bool, f16, f32, f64, i16, "
            "i32, i64, i8, u8)"
        ),
    ),
    (
        ["a.py::A", "--example", "x=f32[2]", "--example", "x=f32[3]"],
        "input 'x' given twice in --example",
    ),
    (
        ["a.py::A", "--example", "x=f32[2]", "--variant", "x=f32[2]"],
        "variant 'cpu: x=f32[2]' is given twice",
    ),
    (
        ["a.py::A", "--example", "x=f32[2]@cuda", "--example", "y=f32[2]@cpu"],
        "variant 'x=f32[2]@cuda, y=f32[2]@cpu' pins tensors to different devices",
    ),
    (
        ["a.py::A", "--example", "x=f32[2]", "--init", "n=1", "--factory", "a.py::f"],
        "give --init or --factory, not both",
    ),
    (
        ["a.py::A", "--example", "x=f32[2]", "--factory", "f"],
        "bad factory 'f': expected FILE.py::fn or pkg.mod::fn",
    ),
    (["a.py::A", "--example", "x=f32[2]", "--init", "n"], "bad init 'n': expected K=V"),
]


@pytest.mark.parametrize(("argv", "message"), USER_ERRORS)
def test_user_errors(
    api: FakeApi,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    argv: list[str],
    message: str,
) -> None:
    assert run_cli(tmp_path, *argv) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert err.startswith(f"transpile: error: {message}")
    assert err.count("\n") == 1
    assert api.calls == []


def test_config_error_names_pyproject(
    api: FakeApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.transpile]\n", encoding="utf-8")
    assert run_cli(tmp_path) == 2
    assert capsys.readouterr().err == (
        "transpile: error: pyproject.toml: [tool.transpile] has no "
        '[[tool.transpile.target]] with source = "..."\n'
    )


def test_user_error_from_api(
    api: FakeApi, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    api.result = UserError("no class 'Toy' in examples/toy.py", "examples/toy.py", 3)
    assert run_cli(tmp_path, "examples/toy.py::Toy", "--example", "x=f32[2]") == 2
    assert capsys.readouterr().err == (
        "transpile: error: examples/toy.py:3: no class 'Toy' in examples/toy.py\n"
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["a.py::A", "--device", "tpu"],
        ["a.py::A", "--check", "--explain"],
        ["a.py::A", "--bogus"],
        ["a.py::A", "b.py::B"],
    ],
)
def test_usage_errors_exit_2(
    api: FakeApi, tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    assert run_cli(tmp_path, *argv) == 2
    assert "usage: transpile" in capsys.readouterr().err
    assert api.calls == []


def test_help_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--help"]) == 0
    help_text = capsys.readouterr().out
    assert "--example NAME=TYPE" in help_text
    assert "--root" not in help_text


def test_module_entry_point_reports_without_traceback(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "transpiler.cli", "a.py::A", "--example", "x=f32[2,-1]"],
        check=False,
        capture_output=True,
        text=True,
        cwd=Path(__file__).resolve().parents[2],
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr == (
        "transpile: error: bad TYPE 'f32[2,-1]': dimensions must be non-negative "
        "integers or names\n"
    )


@pytest.mark.parametrize(("flag", "verbosity"), [([], 0), (["-q"], -1), (["-v"], 1)])
def test_quiet_and_verbose_reach_the_run(
    api: FakeApi, tmp_path: Path, flag: list[str], verbosity: int
) -> None:
    assert run_cli(tmp_path, "a.py::A", "--example", "x=f32[2]", *flag) == 0
    assert api.verbosity == verbosity
    assert api.options.command == "transpile a.py::A --example 'x=f32[2]'"
