"""`torch.arange` of ints is computed by the kernels that read it, as their own
positions (Note [Ranges in kernels] in passes/schedule.py).

Each case is compared with eager on both backends (outputs and inputs after the
call). The generated wrapper calls `torch.arange` only where a range stays a call
(floats; values past int32), and a range read broadcast by a kernel (position
ids, a causal mask, the positions a scatter of one index per row compares with)
is no buffer of its own.
"""

from __future__ import annotations

import re

import torch

from tests.compile_helpers import compile_source
from tests.devices import REAL_GPU

SOURCE = """
import torch
import torch.nn.functional as F


def forms(x):
    n = x.shape[-1]
    return (
        x + torch.arange(n),
        x * torch.arange(2, n + 2),
        x - torch.arange(n - 1, -1, -1),
        x + torch.arange(-5, 3 * n - 5, 3, dtype=torch.float32),
        x + torch.arange(n, dtype=torch.int32),
    )


def positions(x, table):
    t = x.shape[1]
    pos = torch.arange(0, t, dtype=torch.long)
    return x + F.embedding(pos, table)[None]


def causal(scores):
    t = scores.shape[-1]
    i = torch.arange(t)
    mask = i[:, None] >= i[None, :]
    return scores.masked_fill(~mask, float("-inf")).softmax(-1)


def one_hot_rows(x, target):
    return x.scatter(1, target[:, None], 1.0)


def reduced(x):
    n = x.shape[-1]
    r = torch.arange(n)
    return (x * r).sum(-1), r.sum(), torch.cumsum(r, 0) + x, r


def moved(x):
    n = x.shape[-1]
    r = torch.arange(n)
    return x + r.flip(0), x[:, ::2] + r[1::2]


def calls(x):
    n = x.shape[-1]
    return x + torch.arange(0.0, n / 2, 0.5), torch.arange(0, 2**40, 2**36)
"""

CASES = {
    "forms": lambda g: {"x": torch.randn(3, 16, generator=g)},
    "positions": lambda g: {
        "x": torch.randn(2, 12, 8, generator=g),
        "table": torch.randn(12, 8, generator=g),
    },
    "causal": lambda g: {"scores": torch.randn(2, 10, 10, generator=g)},
    "one_hot_rows": lambda g: {
        "x": torch.randn(6, 9, generator=g),
        "target": torch.randint(0, 9, (6,), generator=g),
    },
    "reduced": lambda g: {"x": torch.randn(4, 33, generator=g)},
    "moved": lambda g: {"x": torch.randn(4, 16, generator=g)},
    "calls": lambda g: {"x": torch.randn(4, 16, generator=g)},
}


def _arange_calls(text: str) -> int:
    """Calls of `torch.arange` in a wrapper's code (its comments quote the
    source)."""
    code = "\n".join(line.split("#")[0] for line in text.splitlines())
    return len(re.findall(r"\b(?:torch|aten)\.arange\b[.\w]*\(", code))


def _called_kernels(c) -> str:
    """The C++ kernels variant `c.cpu` calls, from the module's .cpp file."""
    names = set(re.findall(r'_cpp\.function\("(\w+)"', c.cpu_source))
    parts = re.split(r"\n(?=extern \"C\")", c.cpp_text)
    return "\n".join(
        p
        for p in parts
        if re.search(r"void (\w+)\(", p)
        and re.search(r"void (\w+)\(", p).group(1) in names
    )


def test_ranges_match_eager_and_are_computed_in_kernels(tmp_path) -> None:
    gen = torch.Generator().manual_seed(3)
    inputs = {name: make(gen) for name, make in CASES.items()}
    compiled = compile_source(SOURCE, inputs, tmp_path)
    for name, values in inputs.items():
        compiled[name].check(values, dtype=torch.float32)
    for name in ("forms", "positions", "causal", "one_hot_rows", "reduced", "moved"):
        c = compiled[name]
        for text in (c.cpu_source, c.cuda_source):
            assert _arange_calls(text) == 0, (name, text)
    for text in (compiled["calls"].cpu_source, compiled["calls"].cuda_source):
        assert _arange_calls(text) == 2, text  # floats; past int32


def test_a_range_read_broadcast_is_no_buffer(tmp_path) -> None:
    """Position ids gathered from a table, a causal mask: the kernel that reads
    the range computes it from its own position; no int64 buffer is written."""
    gen = torch.Generator().manual_seed(4)
    inputs = {n: CASES[n](gen) for n in ("positions", "causal")}
    compiled = compile_source(SOURCE, inputs, tmp_path)
    for name in inputs:
        c = compiled[name]
        for text in (c.cpu_source, c.cuda_source):
            assert "torch.int64" not in text and "torch.bool" not in text, text


GATHERS_SOURCE = """
import torch
import torch.nn.functional as F


def position_embedding(ids, wte, wpe):
    t = ids.shape[1]
    pos = torch.arange(0, t, dtype=torch.long)
    return F.embedding(ids, wte) + F.embedding(pos, wpe)


def columns(x):
    return x[:, torch.arange(2, 8, 2)] * 2, x[torch.arange(1, 4)]


def past_the_end(x):
    return x[torch.arange(0, 7)]


def negative(x):
    return x[torch.arange(-3, 2)]
"""


def test_a_gather_by_a_range_is_a_slice(tmp_path) -> None:
    """`wpe(torch.arange(t))`, `x[:, torch.arange(2, 8, 2)]`: the rows or columns
    a range selects, read as a slice by the kernel that uses them (Note [Gathers
    by a range]). A range past the table's end raises as eager does; a negative
    one counts from the end, as eager's indices do."""
    gen = torch.Generator().manual_seed(6)
    x = torch.randn(5, 9, generator=gen)
    inputs = {
        "position_embedding": {
            "ids": torch.randint(0, 50, (2, 12), generator=gen),
            "wte": torch.randn(50, 8, generator=gen),
            "wpe": torch.randn(16, 8, generator=gen),
        },
        "columns": {"x": x},
        "negative": {"x": x},
    }
    compiled = compile_source(GATHERS_SOURCE, inputs, tmp_path)
    for name, values in inputs.items():
        compiled[name].check(values, dtype=torch.float32)
    for fn in (compiled["columns"].cpu, compiled["columns"].cuda):
        y = x.clone()
        _, rows = fn(y)
        rows.fill_(0)  # a gather's result is its own memory, not a view of x
        assert torch.equal(y, x)
    # rows and columns read at addresses of the position alone: no loaded,
    # wrapped or checked index
    assert "wrap_add" not in _called_kernels(compiled["columns"])
    reads = re.findall(r"wpe_ptr\[([^\]]*)\]", compiled["position_embedding"].cpp_text)
    assert reads and not any("tmp" in r for r in reads), reads

    past = compile_source(GATHERS_SOURCE, {"past_the_end": {"x": x}}, tmp_path / "p")
    # on a GPU the check is a device-side assert, as eager's is: it ends the
    # process's CUDA context, so there the Triton variant is not called here
    case = past["past_the_end"]
    for fn in (case.cpu,) if REAL_GPU else (case.cpu, case.cuda):
        try:
            fn(x.clone())
        except Exception as e:  # eager's IndexError, or the check's
            assert "index" in str(e).lower(), e
        else:
            raise AssertionError("an index past the end ran")
