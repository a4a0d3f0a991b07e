"""Eager vs generated, for every target in `[tool.transpile]`: the main report.

    python -m examples.compare [--config pyproject.toml] [--root .]

For each target and each variant whose device is here (cpu always, cuda when available),
it draws seeded random inputs of the variant's TYPE specs, runs the source (eager) and
the generated module (`generated.<file stem>`, or `<out>.<file stem>` for another
`out`), and
prints one row: max abs and max rel error, OK or FAIL. Exit status 1 if any row fails.

Only torch and the generated code are needed: the TYPE grammar is parsed here, not by
importing `transpiler`. The generated-module contract this checks (see DESIGN.md):

- `generated/<stem>.py` exports the source's name;
- a class is a subclass of the source class with the same constructor and state_dict;
- a function has the same signature;
- when no variant's guards match, it runs eager after `warnings.warn(...)`, which this
  script reports as FAIL("fell back to eager").

Low-precision variants (f16/bf16) are compared against eager run in float32 on upcast
inputs and weights, with both sides compared in float32.
"""

from __future__ import annotations

import argparse
import copy
import importlib
import re
import sys
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[1]

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
LOW_PRECISION = (torch.float16, torch.bfloat16)
F32_TOL = (1e-4, 1e-5)  # (rtol, atol)
LOW_TOL = (2e-2, 2e-2)
EXACT_TOL = (0.0, 0.0)  # integer and bool outputs

# ---------------------------------------------------------------------------- specs


@dataclass(frozen=True)
class TensorSpec:
    """`f32[2,4]`, `bf16[8,128]@cuda`, `f32[]`: dtype, static shape, pinned device."""

    dtype: torch.dtype
    shape: tuple[int, ...]
    device: str | None = None

    def __str__(self) -> str:
        name = next(k for k, v in DTYPES.items() if v == self.dtype)
        return f"{name}[{','.join(map(str, self.shape))}]"


@dataclass(frozen=True)
class ScalarSpec:
    """`int=3`, `float=0.5`, `bool=True`, `None`: a Python value passed as is."""

    value: int | float | bool | None

    def __str__(self) -> str:
        return "None" if self.value is None else f"{self.value!r}"


Spec = TensorSpec | ScalarSpec
_TENSOR = re.compile(r"(\w+)\[([\w,\s]*)\](?:@(\w+))?")
_SCALARS: dict[str, Callable[[str], object]] = {
    "int": int,
    "float": float,
    "bool": lambda s: {"True": True, "False": False}[s],
}


DYNAMIC_SIZE = 7


def parse_spec(text: str) -> Spec:
    """Parse one TYPE spec; raise ValueError naming the spec when it is malformed."""
    text = text.strip()
    if text == "None":
        return ScalarSpec(None)
    kind, eq, value = text.partition("=")
    if eq and kind in _SCALARS:
        try:
            return ScalarSpec(_SCALARS[kind](value.strip()))
        except (KeyError, ValueError):
            raise ValueError(f"bad {kind} value in TYPE spec {text!r}") from None
    match = _TENSOR.fullmatch(text)
    if match is None or match[1] not in DTYPES:
        raise ValueError(f"bad TYPE spec {text!r} (expected e.g. f32[2,4] or int=3)")
    dims = [d.strip() for d in match[2].split(",") if d.strip()]
    device = match[3]
    if device is not None and device not in DEVICES:
        raise ValueError(f"unknown device {device!r} in TYPE spec {text!r}")
    # a named (dynamic) dimension is drawn at one size the compiler never saw
    shape = tuple(int(d) if d.isdigit() else DYNAMIC_SIZE for d in dims)
    return TensorSpec(DTYPES[match[1]], shape, device)


# --------------------------------------------------------------------------- config


@dataclass(frozen=True)
class Variant:
    inputs: tuple[tuple[str, Spec], ...]
    devices: tuple[str, ...]

    def describe(self) -> str:
        return ", ".join(f"{name}={spec}" for name, spec in self.inputs)

    @property
    def low_precision(self) -> bool:
        return any(
            isinstance(s, TensorSpec) and s.dtype in LOW_PRECISION
            for _, s in self.inputs
        )


