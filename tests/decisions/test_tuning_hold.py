"""An InPlace SGLangTuning's hold on its server, decided by the server's own tick from what the tuning asks
(decisions/tuning/inplace.py, decisions/tuning/hold.py, decisions/observation.py): the hold taken for a tuning
that has not begun, the trial applied by the server's job, no verdict and no convergence while held, the release
(stable revision applied, then the hold removed), a spec change ending the hold at once, a scale keeping it, and
the canary/tuning exclusion."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from rollback_driver import FAST, GOOD, OTHER, T0, Run
from test_observation import observed, persisted, view

from sglang_operator.api.analysis import CanaryPhase, CanaryState
from sglang_operator.api.status import SGLangServerStatus, TuningHold
from sglang_operator.api.tuning_status import TrialSettings
from sglang_operator.decisions.observation import Observed, decide, verifying
from sglang_operator.decisions.rollback import Apply
from sglang_operator.decisions.tuning import hold as holds
from sglang_operator.decisions.tuning import inplace
from sglang_operator.decisions.tuning.inplace import ApplyTrial, TuningRequest

TRIAL = "9f4c2d9294"
HASH = "h1"
SETTINGS = TrialSettings(num_steps=3, eagle_topk=1, num_draft_tokens=4)


def hold(generation: int = 1, trial: bool = True, spec_hash: str | None = HASH) -> dict[str, Any]:
    h = TuningHold(name="tune", stable_revision=GOOD, generation=generation, spec_hash=spec_hash)
    if trial:
        h = holds.with_trial(h, "tune-trial-1", TRIAL)
    return h.model_dump(by_alias=True, exclude_none=True)


def asking(trial: bool = True, active: bool = True, started: bool = True, name: str = "tune") -> TuningRequest:
    return TuningRequest(name=name, in_place=True, active=active, started=started,
                         trial=f"{name}-trial-1" if trial else None, trial_revision=TRIAL if trial else None,
                         trial_settings=SETTINGS if trial else None)


def seen(now: dt.datetime = T0, revision: str = TRIAL, spec_revision: str = GOOD, generation: int = 1,
         spec_hash: str = HASH, tunings: tuple[TuningRequest, ...] = ()) -> Observed:
    got = observed(now, revision=revision, spec_revision=spec_revision)
    return dataclasses.replace(got, generation=generation, spec_hash=spec_hash, tunings=tunings)


def promoted() -> dict[str, Any]:
    run = Run(auto_apply=False)
    run.promote_good()
    return run.state.status_patch() | {"revision": GOOD}


def test_acquire_holds_the_serving_revision_as_stable_and_is_idempotent() -> None:
    status = SGLangServerStatus(revision=GOOD, stable_revision=GOOD)
    got = holds.acquire(status, "tune", 3, HASH)
    assert got.hold is not None and (got.hold.stable_revision, got.hold.generation, got.hold.spec_hash) == (GOOD, 3,
                                                                                                           HASH)
    again = holds.acquire(status.model_copy(update={"tuning_hold": got.hold}), "tune", 4)
    assert again.hold == got.hold  # its own hold, as stored


def test_a_canary_or_another_tuning_makes_the_tuning_wait_with_a_reason() -> None:
    canary = CanaryState(revision=OTHER, stable_revision=GOOD, phase=CanaryPhase.STEPPING, step=0, workload="s-canary",
                         canary_replicas=1, stable_replicas=3, started_at="2026-01-01T00:00:00Z",
                         moved_at="2026-01-01T00:00:00Z")
    got = holds.acquire(SGLangServerStatus(revision=GOOD, canary=canary), "tune", 1)
    assert got.hold is None and got.reason == "CanaryInProgress" and OTHER in got.message
    other = TuningHold(name="other", stable_revision=GOOD, generation=1)
    got = holds.acquire(SGLangServerStatus(revision=GOOD, tuning_hold=other), "tune", 1)
    assert got.hold is None and got.reason == "HeldByTuning" and "other" in got.message
    assert holds.acquire(SGLangServerStatus(), "tune", 1).reason == "NotApplied"


def test_the_servers_tick_takes_the_hold_for_the_oldest_tuning_that_has_not_begun() -> None:
    stored = promoted()
    young = dataclasses.replace(asking(trial=False, started=False, name="young"), created="2026-01-02T00:00:00Z")
    old = dataclasses.replace(asking(trial=False, started=False, name="old"), created="2026-01-01T00:00:00Z")
    began = asking(trial=False, started=True, name="began")  # began once and lost its hold: never again
    d = decide(view(stored), seen(revision=GOOD, tunings=(began, young, old)), FAST)
    assert d.status.tuning_hold is not None and d.status.tuning_hold.name == "old"
    assert d.status.tuning_hold.spec_hash == HASH and d.apply is None
    alone = decide(view(stored), seen(revision=GOOD, tunings=(began,)), FAST)
    assert alone.status.tuning_hold is None and "tuningHold" not in alone.delta


def test_the_hold_goes_only_to_a_tuning_the_queue_admitted() -> None:
    stored = promoted()
    queued = dataclasses.replace(asking(trial=False, started=False, name="queued"), admitted=False,
                                 created="2026-01-01T00:00:00Z")
    admitted = dataclasses.replace(asking(trial=False, started=False, name="admitted"), created="2026-01-02T00:00:00Z")
    d = decide(view(stored), seen(revision=GOOD, tunings=(queued, admitted)), FAST)
    assert d.status.tuning_hold is not None and d.status.tuning_hold.name == "admitted"
    alone = decide(view(stored), seen(revision=GOOD, tunings=(queued,)), FAST)
    assert alone.status.tuning_hold is None


def test_the_wanted_trial_is_applied_by_the_servers_job_once() -> None:
    stored = promoted() | {"tuningHold": hold(trial=False)}
    d = decide(view(stored), seen(revision=GOOD, tunings=(asking(),)), FAST)
    assert d.apply == ApplyTrial("tune", "tune-trial-1", TRIAL, SETTINGS)
    assert not d.verifying  # between trials: nothing measured yet
    # the job applied it: its keys (revision, tuningHold with the trial) are merged into the next tick
    applied = {"revision": TRIAL, "tuningHold": hold()}
    again = decide(view(stored, applied), seen(tunings=(asking(),)), FAST)
    assert again.apply is None and again.delta["tuningHold"]["trial"] == "tune-trial-1" and again.verifying
    failed = {"tuningHold": {**hold(), "trialFailure": "refused"}}
    assert decide(view(stored, failed), seen(revision=GOOD, tunings=(asking(),)), FAST).apply is None  # never retried


def test_while_held_the_trial_runs_unjudged_and_nothing_converges_to_the_spec() -> None:
    stored = promoted() | {"revision": TRIAL, "tuningHold": hold()}
    before = SGLangServerStatus.model_validate(stored)
    # the trial's revision runs; the spec asks for GOOD; minutes pass: no apply, no verdict, no rollback
    for s in range(0, 600, 30):
        d = decide(view(stored), seen(T0 + dt.timedelta(seconds=s), tunings=(asking(),)), FAST)
        assert d.apply is None
        assert "revisions" not in d.delta and "rejectedRevisions" not in d.delta and "rollbacks" not in d.delta
        assert d.state.analysis == before.analysis and d.state.stable_revision == GOOD
        stored = persisted(stored, d)
    cond = SGLangServerStatus.model_validate(stored).condition("TuningHeld")
    assert cond is not None and cond.status == "True" and "tune-trial-1" in cond.message and GOOD in cond.message


def test_without_the_hold_the_same_tick_converges_to_the_spec() -> None:
    stored = promoted() | {"revision": TRIAL}
    d = decide(view(stored), seen(T0 + dt.timedelta(seconds=600)), FAST)
    assert isinstance(d.apply, Apply) and d.apply.revision == GOOD


def test_the_end_applies_the_stable_revision_first_and_then_removes_the_hold() -> None:
    stored = promoted() | {"revision": TRIAL, "tuningHold": hold()}
    stored = persisted(stored, decide(view(stored), seen(tunings=(asking(),)), FAST))  # held: TuningHeld=True
    for gone in ((), (asking(active=False),)):  # deleted, or ended (Succeeded, Failed, Cancelled)
        d = decide(view(stored), seen(tunings=gone), FAST)
        assert isinstance(d.apply, Apply) and d.apply.revision == GOOD
        assert d.status.tuning_hold is not None  # held until the stable revision is applied: no trial pod judged
    applied = {"revision": GOOD}
    d = decide(view(stored, applied), seen(revision=GOOD), FAST)
    assert d.apply is None and d.delta["tuningHold"] is None
    cond = d.status.condition("TuningHeld")
    assert cond is not None and (cond.status, cond.reason) == ("False", "Released")


def test_a_spec_change_ends_the_hold_at_once_and_a_scale_does_not() -> None:
    stored = promoted() | {"revision": TRIAL, "tuningHold": hold(generation=1)}
    stored = persisted(stored, decide(view(stored), seen(tunings=(asking(),)), FAST))
    scaled = decide(view(stored), seen(T0 + dt.timedelta(seconds=1), generation=2, tunings=(asking(),)), FAST)
    assert scaled.apply is None and scaled.status.tuning_hold is not None
    assert scaled.status.tuning_hold.generation == 2  # the hold follows the scale
    changed = seen(T0 + dt.timedelta(seconds=2), spec_revision=OTHER, generation=3, spec_hash="h2",
                   tunings=(asking(),))
    d = decide(view(persisted(stored, scaled)), changed, FAST)
    assert isinstance(d.apply, Apply) and d.apply.revision == OTHER  # the spec's revision, not the stable one
    cond = d.status.condition("TuningHeld")
    assert cond is not None and (cond.status, cond.reason) == ("False", inplace.SPEC_CHANGED)
    h = TuningHold.model_validate(hold(generation=1))
    assert holds.cancelled(h, 2, "h2") and not holds.cancelled(h, 2, HASH)
    old = TuningHold.model_validate(hold(generation=1, spec_hash=None))  # written by an older operator
    assert holds.cancelled(old, 2, HASH) and not holds.cancelled(old, 1, HASH)


def test_the_spec_hash_ignores_replicas_and_the_default_prompt() -> None:
    spec = {"replicas": 2, "model": {"path": "m"}, "rollback": {"probe": {"prompt": ""}}}
    assert holds.spec_hash(spec) == holds.spec_hash({**spec, "replicas": 5}) == holds.spec_hash(
        {"model": {"path": "m"}, "rollback": {"probe": {}}})
    assert holds.spec_hash(spec) != holds.spec_hash({**spec, "model": {"path": "other"}})


def test_release_applies_the_stable_revision_unless_it_serves_or_the_spec_changed() -> None:
    h = TuningHold.model_validate(hold())
    assert holds.release_revision(h, SGLangServerStatus(revision=TRIAL), 1, HASH) == GOOD
    assert holds.release_revision(h, SGLangServerStatus(revision=GOOD), 1, HASH) is None
    assert holds.release_revision(h, SGLangServerStatus(revision=TRIAL), 2, "h2") is None  # the spec's revision wins


def test_a_hand_edited_hold_holds_nothing() -> None:
    stored = promoted() | {"revision": TRIAL, "tuningHold": {"name": "tune"}}
    d = decide(view(stored), seen(T0 + dt.timedelta(seconds=600), tunings=(asking(),)), FAST)
    assert isinstance(d.apply, Apply)


def test_verifying_says_when_scaling_must_hold_still() -> None:
    assert not verifying(SGLangServerStatus(revision=GOOD))
    assert verifying(SGLangServerStatus.model_validate({"revision": TRIAL, "tuningHold": hold()}))
    assert not verifying(SGLangServerStatus.model_validate({"revision": GOOD, "tuningHold": hold(trial=False)}))
    run = Run(auto_apply=False)
    run.promote_good()
    assert not verifying(SGLangServerStatus.model_validate(promoted()))  # Stable


def test_a_tunings_request_is_read_from_its_spec_and_status() -> None:
    body = {"metadata": {"name": "tune", "creationTimestamp": "2026-01-01T00:00:00Z"},
            "spec": {"mode": "InPlace", "serverRef": {"name": "s"}},
            "status": {"phase": "Running", "startedAt": "2026-01-01T00:00:01Z", "trials": [
                {"name": "tune-trial-0", "settings": {}, "revision": "r0", "verdict": "Completed"},
                {"name": "tune-trial-1", "settings": {"numSteps": 3, "eagleTopk": 1, "numDraftTokens": 4},
                 "revision": TRIAL}]}}
    got = inplace.request_of(body)
    assert got is not None and (got.in_place, got.active, got.started, got.trial, got.trial_revision) == (
        True, True, True, "tune-trial-1", TRIAL)
    ended = inplace.request_of({**body, "status": {**body["status"], "phase": "Succeeded"}})
    deleting = inplace.request_of({**body, "metadata": {**body["metadata"], "deletionTimestamp": "x"}})
    assert ended is not None and not ended.active and deleting is not None and not deleting.active
