"""A paused analysis shows: an image that answers HTTP but is not SGLang (every sample a measurement error) ends
Paused (MeasurementErrors); the conditions say Degraded=True (reason AnalysisPaused, naming MeasurementErrors) over pod
health's Degraded=False, and the REASON printer column (``.status.analysis.reason``) says MeasurementErrors."""

from __future__ import annotations

from rollback_driver import BAD, Run

from sglang_operator.api.crd import PRINTER_COLUMNS
from sglang_operator.api.rollback import RollbackAction
from sglang_operator.decisions.conditions import condition
from sglang_operator.decisions.derive import ANALYSIS_PAUSED, derive
from sglang_operator.decisions.sampling.model import SampleKind


def test_measurement_errors_pause_shows_in_degraded_and_the_reason_column() -> None:
    run = Run()
    run.promote_good()
    run.apply_spec(BAD)
    run.warm_up()
    for _ in range(run.policy.error_threshold):
        run.interval(SampleKind.ERROR, tps=None, accept=None, reason="/metrics: no sglang: series (not SGLang?)")
    assert run.phase == "Paused" and run.state.analysis is not None
    healthy = [condition("Ready", "True", "AllReplicasReady", "1/1", 1, run.now),
               condition("Degraded", "False", "AsExpected", "pods fine", 1, run.now)]
    conds = {c["type"]: c for c in derive(healthy, run.state, RollbackAction.ROLLBACK, 1, run.now)}
    degraded = conds["Degraded"]
    assert degraded["status"] == "True" and degraded["reason"] == ANALYSIS_PAUSED
    assert "MeasurementErrors" in degraded["message"] and "not SGLang" in degraded["message"]
    assert "sglang-operator.io/retry" in degraded["message"]
    column = next(c for c in PRINTER_COLUMNS if c["name"] == "Reason")
    assert column["jsonPath"] == ".status.analysis.reason" and "priority" not in column  # in the default view
    assert run.state.status_patch()["analysis"]["reason"] == "MeasurementErrors"
    # DryRun reports nothing; a retry resumes and the condition clears with the pause
    assert next(c for c in derive(healthy, run.state, RollbackAction.DRY_RUN, 1, run.now)
            if c["type"] == "Degraded")["status"] == "False"
    run.token = "again"
    run.tick(1)
    conds = {c["type"]: c for c in derive(healthy, run.state, RollbackAction.ROLLBACK, 1, run.now)}
    assert conds["Degraded"]["status"] == "False"
