"""Benchmark: the operator's footprint over N SGLangServers, and what a restart writes (issue 10).

On a local control plane of its own (audit log on), the operator runs as it does from the chart
(``--leader-elect``) with a ServiceAccount token of its own, so the API server's audit log tells its requests
apart. It creates ``--count`` SGLangServers (the known-good sample; ``--replicas 0`` by default: no simulator,
the figure is the control loop's; ``--replicas 1`` runs one simulated pod each, scraped, sampled and probed),
waits until every one has a status, then:

1. steady state over ``--steady`` seconds: the operator's CPU (share of one core), resident memory (RSS and peak),
   and its API writes per second by verb and resource;
2. a restart (SIGINT, then a new process): the time until its ``/readyz`` reports every server seen once (200
   ``ok``), the time until kopf's log shows every server resumed, and every write the new process makes in that
   time plus ``--quiet`` seconds, other than its Lease (goal: 0).

    python bench/operator_footprint.py --count 100
    python bench/operator_footprint.py --count 20 --replicas 1 --steady 120
    python bench/operator_footprint.py --count 20 --fat --steady 30     # specs at the CRD's limits (api/bounds.py)

Prints the figures; exit status 0 either way (a benchmark, not a test).
"""

from __future__ import annotations

import argparse
import collections
import copy
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from bench.common import tear_down  # noqa: E402
from e2e import audit  # noqa: E402
from e2e.build_k8s import build  # noqa: E402
from e2e.cluster import Cluster, NodeOptions  # noqa: E402
from e2e.conftest import K8sCluster, wait_for  # noqa: E402
from e2e.operator_proc import OperatorProcess  # noqa: E402
from e2e.tests.test_chart_rbac import token_kubeconfig  # noqa: E402

NS, SA = "footprint", "operator"
USER = f"system:serviceaccount:{NS}:{SA}"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def memory_mib(pid: int) -> tuple[float, float]:
    """(VmRSS, VmHWM) in MiB."""
    vals = {k: int(v.split()[0]) / 1024 for k, v in (line.split(":", 1) for line in
                                                     Path(f"/proc/{pid}/status").read_text().splitlines())
            if k in ("VmRSS", "VmHWM")}
    return vals["VmRSS"], vals["VmHWM"]


def by_kind(writes: list[audit.Write]) -> str:
    counts = collections.Counter(f"{w.verb} {w.resource}" for w in writes)
    return ", ".join(f"{k}: {v}" for k, v in counts.most_common()) or "none"


