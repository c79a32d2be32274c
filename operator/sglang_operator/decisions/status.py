"""Pure status decisions for an SGLangServer: what to write after an apply, after a refused spec, and
after observing pods, SGLang's ``/server_info`` and ``/metrics``.

All functions take the current ``status`` typed (:class:`~sglang_operator.api.status.SGLangServerStatus`, parsed once
per view) and return the *new* values of the keys they own (camelCase JSON: the patch); the status writer in
``control/`` reduces that with :func:`changed` against the status as stored to a minimal patch
(:func:`merge_patch`), so an unchanged world writes nothing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel

from sglang_operator.api.base import truncate
from sglang_operator.api.rollback import without_default_prompt
from sglang_operator.api.status import RevisionRecord, SGLangServerStatus
from sglang_operator.decisions.conditions import Condition, condition, merge_stored, parse_time, rfc3339, same
from sglang_operator.decisions.effective import NOT_SGLANG, active_tier
from sglang_operator.decisions.pods import PodHealth
from sglang_operator.decisions.sampling.model import Figures

SPEC_VALID = "SpecValid"
SETTINGS_DIFFER = "SettingsDiffer"


def changed(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """The keys of ``new`` whose value differs from ``old`` (conditions compared without timestamps)."""
    out = {}
    for key, value in new.items():
        if key == "conditions" and same(old.get(key) or [], value or []):
            continue
        if old.get(key) != value:
            out[key] = value
    return out


def merge_patch(old: Mapping[str, Any], delta: Mapping[str, Any]) -> dict[str, Any]:
    """``delta`` (new values of some top-level keys of ``old``) as a JSON merge patch (RFC 7386) that turns ``old``
    into ``old`` updated by ``delta``: nested objects are merged by the API server, so a key a nested object no
    longer has must be sent as null (else e.g. ``analysis.warmedUpAt`` of an earlier revision would survive a
    fresh analysis). Lists and scalars are sent whole."""
    def diff(a: Any, b: Any) -> Any:
        if not (isinstance(a, Mapping) and isinstance(b, Mapping)):
            return b
        out: dict[str, Any] = {}
        for key in a.keys() | b.keys():
            if key not in b:
                out[key] = None
            elif key not in a or a[key] != b[key]:
                out[key] = diff(a.get(key), b[key])
        return out

    return {key: diff(old.get(key), value) for key, value in delta.items()}


def invalid(status: SGLangServerStatus, errors: list[str], generation: int, now: dt.datetime) -> dict[str, Any]:
    """Status after a refused spec: SpecValid=False with every error; nothing else changes, so the last
    applied revision (if any) keeps running and keeps being reported. Phase ``Invalid`` only when nothing
    was ever applied."""
    msg = truncate("; ".join(errors))
    conds = merge_stored(status.conditions, [condition(SPEC_VALID, "False", "InvalidSpec", msg, generation, now)])
    out: dict[str, Any] = {"conditions": conds, "observedGeneration": generation}
    if not status.revision:
        out["phase"] = "Invalid"
    return out


def ledger_of(status: SGLangServerStatus) -> list[dict[str, Any]]:
    """``status.revisions`` as the JSON of a patch that rewrites the ledger: each record with the keys it was read
    with (a new list of new dicts)."""
    return [_as_read(r) for r in status.revisions]


def _as_read(record: RevisionRecord) -> dict[str, Any]:
    return record.model_dump(by_alias=True, exclude_unset=True, mode="json")


def ledger_entry(
    revision: str, generation: int, command: str, summary: dict[str, str], spec: Mapping[str, Any], now: dt.datetime
) -> dict[str, Any]:
    """A new ``status.revisions[]`` record, verdict ``Verifying`` (``api.status.Verdict``); ``spec`` kept without a
    default probe prompt (``api.rollback.without_default_prompt``: an older object's copy of the built-in text)."""
    return {
        "revision": revision, "generation": generation, "createdAt": rfc3339(now), "command": command,
        "summary": summary, "spec": without_default_prompt(spec), "verdict": "Verifying",
    }


def bounded(ledger: list[dict[str, Any]], history_limit: int, stable: str | None) -> list[dict[str, Any]]:
    """The newest ``history_limit`` records of ``ledger`` (oldest first), plus the ``stable`` revision's."""
    kept = ledger[-history_limit:]
    older = [r for r in ledger[:-history_limit] if stable and r.get("revision") == stable]
    return older + kept


def judged(
    ledger: list[dict[str, Any]], revision: str, verdict: str, reason: str, now: dt.datetime,
    tokens_per_second: float | None = None, accept_length: float | None = None, samples: int | None = None,
    accept_rate: float | None = None, canary_steps: Sequence[Mapping[str, Any]] | None = None,
    extra_figures: Mapping[str, float] | None = None,
) -> list[dict[str, Any]]:
    """``status.revisions`` with ``revision``'s record given ``verdict`` (``api.status.Verdict``), ``reason``,
    ``judgedAt`` and the figures (tok/s, acceptance length, sample count, acceptance rate 0..1) where given;
    unchanged when the revision has no record. Figures of the rollback decision: ``decisions.rollback.RecordVerdict``;
    the acceptance rate: the median of the verdict's samples, else the release's own gauge in the revision's last
    sample (``decisions.judging.accept_rate``);
    ``canary_steps``: the steps of its canary (``CanaryStepRecord`` dicts), when it ran as one; ``extra_figures``:
    the figures of the criteria with no field of their own (``extraFigures``, by criterion key), when any."""
    out = []
    for r in ledger:
        if r.get("revision") == revision:
            figures = {"tokensPerSecond": tokens_per_second, "acceptLength": accept_length, "samples": samples,
                       "acceptRate": None if accept_rate is None else round(accept_rate, 3)}
            r = {**r, "verdict": verdict, "reason": reason, "judgedAt": rfc3339(now),
                 **{k: v for k, v in figures.items() if v is not None}}
            if canary_steps:
                r["canarySteps"] = [dict(c) for c in canary_steps]
            if extra_figures:
                r["extraFigures"] = dict(extra_figures)
        out.append(dict(r))
    return out


def applied(
    status: SGLangServerStatus, rendered_status: Mapping[str, Any], warnings: list[str], entry: dict[str, Any],
    generation: int, history_limit: int, now: dt.datetime,
) -> dict[str, Any]:
    """Status after the children were applied for ``rendered_status['revision']``.

    SpecValid=True (reason ``ValidWithWarnings`` listing ``warnings`` when any). A revision not yet in the
    ledger, or an earlier one returned to, becomes the newest record (earlier ones still ``Verifying`` become
    ``Superseded``; one returned to is ``Verifying`` again unless it was ``Promoted``); the newest record's
    ``spec`` is the spec last applied; the ledger keeps the newest ``history_limit`` records and always the
    stable one (``status.stableRevision``). A new revision resets what was read from the old pods (effective settings,
    metrics; ``SettingsDiffer`` Unknown ``NotReadBack`` until its own are read back) and sets phase Progressing.
    """
    if warnings:
        valid = condition(SPEC_VALID, "True", "ValidWithWarnings", truncate("; ".join(warnings)), generation, now)
    else:
        valid = condition(SPEC_VALID, "True", "Valid", "spec is valid for its SGLang release", generation, now)
    out: dict[str, Any] = dict(rendered_status)
    out["observedGeneration"] = generation
    ledger = ledger_of(status)
    revision = rendered_status["revision"]
    new_revision = revision != status.revision
    known = next((r for r in ledger if r.get("revision") == revision), None)
    if known is None or (ledger[-1] is not known and new_revision):  # a new revision, or a return to an earlier one
        # (the revision that serves re-applied while a canary's record is newer is no return)
        for r in ledger:
            if r.get("verdict") == "Verifying":
                r["verdict"] = "Superseded"
        if known is not None:
            ledger.remove(known)
            verdict = "Promoted" if known.get("verdict") == "Promoted" else "Verifying"
            entry = {**known, "spec": entry["spec"], "command": entry["command"], "verdict": verdict}
        ledger.append(entry)
    else:
        known["spec"] = entry["spec"]  # same pod template (e.g. only replicas changed): keep the applied spec
    out["revisions"] = bounded(ledger, history_limit, status.stable_revision)
    conds: list[Condition] = [valid]
    if new_revision:
        out |= {"phase": "Progressing", "effective": None, "acceptLength": None, "acceptRate": None,
                "tokensPerSecond": None}
        conds.append(condition("Progressing", "True", "NewRevision", f"rolling out revision {revision}",
                               generation, now))
        conds.append(condition(SETTINGS_DIFFER, "Unknown", "NotReadBack", f"revision {revision}: SGLang's "
                               "/server_info not read back yet", generation, now))  # no claim from the last one
    out["conditions"] = merge_stored(status.conditions, conds)
    return out


def observed(
    status: SGLangServerStatus, health: PodHealth, generation: int, now: dt.datetime,
    effective: Mapping[str, Any] | None = None, differences: list[str] | None = None,
    metrics: Mapping[str, float | None] | None = None, not_sglang: str | None = None,
) -> dict[str, Any]:
    """Status after observing the pods (``health``) and, when Ready, SGLang's effective settings and metrics.

    ``effective``: keys as ``decisions.effective.FIELDS`` (+ ``avgSpecAcceptLength``), written once per
    revision; ``differences`` (None: unknown, e.g. nothing read back) gives condition SettingsDiffer (True with both
    values per key, False ``AsRequested`` only from settings read back from ``/server_info``); ``not_sglang``: why
    the pod is not SGLang (:func:`~sglang_operator.decisions.effective.not_sglang`), SettingsDiffer Unknown reason
    ``NotSGLang`` with that sentence. ``metrics``: ``acceptLength``, ``acceptRate``, ``tokensPerSecond`` (tok/s).
    """
    conds = list(health.conditions)
    out: dict[str, Any] = {
        "phase": health.phase, "replicas": health.replicas, "readyReplicas": health.ready_replicas,
    }
    if effective is not None:
        out["effective"] = {**effective, "observedAt": rfc3339(now)}
    if not_sglang is not None:
        conds.append(condition(SETTINGS_DIFFER, "Unknown", NOT_SGLANG, truncate(not_sglang), generation, now))
    elif differences is not None:  # recomputed every tick from status.effective, so nothing can erase it for good
        if differences:
            conds.append(condition(SETTINGS_DIFFER, "True", "SGLangResolvedOtherwise",
                                   "; ".join(differences), generation, now))
        else:
            conds.append(condition(SETTINGS_DIFFER, "False", "AsRequested",
                                   "SGLang runs the settings the spec asks for", generation, now))
    fresh = {k: v for k, v in (metrics or {}).items() if v is not None}
    if "metricsUpdatedAt" in fresh:  # decided by figures_patch
        out |= fresh
    elif any(_stored(status, k) != v for k, v in fresh.items()):
        out |= fresh
        out["metricsUpdatedAt"] = rfc3339(now)
    out["conditions"] = merge_stored(status.conditions, conds)
    return out


_FIELDS = {field.alias or name: name for name, field in SGLangServerStatus.model_fields.items()}
"""A status key (camelCase) -> its field of :class:`SGLangServerStatus`."""


def _stored(status: SGLangServerStatus, key: str) -> Any:
    """The value of status key ``key`` in ``status`` (a model: as the JSON it was read as; None: unset or unknown)."""
    name = _FIELDS.get(key)
    return _read(getattr(status, name)) if name is not None else None


def _read(value: Any) -> Any:
    if isinstance(value, list):
        return [_read(v) for v in value]
    return value.model_dump(by_alias=True, exclude_unset=True, mode="json") if isinstance(value, BaseModel) else value


def summary(ready_replicas: int | None, analysis: Mapping[str, Any] | None, canary: Mapping[str, Any] | None,
            split_ready: tuple[int, int] | None = None) -> dict[str, Any]:
    """``status.summary`` (:class:`~sglang_operator.api.status.StatusSummary`, camelCase): the default printer
    columns' row. ``ready_replicas``: pod health's Ready count; ``analysis``, ``canary``: ``status.analysis`` and
    ``status.canary`` as they are written this tick (None: none); ``split_ready``: (Ready pods of the serving
    revision, Ready pods of the canary's revision) seen this tick. While a canary runs: ``ready`` is
    ``stable+canary`` (e.g. ``3+1``), ``analysis`` ``Canary`` and ``reason`` the ``Canary`` condition's reason with
    the step (:func:`sglang_operator.decisions.judging.canary_condition`): ``Stepping 1/2``, ``Pending 1/2``,
    ``Held 1/2``, ``Promoting``, ``Removing Regressed``; else the Ready count and the analysis' phase and reason."""
    if canary is not None:
        stable, mine = split_ready if split_ready is not None else (ready_replicas or 0, 0)
        phase, steps = str(canary.get("phase")), int(canary.get("steps") or 1)
        at = f"{min(int(canary.get('step') or 0) + 1, steps)}/{steps}"
        if phase == "Removing":
            reason = f"Removing {canary['reason']}" if canary.get("reason") else "Removing"
        elif canary.get("pending"):
            reason = f"Pending {at}"
        elif phase == "Promoting":
            reason = "Promoting"
        else:
            reason = f"{phase} {at}"
        return {"ready": f"{stable}+{mine}", "analysis": "Canary", "reason": reason}
    out: dict[str, Any] = {"ready": str(ready_replicas or 0)}
    if analysis is not None:
        out |= {k: analysis[k] for k in ("phase", "reason") if analysis.get(k)}
        if "phase" in out:
            out["analysis"] = out.pop("phase")
    return out


ACCEPT_LENGTH_MOVE = 0.01
"""Relative change of the accept length worth a status write (1 %)."""
TOKENS_PER_SECOND_MOVE = 0.02
"""Relative change of tok/s worth a status write (2 %)."""
FIGURES_REFRESH = dt.timedelta(minutes=5)
"""Age of the figures in status after which they are rewritten even when unchanged."""


def _moved(old: Any, new: float | None, fraction: float) -> bool:
    if new is None:
        return False
    if not isinstance(old, int | float):
        return True
    return abs(new - old) > fraction * abs(old) if old else new != 0


def figures_patch(status: SGLangServerStatus, figures: Figures | None, measured_at: dt.datetime,
                  now: dt.datetime) -> dict[str, Any]:
    """The serving revision's figures for ``status``, or ``{}`` when they are not worth a write.

    ``figures``: of its latest Measured sample (None: none this interval), whose interval ended at
    ``measured_at``. Written: ``acceptLength`` and ``acceptRate`` (3 decimals), ``tokensPerSecond`` (per-request
    decode speed, tok/s, 1 decimal: the figure the rollback compares) and ``metricsUpdatedAt`` (``measured_at``),
    when the accept length moved more than 1 % or tok/s more than 2 % from what status holds, or status' figures
    are 5 minutes old (or absent). In adaptive mode, a tier switch (:func:`~sglang_operator.decisions.effective.
    active_tier`) also writes ``effective`` whole, with ``activeNumSteps`` and ``activeNumDraftTokens``.
    """
    if figures is None:
        return {}
    tier = active_tier(status.effective, figures.num_steps, figures.num_draft_tokens)
    if tier:  # adaptive mode switched tiers: status.effective whole, with the tier SGLang runs now
        stored = status.effective.dump() if status.effective is not None else {}
        return {**_figures(status, figures, measured_at, now), "effective": {**stored, **tier}}
    return _figures(status, figures, measured_at, now)


def _figures(status: SGLangServerStatus, figures: Figures, measured_at: dt.datetime,
             now: dt.datetime) -> dict[str, Any]:
    new = {"acceptLength": _round(figures.accept_length, 3), "acceptRate": _round(figures.accept_rate, 3),
           "tokensPerSecond": _round(figures.decode_tokens_per_second, 1)}
    if all(v is None for v in new.values()):
        return {}
    updated = parse_time(status.metrics_updated_at)
    stale = updated is None or now - updated >= FIGURES_REFRESH
    moved = (_moved(status.accept_length, new["acceptLength"], ACCEPT_LENGTH_MOVE)
             or _moved(status.tokens_per_second, new["tokensPerSecond"], TOKENS_PER_SECOND_MOVE))
    if not (stale or moved):
        return {}
    return {**{k: v for k, v in new.items() if v is not None}, "metricsUpdatedAt": rfc3339(measured_at)}


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)
