"""A tuning's trials as they run, on the fake API (issue 38 item 1): a Shadow tuning of a 4-replica Canary server
(autoscaled by KEDA) starts its control trial; a tuning whose control trial is refused ends ``Failed`` in the one
step that finds it (reason ``ControlTrialRefused``, the refusal in its message), at the first step or as the trial
is to start, and never loops; an InPlace trial of an autoscaled Canary server runs on every replica with the
ScaledObject paused at that count."""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakekube import FakeKube
from test_autoscaling_loop import AUTO, PROM, Scaled
from test_tuning_in_place import TUNING, deployment, held_with_trial, logger

from sglang_operator.api.server import parse
from sglang_operator.builders import autoscaling as so
from sglang_operator.builders.tuning import SHADOW_MULTINODE
from sglang_operator.control import handlers
from sglang_operator.control import tuning as ctl
from sglang_operator.control.observer import Observer
from sglang_operator.decisions.conditions import rfc3339
from sglang_operator.decisions.tuning.lifecycle import CONTROL_REFUSED
from sglang_operator.io import keda

SAMPLE: dict[str, Any] = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "samples" / "qwen3.6-27b-known-good.yaml").read_text())
CANARY = {"type": "Canary", "drainSeconds": 10, "canary": {"steps": [{"replicas": 1}, {"replicas": "50%"}]}}
CANARY_AUTO = {**AUTO, "minReplicas": 2, "maxReplicas": 4, "prometheus": {"address": PROM}}


def server(**spec: Any) -> dict[str, Any]:
    body = copy.deepcopy(SAMPLE)
    body["metadata"] = {"name": "s", "namespace": "ns"}
    body["spec"].update(copy.deepcopy(spec))
    return body


def shadow(status: dict[str, Any] | None = None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangTuning",
        "metadata": {"name": "t", "namespace": "ns", "generation": 1, "creationTimestamp": "2026-01-01T00:00:00Z"},
        "spec": {"serverRef": {"name": "s"}, "parameters": {"numSteps": {"min": 1, "max": 3}},
                 "workload": {"secondsPerLevel": 5, "concurrency": [{"level": 1}]}, "budget": {"maxTrialCount": 4}}}
    if status is not None:
        body["status"] = status
    return body


class Shadow:
    def __init__(self, fk: FakeKube) -> None:
        self.fk, self.obs = fk, Observer(1.0)
        self.runner = ctl.TuningRunner("ns", "t", self.obs)

    def put(self, server_body: dict[str, Any], tuning_body: dict[str, Any]) -> None:
        self.obs.track("ADDED", self.fk.put(server_body))
        self.fk.put(tuning_body)

    def status(self) -> dict[str, Any]:
        got = self.fk.get("SGLangTuning", "ns", "t")
        assert got is not None
        return dict(got.get("status") or {})

    def condition(self, kind: str) -> dict[str, Any]:
        return next(c for c in self.status().get("conditions") or [] if c["type"] == kind)

    def tuning_writes(self) -> list[tuple[str, str, str, str | None]]:
        return [w for w in self.fk.writes if w[1] == "SGLangTuning"]