def operator(kubeconfig: Path, log: Path) -> OperatorProcess:
    op = OperatorProcess(kubeconfig, log, status_interval=5.0, sample_interval=None, args=[
        "--leader-elect", f"--leader-elect-resource-namespace={NS}", "--leader-elect-resource-name=footprint"])
    op.start(timeout=120)
    return op


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=100)
    parser.add_argument("--replicas", type=int, default=0, choices=[0, 1])
    parser.add_argument("--steady", type=float, default=60.0, help="seconds of steady state measured")
    parser.add_argument("--quiet", type=float, default=15.0, help="seconds watched after the restart resumed all")
    parser.add_argument("--fat", action="store_true",
                        help="specs at the CRD's limits: env 32 x 1 024 characters, podAnnotations 16 x 512, "
                             "podLabels 8, rollback.probe.prompt 8 192 characters")
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="sglang-footprint-"))
    gpus = 2 * args.count + 8  # the fake nodes' CPU and memory cover the pods' default requests (4 CPU, 16Gi a GPU)
    cluster = Cluster(build(), NodeOptions(count=2, gpus=gpus, cpu=str(4 * gpus), memory=f"{16 * gpus}Gi"))
    cluster.start()
    k8s = K8sCluster(cluster.kubeconfig, cluster.kubectl, cluster)
    op: OperatorProcess | None = None
    try:
        k8s.run("apply", "--server-side", "-f", str(ROOT / "crds" / "sglangservers.yaml"))
        wait_for("the CRD", lambda: k8s.run("wait", "--for=condition=Established",
                                            "crd/sglangservers.sglang-operator.io", check=False).returncode == 0)
        k8s.run("create", "namespace", NS)
        k8s.run("create", "serviceaccount", SA, "-n", NS)
        k8s.run("create", "clusterrolebinding", "footprint", "--clusterrole=cluster-admin",
                f"--serviceaccount={NS}:{SA}")
        token = k8s.run("create", "token", SA, "-n", NS, "--duration=2h").stdout.strip()
        kubeconfig = token_kubeconfig(k8s, token, work / "operator.kubeconfig")
        op = operator(kubeconfig, work / "operator-1.log")

        base: dict[str, Any] = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-known-good.yaml").read_text())
        base["spec"]["replicas"] = args.replicas
        base["spec"]["env"] = [{"name": "SGLANG_SIM_LOAD_SECONDS", "value": "1"}]
        if args.fat:
            base["spec"]["env"] += [{"name": f"FAT_{i:02d}", "value": "x" * 1024} for i in range(31)]
            base["spec"]["podAnnotations"] = {f"example.com/fat-{i:02d}": "y" * 512 for i in range(16)}
            base["spec"]["podLabels"] = {f"example.com/fat-{i}": "z" * 63 for i in range(8)}
            base["spec"].setdefault("rollback", {}).setdefault("probe", {})["prompt"] = "p" * 8192
            print(f"each spec {len(json.dumps(base['spec']))} bytes of JSON")
        items = []
        for i in range(args.count):
            obj = copy.deepcopy(base)
            obj["metadata"] = {"name": f"fp-{i:04d}", "namespace": NS}
            items.append(obj)
        t0 = time.monotonic()
        for start in range(0, args.count, 10):  # 10 at a time: pods start as they come (2 cores)
            k8s.run("apply", "-f", "-", input=json.dumps({"apiVersion": "v1", "kind": "List",
                                                          "items": items[start:start + 10]}), timeout=300)

        def settled() -> bool:
            got = k8s.get("sglangservers", "-n", NS)["items"]
            want = "Ready" if args.replicas else None
            return len(got) == args.count and all(  # reconciled, observed once (status.analysis), Ready if pods
                (o.get("status") or {}).get("phase") and o["status"].get("analysis")
                and (want is None or o["status"]["phase"] == want) for o in got)

        wait_for(f"{args.count} servers reconciled and observed", settled, timeout=600, interval=2)
        print(f"{args.count} SGLangServers (replicas {args.replicas}) settled in {time.monotonic() - t0:.0f} s")

        assert op.proc is not None
        pid = op.proc.pid
        offset, cpu0, w0 = audit.size(cluster.audit_log), cpu_seconds(pid), time.monotonic()
        time.sleep(args.steady)
        wall = time.monotonic() - w0
        cpu = cpu_seconds(pid) - cpu0
        rss, hwm = memory_mib(pid)
        steady = [w for w in audit.writes(cluster.audit_log, USER, offset) if w.resource != "leases"]
        print(f"steady state over {wall:.0f} s: CPU {100 * cpu / wall:.1f} % of one core, RSS {rss:.0f} MiB "
              f"(peak {hwm:.0f} MiB); writes/s other than the Lease {len(steady) / wall:.2f} ({by_kind(steady)})")

        op.stop()
        offset = audit.size(cluster.audit_log)
        t1 = time.monotonic()
        op = operator(kubeconfig, work / "operator-2.log")

        started = time.monotonic() - t1
        answers, text, waited = op.wait_ready(timeout=600, interval=0.1)
        ready = started + waited
        logged = text.count("Handler 'reconcile' succeeded")

        def resumed() -> bool:
            return op is not None and op.log_text().count("Handler 'reconcile' succeeded") >= args.count

        wait_for("every server resumed", resumed, timeout=600, interval=0.1)
        resume = time.monotonic() - t1
        time.sleep(args.quiet)
        after = [w for w in audit.writes(cluster.audit_log, USER, offset) if w.resource != "leases"]
        print(f"restart: /readyz said {answers[-1][1]!r} {ready:.1f} s after the new process started (kopf had "
              f"logged {logged} resumes then); kopf's log showed all {args.count} resumed after {resume:.1f} s; "
              f"writes other than the Lease in that time + {args.quiet:.0f} s: {len(after)} ({by_kind(after)}) "
              f"(goal 0)")
    finally:
        tear_down(op, cluster, work)


if __name__ == "__main__":
    main()
