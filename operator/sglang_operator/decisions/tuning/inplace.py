"""PURE: what the server's loop does about the InPlace SGLangTunings that name it — a feature asks, the server acts.

An SGLangTuning never writes its server. It says what it wants in its own object, and the server's observation
reads that at gather (:class:`TuningRequest`, built by :func:`request_of` from the tuning's spec and status) and
decides here (:func:`step`), in the same pure ``decide`` as the rollback analysis and the canary:

- **the hold**: an InPlace tuning that is active (not ended, not being deleted) and has not begun yet
  (``status.startedAt`` unset) gets the server's hold (:func:`~sglang_operator.decisions.tuning.hold.acquire`:
  never while a canary runs or another tuning holds it; the oldest tuning first). A tuning that began and lost its
  hold (the server's spec changed) never takes it again: it sees the hold gone and ends itself (``Cancelled``);
- **its trial**: the tuning's running trial (a record without verdict, with its revision) is applied on every
  replica by the server's job (:class:`ApplyTrial`) unless it runs already (``hold.trial`` and ``status.revision``)
  or could not be applied (``hold.trialFailure``: the tuning fails the trial);
- **the release**: the tuning ended, is being deleted or is gone — a tuning of the hold's name with another
  ``metadata.uid`` is another object: the hold's tuning is gone (:func:`~sglang_operator.decisions.tuning.hold.owns`)
  — or the hold is older than the operator's bound (:data:`EXPIRED`) → the stable revision is applied again (the
  analysis' :class:`~sglang_operator.decisions.rollback.Apply`) while the hold still stands (``released`` says why; no
  trial is applied then), and the hold is removed at the first tick that finds the stable revision applied, so no
  tick ever judges a trial's pods. A tuning created again under the same name takes a hold of its own afterwards,
  as any tuning that has not begun;
- **a spec change** (of anything but ``replicas``): the hold is removed at once and the analysis converges to the
  spec's revision; a scale moves the hold's generation along and cancels nothing.

The server's one status patch records it; the tuning reads ``status.tuningHold`` and ``status.revision`` of the
server to see its trial running.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sglang_operator.api import tuning as api
from sglang_operator.api.status import SGLangServerStatus, TuningHold
from sglang_operator.api.tuning_spec import TuningMode
from sglang_operator.api.tuning_status import TrialSettings, TuningPhase
from sglang_operator.decisions.actions import Apply
from sglang_operator.decisions.tuning import hold as holds

SPEC_CHANGED = "SpecChanged"
"""Reason of ``TuningHeld=False`` when a spec change ended the hold (the tuning is cancelled)."""
RELEASED = "Released"
"""Reason of ``TuningHeld=False`` when the tuning ended (or went) and the stable revision serves again."""
EXPIRED = holds.EXPIRED
"""Reason of ``TuningHeld=False`` (and of a Warning event) when the hold was older than the operator's bound
(``--in-place-hold-max-seconds``): the stable revision serves again and the tuning is cancelled."""


@dataclass(frozen=True)
class TuningRequest:
    """What one SGLangTuning naming the server asks of it: ``name`` and ``uid`` (``metadata.uid``: a hold is the
    object's, :func:`~sglang_operator.decisions.tuning.hold.owns`); ``in_place`` (``spec.mode: InPlace``);
    ``active`` (not ended, not being deleted); ``started`` (``status.startedAt`` set); ``created`` (its
    ``creationTimestamp``, the order in which waiting tunings get the hold); the running ``trial`` (name, revision,
    settings) it wants applied, if any; ``admitted``: the operator's tuning queue lets it run
    (:func:`sglang_operator.decisions.tuning.queue.admit`; only an admitted tuning is given a hold); ``waiting``: the
    ``(reason, message)`` of its stored ``Running=False`` condition, if it has one (the queue writes a wait only
    when it differs)."""

    name: str
    in_place: bool
    active: bool
    started: bool = False
    created: str = ""
    trial: str | None = None
    trial_revision: str | None = None
    trial_settings: TrialSettings | None = None
    admitted: bool = True
    waiting: tuple[str, str] | None = None
    uid: str = ""


def request_of(tuning: Mapping[str, Any]) -> TuningRequest | None:
    """The :class:`TuningRequest` of an SGLangTuning object (API JSON); None when its spec or status does not parse
    (it asks nothing: its own controller reports it)."""
    meta = tuning.get("metadata") or {}
    spec = tuning.get("spec") or {}
    status = api.parse_tuning_status(tuning)
    ended = status.phase in TERMINAL or bool(meta.get("deletionTimestamp"))
    running = next((t for t in status.trials if t.verdict is None), None)
    said = next((c for c in status.conditions if c.type == "Running"), None)
    return TuningRequest(
        name=str(meta.get("name")), in_place=spec.get("mode") == TuningMode.IN_PLACE.value, active=not ended,
        started=status.started_at is not None, created=str(meta.get("creationTimestamp") or ""),
        trial=running.name if running is not None and running.revision else None,
        trial_revision=running.revision if running is not None else None,
        trial_settings=running.settings if running is not None else None,
        waiting=(said.reason, said.message) if said is not None and said.status == "False" else None,
        uid=str(meta.get("uid") or ""))


TERMINAL = (TuningPhase.SUCCEEDED.value, TuningPhase.FAILED.value, TuningPhase.CANCELLED.value)


@dataclass(frozen=True)
class ApplyTrial:
    """Apply trial ``trial`` of InPlace tuning ``tuning`` (``metadata.uid`` ``uid``; empty: unknown) (``settings``,
    rendering to ``revision``) on every replica of the server, through the one apply path, as the server's job; its
    status keys and ``tuningHold`` with the trial (or its ``trialFailure``) are written by the next tick's one
    patch."""

    tuning: str
    trial: str
    revision: str
    settings: TrialSettings
    uid: str = ""

    @property
    def reason(self) -> str:
        return f"SGLangTuning {self.tuning}: trial {self.trial} ({self.settings.summary()})"


@dataclass(frozen=True)
class HoldStep:
    """:func:`step`'s answer: ``hold`` to store (None: no hold), at most one ``action`` for the server's job, and
    ``ended``: the reason of ``TuningHeld=False`` when a hold ended in this tick (:data:`SPEC_CHANGED`,
    :data:`RELEASED`, :data:`EXPIRED`)."""

    hold: TuningHold | None
    action: ApplyTrial | Apply | None = None
    ended: str | None = None


def step(status: SGLangServerStatus, generation: int, current_hash: str | None,
         requests: Sequence[TuningRequest], now: dt.datetime, max_seconds: float | None = None) -> HoldStep:
    """The hold of a server whose status is ``status`` (what its job applied merged in) at ``generation``, its spec
    hashing to ``current_hash`` (:func:`~sglang_operator.decisions.tuning.hold.spec_hash`), given the ``requests`` of
    the SGLangTunings naming it, at ``now``; a hold that has stood ``max_seconds`` is released (None: no bound). See
    the module docstring. Pure."""
    hold = status.tuning_hold
    if hold is not None:
        return _held(status, hold, generation, current_hash, {r.name: r for r in requests}, now, max_seconds)
    waiting = sorted((r for r in requests if r.in_place and r.active and r.admitted and not r.started),
                     key=lambda r: (r.created, r.name))
    if not waiting:
        return HoldStep(None)
    got = holds.acquire(status, waiting[0].name, generation, current_hash, waiting[0].uid, now)
    return HoldStep(got.hold)


def _held(status: SGLangServerStatus, hold: TuningHold, generation: int, current_hash: str | None,
          requests: Mapping[str, TuningRequest], now: dt.datetime, max_seconds: float | None) -> HoldStep:
    if holds.cancelled(hold, generation, current_hash):
        return HoldStep(None, ended=SPEC_CHANGED)
    request = requests.get(hold.name)
    if request is not None and not holds.owns(hold, request.name, request.uid):
        request = None  # a tuning of the same name created again: the hold's own tuning is gone
    update: dict[str, object] = {}
    if hold.generation != generation or (hold.spec_hash is None and current_hash is not None):
        update.update(generation=generation, spec_hash=hold.spec_hash or current_hash)
    if hold.since is None:  # an older operator's hold: bounded from now on
        update["since"] = now
    if hold.uid is None and request is not None and request.uid:  # an older operator's hold: its tuning's uid
        update["uid"] = request.uid
    if update:
        hold = hold.model_copy(update=update)
    ending = EXPIRED if holds.expired(hold, now, max_seconds) else (
        RELEASED if request is None or not request.active or not request.in_place else None)
    if hold.released != ending:
        hold = hold.model_copy(update={"released": ending})
    if ending is not None:
        revision = holds.release_revision(hold, status, generation, current_hash)
        if revision is None:
            return HoldStep(None, ended=ending)
        why = (f"held the server longer than {max_seconds:.0f} s" if ending == EXPIRED
               else "ended" if request is not None else "is gone")
        return HoldStep(hold, Apply(revision, f"SGLangTuning {hold.name} {why}: the stable revision {revision} "
                                              "applied again"))
    wanted = request.trial if request is not None else None
    if request is None or wanted is None or request.trial_revision is None or request.trial_settings is None:
        return HoldStep(hold)
    if hold.trial == wanted and (hold.trial_failure is not None or status.revision == request.trial_revision):
        return HoldStep(hold)
    return HoldStep(hold, ApplyTrial(hold.name, wanted, request.trial_revision, request.trial_settings, request.uid))

