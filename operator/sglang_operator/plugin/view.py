"""Pure views of an SGLangServer's ledger for the CLI: history rows and the SGLang flags two revisions differ in;
why a server has no status at all (:func:`no_status_hint`: no operator watches its namespace).

Inputs are the API's JSON shapes: the SGLangServer ``status`` (``revisions[]``, ``stableRevision``,
``rejectedRevisions[]``, ``revision``) and its ledger ControllerRevisions
(:mod:`sglang_operator.builders.revision`: ``data.{spec, command, image}``, digest annotation).
"""

from __future__ import annotations

import datetime as dt
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from pydantic.alias_generators import to_snake

from sglang_operator.api.analysis import figure
from sglang_operator.api.base import plural
from sglang_operator.api.status import SGLangServerStatus
from sglang_operator.builders.labels import REVISION_LABEL
from sglang_operator.builders.revision import recorded_digest
from sglang_operator.decisions import criteria
from sglang_operator.decisions.baseline import origin
from sglang_operator.decisions.conditions import parse_time, rfc3339

ABSENT = "—"


@dataclass(frozen=True)
class HistoryRow:
    """One revision as ``history`` shows it; figures in tok/s and tokens per verify step; ``figures``: every
    criterion's figure at the verdict by criterion key (``decisions.criteria.CRITERIA``, their units)."""

    revision: str
    number: int | None
    age: str
    verdict: str
    tokens_per_second: float | None
    accept_length: float | None
    accept_rate: float | None
    samples: int | None
    image: str
    stable: bool
    serving: bool
    reason: str
    baseline_source: str | None = None
    baseline_tokens_per_second: float | None = None
    figures: dict[str, float] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        """camelCase dict for ``-o json``: every criterion's figure under its key (``tokensPerSecond``,
        ``acceptLength``, ``timeToFirstTokenSeconds``…; null where none)."""
        out = {"revision": self.revision, "number": self.number, "age": self.age, "verdict": self.verdict,
               "tokensPerSecond": self.tokens_per_second, "acceptLength": self.accept_length,
               "acceptRate": self.accept_rate, "samples": self.samples, "image": self.image,
               "stable": self.stable, "serving": self.serving, "reason": self.reason,
               "baselineSource": self.baseline_source, "baselineTokensPerSecond": self.baseline_tokens_per_second}
        return {**out, **{k: v for k, v in self.figures.items() if k not in out}}

    def figure(self, key: str) -> float | None:
        """The figure of the criterion ``key``: :attr:`figures`, else the field of that name (tok/s, accept
        length)."""
        value = self.figures.get(key, getattr(self, to_snake(key), None))
        return value if isinstance(value, float | int) and not isinstance(value, bool) else None


def age(created: str | None, now: dt.datetime) -> str:
    """``created`` (RFC 3339) as kubectl prints ages: ``45s``, ``12m``, ``3h``, ``2d``; ``—`` when unknown."""
    then = parse_time(created)
    if then is None:
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
    by_hash = {(r.get("metadata") or {}).get("labels", {}).get(REVISION_LABEL): r for r in revisions}
    stable = status.stable_revision
    serving = serving or status.revision
    rows = []
    for rec in status.revisions:
        rev = rec.revision
        cr = by_hash.get(rev) or {}
        image = recorded_digest(cr) or (cr.get("data") or {}).get("image") or rec.summary.get("image") or ABSENT
        rows.append(HistoryRow(
            revision=rev, number=cr.get("revision"), age=age(rec.created_at, now),
            verdict=rec.verdict or ABSENT, tokens_per_second=rec.tokens_per_second,
            accept_length=rec.accept_length, accept_rate=rec.accept_rate, samples=rec.samples,
            image=str(image), stable=rev == stable, serving=rev == serving, reason=rec.reason or "",
            baseline_source=rec.baseline_source, baseline_tokens_per_second=rec.baseline_tokens_per_second,
            figures={c.key: v for c in criteria.CRITERIA if (v := figure(rec, c.key)) is not None},
        ))
    return rows


