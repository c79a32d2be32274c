"""PURE: the phases of one SGLangTuning and the records its step writes — what the tuning's control code
(:mod:`sglang_operator.control.tuning`) decides, without I/O.

- :func:`begin`: the first step's status (phase Running, ``startedAt``, the Invalid points, ``trialsTotal``);
- :func:`started` / :func:`refused`: a trial's record when it starts, or an Invalid one when the server changed so
  that its point no longer renders (the control trial's refusal ends the tuning: :func:`control_refused`);
- :func:`forced_refused`: a server that forces SGLang's acceptance is never tuned (``Failed``,
  ``ForcedAcceptance``);
- :func:`measured`: a trial's verdict from what was measured (``Completed`` with its objective, ``Pruned`` or
  ``Failed`` with the reason);
- :func:`finish`: the recommendation and the phase a finished search ends in; :func:`ended`: the final status with
  its ``Running`` and ``Complete`` conditions;
- :func:`in_place`: where an InPlace tuning stands with its server's hold (held, waiting for it, lost);
  :func:`trial_state`: whether the server runs the trial it asked for.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, cast

from sglang_operator import builders
from sglang_operator.api.analysis import simulated_acceptance
from sglang_operator.api.server import parse
from sglang_operator.api.status import ConditionType, SGLangServerStatus
from sglang_operator.api.tuning_setup import TuningSetup
from sglang_operator.api.tuning_spec import SGLangTuningSpec
from sglang_operator.api.tuning_status import (
    LevelFigures,
    SGLangTuningStatus,
    Trial,
    TrialSettings,
    TrialVerdict,
    TuningPhase,
)
from sglang_operator.api.view import ObjectRef, ServerView
from sglang_operator.builders.tuning import trial_workload
from sglang_operator.decisions import conditions
from sglang_operator.decisions.conditions import merge, rfc3339
from sglang_operator.decisions.tuning import hold as hold_rules
from sglang_operator.decisions.tuning import inplace
from sglang_operator.decisions.tuning import trials as plan


class TrialFailure(Exception):
    """A trial failed: ``reason`` is SGLang's message (crash tail), the scheduler's, the deadline's or the server's."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


CONTROL_REFUSED = "ControlTrialRefused"
"""The reason a tuning ends ``Failed`` when its control trial cannot run (:func:`control_refused`)."""
FORCED_ACCEPTANCE = "ForcedAcceptance"
"""The reason a tuning ends ``Failed`` when its server forces SGLang's acceptance (:func:`forced_refused`)."""


def condition(type_: str, status: str, reason: str, message: str, generation: int,
              now: dt.datetime) -> dict[str, Any]:
    """A metav1 Condition of the tuning (:func:`sglang_operator.decisions.conditions.condition`; ``status``:
    ``True``, ``False`` or ``Unknown``; message cut to the API's bound)."""
    return conditions.condition(type_, cast(conditions.Status, status), reason, message, generation, now)


