"""KEDA v2.21.0 itself: its ScaledObject CRD (from the module zip, ``python -m e2e.build_keda crds``) installed in the
local API server accepts every shape of ScaledObject the operator renders (the API server's structural schema and
KEDA's own CEL rule, ``--dry-run=server``) and refuses a broken one; the binaries ``python -m e2e.build_keda``
builds (the operator and the metrics API server, one ``go build``; missing, the test FAILS) start and name the flags
the local cluster's launcher will pass them (docs/autoscaling.md, "KEDA for the tests"); KEDA's real operator takes the
rendered ScaledObject, finds the SGLangServer's ``/scale`` and makes its HPA with the rendered behaviour, and
``paused-scale-in`` disables the HPA's scale-down until it is lifted (no metrics API server, no Prometheus: the HPA
itself does not scale here). With the operator running (local control plane, the simulator's pods), the operator
itself creates the ScaledObject of an autoscaled server, owned by it, with ``paused-scale-in`` while the first revision
warms up and verifies, and lifts it once the revision is promoted: KEDA's HPA follows both."""

from __future__ import annotations

import copy
import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e import build_keda
from e2e.cluster.procs import free_port
from e2e.conftest import K8sCluster, running_operator, wait_for
from sglang_operator.api import parse
from sglang_operator.builders import autoscaling as so

pytestmark = pytest.mark.cluster
PROM = "http://prometheus-operated.monitoring.svc:9090"
BASE = {"maxReplicas": 3, "target": 4}


def rendered(autoscaling: dict[str, Any], namespace: str, **spec: Any) -> dict[str, Any]:
    from e2e.tests.test_invalid_specs import valid_server

    body = valid_server()
    body["metadata"]["namespace"] = namespace
    body["spec"] |= {"autoscaling": autoscaling, **spec}
    out = so.scaled_object(parse(body), PROM, verifying=True)
    assert out is not None
    return out


@pytest.fixture(scope="module")
def keda_crd(k8s_cluster: K8sCluster) -> K8sCluster:
    k8s_cluster.install_crd(build_keda.require_crds() / build_keda.SCALED_OBJECT_CRD, name=so.CRD_NAME)
    return k8s_cluster


def dry_run(cluster: K8sCluster, obj: dict[str, Any]) -> subprocess.CompletedProcess[str]:
    return cluster.run("apply", "--dry-run=server", "-o", "json", "-f", "-", input=json.dumps(obj), check=False)


@pytest.mark.parametrize("shape", ["runningRequests", "kvCacheUsage-all-fields", "query", "two-node"])
def test_the_api_server_accepts_every_rendered_shape(keda_crd: K8sCluster, namespace: str, shape: str) -> None:
    if shape == "runningRequests":
        obj = rendered(BASE, namespace)
    elif shape == "kvCacheUsage-all-fields":
        obj = rendered({**BASE, "minReplicas": 2, "metric": "kvCacheUsage", "target": 0.8,
                        "behavior": {"scaleUp": {"stabilizationWindowSeconds": 0, "replicas": 3, "periodSeconds": 15},
                                     "scaleDown": {"stabilizationWindowSeconds": 30}},
                        "fallback": {"failureThreshold": 1, "replicas": 3}}, namespace)
    elif shape == "query":
        obj = rendered({**BASE, "metric": "query", "target": 500,
                        "query": 'sum(rate(sglang:generation_tokens_total{sglang_server="$server"}[1m]))'}, namespace)
    else:
        obj = rendered(BASE, namespace, parallelism={"tensor": 16, "nodes": 2}, resources={"gpu": 8})
    proc = dry_run(keda_crd, obj)
    assert proc.returncode == 0, proc.stderr
    stored = json.loads(proc.stdout)
    assert stored["spec"]["fallback"]["behavior"] == "currentReplicasIfHigher"
    assert stored["spec"]["triggers"][0]["metadata"]["ignoreNullValues"] == "false"
    assert stored["metadata"]["annotations"][so.PAUSED_SCALE_IN] == "true"


