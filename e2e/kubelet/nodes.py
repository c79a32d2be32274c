"""Fake GPU nodes: create the Node objects, then keep their Ready condition and their Lease in
``kube-node-lease`` fresh (the kubelet's node-status and lease heartbeats, every ``interval`` s).
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import threading
from dataclasses import dataclass

from e2e.kubelet.rest import JSON, ApiError, Rest

log = logging.getLogger("kubelet.nodes")
KUBELET_VERSION = "v1.36.3-fake"
NOT_READY_TAINTS = ("node.kubernetes.io/not-ready", "node.kubernetes.io/unreachable")


def now() -> str:
    """The current time as Kubernetes writes it (RFC 3339, seconds, UTC)."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def now_micro() -> str:
    """MicroTime (Lease renewTime)."""
    return dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass(frozen=True)
class NodeSpec:
    """One fake node: ``gpus`` is the ``nvidia.com/gpu`` capacity, ``memory`` a quantity ("512Gi")."""

    name: str
    ip: str
    gpus: int
    gpu_product: str
    cpu: str
    memory: str
    max_pods: int = 110
    kubelet_port: int = 0  # the HTTPS port serving containerLogs (server.py)


def _conditions(ts: str) -> list[JSON]:
    rows = [("MemoryPressure", "False", "KubeletHasSufficientMemory"),
            ("DiskPressure", "False", "KubeletHasNoDiskPressure"),
            ("PIDPressure", "False", "KubeletHasSufficientPID"),
            ("Ready", "True", "KubeletReady")]
    return [{"type": t, "status": s, "reason": r, "message": f"fake kubelet: {r}",
             "lastHeartbeatTime": ts, "lastTransitionTime": ts} for t, s, r in rows]


def node_object(spec: NodeSpec) -> JSON:
    """The Node as first registered (nodes may carry status on create)."""
    resources = {"cpu": spec.cpu, "memory": spec.memory, "pods": str(spec.max_pods),
                 "ephemeral-storage": "1Ti", "nvidia.com/gpu": str(spec.gpus)}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {"name": spec.name, "labels": {
            "kubernetes.io/hostname": spec.name, "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64", "nvidia.com/gpu.product": spec.gpu_product,
            "nvidia.com/gpu.count": str(spec.gpus), "e2e.sglang-operator.io/fake-kubelet": "true"}},
        "spec": {},
        "status": {
            "capacity": resources, "allocatable": resources, "conditions": _conditions(now()),
            "addresses": [{"type": "InternalIP", "address": spec.ip},
                          {"type": "Hostname", "address": spec.name}],
            "nodeInfo": {"kubeletVersion": KUBELET_VERSION, "containerRuntimeVersion": "fake://0.1",
                         "operatingSystem": "linux", "architecture": "amd64", "osImage": "fake",
                         "kernelVersion": os.uname().release, "kubeProxyVersion": "", "machineID": "",
                         "systemUUID": "", "bootID": ""},
            "daemonEndpoints": {"kubeletEndpoint": {"Port": spec.kubelet_port}},
        },
    }


def register(rest: Rest, spec: NodeSpec) -> None:
    """Create the Node (or replace the status of an existing one), then lift the not-ready taint."""
    body = node_object(spec)
    try:
        node = rest.create("/api/v1/nodes", body)
    except ApiError as exc:
        if exc.status != 409:
            raise
        node = rest.merge_patch(f"/api/v1/nodes/{spec.name}", {"metadata": body["metadata"]})
        rest.merge_patch(f"/api/v1/nodes/{spec.name}/status", {"status": body["status"]})
    untaint(rest, node)


def untaint(rest: Rest, node: JSON) -> None:
    """Remove the ``node.kubernetes.io/not-ready``/``unreachable`` taints: the TaintNodesByCondition
    admission plugin puts not-ready on every new Node and the node-lifecycle controller, which would
    lift it once the node is Ready, does not run here. Other taints stay."""
    taints = node.get("spec", {}).get("taints") or []
    keep = [t for t in taints if t["key"] not in NOT_READY_TAINTS]
    if len(keep) != len(taints):
        rest.merge_patch(f"/api/v1/nodes/{node['metadata']['name']}", {"spec": {"taints": keep or None}})


def _renew_lease(rest: Rest, name: str) -> None:
    path = f"/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}"
    spec = {"holderIdentity": name, "leaseDurationSeconds": 40, "renewTime": now_micro()}
    try:
        rest.merge_patch(path, {"spec": spec})
    except ApiError as exc:
        if exc.status != 404:
            raise
        rest.create("/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases", {
            "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": name, "namespace": "kube-node-lease"}, "spec": spec})


def heartbeat(rest: Rest, specs: list[NodeSpec], stop: threading.Event, interval: float = 10.0) -> None:
    """Renew leases and Ready conditions until ``stop`` is set; re-register deleted nodes."""
    while not stop.is_set():
        for spec in specs:
            try:
                _renew_lease(rest, spec.name)
                node = rest.get(f"/api/v1/nodes/{spec.name}")
                ts = now()
                conds = node.get("status", {}).get("conditions", [])
                for c in conds:
                    c["lastHeartbeatTime"] = ts
                    if c["type"] == "Ready" and c["status"] != "True":
                        c.update(status="True", reason="KubeletReady", lastTransitionTime=ts)
                rest.merge_patch(f"/api/v1/nodes/{spec.name}/status",
                                 {"status": {"conditions": conds or _conditions(ts)}})
                untaint(rest, node)
            except ApiError as exc:
                if exc.status == 404:
                    register(rest, spec)
                else:
                    log.warning("heartbeat %s: %s", spec.name, exc)
            except Exception as exc:
                log.warning("heartbeat %s: %s", spec.name, exc)
        stop.wait(interval)
