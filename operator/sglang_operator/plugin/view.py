"""Pure views of an SGLangServer's ledger for the CLI: history rows and the SGLang flags two revisions differ in.

Inputs are the API's JSON shapes: the SGLangServer ``status`` (``revisions[]``, ``stableRevision``,
``rejectedRevisions[]``, ``revision``) and its ledger ControllerRevisions
(:mod:`sglang_operator.builders.revision`: ``data.{spec, command, image}``, digest annotation).
"""

from __future__ import annotations

import datetime as dt
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sglang_operator.api.status import SGLangServerStatus
from sglang_operator.builders.revision import DIGEST_ANNOTATION
from sglang_operator.decisions.conditions import rfc3339

ABSENT = "—"


@dataclass(frozen=True)
class HistoryRow:
    """One revision as ``history`` shows it; figures in tok/s and tokens per verify step."""

    revision: str
    number: int | None
    age: str
    verdict: str
    tokens_per_second: float | None
    accept_length: float | None
    samples: int | None
    image: str
    stable: bool
    serving: bool
    reason: str

    def as_json(self) -> dict[str, Any]:
        """camelCase dict for ``-o json``."""
        return {"revision": self.revision, "number": self.number, "age": self.age, "verdict": self.verdict,
                "tokensPerSecond": self.tokens_per_second, "acceptLength": self.accept_length,
                "samples": self.samples, "image": self.image,
                "stable": self.stable, "serving": self.serving, "reason": self.reason}


def age(created: str | None, now: dt.datetime) -> str:
    """``created`` (RFC 3339) as kubectl prints ages: ``45s``, ``12m``, ``3h``, ``2d``; ``—`` when unknown."""
    if not created:
        return ABSENT
    try:
        then = dt.datetime.fromisoformat(created.replace("Z", "+00:00"))
    except ValueError:
        return ABSENT
    secs = max(0, int((now - then).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if secs >= 2 * size or (unit == "m" and secs >= size):
            return f"{secs // size}{unit}"
    return f"{secs}s"


def history_rows(status: SGLangServerStatus, revisions: Sequence[Mapping[str, Any]], now: dt.datetime,
                 serving: str | None = None) -> list[HistoryRow]:
    """One row per revision in ``status.revisions`` (oldest first), joined with its ControllerRevision (by the
    ``sglang-operator.io/revision`` label) for the ordinal number and the image by digest. ``serving``: the
    revision the pods run (default ``status.revision``)."""
    by_hash = {(r.get("metadata") or {}).get("labels", {}).get("sglang-operator.io/revision"): r for r in revisions}
    stable = status.stable_revision
    serving = serving or status.revision
    rows = []
    for rec in status.revisions:
        rev = rec.revision
        cr = by_hash.get(rev) or {}
        digest = ((cr.get("metadata") or {}).get("annotations") or {}).get(DIGEST_ANNOTATION)
        image = digest or (cr.get("data") or {}).get("image") or rec.summary.get("image") or ABSENT
        rows.append(HistoryRow(
            revision=rev, number=cr.get("revision"), age=age(rec.created_at, now),
            verdict=rec.verdict or ABSENT, tokens_per_second=rec.tokens_per_second,
            accept_length=rec.accept_length, samples=rec.samples,
            image=str(image), stable=rev == stable, serving=rev == serving, reason=rec.reason or "",
        ))
    return rows


def parse_flags(command: str) -> dict[str, str]:
    """An SGLang command line (``ENV=1 sglang serve --a 1 --b --c x y``) as ``{flag or ENV: value}``: a flag
    with no value maps to ``"true"``, several values are joined by spaces; the entry point is left out."""
    out: dict[str, str] = {}
    words = shlex.split(command)
    flag: str | None = None
    for word in words:
        if flag is None and "=" in word and not word.startswith("-") and word.split("=", 1)[0].isupper():
            key, value = word.split("=", 1)
            out[key] = value
        elif word.startswith("--"):
            name, eq, value = word.partition("=")
            flag = name
            out[flag] = value if eq else "true"
        elif flag is not None:
            out[flag] = word if out[flag] == "true" else f"{out[flag]} {word}"
    return out


def flag_diff(command_a: str, command_b: str) -> list[tuple[str, str, str]]:
    """``(flag, value in a, value in b)`` for every flag or environment variable whose value differs; ``—`` where
    a command line does not set it. Sorted by flag name."""
    a, b = parse_flags(command_a), parse_flags(command_b)
    keys = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    return [(k, a.get(k, ABSENT), b.get(k, ABSENT)) for k in keys]


def now_rfc3339(now: dt.datetime) -> str:
    """``now`` as the annotation value ``retry`` writes (RFC 3339; any change of value is what counts)."""
    return rfc3339(now)
