"""Workloads on the fake GPU nodes: scheduling by the real kube-scheduler, Deployments by the real
controller-manager, pods as local processes on 127.x IPs (fake kubelet)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from e2e.cluster.procs import pid_alive
from e2e.conftest import K8sCluster, wait_for
from e2e.tests.objects import ECHO_IMAGE, GPU, condition, container, deployment, http_json, pod, pods, ready_pods

pytestmark = pytest.mark.cluster


def _echo_pids(items: list[dict[str, Any]]) -> dict[str, int]:
    """pod name → PID reported by the pod's own HTTP endpoint (asserting it answers as that pod)."""
    out = {}
    for p in items:
        answer = http_json(p["status"]["podIP"], 8080)
        assert answer["pod"] == p["metadata"]["name"] and answer["ip"] == p["status"]["podIP"]
        out[p["metadata"]["name"]] = int(answer["pid"])
    return out


@pytest.mark.local_cluster
def test_gpu_deployment_scale_and_garbage_collection(k8s_cluster: K8sCluster, namespace: str) -> None:
    k8s_cluster.apply(deployment("echo", 3, [container("echo", ECHO_IMAGE, gpus=1)]), namespace)
    items = wait_for("3 Ready pods", lambda: ready_pods(k8s_cluster, namespace, "app=echo", 3), timeout=90)
    ips = [p["status"]["podIP"] for p in items]
    assert len(set(ips)) == 3 and all(ip.startswith("127.") for ip in ips), ips
    assert all(p["status"]["podIPs"] == [{"ip": p["status"]["podIP"]}] for p in items)
    nodes = {n["metadata"]["name"] for n in k8s_cluster.get("nodes")["items"]}
    assert all(p["spec"]["nodeName"] in nodes for p in items)
    pids = _echo_pids(items)
    assert len(set(pids.values())) == 3 and all(pid_alive(pid) for pid in pids.values())
    wait_for("Deployment available", lambda: k8s_cluster.get("deployment", "echo", "-n", namespace)
             ["status"].get("availableReplicas") == 3)

    k8s_cluster.run("scale", "deployment/echo", "--replicas=0", "-n", namespace)
    wait_for("pods gone", lambda: pods(k8s_cluster, namespace, "app=echo") == [], timeout=60)
    wait_for("processes gone", lambda: not any(pid_alive(p) for p in pids.values()), timeout=10)

    k8s_cluster.run("scale", "deployment/echo", "--replicas=1", "-n", namespace)
    wait_for("1 Ready pod", lambda: ready_pods(k8s_cluster, namespace, "app=echo", 1), timeout=60)
    rs = k8s_cluster.get("replicasets", "-n", namespace)["items"]
    assert [r["metadata"]["ownerReferences"][0]["name"] for r in rs] == ["echo"]
    k8s_cluster.run("delete", "deployment", "echo", "-n", namespace, "--cascade=background")
    # the garbage collector (controller-manager) deletes the orphaned ReplicaSet, then its pod
    wait_for("ReplicaSet and pod collected", lambda: not k8s_cluster.get("replicasets", "-n", namespace)["items"]
             and not pods(k8s_cluster, namespace, "app=echo"), timeout=60)


@pytest.mark.local_cluster
def test_recreate_rollout_frees_gpus_for_the_new_pods(k8s_cluster: K8sCluster, namespace: str) -> None:
    assert k8s_cluster.local is not None
    n, gpus = k8s_cluster.local.nodes.count, k8s_cluster.local.nodes.gpus
    dep = deployment("big", n, [container("echo", ECHO_IMAGE, gpus=gpus)], strategy="Recreate", grace=1)
    k8s_cluster.apply(dep, namespace)
    old = wait_for(f"{n} Ready pods", lambda: ready_pods(k8s_cluster, namespace, "app=big", n), timeout=90)
    old_pids = _echo_pids(old)
    dep["spec"]["template"]["metadata"]["annotations"] = {"rollout": "2"}
    k8s_cluster.apply(dep, namespace)
    old_uids = {p["metadata"]["uid"] for p in old}
    new = wait_for("new pods Ready", lambda: (r := ready_pods(k8s_cluster, namespace, "app=big", n))
                   and not {p["metadata"]["uid"] for p in r} & old_uids, timeout=90)
    assert new
    assert not any(pid_alive(p) for p in old_pids.values())


@pytest.mark.local_cluster
def test_namespace_deletion_removes_everything(k8s_cluster: K8sCluster) -> None:
    ns = f"e2e-nsdel-{uuid.uuid4().hex[:5]}"
    k8s_cluster.run("create", "namespace", ns)
    k8s_cluster.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"},
                       "data": {"k": "v"}}, ns)
    k8s_cluster.apply({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "echo"},
                       "spec": {"selector": {"app": "echo"}, "ports": [{"port": 80, "targetPort": 8080}]}}, ns)
    k8s_cluster.apply(deployment("echo", 2, [container("echo", ECHO_IMAGE, gpus=1)]), ns)
    items = wait_for("2 Ready pods", lambda: ready_pods(k8s_cluster, ns, "app=echo", 2), timeout=90)
    pids = _echo_pids(items)
    k8s_cluster.run("delete", "namespace", ns, "--wait=false")
    wait_for("namespace gone", lambda: k8s_cluster.run("get", "namespace", ns, check=False).returncode != 0,
             timeout=90)
    assert not any(pid_alive(p) for p in pids.values())
    left = k8s_cluster.run("get", "pods,replicasets,deployments,configmaps,services", "-n", ns,
                           "-o", "name").stdout
    assert left.strip() == ""


def test_pod_asking_too_many_gpus_stays_pending(k8s_cluster: K8sCluster, namespace: str) -> None:
    nodes = k8s_cluster.get("nodes")["items"]
    most = max(int(n["status"].get("allocatable", {}).get(GPU, "0")) for n in nodes)
    k8s_cluster.apply(pod("greedy", [container("c", "example.com/anything:1", port=None, gpus=most + 1)]),
                      namespace)

    def unschedulable() -> dict[str, Any] | None:
        p = k8s_cluster.get("pod", "greedy", "-n", namespace)
        c = condition(p, "PodScheduled")
        return c if c and c["status"] == "False" else None

    cond = wait_for("PodScheduled=False", unschedulable, timeout=30)
    assert cond["reason"] == "Unschedulable"
    assert f"Insufficient {GPU}" in cond["message"], cond["message"]
    p = k8s_cluster.get("pod", "greedy", "-n", namespace)
    assert p["status"]["phase"] == "Pending" and not p["spec"].get("nodeName")
