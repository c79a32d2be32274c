"""A restart is a non-event (issue 10): over 50 unchanged SGLangServers, a new operator process resumes every one and
writes nothing but its Lease, counted in the API server's audit log by the operator's own ServiceAccount; its
``/readyz`` answers 503 while it resumes and 200 only once every server was reconciled.
``bench/operator_footprint.py`` does the same over more servers and prints the time to resume them.
"""

from __future__ import annotations

import collections
import copy
import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e import audit
from e2e.conftest import K8sCluster, wait_for
from e2e.operator_proc import OperatorProcess
from e2e.tests.test_chart_rbac import token_kubeconfig

pytestmark = [pytest.mark.cluster, pytest.mark.local_cluster]  # the audit log is the local control plane's
ROOT = Path(__file__).resolve().parents[2]
COUNT = 50


def start(kubeconfig: Path, namespace: str, log: Path) -> OperatorProcess:
    op = OperatorProcess(kubeconfig, log, status_interval=1.0, sample_interval=None, args=[
        "--namespace", namespace, "--leader-elect", f"--leader-elect-resource-namespace={namespace}"])
    op.start(timeout=90)
    return op


def test_a_restart_over_unchanged_servers_writes_nothing(k8s_cluster: K8sCluster, namespace: str,
                                                         tmp_path: Path) -> None:
    assert k8s_cluster.local is not None
    log = k8s_cluster.local.audit_log
    k8s_cluster.run("apply", "--server-side", "-f", str(ROOT / "crds" / "sglangservers.yaml"))
    wait_for("the CRD Established", lambda: k8s_cluster.run(
        "wait", "--for=condition=Established", "crd/sglangservers.sglang-operator.io", check=False).returncode == 0)
    binding = f"restart-{namespace}"
    k8s_cluster.run("create", "serviceaccount", "operator", "-n", namespace)
    k8s_cluster.run("create", "clusterrolebinding", binding, "--clusterrole=cluster-admin",
                    f"--serviceaccount={namespace}:operator")
    user = f"system:serviceaccount:{namespace}:operator"
    try:
        token = k8s_cluster.run("create", "token", "operator", "-n", namespace, "--duration=1h").stdout.strip()
        kubeconfig = token_kubeconfig(k8s_cluster, token, tmp_path / "operator.kubeconfig")
        base: dict[str, Any] = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-known-good.yaml").read_text())
        base["spec"]["replicas"] = 0  # no pods: the figure is the operator's own
        items = []
        for i in range(COUNT):
            obj = copy.deepcopy(base)
            obj["metadata"] = {"name": f"restart-{i:03d}", "namespace": namespace}
            items.append(obj)
        op = start(kubeconfig, namespace, tmp_path / "operator-1.log")
        try:
            k8s_cluster.run("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                                  "items": items}))
            # reconciled (status.phase) and observed once (status.analysis: the observer's first look writes it);
            # stopped before its first look, a server would get it from the second process (a status patch, an event)
            wait_for(f"{COUNT} servers reconciled and observed", lambda: sum(
                bool((o.get("status") or {}).get("phase") and o["status"].get("analysis"))
                for o in k8s_cluster.get("sglangservers", "-n", namespace)["items"]) == COUNT, timeout=300, interval=2)
        finally:
            op.stop()
        offset = audit.size(log)
        op = start(kubeconfig, namespace, tmp_path / "operator-2.log")
        try:
            # /readyz: 200 "ok" only once the reconcile handler finished for all 50. The handler marks a server seen
            # in its finally clause, and kopf logs its success line right after it returns, without an await between
            answers, text, waited = op.wait_ready(timeout=180)
            resumed = text.count("Handler 'reconcile' succeeded")
            print(f"\n/readyz ok {waited:.1f} s after the restart; answers {answers}")
            assert answers[-1] == (200, f"ok: {COUNT} SGLangServers seen once"), answers
            assert resumed == COUNT, f"/readyz said ok when kopf had logged {resumed} of {COUNT} resumes"
            assert any(code == 503 and (body == "starting" or body.startswith("resuming: "))
                       for code, body in answers), answers
            wait_for("every server resumed", lambda: op.log_text().count("Handler 'reconcile' succeeded") >= COUNT,
                     timeout=180, interval=0.5)
            time.sleep(3)  # a few observer ticks over unchanged servers: no status patch, no event
        finally:
            op.stop()
        writes = [w for w in audit.writes(log, user, offset) if w.resource != "leases"]
        counts = collections.Counter(f"{w.verb} {w.resource}" for w in writes)
        print(f"\nrestart over {COUNT} unchanged servers: {len(writes)} writes other than the Lease {dict(counts)}")
        assert writes == [], dict(counts)
    finally:
        k8s_cluster.run("delete", "clusterrolebinding", binding, "--ignore-not-found", check=False)
