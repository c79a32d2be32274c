"""PURE: one observation of one SGLangServer decided (gather → decide → persist; docs/architecture.md,
"The control loop").

The observer (:mod:`sglang_operator.control.observer`) *gathers* what it saw into an :class:`Observed` (pods'
health, what SGLang reports it runs, the interval's samples, the analysis' inputs), :func:`decide` turns the status
(typed: :class:`~sglang_operator.api.status.SGLangServerStatus`, parsed once per view) and that into an
:class:`ObservationDecision` — the new status keys, the events to post in order, at most one revision to apply — and
the observer *persists* it: one status patch (what differs from the status as stored, with the view's
resourceVersion), then the events, then the apply. No I/O, no clock: ``observed.now`` is the tick's time.

Decided here, not in the glue: the rollback analysis (:func:`sglang_operator.decisions.judging.judge`), the
reconcile handler's ``ApplyFailed`` shown as ``Degraded`` while it lasts (pod health would otherwise call the
previous revision's pods healthy), and which events are posted (a new non-analysis ``Degraded`` reason, a change
of SettingsDiffer's differences; the analysis' own).
"""

from __future__ import annotations

import datetime as dt
import functools
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from sglang_operator.api.analysis import AnalysisPhase
from sglang_operator.api.base import truncate
from sglang_operator.api.rollback import RollbackPolicy
from sglang_operator.api.status import ConditionType, SGLangServerStatus, TuningHold
from sglang_operator.decisions import judging
from sglang_operator.decisions import status as status_decisions
from sglang_operator.decisions.actions import PlaceCanary, PromoteCanary, WriteScaledObject
from sglang_operator.decisions.conditions import Condition, condition, find, same_stored
from sglang_operator.decisions.derive import derive
from sglang_operator.decisions.pods import PodHealth
from sglang_operator.decisions.rollback import Apply, Event
from sglang_operator.decisions.rollback_state import CANARY_REASON_PREFIX, Observation, RollbackState
from sglang_operator.decisions.sampling.model import Sample
from sglang_operator.decisions.tuning import hold as holds
from sglang_operator.decisions.tuning import inplace
from sglang_operator.decisions.tuning.inplace import ApplyTrial, TuningRequest

ServerAction = Apply | PlaceCanary | PromoteCanary | ApplyTrial
"""What one tick may ask the server's job to do (at most one): apply a revision (a rollback, a retry, a lost update
converged, the stable revision after a tuning), place or promote a canary, or apply an InPlace tuning's trial."""

ANALYSIS_REASONS = ("RolledBack", "Regressed", "AnalysisPaused")
"""Degraded reasons the rollback analysis gives (it posts its own events for them)."""
_NOTHING: Mapping[str, Any] = MappingProxyType({})


@dataclass(frozen=True)
class Observed:
    """What one observation gathered (all I/O done): ``health`` of the pods; ``effective`` settings newly read from
    ``/server_info`` (None: none new) and ``diffs`` from the spec (None: not Ready or not read); the interval's
    ``samples`` (None: not due) and the serving revision's status ``figures``; the analysis' ``observation``;
    ``speculative``: the SpeculativeDecodingActive condition when it can be told; ``promote_token``: the promote
    annotation; ``apply_failure``: the reconcile handler's failing apply (the server's memory; a child another owner
    holds, the analysis' apply's too) and ``apply_failure_reason`` the ``Degraded`` reason it shows, ``previous_diffs``:
    the differences last posted; ``tunings``: what the SGLangTunings naming the server ask
    (:class:`~sglang_operator.decisions.tuning.inplace.TuningRequest`); ``spec_hash``: the object's spec hashed
    without ``replicas`` (:func:`~sglang_operator.decisions.tuning.hold.spec_hash`); ``settings``: the
    ``SpeculativeSettings`` condition against the namespace's known best
    (:func:`~sglang_operator.decisions.tuning.known_best.condition`; None: nothing to say); ``hold_max_seconds``: how
    long an InPlace tuning's hold may stand (``--in-place-hold-max-seconds``; None: no bound); ``sampling``: the
    ``SamplingBackedOff`` condition of a server over its parse CPU budget
    (:func:`~sglang_operator.decisions.sampling.budget.condition`; None: nothing to say)."""

    now: dt.datetime
    generation: int
    health: PodHealth
    observation: Observation
    effective: dict[str, Any] | None = None
    diffs: list[str] | None = None
    samples: list[Sample] | None = None
    figures: dict[str, Any] = field(default_factory=dict)
    speculative: Condition | None = None
    promote_token: str | None = None
    apply_failure: str | None = None
    apply_failure_reason: str = "ApplyFailed"
    previous_diffs: list[str] | None = None
    tunings: tuple[TuningRequest, ...] = ()
    spec_hash: str | None = None
    settings: Condition | None = None
    hold_max_seconds: float | None = holds.MAX_SECONDS
    sampling: Condition | None = None


