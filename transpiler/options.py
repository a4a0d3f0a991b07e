"""What to build: targets, variants and input specs, as frozen dataclasses.

Options travel as one frozen `Options` value, built by `cli.py` from the command line or
from `[tool.transpile]` in pyproject.toml, and passed explicitly to `api.run`.

TYPE specs (the `--example NAME=TYPE` grammar):

    f32[2,4]  bf16[8,128]@cuda  i64[4,512]  bool[4]  f32[]  int=3  float=0.5  None
    pkg.mod::make_cache(P)  FILE.py::make_state(n=4)      (an object, built by example)

The parsers below are pure functions from text (or a TOML table) to these values; every
problem is a one-line `UserError`. Order is kept exactly as the user wrote it: targets,
variants, inputs and init values are tuples in source order, never sets.
"""

from __future__ import annotations

import ast
import keyword
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch

from transpiler.errors import UserError
from transpiler.text import is_reserved

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10: the same parser, from PyPI
    import tomli as tomllib

DTYPES: dict[str, torch.dtype] = {
    "f16": torch.float16,
    "bf16": torch.bfloat16,
    "f32": torch.float32,
    "f64": torch.float64,
    "i8": torch.int8,
    "u8": torch.uint8,
    "i16": torch.int16,
    "i32": torch.int32,
    "i64": torch.int64,
    "bool": torch.bool,
}
DEVICES = ("cpu", "cuda")


@dataclass(frozen=True)
class TensorSpec:
    """A tensor input: dtype and shape; `device` is None unless pinned. A named
    dimension (`f32[B,128]`) is dynamic: one variant serves every size of it."""

    dtype: torch.dtype
    shape: tuple[int | str, ...]
    device: str | None = None
    grad: bool = False  # `:grad`: a training variant computes its gradient

    def sized(self, sizes: dict[str, int]) -> TensorSpec:
        """This spec with named dimensions given sizes."""
        shape = tuple(sizes[d] if isinstance(d, str) else d for d in self.shape)
        return replace(self, shape=shape)

    def __str__(self) -> str:
        name = next(k for k, v in DTYPES.items() if v == self.dtype)
        dims = ",".join(str(d) for d in self.shape)
        at = f"@{self.device}" if self.device else ""
        return f"{name}[{dims}]{at}{':grad' if self.grad else ''}"


@dataclass(frozen=True)
class ScalarSpec:
    """A Python value input: `int=3`, `float=0.5`, `bool=True`, `None`."""

    value: int | float | bool | None

    def __str__(self) -> str:
        if self.value is None:
            return "None"
        return f"{type(self.value).__name__}={self.value!r}"


@dataclass(frozen=True)
class ObjectSpec:
    """A Python object input (a key/value cache, a state holder), declared by a
    function of the user's that builds an example of it: `pkg.mod::make_cache(P)`.
    The function is called with the instance being transpiled (for a module
    target) and `args` as keywords; a name among them is a dynamic dimension, an
    integer a fixed size. The example's tensors become inputs of the variant, read
    by their paths in the object, and its structure is guarded."""

    function: str  # "pkg.mod::fn" or "FILE.py::fn"
    args: tuple[tuple[str, int | str], ...] = ()

    def sized(self, sizes: dict[str, int]) -> ObjectSpec:
        args = tuple((k, sizes[v] if isinstance(v, str) else v) for k, v in self.args)
        return ObjectSpec(self.function, args)

    @property
    def dims(self) -> tuple[str, ...]:
        return tuple(v for _, v in self.args if isinstance(v, str))

    def __str__(self) -> str:
        args = ", ".join(v if k == v else f"{k}={v}" for k, v in self.args)
        return f"{self.function}({args})"


Spec = TensorSpec | ScalarSpec | ObjectSpec


