"""The tuning controller's wait for a trial's pod (control/tuning.py ``TuningRunner._ready_pod``), with the
Kubernetes calls replaced: a pod the scheduler cannot place is reported in condition ``TrialPending`` with the
scheduler's message and the trial fails at its deadline with it; a crashed pod fails the trial at once with
SGLang's crash tail."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from sglang_operator.control import tuning as ctl
from sglang_operator.io import kube

TUNING: dict[str, Any] = {"apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangTuning",
                          "metadata": {"name": "t", "namespace": "ns", "resourceVersion": "7", "generation": 1},
                          "spec": {"serverRef": {"name": "s"}}, "status": {"phase": "Running"}}
UNSCHEDULABLE = {"metadata": {"name": "t-trial-1-abc"}, "status": {"phase": "Pending", "conditions": [
    {"type": "PodScheduled", "status": "False", "reason": "Unschedulable",
     "message": "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."}]}}
CRASHED = {"metadata": {"name": "t-trial-1-abc"}, "status": {"phase": "Running", "containerStatuses": [
    {"name": "sglang", "restartCount": 1, "state": {"waiting": {"reason": "CrashLoopBackOff"}},
     "lastState": {"terminated": {"exitCode": 1, "message": "RuntimeError: Not enough memory. Please try to "
                                  "increase --mem-fraction-static."}}}]}}


@pytest.fixture
def patches(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    written: list[dict[str, Any]] = []

    async def get_sglangtuning(namespace: str, name: str) -> dict[str, Any]:
        return TUNING

    async def patch_tuning_status(namespace: str, name: str, rv: str | None, status: Any) -> dict[str, Any]:
        assert rv == "7"
        written.append(dict(status))
        return TUNING

    monkeypatch.setattr(kube, "get_sglangtuning", get_sglangtuning)
    monkeypatch.setattr(kube, "patch_tuning_status", patch_tuning_status)
    monkeypatch.setattr(ctl, "POLL_SECONDS", 0.01)
    return written


async def test_a_pod_without_gpus_is_reported_and_fails_the_trial_at_its_deadline(
    monkeypatch: pytest.MonkeyPatch, patches: list[dict[str, Any]]
) -> None:
    async def list_pods(namespace: str, labels: Any) -> list[dict[str, Any]]:
        assert labels == {"app.kubernetes.io/instance": "t-trial-1"}
        return [UNSCHEDULABLE]

    monkeypatch.setattr(kube, "list_pods", list_pods)
    runner = ctl.TuningRunner("ns", "t")
    try:
        deadline = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=0.2)
        with pytest.raises(ctl.TrialFailure) as failure:
            await runner._ready_pod(TUNING, "t-trial-1", deadline, 1)
    finally:
        await runner.close()
    assert "not Ready by budget.trialDeadlineSeconds" in failure.value.reason
    assert "2 Insufficient nvidia.com/gpu" in failure.value.reason
    assert len(patches) == 1  # the condition once, not every poll
    pending = next(c for c in patches[0]["conditions"] if c["type"] == "TrialPending")
    assert pending["status"] == "True" and "Insufficient nvidia.com/gpu" in pending["message"]


async def test_a_crashed_pod_fails_the_trial_with_sglangs_message(
    monkeypatch: pytest.MonkeyPatch, patches: list[dict[str, Any]]
) -> None:
    async def list_pods(namespace: str, labels: Any) -> list[dict[str, Any]]:
        return [CRASHED]

    monkeypatch.setattr(kube, "list_pods", list_pods)
    runner = ctl.TuningRunner("ns", "t")
    try:
        with pytest.raises(ctl.TrialFailure) as failure:
            await runner._ready_pod(TUNING, "t-trial-1", dt.datetime.now(dt.UTC) + dt.timedelta(hours=1), 1)
    finally:
        await runner.close()
    assert failure.value.reason.startswith("container sglang exited with code 1")
    assert "Not enough memory" in failure.value.reason and not patches