@dataclass(frozen=True)
class ObservationDecision:
    """What to persist: ``status_json`` (every key the observation owns, with what the server's job applied merged
    in, as JSON: the observer writes what of it differs from the status as stored, one merge patch, nothing when
    nothing differs) and :attr:`status` (the same, typed), ``events`` in the order to post them, ``apply`` (at most
    one revision to apply, or the canary's placement or promotion, as the server's job), ``state`` (the analysis,
    for the operator's series), ``diffs`` (the SettingsDiffer differences observed, for the server's memory),
    ``scaled_object``: the KEDA ScaledObject to write after the status patch (:func:`sglang_operator.decisions.
    autoscaling.decided`; None: nothing to write this tick)."""

    status_json: dict[str, Any]
    events: list[Event]
    apply: ServerAction | None
    state: RollbackState
    diffs: list[str] | None = None
    scaled_object: WriteScaledObject | None = None

    @property
    def verifying(self) -> bool:
        """Whether the server's loop verifies after this tick (:func:`verifying`): a revision warming up or
        verifying, a canary, an InPlace trial measured. While true, scaling is held still."""
        return verifying(self.status)

    @functools.cached_property
    def status(self) -> SGLangServerStatus:
        """The new status as :class:`SGLangServerStatus`, parsed at its first read (the observer persists
        what differs and reads the next view's status typed, so a tick pays no second parse). Raises
        ``pydantic.ValidationError`` if the decision broke the status schema (a bug)."""
        return SGLangServerStatus.model_validate(self.status_json)


def verifying(status: SGLangServerStatus) -> bool:
    """Whether the server's loop is verifying now: a revision warming up or verifying, a canary running, or an
    InPlace tuning's trial applied on the server's pods (being measured). Scaling is held still while it is true (an
    autoscaler reads it: :attr:`ObservationDecision.verifying`; the API's ``status.autoscaling.judging``)."""
    analysis = status.analysis
    if analysis is not None and analysis.phase in (AnalysisPhase.WARMING_UP, AnalysisPhase.VERIFYING):
        return True
    hold = status.tuning_hold
    return status.canary is not None or (hold is not None and hold.trial is not None)


def held(status: SGLangServerStatus, hold: TuningHold, pod_conditions: list[Condition], policy: RollbackPolicy,
         now: dt.datetime, generation: int, speculative: Condition | None) -> judging.Judged:
    """A tick while an InPlace tuning holds the server: the analysis in ``status``, unchanged (no sample judged, no
    verdict, rejection or rollback, no revision converged to, no canary started), pod health's conditions with
    ``TuningHeld=True``."""
    state = RollbackState.from_status(status)
    conditions = derive(pod_conditions, state, policy.action, generation, now, speculative)
    return judging.Judged(state, {}, [*conditions, holds.held_condition(hold, generation, now)])


def _expiry(before: TuningHold | None, after: TuningHold | None, ended: str | None,
            max_seconds: float | None) -> str | None:
    """What to say when an InPlace hold is released for its age (``before``: the stored hold, ``after``: the one to
    store, ``ended``: why a hold ended in this tick); None when it is not."""
    gone = after is None and ended == inplace.EXPIRED and before is not None
    hold = after if after is not None and after.released == inplace.EXPIRED else before if gone else None
    if hold is None:
        return None
    return (f"SGLangTuning {hold.name} (InPlace) held the server longer than {max_seconds or 0:.0f} s "
            f"(--in-place-hold-max-seconds): the hold is released, the tuning cancelled, revision "
            f"{hold.stable_revision} serves again")


