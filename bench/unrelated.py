"""Benchmark: what objects the operator does not manage cost it (issue 16 item 5; goal: a ratio ≤ 1.1).

On a local control plane of its own, the operator runs over ``--servers`` SGLangServers (``replicas: 0``: their
Deployments and Services exist, no pod) and is measured for ``--minutes``: CPU (share of one core) and resident
memory (RSS at the end, peak). Then ``--pods`` unrelated pods and ``--services`` unrelated Services are created and
a new operator process is measured the same way. The pods are bound (``spec.nodeName``) to a Node object no kubelet
runs, which the node controller taints ``not-ready`` / ``unreachable``; they tolerate every taint, so none is
evicted, and none runs. The Services are headless (no ClusterIP to allocate; the operator's cost does not depend on
it). Neither carries ``app.kubernetes.io/managed-by=sglang-operator``, so with the server-side label selector of
``control/handlers.py: watch_only_managed`` the API server never sends them to the operator.

    python bench/unrelated.py                                     # 5 000 pods, 2 000 Services, 10 min each
    python bench/unrelated.py --pods 50 --services 20 --minutes 0.5   # a smoke run

Prints the figures and the ratios (with / without); exit status 0 either way (a benchmark, not a test).
"""

from __future__ import annotations

import argparse
import copy
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

from operator_footprint import cpu_seconds, memory_mib  # noqa: E402

from e2e.build_k8s import build  # noqa: E402
from e2e.cluster import Cluster, NodeOptions  # noqa: E402
from e2e.conftest import K8sCluster, wait_for  # noqa: E402
from e2e.operator_proc import OperatorProcess  # noqa: E402

NS, OTHER = "unrelated-ops", "unrelated"
NODE = "no-kubelet"
CHUNK = 250  # objects per kubectl apply


def node() -> dict[str, Any]:
    """A Node object no kubelet runs (it stays NotReady; the node controller taints it)."""
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": NODE, "labels": {"bench": OTHER}},
            "spec": {}}


def pod(i: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": f"other-{i:05d}", "namespace": OTHER,
                         "labels": {"app.kubernetes.io/name": "other", "app.kubernetes.io/managed-by": "helm"}},
            "spec": {"nodeName": NODE, "tolerations": [{"operator": "Exists"}],  # every taint: never evicted
                     "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]}}


def service(i: int) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Service",
            "metadata": {"name": f"other-{i:05d}", "namespace": OTHER, "labels": {"app.kubernetes.io/name": "other"}},
            "spec": {"clusterIP": "None", "selector": {"app.kubernetes.io/name": "other"},
                     "ports": [{"name": "http", "port": 80}]}}


def apply(k8s: K8sCluster, items: list[dict[str, Any]]) -> None:
    for start in range(0, len(items), CHUNK):
        k8s.run("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                      "items": items[start:start + CHUNK]}), timeout=600)


def measure(kubeconfig: Path, log: Path, minutes: float, settle: float) -> tuple[float, float, float]:
    """A new operator process: started, left ``settle`` s to list and resume, then measured over ``minutes``:
    (CPU share of one core, RSS MiB at the end, peak RSS MiB)."""
    op = OperatorProcess(kubeconfig, log, status_interval=5.0, sample_interval=None)
    op.start(timeout=120)
    try:
        op.wait_ready(timeout=300, interval=0.2)
        time.sleep(settle)
        assert op.proc is not None
        pid = op.proc.pid
        cpu0, wall0 = cpu_seconds(pid), time.monotonic()
        time.sleep(minutes * 60)
        wall = time.monotonic() - wall0
        cpu = cpu_seconds(pid) - cpu0
        rss, hwm = memory_mib(pid)
        return cpu / wall, rss, hwm
    finally:
        op.stop()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pods", type=int, default=5000, help="unrelated pods")
    parser.add_argument("--services", type=int, default=2000, help="unrelated Services")
    parser.add_argument("--servers", type=int, default=2, help="SGLangServers the operator manages (replicas 0)")
    parser.add_argument("--minutes", type=float, default=10.0, help="minutes each run is measured")
    parser.add_argument("--settle", type=float, default=15.0, help="seconds after /readyz before measuring")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sglang-unrelated-"))
    cluster = Cluster(build(), NodeOptions(count=1, gpus=8))
    cluster.start()
    k8s = K8sCluster(cluster.kubeconfig, cluster.kubectl, cluster)
    try:
        k8s.run("apply", "--server-side", "-f", str(ROOT / "crds" / "sglangservers.yaml"))
        wait_for("the CRD", lambda: k8s.run("wait", "--for=condition=Established",
                                            "crd/sglangservers.sglang-operator.io", check=False).returncode == 0)
        for ns in (NS, OTHER):
            k8s.run("create", "namespace", ns)
        base: dict[str, Any] = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-known-good.yaml").read_text())
        base["spec"]["replicas"] = 0
        servers = []
        for i in range(args.servers):
            obj = copy.deepcopy(base)
            obj["metadata"] = {"name": f"managed-{i:03d}", "namespace": NS}
            servers.append(obj)
        if servers:
            apply(k8s, servers)

        kubeconfig = Path(cluster.kubeconfig)
        without = measure(kubeconfig, work / "operator-without.log", args.minutes, args.settle)
        managed = k8s.get("services", "-n", NS, "-l", "app.kubernetes.io/managed-by=sglang-operator")["items"]
        print(f"without: {args.servers} SGLangServers ({len(managed)} managed Services): CPU {100 * without[0]:.2f} % "
              f"of one core, RSS {without[1]:.0f} MiB (peak {without[2]:.0f} MiB) over {args.minutes:g} min")

        t0 = time.monotonic()
        k8s.run("apply", "-f", "-", input=json.dumps(node()))
        apply(k8s, [pod(i) for i in range(args.pods)])
        apply(k8s, [service(i) for i in range(args.services)])
        counts = {kind: len(k8s.get(kind, "-n", OTHER)["items"]) for kind in ("pods", "services")}
        print(f"created {counts['pods']} unrelated pods on node {NODE} (no kubelet) and {counts['services']} "
              f"unrelated Services in {time.monotonic() - t0:.0f} s")

        with_ = measure(kubeconfig, work / "operator-with.log", args.minutes, args.settle)
        print(f"with:    CPU {100 * with_[0]:.2f} % of one core, RSS {with_[1]:.0f} MiB (peak {with_[2]:.0f} MiB)")
        cpu_ratio = with_[0] / without[0] if without[0] > 0 else float("nan")
        print(f"ratio with / without: RSS {with_[1] / without[1]:.3f}, peak RSS {with_[2] / without[2]:.3f}, "
              f"CPU {cpu_ratio:.3f} (goal ≤ 1.1)")
    finally:
        cluster.stop()
        subprocess.run(["rm", "-rf", str(work)], check=False)


if __name__ == "__main__":
    main()
