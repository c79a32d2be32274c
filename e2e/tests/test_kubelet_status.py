"""Pod status written by the fake kubelet, as a real kubelet would: probes drive Ready, crashes give
CrashLoopBackOff with restartCount and the FallbackToLogsOnError message, env is resolved."""

from __future__ import annotations

import time
from typing import Any

import pytest

from e2e.conftest import K8sCluster, wait_for
from e2e.tests.objects import ECHO_IMAGE, PYTHON_IMAGE, condition, container, is_ready, pod

pytestmark = [pytest.mark.cluster, pytest.mark.local_cluster]


def _status(k8s: K8sCluster, ns: str, name: str) -> dict[str, Any]:
    s: dict[str, Any] = k8s.get("pod", name, "-n", ns)["status"]
    return s


def test_readiness_probe_drives_ready_condition(k8s_cluster: K8sCluster, namespace: str) -> None:
    good = container("echo", ECHO_IMAGE, readiness_path="/ready")
    bad = container("echo", ECHO_IMAGE)
    bad["readinessProbe"] = {"tcpSocket": {"port": 9999}, "periodSeconds": 1}  # nothing listens there
    k8s_cluster.apply(pod("good", [good]), namespace)
    k8s_cluster.apply(pod("bad", [bad]), namespace)
    wait_for("good Ready", lambda: is_ready({"status": _status(k8s_cluster, namespace, "good")}), timeout=60)

    def bad_running() -> dict[str, Any] | None:
        s = _status(k8s_cluster, namespace, "bad")
        return s if s.get("phase") == "Running" and s["containerStatuses"][0]["state"].get("running") else None

    wait_for("bad running", bad_running, timeout=60)
    time.sleep(4)  # > failureThreshold x periodSeconds: the failing probe has been run several times
    st = _status(k8s_cluster, namespace, "bad")
    assert not is_ready({"status": st})
    ready = condition({"status": st}, "ContainersReady")
    assert ready is not None and ready["status"] == "False" and ready["reason"] == "ContainersNotReady"
    assert st["containerStatuses"][0]["started"] is True and st["containerStatuses"][0]["ready"] is False


def test_crash_loop_back_off_with_termination_message(k8s_cluster: K8sCluster, namespace: str) -> None:
    script = ("import sys; print('loading weights'); print('fatal: CUDA out of memory', file=sys.stderr); "
              "sys.exit(3)")
    c = container("main", PYTHON_IMAGE, port=None, args=["-c", script],
                  terminationMessagePolicy="FallbackToLogsOnError")
    k8s_cluster.apply(pod("crashy", [c]), namespace)

    def crash_looping() -> dict[str, Any] | None:
        cs = _status(k8s_cluster, namespace, "crashy").get("containerStatuses") or [{}]
        waiting = cs[0].get("state", {}).get("waiting", {})
        looping = cs[0].get("restartCount", 0) >= 2 and waiting.get("reason") == "CrashLoopBackOff"
        return cs[0] if looping else None

    cs = wait_for("CrashLoopBackOff after 2 restarts", crash_looping, timeout=60)
    term = cs["lastState"]["terminated"]
    assert term["exitCode"] == 3 and term["reason"] == "Error"
    assert term["message"].splitlines()[-2:] == ["loading weights", "fatal: CUDA out of memory"]
    st = _status(k8s_cluster, namespace, "crashy")
    assert st["phase"] == "Running" and not is_ready({"status": st})
    logs = k8s_cluster.run("logs", "crashy", "-n", namespace, "--tail=2").stdout  # via the API server
    assert logs.splitlines() == ["loading weights", "fatal: CUDA out of memory"]


def test_env_resolution_and_restart_policy_never(k8s_cluster: K8sCluster, namespace: str) -> None:
    k8s_cluster.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cfg"},
                       "data": {"model": "deepseek-ai/DeepSeek-V3"}}, namespace)
    k8s_cluster.run("create", "secret", "generic", "tok", "--from-literal=token=s3cret", "-n", namespace)
    script = ("import os, sys; e = os.environ; print(e['MODEL'], e['TOKEN'], e['POD'], sys.argv[1]); "
              "sys.exit(1)")
    env = [{"name": "MODEL", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "model"}}},
           {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": "tok", "key": "token"}}},
           {"name": "POD", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}}]
    c = container("main", PYTHON_IMAGE, port=None, args=["-c", script, "$(MODEL)"], env=env,
                  terminationMessagePolicy="FallbackToLogsOnError")
    k8s_cluster.apply(pod("once", [c], restart="Never"), namespace)
    st = wait_for("phase Failed", lambda: (s := _status(k8s_cluster, namespace, "once"))["phase"] == "Failed"
                  and s, timeout=60)
    term = st["containerStatuses"][0]["state"]["terminated"]
    assert term["exitCode"] == 1 and st["containerStatuses"][0]["restartCount"] == 0
    assert term["message"].strip() == "deepseek-ai/DeepSeek-V3 s3cret once deepseek-ai/DeepSeek-V3"