@dataclass(frozen=True)
class Variant:
    """One specialization: the inputs by parameter name, and the device it runs on.

    `cuda_graphs` (cuda only) asks for the variant to be captured into a CUDA graph
    and replayed; it is not part of what makes two variants the same. `train`: the
    variant is for training (the module in train mode, grad enabled, its
    parameters and the inputs declared `:grad` requiring gradients), with a
    compiled backward."""

    inputs: tuple[tuple[str, Spec], ...]
    device: str
    cuda_graphs: bool = field(default=False, compare=False)
    train: bool = False

    @property
    def dynamic(self) -> tuple[str, ...]:
        """Named dimensions, in order of first appearance."""
        names: dict[str, None] = {}
        for _, spec in self.inputs:
            if isinstance(spec, TensorSpec):
                names.update((d, None) for d in spec.shape if isinstance(d, str))
            elif isinstance(spec, ObjectSpec):
                names.update((d, None) for d in spec.dims)
        return tuple(names)

    def sized(self, sizes: dict[str, int]) -> Variant:
        inputs = tuple(
            (n, s.sized(sizes) if isinstance(s, (TensorSpec, ObjectSpec)) else s)
            for n, s in self.inputs
        )
        return replace(self, inputs=inputs)

    def describe(self) -> str:
        args = ", ".join(f"{name}={spec}" for name, spec in self.inputs)
        return f"{self.device}{', train' if self.train else ''}: {args}"


@dataclass(frozen=True)
class Target:
    """A model or function to transpile, with its variants and how to build it."""

    source: str  # as the user wrote it: "examples/toy.py::ToyModule" or "pkg.mod::Name"
    variants: tuple[Variant, ...]
    init: tuple[tuple[str, object], ...] = ()
    factory: str | None = None  # "FILE.py::fn" or "pkg.mod::fn" returning the instance


@dataclass(frozen=True)
class Options:
    """Everything one run of `transpile` needs."""

    targets: tuple[Target, ...]
    root: Path  # project root: paths in targets and `out` are relative to it
    out: Path = Path("generated")
    check: bool = False
    explain: bool = False
    autotune: bool = False  # time kernels' launch configs on this machine's GPU
    command: str = "transpile"  # the command recorded in headers to regenerate


Inputs = tuple[tuple[str, Spec], ...]

# --------------------------------------------------------------------------------------
# TYPE specs

_TENSOR = re.compile(
    r"(?P<dtype>\w+)\[(?P<dims>[^\[\]]*)\](?:@(?P<device>.*?))?(?P<grad>:grad)?"
)
_DIM = re.compile(r"[0-9]+|[A-Za-z_]\w*")  # a size, or a named dynamic dimension
_OBJECT = re.compile(r"(?P<function>[^()]+::[^()]+)\((?P<args>[^()]*)\)")
_OBJECT_ARG = re.compile(r"(?P<key>[A-Za-z_]\w*)(?:=(?P<size>[0-9]+))?")
_BOOLS = {"True": True, "False": False}
_SCALARS = ("bool", "float", "int")


def parse_spec(text: str) -> Spec:
    """Parse one TYPE: `f32[2,4]`, `bf16[8,128]@cuda`, `f32[8,64]:grad` (a training
    variant computes its gradient), `f32[]`, `int=3`, `None`,
    `pkg.mod::make_cache(P)`, ..."""
    shown = text.strip()
    compact = "".join(text.split())
    if compact == "None":
        return ScalarSpec(None)
    if "::" in compact:
        return _parse_object(shown, compact)
    if "[" not in compact and "=" in compact:
        return _parse_scalar(shown, *compact.split("=", 1))
    match = _TENSOR.fullmatch(compact)
    if match is None:
        raise UserError(
            f"bad TYPE {shown!r}: expected a tensor like f32[2,4] or bf16[8,128]@cuda,"
            " or a scalar like int=3, float=0.5, bool=True or None"
        )
    dtype, dims, device = match["dtype"], match["dims"], match["device"]
    if dtype not in DTYPES:
        known = ", ".join(sorted(DTYPES))
        raise UserError(f"unknown dtype {dtype!r} in {shown!r} (known: {known})")
    sizes = dims.split(",") if dims else []
    if not all(_DIM.fullmatch(size) for size in sizes):
        raise UserError(
            f"bad TYPE {shown!r}: dimensions must be non-negative integers or names"
        )
    if device is not None:
        check_device(device, f" in {shown!r}")
    shape = tuple(int(d) if d.isdigit() else d for d in sizes)
    _check_size(shown, DTYPES[dtype], shape)
    grad = match["grad"] is not None
    if grad and not DTYPES[dtype].is_floating_point:
        raise UserError(f"bad TYPE {shown!r}: only a floating-point tensor has a grad")
    return TensorSpec(DTYPES[dtype], shape, device, grad)


