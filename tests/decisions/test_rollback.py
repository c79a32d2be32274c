"""The rollback decision, transition by transition (issue 8 item 3), including every way automatic rollback goes
wrong for users of other tools (the issue's "Why"): idle counted as failure, one bad interval, analysis before
Ready, readiness blips resetting the clock, all errors still a success, rollback loops, no way to retry, the retry
annotation changed twice quickly, Paused."""

from __future__ import annotations

import datetime as dt

import pytest
from rollback_driver import (
    BAD,
    BAD_LEN,
    BAD_TPS,
    DEFAULT,
    FAST,
    GOOD,
    GOOD_LEN,
    GOOD_TPS,
    OTHER,
    SETUP,
    T0,
    Run,
    pods,
    roundtrip,
)

from sglang_operator.api.rollback import RollbackAction, RollbackPolicy, Signal
from sglang_operator.api.status import Verdict
from sglang_operator.decisions.rollback import Apply, RecordVerdict, what_should_run
from sglang_operator.decisions.rollback_state import RollbackState
from sglang_operator.decisions.sampling.model import SampleKind

ROLLBACK_MESSAGE = f"{BAD}: 36.0 tok/s, accept length 1.75 < 0.85 × 51.6 tok/s, 0.9 × 2.73 of {GOOD}"


def verdicts(run: Run, revision: str) -> list[Verdict]:
    return [a.verdict for a in run.actions if isinstance(a, RecordVerdict) and a.revision == revision]


def regressed_run(policy: RollbackPolicy = FAST) -> Run:
    """GOOD promoted, then the spec moves to BAD, which warms up and is judged."""
    run = Run(policy=policy)
    run.promote_good()
    run.apply_spec(BAD)
    run.tick(policy.warmup_seconds)
    assert run.phase == "Verifying"
    return run


# --- warm-up and the progress deadline ------------------------------------------------------------------------


def test_a_new_revision_warms_up_from_the_moment_all_its_pods_are_ready() -> None:
    run = Run(pods=pods(2, ready=False), desired=2)
    run.tick()
    assert run.phase == "WarmingUp" and run.events("WarmingUp")
    run.tick(100)
    run.pods = (run.pods[0].__class__("p0", True, 0), run.pods[1])  # one of two Ready: not yet
    run.tick(30)
    assert run.state.analysis is not None and run.state.analysis.ready_since is None
    run.pods = pods(2)
    run.tick(5)
    ready_at = run.now
    run.tick(FAST.warmup_seconds - 1)
    assert run.phase == "WarmingUp"
    run.tick(1)
    assert run.phase == "Verifying" and run.state.analysis.warmed_up_at == ready_at + dt.timedelta(seconds=10)


def test_samples_before_the_warm_up_ends_are_not_judged() -> None:
    """Analysis starting before the pods are Ready would judge a loading server."""
    run = Run(pods=pods(1, ready=False))
    run.tick()
    run.intervals(5, tps=1.0, accept=1.0)  # a terrible figure while loading: skipped
    assert run.phase == "WarmingUp" and run.state.analysis is not None
    assert run.state.analysis.consecutive_failures == 0
    assert run.state.analysis.last_sample is not None and run.state.analysis.last_sample.verdict == "Skipped"
    run.pods = pods(1)
    run.tick()
    run.tick(FAST.warmup_seconds - 2)
    straddling = run.sample(tps=1.0, accept=1.0)  # starts 2 s before the warm-up ends: not judged either
    run.tick(FAST.interval_seconds, straddling)
    assert run.state.analysis.last_sample.verdict == "Skipped"
    assert run.state.analysis.consecutive_failures == 0