def canary_lines(status: SGLangServerStatus) -> list[str]:
    """The canary steps ``history`` shows under its table: of every revision that ran as a canary
    (``status.revisions[].canarySteps``) and of the canary in progress (``status.canary``), e.g. ``9f4c2d9294: canary
    step 1 at 3+1 (stable+canary): Failed, 36.0 vs 51.6 tok/s of the stable pods (3 intervals); …``."""
    def line(rev: str, step: Any) -> str:
        figures = ""
        if step.tokens_per_second is not None:
            figures = f", {step.tokens_per_second:.1f}"
            if step.stable_tokens_per_second is not None:
                figures += f" vs {step.stable_tokens_per_second:.1f}"
            figures += f" tok/s of the stable pods ({plural(step.samples, 'interval')})"
        why = f"; {step.reason}" if step.reason else ""
        return (f"{rev}: canary step {step.step} at {step.stable_replicas}+{step.replicas} (stable+canary): "
                f"{step.verdict}{figures}{why}")

    out = [line(rec.revision, step) for rec in status.revisions for step in rec.canary_steps]
    c = status.canary
    if c is not None:
        out += [line(c.revision, step) for step in c.history]
        where = "promoting" if c.phase.value == "Promoting" else (
            "removing" if c.phase.value == "Removing" else
            f"held at step {c.step + 1}/{c.steps}" if c.phase.value == "Held" else f"step {c.step + 1}/{c.steps}")
        out.append(f"{c.revision}: canary {where} at {c.split} (stable+canary), {plural(c.judged, 'interval')} "
                   f"passed at this step" + (f"; {c.message}" if c.message else ""))
    return out


LEADING_COLUMNS = ("", "REVISION", "AGE", "VERDICT")
TRAILING_COLUMNS = ("ACCEPT RATE", "SAMPLES", "BASELINE", "IMAGE")


def shown_criteria(rows: Sequence[HistoryRow] = ()) -> tuple[criteria.Criterion, ...]:
    """The criteria ``history`` has a column of: those a spec without ``spec.rollback`` judges (tok/s, accept
    length), and any other with a figure in one of ``rows`` (TTFT once a policy turned it on), in table order."""
    default = criteria.active(criteria.DEFAULT_POLICY)
    return tuple(c for c in criteria.CRITERIA if c in default or any(c.key in r.figures for r in rows))


def history_columns(rows: Sequence[HistoryRow] = ()) -> tuple[str, ...]:
    """The columns of ``history``'s table for ``rows``: one per criterion of :func:`shown_criteria` (its
    ``column``), figures at the verdict in its unit; ACCEPT RATE 0..1, SAMPLES a count; BASELINE: the revision's
    baseline as the stable one, tok/s and where it came from (:func:`baseline_cell`)."""
    return (*LEADING_COLUMNS, *(c.column for c in shown_criteria(rows)), *TRAILING_COLUMNS)


HISTORY_COLUMNS = history_columns()
"""The columns of ``history``'s table when no row has a figure of a criterion off by default."""
GAP = 2
"""Spaces between two columns of ``history``'s table (kubectl prints 3)."""


def _figure(value: float | None, digits: int) -> str:
    return ABSENT if value is None else f"{value:.{digits}f}"


def short_image(image: str) -> str:
    """An image reference with its digest cut to 12 hex digits, as ``docker images`` shows IDs
    (``lmsysorg/sglang@sha256:f4e0eb578320``); a reference by tag unchanged."""
    name, at, digest = image.partition("@sha256:")
    return f"{name}@sha256:{digest[:12]}" if at else image


def history_cells(rows: Sequence[HistoryRow]) -> list[list[str]]:
    """One list of cells per row in :func:`history_columns` order (the stable revision marked ★, the serving ▶)."""
    shown = shown_criteria(rows)
    return [[("★" if r.stable else "") + ("▶" if r.serving else ""), r.revision, r.age, r.verdict,
             *(_figure(r.figure(c.key), c.digits) for c in shown), _figure(r.accept_rate, 2),
             ABSENT if r.samples is None else str(r.samples), baseline_cell(r), short_image(r.image)] for r in rows]


def baseline_cell(row: HistoryRow) -> str:
    """``51.6 canaryRatio``: a revision's baseline (tok/s) and its source (``measured``, ``canaryRatio``,
    ``refreshed``); ``—`` for a revision that never had one."""
    if row.baseline_source is None:
        return ABSENT
    return f"{_figure(row.baseline_tokens_per_second, 1)} {row.baseline_source}"


def baseline_line(status: SGLangServerStatus) -> str | None:
    """The line ``history`` prints under its table for ``status.baseline``: ``baseline: 9699b6738c 54.7 tok/s
    (canaryRatio: 52.6 tok/s of 5b7e01aa42 × 1.04), set 2026-12-01T12:00:00Z``; None without a baseline."""
    base = status.baseline
    if base is None:
        return None
    when = f", set {rfc3339(base.at)}" if base.at is not None else ""
    return f"baseline: {base.revision} {origin(base)}{when}"


