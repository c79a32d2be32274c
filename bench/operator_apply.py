"""Benchmark: apply → Deployment created, for N SGLangServers (issue 3; goal p99 < 250 ms).

Starts the local control plane (or uses ``$KUBECONFIG`` with ``E2E_USE_EXISTING_CLUSTER=1``), installs the
CRD, runs the operator as a child process, then creates ``--count`` SGLangServers (the known-good sample,
``replicas: 0`` so no simulator starts and the figure is the operator's own latency), one after another or
at ``--rate`` per second. On a 2-core machine the whole control plane shares the CPU with the operator, so
open-loop rates above ~5/s measure the API server's saturation rather than the operator.
A watch on Deployments timestamps each ADDED event; latency = ADDED arrival − create call start.

    python bench/operator_apply.py --count 200            # open loop: 5 creations per second
    python bench/operator_apply.py --count 200 --rate 0   # closed loop: one after another

Prints p50 / p90 / p99 / max in milliseconds, and the operator's CPU seconds over the run.
"""

from __future__ import annotations

import argparse
import copy
import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config, watch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from e2e.build_k8s import build  # noqa: E402
from e2e.cluster import Cluster, NodeOptions  # noqa: E402
from e2e.operator_proc import OperatorProcess  # noqa: E402
from sglang_operator.api import GROUP, PLURAL, VERSION  # noqa: E402


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(kubeconfig: Path, count: int, rate: float, namespace: str) -> None:
    config.load_kube_config(str(kubeconfig))
    core, apps, custom = client.CoreV1Api(), client.AppsV1Api(), client.CustomObjectsApi()
    core.create_namespace({"metadata": {"name": namespace}})
    seen: dict[str, float] = {}
    stop = threading.Event()
    arrived = threading.Condition()

    def watcher() -> None:
        rv = apps.list_namespaced_deployment(namespace).metadata.resource_version
        while not stop.is_set():  # a watch may be closed by the server: resume from the last resourceVersion
            w = watch.Watch()
            try:
                for ev in w.stream(apps.list_namespaced_deployment, namespace, timeout_seconds=60,
                                   resource_version=rv):
                    rv = ev["object"].metadata.resource_version
                    if ev["type"] == "ADDED":
                        with arrived:
                            seen.setdefault(ev["object"].metadata.name, time.monotonic())
                            arrived.notify_all()
                    if stop.is_set():
                        w.stop()
            except Exception as exc:
                print(f"watch ended: {type(exc).__name__}; re-watching", file=sys.stderr)

    thread = threading.Thread(target=watcher, daemon=True)
    thread.start()
    time.sleep(1.0)
    base: dict[str, Any] = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-known-good.yaml").read_text())
    base["spec"]["replicas"] = 0
    started: dict[str, float] = {}
    t0 = time.monotonic()
    for i in range(count):
        obj = copy.deepcopy(base)
        name = f"bench-{i:04d}"
        obj["metadata"] = {"name": name, "namespace": namespace}
        if rate > 0:
            due = t0 + i / rate
            if (delay := due - time.monotonic()) > 0:
                time.sleep(delay)
        started[name] = time.monotonic()
        custom.create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, obj)
        if rate <= 0:  # closed loop: the next one once this one's Deployment exists
            with arrived:
                arrived.wait_for(lambda n=name: n in seen, timeout=30)
    deadline = time.monotonic() + 120
    while len(seen) < count and time.monotonic() < deadline:
        time.sleep(0.2)
    stop.set()
    lat = [(seen[n] - started[n]) * 1000 for n in started if n in seen]
    missing = count - len(lat)
    if os.environ.get("BENCH_TRACE"):
        print("latency by creation order (ms):", [round((seen[n] - started[n]) * 1000) for n in started if n in seen])
    how = f"at {rate}/s" if rate > 0 else "one after another (closed loop)"
    print(f"created {count} SGLangServers {how}; Deployments seen: {len(lat)} (missing {missing})")
    if lat:
        print(f"apply -> Deployment created (ms): p50 {statistics.median(lat):.0f}  p90 {percentile(lat, .9):.0f}  "
              f"p99 {percentile(lat, .99):.0f}  max {max(lat):.0f}  (goal p99 < 250)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=200)
    parser.add_argument("--rate", type=float, default=5.0,
                        help="creations per second (default 5); 0 = closed loop, one at a time")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sglang-bench-"))
    cluster = None
    if os.environ.get("E2E_USE_EXISTING_CLUSTER") == "1":
        kubeconfig = Path(os.environ["KUBECONFIG"])
    else:
        cluster = Cluster(build(), NodeOptions())
        cluster.start()
        kubeconfig = cluster.kubeconfig
    interval = float(os.environ.get("SGLANG_OPERATOR_STATUS_INTERVAL", "5"))
    op = OperatorProcess(kubeconfig, work / "operator.log", status_interval=interval)
    try:
        import subprocess

        kubectl = [str(cluster.kubectl) if cluster else "kubectl", f"--kubeconfig={kubeconfig}"]
        subprocess.run([*kubectl, "apply", "--server-side", "-f", str(ROOT / "crds" / "sglangservers.yaml")],
                       check=True, capture_output=True)
        subprocess.run([*kubectl, "wait", "--for=condition=Established", "crd/sglangservers.sglang-operator.io"],
                       check=True, capture_output=True)
        op.start()
        assert op.proc is not None
        cpu0 = cpu_seconds(op.proc.pid)
        t0 = time.monotonic()
        run(kubeconfig, args.count, args.rate, f"bench-{int(time.time())}")
        print(f"operator CPU: {cpu_seconds(op.proc.pid) - cpu0:.1f} s over {time.monotonic() - t0:.1f} s wall")
    finally:
        op.stop()
        if cluster is not None:
            cluster.stop()


if __name__ == "__main__":
    main()
