"""TYPE specs, variants, device expansion and [tool.transpile] loading."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from transpiler.errors import UserError
from transpiler.options import (
    ObjectSpec,
    ScalarSpec,
    Target,
    TensorSpec,
    Variant,
    collect_variants,
    expand_variants,
    format_init,
    load_config,
    parse_example,
    parse_init,
    parse_init_value,
    parse_spec,
    parse_variant,
    with_cuda_graphs,
)

F32 = torch.float32
KNOWN_DTYPES = "bf16, bool, f16, f32, f64, i16, i32, i64, i8, u8"

GOOD_SPECS = [
    ("f32[2,4]", TensorSpec(F32, (2, 4))),
    ("bf16[8,128]@cuda", TensorSpec(torch.bfloat16, (8, 128), "cuda")),
    ("i64[4,512]", TensorSpec(torch.int64, (4, 512))),
    ("bool[4]", TensorSpec(torch.bool, (4,))),
    ("f32[]", TensorSpec(F32, ())),
    ("f16[0,3]@cpu", TensorSpec(torch.float16, (0, 3), "cpu")),
    ("u8[1,1,1]", TensorSpec(torch.uint8, (1, 1, 1))),
    ("  f32[ 2 , 4 ] @ cuda ", TensorSpec(F32, (2, 4), "cuda")),
    ("int=3", ScalarSpec(3)),
    ("int=-7", ScalarSpec(-7)),
    ("float=0.5", ScalarSpec(0.5)),
    ("float=1", ScalarSpec(1.0)),
    ("float = 1e-5", ScalarSpec(1e-5)),
    ("bool=True", ScalarSpec(True)),
    ("bool=False", ScalarSpec(False)),
    ("None", ScalarSpec(None)),
    (" None ", ScalarSpec(None)),
    ("pkg.mod::make_cache(P)", ObjectSpec("pkg.mod::make_cache", (("P", "P"),))),
    ("m.py::f()", ObjectSpec("m.py::f")),
    ("m.py::f( n = 4 , P )", ObjectSpec("m.py::f", (("n", 4), ("P", "P")))),
]


@pytest.mark.parametrize(("text", "expected"), GOOD_SPECS)
def test_parse_spec(text: str, expected: object) -> None:
    spec = parse_spec(text)
    assert spec == expected
    # float=1 is the float 1.0, not the int 1 (which compares equal)
    assert type(getattr(spec, "value", None)) is type(getattr(expected, "value", None))
    assert parse_spec(str(spec)) == spec  # __str__ is the normalized form


BAD_SPECS = [
    (
        "f32[2,-1]",
        "bad TYPE 'f32[2,-1]': dimensions must be non-negative integers or names",
    ),
    (
        "f32[2,]",
        "bad TYPE 'f32[2,]': dimensions must be non-negative integers or names",
    ),
    (
        "f32[2.5]",
        "bad TYPE 'f32[2.5]': dimensions must be non-negative integers or names",
    ),
    ("f8[2]", f"unknown dtype 'f8' in 'f8[2]' (known: {KNOWN_DTYPES})"),
    ("float32[2]", f"unknown dtype 'float32' in 'float32[2]' (known: {KNOWN_DTYPES})"),
    ("f32[2]@tpu", "unknown device 'tpu' in 'f32[2]@tpu' (known: cpu, cuda)"),
    ("f32[2]@cuda:0", "unknown device 'cuda:0' in 'f32[2]@cuda:0' (known: cpu, cuda)"),
    ("int=x", "bad TYPE 'int=x': expected a Python int literal after '='"),
    ("int=3.0", "bad TYPE 'int=3.0': expected a Python int literal after '='"),
    ("float=abc", "bad TYPE 'float=abc': expected a Python float literal after '='"),
    ("bool=true", "bad TYPE 'bool=true': expected True or False after '='"),
    ("str=a", "unknown scalar type 'str' in 'str=a' (known: bool, float, int)"),
]
SHAPE_HINT = (
    "expected a tensor like f32[2,4] or bf16[8,128]@cuda, "
    "or a scalar like int=3, float=0.5, bool=True or None"
)
BAD_SPECS += [
    (text, f"bad TYPE {text!r}: {SHAPE_HINT}")
    for text in ["", "f32", "f32[2,4", "[2,4]", "f32[2][3]", "int", "none"]
]


OBJECT_HINT = (
    "expected an object built by a function of yours, like pkg.mod::make_cache(P) "
    "or FILE.py::make_state(n=4)"
)
BAD_SPECS += [
    ("pkg.mod::f", f"bad TYPE 'pkg.mod::f': {OBJECT_HINT}"),
    ("pkg.mod::f(P", f"bad TYPE 'pkg.mod::f(P': {OBJECT_HINT}"),
    ("::f(P)", f"bad TYPE '::f(P)': {OBJECT_HINT}"),
    ("m::(P)", f"bad TYPE 'm::(P)': {OBJECT_HINT}"),
    ("m::f(n=x)", "bad TYPE 'm::f(n=x)': arguments must be named dimensions (P) or "
     "sizes (n=4)"),
    ("m::f(2)", "bad TYPE 'm::f(2)': arguments must be named dimensions (P) or "
     "sizes (n=4)"),
]  # fmt: skip


def test_object_spec_dimensions_are_dynamic() -> None:
    inputs = parse_variant("ids=i64[1,1], cache=m::make(P, n=2), flag=bool=True")
    variant = Variant(inputs, "cpu")
    assert variant.dynamic == ("P",)
    assert str(variant.sized({"P": 7}).inputs[1][1]) == "m::make(P=7, n=2)"


@pytest.mark.parametrize(("text", "message"), BAD_SPECS)
def test_parse_spec_errors(text: str, message: str) -> None:
    with pytest.raises(UserError) as info:
        parse_spec(text)
    assert str(info.value) == message


def test_parse_example_splits_on_first_equals() -> None:
    assert parse_example("x=int=3") == ("x", ScalarSpec(3))
    assert parse_example(" x = f32[2,4] ") == ("x", TensorSpec(F32, (2, 4)))


@pytest.mark.parametrize("text", ["f32[2,4]", "=f32[2]", "1x=f32[2]", "x y=f32[2]"])
def test_parse_example_errors(text: str) -> None:
    with pytest.raises(UserError, match=r"expected NAME=TYPE, e\.g\. x=f32\[2,4\]"):
        parse_example(text)


def test_parse_variant_keeps_commas_in_brackets() -> None:
    inputs = parse_variant("x=f32[2,4], y=f32[4] ,n=int=3, mask=bool[2,3,4]@cpu,")
    assert inputs == (
        ("x", TensorSpec(F32, (2, 4))),
        ("y", TensorSpec(F32, (4,))),
        ("n", ScalarSpec(3)),
        ("mask", TensorSpec(torch.bool, (2, 3, 4), "cpu")),
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "bad variant ''"),
        (" , ", "bad variant ','"),
        ("x=f32[2], x=f32[3]", "input 'x' given twice in variant 'x=f32[2], x=f32[3]'"),
        ("x=f32[2,4, y=f32[4]", "bad TYPE 'f32[2,4, y=f32[4]'"),
    ],
)
def test_parse_variant_errors(text: str, message: str) -> None:
    with pytest.raises(UserError) as info:
        parse_variant(text)
    assert str(info.value).startswith(message)


X = (("x", TensorSpec(F32, (2, 4))),)
X_CUDA = (("x", TensorSpec(F32, (2, 4), "cuda")),)


def test_expand_default_is_one_variant_per_device() -> None:
    assert expand_variants(X) == (Variant(X, "cpu"), Variant(X, "cuda"))
    assert expand_variants(X, ("cuda",)) == (Variant(X, "cuda"),)


def test_expand_pinned_by_spec_ignores_devices() -> None:
    inputs = X_CUDA + (("n", ScalarSpec(3)), ("y", TensorSpec(F32, (4,))))
    assert expand_variants(inputs, ("cpu",)) == (Variant(inputs, "cuda"),)


def test_expand_config_device_wins() -> None:
    assert expand_variants(X, ("cpu", "cuda"), "cuda") == (Variant(X, "cuda"),)
    assert expand_variants(X_CUDA, ("cpu",), "cuda") == (Variant(X_CUDA, "cuda"),)


@pytest.mark.parametrize(
    ("inputs", "devices", "pinned", "message"),
    [
        (
            X_CUDA + (("y", TensorSpec(F32, (4,), "cpu")),),
            ("cpu", "cuda"),
            None,
            (
                "variant 'x=f32[2,4]@cuda, y=f32[4]@cpu' pins tensors to different "
                "devices (cpu, cuda); a variant runs on one device"
            ),
        ),
        (
            X_CUDA,
            ("cpu", "cuda"),
            "cpu",
            (
                "variant 'x=f32[2,4]@cuda' has device = 'cpu' but its tensors are "
                "pinned to @cuda"
            ),
        ),
        (
            X,
            ("cpu",),
            "tpu",
            "unknown device 'tpu' in variant 'x=f32[2,4]' (known: cpu, cuda)",
        ),
        (
            X,
            ("mps",),
            None,
            "unknown device 'mps' in variant 'x=f32[2,4]' (known: cpu, cuda)",
        ),
    ],
)
def test_expand_errors(
    inputs: tuple, devices: tuple[str, ...], pinned: str | None, message: str
) -> None:
    with pytest.raises(UserError) as info:
        expand_variants(inputs, devices, pinned)
    assert str(info.value) == message


def test_collect_variants_keeps_order_and_rejects_duplicates() -> None:
    y = (("x", TensorSpec(F32, (8, 4))),)
    got = collect_variants([(y, None), (X, "cuda")], ("cpu", "cuda"))
    assert [v.describe() for v in got] == [
        "cpu: x=f32[8,4]",
        "cuda: x=f32[8,4]",
        "cuda: x=f32[2,4]",
    ]
    with pytest.raises(
        UserError, match="variant 'cuda: x=f32\\[2,4\\]' is given twice"
    ):
        collect_variants([(X, None), (X, "cuda")], ("cpu", "cuda"))


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("3", 3),
        ("-0.5", -0.5),
        ("True", True),
        ("None", None),
        ("'gelu'", "gelu"),
        ("gelu", "gelu"),
        ("[1, 2]", [1, 2]),
        ("{'a': 1}", {"a": 1}),
        ("(64,)", (64,)),
        ("os.system('x')", "os.system('x')"),
        ("", ""),
    ],
)
def test_parse_init_value(text: str, value: object) -> None:
    assert parse_init_value(text) == value
    assert parse_init(f"k={text}") == ("k", value)
    assert parse_init(format_init("k", value)) == ("k", value)


def test_format_init_normalizes() -> None:
    assert format_init("act", "gelu") == "act=gelu"
    assert format_init("n", 3) == "n=3"
    assert format_init("s", "3") == "s='3'"


@pytest.mark.parametrize("text", ["n", "=3", "2n=3"])
def test_parse_init_errors(text: str) -> None:
    with pytest.raises(UserError, match="expected K=V"):
        parse_init(text)


# --------------------------------------------------------------------------------------
# [tool.transpile]


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "pyproject.toml"
    path.write_text(text, encoding="utf-8")
    return path


def test_load_config_design_example(tmp_path: Path) -> None:
    pyproject = _write(
        tmp_path,
        """