@dataclass(frozen=True)
class Target:
    source: str  # "examples/toy.py::ToyLinear" or "pkg.mod::Name"
    init: tuple[tuple[str, object], ...]
    variants: tuple[Variant, ...]

    @property
    def module(self) -> str:
        path = self.source.split("::")[0].removeprefix("./")
        return path.removesuffix(".py").replace("/", ".")

    @property
    def name(self) -> str:
        return self.source.split("::")[1]

    @property
    def stem(self) -> str:
        return self.module.rsplit(".", 1)[-1]

    @property
    def label(self) -> str:
        return f"{self.stem}::{self.name}"


def parse_variant(table: Mapping[str, object]) -> Variant:
    """One `variants` entry: `{ x = "f32[2,4]", device = "cuda" }`."""
    inputs = []
    for name, value in table.items():
        if name == "device":
            continue
        spec = parse_spec(value) if isinstance(value, str) else ScalarSpec(value)
        inputs.append((name, spec))
    pinned = {s.device for _, s in inputs if isinstance(s, TensorSpec) and s.device}
    device = table.get("device")
    if isinstance(device, str):
        devices: tuple[str, ...] = (device,)
    elif isinstance(device, list):
        devices = tuple(device)
    elif pinned:
        devices = tuple(sorted(pinned))
    else:
        devices = DEVICES
    return Variant(tuple(inputs), devices)


def load_config(path: Path) -> tuple[str, tuple[Target, ...]]:
    """Read `[tool.transpile]`: the generated package (from `out`) and the targets."""
    with path.open("rb") as f:
        section = tomllib.load(f).get("tool", {}).get("transpile")
    if section is None:
        raise ValueError(f"{path}: no [tool.transpile] section")
    package = section.get("out", "generated").strip("/").replace("/", ".")
    targets = []
    for entry in section.get("target", []):
        if "::" not in entry["source"]:
            raise ValueError(f"{path}: target {entry['source']!r} needs FILE.py::Name")
        variants = tuple(parse_variant(v) for v in entry.get("variants", []))
        init = tuple(sorted(entry.get("init", {}).items()))
        targets.append(Target(entry["source"], init, variants))
    return package, tuple(targets)


# --------------------------------------------------------------------------- inputs


def make_inputs(variant: Variant, device: str, seed: int = 0) -> dict[str, object]:
    """Fresh inputs: floats randn, ints randint(0, 10), drawn on cpu, then moved."""
    gen = torch.Generator().manual_seed(seed)
    inputs: dict[str, object] = {}
    for name, spec in variant.inputs:
        if isinstance(spec, ScalarSpec):
            inputs[name] = spec.value
        elif spec.dtype.is_floating_point:
            value = torch.randn(spec.shape, generator=gen).to(spec.dtype)
            inputs[name] = value.to(device)
        else:
            high = 2 if spec.dtype == torch.bool else 10
            value = torch.randint(0, high, spec.shape, generator=gen)
            inputs[name] = value.to(device=device, dtype=spec.dtype)
    return inputs


def upcast(value: object) -> object:
    """f16/bf16 tensors to float32; anything else unchanged."""
    if isinstance(value, torch.Tensor) and value.dtype in LOW_PRECISION:
        return value.float()
    return value


# ------------------------------------------------------------------------ comparing


@dataclass(frozen=True)
class Check:
    max_abs: float
    max_rel: float
    ok: bool
    note: str = ""


def tolerance(dtype: torch.dtype, low_precision: bool) -> tuple[float, float]:
    if not (dtype.is_floating_point or dtype.is_complex):
        return EXACT_TOL
    return LOW_TOL if low_precision or dtype in LOW_PRECISION else F32_TOL


def flatten(value: object) -> list[object]:
    """Leaves of nested tuples/lists/dicts, in order."""
    if isinstance(value, (tuple, list)):
        return [leaf for item in value for leaf in flatten(item)]
    if isinstance(value, dict):
        return [leaf for key in sorted(value) for leaf in flatten(value[key])]
    return [value]


