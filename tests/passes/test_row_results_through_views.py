"""A reduction's result read back through every kind of view, by a pointwise op
and a second reduction, against eager on both backends.

A result computed in a row's kernel is there for the row's own elements alone:
read through a view that broadcasts it along the row (`m[:, None]`), it stays in
the kernel; through one that lays it out along the other dimension (`m[None, :]`,
`k.t()`, `k.expand(n, n).t()`), each element needs another row's result, read
from memory (`_virtual_ok` in passes/fuse.py). The inputs are square so that
every such view broadcasts, and rows and columns are both reduced.
"""

from __future__ import annotations

import pytest
import torch

from tests.compile_helpers import compile_source

VIEWS = {
    "none_last": "m[:, None]",
    "none_first": "m[None, :]",
    "view_row": "m.view(1, -1)",
    "view_column": "m.view(-1, 1)",
    "unsqueeze_first": "m.unsqueeze(0)",
    "kept_t": "k.t()",
    "kept_view_row": "k.view(1, -1)",
    "kept_transpose": "k.transpose(0, 1)",
    "expanded": "m.expand({n}, {n})",
    "kept_expanded": "k.expand({n}, {n})",
    "kept_expanded_t": "k.expand({n}, {n}).t()",
}
N = 8


def _source() -> tuple[str, dict]:
    lines, functions = ["import torch\n"], {}
    for dim in (1, 0):
        for name, view in VIEWS.items():
            read = view.format(n=N)
            lines.append(
                f"def dim{dim}_{name}(x, c):\n"
                f"    m = x.amax({dim})\n"
                f"    k = x.amax({dim}, keepdim=True)\n"
                f"    return (c - {read}).sum({dim}), (c * {read}).amax({1 - dim})\n"
            )
            functions[f"dim{dim}_{name}"] = {
                "x": torch.randn(N, N),
                "c": torch.randn(N, N),
            }
    return "\n".join(lines), functions


@pytest.fixture(scope="module")
def compiled(tmp_path_factory):
    source, functions = _source()
    return compile_source(source, functions, tmp_path_factory.mktemp("row_views"))


@pytest.mark.parametrize("dim", [1, 0])
@pytest.mark.parametrize("view", sorted(VIEWS))
def test_row_result_through_view(compiled, dim: int, view: str) -> None:
    gen = torch.Generator().manual_seed(dim * 100 + sorted(VIEWS).index(view))
    inputs = {
        "x": torch.randn(N, N, generator=gen),
        "c": torch.randn(N, N, generator=gen),
    }
    compiled[f"dim{dim}_{view}"].check(inputs)
