"""The pure part of autoscaling in the server's loop (decisions/autoscaling.py): which pause the decided status asks
for, what to do with the ScaledObject (apply, delete only one the operator had, nothing when KEDA or an address is
missing), the Autoscaling condition merged into the one status patch; and a scale (``spec.replicas`` through
``/scale``) is neither a new revision nor a spec change that ends an InPlace tuning's hold."""

from __future__ import annotations

import copy
import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import yaml

from sglang_operator import builders
from sglang_operator.api import parse
from sglang_operator.api.analysis import Analysis, AnalysisPhase, CanaryPhase, CanaryState
from sglang_operator.api.autoscaling import AutoscalingPause
from sglang_operator.api.status import SGLangServerStatus, TuningHold
from sglang_operator.builders import autoscaling as so
from sglang_operator.decisions import autoscaling as scaling
from sglang_operator.decisions.observation import ObservationDecision
from sglang_operator.decisions.rollback_state import RollbackState
from sglang_operator.decisions.status import changed
from sglang_operator.decisions.tuning import hold as holds
from sglang_operator.decisions.tuning import inplace

T0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
SAMPLE: dict[str, Any] = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "samples" / "qwen3.6-27b-known-good.yaml").read_text())
PROM = "http://prometheus:9090"


def server(autoscaling: dict[str, Any] | None = None, replicas: int = 2) -> Any:
    body = copy.deepcopy(SAMPLE)
    body["metadata"] = {"name": "s", "namespace": "ns", "uid": "u"}
    body["spec"]["replicas"] = replicas
    if autoscaling is not None:
        body["spec"]["autoscaling"] = autoscaling
    return parse(body)


def status(phase: AnalysisPhase | None = None, canary: bool = False, trial: bool | None = None) -> SGLangServerStatus:
    s = SGLangServerStatus(revision="r1")
    if phase is not None:
        s.analysis = Analysis(revision="r1", phase=phase, since=T0, progress_started_at=T0)
    if canary:
        s.canary = CanaryState(revision="r2", stable_revision="r1", workload="s-canary", phase=next(iter(CanaryPhase)),
                               started_at=T0, moved_at=T0)
    if trial is not None:
        s.tuning_hold = TuningHold(name="t", stable_revision="r1", generation=1,
                                   trial="t-trial-1" if trial else None, trial_revision="r9" if trial else None)
    return s


@pytest.mark.parametrize(("case", "expected"), [
    (status(AnalysisPhase.WARMING_UP), scaling.Pause(AutoscalingPause.SCALE_IN)),
    (status(AnalysisPhase.VERIFYING), scaling.Pause(AutoscalingPause.SCALE_IN)),
    (status(AnalysisPhase.STABLE, canary=True), scaling.Pause(AutoscalingPause.SCALE_IN)),
    (status(AnalysisPhase.STABLE, trial=True), scaling.Pause(AutoscalingPause.REPLICAS, 2)),
    (status(AnalysisPhase.STABLE, trial=False), None),  # held between two trials: nothing measured
    (status(AnalysisPhase.STABLE), None),
    (status(AnalysisPhase.ROLLED_BACK), None),
])
def test_the_pause_follows_what_the_loop_judges(case: SGLangServerStatus, expected: scaling.Pause | None) -> None:
    assert scaling.pause_of(case, 2) == expected


def test_the_light_parse_pauses_as_the_whole_status() -> None:
    for s in (status(AnalysisPhase.WARMING_UP), status(AnalysisPhase.STABLE, canary=True),
              status(AnalysisPhase.STABLE, trial=True), status(AnalysisPhase.STABLE)):
        full = {**s.dump(), "phase": "Ready", "conditions": [], "tuningHold": s.dump().get("tuningHold")}
        whole = SGLangServerStatus.model_validate({k: v for k, v in full.items() if v is not None})
        assert scaling.pause_of(scaling.verifying_status(full), 2) == scaling.pause_of(whole, 2)


AUTO = {"maxReplicas": 3, "target": 4}