def test_readiness_blips_neither_end_the_warm_up_nor_reset_the_deadline() -> None:
    """A crash-looping revision is Ready for moments; its clock must not restart, and it fails at the deadline."""
    policy = RollbackPolicy(**{**FAST.model_dump(), "progress_deadline_seconds": 60})
    run = Run(policy=policy)
    run.promote_good()
    run.pods = pods(1, ready=False)
    run.apply_spec(BAD)
    started = run.now
    restarts = 0
    while run.revision == BAD and run.now - started < dt.timedelta(seconds=120):
        restarts += 1
        run.pods = pods(1, ready=True, restarts=restarts)  # Ready for 5 s, then crashes again
        run.tick(5)
        assert run.revision != BAD or run.phase == "WarmingUp"
        run.pods = pods(1, ready=False, restarts=restarts)
        run.tick(5)
    assert run.now - started == dt.timedelta(seconds=60), "failed exactly at the progress deadline"
    assert run.applies[-1].revision == GOOD and run.revision == GOOD
    rejection = run.state.rejection(BAD)
    assert rejection is not None and "progressDeadlineSeconds" in rejection.reason
    assert rejection.reason.startswith(f"{BAD}: 0/1 pods Ready, not warmed up 60 s after it was applied")


def test_a_restart_between_two_ticks_restarts_the_warm_up() -> None:
    run = Run()
    run.tick()
    run.tick(8)
    run.pods = pods(1, restarts=1)  # crashed and came back Ready between ticks
    run.tick(1)
    run.tick(8)
    assert run.phase == "WarmingUp"
    run.tick(2)
    assert run.phase == "Verifying"


def test_a_revision_scaled_to_zero_is_not_failed_by_its_deadline() -> None:
    run = Run(desired=0, pods=())
    run.tick()
    run.tick(DEFAULT.progress_deadline_seconds * 2)
    assert run.phase == "WarmingUp" and not run.applies


# --- verification and promotion -------------------------------------------------------------------------------


def test_the_first_revision_is_promoted_after_min_samples_and_verify_seconds() -> None:
    run = Run(policy=RollbackPolicy(warmup_seconds=10, interval_seconds=5, min_samples=3, verify_seconds=30,
                                    probe={"timeoutSeconds": 4}))
    run.warm_up()
    for tps in (50.0, 53.0, 51.0, 52.0, 60.0):  # 3 samples are enough, 25 s are not
        run.interval(tps=tps)
        assert run.phase == "Verifying"
    run.interval(tps=40.0)
    assert run.phase == "Stable" and run.state.stable_revision == GOOD
    base = run.state.baseline
    assert base is not None and base.revision == GOOD and base.samples == 6
    assert base.tokens_per_second == pytest.approx(51.5)  # median of 50, 53, 51, 52, 60, 40
    assert base.accept_length == pytest.approx(GOOD_LEN) and base.setup == SETUP and base.signal == "probe"
    assert verdicts(run, GOOD) == [Verdict.PROMOTED]
    assert "median of 6 samples over 30 s" in run.events("Promoted")[0].message


def test_time_alone_does_not_promote_without_min_samples() -> None:
    """Every measurement erroring (or inconclusive) must never end in success."""
    run = Run()
    run.warm_up()
    for _ in range(20):
        run.interval(SampleKind.INCONCLUSIVE, tps=None, accept=None, reason="idle: no requests finished")
        run.interval(SampleKind.ERROR, tps=None, accept=None, reason="HTTP 500")
    assert run.phase == "Verifying" and run.state.stable_revision is None
    assert run.state.analysis is not None and run.state.analysis.valid_samples == 0


def test_an_idle_server_is_never_failed() -> None:
    """signal traffic on an idle server: every sample inconclusive, no failure, no rollback, forever."""
    run = regressed_run(RollbackPolicy(**{**FAST.model_dump(), "signal": Signal.TRAFFIC}))
    run.intervals(500, SampleKind.INCONCLUSIVE, tps=None, accept=None, reason="0 running requests < minTraffic 1")
    assert run.phase == "Verifying" and run.revision == BAD and not run.state.rejected_revisions
    assert run.state.analysis is not None and run.state.analysis.consecutive_failures == 0


