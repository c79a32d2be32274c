"""KEDA v2.21.0 itself: its ScaledObject CRD (from the module zip, ``python -m e2e.build_keda crds``) installed in the
local API server accepts every shape of ScaledObject the operator renders (the API server's structural schema and
KEDA's own CEL rule, ``--dry-run=server``) and refuses a broken one; the binaries ``python -m e2e.build_keda``
builds (the operator and the metrics API server, one ``go build``; missing, the test FAILS) start and name the flags
the local cluster's launcher will pass them (docs/autoscaling.md, "KEDA for the tests")."""

from __future__ import annotations

import copy
import json
import subprocess
from typing import Any

import pytest

from e2e import build_keda
from e2e.conftest import K8sCluster
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
    out = so.scaled_object(parse(body), PROM, judging=True)
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
