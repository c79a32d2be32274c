"""A trial's spec (decisions/tuning/trialspec.py, issue 38 item 1): one rule for a Shadow trial (1 pod) and an
InPlace one (the server's replicas) of a server with any strategy, with or without autoscaling, on one node or
several — the result is a plain single workload that parses as an SGLangServer and renders; the points and the
control trial are validated with that very spec (a point the trial cannot run is refused at the first step); a
control trial refused as it starts ends the tuning; the search stops at the status' cap and never proposes a point
refused at its start again."""

from __future__ import annotations

import copy
import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import yaml

from sglang_operator import builders
from sglang_operator.api import tuning as api
from sglang_operator.api.server import parse
from sglang_operator.api.tuning_spec import SGLangTuningSpec
from sglang_operator.api.tuning_status import MAX_TRIAL_RECORDS, SGLangTuningStatus, Trial, TrialSettings
from sglang_operator.api.view import ObjectRef, ServerView
from sglang_operator.builders.tuning import SHADOW_MULTINODE, trial_workload
from sglang_operator.decisions.tuning import lifecycle
from sglang_operator.decisions.tuning import trials as plan
from sglang_operator.decisions.tuning.trialspec import NOT_IN_A_TRIAL, trial_refusal

SAMPLE: dict[str, Any] = yaml.safe_load(
    (Path(__file__).resolve().parents[3] / "samples" / "qwen3.6-27b-known-good.yaml").read_text())
PROM = {"address": "http://prometheus.monitoring.svc:9090"}
AUTO = {"maxReplicas": 3, "target": 4, "prometheus": PROM}
STRATEGIES: dict[str, dict[str, Any]] = {
    "Recreate": {"type": "Recreate", "drainSeconds": 30},
    "RollingUpdate": {"type": "RollingUpdate", "maxUnavailable": "25%"},
    "Canary": {"type": "Canary", "drainSeconds": 30,
               "canary": {"steps": [{"replicas": 1}, {"replicas": "50%", "samples": 2}], "maxSurge": 1,
                          "onInconclusive": "Rollback"}},
}
TUNING_REF = ObjectRef(api.API_VERSION, api.KIND, "ns", "t", "uid-t")
NOW = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
CONTROL = TrialSettings(speculative=False)
CHAIN = TrialSettings(num_steps=2, eagle_topk=1, num_draft_tokens=3)


def server(strategy: str, autoscaling: bool, nodes: int = 1, replicas: int = 4) -> dict[str, Any]:
    """The known-good sample on ``replicas`` replicas with ``strategy`` (KEDA autoscaling: ``AUTO``, its minReplicas
    2 with Canary, the API's rule), on ``nodes`` nodes per replica (a LeaderWorkerSet above 1)."""
    body = copy.deepcopy(SAMPLE)
    body["metadata"] = {"name": "s", "namespace": "ns", "uid": "uid-s"}
    spec = body["spec"]
    spec["replicas"] = replicas
    spec["strategy"] = copy.deepcopy(STRATEGIES[strategy])
    if autoscaling:
        spec["autoscaling"] = {**AUTO, **({"minReplicas": 2} if strategy == "Canary" else {})}
    if nodes > 1:
        spec["parallelism"] = {"tensor": 2, "nodes": nodes}
    parse(body)  # the API accepts the server itself
    return body


def tuning(mode: str = "Shadow", **extra: Any) -> SGLangTuningSpec:
    return SGLangTuningSpec.model_validate({"serverRef": {"name": "s"}, "mode": mode, "disruption": "Allowed",
                                            "parameters": {"numSteps": {"min": 1, "max": 3}}, **extra})