def test_kedas_own_rule_refuses_min_above_max(keda_crd: K8sCluster, namespace: str) -> None:
    """The CRD's CEL rule is live here (so the acceptance above means something)."""
    bad = copy.deepcopy(rendered(BASE, namespace))
    bad["spec"]["minReplicaCount"] = 5
    proc = dry_run(keda_crd, bad)
    assert proc.returncode != 0 and "minReplicaCount must be less than or equal to maxReplicaCount" in proc.stderr


@pytest.mark.parametrize(("binary", "flags"), [
    ("operator", ["--metrics-service-bind-address", "--cert-dir", "--enable-cert-rotation", "--kubeconfig"]),
    ("adapter", ["--metrics-service-address", "--secure-port", "--requestheader-client-ca-file", "--cert-dir"]),
])
def test_the_built_binaries_start_and_name_the_launchers_flags(binary: str, flags: list[str]) -> None:
    path = build_keda.require() / "bin" / binary
    proc = subprocess.run([str(path), "--help"], capture_output=True, text=True, timeout=60)
    text = proc.stdout + proc.stderr
    missing = [f for f in flags if f not in text]
    assert missing == [], text[-2000:]


@pytest.fixture
def keda_operator(keda_crd: K8sCluster, tmp_path: Path) -> Iterator[K8sCluster]:
    """KEDA's operator on the local cluster, its gRPC certificates made by its own rotation (which exits once after
    writing them, as in a pod that is then restarted), webhooks and APIService left alone."""
    binary = build_keda.require() / "bin" / "operator"
    keda_crd.run("create", "namespace", "keda", check=False)
    keda_crd.install_crd()  # before KEDA starts: it maps the scale target's kind when it reconciles
    env = {**os.environ, "KEDA_CLUSTER_OBJECT_NAMESPACE": "keda", "WATCH_NAMESPACE": "", "POD_NAMESPACE": "keda"}

    def start(log: Path) -> subprocess.Popen[bytes]:
        ports = [f"--{flag}=127.0.0.1:{free_port()}" for flag in ("metrics-bind-address", "health-probe-bind-address",
                                                                  "metrics-service-bind-address")]
        argv = [str(binary), f"--kubeconfig={keda_crd.kubeconfig}", f"--cert-dir={tmp_path}",
                "--enable-cert-rotation=true", "--enable-webhook-patching=false", "--enable-apiservice-patching=false",
                *ports]
        with log.open("wb") as out:  # the child keeps its own descriptor
            return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT)

    first = start(tmp_path / "keda-1.log")
    try:
        first.wait(timeout=60)  # "Secrets have been updated; exiting so pod can be restarted"
    except subprocess.TimeoutExpired:
        first.kill()
    proc = start(tmp_path / "keda-2.log")
    try:
        yield keda_crd
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()


def test_keda_makes_the_hpa_of_the_servers_scale_and_paused_scale_in_is_lifted(keda_operator: K8sCluster,
                                                                                namespace: str) -> None:
    from e2e.tests.test_invalid_specs import valid_server

    body = valid_server()
    body["metadata"]["namespace"] = namespace
    body["spec"]["autoscaling"] = BASE
    keda_operator.apply(body, namespace)
    keda_operator.apply(rendered(BASE, namespace), namespace)  # judged: paused-scale-in

    def hpa() -> dict[str, Any] | None:
        proc = keda_operator.run("get", "hpa", "-n", namespace, "keda-hpa-qwen36-27b", "-o", "json", check=False)
        return json.loads(proc.stdout) if proc.returncode == 0 else None

    made = wait_for("KEDA's HPA", hpa, timeout=90)
    assert made["spec"]["scaleTargetRef"] == {"apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangServer",
                                              "name": "qwen36-27b"}
    assert made["spec"]["metrics"][0]["external"]["target"] == {"type": "AverageValue", "averageValue": "4"}
    assert made["spec"]["behavior"]["scaleUp"]["policies"] == [{"type": "Pods", "value": 2, "periodSeconds": 300}]
    wait_for("scale-down disabled while judged",
             lambda: (h := hpa()) and h["spec"]["behavior"]["scaleDown"]["selectPolicy"] == "Disabled", timeout=60)
    keda_operator.run("annotate", "scaledobject", "-n", namespace, "qwen36-27b", f"{so.PAUSED_SCALE_IN}-")
    lifted = wait_for("scale-down back once lifted",
                      lambda: (h := hpa()) and h["spec"]["behavior"]["scaleDown"]["selectPolicy"] == "Max" and h,
                      timeout=60)
    assert lifted["spec"]["behavior"]["scaleDown"]["policies"] == [{"type": "Pods", "value": 1, "periodSeconds": 600}]