def compare_tensors(
    actual: torch.Tensor, expected: torch.Tensor, low_precision: bool
) -> Check:
    if actual.shape != expected.shape:
        note = f"shape {tuple(actual.shape)} != {tuple(expected.shape)}"
        return Check(float("inf"), float("inf"), False, note)
    rtol, atol = tolerance(expected.dtype, low_precision)
    work = torch.float64 if torch.float64 in (actual.dtype, expected.dtype) else None
    a = actual.detach().to(device=expected.device, dtype=work or torch.float32)
    e = expected.detach().to(dtype=work or torch.float32)
    diff = torch.where(a == e, 0.0, (a - e).abs())  # equal infinities: no error
    diff = torch.where(a.isnan() & e.isnan(), 0.0, diff)
    diff = torch.where(diff.isnan(), float("inf"), diff)
    if diff.numel() == 0:
        return Check(0.0, 0.0, True)
    bound = torch.where(e.isfinite(), atol + rtol * e.abs(), 0.0)  # inf/nan: exact
    max_abs = diff.max().item()
    rel = torch.where(diff == 0, 0.0, diff / e.abs().clamp_min(max(atol, 1e-12)))
    max_rel = rel.nan_to_num(nan=float("inf"), posinf=float("inf")).max().item()
    return Check(max_abs, max_rel, bool(((diff == 0) | (diff <= bound)).all()))


def compare_outputs(actual: object, expected: object, low_precision: bool) -> Check:
    """Compare nested outputs leaf by leaf; report the worst leaf."""
    a_leaves, e_leaves = flatten(actual), flatten(expected)
    if len(a_leaves) != len(e_leaves):
        return Check(float("inf"), float("inf"), False, "different number of outputs")
    worst = Check(0.0, 0.0, True)
    for a, e in zip(a_leaves, e_leaves):
        tensors = isinstance(a, torch.Tensor), isinstance(e, torch.Tensor)
        if all(tensors):
            check = compare_tensors(a, e, low_precision)
        elif not any(tensors) and a == e:
            check = Check(0.0, 0.0, True)
        else:
            check = Check(float("inf"), float("inf"), False, f"{a!r} != {e!r}")
        worst = Check(
            max(worst.max_abs, check.max_abs),
            max(worst.max_rel, check.max_rel),
            worst.ok and check.ok,
            worst.note or check.note,
        )
    return worst


def dtype_mismatch(actual: object, expected: object) -> str:
    """A note when output dtypes differ (the f32 reference is compared, not eager's)."""
    for a, e in zip(flatten(actual), flatten(expected)):
        tensors = isinstance(a, torch.Tensor) and isinstance(e, torch.Tensor)
        if tensors and a.dtype != e.dtype:
            return f"dtype {a.dtype} != eager's {e.dtype}"
    return ""


# -------------------------------------------------------------------------- running


def is_module_class(obj: object) -> bool:
    return isinstance(obj, type) and issubclass(obj, torch.nn.Module)


def build_eager(
    source: object, init: Mapping[str, object], device: str
) -> Callable[..., object]:
    """The source function, or a seeded `Source(**init)` on `device` in eval mode."""
    if not is_module_class(source):
        return source
    torch.manual_seed(0)
    return source(**init).to(device).eval()


def build_generated(
    generated: object,
    eager: Callable[..., object],
    init: Mapping[str, object],
    device: str,
) -> Callable[..., object]:
    """The generated function, or `Generated(**init)` holding eager's state_dict."""
    if not isinstance(eager, torch.nn.Module):
        return generated
    if not (isinstance(generated, type) and issubclass(generated, type(eager))):
        raise TypeError(f"{generated!r} is not a subclass of {type(eager)!r}")
    gen = generated(**init)
    gen.load_state_dict(eager.state_dict())
    return gen.to(device).eval()


def reference(
    eager: Callable[..., object], inputs: Mapping[str, object], low_precision: bool
) -> object:
    """Eager output; for f16/bf16 variants, eager in f32 on upcast inputs/weights."""
    if not low_precision:
        return eager(**inputs)
    if isinstance(eager, torch.nn.Module):
        eager = copy.deepcopy(eager).float()
    return eager(**{name: upcast(value) for name, value in inputs.items()})


def call_watching(fn: Callable[..., object], inputs: Mapping[str, object]):
    """Call `fn(**inputs)`; return (output, messages of the warnings it raised)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn(**inputs)
    return out, [str(w.message).splitlines()[0] for w in caught]


def fallback_note(generated_warnings: list[str], eager_warnings: list[str]) -> str:
    """Warnings the generated call raised beyond eager's own: a fallback, or a bug."""
    extra = [m for m in generated_warnings if m not in eager_warnings]
    if not extra:
        return ""
    if re.search(r"eager|guard|fall", extra[0], re.IGNORECASE):
        return f"fell back to eager: {extra[0]}"
    return f"generated code warned: {extra[0]}"


