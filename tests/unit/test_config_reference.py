"""The README's configuration reference documents exactly the keys that
`[tool.transpile]` accepts (transpiler/options.py), every dtype and scalar of a
TYPE, and its example is a valid configuration."""

from __future__ import annotations

import re
from pathlib import Path

from transpiler import options
from transpiler.options import tomllib

ROOT = Path(__file__).resolve().parents[2]
TITLE = "### Configuration reference"


def reference() -> str:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert TITLE in text
    start = text.index(TITLE) + len(TITLE)
    return re.split(r"\n##+ ", text[start:], maxsplit=1)[0]


def documented_keys(caption: str) -> set[str]:
    """The keys (backquoted first cells) of the table after the line `caption`."""
    lines = reference().splitlines()
    assert caption in lines, caption
    rows = []
    for line in lines[lines.index(caption) + 1 :]:
        if rows and not line.startswith("|"):
            break
        if line.startswith("|"):
            rows.append(line)
    cells = [row.split("|")[1].strip() for row in rows[2:]]  # past head and rule
    return {cell.strip("`") for cell in cells if re.fullmatch(r"`\w+`", cell)}


def test_every_key_options_accepts_is_documented() -> None:
    tables = {
        "`[tool.transpile]`:": options._CONFIG_KEYS,
        "`[[tool.transpile.target]]`, one per target:": options._TARGET_KEYS,
        "A variant table, one entry of `variants`:": options._VARIANT_KEYS,
    }
    for caption, accepted in tables.items():
        assert documented_keys(caption) == set(accepted), caption


def test_every_dtype_and_scalar_of_a_type_is_documented() -> None:
    text = reference()
    assert f"dtypes: {' '.join(options.DTYPES)} |" in text
    for kind in options._SCALARS:
        assert f"`{kind}=" in text, kind
    assert "`None`" in text


def test_the_example_is_a_valid_configuration() -> None:
    (example,) = re.findall(r"```toml\n(.*?)```", reference(), flags=re.S)
    config = tomllib.loads(example)["tool"]["transpile"]
    out, targets = options._config_from_toml(config)  # a UserError if it is not
    assert (out, len(targets)) == (Path("generated"), len(config["target"]))
