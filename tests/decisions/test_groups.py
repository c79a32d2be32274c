"""Group health of a multi-node SGLangServer (LeaderWorkerSet pods): groups are replicas, readiness and
addresses come from leaders, a leader that is not Ready makes its group not Ready while its workers answer."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sglang_operator.api import parse
from sglang_operator.api.status import SGLangServerStatus
from sglang_operator.decisions.conditions import find
from sglang_operator.decisions.groups import (
    LWS_MISSING,
    group_health,
    groups,
    leader_pods,
    lws_missing,
    pod_views,
    server_health,
    serving_pods,
    waiting_for_lws,
)

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
REV = "8aae6ffb3b"


def lws_pod(group: int, index: int, ready: bool = True, rev: str = REV, waiting: str | None = None,
            scheduled: str | None = None, deleting: bool = False, lws: str = "dsv3") -> dict[str, Any]:
    name = f"{lws}-{group}" if index == 0 else f"{lws}-{group}-{index}"
    conds = [{"type": "Ready", "status": "True" if ready else "False"}]
    if scheduled:
        conds.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": scheduled})
    cs = {"name": "sglang", "state": {"waiting": {"reason": waiting}} if waiting else {"running": {}}}
    meta: dict[str, Any] = {"name": name, "labels": {
        "sglang-operator.io/revision": rev, "app.kubernetes.io/instance": "dsv3",
        "leaderworkerset.sigs.k8s.io/name": lws, "leaderworkerset.sigs.k8s.io/group-index": str(group),
        "leaderworkerset.sigs.k8s.io/worker-index": str(index)}}
    if deleting:
        meta["deletionTimestamp"] = "2026-12-01T11:59:00Z"
    return {"metadata": meta, "status": {"podIP": f"127.1.{group}.{index + 10}", "conditions": conds,
                                         "containerStatuses": [cs]}}


def test_one_group_of_two_ready_pods_is_one_ready_replica_served_by_its_leader() -> None:
    h = group_health([lws_pod(0, 0), lws_pod(0, 1)], 2, 1, REV, 4, NOW)
    assert (h.replicas, h.ready_replicas, h.updated_replicas) == (1, 1, 1)
    assert h.phase == "Ready" and find(h.conditions, "Ready")["status"] == "True"
    assert h.pod_ips == ["127.1.0.10"]  # the leader's address only


def test_leader_not_ready_makes_the_group_not_ready_while_its_worker_answers() -> None:
    h = group_health([lws_pod(0, 0, ready=False), lws_pod(0, 1, ready=True)], 2, 1, REV, 4, NOW)
    assert h.ready_replicas == 0 and h.pod_ips == []
    assert find(h.conditions, "Ready")["status"] == "False"
    assert h.phase == "Progressing"


def test_a_missing_or_unready_worker_keeps_the_group_not_ready() -> None:
    assert group_health([lws_pod(0, 0)], 2, 1, REV, 1, NOW).ready_replicas == 0
    h = group_health([lws_pod(0, 0), lws_pod(0, 1, ready=False)], 2, 1, REV, 1, NOW)
    assert h.ready_replicas == 0 and find(h.conditions, "Ready")["status"] == "False"


def test_a_troubled_worker_gives_the_group_its_reason() -> None:
    msg = "0/2 nodes are available: 2 Insufficient nvidia.com/gpu."
    h = group_health([lws_pod(0, 0), lws_pod(0, 1, ready=False, scheduled=msg)], 2, 1, REV, 1, NOW)
    degraded = find(h.conditions, "Degraded")
    assert degraded["status"] == "True" and degraded["reason"] == "Unschedulable" and msg in degraded["message"]
    crash = group_health([lws_pod(0, 0, ready=False, waiting="CrashLoopBackOff"), lws_pod(0, 1)], 2, 1, REV, 1, NOW)
    assert find(crash.conditions, "Degraded")["reason"] == "CrashLoopBackOff"


def test_groups_count_per_revision_by_their_leader() -> None:
    old = [lws_pod(0, 0, rev="old"), lws_pod(0, 1, rev="old")]
    new = [lws_pod(1, 0), lws_pod(1, 1)]
    h = group_health(old + new, 2, 2, REV, 1, NOW)
    assert (h.replicas, h.ready_replicas, h.updated_replicas) == (2, 1, 1)
    assert find(h.conditions, "Available")["status"] == "True"  # the old group still serves
    assert leader_pods(old + new, REV, size=2) == [new[0]]
    assert leader_pods(old + new, "old", size=2) == [old[0]]
    assert leader_pods(old + new, None, ready_only=False) == [old[0], new[0]]


def test_deleting_pods_and_groups_being_recreated_do_not_count() -> None:
    pods = [lws_pod(0, 0, deleting=True), lws_pod(0, 1)]
    assert [g.leader for g in groups(pods)] == [None]
    h = group_health(pods, 2, 1, REV, 1, NOW)
    assert h.replicas == 0 and h.ready_replicas == 0
    assert find(h.conditions, "Ready")["status"] == "False"


def test_groups_sorted_numerically() -> None:
    pods = [lws_pod(g, 0) for g in (10, 2, 0)]
    assert [g.index for g in groups(pods)] == ["0", "2", "10"]


def test_server_health_picks_groups_for_multinode_specs() -> None:
    spec = parse({"apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangServer",
                  "metadata": {"name": "dsv3", "namespace": "ml"},
                  "spec": {"sglang": {"image": "lmsysorg/sglang:v0.5.23"}, "model": {"path": "m"},
                           "parallelism": {"tensor": 16, "nodes": 2}}}).spec
    pods = [lws_pod(0, 0), lws_pod(0, 1)]
    assert server_health(pods, spec, REV, 1, NOW).replicas == 1
    single = spec.model_copy(update={"parallelism": spec.parallelism.model_copy(update={"nodes": 1})})
    assert server_health(pods, single, REV, 1, NOW).replicas == 2  # per pod
    assert serving_pods(pods, single) is pods
    half = [lws_pod(0, 0), lws_pod(0, 1, ready=False), lws_pod(1, 0), lws_pod(1, 1)]
    stand_ins = serving_pods(half, spec)
    assert [p["metadata"]["name"] for p in stand_ins] == ["dsv3-0", "dsv3-1"]
    assert [p["status"]["podIP"] for p in stand_ins] == ["127.1.0.10", "127.1.1.10"]
    assert [find(p["status"]["conditions"], "Ready")["status"] for p in stand_ins] == ["False", "True"]


def test_lws_missing_status_says_how_to_install_and_is_recognised() -> None:
    stored = {"conditions": [{"type": "Degraded", "status": "False", "reason": "AllReplicasReady"}]}
    out = lws_missing(SGLangServerStatus.model_validate(stored), ["a warning"], 3, NOW)
    ready = find(out["conditions"], "Ready")
    assert ready["status"] == "False" and ready["reason"] == LWS_MISSING
    assert "leaderworkerset.x-k8s.io/v1" in ready["message"] and "kubectl apply --server-side" in ready["message"]
    valid = find(out["conditions"], "SpecValid")
    assert valid["status"] == "True" and valid["reason"] == "ValidWithWarnings" and valid["message"] == "a warning"
    assert find(out["conditions"], "Degraded")["reason"] == "AllReplicasReady"  # other conditions kept
    assert out["phase"] == "Pending"
    assert waiting_for_lws(SGLangServerStatus.model_validate(out))
    assert not waiting_for_lws(SGLangServerStatus.model_validate(
        {"conditions": [{"type": "Ready", "status": "False", "reason": "ReplicasNotReady"}]}))


MINIMAL: dict[str, Any] = {"apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangServer",
                           "metadata": {"name": "dsv3", "namespace": "ml"},
                           "spec": {"sglang": {"image": "lmsysorg/sglang:v0.5.23"}, "model": {"path": "m"}}}


def test_pod_views_single_node_are_the_revisions_live_pods_with_restarts_uid_and_crash() -> None:
    spec = parse(MINIMAL).spec

    def single(name: str, rev: str = REV, ready: bool = False, restarts: int = 0, deleting: bool = False,
               crash: str | None = None) -> dict[str, Any]:
        cs: dict[str, Any] = {"name": "sglang", "restartCount": restarts, "state": {"running": {}}}
        if crash:
            cs["lastState"] = {"terminated": {"exitCode": 1, "message": crash}}
        meta: dict[str, Any] = {"name": name, "uid": f"uid-{name}", "labels": {"sglang-operator.io/revision": rev}}
        if deleting:
            meta["deletionTimestamp"] = "2026-12-01T11:59:00Z"
        return {"metadata": meta, "status": {"conditions": [{"type": "Ready", "status": str(ready)}],
                                             "containerStatuses": [cs]}}
    views = pod_views([single("b", restarts=2, crash="RuntimeError: Not enough memory"), single("a", ready=True),
                       single("old", rev="other"), single("gone", deleting=True)], spec, REV)
    assert [(v.name, v.ready, v.restarts, v.start_restarts, v.uid) for v in views] == [
        ("a", True, 0, 0, "uid-a"), ("b", False, 2, 2, "uid-b")]
    assert views[0].crash is None and views[1].crash == "container sglang exited with code 1: RuntimeError: Not " \
        "enough memory"


def test_pod_views_multi_node_count_the_leaders_restarts_and_quote_its_crash() -> None:
    spec = parse({**MINIMAL, "spec": {**MINIMAL["spec"], "parallelism": {"tensor": 16, "nodes": 2}}}).spec
    leader, worker = lws_pod(0, 0, ready=False), lws_pod(0, 1, ready=False, waiting="CrashLoopBackOff")
    leader["metadata"]["uid"] = "leader-uid"
    leader["status"]["containerStatuses"][0]["restartCount"] = 1
    leader["status"]["containerStatuses"][0]["lastState"] = {"terminated": {"exitCode": 1, "message": "boom"}}
    worker["status"]["containerStatuses"][0]["restartCount"] = 4
    (view,) = pod_views([leader, worker, lws_pod(1, 0, rev="other")], spec, REV)
    assert (view.name, view.ready, view.uid, view.leader_restarts, view.start_restarts) == (
        "dsv3-0", False, "leader-uid", 1, 1)
    assert view.crash == "container sglang exited with code 1: boom"
    leader["status"]["conditions"] = [{"type": "Ready", "status": "True"}]  # the leader Ready, the worker not:
    (view,) = pod_views([leader, worker], spec, REV)
    assert not view.ready and view.restarts == 4 and view.start_restarts == 1  # the stand-in reports the worker


def test_during_a_canary_the_two_sets_group_0_are_two_groups_one_view_each() -> None:
    """The stable set ``dsv3`` and the canary set ``dsv3-canary`` both number their groups from 0: the groups are
    keyed by set name too, so each revision counts its own groups (a replica is a group)."""
    spec = parse({"metadata": {"name": "dsv3"}, "spec": {
        "sglang": {"image": "lmsysorg/sglang:v0.5.23"}, "model": {"path": "deepseek-ai/DeepSeek-V3"},
        "replicas": 2, "parallelism": {"tensor": 16, "nodes": 2}, "strategy": {"type": "Canary"}}}).spec
    pods = [lws_pod(0, 0), lws_pod(0, 1), lws_pod(0, 0, rev="c4", lws="dsv3-canary"),
            lws_pod(0, 1, ready=False, rev="c4", lws="dsv3-canary")]
    assert [(g.set_name, g.index, len(g.pods)) for g in groups(pods)] == [("dsv3", "0", 2), ("dsv3-canary", "0", 2)]
    stable, canary = pod_views(pods, spec, REV), pod_views(pods, spec, "c4")
    assert [(v.name, v.ready) for v in stable] == [("dsv3-0", True)]
    assert [(v.name, v.ready) for v in canary] == [("dsv3-canary-0", False)]  # its worker is not Ready
    h = server_health(pods, spec.model_copy(update={"replicas": 1}), REV, 1, NOW)
    assert (h.replicas, h.ready_replicas, h.pod_ips) == (2, 1, ["127.1.0.10"])  # both groups seen, one of REV Ready
    assert [p["metadata"]["name"] for p in leader_pods(pods, "c4", ready_only=False)] == ["dsv3-canary-0"]
