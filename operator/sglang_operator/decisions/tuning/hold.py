"""PURE: an InPlace SGLangTuning's hold on its server (``spec.mode: InPlace``), kept in the server's
``status.tuningHold`` (:class:`~sglang_operator.api.status.TuningHold`) so that it survives an operator restart.

While a tuning holds a server (:func:`active`): the server's tick gives no verdict, rejection or rollback and
converges to no revision (:func:`sglang_operator.decisions.observation.held`): only the current trial's revision,
applied by the server's own job through the one apply path, runs on every replica; no canary starts. "Stable" is
the revision serving when the tuning began (``stableRevision``). A spec change of the server — of anything but
``replicas`` (:func:`spec_hash`) — ends the hold at once (the analysis converges to the spec's revision again) and
cancels the tuning; any other end (success, failure, deletion of the SGLangTuning) applies the stable revision again
(:func:`release_revision`). Who takes and ends the hold: :mod:`sglang_operator.decisions.tuning.inplace`.

A server is held by at most one of an InPlace tuning and a canary (``status.canary``): :func:`acquire` makes the
tuning wait while a canary runs or another tuning holds the server, with the reason for its ``Running`` condition.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sglang_operator.api.rollback import without_default_prompt
from sglang_operator.api.status import ConditionType, SGLangServerStatus, TuningHold
from sglang_operator.decisions.conditions import Condition, condition

HELD_REASON = "InPlaceTuning"
"""Reason of the server's ``TuningHeld`` condition."""


@dataclass(frozen=True)
class Acquired:
    """:func:`acquire`'s answer: ``hold`` to write into the server's status (None: the tuning waits, ``reason`` and
    ``message`` say why, for its ``Running=False`` condition)."""

    hold: TuningHold | None
    reason: str = ""
    message: str = ""


def spec_hash(spec: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of an SGLangServer ``spec`` dict (camelCase, as stored) without ``replicas`` and without a default
    probe prompt (:func:`~sglang_operator.api.rollback.without_default_prompt`): what tells a spec change (a new
    revision, the tuning cancelled) from a scale (by a user or an autoscaler: neither)."""
    rest = {k: v for k, v in without_default_prompt(spec).items() if k != "replicas"}
    return hashlib.sha256(json.dumps(rest, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def acquire(status: SGLangServerStatus, tuning: str, generation: int, current_hash: str | None = None) -> Acquired:
    """Whether InPlace tuning ``tuning`` may hold a server whose status is ``status`` at ``metadata.generation``
    ``generation``: its own hold again (a restart, a stale write: the stored one, unchanged), else a new hold with
    ``stableRevision`` = the revision serving; waits (``CanaryInProgress``, ``HeldByTuning``, ``NotApplied``) while a
    canary runs, another tuning holds it, or nothing was applied yet."""
    hold = status.tuning_hold
    if hold is not None and hold.name == tuning:
        return Acquired(hold)
    if hold is not None:
        return Acquired(None, "HeldByTuning", f"SGLangTuning {hold.name} holds the server (InPlace); this tuning "
                        "waits until it ends")
    if status.canary is not None:
        return Acquired(None, "CanaryInProgress", f"a canary of revision {status.canary.revision} runs on the "
                        "server; the InPlace tuning waits until it is promoted or aborted")
    if not status.revision:
        return Acquired(None, "NotApplied", "the server has no revision applied yet")
    return Acquired(TuningHold(name=tuning, stable_revision=status.revision, generation=generation,
                               spec_hash=current_hash))


def active(status: SGLangServerStatus, generation: int, current_hash: str | None) -> TuningHold | None:
    """The hold in force for a server at ``generation`` whose spec hashes to ``current_hash`` (:func:`spec_hash`):
    ``status.tuningHold`` unless the spec changed since it began (then the analysis goes on at once: the spec's
    revision is converged to, the tuning is cancelled)."""
    hold = status.tuning_hold
    if hold is None or cancelled(hold, generation, current_hash):
        return None
    return hold


def cancelled(hold: TuningHold, generation: int, current_hash: str | None) -> bool:
    """Whether the server's spec changed since ``hold`` began: its hash (:func:`spec_hash`, ``replicas`` aside) is
    another than ``hold.specHash``; for a hold without a hash (an older operator's), another ``generation``."""
    if hold.spec_hash is not None and current_hash is not None:
        return current_hash != hold.spec_hash
    return generation != hold.generation


def release_revision(hold: TuningHold, status: SGLangServerStatus, generation: int,
                     current_hash: str | None) -> str | None:
    """The revision to apply when ``hold`` ends: the stable one while the spec is unchanged and another revision
    (a trial) is applied; None when nothing is to apply (the stable revision serves, or the spec changed: the
    spec's revision is converged to instead)."""
    if cancelled(hold, generation, current_hash) or status.revision == hold.stable_revision:
        return None
    return hold.stable_revision


def with_trial(hold: TuningHold, trial: str, revision: str) -> TuningHold:
    """``hold`` with trial ``trial`` (revision ``revision``) applied on every replica."""
    return hold.model_copy(update={"trial": trial, "trial_revision": revision})


def held_condition(hold: TuningHold, generation: int, now: dt.datetime) -> Condition:
    """The server's ``TuningHeld=True`` condition while ``hold`` is in force."""
    trial = (f"trial {hold.trial} (revision {hold.trial_revision}) runs on every replica"
             if hold.trial else "between trials")
    message = (f"SGLangTuning {hold.name} (InPlace) holds the server: {trial}; the rollback analysis and any canary "
               f"wait; revision {hold.stable_revision} is applied again at the end")
    return condition(ConditionType.TUNING_HELD, "True", HELD_REASON, message, generation, now)
