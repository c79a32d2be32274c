"""Tensor parallelism across nodes on the real LeaderWorkerSet controller (issue 9 "Done when", LWS line).

The module starts ``lws-manager`` v0.7.0 (:class:`e2e.cluster.lws.LWSController`, built by
``python -m e2e.build_lws``; missing, the module FAILS) on the session's local cluster, and the operator. A
DeepSeek-V3-sized spec (``tensor: 16, nodes: 2``) gives one group of two pods with 8 GPUs each, node ranks 0 and
1, one dist-init address, Ready from the leader; the leader losing readiness or its process makes the group not
Ready; a speculative change rolls the group to a new revision; deleting the SGLangServer removes the
LeaderWorkerSet and its pods. Without the LWS API nothing is applied and the Ready condition says so until it
is installed (no edit). A group that crashes at start-up fails at its leader's third restart (a recreated group
counts), not at the progress deadline. ``tensor: 10, nodes: 4`` and ``tensor: 4, data: 2, nodes: 4`` are refused
naming the fields. A two-group server (``strategy.type: Canary``) canaries one group: the regressed revision runs
as LeaderWorkerSet ``NAME-canary`` on one group beside the stable set's group 0, is judged against it in the same
intervals and removed; the stable group 0 keeps its pods (issue 18, LeaderWorkerSet line).
"""

from __future__ import annotations

import json
import os
import signal
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.build_lws import require as require_lws
from e2e.cluster.lws import LWSController
from e2e.conftest import BackgroundPoll, K8sCluster, running_operator, wait_for
from e2e.operator_proc import OperatorProcess
from e2e.policies import BAD, GOOD, sample
from e2e.tests.objects import server_condition, wait_server_ready

pytestmark = [pytest.mark.cluster, pytest.mark.local_cluster]
ROOT = Path(__file__).resolve().parents[2]
NAME = "dsv3"
WORKER_INDEX = "leaderworkerset.sigs.k8s.io/worker-index"
GROUP_INDEX = "leaderworkerset.sigs.k8s.io/group-index"
SET_NAME = "leaderworkerset.sigs.k8s.io/name"
TRACK = "sglang-operator.io/track"
REVISION = "sglang-operator.io/revision"
FAST_SIM = [{"name": "SGLANG_SIM_LOAD_SECONDS", "value": "1"}, {"name": "SGLANG_SIM_TIME_SCALE", "value": "20"}]


def dsv3(**parallelism: int) -> dict[str, Any]:
    """A DeepSeek-V3-sized SGLangServer: TP 16 over 2 nodes of 8 GPUs, MTP (NEXTN)."""
    return {
        "apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangServer", "metadata": {"name": NAME},
        "spec": {
            "sglang": {"image": "lmsysorg/sglang:v0.5.23"},
            "model": {"path": "deepseek-ai/DeepSeek-V3", "trustRemoteCode": True},
            "parallelism": parallelism or {"tensor": 16, "nodes": 2},
            "speculative": {"algorithm": "NEXTN", "numSteps": 3, "eagleTopk": 1},
            # 39 GiB of weights per RTX A6000 (the simulator sizes DeepSeek-V3 from its config): SGLang's automatic
            # fraction leaves the KV cache nothing ("Not enough memory"), 0.9 leaves it 2.8 GiB
            "memory": {"maxRunningRequests": 16, "contextLength": 32768, "memFractionStatic": 0.9},
            "env": FAST_SIM,
        },
    }


@pytest.fixture(scope="module")
def lws(k8s_cluster: K8sCluster) -> Iterator[LWSController]:
    """The LeaderWorkerSet controller of the local cluster (not started: tests start it)."""
    require_lws()
    if k8s_cluster.local is None:
        pytest.fail("the multi-node tests run lws-manager on the local control plane", pytrace=False)
    controller = LWSController(k8s_cluster.local)
    try:
        yield controller
    finally:
        controller.stop()


