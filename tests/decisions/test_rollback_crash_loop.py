"""Issue 19: a crash loop fails fast, a revision that serves nothing is never left running while a known-good one
exists, and a regression of the stable revision follows the current figures.

- A pod that restarts ``maxRestartsBeforeReady`` times before it was ever Ready fails its revision at once (not at
  ``progressDeadlineSeconds``), the reason quoting the crash; multi-node only the leader's restarts count (a
  LeaderWorkerSet group recreated with its leader counts as one); readiness blips still never reset the deadline.
- ``maxRollbacks`` holds back only revisions that still serve: one with no Ready pod is replaced by the stable
  revision, also once it was Paused for ``MaxRollbacksReached``.
- ``analysis.stableRegression``: its message and figures follow every failing sample; another event only when a
  figure moves by more than a tenth; the condition shows the current numbers.
"""

from __future__ import annotations

import datetime as dt

from rollback_driver import BAD, BAD_LEN, BAD_TPS, FAST, GOOD, GOOD_TPS, T0, Run, pods, roundtrip

from sglang_operator.api.rollback import RollbackAction, RollbackPolicy
from sglang_operator.api.status import Verdict
from sglang_operator.decisions.derive import analysis_conditions
from sglang_operator.decisions.rollback import RecordVerdict
from sglang_operator.decisions.sampling.model import PodView
from sglang_operator.decisions.starts import GONE_KEPT

CRASH = ("container sglang exited with code 1: …RuntimeError: Not enough memory. Please try to increase "
         "--mem-fraction-static. Current value: mem_fraction_static=0.5")
HOUR = RollbackPolicy(**{**FAST.model_dump(), "progress_deadline_seconds": 3600})
"""The fast policy with the default progress deadline: only the crash-loop rule can fail a revision early."""


def crashing(restarts: int, name: str = "p0", crash: str | None = CRASH, uid: str | None = None,
             leader: int | None = None) -> tuple[PodView, ...]:
    return (PodView(name, False, restarts, uid=uid, leader_restarts=leader, crash=crash if restarts else None),)


def apply_starting(run: Run, revision: str) -> None:
    """``revision`` applied; its pod p0 is starting (not Ready, no restart yet)."""
    run.pods = crashing(0, crash=None)
    run.apply_spec(revision)


def verdicts(run: Run, revision: str) -> list[Verdict]:
    return [a.verdict for a in run.actions if isinstance(a, RecordVerdict) and a.revision == revision]


def promoted(policy: RollbackPolicy = HOUR) -> Run:
    run = Run(policy=policy)
    run.promote_good()
    return run


# --- maxRestartsBeforeReady -------------------------------------------------------------------------------------


def test_a_crash_loop_before_ready_fails_at_the_third_restart_not_at_the_deadline() -> None:
    run = promoted()
    apply_starting(run, BAD)
    started = run.now
    for restarts in (1, 2):  # the kubelet's back-off: 0, 10, 20 s
        run.pods = crashing(restarts)
        run.tick(10)
        assert run.revision == BAD and run.phase == "WarmingUp", run.state.analysis
    run.pods = crashing(3)
    run.tick(20)
    assert run.revision == GOOD and run.applies[-1].revision == GOOD
    assert (run.now - started).total_seconds() == 40  # not 3600
    rejection = run.state.rejection(BAD)
    assert rejection is not None
    assert rejection.reason == (f"{BAD}: pod p0 restarted 3 times and was never Ready (maxRestartsBeforeReady 3); "
                                f"its last crash: {CRASH}")
    assert run.state.rollbacks[-1].reason == rejection.reason
    assert verdicts(run, BAD)[-1] == Verdict.REJECTED
    rolling_back = run.events("RollingBack")
    assert rolling_back and "Not enough memory" in rolling_back[-1].message
    assert run.phase == "RolledBack" and run.state.analysis is not None
    assert run.state.analysis.reason == "CrashLoop" and "Not enough memory" in (run.state.analysis.message or "")
    degraded = analysis_conditions(run.state, RollbackAction.ROLLBACK, 1, run.now)[0]
    assert degraded["reason"] == "RolledBack" and degraded["message"] == rejection.reason
    assert len(degraded["message"]) <= 1024


def test_restarts_between_two_ticks_all_count() -> None:
    run = promoted()
    apply_starting(run, BAD)
    run.pods = crashing(2)
    run.tick(5)
    assert run.revision == BAD
    run.pods = crashing(5)  # three more while the operator was away
    run.tick(60)
    assert run.revision == GOOD
    rejection = run.state.rejection(BAD)
    assert rejection is not None and "restarted 5 times" in rejection.reason


