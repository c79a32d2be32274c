"""A paused analysis shows: an image that answers HTTP but is not SGLang (every sample a measurement error) ends
Paused (MeasurementErrors); the conditions say Degraded=True (reason AnalysisPaused, naming MeasurementErrors) over pod
health's Degraded=False, and the REASON printer column (``.status.analysis.reason``) says MeasurementErrors."""

from __future__ import annotations

from dataclasses import dataclass, replace

from rollback_driver import BAD, Run

from sglang_operator.api.crd import PRINTER_COLUMNS
from sglang_operator.api.rollback import RollbackAction
from sglang_operator.decisions.actions import RecordVerdict
from sglang_operator.decisions.conditions import condition
from sglang_operator.decisions.derive import ANALYSIS_PAUSED, derive
from sglang_operator.decisions.effective import NOT_SGLANG, not_sglang
from sglang_operator.decisions.rollback_state import Observation
from sglang_operator.decisions.sampling.model import SampleKind
from sglang_operator.decisions.status import summary


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
    assert column["jsonPath"] == ".status.summary.reason" and "priority" not in column  # in the default view
    patch = run.state.status_patch()
    assert patch["analysis"]["reason"] == "MeasurementErrors"
    assert summary(1, patch["analysis"], None)["reason"] == "MeasurementErrors"
    # DryRun reports nothing; a retry resumes and the condition clears with the pause
    assert next(c for c in derive(healthy, run.state, RollbackAction.DRY_RUN, 1, run.now)
            if c["type"] == "Degraded")["status"] == "False"
    run.token = "again"
    run.tick(1)
    conds = {c["type"]: c for c in derive(healthy, run.state, RollbackAction.ROLLBACK, 1, run.now)}
    assert conds["Degraded"]["status"] == "False"


@dataclass
class ForeignRun(Run):
    """The observer read the serving pod's ``/server_info``: it answered, not as SGLang (``foreign``)."""

    foreign: str | None = None

    def observation(self) -> Observation:
        return replace(super().observation(), not_sglang=self.foreign)


def test_an_image_that_is_not_sglang_pauses_at_once_naming_the_field_to_fix() -> None:
    sentence = not_sglang("a-0", "/server_info", "nginx:1.27", "a JSON object without SGLang's server arguments")
    run = ForeignRun()
    run.promote_good()
    run.apply_spec(BAD)
    run.warm_up()
    run.foreign = sentence
    run.interval(SampleKind.ERROR, tps=None, accept=None,
                 reason="scrape of pod a-0 failed (truncated): body ends inside a line: '{\"status\": \"ok\"}'")
    a = run.state.analysis
    assert a is not None and (a.phase, a.reason) == ("Paused", NOT_SGLANG)  # at the first sample, not the third
    assert a.message == f"{BAD}: {sentence}" and "{" not in a.message
    [verdict] = [v for v in run.actions if isinstance(v, RecordVerdict) and v.verdict.value == "Unverified"]
    assert verdict.reason == sentence
    healthy = [condition("Degraded", "False", "AsExpected", "pods fine", 1, run.now)]
    [degraded] = [c for c in derive(healthy, run.state, RollbackAction.ROLLBACK, 1, run.now) if c["type"] == "Degraded"]
    assert (degraded["status"], degraded["reason"]) == ("True", ANALYSIS_PAUSED)
    assert NOT_SGLANG in degraded["message"] and "spec.sglang.image" in degraded["message"]
    assert summary(1, run.state.status_patch()["analysis"], None)["reason"] == NOT_SGLANG