@pytest.fixture(scope="module")
def operator(k8s_cluster: K8sCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    with running_operator(k8s_cluster, tmp_path_factory.mktemp("operator")) as op:
        yield op


def server(k8s: K8sCluster, ns: str) -> dict[str, Any]:
    out: dict[str, Any] = k8s.get("sglangserver", NAME, "-n", ns)
    return out


cond = server_condition


def wait_ready(k8s: K8sCluster, ns: str, revision: str | None = None, timeout: float = 120) -> dict[str, Any]:
    return wait_server_ready(k8s, ns, NAME, revision, timeout)


def live_pods(k8s: K8sCluster, ns: str) -> list[dict[str, Any]]:
    items = k8s.get("pods", "-n", ns, "-l", f"app.kubernetes.io/instance={NAME}")["items"]
    return sorted((p for p in items if not p["metadata"].get("deletionTimestamp")), key=lambda p: p["metadata"]["name"])


def ready(pod: dict[str, Any]) -> bool:
    return any(c["type"] == "Ready" and c["status"] == "True" for c in pod["status"].get("conditions", []))


def pid(pod: dict[str, Any]) -> int:
    return int(pod["status"]["containerStatuses"][0]["containerID"].removeprefix("process://"))


def argv(pod: dict[str, Any]) -> list[str]:
    """The command line the fake kubelet ran for the pod (after ``$(VAR)`` expansion)."""
    return Path(f"/proc/{pid(pod)}/cmdline").read_bytes().decode().split("\0")


def flag(args: list[str], name: str) -> str:
    assert args.count(name) == 1, args
    return args[args.index(name) + 1]


def http(ip: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
    data = json.dumps(body).encode() if body is not None else None
    req = urllib.request.Request(f"http://{ip}:30000{path}", data=data,
                                 headers={"Content-Type": "application/json"} if data else {})
    try:
        with urllib.request.urlopen(req, timeout=5) as r:
            raw = r.read()
            return r.status, json.loads(raw) if raw and raw[:1] in b"{[" else raw
    except urllib.error.HTTPError as err:
        return err.code, None


def test_without_the_lws_api_nothing_is_applied_and_installing_it_needs_no_edit(
    k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess, lws: LWSController
) -> None:
    lws.stop()  # the LeaderWorkerSet API is not served
    k8s_cluster.apply(dsv3(), namespace)
    def missing() -> dict[str, Any] | None:
        o = server(k8s_cluster, namespace)
        return o if cond(o, "Ready").get("reason") == "LeaderWorkerSetMissing" else None

    obj = wait_for("Ready=False LeaderWorkerSetMissing", missing, timeout=30)
    message = cond(obj, "Ready")["message"]
    assert cond(obj, "Ready")["status"] == "False"
    assert "leaderworkerset.x-k8s.io/v1" in message and "kubectl apply --server-side" in message
    assert cond(obj, "SpecValid")["status"] == "True"
    assert obj["status"]["phase"] == "Pending" and not obj["status"].get("revision")
    assert k8s_cluster.get("services", "-n", namespace)["items"] == []  # nothing applied, not even the Service
    assert live_pods(k8s_cluster, namespace) == []
    generation = obj["metadata"]["generation"]
    lws.start()
    obj = wait_ready(k8s_cluster, namespace)
    assert obj["metadata"]["generation"] == generation  # no edit of the SGLangServer
    assert k8s_cluster.get("leaderworkerset", NAME, "-n", namespace)["spec"]["leaderWorkerTemplate"]["size"] == 2


def test_tensor_16_over_2_nodes_is_one_group_ready_from_its_leader(
    k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess, lws: LWSController
) -> None:
    lws.start()
    k8s_cluster.apply(dsv3(), namespace)
    obj = wait_ready(k8s_cluster, namespace)
    uid, revision = obj["metadata"]["uid"], obj["status"]["revision"]
    group = k8s_cluster.get("leaderworkerset", NAME, "-n", namespace)
    assert group["metadata"]["ownerReferences"][0]["uid"] == uid
    assert group["spec"]["replicas"] == 1 and group["spec"]["startupPolicy"] == "LeaderCreated"
    assert group["spec"]["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"
    pods = live_pods(k8s_cluster, namespace)
    assert [p["metadata"]["labels"][WORKER_INDEX] for p in pods] == ["0", "1"]  # dsv3-0 (leader), dsv3-0-1
    assert all(p["metadata"]["labels"][REVISION] == revision for p in pods)
    for p in pods:
        limits = p["spec"]["containers"][0]["resources"]["limits"]
        assert limits["nvidia.com/gpu"] == "8"
    assert len({p["spec"]["nodeName"] for p in pods}) == 2  # 8 GPUs each: one pod per node
    leader, worker = pods
    args = [argv(p) for p in pods]
    assert [flag(a, "--node-rank") for a in args] == ["0", "1"]
    assert [flag(a, "--nnodes") for a in args] == ["2", "2"] and [flag(a, "--tp-size") for a in args] == ["16", "16"]
    addresses = {flag(a, "--dist-init-addr") for a in args}
    assert addresses == {f"{NAME}-0.{NAME}-0.{namespace}:20000"}  # one address: LWS's leader name + port
    # the leader serves SGLang; the worker only its dummy health server
    code, info = http(leader["status"]["podIP"], "/server_info")
    assert code == 200 and (info["node_rank"], info["nnodes"], info["tp_size"]) == (0, 2, 16)
    assert http(worker["status"]["podIP"], "/health")[0] == 200
    assert http(worker["status"]["podIP"], "/server_info")[0] == 404
    st = obj["status"]
    assert (st["replicas"], st["readyReplicas"]) == (1, 1)  # groups, not pods
    assert "worker-index=0" in st["selector"]
    svc = k8s_cluster.get("service", NAME, "-n", namespace)
    assert svc["spec"]["selector"][WORKER_INDEX] == "0" and svc["metadata"]["ownerReferences"][0]["uid"] == uid
    assert st["effective"]["maxRunningRequests"] == 16  # read from the leader's /server_info

    # the leader stops answering its readiness endpoint: the group is not Ready although the worker answers
    assert http(leader["status"]["podIP"], "/sim/admin/faults", {"http_500_rate": 1.0})[0] == 200
    wait_for("the group not Ready while its worker answers", lambda: (
        cond(o := server(k8s_cluster, namespace), "Ready").get("status") == "False"
        and o["status"].get("readyReplicas") == 0 and http(worker["status"]["podIP"], "/health")[0] == 200),
        timeout=60)
    assert ready(next(p for p in live_pods(k8s_cluster, namespace) if p["metadata"]["name"] == worker["metadata"]
                      ["name"]))
    assert http(leader["status"]["podIP"], "/sim/admin/faults", {"http_500_rate": 0.0})[0] == 200
    wait_ready(k8s_cluster, namespace, revision, timeout=60)

    # killing the leader's process: not Ready, the group is recreated (RecreateGroupOnPodRestart), Ready again
    os.kill(pid(leader), signal.SIGKILL)
    wait_for("the group not Ready after its leader died", lambda: cond(server(k8s_cluster, namespace), "Ready")
             .get("status") == "False", timeout=30)
    wait_for("a new group", lambda: {p["metadata"]["uid"] for p in live_pods(k8s_cluster, namespace)}
             .isdisjoint({leader["metadata"]["uid"], worker["metadata"]["uid"]})
             and len(live_pods(k8s_cluster, namespace)) == 2, timeout=60)
    obj = wait_ready(k8s_cluster, namespace, revision)
    assert obj["status"]["readyReplicas"] == 1


def test_speculative_change_rolls_the_group_and_deletion_removes_it(
    k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess, lws: LWSController
) -> None:
    lws.start()
    k8s_cluster.apply(dsv3(), namespace)
    old = wait_ready(k8s_cluster, namespace)["status"]["revision"]
    k8s_cluster.run("patch", "sglangserver", NAME, "-n", namespace, "--type=merge",
                    "-p", json.dumps({"spec": {"speculative": {"numSteps": 1}}}))
    new = wait_for("a new revision", lambda: (r := server(k8s_cluster, namespace).get("status", {}).get("revision"))
                   != old and r, timeout=30)
    group = k8s_cluster.get("leaderworkerset", NAME, "-n", namespace)
    templates = group["spec"]["leaderWorkerTemplate"]
    assert {templates[t]["metadata"]["labels"][REVISION] for t in ("leaderTemplate", "workerTemplate")} == {new}
    wait_for("both pods of the group at the new revision", lambda: [
        p["metadata"]["labels"][REVISION] for p in live_pods(k8s_cluster, namespace) if ready(p)] == [new, new],
        timeout=120)
    obj = wait_ready(k8s_cluster, namespace, new)
    leader = next(p for p in live_pods(k8s_cluster, namespace) if p["metadata"]["labels"][WORKER_INDEX] == "0")
    code, info = http(leader["status"]["podIP"], "/server_info")
    assert code == 200 and info["speculative_num_steps"] == 1 and info["speculative_num_draft_tokens"] == 2
    assert [r["revision"] for r in obj["status"]["revisions"]][-2:] == [old, new]
    # the rollback's analysis follows the new revision, judged from the group's leader (one target per group)
    analysis = wait_for("the rollback analysing the new revision", lambda: (
        a if (a := server(k8s_cluster, namespace)["status"].get("analysis") or {}).get("revision") == new else None),
        timeout=30)
    assert set(analysis.get("podRestarts") or {}) == {f"{NAME}-0"}, analysis

    k8s_cluster.run("delete", "sglangserver", NAME, "-n", namespace, "--wait=true", "--timeout=60s")
    wait_for("the LeaderWorkerSet, its StatefulSets, its pods and the Service removed", lambda: (
        k8s_cluster.get("leaderworkersets", "-n", namespace)["items"] == []
        and k8s_cluster.get("statefulsets", "-n", namespace)["items"] == []
        and k8s_cluster.get("pods", "-n", namespace)["items"] == []
        and k8s_cluster.get("services", "-n", namespace)["items"] == []), timeout=90)


def test_a_crash_looping_group_fails_at_its_leaders_third_restart(
    k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess, lws: LWSController
) -> None:
    """Issue 19 item 1, multi-node: LWS recreates the whole group as soon as a container restarts
    (``RecreateGroupOnPodRestart``), so the leader comes back under its name with another uid and a restart count
    of 0; each such comeback counts. With ``progressDeadlineSeconds: 3600`` the group that dies at start-up fails
    after 3 (``maxRestartsBeforeReady``); no stable revision: Paused, reason ``NoStableRevision``."""
    lws.start()
    body = dsv3()
    body["spec"]["env"] = [*body["spec"]["env"], {"name": "SGLANG_SIM_FAULT_CRASH_AFTER_S", "value": "0.5"}]
    body["spec"]["rollback"] = {"progressDeadlineSeconds": 3600}
    k8s_cluster.apply(body, namespace)
    uids: set[str] = set()

    def paused() -> dict[str, Any] | None:
        a = server(k8s_cluster, namespace).get("status", {}).get("analysis") or {}
        uids.update(s["uid"] for s in (a.get("podStarts") or {}).values() if s.get("uid"))
        return a if a.get("phase") == "Paused" else None

    analysis = wait_for("the crash-looping group Paused", paused, timeout=90, interval=0.5)
    assert analysis["reason"] == "NoStableRevision", analysis
    assert analysis["message"].startswith(f"{analysis['revision']}: leader pod {NAME}-0 restarted 3 times and was "
                                          "never Ready (maxRestartsBeforeReady 3)"), analysis["message"]
    assert len(uids) >= 2, uids  # leaders of several incarnations seen


@pytest.mark.parametrize(("parallelism", "fields"), [
    ({"tensor": 10, "nodes": 4}, ("spec.parallelism.nodes is 4", "parallelism.tensor × parallelism.pipeline is 10")),
    ({"tensor": 4, "data": 2, "nodes": 4}, ("spec.parallelism.data is 2 with parallelism.nodes 4",)),
])
def test_refused_naming_the_fields(k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess,
                                   parallelism: dict[str, int], fields: tuple[str, ...]) -> None:
    proc = k8s_cluster.run("apply", "-n", namespace, "-f", "-", input=json.dumps(dsv3(**parallelism)), check=False)
    assert proc.returncode != 0, "the API server accepted the spec"
    for f in fields:
        assert f in proc.stderr, proc.stderr


def two_groups(name: str) -> dict[str, Any]:
    """Sample ``name`` (the published known-good or regressed Qwen, the fast policy, the simulator at real speed) as
    2 LeaderWorkerSet groups of 2 pods (TP 2 over 2 nodes: 1 GPU a pod, 4 GPUs for the two groups) with the default
    canary (one step of one group, maxSurge 0), named ``NAME`` for this module's helpers."""
    obj = sample(name)
    obj["metadata"]["name"] = NAME
    obj["spec"].update(replicas=2, parallelism={"tensor": 2, "nodes": 2}, strategy={"type": "Canary"})
    return obj


def lws_named(k8s: K8sCluster, ns: str, name: str) -> dict[str, Any] | None:
    """LeaderWorkerSet ``ns/name``, or None when it does not exist."""
    items: list[dict[str, Any]] = k8s.get("leaderworkersets", "-n", ns)["items"]
    return next((o for o in items if o["metadata"]["name"] == name), None)


class GroupWatcher(BackgroundPoll):
    """Polls the server's pods every 0.5 s: Ready leaders per revision (the ready groups: capacity) and every pod
    name seen per revision."""

    def __init__(self, k8s: K8sCluster, ns: str) -> None:
        super().__init__()
        self.k8s, self.ns = k8s, ns
        self.capacity: list[int] = []
        self.pods: dict[str, set[str]] = {}

    def poll(self) -> None:
        try:
            items = live_pods(self.k8s, self.ns)
        except Exception:  # a transient kubectl failure: next poll
            items = []
        if items:
            groups = {(p["metadata"]["labels"].get(SET_NAME), p["metadata"]["labels"].get(GROUP_INDEX))
                      for p in items}
            ready_groups = [g for g in groups if all(
                ready(p) for p in items
                if (p["metadata"]["labels"].get(SET_NAME), p["metadata"]["labels"].get(GROUP_INDEX)) == g)
                and sum(1 for p in items if (p["metadata"]["labels"].get(SET_NAME),
                                             p["metadata"]["labels"].get(GROUP_INDEX)) == g) == 2]
            self.capacity.append(len(ready_groups))
            for p in items:
                self.pods.setdefault(p["metadata"]["labels"].get(REVISION, ""), set()).add(p["metadata"]["name"])


def test_a_two_group_server_canaries_one_group_and_removes_a_regressed_one(
    k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess, lws: LWSController
) -> None:
    k8s, ns = k8s_cluster, namespace
    lws.start()
    k8s.apply(two_groups(GOOD), ns)
    first = wait_for("the first revision promoted on both groups", lambda: (
        st if (st := server(k8s, ns).get("status") or {}).get("stableRevision") == st.get("revision")
        and st.get("stableRevision") and st.get("readyReplicas") == 2
        and (st.get("analysis") or {}).get("phase") == "Stable" else None), timeout=240)
    stable = first["revision"]
    group_0 = {p["metadata"]["name"]: (p["metadata"]["uid"], p["status"]["containerStatuses"][0]["restartCount"])
               for p in live_pods(k8s, ns) if p["metadata"]["labels"].get(SET_NAME) == NAME
               and p["metadata"]["labels"].get(GROUP_INDEX) == "0"}
    assert sorted(group_0) == [f"{NAME}-0", f"{NAME}-0-1"], group_0
    bad = two_groups(BAD)
    with GroupWatcher(k8s, ns) as watch:
        k8s.apply(bad, ns)
        c = wait_for("the canary LeaderWorkerSet", lambda: lws_named(k8s, ns, f"{NAME}-canary"), timeout=60)
        assert c["spec"]["replicas"] == 1 and c["metadata"]["labels"][TRACK] == "canary", c["metadata"]
        canary_rev = c["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["metadata"]["labels"][REVISION]
        assert canary_rev != stable
        wait_for("the stable set scaled to one group", lambda: k8s.get(
            "leaderworkerset", NAME, "-n", ns)["spec"]["replicas"] == 1, timeout=30)
        canary_pods = wait_for("the canary group's two pods", lambda: (
            ps if len(ps := [p for p in live_pods(k8s, ns) if p["metadata"]["labels"].get(SET_NAME)
                              == f"{NAME}-canary"]) == 2 else None), timeout=60)
        assert {p["metadata"]["labels"][TRACK] for p in canary_pods} == {"canary"}
        assert {p["metadata"]["labels"][REVISION] for p in canary_pods} == {canary_rev}

        def removed() -> dict[str, Any] | None:
            st: dict[str, Any] = server(k8s, ns).get("status") or {}
            gone = any(r["revision"] == canary_rev for r in st.get("rejectedRevisions") or [])
            return st if gone and not st.get("canary") and st.get("readyReplicas") == 2 else None

        s = wait_for("the regressed canary rejected and removed", removed, timeout=240)
    print(f"two-group canary: capacity min {min(watch.capacity)} groups; pods per revision {watch.pods}")
    assert s["revision"] == s["stableRevision"] == stable and not s.get("servingWorkload")
    assert watch.pods[canary_rev] == {f"{NAME}-canary-0", f"{NAME}-canary-0-1"}, watch.pods  # one group only
    assert min(watch.capacity) >= 1
    rejected = next(r for r in s["rejectedRevisions"] if r["revision"] == canary_rev)
    assert "canary" in rejected["reason"], rejected
    record = next(r for r in s["revisions"] if r["revision"] == canary_rev)
    assert record["canarySteps"][0]["verdict"] == "Failed", record
    assert record["canarySteps"][0]["stableTokensPerSecond"] > record["canarySteps"][0]["tokensPerSecond"]
    assert lws_named(k8s, ns, f"{NAME}-canary") is None
    assert k8s.get("leaderworkerset", NAME, "-n", ns)["spec"]["replicas"] == 2
    after = {p["metadata"]["name"]: (p["metadata"]["uid"], p["status"]["containerStatuses"][0]["restartCount"])
             for p in live_pods(k8s, ns)}
    assert {k: after.get(k) for k in group_0} == group_0  # the stable group 0 untouched: same pods, no restart
    assert k8s.get("sglangserver", NAME, "-n", ns)["spec"]["speculative"] == bad["spec"]["speculative"]
