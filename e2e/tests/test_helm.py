"""The chart installed for real with the project's helm, on a local control plane of its own (the CRD changes
here must not reach the other tests' cluster):

- ``helm install`` (defaults: cluster-wide, two replicas with leader election, the CRD as a release object):
  NOTES.txt says where the sample, metrics and dashboard are; the two operator pods (the fake kubelet runs
  a placeholder for the image) become available, spread over the two nodes;
- the operator then runs on the test host with exactly the chart ServiceAccount's token and the installed
  Deployment's arguments (its Lease included), and the published scenario passes: the known-good sample is
  promoted, the regressed one applied over it is rolled back automatically; not one 403;
- ``helm upgrade`` with a values change rolls the Deployment; ``helm upgrade`` of a chart whose CRD changed
  brings the change to the cluster;
- ``helm uninstall`` removes the operator's objects and keeps the CRD and the SGLangServer with its children.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.cluster import Cluster, NodeOptions
from e2e.conftest import K8sCluster, local_bin_dir, wait_for
from e2e.operator_proc import OperatorProcess
from e2e.tests.test_chart_rbac import token_kubeconfig
from e2e.tests.test_rollback import BAD, NAME, cond, promoted, sample, wait_status
from e2e.tools import require_helm

pytestmark = [pytest.mark.cluster, pytest.mark.local_cluster]
ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "sglang-operator"
RELEASE, RELEASE_NS, ML = "rel", "sglang-operator", "ml"
FULLNAME = f"{RELEASE}-sglang-operator"
CRD = "sglangservers.sglang-operator.io"


@pytest.fixture(scope="module")
def k8s() -> Iterator[K8sCluster]:
    cluster = Cluster(local_bin_dir(), NodeOptions(backoff_base=2.0))
    cluster.start()
    try:
        yield K8sCluster(cluster.kubeconfig, cluster.kubectl, cluster)
    finally:
        cluster.stop()


def helm(k8s: K8sCluster, *args: str, timeout: float = 300) -> str:
    proc = subprocess.run([str(require_helm()), *args, "--kubeconfig", str(k8s.kubeconfig)], capture_output=True,
                          text=True, timeout=timeout, env={**os.environ, "HELM_CACHE_HOME": str(k8s.kubeconfig.parent
                          / "helm-cache"), "HELM_CONFIG_HOME": str(k8s.kubeconfig.parent / "helm-config"),
                          "HELM_DATA_HOME": str(k8s.kubeconfig.parent / "helm-data")})
    assert proc.returncode == 0, f"helm {' '.join(args)}:\n{proc.stdout}\n{proc.stderr}"
    return proc.stdout


def available(k8s: K8sCluster, generation: int | None = None) -> dict[str, Any] | None:
    dep: dict[str, Any] = k8s.get("deployment", FULLNAME, "-n", RELEASE_NS)
    st = dep.get("status", {})
    done = (st.get("observedGeneration") == dep["metadata"]["generation"] and st.get("updatedReplicas") == 2
            and st.get("availableReplicas") == 2 and st.get("replicas") == 2)
    return dep if done and (generation is None or dep["metadata"]["generation"] > generation) else None


def chart_operator(k8s: K8sCluster, dep: dict[str, Any], log: Path) -> OperatorProcess:
    """The operator on the test host as the chart's ServiceAccount, with the installed container's arguments
    (the liveness and metrics ports replaced by free ones)."""
    pod = dep["spec"]["template"]["spec"]
    token = k8s.run("create", "token", pod["serviceAccountName"], "-n", RELEASE_NS, "--duration=1h").stdout.strip()
    kubeconfig = token_kubeconfig(k8s, token, log.parent / "chart-sa.kubeconfig")
    args = [a for a in pod["containers"][0]["args"]  # the ports are the OperatorProcess's own (two may run at once)
            if not a.startswith(("--liveness=", "--metrics-port=", "--readiness-port="))]
    assert f"--leader-elect-resource-namespace={RELEASE_NS}" in args
    op = OperatorProcess(kubeconfig, log, status_interval=1.0, sample_interval=None, args=args)
    op.start()
    return op


def test_install_upgrade_uninstall_with_the_published_scenario(k8s: K8sCluster, tmp_path: Path) -> None:
    notes = helm(k8s, "install", RELEASE, str(CHART), "-n", RELEASE_NS, "--create-namespace", "--wait",
                 "--timeout", "180s")
    for line in ("kubectl apply -n <namespace> -f samples/qwen3.6-27b-known-good.yaml",
                 f"Service {FULLNAME}-metrics, port 9808", "deploy/grafana/sglang-operator.json",
                 "KEEPS the CRD", f"kubectl get lease {FULLNAME} -n {RELEASE_NS}"):
        assert line in notes, notes
    crd = k8s.get("crd", CRD)
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    assert crd["metadata"]["annotations"]["meta.helm.sh/release-name"] == RELEASE
    dep = wait_for("two operator pods available", lambda: available(k8s), timeout=120)
    pods = k8s.get("pods", "-n", RELEASE_NS, "-l", f"app.kubernetes.io/instance={RELEASE}")["items"]
    assert len({p["spec"]["nodeName"] for p in pods}) == 2, "preferred anti-affinity spreads the replicas"
    assert k8s.get("pdb", FULLNAME, "-n", RELEASE_NS)["spec"]["minAvailable"] == 1

    k8s.run("create", "namespace", ML)
    op = chart_operator(k8s, dep, tmp_path / "operator.log")
    try:
        wait_for("the operator holding the chart's Lease", lambda: (k8s.get("lease", FULLNAME, "-n", RELEASE_NS)
                 .get("spec", {}).get("holderIdentity")), timeout=30)
        good = promoted(k8s, ML)
        k8s.apply(sample(BAD), ML)
        wait_status(k8s, ML, "the regressed revision applied", lambda s: s.get("revision") != good["revision"],
                    timeout=30)
        started = time.monotonic()
        wait_status(k8s, ML, "the regressed revision rolled back", lambda s: s.get("revision") == good["revision"]
                    and cond(s, "Degraded").get("reason") == "RolledBack", timeout=180)
        print(f"\nhelm install: published scenario rolled back {time.monotonic() - started:.0f} s after the "
              "regressed revision was applied, as the chart's ServiceAccount")

        # a values change rolls the Deployment (RollingUpdate: two available all along)
        generation = dep["metadata"]["generation"]
        helm(k8s, "upgrade", RELEASE, str(CHART), "-n", RELEASE_NS, "--reuse-values", "--set", "verbose=true",
             "--wait", "--timeout", "180s")
        rolled = wait_for("the upgraded Deployment available", lambda: available(k8s, generation), timeout=120)
        assert "--verbose" in rolled["spec"]["template"]["spec"]["containers"][0]["args"]
        assert rolled["spec"]["strategy"]["type"] == "RollingUpdate"

        # a chart whose CRD changed: helm upgrade brings the change to the cluster
        changed = tmp_path / "chart"
        shutil.copytree(CHART, changed)
        crd_file = changed / "files" / "crds" / "sglangservers.yaml"
        body = yaml.safe_load(crd_file.read_text())
        body["spec"]["names"]["shortNames"] = [*body["spec"]["names"].get("shortNames", []), "sglsnext"]
        crd_file.write_text(yaml.safe_dump(body, sort_keys=False))
        helm(k8s, "upgrade", RELEASE, str(changed), "-n", RELEASE_NS, "--reuse-values", "--wait", "--timeout", "180s")
        assert "sglsnext" in k8s.get("crd", CRD)["spec"]["names"]["shortNames"]
        wait_for("the new short name served", lambda: k8s.run("get", "sglsnext", "-n", ML, check=False).returncode
                 == 0, timeout=30)
    except AssertionError:
        print("\n".join(line for line in op.log_tail(80).splitlines() if "HTTP Request" not in line))
        raise
    finally:
        op.stop()
    refused = [line for line in op.log_text().splitlines()
               if " 403" in line or "forbidden" in line.lower() or "Not enough permissions" in line]
    assert refused == [], "\n".join(refused)

    # uninstall: the operator's objects go; the CRD and the users' SGLangServers (and their children) stay
    helm(k8s, "uninstall", RELEASE, "-n", RELEASE_NS, "--wait", "--timeout", "120s")
    assert k8s.run("get", "deployment", FULLNAME, "-n", RELEASE_NS, check=False).returncode != 0
    assert k8s.run("get", "clusterrole", f"{FULLNAME}-cluster", check=False).returncode != 0
    assert k8s.get("crd", CRD)["metadata"]["name"] == CRD
    server = k8s.get("sglangserver", NAME, "-n", ML)
    assert server["status"]["revision"] == good["revision"]
    try:  # the stable revision keeps serving without the operator (its pod may still be starting after the rollback)
        wait_for("the known-good server still available", lambda: json.loads(k8s.run(
            "get", "deployment", NAME, "-n", ML, "-o", "json").stdout)["status"].get("availableReplicas") == 1,
            timeout=90)
    except AssertionError:
        print(json.dumps([p["status"] for p in k8s.get("pods", "-n", ML)["items"]], indent=1)[:4000])
        raise