@pytest.mark.parametrize("settings", [CONTROL, CHAIN], ids=["control", "2/1/3"])
@pytest.mark.parametrize("autoscaling", [False, True], ids=["fixed", "keda"])
@pytest.mark.parametrize("strategy", list(STRATEGIES))
@pytest.mark.parametrize("in_place", [False, True], ids=["shadow", "inplace"])
def test_a_trial_spec_is_one_workload_that_parses_and_renders_for_every_strategy(
        strategy: str, autoscaling: bool, in_place: bool, settings: TrialSettings) -> None:
    body = server(strategy, autoscaling)
    replicas = plan.trial_replicas(parse(body).spec, in_place)
    assert replicas == (4 if in_place else 1)
    spec = plan.trial_spec(body["spec"], settings, replicas)
    assert "autoscaling" not in spec and "canary" not in spec["strategy"]  # NOT_IN_A_TRIAL
    assert NOT_IN_A_TRIAL == ("autoscaling", "strategy.canary")
    assert spec["replicas"] == replicas and body["spec"]["replicas"] == 4  # a copy
    want_type = {"Canary": "Recreate"}.get(strategy, strategy)
    assert spec["strategy"] == {**{k: v for k, v in STRATEGIES[strategy].items() if k != "canary"},
                                "type": want_type}
    trial = parse({**body, "spec": spec})  # the API accepts it as a server of its own
    assert trial.spec.replicas == replicas and trial.spec.autoscaling is None
    assert (trial.spec.speculative is None) == (not settings.speculative)
    rendered = builders.render(trial)
    assert rendered.workload["kind"] == "Deployment" and rendered.workload["spec"]["replicas"] == replicas
    if strategy == "RollingUpdate":  # an InPlace trial replaces the server's pods as its updates do
        assert rendered.workload["spec"]["strategy"] == {
            "type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": "25%", "maxSurge": 0}}
    else:
        assert rendered.workload["spec"]["strategy"] == {"type": "Recreate"}
    pod = rendered.workload["spec"]["template"]["spec"]
    assert "lifecycle" not in pod["containers"][0]  # no canary's drain hook in a trial's pods
    assert trial_refusal(body["spec"], settings, replicas, shadow=not in_place) is None
    view = ServerView.of(body)
    manifest, by_tuning = lifecycle.render_trial(TUNING_REF, view, "t-trial-0", settings, in_place)
    if in_place:  # the tuning and the server's job (control/restore.py apply_trial) render the same revision
        assert manifest is None
        assert by_tuning.revision == builders.render(view.parse_with(
            plan.trial_spec(view.spec_data, settings, plan.trial_replicas(view.server.spec, True)))).revision
        assert by_tuning.revision == rendered.revision
    else:
        assert manifest is not None and manifest["spec"]["replicas"] == 1
        assert manifest["metadata"]["ownerReferences"][0]["kind"] == api.KIND


@pytest.mark.parametrize("strategy", list(STRATEGIES))
def test_a_multi_node_server_is_tuned_in_place_on_its_groups_and_refused_in_shadow_at_once(strategy: str) -> None:
    body = server(strategy, autoscaling=True, nodes=2)
    s = parse(body).spec
    spec = plan.trial_spec(body["spec"], CHAIN, plan.trial_replicas(s, True))
    rendered = builders.render(parse({**body, "spec": spec}))
    assert rendered.multinode and rendered.workload["spec"]["replicas"] == 4  # 4 LeaderWorkerSet groups
    assert rendered.workload["spec"]["leaderWorkerTemplate"]["size"] == 2
    manifest, by_tuning = lifecycle.render_trial(TUNING_REF, ServerView.of(body), "t-trial-1", CHAIN, True)
    assert manifest is None and by_tuning.revision == rendered.revision
    valid, invalid = plan.points(tuning("InPlace").parameters, s, in_place=True)
    assert len(valid) == 3 and not invalid and plan.control_refusal(s, in_place=True) is None
    # Shadow: no trial of a LeaderWorkerSet can run, so every point is refused and so is the control trial
    valid, invalid = plan.points(tuning().parameters, s)
    assert not valid and [p.reason for p in invalid] == [SHADOW_MULTINODE] * 3
    assert plan.control_refusal(s) == SHADOW_MULTINODE
    with pytest.raises(ValueError, match="multi-node"):
        trial_workload(parse({**body, "spec": plan.trial_spec(body["spec"], CONTROL)}).spec, "s", "ns", "t-trial-0",
                       TUNING_REF.stub())


def test_a_shadow_tuning_of_a_canary_server_validates_and_starts_its_control_trial() -> None:
    """The bug of issue 38: every trial of a 4-replica Canary server, the control trial included, was refused
    ("spec.strategy.type is Canary but spec.replicas is 1") while the first step said "3 valid points, 0 refused"."""
    body = server("Canary", autoscaling=True)
    s, spec = parse(body).spec, tuning()
    valid, invalid = plan.points(spec.parameters, s)
    assert [p.label for p in valid] == ["1/1/2", "2/1/3", "3/1/4"] and not invalid
    assert plan.control_refusal(s) is None
    begun, message = lifecycle.begin(SGLangTuningStatus(), spec, "t", valid, invalid, NOW, None)
    assert message.startswith("3 valid points, 0 refused") and begun.trials == []
    step = plan.next_step(spec, begun, valid, 0)
    assert step.kind == "start" and step.settings == CONTROL
    revision = lifecycle.render_trial(TUNING_REF, ServerView.of(body), "t-trial-0", CONTROL, False)[1].revision
    started, _ = lifecycle.started(begun, "t-trial-0", CONTROL, revision, NOW)
    assert started.control_trial == "t-trial-0" and started.trials[0].verdict is None