def test_a_measured_sample_without_decode_speed_counts_for_nothing() -> None:
    run = regressed_run()
    for value in (None, float("nan"), 0.0):
        run.interval(tps=value, accept=BAD_LEN)
    assert run.state.analysis is not None and run.state.analysis.consecutive_failures == 0
    assert run.state.analysis.last_sample is not None and run.state.analysis.last_sample.verdict == "Skipped"


def test_a_first_revision_below_a_floor_is_degraded_not_promoted() -> None:
    run = Run(policy=RollbackPolicy(**{**FAST.model_dump(), "min_tokens_per_second": 40.0,
                                       "probe": {"max_tokens": 64, "timeout_seconds": 4}}))
    run.warm_up()
    run.intervals(3, tps=BAD_TPS, accept=BAD_LEN)
    assert run.phase == "Paused" and run.state.analysis is not None
    assert run.state.analysis.reason == "NoStableRevision" and not run.applies
    assert verdicts(run, GOOD) == [Verdict.FAILED]
    assert run.state.analysis.message == (f"{GOOD}: 36.0 tok/s < minTokensPerSecond 40; no stable revision to "
                                          "return to")


# --- failing and rolling back ---------------------------------------------------------------------------------


def test_the_regressed_revision_is_rolled_back_at_warm_up_plus_failure_threshold_intervals() -> None:
    run = regressed_run()
    applied_at = run.now - dt.timedelta(seconds=FAST.warmup_seconds)
    for i in range(FAST.failure_threshold):
        actions = run.interval(tps=BAD_TPS, accept=BAD_LEN)
        assert (not any(isinstance(a, Apply) for a in actions)) == (i < FAST.failure_threshold - 1)
    assert run.now - applied_at == dt.timedelta(seconds=FAST.warmup_seconds + 3 * FAST.interval_seconds)
    assert run.applies == [Apply(GOOD, run.applies[0].reason)] and run.revision == GOOD
    assert run.state.rollbacks[-1].from_revision == BAD and run.state.rollbacks[-1].to_revision == GOOD
    rejection = run.state.rejection(BAD)
    assert rejection is not None and rejection.reason == ROLLBACK_MESSAGE
    assert verdicts(run, BAD) == [Verdict.REJECTED]
    assert [e.type for e in run.events("RollingBack")] == ["Warning"]
    assert run.events("RolledBack")[0].message.startswith(ROLLBACK_MESSAGE)
    assert run.phase == "RolledBack" and run.state.analysis is not None
    assert run.state.analysis.revision == GOOD and run.state.analysis.message == ROLLBACK_MESSAGE


def test_one_bad_interval_never_trips_a_rollback() -> None:
    """Failures count in a row: a pass resets them (Argo Rollouts counts failures in total)."""
    run = regressed_run()
    for _ in range(50):
        run.interval(tps=BAD_TPS, accept=BAD_LEN)
        run.interval(tps=BAD_TPS, accept=BAD_LEN)
        run.interval()
    assert not run.applies and run.state.analysis is not None and run.state.analysis.consecutive_failures == 0


def test_inconclusive_samples_and_errors_neither_fail_nor_reset_the_failure_run() -> None:
    run = regressed_run()
    run.interval(tps=BAD_TPS, accept=BAD_LEN)
    run.interval(SampleKind.INCONCLUSIVE, tps=None, accept=None, reason="stale gauges")
    run.interval(SampleKind.ERROR, tps=None, accept=None, reason="probe timed out after 4 s")
    run.interval(tps=BAD_TPS, accept=BAD_LEN)
    assert not run.applies
    run.interval(tps=BAD_TPS, accept=BAD_LEN)
    assert run.revision == GOOD


def test_min_samples_does_not_gate_failures_with_the_default_policy() -> None:
    run = regressed_run(DEFAULT)
    run.intervals(3, tps=BAD_TPS, accept=BAD_LEN)
    assert run.revision == GOOD and run.state.rejection(BAD) is not None


