"""The Helm chart's RBAC against a real API server: the chart rendered by a real helm in namespaced mode, applied
(all but the operator Deployment, whose image cannot run here), and the operator run locally with a token of the
chart's ServiceAccount. With only those permissions it must create an SGLangServer's Deployment, Service and
PodMonitor (the Prometheus Operator's CRDs are installed) and, the server autoscaled with KEDA's ScaledObject CRD
installed, its ScaledObject (deleted again when the spec switches autoscaling to External), post events and write
status up to Ready, without one 403.
"""

from __future__ import annotations

import contextlib
import copy
import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import build_keda
from e2e.conftest import K8sCluster, wait_for
from e2e.operator_proc import OperatorProcess
from e2e.prometheus import install_crds
from e2e.tools import helm_template, require_helm, require_prometheus_operator_crds

# local_cluster: the SGLang image must map to the simulator (fake kubelet), and the operator runs on the test
# host and reaches pods by their 127.x IPs. On kind this needs the operator image in-cluster (not built here).
pytestmark = [pytest.mark.cluster, pytest.mark.local_cluster]
ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "sglang-operator"
SAMPLE = ROOT / "samples" / "qwen3.6-27b-known-good.yaml"


def token_kubeconfig(k8s: K8sCluster, token: str, path: Path) -> Path:
    """A kubeconfig for ``token`` with the server and CA of the cluster's current context."""
    cfg = yaml.safe_load(k8s.kubeconfig.read_text())
    ctx_name = cfg["current-context"]
    ctx = next(c["context"] for c in cfg["contexts"] if c["name"] == ctx_name)
    cluster = next(c for c in cfg["clusters"] if c["name"] == ctx["cluster"])
    path.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "chart-sa",
        "clusters": [cluster],
        "users": [{"name": "chart-sa", "user": {"token": token}}],
        "contexts": [{"name": "chart-sa", "context": {"cluster": cluster["name"], "user": "chart-sa"}}],
    }, sort_keys=False))
    path.chmod(0o600)
    return path


PROMETHEUS = "http://prometheus.monitoring.svc:9090"
CLUSTER_SCOPED = ("ClusterRole", "ClusterRoleBinding", "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding")


@contextlib.contextmanager
def chart_installed(k8s_cluster: K8sCluster, namespace: str, helm: Path) -> Iterator[list[dict[str, Any]]]:
    """Apply the chart's CRD and its objects for a release in ``namespace`` watching ``namespace``, minus the
    Deployment; yield every rendered object; delete the cluster-scoped ones afterwards."""
    k8s_cluster.install_crd(CHART / "files" / "crds" / "sglangservers.yaml")
    install_crds(k8s_cluster, require_prometheus_operator_crds())  # the operator then creates PodMonitors
    k8s_cluster.install_crd(build_keda.require_crds() / build_keda.SCALED_OBJECT_CRD,  # and ScaledObjects
                            name="scaledobjects.keda.sh")
    release = f"chart-{namespace[-5:]}"  # unique: the ClusterRole and its binding are named after the release
    # the server below names this Prometheus: allowed by the admin (issue 47: the chart's policy refuses any other)
    objs = helm_template(helm, CHART, release, namespace, {
        "watchNamespaces": [namespace], "autoscaling": {"allowedPrometheusAddresses": [PROMETHEUS]}})
    applied = [o for o in objs if o["kind"] != "Deployment"]
    # every cluster-scoped object is deleted afterwards: the admission policy and its binding too, which would
    # otherwise judge the later tests' servers on this session's cluster by this release's values
    cluster_scoped = [o for o in applied if o["kind"] in CLUSTER_SCOPED]
    try:
        k8s_cluster.run("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List", "items": applied}))
        yield objs
    finally:
        for o in cluster_scoped:
            k8s_cluster.run("delete", o["kind"].lower(), o["metadata"]["name"], "--ignore-not-found", check=False)


def test_operator_works_with_only_the_charts_rbac(k8s_cluster: K8sCluster, namespace: str, tmp_path: Path) -> None:
    helm = require_helm()
    with chart_installed(k8s_cluster, namespace, helm) as objs:
        run_with_chart_rbac(k8s_cluster, namespace, objs, tmp_path)


