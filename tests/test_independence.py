"""Runtime independence: generated modules run with only torch and runtime_shim.

One subprocess, where `transpiler`, `libcst`, `black` and `triton` cannot be imported
(a meta-path finder installed before anything else raises ModuleNotFoundError for
them), imports every `generated.<stem>` and runs each cpu variant through the exported
API on seeded inputs, against the source module run eagerly in the same process.
Triton is blocked too: the CPU path must not need it (DESIGN.md, "The generated
module"). The child uses `tests.helpers`, which imports only torch.
"""

from __future__ import annotations

import json
import subprocess
import sys

from tests.helpers import ROOT, Case, load_cases

BLOCKED = ("transpiler", "libcst", "black", "triton")

CHILD = """
import importlib.abc
import json
import sys

BLOCKED = {blocked!r}


class Blocker(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"{{name}} is blocked", name=name)
        return None


sys.meta_path.insert(0, Blocker())

import importlib
import types
import warnings

import torch

import runtime_shim
from tests import helpers


def fallback(target, misses):
    raise AssertionError(f"{{target}} fell back to eager: {{misses}}")


runtime_shim.warn_fallback = fallback
for case in json.loads(sys.argv[1]):
    inputs = [
        (name, types.SimpleNamespace(value=value) if dtype is None else
         types.SimpleNamespace(dtype=getattr(torch, dtype), shape=tuple(shape)))
        for name, dtype, shape, value in case["inputs"]
    ]
    try:
        generated = importlib.import_module(case["generated"])
        source = importlib.import_module(case["source"])
        eager, gen = helpers.build_pair(
            getattr(source, case["name"]), getattr(generated, case["name"]),
            case["init"])
        dtype = helpers.variant_dtype(inputs)
        values = helpers.make_inputs(inputs, seed=0)
        with torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("error")
            expected = helpers.reference(eager, values, dtype)
            actual = gen(**values)
        helpers.assert_close(actual, expected, dtype, case["label"])
    except Exception as e:
        print(f"FAIL {{case['label']}}: {{type(e).__name__}}: {{e}}")
    else:
        print(f"OK {{case['label']}}")
leaked = sorted(m for m in sys.modules if m.partition(".")[0] in BLOCKED)
print(f"imported: {{leaked}}")
"""


def describe(case: Case) -> dict:
    """What the child needs of a case, as JSON."""
    inputs = []
    for name, spec in case.variant.inputs:
        if hasattr(spec, "dtype"):
            dtype = str(spec.dtype).removeprefix("torch.")
            inputs.append([name, dtype, list(spec.shape), None])
        else:
            inputs.append([name, None, None, spec.value])
    return {
        "label": case.label,
        "generated": f"{case.package}.{case.stem}",
        "source": case.module,
        "name": case.name,
        "init": dict(case.init),
        "inputs": inputs,
    }


def test_generated_modules_run_without_the_transpiler() -> None:
    cases = [case for case in load_cases() if case.device == "cpu"]
    code = CHILD.format(blocked=BLOCKED)
    result = subprocess.run(
        [sys.executable, "-c", code, json.dumps([describe(c) for c in cases])],
        check=False,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    report = result.stdout + result.stderr
    assert result.returncode == 0, report
    # fallback code (a `print` in an example) may write lines of its own
    lines = [
        ln
        for ln in result.stdout.splitlines()
        if ln.startswith(("OK ", "FAIL ", "imported: "))
    ]
    assert lines[:-1] == [f"OK {case.label}" for case in cases], report
    assert lines[-1] == "imported: []", report
