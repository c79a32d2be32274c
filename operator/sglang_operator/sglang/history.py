"""The history of every launch flag across the known releases, derived from the flag tables (no hand-kept list).

For each option string ever declared: the releases in which it parses, and — when it stopped parsing or became a
deprecated alias — its successor(s). Successors come from the tables only:

1. ``new_flag`` of the deprecated alias SGLang declared for it (``DeprecatedAliasStoreAction(new_flag=...)``,
   ``DeprecatedStoreTrueAction``, ``DeprecatedStoreConstAction``; ``sglang/srt/arg_groups/argparse_actions.py``),
   e.g. ``--mamba-scheduler-strategy`` → ``--mamba-radix-cache-strategy`` (alias 0.5.14–0.5.19), or the first
   flag SGLang's own refusal text names (``DeprecatedAction`` raising its help, 0.4.6–0.5.7, or its
   ``error_message``, 0.5.18–0.5.19: "--enable-flashmla is deprecated. Please use '--attention-backend
   flashmla' instead.");
2. the other spellings of the same argparse action in the last release that had it (a dropped alias);
3. options of the release that dropped it writing to the same ``dest``;
4. once one of those found a rename: options of the dropping release that extend the old name (``--old-*``),
   the candidates argparse lists for it ("ambiguous option: --cuda-graph-max-bs could match
   --cuda-graph-max-bs-decode, --cuda-graph-max-bs-prefill").
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cache
from typing import Any

from sglang_operator.sglang import catalog
from sglang_operator.sglang._version import SGLangVersion

__all__ = ["OptionHistory", "history", "predecessors", "renames", "successors_in"]

_DEPRECATED_ALIASES = ("DeprecatedAliasStoreAction", "DeprecatedStoreTrueAction", "DeprecatedStoreConstAction")
_FLAG = re.compile(r"--[a-z0-9][a-z0-9-]*")
_BRACES = re.compile(r"(--[a-z0-9-]*)\{([a-z0-9,_-]+)\}")


@dataclass(frozen=True)
class OptionHistory:
    """One option string over the known releases.

    ``releases``: where it parses (as declared, no abbreviation). ``deprecated_in``: first release of the final run
    in which it is a deprecated alias of its successor. ``dropped_in``: first release after the last one that
    declared it (``None`` while the newest release still has it). ``successors``: its replacement(s), possibly
    empty (removed without replacement).
    """

    option: str
    releases: tuple[SGLangVersion, ...]
    successors: tuple[str, ...] = ()
    deprecated_in: SGLangVersion | None = None
    dropped_in: SGLangVersion | None = None

    @property
    def first(self) -> SGLangVersion:
        return self.releases[0]

    @property
    def last(self) -> SGLangVersion:
        return self.releases[-1]

    def parses_in(self, version: SGLangVersion) -> bool:
        return version in self.releases


def _tables() -> list[tuple[SGLangVersion, list[dict[str, Any]]]]:
    return [(r.version, catalog.flag_records(r.version)) for r in catalog.releases()]


def _expand(text: str) -> str:
    """``--x-{decode,prefill}=disabled`` → ``--x-decode --x-prefill=disabled``."""
    return _BRACES.sub(lambda m: " ".join(m[1] + alt for alt in m[2].split(",")), text)


def _named_successors(rec: dict[str, Any], option: str) -> list[str]:
    """The replacement(s) SGLang names for a deprecated option (see the module docstring, rule 1)."""
    kwargs = rec.get("action_kwargs", {})
    if kwargs.get("new_flag"):
        return _FLAG.findall(_expand(str(kwargs["new_flag"])))
    for key in ("raises", "error_message"):
        if kwargs.get(key):
            return [f for f in _FLAG.findall(_expand(str(kwargs[key]))) if f != option][:1]
    return []


def _deprecated(rec: dict[str, Any], option: str) -> bool:
    return bool(_named_successors(rec, option)) and (
        rec["action"] in _DEPRECATED_ALIASES or rec["action"] == "DeprecatedAction")


@cache
def history() -> dict[str, OptionHistory]:
    """Every option string ever declared → its :class:`OptionHistory`."""
    tables = _tables()
    order = [v for v, _ in tables]
    by_release: dict[SGLangVersion, dict[str, dict[str, Any]]] = {
        v: {o: rec for rec in recs for o in rec["options"]} for v, recs in tables
    }
    seen: dict[str, list[SGLangVersion]] = {}
    for v in order:
        for o in by_release[v]:
            seen.setdefault(o, []).append(v)
    out: dict[str, OptionHistory] = {}
    for option, present in seen.items():
        last = present[-1]
        idx = order.index(last)
        dropped = order[idx + 1] if idx + 1 < len(order) else None
        rec = by_release[last][option]
        deprecated_in = None
        succ: list[str] = []
        if _deprecated(rec, option):
            start = len(present) - 1  # first release of the final run in which it is deprecated
            while start > 0 and _deprecated(by_release[present[start - 1]][option], option):
                start -= 1
            deprecated_in = present[start]
            for v in present[start:]:  # what each release named (a successor may itself be renamed later)
                succ += [f for f in _named_successors(by_release[v][option], option) if f in by_release[v]]
        if dropped is not None:
            now = by_release[dropped]
            succ += [o for o in rec["options"] if o != option and o in now]
            succ += [o for o, r in now.items()
                     if r["dest"] == rec["dest"] and o != option and not o.startswith("--no-")]
            if succ:
                succ += [o for o in now if o.startswith(option + "-")]
        out[option] = OptionHistory(option, tuple(present), tuple(dict.fromkeys(succ)), deprecated_in, dropped)
    return out


def renames() -> list[OptionHistory]:
    """Every option that became a deprecated alias or stopped parsing and has successor(s), by option."""
    return sorted((h for h in history().values() if h.successors), key=lambda h: h.option)


def successors_in(option: str, version: SGLangVersion, _seen: frozenset[str] = frozenset()) -> tuple[str, ...]:
    """The successor(s) of ``option`` that parse in ``version``, following renames of renames."""
    h = history().get(option)
    if h is None:
        return ()
    out: list[str] = []
    for s in h.successors:
        if s in _seen:
            continue
        sh = history().get(s)
        if sh is not None and sh.parses_in(version):
            out.append(s)
        else:
            out += successors_in(s, version, _seen | {option})
    return tuple(dict.fromkeys(out))


def predecessors(option: str) -> tuple[str, ...]:
    """Options whose successors include ``option`` (``--mamba-radix-cache-strategy`` → the old spelling)."""
    return tuple(h.option for h in renames() if option in h.successors)


def present_in(options: Iterable[str], version: SGLangVersion) -> tuple[str, ...]:
    """The ``options`` that parse in ``version``."""
    hist = history()
    return tuple(o for o in options if o in hist and hist[o].parses_in(version))
