"""The conditions derived from pod health and the rollback analysis (``decisions.derive``): a rollback is not
erased by healthy pods within a tick, pod trouble still wins, StableRegressed and SpeculativeDecodingActive."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from rollback_driver import BAD, BAD_LEN, BAD_TPS, FAST, GOOD, Run
from test_rollback import ROLLBACK_MESSAGE

from sglang_operator.api.rollback import RollbackAction
from sglang_operator.api.status import SGLangServerStatus
from sglang_operator.decisions import status as st
from sglang_operator.decisions.conditions import Condition, find
from sglang_operator.decisions.derive import derive, speculative_condition
from sglang_operator.decisions.pods import pod_health


def healthy_pods(run: Run) -> list[Condition]:
    pod = {"metadata": {"name": "p0", "labels": {"sglang-operator.io/revision": run.revision}},
           "status": {"podIP": "127.1.0.2", "conditions": [{"type": "Ready", "status": "True"}]}}
    health = pod_health([pod], 1, run.revision, 1, run.now)
    assert find(health.conditions, "Degraded")["status"] == "False"  # type: ignore[index]
    return health.conditions


def crashing_pods(run: Run) -> list[Condition]:
    pod = {"metadata": {"name": "p0", "labels": {"sglang-operator.io/revision": run.revision}},
           "status": {"containerStatuses": [{"name": "sglang", "state": {"waiting": {"reason": "CrashLoopBackOff"}},
                                             "lastState": {"terminated": {"exitCode": 1, "message": "OOM"}}}]}}
    return pod_health([pod], 1, run.revision, 1, run.now).conditions


def rolled_back(action: RollbackAction = RollbackAction.ROLLBACK) -> Run:
    run = Run(policy=FAST.model_copy(update={"action": action}))
    run.promote_good()
    run.apply_spec(BAD)
    run.tick(FAST.warmup_seconds)
    run.intervals(3, tps=BAD_TPS, accept=BAD_LEN)
    return run


def test_a_rollback_is_not_erased_by_healthy_pods() -> None:
    run = rolled_back()
    assert run.phase == "RolledBack" and run.revision == GOOD
    conditions = derive(healthy_pods(run), run.state, RollbackAction.ROLLBACK, 1, run.now)
    degraded = find(conditions, "Degraded")
    assert degraded is not None and (degraded["status"], degraded["reason"]) == ("True", "RolledBack")
    assert degraded["message"] == ROLLBACK_MESSAGE
    assert find(conditions, "Ready")["status"] == "True"  # type: ignore[index]
    assert [c["type"] for c in conditions].count("Degraded") == 1


def test_pod_trouble_is_the_more_urgent_degraded_reason() -> None:
    run = rolled_back()
    degraded = find(derive(crashing_pods(run), run.state, RollbackAction.ROLLBACK, 1, run.now), "Degraded")
    assert degraded is not None and degraded["reason"] == "CrashLoopBackOff"


def test_degraded_clears_once_the_spec_moves_to_a_new_revision() -> None:
    run = rolled_back()
    run.apply_spec("5b7e01aa42")
    degraded = find(derive(healthy_pods(run), run.state, RollbackAction.ROLLBACK, 1, run.now), "Degraded")
    assert degraded is not None and degraded["status"] == "False"


def test_alert_reports_a_regressed_revision_left_running() -> None:
    run = rolled_back(RollbackAction.ALERT)
    degraded = find(derive(healthy_pods(run), run.state, RollbackAction.ALERT, 1, run.now), "Degraded")
    assert degraded is not None and (degraded["status"], degraded["reason"]) == ("True", "Regressed")
    assert degraded["message"].startswith(ROLLBACK_MESSAGE)


def test_dry_run_adds_no_condition() -> None:
    run = rolled_back(RollbackAction.DRY_RUN)
    pods = healthy_pods(run)
    assert derive(pods, run.state, RollbackAction.DRY_RUN, 1, run.now) == pods


def test_stable_regressed_names_the_numbers() -> None:
    run = Run()
    run.promote_good()
    conditions = derive(healthy_pods(run), run.state, RollbackAction.ROLLBACK, 1, run.now)
    assert find(conditions, "StableRegressed")["status"] == "False"  # type: ignore[index]
    run.intervals(3, tps=30.0)
    conditions = derive(healthy_pods(run), run.state, RollbackAction.ROLLBACK, 1, run.now)
    regressed = find(conditions, "StableRegressed")
    assert regressed is not None and regressed["status"] == "True"
    assert regressed["message"] == f"{GOOD}: 30.0 tok/s < 0.85 × 51.6 tok/s of {GOOD}"
    assert find(conditions, "Degraded")["status"] == "False"  # type: ignore[index]


@pytest.mark.parametrize(("requested", "effective", "reported", "ready", "expected"), [
    ("NEXTN", {"algorithm": "EAGLE", "numSteps": 3}, True, True, ("True", "AcceptLengthReported")),
    ("NEXTN", {"numSteps": None}, True, True, ("False", "NotRunning")),
    ("NEXTN", {"algorithm": "EAGLE"}, False, True, ("False", "NoAcceptLength")),
    (None, {}, None, True, ("False", "NotRequested")),
    ("NEXTN", None, None, True, None),
    ("NEXTN", {"algorithm": "EAGLE"}, None, True, None),
    ("NEXTN", {"algorithm": "EAGLE"}, True, False, None),
])
def test_speculative_decoding_active(requested: str | None, effective: dict[str, Any] | None,
                                     reported: bool | None, ready: bool, expected: tuple[str, str] | None) -> None:
    run = Run()
    cond = speculative_condition(requested, effective, reported, ready, 1, run.now)
    assert (None if cond is None else (cond["status"], cond["reason"])) == expected
    if cond is not None:
        assert cond["type"] == "SpeculativeDecodingActive"


def test_the_observers_status_keeps_the_rollback_tick_after_tick() -> None:
    """observed() fed with derive()'s conditions (``dataclasses.replace(health, conditions=...)``): healthy pods
    on every later tick do not turn Degraded back to False while the stable revision serves in place of BAD."""
    run = rolled_back()
    status: dict[str, Any] = {"revision": GOOD, "conditions": []}
    for _ in range(5):
        run.interval()
        pod = {"metadata": {"name": "p0", "labels": {"sglang-operator.io/revision": GOOD}},
               "status": {"podIP": "127.1.0.2", "conditions": [{"type": "Ready", "status": "True"}]}}
        health = pod_health([pod], 1, GOOD, 1, run.now)
        derived = derive(health.conditions, run.state, RollbackAction.ROLLBACK, 1, run.now)
        typed = SGLangServerStatus.model_validate(status)
        status |= st.observed(typed, dataclasses.replace(health, conditions=derived), 1, run.now)
        degraded = find(status["conditions"], "Degraded")
        assert degraded is not None and (degraded["status"], degraded["reason"]) == ("True", "RolledBack")
    assert run.phase == "RolledBack"
