"""An InPlace SGLangTuning's hold on its server, decided by the server's own tick from what the tuning asks
(decisions/tuning/inplace.py, decisions/tuning/hold.py, decisions/observation.py): the hold taken for a tuning
that has not begun, the trial applied by the server's job, no verdict and no convergence while held, the release
(stable revision applied, then the hold removed), a spec change ending the hold at once, a scale keeping it, the
canary/tuning exclusion, the hold as the tuning object's (its uid: a tuning created again under the same name
inherits nothing) and bounded in time (``--in-place-hold-max-seconds``), and the one spec-without-replicas rule."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from rollback_driver import FAST, GOOD, OTHER, T0, Run
from test_observation import observed, persisted, tick, view

from sglang_operator.api.analysis import CanaryPhase, CanaryState
from sglang_operator.api.rollback import same_spec, without_replicas
from sglang_operator.api.status import SGLangServerStatus, TuningHold
from sglang_operator.api.tuning_status import Trial, TrialSettings
from sglang_operator.decisions.observation import Observed, verifying
from sglang_operator.decisions.rollback import Apply
from sglang_operator.decisions.tuning import hold as holds
from sglang_operator.decisions.tuning import inplace, lifecycle
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
    d = tick(view(stored), seen(revision=GOOD, tunings=(began, young, old)), FAST)
    assert d.status.tuning_hold is not None and d.status.tuning_hold.name == "old"
    assert d.status.tuning_hold.spec_hash == HASH and d.apply is None
    alone = tick(view(stored), seen(revision=GOOD, tunings=(began,)), FAST)
    assert alone.status.tuning_hold is None and "tuningHold" not in alone.delta


def test_the_hold_goes_only_to_a_tuning_the_queue_admitted() -> None:
    stored = promoted()
    queued = dataclasses.replace(asking(trial=False, started=False, name="queued"), admitted=False,
                                 created="2026-01-01T00:00:00Z")
    admitted = dataclasses.replace(asking(trial=False, started=False, name="admitted"), created="2026-01-02T00:00:00Z")
    d = tick(view(stored), seen(revision=GOOD, tunings=(queued, admitted)), FAST)
    assert d.status.tuning_hold is not None and d.status.tuning_hold.name == "admitted"
    alone = tick(view(stored), seen(revision=GOOD, tunings=(queued,)), FAST)
    assert alone.status.tuning_hold is None


def test_the_wanted_trial_is_applied_by_the_servers_job_once() -> None:
    stored = promoted() | {"tuningHold": hold(trial=False)}
    d = tick(view(stored), seen(revision=GOOD, tunings=(asking(),)), FAST)
    assert d.apply == ApplyTrial("tune", "tune-trial-1", TRIAL, SETTINGS)
    assert not d.verifying  # between trials: nothing measured yet
    # the job applied it: its keys (revision, tuningHold with the trial) are merged into the next tick
    applied = {"revision": TRIAL, "tuningHold": hold()}
    again = tick(view(stored, applied), seen(tunings=(asking(),)), FAST)
    assert again.apply is None and again.delta["tuningHold"]["trial"] == "tune-trial-1" and again.verifying
    failed = {"tuningHold": {**hold(), "trialFailure": "refused"}}
    assert tick(view(stored, failed), seen(revision=GOOD, tunings=(asking(),)), FAST).apply is None  # never retried


def test_while_held_the_trial_runs_unjudged_and_nothing_converges_to_the_spec() -> None:
    stored = promoted() | {"revision": TRIAL, "tuningHold": hold()}
    before = SGLangServerStatus.model_validate(stored)
    # the trial's revision runs; the spec asks for GOOD; minutes pass: no apply, no verdict, no rollback
    for s in range(0, 600, 30):
        d = tick(view(stored), seen(T0 + dt.timedelta(seconds=s), tunings=(asking(),)), FAST)
        assert d.apply is None
        assert "revisions" not in d.delta and "rejectedRevisions" not in d.delta and "rollbacks" not in d.delta
        assert d.state.analysis == before.analysis and d.state.stable_revision == GOOD
        stored = persisted(stored, d)
    cond = SGLangServerStatus.model_validate(stored).condition("TuningHeld")
    assert cond is not None and cond.status == "True" and "tune-trial-1" in cond.message and GOOD in cond.message


def test_without_the_hold_the_same_tick_converges_to_the_spec() -> None:
    stored = promoted() | {"revision": TRIAL}
    d = tick(view(stored), seen(T0 + dt.timedelta(seconds=600)), FAST)
    assert isinstance(d.apply, Apply) and d.apply.revision == GOOD


def test_the_end_applies_the_stable_revision_first_and_then_removes_the_hold() -> None:
    stored = promoted() | {"revision": TRIAL, "tuningHold": hold()}
    stored = persisted(stored, tick(view(stored), seen(tunings=(asking(),)), FAST))  # held: TuningHeld=True
    for gone in ((), (asking(active=False),)):  # deleted, or ended (Succeeded, Failed, Cancelled)
        d = tick(view(stored), seen(tunings=gone), FAST)
        assert isinstance(d.apply, Apply) and d.apply.revision == GOOD
        assert d.status.tuning_hold is not None  # held until the stable revision is applied: no trial pod judged
    applied = {"revision": GOOD}
    d = tick(view(stored, applied), seen(revision=GOOD), FAST)
    assert d.apply is None and d.delta["tuningHold"] is None
    cond = d.status.condition("TuningHeld")
    assert cond is not None and (cond.status, cond.reason) == ("False", "Released")


def test_a_spec_change_ends_the_hold_at_once_and_a_scale_does_not() -> None:
    stored = promoted() | {"revision": TRIAL, "tuningHold": hold(generation=1)}
    stored = persisted(stored, tick(view(stored), seen(tunings=(asking(),)), FAST))
    scaled = tick(view(stored), seen(T0 + dt.timedelta(seconds=1), generation=2, tunings=(asking(),)), FAST)
    assert scaled.apply is None and scaled.status.tuning_hold is not None
    assert scaled.status.tuning_hold.generation == 2  # the hold follows the scale
    changed = seen(T0 + dt.timedelta(seconds=2), spec_revision=OTHER, generation=3, spec_hash="h2",
                   tunings=(asking(),))
    d = tick(view(persisted(stored, scaled)), changed, FAST)
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
    d = tick(view(stored), seen(T0 + dt.timedelta(seconds=600), tunings=(asking(),)), FAST)
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


def owned_hold(uid: str = "uid-1", since: dt.datetime | None = T0, trial: bool = True,
               released: str | None = None) -> dict[str, Any]:
    """A hold that records its tuning's uid and when it began."""
    return {**hold(trial=trial), "uid": uid, **({"since": since.isoformat()} if since else {}),
            **({"released": released} if released else {})}