MAX_BYTES = 2**63 - 1  # what torch can address in one tensor


def _parse_object(shown: str, compact: str) -> ObjectSpec:
    """`pkg.mod::make_cache(P)`, `FILE.py::make_state(n=4, P)`."""
    match = _OBJECT.fullmatch(compact)
    if match is None or not all(match["function"].split("::")):
        raise UserError(
            f"bad TYPE {shown!r}: expected an object built by a function of yours,"
            " like pkg.mod::make_cache(P) or FILE.py::make_state(n=4)"
        )
    args = []
    for part in filter(None, match["args"].split(",")):
        arg = _OBJECT_ARG.fullmatch(part)
        if arg is None:
            raise UserError(
                f"bad TYPE {shown!r}: arguments must be named dimensions (P) or "
                "sizes (n=4)"
            )
        key = arg["key"]
        args.append((key, int(arg["size"]) if arg["size"] else key))
    return ObjectSpec(match["function"], tuple(args))


def _check_size(shown: str, dtype, shape: tuple) -> None:
    """A tensor of `shape` must be addressable: its bytes fit in int64."""
    size = dtype.itemsize
    for d in shape:
        size *= d if isinstance(d, int) else 1
    if size > MAX_BYTES:
        raise UserError(
            f"bad TYPE {shown!r}: a tensor of that shape has more bytes than a "
            "tensor can hold (2**63)"
        )


def _parse_scalar(shown: str, kind: str, value: str) -> ScalarSpec:
    if kind not in _SCALARS:
        known = ", ".join(_SCALARS)
        raise UserError(f"unknown scalar type {kind!r} in {shown!r} (known: {known})")
    try:
        if kind == "bool":
            return ScalarSpec(_BOOLS[value])
        return ScalarSpec(int(value) if kind == "int" else float(value))
    except (KeyError, ValueError):
        expected = "True or False" if kind == "bool" else f"a Python {kind} literal"
        raise UserError(f"bad TYPE {shown!r}: expected {expected} after '='") from None


def check_device(device: str, where: str = "") -> str:
    """Return `device` if it is one we compile for, else raise a UserError."""
    if device not in DEVICES:
        known = ", ".join(DEVICES)
        raise UserError(f"unknown device {device!r}{where} (known: {known})")
    return device


# --------------------------------------------------------------------------------------
# Examples, variants, init values, target names


def parse_example(text: str) -> tuple[str, Spec]:
    """Parse `NAME=TYPE`, split on the first `=`: `n=int=3` is name n, spec int=3."""
    name, sep, spec = text.partition("=")
    name = name.strip()
    if not sep or not name.isidentifier():
        raise UserError(
            f"bad example {text.strip()!r}: expected NAME=TYPE, e.g. x=f32[2,4]"
        )
    return name, parse_spec(spec)