def test_every_restart_of_a_pod_first_seen_counts_it_belongs_to_the_new_revision() -> None:
    run = promoted()
    run.pods = crashing(3)
    run.apply_spec(BAD)
    assert run.revision == GOOD and run.state.rejection(BAD) is not None


def test_the_limit_is_the_policys() -> None:
    for limit, fails_at in ((1, 1), (5, 5)):
        run = promoted(RollbackPolicy(**{**HOUR.model_dump(), "max_restarts_before_ready": limit}))
        apply_starting(run, BAD)
        for restarts in range(1, 7):
            run.pods = crashing(restarts)
            run.tick(10)
            if run.revision == GOOD:
                break
        assert restarts == fails_at, (limit, restarts)


def test_a_pod_that_was_ready_once_is_left_to_the_deadline() -> None:
    """Readiness blips: a pod Ready for moments between crashes keeps the progress deadline, never reset."""
    policy = RollbackPolicy(**{**HOUR.model_dump(), "progress_deadline_seconds": 120})
    run = promoted(policy)
    apply_starting(run, BAD)
    started = run.now
    run.pods = (PodView("p0", True, 0),)
    run.tick(5)
    restarts = 0
    while run.revision == BAD:
        restarts += 1
        run.pods = crashing(restarts)
        run.tick(5)
        if run.revision == BAD:
            run.pods = (PodView("p0", True, restarts),)  # Ready again for a moment
            run.tick(5)
    assert restarts > 3 and (run.now - started).total_seconds() == 120
    rejection = run.state.rejection(BAD)
    assert rejection is not None and "progressDeadlineSeconds" in rejection.reason


def test_a_slow_starter_that_restarts_twice_then_becomes_ready_is_verified() -> None:
    run = promoted()
    apply_starting(run, BAD)
    for restarts in (1, 2):
        run.pods = crashing(restarts)
        run.tick(10)
    run.pods = (PodView("p0", True, 2),)
    run.tick(10)
    run.tick(FAST.warmup_seconds)
    assert run.revision == BAD and run.phase == "Verifying"
    assert run.state.analysis is not None and run.state.analysis.pod_starts == {}  # dropped after the warm-up


def test_each_pod_counts_alone_and_a_replacement_pod_starts_from_its_own_count() -> None:
    run = promoted()
    run.desired = 2
    run.pods = (PodView("p0", False, 0), PodView("p1", False, 0))
    run.apply_spec(BAD)
    run.pods = (PodView("p0", False, 2), PodView("p1", False, 1))
    run.tick(10)
    run.pods = (PodView("p2", False, 0), PodView("p1", False, 2))  # p0 replaced (evicted): p2 is a new pod
    run.tick(10)
    assert run.revision == BAD
    run.pods = (PodView("p2", False, 1), PodView("p1", False, 3, crash=CRASH))
    run.tick(10)
    assert run.revision == GOOD
    rejection = run.state.rejection(BAD)
    assert rejection is not None and "pod p1 restarted 3 times" in rejection.reason


def test_a_resumed_analysis_counts_restarts_from_the_resume() -> None:
    """Alert: the crash loop is reported (Paused); a retry verifies again, counting from there."""
    run = promoted(RollbackPolicy(**{**HOUR.model_dump(), "action": "Alert"}))
    apply_starting(run, BAD)
    run.pods = crashing(3)
    run.tick(30)
    assert run.revision == BAD and run.phase == "Paused" and run.state.analysis is not None
    assert run.state.analysis.reason == "NotRolledBack" and "Not enough memory" in (run.state.analysis.message or "")
    run.token = "1"
    run.tick(1)
    assert run.phase == "WarmingUp"
    run.pods = crashing(5)
    run.tick(60)
    assert run.phase == "WarmingUp"  # 2 restarts since the retry
    run.pods = crashing(6)
    run.tick(60)
    assert run.phase == "Paused"
    assert "restarted 3 times" in (run.state.analysis.message or "")


def test_the_count_survives_an_operator_restart() -> None:
    run = promoted()
    apply_starting(run, BAD)
    run.pods = crashing(2)
    run.tick(10)
    run.state = roundtrip(run.state)
    assert run.state.analysis is not None and run.state.analysis.pod_starts["p0"].restarts == 2
    run.pods = crashing(3)
    run.tick(10)
    assert run.revision == GOOD


