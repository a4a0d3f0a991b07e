"""`x[mask] op= v` without a graph break (Note [Masked updates] in
frontend/interpreter.py).

A table of augmented assignments through a bool mask over x's leading dimensions
(all of them, some, one), in f32, int64 and bool, by a number or a tensor over
the dimensions after the mask's: each compiled with no graph break and no call
into PyTorch for the update, against eager, outputs and inputs after the call.
Those the note leaves alone keep eager's behaviour: a value for each selected
element is data-dependent (compiled code falls back, and matches), and a sum
that eager cannot cast back into x raises as eager does.
"""

from __future__ import annotations

import pytest
import torch

from tests.compile_helpers import compile_source

SOURCE = """
import torch


def updates(x, y, row, scale):
    x[x > 1] += 1
    x[x < -1] *= scale
    y[y[:, 0, 0] > 0] -= row
    y[y < 0] /= 2
    y[y.abs() < 0.1] **= 2
    return x * 2, y


def integers(i, j, rows):
    i[i > 3] += 10
    i[i < 0] -= j
    i[i % 2 == 0] *= -1
    i[rows] += torch.arange(4)
    return i


def bits(b, c, k):
    b[c] |= k
    b[~c] &= k
    b[b[:, 0]] ^= torch.tensor([True, False, True, False])
    return b


def per_row(x, m, v):
    # a value for each selected row: data-dependent, eager's code
    y = x * 2
    y[m] += v
    return y + 1
"""


def inputs() -> dict:
    gen = torch.Generator().manual_seed(11)

    def randn(*shape):
        return torch.randn(*shape, generator=gen) * 2

    return {
        "updates": {
            "x": randn(4, 5),
            "y": randn(6, 3, 2),
            "row": randn(3, 2),
            "scale": torch.tensor(0.25),
        },
        "integers": {
            "i": torch.randint(-8, 8, (5, 4), generator=gen),
            "j": torch.tensor(3),
            "rows": torch.tensor([True, False, False, True, True]),
        },
        "bits": {
            "b": torch.rand(3, 4, generator=gen) > 0.5,
            "c": torch.rand(3, 4, generator=gen) > 0.5,
            "k": torch.tensor(True),
        },
        "per_row": {
            "x": randn(4, 3),
            "m": torch.tensor([True, False, True, True]),
            "v": randn(3, 3),
        },
    }


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    cases = {k: v for k, v in inputs().items() if k != "per_row"}
    return compile_source(SOURCE, cases, tmp_path_factory.mktemp("masked_updates"))


@pytest.mark.parametrize("name", ["updates", "integers", "bits"])
def test_masked_updates_compile_without_a_break(compiled, name: str) -> None:
    case = compiled[name]
    case.check(inputs()[name])
    doc = case.module.__doc__
    section = doc[doc.index(f"    {name} (") :].split("\n\n")[0]
    assert "runs the source" not in section and "graph break" not in section, section
    for side in (case.cpu_source, case.cuda_source):
        assert "index_put" not in side and "nonzero" not in side, side


def test_a_value_per_selected_element_keeps_eager_code(tmp_path) -> None:
    """Its shape is how many rows the mask selects: a graph break, whose eager
    code gives eager's result."""
    case = compile_source(SOURCE, {"per_row": inputs()["per_row"]}, tmp_path)
    case["per_row"].check(inputs()["per_row"])
    assert "graph break" in case["per_row"].module.__doc__


def test_a_sum_eager_cannot_cast_back_raises(tmp_path) -> None:
    source = "def f(i):\n    i[i > 0] += 0.5\n    return i\n"
    args = {"i": torch.arange(-3, 3)}
    with pytest.raises(RuntimeError):
        torch.arange(-3, 3)[torch.arange(-3, 3) > 0] += 0.5  # eager's error
    case = compile_source(source, {"f": args}, tmp_path)["f"]
    for variant in (case.cpu, case.cuda):
        with pytest.raises(RuntimeError):
            variant(i=torch.arange(-3, 3))