def parse_variant(text: str) -> Inputs:
    """Parse `"x=f32[2,4], y=f32[4]"`; commas inside brackets belong to the shape."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        depth += {"[": 1, "]": -1, "(": 1, ")": -1}.get(char, 0)
        if char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    inputs = tuple(parse_example(part) for part in parts if part.strip())
    if not inputs:
        raise UserError(
            f"bad variant {text.strip()!r}: expected NAME=TYPE, ... "
            "e.g. 'x=f32[2,4], y=f32[4]'"
        )
    return check_unique_inputs(inputs, f"variant {text.strip()!r}")


def check_unique_inputs(inputs: Inputs, where: str) -> Inputs:
    """Return `inputs` if no name is given twice, else raise a UserError."""
    seen: set[str] = set()
    for name, _ in inputs:
        if name in seen:
            raise UserError(f"input {name!r} given twice in {where}")
        seen.add(name)
    return inputs


def parse_init_value(text: str) -> object:
    """Parse the V of `--init K=V` as a Python literal, else keep it as a string."""
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return text


def parse_init(text: str) -> tuple[str, object]:
    """Parse `--init K=V` into (K, value); see `parse_init_value`."""
    key, sep, value = text.partition("=")
    key = key.strip()
    if not sep or not key.isidentifier():
        raise UserError(f"bad init {text.strip()!r}: expected K=V, e.g. hidden=64")
    return key, parse_init_value(value)


def format_init(key: str, value: object) -> str:
    """The normalized `K=V` text for an init value; `parse_init` reads it back."""
    if isinstance(value, str) and parse_init_value(value) == value:
        return f"{key}={value}"
    return f"{key}={value!r}"


def check_source(text: str, what: str = "target", name: str = "Name") -> str:
    """Return `FILE.py::Name` / `pkg.mod::Name` stripped, else raise a UserError."""
    left, sep, right = text.strip().partition("::")
    if not sep or not left.strip() or not right.strip():
        raise UserError(
            f"bad {what} {text.strip()!r}: expected FILE.py::{name} or pkg.mod::{name}"
        )
    return text.strip()


# --------------------------------------------------------------------------------------
# Devices


def describe_inputs(inputs: Inputs) -> str:
    return ", ".join(f"{name}={spec}" for name, spec in inputs)


def check_dimension_names(inputs: Inputs, where: str) -> None:
    """A named dimension becomes a local of the variant's code (`B = x.shape[0]`)
    and an argument of its kernels: it must not be a keyword, a builtin, a name the
    generated code uses for itself (`torch`, `empty`: `text.is_reserved`) nor an
    input's name, which it would hide."""
    names = {name for name, _ in inputs}
    for _, spec in inputs:
        if isinstance(spec, ObjectSpec):
            dims = spec.dims
        elif isinstance(spec, TensorSpec):
            dims = tuple(d for d in spec.shape if isinstance(d, str))
        else:
            continue
        for dim in dims:
            if dim in names:
                why = "the name of an input"
            elif keyword.iskeyword(dim):
                why = "a Python keyword"
            elif is_reserved(dim):
                why = "a name the generated code uses for itself or a builtin"
            else:
                continue
            raise UserError(
                f"bad named dimension {dim!r} in {where}: it is {why}; "
                "choose another name, e.g. B"
            )


def expand_variants(
    inputs: Inputs,
    devices: tuple[str, ...] = DEVICES,
    pinned_device: str | None = None,
) -> tuple[Variant, ...]:
    """The variants of one input set.

    The device is, in order: `pinned_device` (a config variant's `device` key), else the
    device every `@dev` tensor spec agrees on, else one variant per entry of `devices`.
    """
    where = f"variant {describe_inputs(inputs)!r}"
    check_dimension_names(inputs, where)
    pinned = sorted(
        {s.device for _, s in inputs if isinstance(s, TensorSpec) and s.device}
    )
    if len(pinned) > 1:
        raise UserError(
            f"{where} pins tensors to different devices ({', '.join(pinned)});"
            " a variant runs on one device"
        )
    if pinned_device is not None:
        check_device(pinned_device, f" in {where}")
        if pinned and pinned != [pinned_device]:
            raise UserError(
                f"{where} has device = {pinned_device!r} but its tensors are"
                f" pinned to @{pinned[0]}"
            )
    chosen = (pinned_device,) if pinned_device else tuple(pinned) or devices
    return tuple(Variant(inputs, check_device(d, f" in {where}")) for d in chosen)


def collect_variants(
    input_sets: Iterable[tuple[Inputs, str | None]],
    devices: tuple[str, ...],
    trains: Iterable[bool] | None = None,
) -> tuple[Variant, ...]:
    """Expand (inputs, pinned device) pairs in order, each for training where
    `trains` says so; a repeated variant is an error."""
    variants: list[Variant] = []
    input_sets = list(input_sets)
    trains = list(trains) if trains is not None else [False] * len(input_sets)
    for (inputs, pinned_device), train in zip(input_sets, trains, strict=True):
        grads = [n for n, s in inputs if isinstance(s, TensorSpec) and s.grad]
        if grads and not train:
            raise UserError(
                f"variant {describe_inputs(inputs)!r} declares {grads[0]}:grad, "
                "which only a training variant (train = true, --train) computes"
            )
        for variant in expand_variants(inputs, devices, pinned_device):
            variant = replace(variant, train=train)
            if variant in variants:
                raise UserError(f"variant {variant.describe()!r} is given twice")
            variants.append(variant)
    return tuple(variants)


