"""The control plane itself: nodes, version, CRD schema + CEL validation by the real API server."""

from __future__ import annotations

import json
import re
import uuid

import pytest

from e2e.build_k8s import committed_version
from e2e.conftest import K8sCluster, wait_for
from e2e.tests.objects import GPU, condition

pytestmark = pytest.mark.cluster


def test_kubectl_get_nodes_shows_ready_gpu_nodes(k8s_cluster: K8sCluster) -> None:
    table = k8s_cluster.run("get", "nodes").stdout
    nodes = k8s_cluster.get("nodes")["items"]
    gpu_nodes = [n for n in nodes if int(n["status"].get("capacity", {}).get(GPU, "0")) > 0]
    assert gpu_nodes, f"no node has {GPU} capacity:\n{table}"
    for n in gpu_nodes:
        ready = condition(n, "Ready")
        assert ready is not None and ready["status"] == "True", n["status"].get("conditions")
        row = next(line for line in table.splitlines() if line.split()[0] == n["metadata"]["name"])
        assert row.split()[1] == "Ready", row
    if k8s_cluster.local is not None:
        opts = k8s_cluster.local.nodes
        assert len(gpu_nodes) == opts.count
        for n in gpu_nodes:
            assert n["status"]["capacity"][GPU] == str(opts.gpus)
            assert n["status"]["allocatable"][GPU] == str(opts.gpus)
            assert n["metadata"]["labels"]["nvidia.com/gpu.product"] == opts.gpu_product
            lease = k8s_cluster.get("lease", "-n", "kube-node-lease", n["metadata"]["name"])
            assert lease["spec"]["holderIdentity"] == n["metadata"]["name"]


def test_kubectl_version_reports_real_server_version(k8s_cluster: K8sCluster) -> None:
    v = json.loads(k8s_cluster.run("version", "-o", "json").stdout)
    server = v["serverVersion"]["gitVersion"]
    assert re.fullmatch(r"v1\.\d+\.\d+(\+\S+)?", server), server
    if k8s_cluster.local is not None:
        assert server == committed_version()
        assert v["clientVersion"]["gitVersion"] == committed_version()
        assert v["serverVersion"]["gitTreeState"] == "clean"


def _crd(group: str) -> dict[str, object]:
    spec_schema = {
        "type": "object",
        "required": ["minReplicas", "maxReplicas"],
        "properties": {"minReplicas": {"type": "integer", "minimum": 0},
                       "maxReplicas": {"type": "integer"}},
        "x-kubernetes-validations": [{"rule": "self.minReplicas <= self.maxReplicas",
                                      "message": "minReplicas must not exceed maxReplicas"}],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {"group": group, "scope": "Namespaced",
                 "names": {"plural": "widgets", "singular": "widget", "kind": "Widget"},
                 "versions": [{"name": "v1", "served": True, "storage": True,
                               "schema": {"openAPIV3Schema": {"type": "object", "properties": {
                                   "spec": spec_schema}}}}]},
    }


def _widget(group: str, name: str, spec: dict[str, object]) -> str:
    return json.dumps({"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": name},
                       "spec": spec})


def test_crd_structural_schema_and_cel_rule(k8s_cluster: K8sCluster, namespace: str) -> None:
    group = f"e2e{uuid.uuid4().hex[:8]}.example.com"
    k8s_cluster.apply(_crd(group))
    try:
        k8s_cluster.run("wait", "--for=condition=Established", f"crd/widgets.{group}", "--timeout=30s")
        wait_for("Widget kind served", lambda: k8s_cluster.run(
            "get", f"widgets.{group}", "-n", namespace, check=False).returncode == 0, timeout=30)
        ok = k8s_cluster.run("apply", "-n", namespace, "-f", "-", "--validate=false",
                             input=_widget(group, "good", {"minReplicas": 1, "maxReplicas": 2, "extra": 1}))
        assert "created" in ok.stdout
        stored = k8s_cluster.get(f"widgets.{group}", "good", "-n", namespace)
        assert stored["spec"] == {"minReplicas": 1, "maxReplicas": 2}  # unknown field pruned

        bad = k8s_cluster.run("apply", "-n", namespace, "-f", "-", check=False,
                              input=_widget(group, "bad", {"minReplicas": 3, "maxReplicas": 2}))
        assert bad.returncode != 0
        assert 'The Widget "bad" is invalid' in bad.stderr, bad.stderr
        assert "minReplicas must not exceed maxReplicas" in bad.stderr, bad.stderr

        typed = k8s_cluster.run("apply", "-n", namespace, "-f", "-", check=False,
                                input=_widget(group, "typed", {"minReplicas": -1, "maxReplicas": "two"}))
        assert typed.returncode != 0
        assert "spec.maxReplicas in body must be of type integer" in typed.stderr, typed.stderr
        assert "spec.minReplicas in body should be greater than or equal to 0" in typed.stderr, typed.stderr
        assert k8s_cluster.run("get", f"widgets.{group}", "bad", "-n", namespace, check=False).returncode != 0
    finally:
        k8s_cluster.run("delete", "crd", f"widgets.{group}", "--wait=false", check=False)