def test_no_stable_revision_a_crash_loop_is_paused_early() -> None:
    run = Run(policy=HOUR, pods=crashing(0, crash=None))
    run.tick()
    run.pods = crashing(3)
    run.tick(30)
    assert run.phase == "Paused" and run.state.analysis is not None
    assert run.state.analysis.reason == "NoStableRevision"
    assert verdicts(run, GOOD) == [Verdict.FAILED]


# --- multi-node: the leader's restarts -------------------------------------------------------------------------


def test_multi_node_counts_the_leader_not_its_workers() -> None:
    run = promoted()
    run.pods = (PodView("dsv3-0", False, 0, uid="u1", leader_restarts=0),)
    run.apply_spec(BAD)
    for worker_restarts in (2, 4, 6):  # the stand-in reports a troubled worker; the leader has not restarted
        run.pods = (PodView("dsv3-0", False, worker_restarts, uid="u1", leader_restarts=0),)
        run.tick(10)
    assert run.revision == BAD and run.phase == "WarmingUp"
    run.pods = (PodView("dsv3-0", False, 6, uid="u1", leader_restarts=3, crash=CRASH),)
    run.tick(10)
    assert run.revision == GOOD
    rejection = run.state.rejection(BAD)
    assert rejection is not None and rejection.reason.startswith(f"{BAD}: leader pod dsv3-0 restarted 3 times")


def test_a_group_recreated_with_its_leader_counts_as_a_restart_even_when_the_leader_was_gone_for_a_tick() -> None:
    """RecreateGroupOnPodRestart: LeaderWorkerSet deletes the group as soon as a container restarts, so the leader
    comes back under its name with another uid and a restart count of 0 (or 1, seen just before the deletion)."""
    run = promoted()
    run.pods = (PodView("dsv3-0", False, 0, uid="u1", leader_restarts=0),)
    run.apply_spec(BAD)
    run.pods = (PodView("dsv3-0", False, 1, uid="u1", leader_restarts=1, crash=CRASH),)  # seen before deletion
    run.tick(5)
    run.pods = ()  # the group is being recreated
    run.tick(5)
    run.pods = (PodView("dsv3-0", False, 0, uid="u2", leader_restarts=0),)  # 1 + recreated
    run.tick(5)
    assert run.revision == BAD
    run.pods = (PodView("dsv3-0", False, 0, uid="u3", leader_restarts=0),)  # recreated again, not seen restarting
    run.tick(5)
    assert run.revision == GOOD
    rejection = run.state.rejection(BAD)
    assert rejection is not None and rejection.reason == (
        f"{BAD}: leader pod dsv3-0 restarted 3 times and was never Ready (maxRestartsBeforeReady 3); its last crash: "
        f"{CRASH}")


def test_pods_no_longer_seen_are_kept_within_a_bound() -> None:
    run = promoted(RollbackPolicy(**{**HOUR.model_dump(), "max_restarts_before_ready": 100}))
    run.apply_spec(BAD)
    for i in range(3 * GONE_KEPT):
        run.pods = (PodView(f"p{i}", False, 1),)
        run.tick(1)
    assert run.state.analysis is not None and len(run.state.analysis.pod_starts) == GONE_KEPT + 1


# --- maxRollbacks holds back only revisions that serve ---------------------------------------------------------


SECOND_BAD = BAD.replace("9", "8")
"""Another regressed revision, applied once maxRollbacks is used up."""


def regress(run: Run, revision: str) -> None:
    """``revision`` applied, warmed up (FAST's warm-up) and judged on FAST's failureThreshold regressed intervals."""
    run.apply_spec(revision)
    run.tick(FAST.warmup_seconds)
    run.intervals(FAST.failure_threshold, tps=BAD_TPS, accept=BAD_LEN)


def one_rollback_allowed() -> Run:
    """GOOD promoted with maxRollbacks 1, then one regressed revision rolled back: the limit is used up."""
    run = promoted(RollbackPolicy(**{**HOUR.model_dump(), "max_rollbacks": 1}))
    regress(run, BAD)
    assert run.revision == GOOD and len(run.state.rollbacks) == 1
    return run


def paused_for_max_rollbacks() -> Run:
    """:func:`one_rollback_allowed`, then SECOND_BAD regressed: kept running, Paused."""
    run = one_rollback_allowed()
    regress(run, SECOND_BAD)
    assert run.phase == "Paused"
    return run