def decide(status: SGLangServerStatus, observed: Observed, policy: RollbackPolicy,
           applied: Mapping[str, Any] = _NOTHING) -> ObservationDecision:
    """Decide one observation of a server: its ``status`` (the stored one with what the server's job applied since
    merged in, typed: :attr:`~sglang_operator.api.view.ServerView.status`; the analysis follows it), ``applied``
    (those keys as the job wrote them, :attr:`~sglang_operator.api.view.ServerView.applied`: this tick's one patch
    writes them), what was ``observed``, and the policy of the object's spec (its ``intervalSeconds`` the sampling
    interval in force). The hold of an InPlace tuning (:func:`sglang_operator.decisions.tuning.inplace.step`) comes
    first: while it stands, the analysis is held. Pure."""
    o = observed
    revision = str(status.revision)
    hold_step = inplace.step(status, o.generation, o.spec_hash, o.tunings, o.now, o.hold_max_seconds)
    hold = hold_step.hold
    if hold is not None:
        judged = held(status, hold, list(o.health.conditions), policy, o.now, o.generation, o.speculative)
    else:
        judged = judging.judge(status, judging.sample_for(o.samples, revision), policy, o.now,
                               o.observation, list(o.health.conditions), o.generation, o.speculative,
                               o.promote_token)
    # the known best compares what the spec runs, never an InPlace tuning's trial (held: left as it was)
    conditions = judged.conditions if o.settings is None or hold is not None else [*judged.conditions, o.settings]
    conditions = conditions if o.sampling is None else [*conditions, o.sampling]
    was_held = any(c.type == ConditionType.TUNING_HELD and c.status == "True" for c in status.conditions)
    expiry = _expiry(status.tuning_hold, hold, hold_step.ended, o.hold_max_seconds)
    if hold is None and was_held:
        why = ("the server's spec changed: the InPlace tuning is cancelled, the spec's revision is applied"
               if hold_step.ended == inplace.SPEC_CHANGED else expiry or "no InPlace tuning holds the server")
        conditions = [*conditions, condition(ConditionType.TUNING_HELD, "False", hold_step.ended or inplace.RELEASED,
                                             why, o.generation, o.now)]
    if o.apply_failure:  # the reconcile handler could not apply the spec (kopf retries): say so, not "healthy"
        conditions = [c for c in conditions if c["type"] != "Degraded"] + [
            condition("Degraded", "True", o.apply_failure_reason, truncate(o.apply_failure), o.generation, o.now)]
    new = status_decisions.observed(status, replace(o.health, conditions=conditions), o.generation, o.now,
                                    o.effective, o.diffs, o.figures, o.observation.not_sglang)
    new = {**applied, **new, **judged.status,
           "tuningHold": hold.model_dump(by_alias=True, exclude_none=True, mode="json") if hold else None}
    seen = o.observation.canary  # the printer columns' row: both sides of a canary
    split = (seen.stable_ready, sum(p.ready for p in seen.pods)) if seen is not None else None
    new["summary"] = status_decisions.summary(new.get("readyReplicas"), new.get("analysis"), new.get("canary"), split)
    events: list[Event] = []
    old_d, new_d = status.condition(ConditionType.DEGRADED), find(new["conditions"], ConditionType.DEGRADED) or {}
    if new_d.get("status") == "True" and (old_d.reason if old_d is not None else None) != new_d.get("reason") \
            and new_d.get("reason") not in ANALYSIS_REASONS \
            and not str(new_d.get("reason")).startswith(CANARY_REASON_PREFIX):  # the analysis posts its own events
        events.append(Event("Warning", str(new_d["reason"]), str(new_d.get("message", ""))))
    if o.diffs and o.diffs != o.previous_diffs and not same_stored(status.conditions, new["conditions"]):
        events.append(Event("Warning", "SettingsDiffer", "; ".join(o.diffs)))
    events += [a for a in judged.actions if isinstance(a, Event)]
    before = status.tuning_hold
    if expiry and (before is None or before.released != inplace.EXPIRED):  # once, when the expiry is decided
        events.append(Event("Warning", inplace.EXPIRED, expiry))
    apply: ServerAction | None = hold_step.action or next(
        (a for a in reversed(judged.actions) if isinstance(a, Apply | PlaceCanary | PromoteCanary)), None)
    return ObservationDecision(new, events, apply, judged.state, o.diffs)