[project]
name = "demo"

[tool.transpile]
out = "generated"
[[tool.transpile.target]]
source = "examples/toy.py::ToyModule"
init = {}
variants = [{ x = "f32[2,4]" }, { x = "f32[8,4]", device = "cuda" }]
""",
    )
    out, targets = load_config(pyproject, tmp_path)
    assert out == Path("generated")
    x24, x84 = (("x", TensorSpec(F32, (2, 4))),), (("x", TensorSpec(F32, (8, 4))),)
    assert targets == (
        Target(
            "examples/toy.py::ToyModule",
            (Variant(x24, "cpu"), Variant(x24, "cuda"), Variant(x84, "cuda")),
        ),
    )


def test_load_config_keeps_order_and_reads_everything(tmp_path: Path) -> None:
    pyproject = _write(
        tmp_path,
        """
[tool.transpile]
out = "build/gen"

[[tool.transpile.target]]
source = "pkg.zeta::Zeta"
init = { n_layer = 2, act = "gelu", dims = [4, 8] }
devices = ["cuda", "cpu"]
variants = [
  { y = "f32[4]", x = "f32[2,4]@cpu", n = "int=3" },
  { y = "f32[4]", x = "f32[2,4]", n = "None" },
]

[[tool.transpile.target]]
source = "examples/alpha.py::make"
factory = "examples/alpha.py::build"
devices = ["cpu"]
variants = [{ }]
""",
    )
    out, targets = load_config(pyproject, tmp_path)
    assert out == Path("build/gen")
    assert [t.source for t in targets] == ["pkg.zeta::Zeta", "examples/alpha.py::make"]
    zeta, alpha = targets
    assert zeta.init == (("n_layer", 2), ("act", "gelu"), ("dims", [4, 8]))
    assert zeta.factory is None
    assert [v.describe() for v in zeta.variants] == [
        "cpu: y=f32[4], x=f32[2,4]@cpu, n=int=3",
        "cuda: y=f32[4], x=f32[2,4], n=None",
        "cpu: y=f32[4], x=f32[2,4], n=None",
    ]
    assert alpha.factory == "examples/alpha.py::build"
    assert alpha.variants == (Variant((), "cpu"),)


def test_load_config_default_out(tmp_path: Path) -> None:
    pyproject = _write(
        tmp_path,
        '[tool.transpile]\n[[tool.transpile.target]]\nsource = "a.py::A"\n'
        'variants = [{ x = "f32[2]" }]\n',
    )
    assert load_config(pyproject, tmp_path)[0] == Path("generated")


NO_CONFIG = "pyproject.toml has no [tool.transpile] table"
TARGET = '[[tool.transpile.target]]\nsource = "a.py::A"\n'
CONFIG_ERRORS = [
    ('[project]\nname = "x"\n', NO_CONFIG),
    ("[tool.black]\n", NO_CONFIG),
    ("[tool.transpile\n", "pyproject.toml: cannot read: "),
    (
        "[tool.transpile]\n",
        (
            "pyproject.toml: [tool.transpile] has no [[tool.transpile.target]] with "
            'source = "..."'
        ),
    ),
    (
        '[tool.transpile]\noutput = "gen"\n',
        "pyproject.toml: unknown key 'output' in [tool.transpile] (known: out, target)",
    ),
    (
        "[tool.transpile]\nout = 3\n",
        (
            "pyproject.toml: [tool.transpile]: out must be a directory name, e.g. "
            'out = "generated"'
        ),
    ),
    (
        '[[tool.transpile.target]]\nvariants = [{ x = "f32[2]" }]\n',
        'pyproject.toml: [[tool.transpile.target]] #1 has no source = "FILE.py::Name"',
    ),
    (
        '[[tool.transpile.target]]\nsource = "a.py"\n',
        "pyproject.toml: bad target 'a.py': expected FILE.py::Name or pkg.mod::Name",
    ),
    (
        TARGET + 'varients = [{ x = "f32[2]" }]\n',
        (
            "pyproject.toml: unknown key 'varients' in [[tool.transpile.target]] #1 "
            "(known: cuda_graphs, devices, factory, init, source, train, variants)"
        ),
    ),
    (
        TARGET,
        (
            "pyproject.toml: target 'a.py::A' has no variants = "
            '[{ x = "f32[2,4]" }, ...]'
        ),
    ),
    (
        TARGET + "variants = []\n",
        (
            "pyproject.toml: target 'a.py::A' has no variants = "
            '[{ x = "f32[2,4]" }, ...]'
        ),
    ),
    (
        TARGET + 'variants = [{ x = "f32[2,-1]" }]\n',
        (
            "pyproject.toml: target 'a.py::A' variant 1: bad TYPE 'f32[2,-1]': "
            "dimensions must be non-negative integers or names"
        ),
    ),
    (
        TARGET + 'variants = [{ x = "f32[2]" }, { x = 3 }]\n',
        (
            "pyproject.toml: target 'a.py::A' variant 2: x must be a TYPE string, "
            'e.g. x = "f32[2,4]"'
        ),
    ),
    (
        TARGET + 'variants = [{ x = "f32[2]", device = "tpu" }]\n',
        (
            "pyproject.toml: target 'a.py::A': unknown device 'tpu' in variant "
            "'x=f32[2]' (known: cpu, cuda)"
        ),
    ),
    (
        TARGET + 'variants = [{ x = "f32[2]" }, { x = "f32[2]", device = "cpu" }]\n',
        "pyproject.toml: target 'a.py::A': variant 'cpu: x=f32[2]' is given twice",
    ),
    (
        TARGET + 'devices = ["gpu"]\nvariants = [{ x = "f32[2]" }]\n',
        "pyproject.toml: unknown device 'gpu' in target 'a.py::A' (known: cpu, cuda)",
    ),
    (
        TARGET + 'devices = []\nvariants = [{ x = "f32[2]" }]\n',
        (
            "pyproject.toml: target 'a.py::A': devices must be a non-empty list, "
            'e.g. ["cpu"]'
        ),
    ),
    (
        TARGET + 'init = { n = 1 }\nfactory = "a.py::make"\nvariants = [{}]\n',
        "pyproject.toml: target 'a.py::A': give init or factory, not both",
    ),
    (
        TARGET + 'factory = "make"\nvariants = [{}]\n',
        "pyproject.toml: bad factory 'make': expected FILE.py::fn or pkg.mod::fn",
    ),
    (
        TARGET + "init = 3\nvariants = [{}]\n",
        (
            "pyproject.toml: target 'a.py::A': init must be a table of NAME = value, "
            "e.g. { n = 4 }"
        ),
    ),
    (
        TARGET + 'cuda_graphs = "yes"\nvariants = [{ x = "f32[2]" }]\n',
        (
            "pyproject.toml: target 'a.py::A': cuda_graphs must be true or false, "
            "not 'yes'"
        ),
    ),
    (
        TARGET + 'variants = [{ x = "f32[2]" }, { x = "f32[4]", cuda_graphs = 1 }]\n',
        (
            "pyproject.toml: target 'a.py::A' variant 2: cuda_graphs must be true or "
            "false, not 1"
        ),
    ),
    (
        TARGET + 'variants = [{ x = "f32[2]", device = "cpu", cuda_graphs = true }]\n',
        (
            "pyproject.toml: target 'a.py::A' variant 1: cuda_graphs = true needs a "
            "cuda variant; this one runs on cpu"
        ),
    ),
    (
        TARGET
        + 'cuda_graphs = true\ndevices = ["cpu"]\nvariants = [{ x = "f32[2]" }]\n',
        (
            "pyproject.toml: target 'a.py::A': cuda_graphs = true, but it has no "
            "cuda variant"
        ),
    ),
]


def test_load_config_cuda_graphs(tmp_path: Path) -> None:
    """On for a target's cuda variants; a variant table may turn it off or on."""
    pyproject = _write(
        tmp_path,
        """
[tool.transpile]
[[tool.transpile.target]]
source = "a.py::A"
cuda_graphs = true
variants = [
  { x = "f32[2]" },
  { x = "f32[4]", cuda_graphs = false },
  { x = "f32[8]", device = "cpu" },
]

[[tool.transpile.target]]
source = "b.py::B"
variants = [{ x = "f32[2]" }, { x = "f32[4]", device = "cuda", cuda_graphs = true }]
""",
    )
    _, (a, b) = load_config(pyproject, tmp_path)
    assert [(v.describe(), v.cuda_graphs) for v in a.variants] == [
        ("cpu: x=f32[2]", False),
        ("cuda: x=f32[2]", True),
        ("cpu: x=f32[4]", False),
        ("cuda: x=f32[4]", False),
        ("cpu: x=f32[8]", False),
    ]
    assert [v.cuda_graphs for v in b.variants] == [False, False, True]


