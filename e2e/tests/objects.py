"""Object builders and queries shared by the cluster tests (plain dicts, no YAML templates)."""

from __future__ import annotations

import json
import urllib.request
from collections.abc import Callable
from typing import Any

from e2e.conftest import K8sCluster, wait_for

ECHO_IMAGE = "example.com/http-echo:1.0"
PYTHON_IMAGE = "example.com/python:3.11"
GPU = "nvidia.com/gpu"


def container(name: str, image: str, port: int | None = 8080, gpus: int = 0,
              readiness_path: str | None = "/healthz", **extra: Any) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": image,
                         "resources": {"limits": {GPU: str(gpus)}} if gpus else {}}
    if port is not None:
        c["ports"] = [{"name": "http", "containerPort": port}]
        if readiness_path:
            c["readinessProbe"] = {"httpGet": {"path": readiness_path, "port": "http"},
                                   "periodSeconds": 1, "failureThreshold": 3}
    c.update(extra)
    return c


def deployment(name: str, replicas: int, containers: list[dict[str, Any]],
               strategy: str = "RollingUpdate", grace: int = 5) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": name, "labels": labels},
        "spec": {"replicas": replicas, "selector": {"matchLabels": labels}, "strategy": {"type": strategy},
                 "template": {"metadata": {"labels": labels},
                              "spec": {"containers": containers, "terminationGracePeriodSeconds": grace}}},
    }


def pod(name: str, containers: list[dict[str, Any]], restart: str = "Always") -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"containers": containers, "restartPolicy": restart,
                     "terminationGracePeriodSeconds": 2}}


def condition(obj: dict[str, Any], kind: str) -> dict[str, Any] | None:
    return next((c for c in obj.get("status", {}).get("conditions") or [] if c["type"] == kind), None)


def is_ready(p: dict[str, Any]) -> bool:
    c = condition(p, "Ready")
    return c is not None and c["status"] == "True"


def pods(k8s: K8sCluster, ns: str, selector: str) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = k8s.get("pods", "-n", ns, "-l", selector)["items"]
    return items


def ready_pods(k8s: K8sCluster, ns: str, selector: str, count: int) -> list[dict[str, Any]] | None:
    """The pods of ``selector`` if exactly ``count`` exist, none terminating, all Ready; else None."""
    items = pods(k8s, ns, selector)
    live = [p for p in items if not p["metadata"].get("deletionTimestamp")]
    if len(items) == count and len(live) == count and all(is_ready(p) for p in live):
        return live
    return None


def http_json(ip: str, port: int, path: str = "/") -> dict[str, Any]:
    """GET http://ip:port/path (loopback pod IPs only) and parse the JSON answer."""
    assert ip.startswith("127."), f"refusing to contact non-loopback address {ip}"
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(f"http://{ip}:{port}{path}", timeout=5) as resp:
        data: dict[str, Any] = json.loads(resp.read())
        return data


def server_status(k8s: K8sCluster, ns: str, name: str) -> dict[str, Any]:
    """The ``status`` of SGLangServer ``ns/name`` (``{}`` before the operator writes one)."""
    out: dict[str, Any] = k8s.get("sglangserver", name, "-n", ns).get("status") or {}
    return out


def wait_server_status(k8s: K8sCluster, ns: str, name: str, what: str, pred: Callable[[dict[str, Any]], Any],
                       timeout: float) -> dict[str, Any]:
    """Poll the status of SGLangServer ``ns/name`` every second until ``pred(status)`` holds; that status. On a
    timeout, print the last status (its first 8000 characters) and raise the AssertionError of ``wait_for``."""
    try:
        return wait_for(what, lambda: (s := server_status(k8s, ns, name)) and pred(s) and s, timeout=timeout,
                        interval=1)
    except AssertionError:
        print(json.dumps(server_status(k8s, ns, name), indent=1)[:8000])
        raise


def server_condition(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    """The condition ``type_`` of object ``obj`` (``{}`` when it has none)."""
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == type_), {})


def wait_server_ready(k8s: K8sCluster, ns: str, name: str, revision: str | None = None,
                      timeout: float = 90) -> dict[str, Any]:
    """Wait until SGLangServer ``ns/name`` is Ready (phase ``Ready``, condition Ready True, ``status.effective``
    set) on ``revision`` (any when None); the whole object. Prints its status and raises AssertionError on a
    timeout."""
    def ready() -> dict[str, Any] | None:
        obj: dict[str, Any] = k8s.get("sglangserver", name, "-n", ns)
        st = obj.get("status", {})
        ok = st.get("phase") == "Ready" and server_condition(obj, "Ready").get("status") == "True" and st.get(
            "effective")
        return obj if ok and (revision is None or st.get("revision") == revision) else None
    try:
        return wait_for(f"SGLangServer {ns}/{name} Ready", ready, timeout=timeout)
    except AssertionError:
        print(json.dumps(k8s.get("sglangserver", name, "-n", ns).get("status"), indent=1))
        raise
