"""PURE: an InPlace SGLangTuning's hold on its server (``spec.mode: InPlace``), kept in the server's
``status.tuningHold`` (:class:`~sglang_operator.api.status.TuningHold`) so that it survives an operator restart.

While a tuning holds a server (:func:`active`): the server's tick gives no verdict, rejection or rollback and
converges to no revision (:func:`sglang_operator.decisions.observation.held`): only the current trial's revision,
applied by the server's own job through the one apply path, runs on every replica; no canary starts. "Stable" is
the revision serving when the tuning began (``stableRevision``). A spec change of the server — of anything but
``replicas`` (:func:`spec_hash`) — ends the hold at once (the analysis converges to the spec's revision again) and
cancels the tuning; any other end (success, failure, deletion of the SGLangTuning) applies the stable revision again
(:func:`release_revision`). Who takes and ends the hold: :mod:`sglang_operator.decisions.tuning.inplace`.

The hold is the tuning *object's* (:func:`owns`: its name and ``metadata.uid``): a tuning deleted and created again
under the same name does not inherit it, and the server's next tick releases it. It is bounded in time
(:func:`expired`: older than the operator's ``--in-place-hold-max-seconds``, default :data:`MAX_SECONDS`), so a hold
whose tuning never ends cannot keep a server from its own revision, analysis and autoscaler for ever.

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

from sglang_operator.api.rollback import without_replicas
from sglang_operator.api.status import ConditionType, SGLangServerStatus, TuningHold
from sglang_operator.decisions.conditions import Condition, condition

HELD_REASON = "InPlaceTuning"
"""Reason of the server's ``TuningHeld`` condition."""
EXPIRED = "HoldExpired"
"""Why a hold older than the bound (:func:`expired`) is released: ``TuningHold.released``, the reason of
``TuningHeld=False`` and of the server's Warning event, and of the tuning's cancellation."""
MAX_SECONDS = 10800
"""Default of ``--in-place-hold-max-seconds`` (chart value ``inPlaceHoldMaxSeconds``): seconds a hold may stand.
Three hours: a tuning of the default budget (``maxDurationSeconds`` 7200 from its first trial, and the trial running
then, up to ``trialDeadlineSeconds`` 900 to be Ready and its measurement) ends well before."""


@dataclass(frozen=True)
class Acquired:
    """:func:`acquire`'s answer: ``hold`` to write into the server's status (None: the tuning waits, ``reason`` and
    ``message`` say why, for its ``Running=False`` condition)."""

    hold: TuningHold | None
    reason: str = ""
    message: str = ""


def spec_hash(spec: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of an SGLangServer ``spec`` dict (camelCase, as stored) without ``replicas`` and without a default
    probe prompt (:func:`~sglang_operator.api.rollback.without_replicas`, the one rule): what tells a spec change (a
    new revision, the tuning cancelled) from a scale (by a user or an autoscaler: neither)."""
    rest = without_replicas(spec)
    return hashlib.sha256(json.dumps(rest, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def owns(hold: TuningHold, tuning: str, uid: str | None) -> bool:
    """Whether ``hold`` is SGLangTuning ``tuning``'s whose ``metadata.uid`` is ``uid``: the same name and, when both
    are known, the same uid (a tuning created again under the same name is another object)."""
    return hold.name == tuning and (not hold.uid or not uid or hold.uid == uid)


def expired(hold: TuningHold, now: dt.datetime, max_seconds: float | None) -> bool:
    """Whether ``hold`` has stood ``max_seconds`` or more at ``now`` (None: no bound; a hold without ``since``: no)."""
    return max_seconds is not None and hold.since is not None and (now - hold.since).total_seconds() >= max_seconds


def acquire(status: SGLangServerStatus, tuning: str, generation: int, current_hash: str | None = None,
            uid: str | None = None, now: dt.datetime | None = None) -> Acquired:
    """Whether InPlace tuning ``tuning`` (``metadata.uid`` ``uid``) may hold a server whose status is ``status`` at
    ``metadata.generation`` ``generation``: its own hold again (a restart, a stale write: the stored one, unchanged),
    else a new hold with ``stableRevision`` = the revision serving, ``since`` = ``now``; waits (``CanaryInProgress``,
    ``HeldByTuning``, ``NotApplied``) while a canary runs, another tuning holds it (or one of the same name that was
    deleted: the server's tick releases it), or nothing was applied yet."""
    hold = status.tuning_hold
    if hold is not None and owns(hold, tuning, uid):
        return Acquired(hold)
    if hold is not None:
        return Acquired(None, "HeldByTuning", held_by(hold, tuning))
    if status.canary is not None:
        return Acquired(None, "CanaryInProgress", f"a canary of revision {status.canary.revision} runs on the "
                        "server; the InPlace tuning waits until it is promoted or aborted")
    if not status.revision:
        return Acquired(None, "NotApplied", "the server has no revision applied yet")
    return Acquired(TuningHold(name=tuning, uid=uid or None, since=now, stable_revision=status.revision,
                               generation=generation, spec_hash=current_hash))


def held_by(hold: TuningHold, tuning: str) -> str:
    """Why InPlace tuning ``tuning`` waits while ``hold`` (not its own) stands."""
    if hold.name == tuning:
        return (f"an earlier SGLangTuning {hold.name} (uid {hold.uid}, deleted and created again) holds the server; "
                "the server's loop releases that hold, then this tuning gets its own")
    return f"SGLangTuning {hold.name} holds the server (InPlace); this tuning waits until it ends"


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
    if hold.released is not None:
        why = "it held the server too long" if hold.released == EXPIRED else "it ended or is gone"
        message = (f"SGLangTuning {hold.name} (InPlace) is releasing the server ({hold.released}: {why}): revision "
                   f"{hold.stable_revision} is applied again, then the hold is removed")
        return condition(ConditionType.TUNING_HELD, "True", HELD_REASON, message, generation, now)
    trial = (f"trial {hold.trial} (revision {hold.trial_revision}) runs on every replica"
             if hold.trial else "between trials")
    message = (f"SGLangTuning {hold.name} (InPlace) holds the server: {trial}; the rollback analysis and any canary "
               f"wait; revision {hold.stable_revision} is applied again at the end")
    return condition(ConditionType.TUNING_HELD, "True", HELD_REASON, message, generation, now)