def test_keda_mode_renders_the_scaled_object_with_the_pause() -> None:
    w = scaling.want(server(AUTO), status(AnalysisPhase.VERIFYING), keda=True, prometheus_address=PROM, had=False)
    assert w.scaled_object is not None and not w.delete and w.blocked is None
    assert w.scaled_object["metadata"]["annotations"] == {so.PAUSED_SCALE_IN: "true"}
    trial = scaling.want(server(AUTO, replicas=5), status(AnalysisPhase.STABLE, trial=True), keda=True,
                         prometheus_address=PROM, had=True)
    assert trial.scaled_object is not None
    assert trial.scaled_object["metadata"]["annotations"] == {so.PAUSED_REPLICAS: "5"}
    free = scaling.want(server(AUTO), status(AnalysisPhase.STABLE), keda=True, prometheus_address=PROM, had=True)
    assert free.scaled_object is not None and "annotations" not in free.scaled_object["metadata"]


def test_missing_keda_or_address_blocks_without_deleting() -> None:
    no_keda = scaling.want(server(AUTO), status(), keda=False, prometheus_address=PROM, had=True)
    assert no_keda.scaled_object is None and not no_keda.delete
    assert no_keda.blocked is not None and no_keda.blocked[0] == scaling.KEDA_NOT_INSTALLED
    no_address = scaling.want(server(AUTO), status(), keda=True, prometheus_address=None, had=True)
    assert no_address.blocked is not None and no_address.blocked[0] == scaling.NO_PROMETHEUS_ADDRESS
    assert not no_address.delete
    own = scaling.want(server({**AUTO, "prometheus": {"address": PROM}}), status(), keda=True, prometheus_address=None,
                       had=False, tenancy=scaling.PrometheusTenancy.of(None, [PROM]))  # an address the admin allows
    assert own.scaled_object is not None


@pytest.mark.parametrize("auto", [None, {"mode": "External"}])
def test_only_a_scaled_object_the_operator_had_is_deleted(auto: dict[str, Any] | None) -> None:
    assert scaling.want(server(auto), status(), keda=True, prometheus_address=PROM, had=True).delete
    assert not scaling.want(server(auto), status(), keda=True, prometheus_address=PROM, had=False).delete
    assert not scaling.want(server(auto), status(), keda=False, prometheus_address=PROM, had=True).delete


def decision(conditions: list[dict[str, Any]]) -> ObservationDecision:
    return ObservationDecision({"conditions": conditions, "phase": "Ready"}, [], None, RollbackState())


def test_the_condition_keeps_its_transition_time_and_leaves_with_autoscaling() -> None:
    srv = server(AUTO)
    w = scaling.want(srv, status(AnalysisPhase.STABLE), keda=True, prometheus_address=PROM, had=False)
    auto, cond = scaling.report(srv, status(AnalysisPhase.STABLE), w, True, None, 1, T0)
    assert auto == {"mode": "KEDA", "scaleTarget": {"apiVersion": "sglang-operator.io/v1alpha1",
                                                    "kind": "SGLangServer", "name": "s"},
                    "scaledObject": "s", "judging": False, "target": AUTO["target"]}
    assert cond is not None
    first = scaling.with_autoscaling(decision([]), auto, cond)
    stored = first.status_json  # the observer writes what differs from the stored status (control/server_status.py)
    assert changed({}, stored)["autoscaling"] == auto and first.status.autoscaling is not None
    _, later = scaling.report(srv, status(AnalysisPhase.STABLE), w, True, None, 1, T0 + dt.timedelta(hours=1))
    again = scaling.with_autoscaling(decision(stored["conditions"]), auto, later)
    assert changed(stored, again.status_json) == {}  # the same condition at a later tick: nothing to write
    gone = scaling.with_autoscaling(decision(stored["conditions"]), None, None)
    assert changed(stored, gone.status_json) == {"conditions": [], "autoscaling": None}
    failed = scaling.report(srv, status(AnalysisPhase.STABLE), w, False, "applying the ScaledObject failed", 1, T0)
    assert failed[1] is not None and (failed[1]["status"], failed[1]["reason"]) == ("False", scaling.APPLY_FAILED)
    assert failed[0] is not None and "scaledObject" not in failed[0]