def load_source(target: Target) -> object:
    try:
        return getattr(importlib.import_module(target.module), target.name)
    except (ImportError, AttributeError) as e:
        raise ImportError(f"cannot load source {target.source}: {e}") from e


def load_generated(package: str, target: Target) -> object:
    """The generated counterpart of `target`; ImportError says what is missing."""
    module_name = f"{package}.{target.stem}"
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as e:
        if e.name and (module_name + ".").startswith(e.name + "."):
            raise ImportError(f"{module_name} not generated (run `transpile`)") from e
        raise
    if not hasattr(module, target.name):
        raise ImportError(f"{module_name} does not export {target.name}")
    return getattr(module, target.name)


@dataclass(frozen=True)
class Row:
    target: str
    device: str
    spec: str
    max_abs: str
    max_rel: str
    status: str

    @property
    def failed(self) -> bool:
        return self.status.startswith("FAIL")


def run_variant(
    target: Target, variant: Variant, device: str, source: object, generated: object
) -> Row:
    def row(status: str, check: Check | None = None) -> Row:
        errors = ("-", "-")
        if check is not None:
            errors = (f"{check.max_abs:.2e}", f"{check.max_rel:.2e}")
        return Row(target.label, device, variant.describe(), *errors, status)

    inputs = make_inputs(variant, device)
    low = variant.low_precision
    with torch.no_grad():
        try:
            eager = build_eager(source, dict(target.init), device)
            gen = build_generated(generated, eager, dict(target.init), device)
            expected = reference(eager, inputs, low)
        except Exception as e:
            return row(f"FAIL(eager reference raised {type(e).__name__}: {e})")
        try:
            native, eager_warnings = call_watching(eager, inputs)
        except Exception:
            native, eager_warnings = None, []  # dtypes that cuda eager rejects)
        try:
            actual, gen_warnings = call_watching(gen, inputs)
        except Exception as e:
            return row(f"FAIL(generated raised {type(e).__name__}: {e})")
    note = fallback_note(gen_warnings, eager_warnings)
    if note:
        return row(f"FAIL({note})")
    check = compare_outputs(actual, expected, low)
    note = check.note or (dtype_mismatch(actual, native) if native is not None else "")
    if not check.ok or note:
        return row(f"FAIL({note or 'outside tolerance'})", check)
    return row("OK", check)


def run_target(package: str, target: Target) -> list[Row]:
    rows = []
    try:
        source = load_source(target)
        generated = load_generated(package, target)
    except Exception as e:
        message = str(e) if isinstance(e, ImportError) else f"{type(e).__name__}: {e}"
        return [Row(target.label, "-", "-", "-", "-", f"FAIL({message})")]
    for variant in target.variants:
        for device in variant.devices:
            if device == "cuda" and not torch.cuda.is_available():
                rows.append(
                    Row(target.label, device, variant.describe(), "-", "-", "SKIP")
                )
                continue
            rows.append(run_variant(target, variant, device, source, generated))
    return rows


def format_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> str:
    widths = [max(len(r[i]) for r in [header, *rows]) for i in range(len(header))]
    lines = ["  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows]
    head = "  ".join(c.ljust(w) for c, w in zip(header, widths)).rstrip()
    return "\n".join([head, "  ".join("-" * w for w in widths), *lines])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--config", type=Path, default=ROOT / "pyproject.toml")
    parser.add_argument(
        "--root", type=Path, default=ROOT, help="directory target paths are relative to"
    )
    args = parser.parse_args(argv)
    sys.path.insert(0, str(args.root.resolve()))
    try:
        package, targets = load_config(args.config)
    except (OSError, ValueError, KeyError, tomllib.TOMLDecodeError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    rows = [row for target in targets for row in run_target(package, target)]
    header = ("target", "device", "variant", "max abs", "max rel", "status")
    print(format_table(header, [tuple(vars(r).values()) for r in rows]))
    failed = sum(r.failed for r in rows)
    skipped = sum(r.status == "SKIP" for r in rows)
    print(f"\n{len(rows) - failed - skipped} ok, {failed} failed, {skipped} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