@pytest.mark.parametrize("in_place", [False, True], ids=["shadow", "inplace"])
def test_the_points_refused_at_the_first_step_are_the_trials_that_could_not_run(in_place: bool) -> None:
    """The first step's verdict on each point (:func:`plan.points`) is the verdict on the spec its trial runs,
    parsed as the server would be and checked with its release (:func:`trial_refusal`): a point counted valid
    renders as its trial, one counted refused does not, with the same reason."""
    body = server("Canary", autoscaling=True)
    s = parse(body).spec
    spec = tuning(parameters={"numSteps": {"list": [1, 2]}, "eagleTopk": {"list": [1, 2]},
                              "numDraftTokens": {"list": [3]}})
    valid, invalid = plan.points(spec.parameters, s, in_place)
    replicas = plan.trial_replicas(s, in_place)
    assert [p.label for p in valid] == ["1/1/2", "2/1/3"]
    for p in valid:
        assert trial_refusal(body["spec"], plan.settings_of(p), replicas, shadow=not in_place) is None
    refused = [i for i in invalid if i.point.eagle_topk == 2]  # specV2 takes chains only (SGLang's rule)
    assert [i.point.label for i in refused] == ["1/2/3", "2/2/3"]
    for i in refused:
        assert trial_refusal(body["spec"], plan.settings_of(i.point), replicas, shadow=not in_place) == i.reason


def test_a_refused_control_trial_ends_the_tuning_and_a_refused_point_is_never_proposed_again() -> None:
    spec = tuning()
    begun = SGLangTuningStatus(phase="Running", started_at="2026-01-01T00:00:00Z")
    out = lifecycle.refused(begun, "t-trial-0", CONTROL, "spec.replicas: refused", NOW)
    assert out.ending is not None and out.ending.phase.value == "Failed"
    assert out.ending.reason == lifecycle.CONTROL_REFUSED == "ControlTrialRefused"
    assert "control trial" in out.ending.message and "spec.replicas: refused" in out.ending.message
    assert [(t.name, t.verdict) for t in out.ending.status.trials] == [("t-trial-0", "Invalid")]
    control = Trial(name="t-trial-0", settings=CONTROL, verdict="Completed", objective=20.0)
    point = lifecycle.refused(begun.model_copy(update={"trials": [control]}), "t-trial-1", CHAIN, "no", NOW)
    assert point.ending is None and point.status.trials[-1].verdict == "Invalid"
    valid, _ = plan.points(spec.parameters, parse(server("Recreate", False)).spec)
    nxt = plan.next_step(spec, point.status, valid, 10)
    assert nxt.kind == "start" and nxt.settings != CHAIN  # the search goes on without the refused point


def test_the_search_never_records_more_trials_than_the_status_holds() -> None:
    spec = tuning(budget={"maxTrialCount": 100, "maxFailedTrialCount": 100}, algorithm={"algorithmName": "Grid"})
    valid, _ = plan.points(spec.parameters, parse(server("Recreate", False)).spec)
    assert plan.invalid_room(spec) == MAX_TRIAL_RECORDS - 100 - 1 == 1
    assert plan.invalid_room(tuning()) == plan.INVALID_RECORDS  # maxTrialCount 24: 16 recorded at most
    control = Trial(name="t-trial-0", settings=CONTROL, verdict="Completed", objective=20.0)
    refused = [Trial(name=f"t-trial-{i}", settings=TrialSettings(num_steps=1, eagle_topk=1, num_draft_tokens=2),
                     verdict="Invalid", reason="refused") for i in range(1, MAX_TRIAL_RECORDS)]
    full = SGLangTuningStatus(started_at="2026-01-01T00:00:00Z", trials=[control, *refused])
    assert len(full.trials) == MAX_TRIAL_RECORDS
    step = plan.next_step(spec, full, valid, 10)
    assert step.kind == "finish" and f"({MAX_TRIAL_RECORDS})" in step.reason and "no room" in step.reason
    one_short = full.model_copy(update={"trials": full.trials[:-1]})
    assert plan.next_step(spec, one_short, valid, 10).kind == "start"  # its record fits: the 102nd
    running = full.model_copy(update={"trials": [*full.trials[:-1], Trial(name="t-trial-x", settings=CHAIN)]})
    assert plan.next_step(spec, running, valid, 10).kind == "resume"  # the running trial has its record already
    ending = lifecycle.finish(spec, full, step.reason)
    assert ending.phase.value == "Failed" and "no room for another trial" in ending.message