def history_table(rows: Sequence[HistoryRow], width: int) -> list[str]:
    """``history``'s table as lines of at most ``width`` characters where the figures fit: kubectl's layout (left
    aligned, no borders); when the IMAGE column (then also the BASELINE column) does not fit it leaves the table and
    each revision's value follows it on a line of its own (``REVISION image: …``, ``REVISION baseline: …``)."""
    cells, headers = history_cells(rows), history_columns(rows)

    def widths(columns: int) -> list[int]:
        return [max([len(headers[i]), *(len(c[i]) for c in cells)]) for i in range(columns)]  # no row yet

    columns = len(headers)
    while columns > len(headers) - 2 and sum(widths(columns)) + GAP * (columns - 1) > width:
        columns -= 1  # without IMAGE, then without BASELINE
    w = widths(columns)

    def line(values: Sequence[str]) -> str:
        return (" " * GAP).join(v.ljust(n) for v, n in zip(values, w, strict=False)).rstrip()

    out = [line(headers[:columns]), *(line(c[:columns]) for c in cells)]
    for i in range(columns, len(headers)):
        out += [f"{c[1]} {headers[i].lower()}: {c[i]}" for c in cells]
    return out


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


def promote_warning(status: SGLangServerStatus, min_samples: int) -> str | None:
    """What ``promote`` warns of: the serving revision has fewer measured samples than ``minSamples`` (the baseline
    would be their median: one sample is a guess, none refuses the promotion); None when it has enough."""
    a = status.analysis
    samples = len(a.valid_figures) if a is not None and a.revision == status.revision else 0
    if samples >= min_samples:
        return None
    if samples == 0:
        return (f"revision {status.revision} has no measured sample yet: the operator refuses the promotion (event "
                "PromoteRefused)")
    return (f"revision {status.revision} has {plural(samples, 'measured sample')} of spec.rollback.minSamples "
            f"{min_samples}: its baseline, the median of {'it' if samples == 1 else 'them'}, is less certain than a "
            "verified revision's")


def now_rfc3339(now: dt.datetime) -> str:
    """``now`` as the annotation value ``retry`` writes (RFC 3339; any change of value is what counts)."""
    return rfc3339(now)


NO_STATUS_DOC = 'docs/troubleshooting.md, "My server has no status"'
OPERATOR_APP_LABEL = ("app.kubernetes.io/name", "sglang-operator")
"""The label of the chart's operator Deployment (and its pods) the hint looks for."""


def watched_namespaces(deployment: Mapping[str, Any]) -> tuple[str, ...] | None:
    """The namespaces an operator Deployment's ``sglang-operator run`` watches: its ``--namespace`` / ``-n``
    arguments (the chart's ``watchNamespaces``), None when it has none (every namespace)."""
    found: list[str] = []
    for container in ((deployment.get("spec") or {}).get("template") or {}).get("spec", {}).get("containers") or []:
        words = [str(w) for w in (*(container.get("command") or ()), *(container.get("args") or ()))]
        for i, word in enumerate(words):
            if word.startswith("--namespace="):
                found.append(word.split("=", 1)[1])
            elif word in ("--namespace", "-n") and i + 1 < len(words):
                found.append(words[i + 1])
    return tuple(found) or None


def no_status_hint(namespace: str, name: str, operators: Sequence[Mapping[str, Any]] | None) -> list[str]:
    """Why SGLangServer ``namespace``/``name`` may have no status (no operator reconciled it; the operator writes one
    for every server it reconciles, even an invalid one), from the operator Deployments of the cluster
    (``operators``: labelled :data:`OPERATOR_APP_LABEL`; None when they could not be listed): that no operator
    watches ``namespace`` (each one's ``--namespace`` named), or which one does and what to check then."""
    head = f"SGLangServer {namespace}/{name} has no status: no operator has reconciled it."
    if operators is None:
        return [head, f"Operator Deployments could not be listed: is an operator running, and does it watch namespace "
                      f"{namespace} (sglang-operator run --namespace, chart value watchNamespaces)? ({NO_STATUS_DOC})"]
    if not operators:
        return [head, f"No sglang-operator Deployment (label {'='.join(OPERATOR_APP_LABEL)}) in the cluster: an "
                      f"operator run as a process (sglang-operator run) must watch namespace {namespace} "
                      f"({NO_STATUS_DOC})"]
    watching, others = [], []
    for d in operators:
        meta = d.get("metadata") or {}
        who = f"{meta.get('namespace')}/{meta.get('name')}"
        scope = watched_namespaces(d)
        ready = f"{(d.get('status') or {}).get('readyReplicas') or 0}/{(d.get('spec') or {}).get('replicas', 1)} ready"
        if scope is None or namespace in scope:
            watching.append(f"{who} ({'every namespace' if scope is None else 'namespaces ' + ', '.join(scope)}, "
                            f"{ready})")
        else:
            others.append(f"{who} watches {', '.join(scope)}")
    if not watching:
        return [head, f"No operator watches namespace {namespace}: " + "; ".join(others)
                + f". Add {namespace} to the chart's watchNamespaces (sglang-operator run --namespace) or create the "
                  f"server in a watched namespace ({NO_STATUS_DOC})"]
    return [head, f"Watching namespace {namespace}: {'; '.join(watching)}. Is it running, the leader, still resuming? "
                  f"Its log says why ({NO_STATUS_DOC})"]