def run_with_chart_rbac(k8s_cluster: K8sCluster, namespace: str, objs: list[dict[str, Any]], tmp_path: Path) -> None:
    """Run the operator as the chart's ServiceAccount; assert it brings the sample to Ready without a 403."""
    dep = next(o for o in objs if o["kind"] == "Deployment")
    sa = dep["spec"]["template"]["spec"]["serviceAccountName"]
    assert f"--namespace={namespace}" in dep["spec"]["template"]["spec"]["containers"][0]["args"]
    token = k8s_cluster.run("create", "token", sa, "-n", namespace, "--duration=1h").stdout.strip()
    kubeconfig = token_kubeconfig(k8s_cluster, token, tmp_path / "chart-sa.kubeconfig")

    # the token carries the chart's permissions only: nothing outside the watched namespace
    as_sa = K8sCluster(kubeconfig, k8s_cluster.kubectl, None)
    whoami = json.loads(as_sa.run("auth", "whoami", "-o", "json").stdout)
    assert whoami["status"]["userInfo"]["username"] == f"system:serviceaccount:{namespace}:{sa}"
    assert as_sa.run("auth", "can-i", "create", "events", "-n", namespace, check=False).stdout.strip() == "yes"
    denied = as_sa.run("get", "deployments", "-n", "default", check=False)
    assert denied.returncode != 0 and "forbidden" in denied.stderr.lower(), denied.stderr

    op = OperatorProcess(kubeconfig, tmp_path / "operator.log", args=["--namespace", namespace])
    op.start()
    try:
        body: dict[str, Any] = yaml.safe_load(SAMPLE.read_text())
        body["spec"].setdefault("env", []).append({"name": "SGLANG_SIM_LOAD_SECONDS", "value": "1"})
        body["spec"]["autoscaling"] = {"maxReplicas": 2, "target": 4,
                                       "prometheus": {"address": PROMETHEUS}}
        name = body["metadata"]["name"]
        k8s_cluster.apply(copy.deepcopy(body), namespace=namespace)

        def children() -> tuple[dict[str, Any], dict[str, Any]] | None:
            d = k8s_cluster.run("get", "deployment", name, "-n", namespace, "-o", "json", check=False)
            s = k8s_cluster.run("get", "service", name, "-n", namespace, "-o", "json", check=False)
            return (json.loads(d.stdout), json.loads(s.stdout)) if d.returncode == s.returncode == 0 else None

        for child in wait_for("the operator's Deployment and Service", children, timeout=60):
            owner = child["metadata"]["ownerReferences"][0]
            assert (owner["kind"], owner["name"], owner["blockOwnerDeletion"]) == ("SGLangServer", name, True)
        monitor = wait_for("the operator's PodMonitor", lambda: json.loads(k8s_cluster.run(
            "get", "podmonitor", name, "-n", namespace, "-o", "json", check=False).stdout or "null"), timeout=60)
        assert monitor["metadata"]["ownerReferences"][0]["name"] == name

        def scaled_object() -> dict[str, Any] | None:
            got = k8s_cluster.run("get", "scaledobject", name, "-n", namespace, "-o", "json", check=False)
            return json.loads(got.stdout) if got.returncode == 0 else None

        scaler = wait_for("the operator's ScaledObject", scaled_object, timeout=60)
        assert scaler["metadata"]["ownerReferences"][0]["name"] == name

        def ready_at(old_revision: str | None) -> dict[str, Any] | None:
            status: dict[str, Any] = k8s_cluster.get("sglangserver", name, "-n", namespace).get("status", {})
            ok = status.get("phase") == "Ready" and status.get("effective")
            return status if ok and status.get("revision") != old_revision else None

        first = wait_for(f"{name} Ready with status.effective", lambda: ready_at(None), timeout=120)
        # a spec update: kopf patches the object, the children roll, a kopf event is posted
        body["spec"]["env"].append({"name": "SGLANG_SIM_TIME_SCALE", "value": "20"})
        body["spec"]["autoscaling"] = {"mode": "External"}  # the operator's ScaledObject goes
        k8s_cluster.apply(copy.deepcopy(body), namespace=namespace)
        second = wait_for(f"{name} Ready at a new revision", lambda: ready_at(first["revision"]), timeout=120)
        assert second["revision"] != first["revision"] and second["effective"]
        wait_for("the ScaledObject deleted (autoscaling External)", lambda: scaled_object() is None, timeout=60)

        def operator_events() -> list[dict[str, Any]]:
            items = k8s_cluster.get("events", "-n", namespace, "--field-selector",
                                    f"involvedObject.name={name}")["items"]
            return [e for e in items if e["source"].get("component") in ("kopf", "sglang-operator")]

        # kopf posts its events from a background queue: wait for them (their 403s would be in the log)
        wait_for("an event posted by the operator", operator_events, timeout=60)
    except AssertionError:
        print("\n".join(line for line in op.log_text().splitlines() if "HTTP Request" not in line))
        print(json.dumps([(e["reason"], e["source"], e["message"][:80]) for e in k8s_cluster.get(
            "events", "-n", namespace)["items"]], indent=1))
        raise
    finally:
        op.stop()
    log = op.log_text()
    # a status 403, not the digits of a timestamp's milliseconds ("15:06:54,403")
    status_403 = re.compile(r"(?<![\d,.:])403(?!\d)")
    refused = [line for line in log.splitlines()
               if status_403.search(line) or "forbidden" in line.lower() or "Not enough permissions" in line]
    assert refused == [], "\n".join(refused)