def test_a_slower_only_or_shorter_only_revision_is_named_by_the_criterion_it_fails() -> None:
    run = regressed_run()
    run.intervals(3, tps=BAD_TPS, accept=GOOD_LEN)
    rejection = run.state.rejection(BAD)
    assert rejection is not None and rejection.reason == f"{BAD}: 36.0 tok/s < 0.85 × 51.6 tok/s of {GOOD}"
    run2 = regressed_run()
    run2.intervals(3, tps=GOOD_TPS, accept=BAD_LEN)
    rejection = run2.state.rejection(BAD)
    assert rejection is not None and rejection.reason == f"{BAD}: accept length 1.75 < 0.9 × 2.73 of {GOOD}"


def test_a_restart_under_load_after_the_warm_up_makes_the_sample_a_failure() -> None:
    """failureThreshold's count (maxRestartsWhileVerifying set above it; with its default 3 both rules fire at the
    3rd restart, tests/decisions/test_rollback_crash_loop.py)."""
    run = regressed_run(FAST.model_copy(update={"max_restarts_while_verifying": 10}))
    for restarts in (1, 2, 3):
        run.pods = pods(1, restarts=restarts)  # crashed under load (OOM) and came back between ticks
        run.interval()  # figures look fine: the sample still fails
    assert run.revision == GOOD
    rejection = run.state.rejection(BAD)
    assert rejection is not None and rejection.reason == f"{BAD}: pod p0 restarted (2 → 3 restarts)"


def test_a_pod_that_stays_down_after_the_warm_up_fails_intervals_without_samples() -> None:
    run = regressed_run()
    run.pods = pods(1, ready=False)
    for _ in range(3 * FAST.interval_seconds):  # no sample comes (nothing to scrape), the observer ticks each 1 s
        run.tick(1)
    assert run.revision == GOOD
    assert run.state.rollbacks[-1].reason == f"{BAD}: pod p0 left Ready"


def test_a_new_pod_of_a_scale_up_is_not_a_disruption() -> None:
    run = regressed_run()
    run.desired, run.pods = 2, (*pods(1), pods(2, ready=False)[1])
    run.intervals(10)
    assert run.state.analysis is not None and run.state.analysis.consecutive_failures == 0
    assert run.state.stable_revision == BAD


# --- errors, Paused, retry -------------------------------------------------------------------------------------


def test_errors_in_a_row_pause_the_analysis_and_never_roll_back() -> None:
    run = regressed_run()
    for i in range(FAST.error_threshold):
        run.interval(SampleKind.ERROR, tps=None, accept=None, reason="HTTP 500 from /metrics")
        assert run.phase == ("Paused" if i == FAST.error_threshold - 1 else "Verifying")
    assert run.state.analysis is not None and run.state.analysis.reason == "MeasurementErrors"
    assert verdicts(run, BAD) == [Verdict.UNVERIFIED] and not run.applies
    run.intervals(10, tps=BAD_TPS, accept=BAD_LEN)  # Paused stays Paused: even failing samples are not judged
    assert run.phase == "Paused" and not run.applies


def test_a_changed_retry_annotation_resumes_a_paused_analysis_from_scratch() -> None:
    run = regressed_run()
    run.intervals(FAST.error_threshold, SampleKind.ERROR, tps=None, accept=None, reason="HTTP 500")
    run.tick(3600)  # long after the original progress deadline
    run.token = "1"
    run.tick()
    assert run.phase == "WarmingUp" and run.events("Retry")
    assert run.state.analysis is not None and run.state.analysis.progress_started_at == run.now
    assert verdicts(run, BAD)[-1] == Verdict.VERIFYING
    run.tick(FAST.warmup_seconds)
    run.intervals(3, tps=BAD_TPS, accept=BAD_LEN)
    assert run.revision == GOOD and run.state.rejection(BAD) is not None


def test_a_rejected_revision_is_not_redeployed_nor_after_an_operator_restart() -> None:
    """Rollback loops: desired ≠ running must not redeploy the failed spec."""
    run = regressed_run()
    run.intervals(3, tps=BAD_TPS, accept=BAD_LEN)
    assert run.revision == GOOD and run.spec == BAD
    for _ in range(10):
        run.interval()
        run.state = roundtrip(run.state)  # an operator restart between every two intervals
        assert what_should_run(BAD, run.state, run.token).revision == GOOD
    assert [a.revision for a in run.applies] == [GOOD]
    assert run.phase == "RolledBack"