def test_after_max_rollbacks_a_revision_that_never_becomes_ready_is_still_replaced() -> None:
    run = one_rollback_allowed()
    apply_starting(run, "crash00001")
    run.pods = crashing(3)
    run.tick(30)
    assert run.revision == GOOD and len(run.state.rollbacks) == 2 and run.state.rejection("crash00001")
    rolling_back = run.events("RollingBack")[-1].message
    assert "although 1 rollbacks in the last 86400 s (maxRollbacks 1): it serves nothing (0/1 pods Ready)" \
        in rolling_back


def test_after_max_rollbacks_a_revision_at_its_deadline_without_a_ready_pod_is_replaced() -> None:
    run = one_rollback_allowed()
    run.pods = (PodView("p0", False, 0),)  # Pending: unschedulable, never restarts
    run.apply_spec("pending001")
    run.tick(3600)
    assert run.revision == GOOD and run.state.rejection("pending001") is not None


def test_after_max_rollbacks_a_revision_that_serves_but_regresses_is_paused() -> None:
    run = paused_for_max_rollbacks()
    assert run.state.analysis is not None
    assert run.state.analysis.reason == "MaxRollbacksReached"


def test_a_revision_paused_for_max_rollbacks_is_replaced_once_it_serves_nothing() -> None:
    run = paused_for_max_rollbacks()
    paused_message = run.state.analysis.message if run.state.analysis else None
    for _ in range(3):
        run.tick(5)
    assert run.revision == SECOND_BAD  # still serving: kept, Paused
    run.pods = pods(1, ready=False, restarts=1)  # its pod crashed under load
    run.tick(5)
    assert run.revision == GOOD and len(run.state.rollbacks) == 2
    rejection = run.state.rejection(SECOND_BAD)
    assert rejection is not None and rejection.reason == f"{paused_message}; then 0/1 pods Ready: it serves nothing"
    assert verdicts(run, SECOND_BAD)[-2:] == [Verdict.FAILED, Verdict.REJECTED]


def test_alert_never_rolls_back_even_a_revision_that_serves_nothing() -> None:
    run = promoted(RollbackPolicy(**{**HOUR.model_dump(), "action": "Alert"}))
    apply_starting(run, BAD)
    run.pods = crashing(4)
    for _ in range(5):
        run.tick(10)
    assert run.revision == BAD and run.phase == "Paused" and not run.applies[1:]


def test_a_revision_scaled_to_zero_is_not_replaced_for_serving_nothing() -> None:
    run = paused_for_max_rollbacks()
    run.desired, run.pods = 0, ()
    run.tick(5)
    assert run.revision == SECOND_BAD and run.phase == "Paused"


# --- the stable revision's regression: current figures ---------------------------------------------------------


def test_a_stable_regression_follows_the_current_figures() -> None:
    run = promoted()
    run.intervals(3, tps=GOOD_TPS, accept=2.2)
    a = run.state.analysis
    assert a is not None and a.stable_regression is not None
    first = a.stable_regression
    assert first.message == f"{GOOD}: accept length 2.20 < 0.9 × 2.73 of {GOOD}"
    assert (first.tokens_per_second, first.accept_length) == (GOOD_TPS, 2.2) and first.since == run.now
    assert len(run.events("StableRegressed")) == 1
    run.intervals(3, tps=GOOD_TPS, accept=1.9)  # worse: 2.2 -> 1.9, more than a tenth
    reg = run.state.analysis.stable_regression
    assert reg is not None and reg.since == first.since and reg.updated_at == run.now
    assert reg.accept_length == 1.9 and reg.message == f"{GOOD}: accept length 1.90 < 0.9 × 2.73 of {GOOD}"
    events = run.events("StableRegressed")
    assert len(events) == 2, [e.message for e in events]
    assert "accept length 1.90" in events[1].message and "was 51.6 tok/s, accept length 2.20" in events[1].message
    conditions = analysis_conditions(run.state, RollbackAction.ROLLBACK, 1, run.now)
    regressed = next(c for c in conditions if c["type"] == "StableRegressed")
    assert regressed["status"] == "True" and "accept length 1.90" in regressed["message"]
    run.intervals(5, tps=GOOD_TPS, accept=1.85)  # 1.9 -> 1.85: a small move updates the figures, posts nothing
    reg = run.state.analysis.stable_regression
    assert reg is not None and reg.accept_length == 1.85 and len(run.events("StableRegressed")) == 2
    assert reg.reported is not None and reg.reported.accept_length == 1.9
    assert roundtrip(run.state).analysis == run.state.analysis