# --------------------------------------------------------------------------------------
# [tool.transpile] in pyproject.toml

_CONFIG_KEYS = ("out", "target")
_TARGET_KEYS = (
    "cuda_graphs",
    "devices",
    "factory",
    "init",
    "source",
    "train",
    "variants",
)
_VARIANT_KEYS = ("cuda_graphs", "device", "train")  # in a variant table, beside inputs


def find_config(start: Path) -> Path:
    """The pyproject.toml that configures a run in `start`, found like black and
    ruff find theirs: the first one in `start` or a parent directory that has a
    `[tool.transpile]` table. Paths in it are relative to its directory."""
    nearest = None
    for folder in (start, *start.parents):
        pyproject = folder / "pyproject.toml"
        if not pyproject.is_file():
            continue
        nearest = nearest or pyproject
        if _table(_read_toml(pyproject, _shown(pyproject, start))) is not None:
            return pyproject
    if nearest is None:
        raise UserError(f"no pyproject.toml found in {start} or any parent directory")
    raise UserError(f"{_shown(nearest, start)} has no [tool.transpile] table")


def _shown(path: Path, base: Path) -> str:
    """`path` as a message names it: relative to `base` if inside it, else whole."""
    return path.relative_to(base).as_posix() if path.is_relative_to(base) else str(path)


def _read_toml(path: Path, where: str) -> dict:
    try:
        return tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UserError(f"no such file: {where}") from None
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as err:
        raise UserError(f"cannot read: {err}", file=where) from None


def _table(data: dict) -> object:
    """`[tool.transpile]` of a parsed pyproject.toml, or None."""
    tool = data.get("tool")
    return tool.get("transpile") if isinstance(tool, dict) else None


def load_config(pyproject: Path, root: Path) -> tuple[Path, tuple[Target, ...]]:
    """Read `[tool.transpile]`: the output dir (as written, relative to root), targets.

    Errors name the file (relative to `root`) and say what is wrong.
    """
    where = _shown(pyproject, root)
    config = _table(_read_toml(pyproject, where))
    if config is None:
        raise UserError(f"{where} has no [tool.transpile] table")
    try:
        return _config_from_toml(config)
    except UserError as err:
        raise UserError(err.message, file=err.file or where) from None


def _config_from_toml(value: object) -> tuple[Path, tuple[Target, ...]]:
    label = "[tool.transpile]"
    config = _check_table(value, _CONFIG_KEYS, label)
    out = config.get("out", "generated")
    if not isinstance(out, str) or not out.strip():
        raise UserError(
            f'{label}: out must be a directory name, e.g. out = "generated"'
        )
    entries = config.get("target")
    if not isinstance(entries, list) or not entries:
        raise UserError(f'{label} has no [[tool.transpile.target]] with source = "..."')
    targets = tuple(_target_from_toml(entry, i) for i, entry in enumerate(entries, 1))
    return Path(out), targets


