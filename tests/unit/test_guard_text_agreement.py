"""The guard a failing check names at run time (runtime_shim.modules.check_text,
in the warning that a call runs the source) is the guard the generated code writes
(codegen.guards.check): two spellings, one in the compiler's escaping of generated
code and one in the runtime that has no compiler, which must agree for every value
a guard compares with."""

from __future__ import annotations

import pytest
import torch

from runtime_shim.modules import check_text
from transpiler.codegen.guards import check

VALUES = [
    None,
    True,
    False,
    0,
    -3,
    2**70,
    1.5,
    -0.0,
    1e-05,
    float("inf"),
    float("-inf"),
    float("nan"),
    "a",
    'q"uote',
    "it's",
    "\u00b2",
    "tab\there",
    "new\nline",
    "back\\slash",
    "\u00e9t\u00e9",
    (1,),
    (1, 2),
    [1, "x"],
    {"k": 1.0, "n": None},
    torch.float32,
    torch.bfloat16,
    (torch.float16, None),
]


@pytest.mark.parametrize("value", VALUES, ids=[repr(v) for v in VALUES])
def test_the_runtime_names_the_guard_the_code_writes(value) -> None:
    assert check_text("m.attr", value) == check("m.attr", value, readable=True)
