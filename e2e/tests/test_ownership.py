"""Only the operator's own pods are targets, and nothing is written without owning it, on the local control plane
with the fast simulator and the fast policy (5 s intervals).

- **A labelled stranger**: beside server ``a`` (an API key in a Secret) runs a hand-made CPU pod carrying every
  label of ``a``'s own pod (its revision's too) and listening on ``a``'s port at its own pod IP: a tiny HTTP server
  that records every request it gets (method, path, ``Authorization``) in a file. While the operator samples ``a``
  (at least :data:`SAMPLED` samples after the stranger is Ready) the stranger gets no request at all — no
  ``/metrics`` scrape, no probe, no ``/server_info``, never the key — ``a`` shows one Ready replica, and the
  operator's ``sglang_operator_ignored_pods_total{reason="noController"}`` counts it.
- **Collisions**: server ``foo-trial-1`` beside SGLangTuning ``foo`` (Shadow, two trials: the first one,
  ``foo-trial-0``, is measured through the pods its own workload made; the second one's workload is named
  ``foo-trial-1``), and server ``x-canary`` beside server ``x`` whose spec update starts a canary (its
  workload is named ``x-canary``), then aborted. Neither victim's Deployment is touched (same uid, generation and
  spec; still there after the tuning ended and the abort), neither victim's pod restarted; the trial fails naming
  ``SGLangServer foo-trial-1``, and ``x`` is ``Degraded=True`` reason ``ChildConflict`` naming
  ``SGLangServer x-canary``.
"""

from __future__ import annotations

import base64
import json
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.conftest import K8sCluster, running_operator, wait_for
from e2e.hostile import read_metrics, server
from e2e.operator_proc import OperatorProcess
from e2e.policies import ROOT
from sglang_operator.api import tuning as api_tuning
from sglang_operator.api.base import ABORT_ANNOTATION

pytestmark = [pytest.mark.cluster, pytest.mark.local_cluster]
PORT = 30000
SAMPLED = 4
"""Samples of ``a`` taken while the stranger is Ready, at least."""
KEY = "e2e-owner-key-5f1c"
RECORDER = """
import http.server, json, os
class H(http.server.BaseHTTPRequestHandler):
    def record(self):
        n = int(self.headers.get("Content-Length") or 0)
        if n:
            self.rfile.read(n)
        with open(os.environ["RECORD"], "a") as f:
            f.write(json.dumps({"method": self.command, "path": self.path,
                                "authorization": self.headers.get("Authorization")}) + "\\n")
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    do_GET = do_POST = record
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer((os.environ["POD_IP"], int(os.environ["PORT"])), H).serve_forever()
"""


@pytest.fixture
def operator(k8s_cluster: K8sCluster, tmp_path: Path) -> Iterator[OperatorProcess]:
    k8s_cluster.install_crd(ROOT / "crds" / "sglangtunings.yaml", "sglangtunings.sglang-operator.io")
    with running_operator(k8s_cluster, tmp_path, sample_interval=None) as op:  # the fast policy's own 5 s
        yield op


def _status(k8s: K8sCluster, namespace: str, name: str) -> dict[str, Any]:
    return k8s.get("sglangserver", name, "-n", namespace).get("status") or {}


def _condition(status: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in status.get("conditions") or [] if c["type"] == type_), {})


def _ignored(port: int, reason: str) -> float:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith(f'sglang_operator_ignored_pods_total{{reason="{reason}"}}'):
                return float(line.rsplit(" ", 1)[1])
    return 0.0


def _ready_pods(k8s: K8sCluster, namespace: str, instance: str) -> list[dict[str, Any]]:
    pods = k8s.get("pods", "-n", namespace, "-l", f"app.kubernetes.io/instance={instance}")["items"]
    return [p for p in pods if any(c["type"] == "Ready" and c["status"] == "True"
                                   for c in (p.get("status") or {}).get("conditions") or [])]


