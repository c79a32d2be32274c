"""Field names for error messages: the closest known field to a misspelt one (``numStep`` → ``numSteps``), and the
fields a pydantic model accepts at an error's location.

The API server refuses an unknown field before any CEL rule runs (strict field validation, ``kubectl``'s default
since 1.27: ``unknown field "spec.speculative.numStep"``) without a suggestion; ``render`` and the CLI say the same
and name the field meant, from the model's camelCase aliases (what a YAML file writes).
"""

from __future__ import annotations

import difflib
import types
import typing
from collections.abc import Iterable, Sequence
from typing import Any

from pydantic import BaseModel

CUTOFF = 0.6
"""``difflib`` similarity a known field needs to be suggested (``windowSeconds`` → ``rollbackWindowSeconds`` is
0.76; ``foo`` → ``port`` 0.57: none)."""


def did_you_mean(name: str, known: Iterable[str]) -> str:
    """``"; did you mean numSteps?"`` for the known field closest to ``name`` (case ignored), ``""`` when none is
    close enough."""
    by_lower = {k.lower(): k for k in known}
    match = difflib.get_close_matches(name.lower(), list(by_lower), n=1, cutoff=CUTOFF)
    return f"; did you mean {by_lower[match[0]]}?" if match else ""


def _inner(tp: Any) -> list[Any]:
    """The types ``tp`` stands for: Annotated and Optional/Union unwrapped."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _inner(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        return [t for arg in typing.get_args(tp) if arg is not type(None) for t in _inner(arg)]
    return [tp]


def fields_at(root: type[BaseModel], loc: Sequence[str | int]) -> list[str]:
    """The camelCase names (aliases) of the fields accepted at ``loc`` (a pydantic error location, aliases and list
    indices) below model ``root``; empty when ``loc`` does not lead to a model (a free-form map, a union)."""
    current: list[Any] = [root]
    for part in loc:
        following: list[Any] = []
        for tp in (t for c in current for t in _inner(c)):
            origin, args = typing.get_origin(tp), typing.get_args(tp)
            if isinstance(tp, type) and issubclass(tp, BaseModel) and isinstance(part, str):
                following += [f.annotation for n, f in tp.model_fields.items() if part in (n, f.alias)]
            elif origin in (list, tuple) and isinstance(part, int) and args:
                following.append(args[0])
            elif origin is dict and isinstance(part, str) and len(args) == 2:
                following.append(args[1])
        current = following
    return [f.alias or n for tp in (t for c in current for t in _inner(c))
            if isinstance(tp, type) and issubclass(tp, BaseModel) for n, f in tp.model_fields.items()]