def test_cuda_graphs_do_not_make_a_variant_different() -> None:
    assert Variant(X, "cuda", cuda_graphs=True) == Variant(X, "cuda")
    assert Variant(X, "cuda", cuda_graphs=True).sized({}).cuda_graphs
    target = with_cuda_graphs(Target("a.py::A", expand_variants(X)))
    assert [v.cuda_graphs for v in target.variants] == [False, True]


@pytest.mark.parametrize(("text", "message"), CONFIG_ERRORS)
def test_load_config_errors(tmp_path: Path, text: str, message: str) -> None:
    if text.startswith("[[tool.transpile.target]]"):
        text = "[tool.transpile]\n" + text
    pyproject = _write(tmp_path, text)
    with pytest.raises(UserError) as info:
        load_config(pyproject, tmp_path)
    assert str(info.value).startswith(message)
    assert "\n" not in str(info.value)


def test_load_config_missing_file(tmp_path: Path) -> None:
    with pytest.raises(UserError, match=r"^no such file: pyproject.toml$"):
        load_config(tmp_path / "pyproject.toml", tmp_path)


def test_load_config_names_nested_file(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    pyproject = tmp_path / "sub" / "pyproject.toml"
    pyproject.write_text('[tool.transpile]\nout = ""\n', encoding="utf-8")
    with pytest.raises(UserError, match=r"^sub/pyproject.toml: \[tool.transpile\]"):
        load_config(pyproject, tmp_path)
