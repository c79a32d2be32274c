"""Pod health from Deployment pods: the reasons a platform engineer needs to see."""

import datetime as dt

from sglang_operator.reconcile.conditions import find, merge
from sglang_operator.reconcile.pods import pod_health

NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
REV = "abc123"


def pod(ready=False, rev=REV, ip="127.1.0.5", scheduled=None, waiting=None, terminated=None, deleting=False):
    conds = [{"type": "Ready", "status": "True" if ready else "False"}]
    if scheduled:
        conds.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": scheduled})
    cs = {"name": "sglang", "state": {"waiting": {"reason": waiting}} if waiting else {"running": {}}}
    if terminated:
        cs["lastState"] = {"terminated": {"exitCode": 1, "message": terminated}}
    meta = {"labels": {"sglang-operator.io/revision": rev}}
    if deleting:
        meta["deletionTimestamp"] = "2026-11-30T11:59:00Z"
    return {"metadata": meta, "status": {"podIP": ip, "conditions": conds, "containerStatuses": [cs]}}


def test_all_ready():
    h = pod_health([pod(ready=True)], 1, REV, 3, NOW)
    assert h.phase == "Ready"
    assert find(h.conditions, "Ready")["status"] == "True"
    assert find(h.conditions, "Ready")["observedGeneration"] == 3
    assert h.pod_ips == ["127.1.0.5"]


def test_unschedulable_carries_scheduler_message():
    msg = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    h = pod_health([pod(scheduled=msg)], 1, REV, 1, NOW)
    assert h.phase == "Degraded"
    degraded = find(h.conditions, "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "Unschedulable"
    assert msg in degraded["message"]
    assert find(h.conditions, "Ready")["status"] == "False"


def test_crashloop_carries_termination_message():
    h = pod_health([pod(waiting="CrashLoopBackOff", terminated="torch.OutOfMemoryError: CUDA out of memory")],
                   1, REV, 1, NOW)
    d = find(h.conditions, "Degraded")
    assert d["reason"] == "CrashLoopBackOff"
    assert "exited with code 1" in d["message"] and "CUDA out of memory" in d["message"]


def test_old_revision_pods_mean_progressing():
    h = pod_health([pod(ready=True, rev="old"), pod(ready=False)], 1, REV, 2, NOW)
    assert h.phase == "Progressing"
    assert h.updated_replicas == 1 and h.ready_replicas == 0
    assert find(h.conditions, "Progressing")["status"] == "True"


def test_terminating_pods_are_ignored_and_zero_replicas_is_stopped():
    h = pod_health([pod(ready=True, deleting=True)], 0, REV, 2, NOW)
    assert h.phase == "Stopped" and h.replicas == 0


def test_merge_keeps_transition_time_when_status_unchanged():
    first = pod_health([pod()], 1, REV, 1, NOW).conditions
    later = pod_health([pod()], 1, REV, 1, NOW + dt.timedelta(minutes=5)).conditions
    merged = merge(first, later)
    assert find(merged, "Ready")["lastTransitionTime"] == "2026-11-30T12:00:00Z"
    flipped = merge(merged, pod_health([pod(ready=True)], 1, REV, 1, NOW + dt.timedelta(minutes=6)).conditions)
    assert find(flipped, "Ready")["lastTransitionTime"] == "2026-11-30T12:06:00Z"