def test_acquire_records_the_tunings_uid_and_when_the_hold_began() -> None:
    status = SGLangServerStatus(revision=GOOD, stable_revision=GOOD)
    got = holds.acquire(status, "tune", 3, HASH, "uid-1", T0)
    assert got.hold is not None and (got.hold.uid, got.hold.since) == ("uid-1", T0)
    mine = status.model_copy(update={"tuning_hold": got.hold})
    assert holds.acquire(mine, "tune", 3, HASH, "uid-1", T0 + dt.timedelta(seconds=9)).hold == got.hold
    again = holds.acquire(mine, "tune", 3, HASH, "uid-2", T0)  # created again under the same name: not its hold
    assert again.hold is None and again.reason == "HeldByTuning" and "earlier SGLangTuning tune" in again.message
    assert holds.owns(got.hold, "tune", "uid-1") and not holds.owns(got.hold, "tune", "uid-2")
    assert holds.owns(got.hold, "tune", "") and not holds.owns(got.hold, "other", "uid-1")


def test_a_tuning_created_again_under_the_same_name_releases_the_old_hold_in_one_tick() -> None:
    stored = promoted() | {"tuningHold": owned_hold(trial=False)}  # between trials: the stable revision serves
    stored = persisted(stored, tick(view(stored), seen(revision=GOOD, tunings=(asking(trial=False),)), FAST))
    new = dataclasses.replace(asking(trial=False, started=False), uid="uid-2")  # deleted, created again, not begun
    d = tick(view(stored), seen(T0 + dt.timedelta(seconds=1), revision=GOOD, tunings=(new,)), FAST)
    assert d.apply is None and d.delta["tuningHold"] is None  # released in this very tick
    cond = d.status.condition("TuningHeld")
    assert cond is not None and (cond.status, cond.reason) == ("False", inplace.RELEASED)
    # the next tick gives the new tuning a hold of its own (its uid, its time, the revision serving now)
    stored = persisted(stored, d)
    later = T0 + dt.timedelta(seconds=2)
    d = tick(view(stored), seen(later, revision=GOOD, tunings=(new,)), FAST)
    assert d.status.tuning_hold is not None
    assert (d.status.tuning_hold.uid, d.status.tuning_hold.since, d.status.tuning_hold.stable_revision) == (
        "uid-2", later, GOOD)


def test_during_a_trial_the_old_hold_is_released_in_one_tick_and_never_serves_the_new_tuning() -> None:
    stored = promoted() | {"revision": TRIAL, "tuningHold": owned_hold()}
    new = dataclasses.replace(asking(started=False), uid="uid-2")  # the new tuning asks a trial of the same name
    d = tick(view(stored), seen(T0 + dt.timedelta(seconds=1), tunings=(new,)), FAST)
    assert isinstance(d.apply, Apply) and d.apply.revision == GOOD and "is gone" in d.apply.reason  # no ApplyTrial
    assert d.status.tuning_hold is not None and d.status.tuning_hold.released == inplace.RELEASED
    assert d.status.tuning_hold.uid == "uid-1"
    d = tick(view(persisted(stored, d), {"revision": GOOD}), seen(revision=GOOD, tunings=(new,)), FAST)
    assert d.apply is None and d.status.tuning_hold is None  # removed once the stable revision is applied