@pytest.mark.local_cluster
def test_the_operator_applies_the_scaled_object_and_lifts_its_pause_after_promotion(
        keda_operator: K8sCluster, namespace: str, tmp_path: Path) -> None:
    from e2e.policies import GOOD, sample

    body = sample(GOOD)
    body["spec"]["autoscaling"] = BASE
    name = str(body["metadata"]["name"])

    def scaled() -> dict[str, Any] | None:
        proc = keda_operator.run("get", "scaledobject", "-n", namespace, name, "-o", "json", check=False)
        return json.loads(proc.stdout) if proc.returncode == 0 else None

    def hpa() -> dict[str, Any] | None:
        proc = keda_operator.run("get", "hpa", "-n", namespace, f"keda-hpa-{name}", "-o", "json", check=False)
        return json.loads(proc.stdout) if proc.returncode == 0 else None

    def status() -> dict[str, Any]:
        out: dict[str, Any] = keda_operator.get("sglangserver", name, "-n", namespace).get("status") or {}
        return out

    with running_operator(keda_operator, tmp_path, status_interval=1.0, sample_interval=None,
                          args=["--prometheus-address", PROM]):
        keda_operator.apply(body, namespace)
        paused = wait_for("the operator's ScaledObject, scale-in paused while the first revision is judged",
                          lambda: (o := scaled()) and (o["metadata"].get("annotations") or {}).get(so.PAUSED_SCALE_IN)
                          == "true" and o, timeout=90)
        server = keda_operator.get("sglangserver", name, "-n", namespace)
        assert [(r["kind"], r["uid"], r.get("controller")) for r in paused["metadata"]["ownerReferences"]] == [
            ("SGLangServer", server["metadata"]["uid"], True)]
        judged = status()
        assert (judged.get("analysis") or {}).get("phase") in ("WarmingUp", "Verifying")
        assert judged["autoscaling"]["judging"] is True and judged["autoscaling"]["pause"] == "ScaleIn"
        wait_for("KEDA's HPA with scale-down disabled while judged",
                 lambda: (h := hpa()) and h["spec"]["behavior"]["scaleDown"]["selectPolicy"] == "Disabled", timeout=90)
        promoted = wait_for("the first revision promoted", lambda: (s := status()).get("stableRevision")
                            and s["stableRevision"] == s.get("revision")
                            and (s.get("analysis") or {}).get("phase") == "Stable" and s, timeout=180, interval=1)
        lifted = wait_for("the pause lifted after promotion", lambda: (o := scaled())
                          and so.PAUSED_SCALE_IN not in (o["metadata"].get("annotations") or {}) and o, timeout=30)
        assert lifted["metadata"]["uid"] == paused["metadata"]["uid"]  # the same object, annotated then lifted
        wait_for("KEDA's HPA scaling down again", lambda: (h := hpa())
                 and h["spec"]["behavior"]["scaleDown"]["selectPolicy"] == "Max", timeout=60)
        after = wait_for("status.autoscaling free", lambda: (s := status()).get("autoscaling", {}).get("judging")
                         is False and s, timeout=30)
        assert "pause" not in after["autoscaling"] and promoted["revision"] == after["revision"]
        cond = next(c for c in after["conditions"] if c["type"] == "Autoscaling")
        assert (cond["status"], cond["reason"]) == ("True", "ScaledObjectApplied")