def test_a_failing_sample_after_a_pass_still_updates_the_regression() -> None:
    run = promoted()
    run.intervals(3, tps=GOOD_TPS, accept=2.2)
    run.interval()  # one pass: not recovered yet (failureThreshold passes in a row)
    run.interval(tps=30.0, accept=2.2)
    reg = run.state.analysis.stable_regression if run.state.analysis else None
    assert reg is not None and reg.tokens_per_second == 30.0 and "30.0 tok/s" in reg.message
    run.intervals(FAST.failure_threshold)
    assert run.state.analysis is not None and run.state.analysis.stable_regression is None
    assert run.events("StableRecovered")


def test_a_stable_revision_that_crash_loops_after_a_rollback_is_reported_not_rolled_back() -> None:
    run = promoted()
    run.pods = pods(1, ready=False)
    run.apply_spec(BAD)
    run.tick(3600)  # BAD never Ready: rolled back at its deadline; GOOD's new pod crash-loops (a node fault)
    assert run.revision == GOOD
    run.pods = crashing(3)
    run.tick(10)
    a = run.state.analysis
    assert a is not None and a.stable_regression is not None and "Not enough memory" in a.stable_regression.message
    assert run.revision == GOOD and run.applies[-1].revision == GOOD
    assert run.now - T0 > dt.timedelta(hours=1)


# --- maxRestartsWhileVerifying ----------------------------------------------------------------------------------

SLOW_VERIFY = RollbackPolicy(**{**HOUR.model_dump(), "verify_seconds": 600})
"""The fast policy verifying for 10 minutes: a revision crashing now and then would be promoted at the end."""


def crash_under_load(run: Run, restarts_to: int, between: int = 2, roundtrips: bool = False) -> None:
    """The applied revision's one pod restarts ``restarts_to`` times after its warm-up, each time back Ready by the
    next interval, with ``between`` passing intervals around each crash (what resets failureThreshold's count)."""
    for restarts in range(1, restarts_to + 1):
        for _ in range(between):
            run.interval()
            if roundtrips:
                run.state = roundtrip(run.state)
        run.pods = (PodView("p0", True, restarts, crash=CRASH),)
        run.interval()
        if run.revision != BAD:
            return


def test_a_revision_that_keeps_crashing_under_load_fails_at_the_third_restart_though_passes_come_between() -> None:
    run = promoted(SLOW_VERIFY)
    run.pods = pods()
    run.apply_spec(BAD)
    run.warm_up()
    assert run.phase == "Verifying"
    crash_under_load(run, 2)
    assert run.revision == BAD and run.phase == "Verifying"  # two failures, each reset by the passes after it
    assert run.state.analysis is not None and run.state.analysis.verify_restarts == 2
    crash_under_load(run, 3)
    assert run.revision == GOOD
    rejection = run.state.rejection(BAD)
    assert rejection is not None and rejection.reason == (
        f"{BAD}: its pods restarted 3 times since the warm-up ended (maxRestartsWhileVerifying 3), the last one pod "
        f"p0; its last crash: {CRASH}")
    assert run.state.analysis is not None and run.state.analysis.reason == "CrashLoop"


def test_without_the_restart_count_rule_the_passes_would_promote_it() -> None:
    """The same crashes with a limit above them: promoted at verifySeconds (what the rule is there to prevent)."""
    run = promoted(RollbackPolicy(**{**SLOW_VERIFY.model_dump(), "max_restarts_while_verifying": 100}))
    run.pods = pods()
    run.apply_spec(BAD)
    run.warm_up()
    crash_under_load(run, 5)
    while run.phase == "Verifying":
        run.interval()
    assert run.revision == BAD and run.phase == "Stable"


def test_the_restart_count_while_verifying_is_the_policys_and_survives_an_operator_restart() -> None:
    for limit in (1, 4):
        run = promoted(RollbackPolicy(**{**SLOW_VERIFY.model_dump(), "max_restarts_while_verifying": limit}))
        run.pods = pods()
        run.apply_spec(BAD)
        run.warm_up()
        crash_under_load(run, limit - 1, roundtrips=True)
        assert run.revision == BAD, limit
        crash_under_load(run, limit, roundtrips=True)
        assert run.revision == GOOD, limit


def test_restarts_of_the_stable_revision_are_judged_by_its_samples_not_counted() -> None:
    run = promoted(SLOW_VERIFY)
    for restarts in range(1, 6):
        run.pods = (PodView("p0", True, restarts, crash=CRASH),)
        run.interval()
        run.interval()
    assert run.revision == GOOD and run.phase == "Stable" and run.state.rejection(GOOD) is None