def _target_from_toml(value: object, index: int) -> Target:
    label = f"[[tool.transpile.target]] #{index}"
    entry = _check_table(value, _TARGET_KEYS, label)
    source = entry.get("source")
    if not isinstance(source, str):
        raise UserError(f'{label} has no source = "FILE.py::Name"')
    label = f"target {check_source(source)!r}"
    init = entry.get("init", {})
    if not isinstance(init, dict) or not all(k.isidentifier() for k in init):
        raise UserError(
            f"{label}: init must be a table of NAME = value, e.g. {{ n = 4 }}"
        )
    factory = entry.get("factory")
    if factory is not None:
        if not isinstance(factory, str):
            raise UserError(f'{label}: factory must be a string "FILE.py::fn"')
        factory = check_source(factory, "factory", "fn")
    if init and factory:
        raise UserError(f"{label}: give init or factory, not both")
    devices = entry.get("devices", list(DEVICES))
    if not isinstance(devices, list) or not devices or not _all_str(devices):
        raise UserError(f'{label}: devices must be a non-empty list, e.g. ["cpu"]')
    devices = tuple(check_device(d, f" in {label}") for d in dict.fromkeys(devices))
    tables = entry.get("variants")
    if not isinstance(tables, list) or not tables:
        raise UserError(f'{label} has no variants = [{{ x = "f32[2,4]" }}, ...]')
    graphs = _cuda_graphs_from_toml(entry, label, False)
    train = _flag_from_toml(entry, "train", label, False)
    input_sets = [
        _variant_from_toml(t, f"{label} variant {j}") for j, t in enumerate(tables, 1)
    ]
    trains = [
        _flag_from_toml(t, "train", f"{label} variant {j}", train)
        for j, t in enumerate(tables, 1)
    ]
    try:
        variants = collect_variants(input_sets, devices, trains)
    except UserError as err:
        raise UserError(f"{label}: {err.message}") from None
    if graphs and all(v.device != "cuda" for v in variants):
        raise UserError(f"{label}: cuda_graphs = true, but it has no cuda variant")
    graphed: list[Variant] = []
    for j, (table, (inputs, device)) in enumerate(zip(tables, input_sets), 1):
        where = f"{label} variant {j}"
        if _cuda_graphs_from_toml(table, where, graphs):
            graphed += _cuda_variants(inputs, device, devices, where, table)
    variants = tuple(replace(v, cuda_graphs=v in graphed) for v in variants)
    return Target(source.strip(), variants, tuple(init.items()), factory)


def _cuda_graphs_from_toml(table: dict, label: str, default: bool) -> bool:
    return _flag_from_toml(table, "cuda_graphs", label, default)


def _flag_from_toml(table: dict, key: str, label: str, default: bool) -> bool:
    value = table.get(key, default)
    if not isinstance(value, bool):
        raise UserError(f"{label}: {key} must be true or false, not {value!r}")
    return value


def _cuda_variants(
    inputs: Inputs,
    device: str | None,
    devices: tuple[str, ...],
    label: str,
    table: dict,
) -> list[Variant]:
    """The cuda variants of a variant table; one that asks for CUDA graphs itself
    must have one."""
    cuda = [v for v in expand_variants(inputs, devices, device) if v.device == "cuda"]
    if not cuda and "cuda_graphs" in table:
        raise UserError(
            f"{label}: cuda_graphs = true needs a cuda variant; this one runs on cpu"
        )
    return cuda


def for_training(target: Target) -> Target:
    """`target` with every variant for training (`--train`)."""
    return replace(
        target, variants=tuple(replace(v, train=True) for v in target.variants)
    )


def with_cuda_graphs(target: Target) -> Target:
    """`target` with CUDA graphs asked for on every cuda variant (`--cuda-graphs`)."""
    variants = tuple(
        replace(v, cuda_graphs=v.device == "cuda") for v in target.variants
    )
    return replace(target, variants=variants)


def _variant_from_toml(table: object, label: str) -> tuple[Inputs, str | None]:
    if not isinstance(table, dict):
        raise UserError(
            f'{label} must be a table of NAME = "TYPE", e.g. {{ x = "f32[2,4]" }}'
        )
    device = table.get("device")
    inputs = []
    for name, text in table.items():
        if name in _VARIANT_KEYS:
            continue
        if not isinstance(text, str) or not name.isidentifier():
            raise UserError(
                f'{label}: {name} must be a TYPE string, e.g. {name} = "f32[2,4]"'
            )
        try:
            inputs.append((name, parse_spec(text)))
        except UserError as err:
            raise UserError(f"{label}: {err.message}") from None
    if device is not None and not isinstance(device, str):
        raise UserError(f'{label}: device must be "cpu" or "cuda"')
    return tuple(inputs), device


def _all_str(values: list) -> bool:
    return all(isinstance(value, str) for value in values)


def _check_table(value: object, known: tuple[str, ...], label: str) -> dict:
    if not isinstance(value, dict):
        raise UserError(f"{label} must be a table")
    for key in value:
        if key not in known:
            raise UserError(
                f"unknown key {key!r} in {label} (known: {', '.join(known)})"
            )
    return value
