"""PURE: an InPlace SGLangTuning's hold on its server (issue 17, ``spec.mode: InPlace``), kept in the server's
``status.tuningHold`` (:class:`~sglang_operator.api.status.TuningHold`) so that it survives an operator restart.

While a tuning holds a server (:func:`active`): the observer's tick gives no verdict, rejection or rollback and
converges to no revision (:func:`sglang_operator.decisions.judging.held`): only the current trial's revision, applied
by the tuning through the one apply path in the server's worker, runs on every replica; no canary starts. "Stable"
is the revision serving when the tuning began (``stableRevision``). A spec change of the server (another
``metadata.generation`` than the hold's) ends the hold at once (the analysis converges to the spec's revision again)
and cancels the tuning; any other end (success, failure, deletion of the SGLangTuning, a restart that finds the
tuning over) applies the stable revision again (:func:`release_revision`).

A server is held by at most one of an InPlace tuning and a canary (``status.canary``): :func:`acquire` makes the
tuning wait while a canary runs or another tuning holds the server, with the reason for its ``Running`` condition.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

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


def acquire(status: SGLangServerStatus, tuning: str, generation: int) -> Acquired:
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
    return Acquired(TuningHold(name=tuning, stable_revision=status.revision, generation=generation))


def active(status: SGLangServerStatus, generation: int) -> TuningHold | None:
    """The hold in force for a server at ``generation``: ``status.tuningHold`` unless the spec changed since it
    began (then the analysis goes on at once: the spec's revision is converged to, the tuning is cancelled)."""
    hold = status.tuning_hold
    if hold is None or cancelled(hold, generation):
        return None
    return hold


def cancelled(hold: TuningHold, generation: int) -> bool:
    """Whether the server's spec changed since ``hold`` began (its ``metadata.generation`` is ``generation``)."""
    return generation != hold.generation


def release_revision(hold: TuningHold, status: SGLangServerStatus, generation: int) -> str | None:
    """The revision to apply when ``hold`` ends: the stable one while the spec is unchanged and another revision
    (a trial) is applied; None when nothing is to apply (the stable revision serves, or the spec changed: the
    reconcile handler applied the spec's revision already)."""
    if cancelled(hold, generation) or status.revision == hold.stable_revision:
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
