"""An InPlace SGLangTuning's hold on its server (issue 17): what a tick decides while held (no verdict, no
rollback, no revision converged to), a spec change ending the hold, the release at the end, and the canary/tuning
exclusion (decisions/tuning/hold.py, decisions/observation.py)."""

from __future__ import annotations

import datetime as dt
from typing import Any

from rollback_driver import FAST, GOOD, OTHER, T0, Run
from test_observation import observed, persisted

from sglang_operator.api.analysis import CanaryPhase, CanaryState
from sglang_operator.api.status import SGLangServerStatus, TuningHold
from sglang_operator.decisions.observation import decide
from sglang_operator.decisions.tuning import hold as holds

TRIAL = "9f4c2d9294"


def hold(generation: int = 1, trial: bool = True) -> dict[str, Any]:
    h = TuningHold(name="tune", stable_revision=GOOD, generation=generation)
    if trial:
        h = holds.with_trial(h, "tune-trial-1", TRIAL)
    return h.model_dump(by_alias=True, exclude_none=True)


def promoted() -> dict[str, Any]:
    run = Run(auto_apply=False)
    run.promote_good()
    return run.state.status_patch() | {"revision": GOOD}


def test_acquire_holds_the_serving_revision_as_stable_and_is_idempotent() -> None:
    status = SGLangServerStatus(revision=GOOD, stable_revision=GOOD)
    got = holds.acquire(status, "tune", 3)
    assert got.hold is not None and (got.hold.stable_revision, got.hold.generation) == (GOOD, 3)
    again = holds.acquire(status.model_copy(update={"tuning_hold": got.hold}), "tune", 4)
    assert again.hold == got.hold  # its own hold, as stored (the generation it began at)


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


def test_while_held_the_trial_runs_unjudged_and_nothing_converges_to_the_spec() -> None:
    stored = promoted() | {"revision": TRIAL, "tuningHold": hold()}
    before = SGLangServerStatus.model_validate(stored)
    # the trial's revision runs; the spec asks for GOOD; minutes pass: no apply, no verdict, no rollback
    for s in range(0, 600, 30):
        d = decide(stored, {}, observed(T0 + dt.timedelta(seconds=s), revision=TRIAL, spec_revision=GOOD), FAST)
        assert d.apply is None
        assert "revisions" not in d.delta and "rejectedRevisions" not in d.delta and "rollbacks" not in d.delta
        assert d.state.analysis == before.analysis and d.state.stable_revision == GOOD
        stored = persisted(stored, d)
    cond = SGLangServerStatus.model_validate(stored).condition("TuningHeld")
    assert cond is not None and cond.status == "True" and "tune-trial-1" in cond.message and GOOD in cond.message


def test_without_the_hold_the_same_tick_converges_to_the_spec() -> None:
    stored = promoted() | {"revision": TRIAL}
    d = decide(stored, {}, observed(T0 + dt.timedelta(seconds=600), revision=TRIAL, spec_revision=GOOD), FAST)
    assert d.apply is not None and d.apply.revision == GOOD


def test_a_spec_change_ends_the_hold_at_once_and_the_condition_says_released() -> None:
    stored = promoted() | {"revision": TRIAL, "tuningHold": hold(generation=1)}
    held = decide(stored, {}, observed(T0, revision=TRIAL, spec_revision=GOOD), FAST)
    stored = persisted(stored, held)
    changed = observed(T0 + dt.timedelta(seconds=1), revision=TRIAL, spec_revision=OTHER)
    changed = changed.__class__(**{**changed.__dict__, "generation": 2})  # the spec changed: generation 2
    d = decide(stored, {}, changed, FAST)
    assert d.apply is not None and d.apply.revision == OTHER  # the spec's revision, not the stable one
    cond = d.status.condition("TuningHeld")
    assert cond is not None and (cond.status, cond.reason) == ("False", "Released")
    h = TuningHold.model_validate(hold(generation=1))
    assert holds.cancelled(h, 2) and not holds.cancelled(h, 1)
    assert holds.active(SGLangServerStatus(tuning_hold=h), 2) is None
    assert holds.active(SGLangServerStatus(tuning_hold=h), 1) == h


def test_release_applies_the_stable_revision_unless_it_serves_or_the_spec_changed() -> None:
    h = TuningHold.model_validate(hold())
    assert holds.release_revision(h, SGLangServerStatus(revision=TRIAL), 1) == GOOD
    assert holds.release_revision(h, SGLangServerStatus(revision=GOOD), 1) is None
    assert holds.release_revision(h, SGLangServerStatus(revision=TRIAL), 2) is None  # the spec's revision wins


def test_a_hand_edited_hold_holds_nothing() -> None:
    stored = promoted() | {"revision": TRIAL, "tuningHold": {"name": "tune"}}
    d = decide(stored, {}, observed(T0 + dt.timedelta(seconds=600), revision=TRIAL, spec_revision=GOOD), FAST)
    assert d.apply is not None
