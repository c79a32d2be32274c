"""The tuning controller's wait for a Shadow trial's pod (control/tuning.py ``TuningRunner._shadow_pods``) on the
fake API, the pods from a watched cache: a pod the scheduler cannot place is reported in condition
``TrialPending`` with the scheduler's message (once) and the trial fails at its deadline with it; a crashed pod fails
the trial at once with SGLang's crash tail; a name another owner holds is never taken over, and never deleted."""

from __future__ import annotations

import copy
import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakekube import FakeKube

from sglang_operator.api.server import parse
from sglang_operator.api.tuning_status import Trial, TrialSettings
from sglang_operator.api.view import ObjectRef, ServerView, TuningView
from sglang_operator.control import tuning as ctl
from sglang_operator.control.apply import delete_trial_workload
from sglang_operator.io.sglang_http import SGLangHTTP

SAMPLE: dict[str, Any] = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "samples" / "qwen3.6-27b-known-good.yaml").read_text())
TUNING: dict[str, Any] = {"apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangTuning",
                          "metadata": {"name": "t", "namespace": "ns", "generation": 1},
                          "spec": {"serverRef": {"name": "s"}}, "status": {"phase": "Running"}}
UNSCHEDULABLE = {"metadata": {"name": "t-trial-1-abc"}, "status": {"phase": "Pending", "conditions": [
    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
     "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."}]}}
CRASHED = {"metadata": {"name": "t-trial-1-abc"}, "status": {"phase": "Running", "containerStatuses": [
    {"name": "sglang", "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
     "lastState": {"terminated": {"exitCode": 1, "message": "RuntimeError: Not enough memory. Please try to "
                                  "increase --mem-fraction-static."}}}]}}
TRIAL = Trial(name="t-trial-1", settings=TrialSettings(num_steps=1, eagle_topk=1, num_draft_tokens=2))


class Views:
    """The watched caches, as the observer serves them: the trial's pods are ``pods``."""

    def __init__(self, fk: FakeKube, pods: list[dict[str, Any]]) -> None:
        self.fk, self.pods = fk, pods
        self.asked: list[str] = []
        self.http = SGLangHTTP()

    async def server_view(self, namespace: str, name: str) -> ServerView | None:
        body = self.fk.get("SGLangServer", namespace, name)
        return ServerView.of(body) if body is not None else None

    async def instance_pods(self, namespace: str, instance: str, owner_uid: str) -> list[dict[str, Any]]:
        self.asked.append(instance)
        owner = "uid-t" if instance == "t-trial-1" else "uid-s"  # a trial's pods are the tuning's, never the server's
        assert owner_uid == owner, (instance, owner_uid)
        return self.pods if instance == "t-trial-1" else []


@pytest.fixture
def fk(monkeypatch: pytest.MonkeyPatch) -> FakeKube:
    fake = FakeKube().install()
    obj = copy.deepcopy(SAMPLE)
    obj["metadata"] = {"name": "s", "namespace": "ns"}
    fake.put(obj)
    fake.put(copy.deepcopy(TUNING))
    monkeypatch.setattr(ctl, "POLL_SECONDS", 0.01)
    return fake


async def wait(fk: FakeKube, pods: list[dict[str, Any]], seconds: float) -> ctl.TrialFailure:
    views = Views(fk, pods)
    runner = ctl.TuningRunner("ns", "t", views)
    server_body = fk.server("s")
    tuning = fk.get("SGLangTuning", "ns", "t")
    assert tuning is not None
    with pytest.raises(ctl.TrialFailure) as failure:
        await runner._shadow_pods(TuningView.of(tuning), ServerView.of(server_body), parse(server_body), TRIAL,
                                  dt.datetime.now(dt.UTC) + dt.timedelta(seconds=seconds))
    assert set(views.asked) <= {"t-trial-1", "s"}  # the watched pod cache, never a LIST
    await views.http.aclose()
    return failure.value


async def test_a_pod_without_gpus_is_reported_and_fails_the_trial_at_its_deadline(fk: FakeKube) -> None:
    failure = await wait(fk, [UNSCHEDULABLE], 0.2)
    assert "not Ready by budget.trialDeadlineSeconds" in failure.reason
    assert "2 Insufficient nvidia.com/gpu" in failure.reason
    writes = [w for w in fk.writes if w[0] == "patch_tuning_status"]
    assert len(writes) == 1 and writes[0][3] is not None  # the condition once, not every poll; with its rv
    tuning = fk.get("SGLangTuning", "ns", "t")
    assert tuning is not None
    pending = next(c for c in tuning["status"]["conditions"] if c["type"] == "TrialPending")
    assert pending["status"] == "True" and "Insufficient nvidia.com/gpu" in pending["message"]
    dep = fk.get("Deployment", "ns", "t-trial-1")
    assert dep is not None and dep["metadata"]["ownerReferences"][0]["uid"] == "uid-t"  # owned by the tuning


async def test_a_crashed_pod_fails_the_trial_with_sglangs_message(fk: FakeKube) -> None:
    failure = await wait(fk, [CRASHED], 3600)
    assert failure.reason.startswith("container sglang exited with code 1")
    assert "Not enough memory" in failure.reason
    assert not [w for w in fk.writes if w[0] == "patch_tuning_status"]


async def test_a_name_another_owner_holds_is_neither_taken_over_nor_deleted(fk: FakeKube) -> None:
    """A server named like the trial (``t-trial-1``): its Deployment is left as it is, the trial fails, and the
    tuning's cleanup deletes nothing of it."""
    fk.put({"kind": "Deployment", "metadata": {"name": "t-trial-1", "namespace": "ns", "ownerReferences": [
        {"kind": "SGLangServer", "name": "t-trial-1", "uid": "uid-victim", "controller": True}]},
        "spec": {"replicas": 1}})
    before = fk.get("Deployment", "ns", "t-trial-1")
    failure = await wait(fk, [], 3600)
    assert "is owned by SGLangServer t-trial-1: not taken over" in failure.reason
    tuning = fk.get("SGLangTuning", "ns", "t")
    assert tuning is not None
    assert not await delete_trial_workload(ObjectRef.of(tuning), "t-trial-1")
    after = fk.get("Deployment", "ns", "t-trial-1")
    assert after == before and not [w for w in fk.writes if w[1] == "Deployment"]