def test_a_hold_older_than_the_bound_is_released_with_its_reason_and_one_event() -> None:
    stored = promoted() | {"revision": TRIAL, "tuningHold": owned_hold()}
    mine = dataclasses.replace(asking(), uid="uid-1")
    young = tick(view(stored), dataclasses.replace(seen(T0 + dt.timedelta(seconds=599), tunings=(mine,)),
                                                     hold_max_seconds=600), FAST)
    assert young.apply is None and young.status.tuning_hold is not None and young.status.tuning_hold.released is None
    old = dataclasses.replace(seen(T0 + dt.timedelta(seconds=600), tunings=(mine,)), hold_max_seconds=600)
    d = tick(view(stored), old, FAST)
    assert isinstance(d.apply, Apply) and d.apply.revision == GOOD  # the stable revision first, the hold standing
    assert d.status.tuning_hold is not None and d.status.tuning_hold.released == inplace.EXPIRED
    assert [(e.type, e.reason) for e in d.events if e.reason == inplace.EXPIRED] == [("Warning", "HoldExpired")]
    stored = persisted(stored, d)
    done = dataclasses.replace(seen(T0 + dt.timedelta(seconds=605), revision=GOOD, tunings=(mine,)),
                               hold_max_seconds=600)
    d = tick(view(stored, {"revision": GOOD}), done, FAST)
    assert d.apply is None and d.delta["tuningHold"] is None
    assert [e for e in d.events if e.reason == inplace.EXPIRED] == []  # said once
    cond = d.status.condition("TuningHeld")
    assert cond is not None and (cond.status, cond.reason) == ("False", inplace.EXPIRED) and "600 s" in cond.message
    # between trials the expired hold goes in the same tick, with its event
    between = promoted() | {"tuningHold": owned_hold(trial=False)}
    d = tick(view(between), dataclasses.replace(seen(T0 + dt.timedelta(hours=4), revision=GOOD, tunings=(mine,)),
                                                  hold_max_seconds=holds.MAX_SECONDS), FAST)
    assert d.apply is None and d.status.tuning_hold is None
    assert [e.reason for e in d.events if e.reason == inplace.EXPIRED] == ["HoldExpired"]


def test_an_older_operators_hold_gets_its_tunings_uid_and_is_bounded_from_the_first_tick() -> None:
    stored = promoted() | {"revision": TRIAL, "tuningHold": hold()}  # no uid, no since
    mine = dataclasses.replace(asking(), uid="uid-1")
    now = T0 + dt.timedelta(days=2)
    d = tick(view(stored), seen(now, tunings=(mine,)), FAST)
    assert d.apply is None and d.status.tuning_hold is not None
    assert (d.status.tuning_hold.uid, d.status.tuning_hold.since) == ("uid-1", now)


def test_the_tuning_sees_a_hold_of_its_name_with_another_uid_or_an_expired_one_as_not_its_own() -> None:
    trial = Trial(name="tune-trial-1", settings=SETTINGS, revision=TRIAL)
    status = SGLangServerStatus.model_validate({"revision": TRIAL, "tuningHold": owned_hold()})
    assert lifecycle.in_place(status, "tune", "s", True, "uid-1").kind == "held"
    assert lifecycle.trial_state(status, "tune", trial, "uid-1") == ("running", "")
    other = lifecycle.in_place(status, "tune", "s", False, "uid-2")
    assert (other.kind, other.reason) == ("waiting", "HeldByTuning") and "earlier" in other.message
    assert lifecycle.trial_state(status, "tune", trial, "uid-2")[0] == "lost"
    expired = SGLangServerStatus.model_validate({"revision": TRIAL,
                                                 "tuningHold": owned_hold(released=inplace.EXPIRED)})
    lost = lifecycle.in_place(expired, "tune", "s", True, "uid-1")
    assert (lost.kind, lost.reason) == ("lost", "HoldExpired")
    assert lifecycle.trial_state(expired, "tune", trial, "uid-1")[0] == "lost"
    releasing = SGLangServerStatus.model_validate({"revision": TRIAL,
                                                   "tuningHold": owned_hold(released=inplace.RELEASED)})
    assert lifecycle.in_place(releasing, "tune", "s", True, "uid-1").kind == "held"  # its end: nothing new to say


def test_the_one_spec_without_replicas_rule() -> None:
    spec = {"replicas": 2, "model": {"path": "m"}, "rollback": {"probe": {"prompt": ""}}}
    assert without_replicas(spec) == {"model": {"path": "m"}, "rollback": {"probe": {}}}
    assert same_spec(spec, {**spec, "replicas": 7}) and not same_spec(spec, {**spec, "model": {"path": "x"}})
    assert not same_spec(None, spec)
    assert holds.spec_hash(spec) == holds.spec_hash(without_replicas({**spec, "replicas": 9}))
