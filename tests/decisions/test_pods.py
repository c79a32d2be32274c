"""Pod health from Deployment pods: the reasons a platform engineer needs to see."""

import datetime as dt

from sglang_operator.api.base import MESSAGE_LIMIT
from sglang_operator.decisions.conditions import find, merge
from sglang_operator.decisions.pods import CRASH_QUOTE_LIMIT, crash_text, pod_health, restart_count, tail

NOW = dt.datetime(2026, 11, 30, 12, 0, tzinfo=dt.UTC)
REV = "abc123"


def pod(ready=False, rev=REV, ip="127.1.0.5", scheduled=None, waiting=None, terminated=None, deleting=False,
        reason="Error", state=None):
    conds = [{"type": "Ready", "status": "True" if ready else "False"}]
    if scheduled:
        conds.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": scheduled})
    cs = {"name": "sglang", "state": {"waiting": {"reason": waiting}} if waiting else {"running": {}}}
    if terminated:
        cs["lastState"] = {"terminated": {"exitCode": 1, "reason": reason, "message": terminated}}
    if state is not None:
        cs["state"] = state
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


# What the kubelet keeps of a crashed SGLang (FallbackToLogsOnError: the last 80 lines / 2 048 bytes): the end of
# the one-line server_args dump, the weight-loading lines, then the traceback and the exception.
SERVER_ARGS_TAIL = ", ".join(f"option_{i}=None" for i in range(200)) + ", tp_size=2, dp_size=1)"
CAUSE = ("RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
         "Current value: mem_fraction_static=0.2")
OOM_LOG = "\n".join([
    "server_args=ServerArgs(" + SERVER_ARGS_TAIL,
    "[2026-12-01 09:14:19 TP0] Load weight begin. avail mem=47.30 GB",
    "[2026-12-01 09:14:19 TP1] Load weight begin. avail mem=47.30 GB",
    "[2026-12-01 09:14:19 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/sgl-workspace/sglang/python/sglang/srt/managers/scheduler.py", line 2911, in run_scheduler_process',
    CAUSE,
])[-2048:]


def test_crashloop_keeps_the_exception_not_the_server_args_dump():
    h = pod_health([pod(waiting="CrashLoopBackOff", terminated=OOM_LOG)], 1, REV, 1, NOW)
    for kind in ("Degraded", "Ready"):
        msg = find(h.conditions, kind)["message"]
        assert len(msg) <= MESSAGE_LIMIT, kind
        assert msg.endswith(CAUSE), msg
        assert "Traceback (most recent call last):" in msg
    d = find(h.conditions, "Degraded")
    assert d["message"].startswith("container sglang exited with code 1: …")
    assert "option_0=None" not in d["message"]


def test_oomkilled_and_terminated_state_carry_reason_and_message():
    killed = pod(waiting="CrashLoopBackOff", terminated="Killed", reason="OOMKilled")
    d = find(pod_health([killed], 1, REV, 1, NOW).conditions, "Degraded")
    assert d["reason"] == "CrashLoopBackOff" and "(OOMKilled)" in d["message"] and d["message"].endswith("Killed")
    just_exited = pod(state={"terminated": {"exitCode": 1, "reason": "Error", "message": OOM_LOG}})
    d = find(pod_health([just_exited], 1, REV, 1, NOW).conditions, "Degraded")
    assert d["reason"] == "Error" and d["message"].endswith(CAUSE) and len(d["message"]) <= MESSAGE_LIMIT


def test_crash_text_quotes_the_end_of_the_last_crash_within_its_limit():
    looping = pod(waiting="CrashLoopBackOff", terminated=OOM_LOG)
    text = crash_text(looping)
    assert text is not None and len(text) <= CRASH_QUOTE_LIMIT and text.endswith(CAUSE)
    assert text.startswith("container sglang exited with code 1: …")
    assert crash_text(pod(ready=True)) is None  # never crashed
    assert crash_text(pod(state={"terminated": {"exitCode": 0, "reason": "Completed"}})) is None
    just_exited = pod(state={"terminated": {"exitCode": 137, "reason": "OOMKilled"}})
    assert crash_text(just_exited) == "container sglang exited with code 137 (OOMKilled)"
    assert len(crash_text(looping, 80) or "") <= 80


def test_restart_count_sums_the_containers():
    p = pod()
    p["status"]["containerStatuses"] = [{"name": "a", "restartCount": 2}, {"name": "b", "restartCount": 1}, {}]
    assert restart_count(p) == 3 and restart_count({}) == 0


def test_tail_cuts_at_a_line_boundary_and_marks_the_cut():
    assert tail("short") == "short"
    text = "x" * 3000 + "\nlast line"
    assert tail(text, 100) == "…last line"
    assert tail("y" * 3000, 10) == "…" + "y" * 9


def test_available_while_scaling_up_but_not_ready():
    h = pod_health([pod(ready=True), pod(ready=False, ip="127.1.0.6")], 2, REV, 4, NOW)
    assert find(h.conditions, "Ready")["status"] == "False"  # Ready keeps its meaning: all replicas Ready
    available = find(h.conditions, "Available")
    assert (available["status"], available["reason"]) == ("True", "MinimumReplicasAvailable")
    assert "1/2" in available["message"]
    assert find(pod_health([pod()], 1, REV, 1, NOW).conditions, "Available")["status"] == "False"
    # the previous revision's pod still serves during a rollout
    rolling = pod_health([pod(ready=True, rev="old"), pod()], 1, REV, 2, NOW)
    assert find(rolling.conditions, "Available")["status"] == "True"