def test_the_write_follows_the_memorys_record_of_the_last_one() -> None:
    """Item 4 of issue 39: the ScaledObject is a decision (:func:`scaling.write_of`): written when its rendering is
    new to the memory, reported standing; not written again within the verification period; a failure reported until
    a write succeeds, tried again after the retry period; a delete only outside a failed one's retry period."""
    w = scaling.want(server(AUTO), status(AnalysisPhase.STABLE), keda=True, prometheus_address=PROM, had=False)
    assert w.scaled_object is not None
    key = scaling.digest(w.scaled_object)
    first, stands, why = scaling.write_of(w, None, 100.0)
    assert first is not None and first.manifest == w.scaled_object and first.digest == key and (stands, why) == (
        True, None)
    assert scaling.write_of(w, scaling.ScalerRecord(key, None, 100.0), 110.0) == (None, True, None)
    verify = scaling.write_of(w, scaling.ScalerRecord(key, None, 100.0), 100.0 + scaling.VERIFY_SECONDS)
    assert verify[0] == first and verify[1:] == (True, None)
    assert scaling.write_of(w, scaling.ScalerRecord("other", None, 100.0), 110.0)[0] == first  # a new rendering
    failed = scaling.ScalerRecord(key, "refused", 100.0)
    assert scaling.write_of(w, failed, 110.0) == (None, False, "refused")
    assert scaling.write_of(w, failed, 100.0 + scaling.RETRY_SECONDS) == (first, False, "refused")
    gone = scaling.want(server(None), status(), keda=True, prometheus_address=PROM, had=True)
    delete = scaling.write_of(gone, scaling.ScalerRecord(key), 110.0)[0]
    assert delete is not None and delete.manifest is None and delete.digest == scaling.DELETE
    held = scaling.ScalerRecord(scaling.DELETE, "timed out", 100.0)
    assert scaling.write_of(gone, held, 110.0)[0] is None
    assert scaling.write_of(gone, held, 100.0 + scaling.RETRY_SECONDS)[0] == delete
    assert scaling.had_one(scaling.ScalerRecord(scaling.ABSENT), None) is False


def test_the_decision_carries_the_write_and_the_status_it_makes_stand() -> None:
    srv = server(AUTO)
    base = decision([])
    got = scaling.decided(base, srv, None, None, keda=True, prometheus_address=PROM, tenancy=None, measured=None,
                          generation=1, now=T0, clock=0.0)
    assert got.scaled_object is not None and got.scaled_object.manifest is not None
    assert got.status_json["autoscaling"]["scaledObject"] == "s"
    assert base.scaled_object is None and "autoscaling" not in base.status_json  # a new decision, the old one as it was
    no_keda = scaling.decided(base, srv, None, None, keda=False, prometheus_address=PROM, tenancy=None,
                              measured=None, generation=1, now=T0, clock=0.0)
    assert no_keda.scaled_object is None
    assert [c["reason"] for c in no_keda.status_json["conditions"]] == [scaling.KEDA_NOT_INSTALLED]


def test_a_scale_is_no_new_revision_and_no_spec_change_for_a_tuning() -> None:
    two, three = server(AUTO, replicas=2), server(AUTO, replicas=3)
    assert builders.render(two).revision == builders.render(three).revision
    spec2 = {**SAMPLE["spec"], "replicas": 2, "autoscaling": AUTO}
    spec3 = {**spec2, "replicas": 3}
    assert holds.spec_hash(spec2) == holds.spec_hash(spec3)
    hold = TuningHold(name="tune", stable_revision="r1", generation=1, spec_hash=holds.spec_hash(spec2),
                      trial="tune-trial-1", trial_revision="r9")
    held = SGLangServerStatus(revision="r9", tuning_hold=hold)
    request = inplace.TuningRequest(name="tune", in_place=True, active=True, started=True, trial="tune-trial-1",
                                    trial_revision="r9")
    step = inplace.step(held, 2, holds.spec_hash(spec3), (request,), T0)  # generation 2: the scale
    assert step.hold is not None and step.hold.trial_revision == "r9" and step.hold.generation == 2
    assert step.ended is None