def test_the_spec_moving_away_and_back_does_not_retry() -> None:
    run = regressed_run()
    run.intervals(3, tps=BAD_TPS, accept=BAD_LEN)
    run.spec = GOOD
    run.tick()
    assert run.phase == "Stable"
    run.spec = BAD  # the handler asks what_should_run: the stable one stays
    assert what_should_run(BAD, run.state, run.token).revision == GOOD
    run.tick()
    assert run.phase == "RolledBack" and [a.revision for a in run.applies] == [GOOD]


def test_retry_makes_exactly_one_new_attempt_which_is_rolled_back_again() -> None:
    """No way to retry (Flagger) is as bad as a loop: a new value of the annotation allows one attempt."""
    run = regressed_run()
    run.intervals(3, tps=BAD_TPS, accept=BAD_LEN)
    run.token = "2026-05-01T10:30"
    actions = run.tick()
    assert Apply(BAD, f"annotation sglang-operator.io/retry changed: one new attempt of {BAD}") in actions
    assert run.revision == BAD and run.phase == "WarmingUp"
    run.tick(FAST.warmup_seconds)
    run.intervals(3, tps=BAD_TPS, accept=BAD_LEN)
    assert run.revision == GOOD
    rejection = run.state.rejection(BAD)
    assert rejection is not None and rejection.retry_token == "2026-05-01T10:30"
    run.intervals(20)
    assert [a.revision for a in run.applies] == [GOOD, BAD, GOOD]
    assert len(run.state.rollbacks) == 2


def test_the_retry_annotation_changed_twice_quickly_gives_one_attempt() -> None:
    run = regressed_run()
    run.intervals(3, tps=BAD_TPS, accept=BAD_LEN)
    run.auto_apply = False  # the apply is slow: the user changes the annotation again meanwhile
    run.token = "a"
    run.tick(1)
    run.token = "b"
    run.tick(1)
    run.auto_apply = True
    run.tick(1)
    assert run.revision == BAD
    run.token = "c"  # and once more during the attempt
    run.tick(FAST.warmup_seconds)
    run.intervals(3, tps=BAD_TPS, accept=BAD_LEN)
    run.intervals(20)
    assert [a.revision for a in run.applies if a.revision == BAD] == [BAD] * 3  # one attempt, applied 3 ticks
    assert run.revision == GOOD and len(run.state.rollbacks) == 2
    assert len(run.events("Retry")) == 2  # token a, then b seen while the apply was pending
    rejection = run.state.rejection(BAD)
    assert rejection is not None and rejection.retry_token == "c"


def test_a_successful_retry_promotes_and_unrejects() -> None:
    run = regressed_run()
    run.intervals(3, tps=BAD_TPS, accept=BAD_LEN)
    run.token = "fixed-the-node"
    run.tick()
    run.tick(FAST.warmup_seconds)
    while run.phase != "Stable":
        run.interval()
    assert run.state.stable_revision == BAD and run.state.rejection(BAD) is None


def test_max_rollbacks_per_window_then_paused() -> None:
    run = Run()
    run.promote_good()
    for revision in ("bad0000001", "bad0000002", "bad0000003", "bad0000004"):
        run.apply_spec(revision)
        run.tick(FAST.warmup_seconds)
        run.intervals(3, tps=BAD_TPS, accept=BAD_LEN)
    assert len(run.state.rollbacks) == 3 and run.revision == "bad0000004" and run.phase == "Paused"
    assert run.state.analysis is not None and run.state.analysis.reason == "MaxRollbacksReached"
    assert "3 rollbacks in the last 86400 s (maxRollbacks 3)" in (run.state.analysis.message or "")
    assert verdicts(run, "bad0000004") == [Verdict.FAILED]
    run.now += dt.timedelta(days=1)
    run.apply_spec("bad0000005")
    run.tick(FAST.warmup_seconds)
    run.intervals(3, tps=BAD_TPS, accept=BAD_LEN)
    assert run.revision == GOOD and len(run.state.rollbacks) == 4


