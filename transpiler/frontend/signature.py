"""The target's signature as the generated module declares it.

The exported function (or `forward`) takes the parameters the source declares, as it
declares them: positional-only, keyword-only and variadic ones alike. What it does not
copy is text that means something only in the source's module: annotations, and
defaults other than plain literals (see `Signature`).
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from dataclasses import dataclass

from transpiler.text import (
    is_plain,
    is_reserved,
    py_literal,
    py_str,
    unreserved,
)


class Code(str):
    """Python source that stands for itself where `inspect` writes a default's
    repr (`Signature.text`)."""

    def __repr__(self) -> str:
        return str(self)


FROM_SOURCE = Code("<the source's own default>")  # see `Signature`


@dataclass(frozen=True)
class Signature:
    """The target's parameters (a forward's, `self` apart) as the generated module
    declares them: positional-only, keyword-only and variadic ones as the source
    declares them; no annotations (the names they use need not be importable in
    the generated module); a default that is a plain literal as that literal, any
    other (`dim=DEFAULT_DIM`, `act=nn.GELU()`) as the source function's own object,
    `FROM_SOURCE`, read from the module's defaults table (see `defaults_table`):
    evaluating the source's text again could give another object, or fail.

    The functions the wrapper writes for itself receive a parameter whose name the
    generated code has a use for (`torch`, `empty`, `sum`: `text.is_reserved`) under
    another name, `local_names`: `def _cpu_0(self, x, empty_)`."""

    params: tuple[inspect.Parameter, ...]  # defaults: a `Code` literal or FROM_SOURCE
    self_name: str = "self"  # a forward's first parameter, as the source names it

    @staticmethod
    def of(fn, drop_self: bool) -> Signature:
        """The signature of `fn` (with `drop_self`, a forward: without `self`)."""
        params = list(inspect.signature(fn, follow_wrapped=True).parameters.values())
        self_name = "self"
        if drop_self:
            self_name = params.pop(0).name
        return Signature(tuple(_bare(p) for p in params), self_name)

    @property
    def names(self) -> list[str]:
        return [p.name for p in self.params]

    def text(self, table: str, names: Mapping[str, str] | None = None) -> str:
        """The parameter list, `x, /, mask=None, *, act=_DEFAULTS_Net["act"]`,
        where `table` names the defaults table; with `names`, each parameter under
        the name it maps to (`local_names`)."""
        params = list(self.params)
        for i, p in enumerate(params):
            if p.default is FROM_SOURCE:
                p = p.replace(default=Code(f"{table}[{py_str(p.name)}]"))
            params[i] = p.replace(name=names[p.name]) if names else p
        return str(inspect.Signature(params))[1:-1]

    def call(
        self, held: Mapping[str, str] | None = None, to: Mapping[str, str] | None = None
    ) -> str:
        """The arguments passing each parameter on, as the source takes them, from
        the locals `held` (default: the parameters' own names) to a function whose
        parameters are named `to` (default: the same)."""
        held = held or {n: n for n in self.names}
        to = to or {n: n for n in self.names}
        args = []
        for p in self.params:
            value = held[p.name]
            if p.kind is p.VAR_POSITIONAL:
                args.append(f"*{value}")
            elif p.kind is p.VAR_KEYWORD:
                args.append(f"**{value}")
            elif p.kind is p.KEYWORD_ONLY:
                args.append(f"{to[p.name]}={value}")
            else:
                args.append(value)
        return ", ".join(args)

    def local_names(self, avoid: frozenset[str] = frozenset()) -> dict[str, str]:
        """Each parameter's name inside the wrapper's own functions: its own unless
        the generated code has a use for it (or it is in `avoid`), else `name_`,
        `name_1`, ... as `GraphBuilder.fresh` names graph values (`v_fallback_0`
        for `_fallback_0`: see `text.unreserved`)."""
        taken = set(self.names) | avoid
        out = {}
        for name in self.names:
            if not (is_reserved(name) or name in avoid):
                out[name] = name
                continue
            base = unreserved(name)
            new, n = base + "_" * (base == name), 0
            while new in taken or is_reserved(new):
                n += 1
                new = f"{base}_{n}"
            taken.add(new)
            out[name] = new
        return out


def _bare(p: inspect.Parameter) -> inspect.Parameter:
    """A parameter without its annotation; its default as `Signature` keeps it."""
    p = p.replace(annotation=p.empty)
    if p.default is p.empty:
        return p
    if is_plain(p.default):
        return p.replace(default=Code(py_literal(p.default)))
    return p.replace(default=FROM_SOURCE)