def status_body(status: SGLangTuningStatus, generation: int,
                conditions: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """``status`` as the merge patch body of one step: the counts and ``progress`` derived from its trials,
    ``observedGeneration``, ``conditions`` merged into its own (a condition of the same type replaced)."""
    counts = plan.counts(status.trials)
    done = counts["trials_completed"] + counts["trials_failed"] + counts["trials_pruned"]
    status = status.model_copy(update={**counts, "progress": f"{done}/{status.trials_total or done}",
                                       "observed_generation": generation})
    body = status.dump()
    if conditions:
        body["conditions"] = merge([c.model_dump(by_alias=True, exclude_none=True) for c in status.conditions],
                                   conditions)
    return body


def begin(status: SGLangTuningStatus, spec: SGLangTuningSpec, tuning: str, valid: Sequence[Any],
          invalid: Sequence[Any], now: dt.datetime, stable: str | None,
          setup: TuningSetup | None = None) -> tuple[SGLangTuningStatus, str]:
    """The first step: (the new status, the message of ``Running=True`` and of the ``TuningStarted`` event).
    ``setup``: what the trials run on (``status.setup``,
    :func:`~sglang_operator.decisions.tuning.known_best.tuning_setup`)."""
    total = plan.planned_trials(spec, list(valid))
    new = status.model_copy(update={
        "phase": TuningPhase.RUNNING.value, "started_at": rfc3339(now), "trials_total": total,
        "trials_invalid": len(invalid), "trials": plan.invalid_records(tuning, list(invalid), plan.invalid_room(spec)),
        "stable_revision": stable, "setup": setup})
    message = (f"{len(valid)} valid points, {len(invalid)} refused by the API's or the release's rules (on the spec "
               f"each trial runs); up to {total} trials (the control trial without speculative decoding included)")
    return new, message


def started(status: SGLangTuningStatus, name: str, settings: TrialSettings, revision: str,
            now: dt.datetime) -> tuple[SGLangTuningStatus, str]:
    """Trial ``name`` started at ``revision``: (the new status, the message of its ``TrialStarted`` event)."""
    record = Trial(name=name, settings=settings, revision=revision, started_at=rfc3339(now))
    update: dict[str, Any] = {"trials": [*status.trials, record]}
    if not settings.speculative:
        update["control_trial"] = name
    return status.model_copy(update=update), f"trial {name}: {settings.summary()} (revision {revision})"


def measured(trial: Trial, spec: SGLangTuningSpec, levels: list[LevelFigures] | None,
             failure: str | None, now: dt.datetime, trials: Sequence[Trial] = (),
             pruned: str | None = None) -> Trial:
    """Trial ``trial`` with its verdict: ``Failed`` with ``failure`` (SGLang's crash tail, the scheduler's message,
    the deadline's, every request failed, no request finished in the longest window); ``Pruned`` with the pruning
    rule's reason (``pruned``: stopped after its first level, its figures kept, never recommended); else
    ``Completed`` with its objective (:func:`sglang_operator.decisions.tuning.trials.trial_objective` over
    ``trials``, the tuning's so far) and figures per level."""
    score: float | None = None
    figures: list[LevelFigures] = list(levels or [])
    if failure is not None:
        verdict, reason, figures = TrialVerdict.FAILED, failure, []
    elif pruned is not None:
        verdict, reason = TrialVerdict.PRUNED, pruned
    else:
        verdict, reason = TrialVerdict.COMPLETED, None
        score, figures = plan.trial_objective(spec, figures, trials)
    return trial.model_copy(update={
        "verdict": verdict.value, "reason": plan.api_reason(reason) if reason else None,
        "finished_at": rfc3339(now), "objective": round(score, 3) if score is not None else None,
        "levels": figures})


@dataclass(frozen=True)
class Ending:
    """How a finished search ends: ``phase``, ``reason`` (CamelCase) and ``message``, ``status`` with
    ``best`` / ``bestPerLevel`` set."""

    phase: TuningPhase
    reason: str
    message: str
    status: SGLangTuningStatus


def finish(spec: SGLangTuningSpec, status: SGLangTuningStatus, why: str) -> Ending:
    """The end of a search (``why``: the budget or goal that ended it): ``Succeeded`` with the recommendation, or
    ``Failed`` without a completed speculative trial or with more than ``maxFailedTrialCount`` failures."""
    best, per_level = plan.recommendation(spec, status.trials)
    failed = sum(t.verdict == TrialVerdict.FAILED.value for t in status.trials)
    new = status.model_copy(update={"best": best, "best_per_level": per_level})
    if failed > spec.budget.max_failed_trial_count or best is None:
        reason = "TooManyFailedTrials" if best is not None or failed else "NoCompletedTrial"
        message = f"{why}; {failed} failed trials" + ("" if best is None else f"; best so far {best.summary}")
        return Ending(TuningPhase.FAILED, reason, message, new)
    speedup = f", {best.speedup:.2f}x over no speculation" if best.speedup is not None else ""
    message = f"{why}: recommends {best.summary} ({best.objective} tok/s{speedup}) from {best.trial}"
    return Ending(TuningPhase.SUCCEEDED, "Recommended", message, new)


@dataclass(frozen=True)
class Refusal:
    """A trial refused as it was to start: ``status`` with its ``Invalid`` record, and ``ending`` when the tuning
    ends with it (the control trial's: :func:`control_refused`), else None (the search goes on without the
    point)."""

    status: SGLangTuningStatus
    ending: Ending | None = None


def refused(status: SGLangTuningStatus, name: str, settings: TrialSettings, reason: str,
            now: dt.datetime) -> Refusal:
    """Trial ``name`` cannot run: its spec no longer renders (``reason``: the API's or SGLang's refusal; the points
    were validated at the first step: the server changed since). Recorded ``Invalid`` with the reason, never
    started; the control trial's refusal ends the tuning (:func:`control_refused`): without it no speedup means
    anything, and the search would only propose it again."""
    record = Trial(name=name, settings=settings, verdict=TrialVerdict.INVALID.value,
                   reason=plan.api_reason(reason), finished_at=rfc3339(now))
    new = status.model_copy(update={"trials": [*status.trials, record]})
    return Refusal(new, control_refused(new, reason) if not settings.speculative else None)


def control_refused(status: SGLangTuningStatus, reason: str) -> Ending:
    """The end of a tuning whose control trial (the server without speculative decoding) cannot run: ``Failed``,
    reason :data:`CONTROL_REFUSED`, the message naming the refusal (``reason``: the API's or SGLang's), ``status``
    as it is (no recommendation)."""
    message = (f"the control trial (the server without speculative decoding) cannot run, so no trial can: "
               f"{reason}")
    return Ending(TuningPhase.FAILED, CONTROL_REFUSED, message, status)


def forced_refused(status: SGLangTuningStatus, server: str, env: Sequence[dict[str, Any]]) -> Ending | None:
    """The end of a tuning of SGLangServer ``server`` whose ``spec.env`` (``env``) forces SGLang's acceptance
    (``SGLANG_SIMULATE_ACC_*``, :data:`~sglang_operator.api.analysis.SIMULATED_ACCEPTANCE_ENV`): ``Failed``, reason
    :data:`FORCED_ACCEPTANCE`, the message naming the variables; None when it forces nothing. Checked at every step
    (a variable added during the tuning ends it before its next trial): every figure of such a server is made up, and
    recorded it would steer the namespace's known best and measured capacity."""
    names = simulated_acceptance(list(env))
    if not names:
        return None
    message = (f"SGLangServer {server} forces SGLang's acceptance ({', '.join(names)} in spec.env): SGLang then "
               "commits draft tokens it never verified, so every accept length and tok/s a trial measures is made "
               "up; remove the variables to tune the server (a benchmark of forced acceptance is a load test, not "
               "a tuning)")
    return Ending(TuningPhase.FAILED, FORCED_ACCEPTANCE, message, status)


def ended(status: SGLangTuningStatus, phase: TuningPhase, reason: str, message: str, generation: int,
          now: dt.datetime) -> tuple[SGLangTuningStatus, list[dict[str, Any]]]:
    """The final status in ``phase`` (``completedAt`` set) and its ``Running=False`` and ``Complete`` conditions."""
    new = status.model_copy(update={"phase": phase.value, "completed_at": rfc3339(now)})
    ok = "True" if phase is TuningPhase.SUCCEEDED else "False"
    return new, [condition("Running", "False", reason, message, generation, now),
                 condition("Complete", ok, reason, message, generation, now)]


@dataclass(frozen=True)
class HoldView:
    """Where an InPlace tuning stands with its server's hold: ``held`` (with the ``stable`` revision), ``waiting``
    (the server's loop has not given it the hold yet: ``reason`` and ``message`` for ``Running=False``) or ``lost``
    (it began and the hold is gone: cancelled, ``reason`` and ``message`` say why)."""

    kind: Literal["held", "waiting", "lost"]
    reason: str = ""
    message: str = ""
    stable: str | None = None


def in_place(server: SGLangServerStatus, tuning: str, server_name: str, began: bool, uid: str = "") -> HoldView:
    """Where InPlace tuning ``tuning`` (``metadata.uid`` ``uid``; empty: by name alone) stands with SGLangServer
    ``server_name`` whose status is ``server`` (``began``: the tuning's ``startedAt`` is set). A hold released for its
    age (``released: HoldExpired``) is no longer the tuning's; a hold of an earlier tuning of the same name (another
    uid) is not either: the tuning waits for its own."""
    hold = server.tuning_hold
    mine = hold is not None and hold_rules.owns(hold, tuning, uid)
    if hold is not None and mine and hold.released != inplace.EXPIRED:
        return HoldView("held", stable=hold.stable_revision)
    if began:
        held = server.condition(ConditionType.TUNING_HELD)
        if held is not None and held.status == "False" and held.reason == inplace.SPEC_CHANGED:
            return HoldView("lost", "SpecChanged", f"the spec of SGLangServer {server_name} changed: the tuning is "
                            "cancelled, the spec's revision is applied")
        if (hold is not None and mine and hold.released == inplace.EXPIRED) or (
                hold is None and held is not None and held.status == "False" and held.reason == inplace.EXPIRED):
            return HoldView("lost", inplace.EXPIRED, f"SGLangServer {server_name} was held by this tuning longer than "
                            "the operator allows (--in-place-hold-max-seconds, chart value inPlaceHoldMaxSeconds): "
                            "the hold is released, the tuning cancelled")
        return HoldView("lost", "HoldLost", f"SGLangServer {server_name} is no longer held by this tuning "
                        "(status.tuningHold)")
    if hold is not None and not mine:
        return HoldView("waiting", "HeldByTuning", hold_rules.held_by(hold, tuning))
    if hold is not None:
        return HoldView("waiting", "HoldReleasing", f"SGLangServer {server_name}'s loop is releasing this tuning's "
                        f"hold ({hold.released}); the tuning waits for the server to be free")
    if server.canary is not None:
        return HoldView("waiting", "CanaryInProgress", f"a canary of revision {server.canary.revision} runs on the "
                        "server; the InPlace tuning waits until it is promoted or aborted")
    if not server.revision:
        return HoldView("waiting", "NotApplied", "the server has no revision applied yet")
    return HoldView("waiting", "WaitingForHold", f"waiting for SGLangServer {server_name}'s loop to hold it")


def trial_state(server: SGLangServerStatus, tuning: str, trial: Trial, uid: str = "") -> tuple[str, str]:
    """Whether the server runs InPlace trial ``trial`` it was asked for by tuning ``tuning`` (``metadata.uid``
    ``uid``): ``("running", "")`` (its hold names the trial and its revision is applied), ``("failed", why)`` (the
    server's loop could not apply it), ``("lost", why)`` (no hold of this tuning any more, or one released for its
    age), or ``("pending", "")``."""
    hold = server.tuning_hold
    if hold is None or not hold_rules.owns(hold, tuning, uid):
        return "lost", "the server is no longer held by this tuning"
    if hold.released == inplace.EXPIRED:
        return "lost", "the server's loop released this tuning's hold: it held the server longer than the operator " \
            "allows (--in-place-hold-max-seconds)"
    if hold.trial == trial.name and hold.trial_failure:
        return "failed", hold.trial_failure
    if hold.trial == trial.name and server.revision == trial.revision:
        return "running", ""
    return "pending", ""


def speedups(status: SGLangTuningStatus) -> dict[str, float]:
    """The recommendation's speedups over no speculation by level (``"16"``) and overall (``"all"``), for the
    operator's series."""
    out = {str(b.concurrency): b.speedup for b in status.best_per_level if b.speedup is not None}
    if status.best is not None and status.best.speedup is not None:
        out["all"] = status.best.speedup
    return out


def trial_event(done: Trial) -> tuple[str, str, str]:
    """The Event of a trial's verdict: (type, reason ``TrialCompleted`` / ``TrialFailed``, message)."""
    ok = done.verdict == TrialVerdict.COMPLETED.value
    head = f"trial {done.name} {done.settings.summary()}: "
    if ok:
        text = f"objective {done.objective:.1f} tok/s" if done.objective is not None else "completed"
        return "Normal", "TrialCompleted", head + text
    return "Warning", "TrialFailed", head + str(done.reason or "")


def end_event(phase: TuningPhase, message: str) -> tuple[str, str, str]:
    """The Event of a tuning's end: (type, reason ``TuningSucceeded`` / ``TuningFailed``, message)."""
    ok = phase is TuningPhase.SUCCEEDED
    return ("Normal", "TuningSucceeded", message) if ok else ("Warning", "TuningFailed", message)


def render_trial(tuning: ObjectRef, server_view: ServerView, name: str, settings: TrialSettings,
                 in_place: bool, digest: str | None = None) -> tuple[dict[str, Any] | None, builders.Rendered]:
    """Trial ``name`` of SGLangTuning ``tuning`` with ``settings`` over the server's spec as stored (``server_view``):
    (its Shadow Deployment, owned by the tuning, its image pinned to ``digest``, or None InPlace; the trial rendered
    as the server itself would run it — InPlace on ``spec.replicas`` pods). Raises ``SpecError``,
    :class:`~sglang_operator.builders.InvalidSpec` or ``ValueError``."""
    server = server_view.server
    spec = plan.trial_spec(server_view.spec_data, settings, replicas=plan.trial_replicas(server.spec, in_place))
    trial_server = parse({"apiVersion": server.api_version, "kind": server.kind,
                          "metadata": {"name": server.name, "namespace": server.namespace}, "spec": spec})
    if in_place:
        return None, builders.render(trial_server)
    work = trial_workload(trial_server.spec, server.name, server.namespace, name, tuning.stub(), digest)
    return work.manifest, work.rendered


def with_verdict(status: SGLangTuningStatus, done: Trial) -> SGLangTuningStatus | None:
    """``status`` (the tuning's newest: a trial takes minutes) with trial ``done``'s verdict in place of its running
    record; None when ``done`` is not the running trial any more (nothing to write)."""
    running = plan.running(status.trials)
    if running is None or running.name != done.name:
        return None
    return status.model_copy(update={"trials": [done if t.name == done.name else t for t in status.trials]})