@pytest.mark.parametrize("action", [RollbackAction.ALERT, RollbackAction.DRY_RUN])
def test_alert_and_dry_run_judge_but_never_roll_back(action: RollbackAction) -> None:
    run = regressed_run(RollbackPolicy(**{**FAST.model_dump(), "action": action}))
    run.intervals(3, tps=BAD_TPS, accept=BAD_LEN)
    assert not run.applies and not run.state.rejected_revisions and run.revision == BAD
    assert run.phase == "Paused" and run.state.analysis is not None
    assert run.state.analysis.reason == "NotRolledBack"
    assert run.state.analysis.message == f"{ROLLBACK_MESSAGE}; action {action.value}: not rolled back"
    assert verdicts(run, GOOD) == [Verdict.PROMOTED] and verdicts(run, BAD) == [Verdict.FAILED]
    if action == RollbackAction.DRY_RUN:
        assert run.events() == []
    else:
        assert [e.type for e in run.events("Paused")] == ["Warning"]


# --- the stable revision ---------------------------------------------------------------------------------------


def test_the_stable_revision_is_never_rolled_back_its_regression_is_reported() -> None:
    run = Run()
    run.promote_good()
    run.intervals(10, tps=GOOD_TPS, accept=2.2)  # accept length decaying at long context
    assert not run.applies and run.phase == "Stable" and run.state.analysis is not None
    regression = run.state.analysis.stable_regression
    assert regression is not None and regression.message == f"{GOOD}: accept length 2.20 < 0.9 × 2.73 of {GOOD}"
    assert len(run.events("StableRegressed")) == 1
    run.intervals(FAST.failure_threshold)
    assert run.state.analysis.stable_regression is None and run.events("StableRecovered")


def test_an_undo_to_the_stable_revision_warms_up_then_is_stable() -> None:
    run = Run()
    run.promote_good()
    run.apply_spec(OTHER)
    run.apply_spec(GOOD)
    assert run.phase == "WarmingUp"
    run.tick(FAST.warmup_seconds)
    assert run.phase == "Stable" and run.events("Stable")


# --- comparability ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("change", [{"gpu_product": "NVIDIA-H100-80GB-HBM3"}, {"tensor": 4},
                                    {"model_revision": "b1e2c3"}, {"model_path": "Qwen/Qwen3.6-35B-A3B"}])
def test_relative_criteria_only_for_the_same_model_gpu_and_parallelism(change: dict[str, object]) -> None:
    run = Run()
    run.promote_good()
    run.setup = SETUP.model_copy(update=change)
    run.apply_spec(BAD)
    run.tick(FAST.warmup_seconds)
    while run.phase == "Verifying":
        run.interval(tps=BAD_TPS, accept=BAD_LEN)
    assert run.phase == "Stable" and not run.applies  # floors only; the new revision sets the baseline
    assert run.state.baseline is not None and run.state.baseline.revision == BAD
    assert run.state.baseline.tokens_per_second == BAD_TPS and run.state.baseline.setup == run.setup


def test_a_baseline_of_another_signal_is_not_compared() -> None:
    run = Run()
    run.promote_good()
    run.policy = RollbackPolicy(**{**FAST.model_dump(), "signal": Signal.TRAFFIC})
    run.apply_spec(BAD)
    run.tick(FAST.warmup_seconds)
    while run.phase == "Verifying":
        run.interval(tps=BAD_TPS, accept=BAD_LEN)
    assert run.phase == "Stable" and run.state.baseline is not None and run.state.baseline.signal == "traffic"


