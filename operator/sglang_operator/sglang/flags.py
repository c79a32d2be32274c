"""Per-release SGLang flag tables (:mod:`.catalog`, ``data/flags.json``) and argparse-style flag lookup.

The tables are extracted from the released wheels by ``scripts/extract_sglang.py`` (static read of
``sglang/srt/server_args.py:ServerArgs.add_cli_args`` and, from 0.5.14, the ``A[T, Arg(...)]`` fields it derives
options from; from 0.5.20 those live in ``sglang/srt/arg_groups/fields``).
SGLang's parser (``server_args.py:prepare_server_args``) is a plain ``argparse.ArgumentParser`` with
``allow_abbrev=True``, so ``--tp 2`` means ``--tp-size 2`` and ``--cuda-graph-max-bs`` is *ambiguous* on
0.5.23; :meth:`FlagTable.match` reproduces that lookup so the operator can refuse abbreviations.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import StrEnum
from functools import cache
from importlib import resources
from typing import Any

from sglang_operator.sglang import catalog
from sglang_operator.sglang._version import SGLangVersion, parse_version

__all__ = ["FlagSpec", "FlagTable", "Match", "MatchKind", "load_router_table", "load_table"]


@dataclass(frozen=True)
class FlagSpec:
    """One argparse action of SGLang's ``launch_server`` parser.

    ``action`` is argparse's action name (``store``, ``store_true``, ...) or an SGLang action class
    (``BooleanOptionalAction``, ``DeprecatedAction``, ``DeprecatedStoreTrueAction``,
    ``DeprecatedStoreConstAction``, ``LoRAPathAction``). ``type`` is the type callable's name
    (``int``, ``float``, ``str``, ``human_readable_int``, ``json_list_type``, ``loads``, ...).
    """

    options: tuple[str, ...]
    dest: str
    action: str
    type: str | None
    default: Any
    choices: tuple[Any, ...] | None
    nargs: int | str | None
    const: Any
    required: bool
    action_kwargs: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    @property
    def name(self) -> str:
        """The canonical (first) option string, e.g. ``--tp-size``."""
        return self.options[0]

    @property
    def takes_value(self) -> bool:
        """Whether the option consumes a value on the command line (``--port 30000`` vs ``--enable-metrics``)."""
        return self.nargs != 0


class MatchKind(StrEnum):
    EXACT = "exact"
    ABBREVIATION = "abbreviation"  # a unique prefix of a declared option (argparse allow_abbrev)
    AMBIGUOUS = "ambiguous"  # a prefix of several options: argparse fails with "ambiguous option"
    UNKNOWN = "unknown"  # argparse fails with "unrecognized arguments"


@dataclass(frozen=True)
class Match:
    """Result of :meth:`FlagTable.match`: the kind and the matching option strings (registration order)."""

    kind: MatchKind
    token: str
    options: tuple[str, ...] = ()
    flag: FlagSpec | None = None


@dataclass(frozen=True)
class FlagTable:
    """The flag table of one known SGLang release (shared by the releases with the same flags)."""

    version: SGLangVersion
    prog: str | None  # argparse prog set by prepare_server_args ("sglang serve" from 0.5.10), else None
    flags: tuple[FlagSpec, ...]  # registration order
    by_option: dict[str, FlagSpec] = field(hash=False, compare=False)
    by_dest: dict[str, FlagSpec] = field(hash=False, compare=False)

    def get(self, option: str) -> FlagSpec | None:
        """The flag declared with exactly this option string (``--tp-size``), else ``None``."""
        return self.by_option.get(option)

    def __contains__(self, option: object) -> bool:
        return option in self.by_option

    def match(self, token: str) -> Match:
        """Resolve a command-line token the way argparse (Python 3.11, ``allow_abbrev=True``) does.

        ``--opt=value`` is looked up by its ``--opt`` part. Only ``--`` tokens are abbreviated.
        """
        option = token.split("=", 1)[0] if token.startswith("--") else token
        if option in self.by_option:
            return Match(MatchKind.EXACT, token, (option,), self.by_option[option])
        if not option.startswith("--"):
            return Match(MatchKind.UNKNOWN, token)
        hits = tuple(o for o in self.by_option if o.startswith(option))
        if len(hits) == 1:
            return Match(MatchKind.ABBREVIATION, token, hits, self.by_option[hits[0]])
        if hits:
            return Match(MatchKind.AMBIGUOUS, token, hits)
        return Match(MatchKind.UNKNOWN, token)


def _spec(raw: dict[str, Any]) -> FlagSpec:
    return FlagSpec(
        options=tuple(raw["options"]),
        dest=raw["dest"],
        action=raw["action"],
        type=raw["type"],
        default=raw["default"],
        choices=None if raw["choices"] is None else tuple(raw["choices"]),
        nargs=raw["nargs"],
        const=raw["const"],
        required=raw["required"],
        action_kwargs=dict(raw["action_kwargs"]),
    )


@cache
def _load(table_version: SGLangVersion) -> FlagTable:
    release = catalog.get(table_version)
    assert release is not None, table_version
    flags = tuple(_spec(f) for f in catalog.flag_records(table_version))
    by_option = {o: f for f in flags for o in f.options}
    return FlagTable(
        version=table_version,
        prog=release.prog,
        flags=flags,
        by_option=by_option,
        by_dest={f.dest: f for f in flags},
    )


def load_table(version: SGLangVersion) -> FlagTable:
    """The flag table for ``version`` (see ``catalog.resolve``: a newer release gets the newest table).

    Raises ``SGLangVersionError`` for unsupported releases.
    """
    return _load(catalog.resolve(version).release.flags_table)


ROUTER_FLAGS_FILE = "router-flags.json"


@cache
def load_router_table() -> FlagTable:
    """The flag table of the pinned router (``smg`` :data:`~.versions.ROUTER_VERSION`, ``data/router-flags.json``).

    Written by ``scripts/extract_router.py`` from the wheel's ``smg/router_args.py:RouterArgs.add_cli_args``.

    Its parser (``smg/launch_router.py:parse_router_args``) is a plain ``argparse.ArgumentParser`` too, so
    :meth:`FlagTable.match` applies unchanged. ``version`` holds smg's release number; ``prog`` is
    ``None`` (argparse names the program after ``sys.argv[0]``: ``smg`` for ``smg launch``, ``launch_router.py``
    for ``python3 -m smg.launch_router``).
    """
    raw = json.loads((resources.files("sglang_operator.sglang") / "data" / ROUTER_FLAGS_FILE).read_text("utf-8"))
    flags = tuple(_spec(f) for f in raw["flags"])
    return FlagTable(
        version=parse_version(raw["version"]),
        prog=raw["prog"],
        flags=flags,
        by_option={o: f for f in flags for o in f.options},
        by_dest={f.dest: f for f in flags},
    )
