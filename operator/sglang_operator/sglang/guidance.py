"""Guidance for a launch flag a release refuses or would read differently: what SGLang says, and what to write.

:func:`advise` looks at one flag as written (``--tool_call_parser``) against one release's flag table and the
history of every flag (:mod:`.history`), and says, from the tables only (no per-flag special cases):

- renamed: the flag no longer parses there → its successor(s) in that release and the release that dropped it;
- deprecated: it still parses, as a deprecated alias of its successor (SGLang warns); refused: it is declared
  but its action exits with SGLang's deprecation text (``DeprecatedAction`` 0.4.6–0.5.7, ``error_message``);
- not yet: it first appears in a later release → when, and the spelling this release uses if it was a rename;
- removed: it parsed in an earlier release, without successor → when it went away;
- abbreviation / ambiguous: argparse's prefix matching (``allow_abbrev=True``) would expand or refuse it;
- unknown: the closest real flags of that release (underscore/dash swaps, case, a single dash, per-word
  abbreviations such as ``--spec-algo``, then edit distance via :mod:`difflib`).

Each refusal quotes SGLang's own wording where SGLang has one — argparse's messages (``Lib/argparse.py``, the
parser of ``server_args.py:prepare_server_args``): "unrecognized arguments: %s" and "ambiguous option: %s could
match %s" — and a deprecated option's own text (``raises`` / ``error_message`` of its action).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from sglang_operator.sglang import history
from sglang_operator.sglang._version import SGLangVersion
from sglang_operator.sglang.flags import FlagTable, MatchKind, load_table

__all__ = ["Advice", "AdviceKind", "advise", "closest"]


class AdviceKind(StrEnum):
    OK = "ok"  # declared exactly, not deprecated
    DEPRECATED = "deprecated"  # declared as a deprecated alias (parses; SGLang warns)
    REFUSED = "refused"  # declared, but its action makes SGLang exit with its own deprecation text
    RENAMED = "renamed"  # no longer parses; successor(s) known
    NOT_YET = "not-yet"  # appears only in later releases
    REMOVED = "removed"  # parsed in earlier releases, no successor
    ABBREVIATION = "abbreviation"  # a unique prefix of a declared flag (argparse expands it)
    AMBIGUOUS = "ambiguous"  # a prefix of several declared flags (argparse refuses it)
    UNKNOWN = "unknown"  # never declared by any known release


@dataclass(frozen=True)
class Advice:
    """What :func:`advise` found. ``suggestions``: the flags to write instead (successors or closest flags of
    the release, best first); ``sglang_says``: SGLang's own message when it refuses the flag (else ``None``);
    ``text``: one sentence for a refusal (or, for DEPRECATED/OK, a note)."""

    flag: str
    release: SGLangVersion
    kind: AdviceKind
    suggestions: tuple[str, ...]
    sglang_says: str | None
    text: str

    @property
    def available(self) -> str | None:
        """The known releases that declare the flag (``"0.5.7 to 0.5.19"``, ``"0.4.6 on"``), or ``None``."""
        hist = history.history()
        h = hist.get(self.flag)
        if h is None:
            return None
        text = f"{h.first} on" if h.dropped_in is None else f"{h.first} to {h.last}"
        later = [f"as {s} from {hist[s].first}" for s in h.successors if s in hist]
        return text + (f", {', '.join(later)}" if later else "")

    @property
    def parses(self) -> bool:
        """Whether argparse accepts the flag as written (exact, abbreviation or deprecated alias)."""
        return self.kind in (AdviceKind.OK, AdviceKind.DEPRECATED, AdviceKind.ABBREVIATION)


def _words(option: str) -> list[str]:
    return option.lstrip("-").replace("_", "-").lower().split("-")


def closest(table: FlagTable, flag: str, n: int = 3) -> tuple[str, ...]:
    """The release's flags closest to ``flag``: exact after normalising ``_``→``-``, case and leading dashes;
    then flags whose words the given words abbreviate (``--spec-num-steps`` → ``--speculative-num-steps``);
    then :func:`difflib.get_close_matches` on the normalised spelling (cutoff 0.75)."""
    options = [o for o in table.by_option if o.startswith("--")]
    norm = "--" + "-".join(_words(flag))
    out: list[str] = []
    if norm in table.by_option and norm != flag:
        out.append(norm)
    words = _words(flag)
    for o in options:
        ow = _words(o)
        if len(ow) == len(words) and all(a.startswith(w) for a, w in zip(ow, words, strict=True)) and o != flag:
            out.append(o)
    out += difflib.get_close_matches(norm, options, n=n, cutoff=0.75)
    return tuple(dict.fromkeys(out))[:n]


def _or(flags: Sequence[str]) -> str:
    return flags[0] if len(flags) == 1 else ", ".join(flags[:-1]) + " or " + flags[-1]


def _owned(suggestions: Sequence[str], owned: Mapping[str, str] | None) -> str:
    fields = list(dict.fromkeys(owned[s] for s in suggestions if owned and s in owned))
    return f" (set by {', '.join(fields)}: use that field, not extraArgs)" if fields else ""


def _deprecation_text(table: FlagTable, flag: str) -> str | None:
    spec = table.get(flag)
    if spec is None:
        return None
    kw = spec.action_kwargs
    return kw.get("raises") or kw.get("error_message")


def advise(release: SGLangVersion, flag: str, value: str | None = None,
           owned: Mapping[str, str] | None = None) -> Advice:
    """Guidance for ``flag`` (``--x`` or ``--x=1``; ``value``: the item after it, for argparse's wording) on the
    flag table of ``release``. ``owned``: flag → the typed spec field that renders it, to name that field when it
    is the fix. Raises ``SGLangVersionError`` for an unsupported release."""
    table = load_table(release)
    release = table.version if release < table.version else release
    name = flag.split("=", 1)[0]
    shown = " ".join(x for x in (flag, value) if x)
    unrecognized = f"unrecognized arguments: {shown}"
    hist = history.history().get(name)
    match = table.match(name)
    if match.kind is MatchKind.EXACT:
        succ = history.successors_in(name, release)
        says = _deprecation_text(table, name)
        if says:
            return Advice(name, release, AdviceKind.REFUSED, succ, says,
                          f'SGLang {release} refuses {name}: "{says}"'
                          + (f"; use {_or(succ)}{_owned(succ, owned)}" if succ else ""))
        if hist is not None and hist.deprecated_in is not None and hist.deprecated_in <= release and succ:
            return Advice(name, release, AdviceKind.DEPRECATED, succ, None,
                          f"{name} is deprecated in SGLang {release} (since {hist.deprecated_in}); use "
                          f"{_or(succ)}{_owned(succ, owned)}")
        return Advice(name, release, AdviceKind.OK, (), None, f"{name} is a launch flag of SGLang {release}")
    argparse_says = (f"ambiguous option: {name} could match {', '.join(match.options)}"
                     if match.kind is MatchKind.AMBIGUOUS else unrecognized)
    if hist is not None and release > hist.last:
        succ = history.successors_in(name, release)
        if succ:
            return Advice(name, release, AdviceKind.RENAMED, succ, argparse_says,
                          f"{name} is not a launch flag of SGLang {release}: it no longer parses (dropped in "
                          f"{hist.dropped_in}, last in {hist.last}); use {_or(succ)}{_owned(succ, owned)}. SGLang "
                          f'would exit with "{argparse_says}"')
        near = closest(table, name)
        hs = [history.history()[s] for s in hist.successors if s in history.history()]
        gone = [f"{h.option}, itself removed in {h.dropped_in} (last in {h.last})" for h in hs]
        return Advice(name, release, AdviceKind.REMOVED, near, argparse_says,
                      f"{name} is not a launch flag of SGLang {release}: removed in {hist.dropped_in} (last in "
                      f"{hist.last}), " + (f"replaced by {'; '.join(gone)}" if gone else "without successor")
                      + (f"; closest flags of {release}: {', '.join(near)}" if near else "")
                      + f'. SGLang would exit with "{argparse_says}"')
    if hist is not None and release < hist.first:
        before = history.present_in(history.predecessors(name), release)
        fix = f"; SGLang {release} spells it {_or(before)}{_owned(before, owned)}" if before else ""
        return Advice(name, release, AdviceKind.NOT_YET, before, argparse_says,
                      f"{name} is not a launch flag of SGLang {release}: it first appears in {hist.first}{fix}. "
                      f'SGLang {release} would exit with "{argparse_says}"')
    if match.kind is MatchKind.ABBREVIATION:
        return Advice(name, release, AdviceKind.ABBREVIATION, match.options, None,
                      f"{name} is not a launch flag of SGLang {release} (full flag names only): it abbreviates "
                      f"{match.options[0]}, which SGLang's argparse would expand; write {match.options[0]}"
                      f"{_owned(match.options, owned)}")
    if match.kind is MatchKind.AMBIGUOUS:
        return Advice(name, release, AdviceKind.AMBIGUOUS, match.options, argparse_says,
                      f'{name} is not a launch flag of SGLang {release}: SGLang would exit with "{argparse_says}"; '
                      "write one of them in full")
    near = closest(table, name)
    hint = f"; did you mean {_or(near)}?{_owned(near, owned)}" if near else ""
    return Advice(name, release, AdviceKind.UNKNOWN, near, unrecognized,
                  f'{name} is not a launch flag of SGLang {release} (SGLang would exit with "{unrecognized}")'
                  f"{hint}")