def test_floors_apply_to_incomparable_revisions() -> None:
    run = Run(policy=RollbackPolicy(**{**FAST.model_dump(), "min_accept_length": 2.0}))
    run.promote_good()
    run.setup = SETUP.model_copy(update={"tensor": 4})
    run.apply_spec(BAD)
    run.tick(FAST.warmup_seconds)
    run.intervals(3, tps=BAD_TPS, accept=BAD_LEN)
    assert run.revision == GOOD
    assert run.state.rollbacks[-1].reason == f"{BAD}: accept length 1.75 < minAcceptLength 2"


# --- operator restarts and the state ---------------------------------------------------------------------------


def restart_scenario(restart_at: int | None) -> tuple[list[str], RollbackState, str | None]:
    """GOOD promoted, BAD applied and judged over 40 ticks; the operator restarts before tick ``restart_at``.
    Returns the applies, the end state and the phase the restart hit."""
    run = Run()
    run.promote_good()
    run.apply_spec(BAD)
    hit = None
    for i in range(40):
        if i == restart_at:
            hit = run.phase
            run.state = roundtrip(run.state)
        run.tick(1) if i % 5 else run.interval(tps=BAD_TPS, accept=BAD_LEN)
    return [a.revision for a in run.applies], run.state, hit


def test_the_restart_points_cover_every_phase_of_a_rollback() -> None:
    assert {restart_scenario(i)[2] for i in range(40)} >= {"WarmingUp", "Verifying", "RolledBack"}


@pytest.mark.parametrize("kill_after", range(0, 40))
def test_an_operator_restart_at_any_tick_resumes_to_the_same_outcome(kill_after: int) -> None:
    applies, state, _ = restart_scenario(kill_after)
    reference_applies, reference, _ = restart_scenario(None)
    assert applies == reference_applies == [GOOD]
    assert state.status_patch() == reference.status_patch()


def test_an_operator_killed_between_deciding_and_applying_applies_on_resume() -> None:
    run = regressed_run()
    run.auto_apply = False
    run.intervals(3, tps=BAD_TPS, accept=BAD_LEN)
    assert run.phase == "RollingBack" and run.revision == BAD
    run.state = roundtrip(run.state)  # killed before the apply: the decision is in status
    actions = run.tick(5)
    assert [a.revision for a in actions if isinstance(a, Apply)] == [GOOD]
    assert what_should_run(BAD, run.state, None).revision == GOOD  # what the handler's resume applies
    run.revision = GOOD
    run.tick()
    assert run.phase == "RolledBack" and len(run.events("RolledBack")) == 1


def test_the_state_round_trips_through_status() -> None:
    run = regressed_run()
    run.intervals(2, tps=BAD_TPS, accept=BAD_LEN)
    back = roundtrip(run.state)
    assert back == run.state
    assert back.status_patch()["analysis"]["consecutiveFailures"] == 2
    assert RollbackState.from_status(None) == RollbackState()


def test_samples_of_another_revision_are_ignored() -> None:
    run = regressed_run()
    for _ in range(5):
        run.tick(FAST.interval_seconds, run.sample(tps=1.0, accept=1.0, revision=GOOD))
    assert run.state.analysis is not None and run.state.analysis.consecutive_failures == 0


# --- what should run -------------------------------------------------------------------------------------------


def test_what_should_run() -> None:
    state = RollbackState.model_validate({
        "stableRevision": GOOD,
        "rejectedRevisions": [{"revision": BAD, "reason": ROLLBACK_MESSAGE, "at": T0.isoformat(),
                               "retryToken": "1"}]})
    assert what_should_run(OTHER, state, None).revision == OTHER
    assert what_should_run(GOOD, state, "1").revision == GOOD
    target = what_should_run(BAD, state, "1")
    assert target.revision == GOOD and ROLLBACK_MESSAGE in target.reason and "sglang-operator.io/retry" in target.reason
    assert what_should_run(BAD, state, "2").revision == BAD
    assert what_should_run(BAD, state, None).revision == BAD
    no_stable = state.model_copy(update={"stable_revision": None})
    assert what_should_run(BAD, no_stable, "1").revision == BAD
