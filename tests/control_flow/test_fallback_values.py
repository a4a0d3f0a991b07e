"""A value computed by fallback code (`s = x.sum().item()`) is known only at run
time: text made from it (`f"{s}"`, `"%r" % (s,)`) is fallback code too, never a
constant of the generated module, and no message names the compiler's own stand-in
for such a value (its class, `OpaqueValue`, or its repr)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.compile_helpers import compile_source

SOURCE = """\
def text(x):
    s = x.sum().item()
    a = f"sum {s}"
    b = "%r and %s" % ([s], s)
    c = f"{s:.2f}"
    return x + 1, a, b, c


def raises(x):
    s = x.sum().item()
    message = f"sum {s:.1f}"
    if x.shape[0] == 4:
        raise ValueError(message)
    return x
"""

INTERNAL = ("OpaqueValue", "run-time value")


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory):
    root = tmp_path_factory.mktemp("fallback_values")
    x = torch.ones(4)
    return compile_source(SOURCE, {"text": {"x": x}, "raises": {"x": x}}, root)


def test_text_of_a_fallback_value_is_made_at_run_time(
    compiled, triton_interpreter: None
) -> None:
    x = torch.arange(4.0)
    text = compiled["text"]
    expected = text.eager(x)
    assert expected[1:] == ("sum 6.0", "[6.0] and 6.0", "6.00")
    for variant in (text.cpu, text.cuda):
        got = variant(x)
        torch.testing.assert_close(got[0], expected[0])
        assert got[1:] == expected[1:]


def test_an_error_with_its_text_is_raised_at_run_time(
    compiled, triton_interpreter: None
) -> None:
    raises = compiled["raises"]
    for variant in (raises.cpu, raises.cuda):
        with pytest.raises(ValueError, match=r"^sum 6\.0$"):
            variant(torch.arange(4.0))


def test_no_message_names_the_compilers_stand_in(compiled) -> None:
    generated = Path(compiled["text"].module.__file__).read_text(encoding="utf-8")
    assert "formats a value computed by fallback code as text" in generated
    assert not [word for word in INTERNAL if word in generated]