def test_a_hand_made_pod_with_the_servers_labels_is_never_scraped_probed_nor_sent_the_key(
        k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess, tmp_path: Path) -> None:
    k8s_cluster.apply({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "a-key"},
                       "data": {"api-key": base64.b64encode(KEY.encode()).decode()}}, namespace)
    obj = server("a")
    obj["spec"]["apiKeySecretRef"] = {"name": "a-key"}
    k8s_cluster.apply(obj, namespace)
    wait_for("a Ready", lambda: _status(k8s_cluster, namespace, "a").get("phase") == "Ready", timeout=120)
    own = _ready_pods(k8s_cluster, namespace, "a")
    assert len(own) == 1
    record = tmp_path / "requests.jsonl"
    record.touch()
    stranger = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "a-stranger",
                                                              "labels": dict(own[0]["metadata"]["labels"])},
                "spec": {"containers": [{
                    "name": "recorder", "image": "example.com/python:3", "command": ["-c", RECORDER],
                    "ports": [{"containerPort": PORT}], "resources": {"requests": {"cpu": "10m"}},
                    "env": [{"name": "RECORD", "value": str(record)}, {"name": "PORT", "value": str(PORT)},
                            {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]}]}}
    stranger["metadata"]["labels"].pop("pod-template-hash", None)
    k8s_cluster.apply(stranger, namespace)
    wait_for("the stranger Ready", lambda: [p for p in _ready_pods(k8s_cluster, namespace, "a")
                                            if p["metadata"]["name"] == "a-stranger"], timeout=60)
    ip = k8s_cluster.get("pod", "a-stranger", "-n", namespace)["status"]["podIP"]

    def answers() -> bool:
        try:
            with urllib.request.urlopen(f"http://{ip}:{PORT}/check", timeout=5):
                return True
        except OSError:
            return False
    wait_for("the stranger answers (and records)", answers, timeout=30)
    assert json.loads(record.read_text().splitlines()[-1])["path"] == "/check"
    record.write_text("")

    first = read_metrics(operator.metrics_port, namespace).count("a")
    wait_for(f"{SAMPLED} samples of a beside the stranger",
             lambda: read_metrics(operator.metrics_port, namespace).count("a") >= first + SAMPLED,
             timeout=SAMPLED * 5 * 3, interval=1)

    assert record.read_text() == ""  # no scrape, no probe, no /server_info: never the key
    status = _status(k8s_cluster, namespace, "a")
    assert status.get("readyReplicas") == 1 and status.get("phase") == "Ready", status
    assert _ignored(operator.metrics_port, "noController") >= 1


def _deployment(k8s: K8sCluster, namespace: str, name: str) -> tuple[str, int, str]:
    d = k8s.get("deployment", name, "-n", namespace)
    return d["metadata"]["uid"], d["metadata"]["generation"], json.dumps(d["spec"], sort_keys=True)


def _restarts(k8s: K8sCluster, namespace: str, instance: str) -> dict[str, int]:
    pods = k8s.get("pods", "-n", namespace, "-l", f"app.kubernetes.io/instance={instance}")["items"]
    return {p["metadata"]["uid"]: sum(c.get("restartCount", 0) for c in p["status"].get("containerStatuses") or [])
            for p in pods}