@pytest.fixture
async def world(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[Shadow]:
    monkeypatch.setattr(ctl, "POLL_SECONDS", 0.01)
    w = Shadow(FakeKube().install())
    yield w
    await w.obs.stop()


async def test_a_shadow_tuning_of_a_canary_server_runs_its_control_trial(world: Shadow) -> None:
    world.put(server(replicas=4, strategy=CANARY, autoscaling=CANARY_AUTO), shadow())
    assert await world.runner.step()  # begins: the points validated with the spec each trial runs
    st = world.status()
    assert st["phase"] == "Running" and st["trialsInvalid"] == 0 and st.get("trials", []) == []
    assert world.condition("Running")["message"].startswith("3 valid points, 0 refused")
    assert await world.runner.step()  # starts the control trial
    st = world.status()
    assert [(t["name"], t["settings"], t.get("verdict")) for t in st["trials"]] == [
        ("t-trial-0", {"speculative": False}, None)]
    assert st["trials"][0]["revision"] and st["controlTrial"] == "t-trial-0"
    running = world.condition("Running")
    assert (running["status"], running["reason"]) == ("True", "TrialRunning")


async def test_a_tuning_whose_control_trial_is_refused_fails_at_its_first_step(world: Shadow) -> None:
    world.put(server(replicas=2, parallelism={"tensor": 2, "nodes": 2}), shadow())
    assert not await world.runner.step()  # one step, over
    st = world.status()
    assert st["phase"] == "Failed" and st.get("trials", []) == [] and st["completedAt"]
    for kind in ("Running", "Complete"):
        cond = world.condition(kind)
        assert (cond["status"], cond["reason"]) == ("False", CONTROL_REFUSED)
        assert "control trial" in cond["message"] and SHADOW_MULTINODE in cond["message"]
    assert [w[0] for w in world.tuning_writes()] == ["patch_tuning_status"]
    assert [e[2] for e in world.fk.events] == ["TuningFailed"]
    assert not [k for k in world.fk.objects if k[0] == "Deployment"]
    assert not await world.runner.step()  # ended: nothing more, no retry
    assert len(world.tuning_writes()) == 1


async def test_a_control_trial_refused_as_it_starts_ends_the_tuning_in_that_step(
        world: Shadow, monkeypatch: pytest.MonkeyPatch) -> None:
    """The server changed after its points were validated (here: to a multi-node one, which no Shadow trial runs;
    the points as validated on the single-node one): the control trial's start is refused, recorded Invalid with
    the refusal, and the tuning ends Failed in that same step."""
    before = parse({**server(replicas=2), "metadata": {"name": "s", "namespace": "ns"}}).spec
    validated = ctl.plan.points
    monkeypatch.setattr(ctl.plan, "points", lambda params, _server, in_place=False: validated(params, before))
    begun = {"phase": "Running", "startedAt": rfc3339(dt.datetime.now(dt.UTC)), "trialsTotal": 4}
    world.put(server(replicas=2, parallelism={"tensor": 2, "nodes": 2}), shadow(begun))
    assert not await world.runner.step()
    st = world.status()
    assert st["phase"] == "Failed"
    assert [(t["name"], t["verdict"], t["reason"]) for t in st["trials"]] == [
        ("t-trial-0", "Invalid", SHADOW_MULTINODE)]
    cond = world.condition("Complete")
    assert cond["reason"] == CONTROL_REFUSED and SHADOW_MULTINODE in cond["message"]
    assert len(world.tuning_writes()) == 1 and not await world.runner.step()


class CanaryScaled(Scaled):
    """The autoscaling tests' world, its server a 4-replica Canary autoscaled by KEDA."""

    autoscaling = CANARY_AUTO

    async def create_server(self, replicas: int = 4) -> str:
        obj = server(replicas=replicas, strategy=CANARY, autoscaling=copy.deepcopy(self.autoscaling))
        body = self.fk.put(obj)
        await handlers.reconcile(body=body, meta=body["metadata"], status={}, patch={}, reason="create",
                                 logger=logger(), memo=self.memo)
        self.obs.track("MODIFIED", self.fk.server("s"))
        return str(self.fk.server("s")["status"]["revision"])


async def test_an_in_place_trial_of_an_autoscaled_canary_server_runs_on_every_replica_scaling_paused(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(keda, "SCALED_OBJECTS", keda.ScaledObjects(PROM))
    monkeypatch.setattr(ctl, "POLL_SECONDS", 0.01)
    monkeypatch.setattr(ctl, "WAIT_SECONDS", 0.0)
    fk = FakeKube().install()
    fk.put(copy.deepcopy(TUNING))
    world = CanaryScaled(fk)
    try:
        stable, trial = await held_with_trial(world)
        await world.tick()
        assert deployment(fk) == (trial, 4)  # every replica runs the trial: its replicas are the server's
        dep = fk.get("Deployment", "ns", "s")
        assert dep is not None and dep["spec"]["strategy"] == {"type": "Recreate"}
        assert world.pauses() == {so.PAUSED_REPLICAS: "4"}  # the ScaledObject, from the server's own spec
        assert fk.server("s")["spec"]["strategy"]["type"] == "Canary"  # the server's spec untouched
        assert "canary" not in fk.server("s")["status"]  # no canary of the trial's revision
        tuning = fk.get("SGLangTuning", "ns", "tune")
        assert tuning is not None
        assert [t.get("verdict") for t in tuning["status"]["trials"] if t["name"].startswith("tune-trial-")] == [None]
        assert trial != stable
    finally:
        await world.obs.stop()