def test_a_tuning_and_a_canary_named_like_other_servers_touch_none_of_their_objects(
        k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess) -> None:
    x = server("x")
    x["spec"].update(replicas=2, strategy={"type": "Canary"})
    for obj in (x, server("x-canary"), server("foo-trial-1")):
        k8s_cluster.apply(obj, namespace)
    for name in ("x", "x-canary", "foo-trial-1"):
        wait_for(f"{name} Ready", lambda n=name: _status(k8s_cluster, namespace, n).get("phase") == "Ready",
                 timeout=150)
    wait_for("x's first revision stable (a canary runs beside a stable revision)",
             lambda: _status(k8s_cluster, namespace, "x").get("stableRevision"), timeout=120, interval=1)
    victims = {n: (_deployment(k8s_cluster, namespace, n), _restarts(k8s_cluster, namespace, n))
               for n in ("x-canary", "foo-trial-1")}

    k8s_cluster.apply({"apiVersion": api_tuning.API_VERSION, "kind": api_tuning.KIND, "metadata": {"name": "foo"},
                       "spec": {"serverRef": {"name": "foo-trial-1"},
                                "budget": {"maxTrialCount": 2, "maxFailedTrialCount": 1},
                                "workload": {"maxOutputTokens": 16, "secondsPerLevel": 5, "warmupSeconds": 1,
                                             "repetitions": 1, "concurrency": [{"level": 1}]}}}, namespace)
    x["spec"]["memory"]["maxRunningRequests"] = 8  # a new revision: its canary's workload would be x-canary
    k8s_cluster.apply(x, namespace)

    def conflict() -> dict[str, Any]:
        d = _condition(_status(k8s_cluster, namespace, "x"), "Degraded")
        return d if d.get("reason") == "ChildConflict" else {}
    degraded = wait_for("x Degraded: ChildConflict", conflict, timeout=60, interval=1)
    assert degraded["status"] == "True"
    assert "Deployment " + namespace + "/x-canary is owned by SGLangServer x-canary: not taken over" in \
        degraded["message"], degraded

    def trial_failed() -> list[dict[str, Any]]:
        obj = k8s_cluster.get(api_tuning.PLURAL, "foo", "-n", namespace)
        return [t for t in (obj.get("status") or {}).get("trials") or [] if t.get("verdict") == "Failed"]
    failed = wait_for("foo's second trial failed", trial_failed, timeout=180, interval=1)
    assert failed[0]["name"] == "foo-trial-1"
    assert "is owned by SGLangServer foo-trial-1: not taken over" in json.dumps(failed[0]), failed

    k8s_cluster.run("annotate", "sglangserver", "x", "-n", namespace, "--overwrite",
                    f"{ABORT_ANNOTATION}={time.time()}")  # what `kubectl sglang abort x` writes
    time.sleep(15)  # three intervals: the abort's removal (a delete of x-canary) would have run
    gone = k8s_cluster.run("get", "deployment", "foo-trial-0", "-n", namespace, check=False)
    assert gone.returncode != 0, gone.stdout  # the tuning's own trial workload: deleted (with its uid) at its end
    for name, (deployment, restarts) in victims.items():
        assert _deployment(k8s_cluster, namespace, name) == deployment, name
        assert _restarts(k8s_cluster, namespace, name) == restarts, name
        status = _status(k8s_cluster, namespace, name)
        assert status.get("phase") == "Ready" and _condition(status, "Degraded").get("status") == "False", status


def test_a_delete_with_another_uid_is_refused_by_the_api_server(
        k8s_cluster: K8sCluster, namespace: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The operator's delete (``io/kube_write.delete_object``, a body lightkube does not send by itself) carries
    ``preconditions.uid``: the real API server refuses it with 409 for another uid and deletes with the right one."""
    import asyncio

    from lightkube import ApiError

    from sglang_operator.io import kube, kube_write

    k8s_cluster.apply({"apiVersion": "v1", "kind": "Service", "metadata": {"name": "victim"},
                       "spec": {"ports": [{"port": 80}]}}, namespace)
    uid = k8s_cluster.get("service", "victim", "-n", namespace)["metadata"]["uid"]
    monkeypatch.setenv("KUBECONFIG", str(k8s_cluster.kubeconfig))
    kube.reset_client()  # the process-wide client of another event loop, if one was made

    async def deletes() -> tuple[int, bool, bool]:
        try:
            try:
                await kube_write.delete_object("Service", namespace, "victim", uid="0" * 8 + uid[8:])
                code = 0
            except ApiError as err:
                code = err.status.code or 0
            still = await kube.get_object("Service", namespace, "victim") is not None
            return code, still, await kube_write.delete_object("Service", namespace, "victim", uid=uid)
        finally:
            await kube.close_client()

    code, still, deleted = asyncio.run(deletes())
    assert (code, still, deleted) == (409, True, True)
    wait_for("the Service gone", lambda: k8s_cluster.run("get", "service", "victim", "-n", namespace,
                                                         check=False).returncode != 0, timeout=30)
