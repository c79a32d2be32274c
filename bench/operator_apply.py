"""Benchmark: apply → Deployment created for N SGLangServers, the operator's API requests per server, and the
floor: a plain client doing the same writes at the same rate (issue 3; issue 10 item 3: ratio ≤ 1.5).

On a local control plane of its own (audit log on, reads of ServiceAccount users logged too:
``Cluster(audit_reads=True)``; or ``$KUBECONFIG`` with ``E2E_USE_EXISTING_CLUSTER=1``, then without the request
table), for each ``--rate``:

1. the operator (``--leader-elect``, as the chart runs it, with a ServiceAccount token of its own so the audit log
   tells its requests apart, watching one namespace of this rate) and ``--count`` SGLangServers created there
   at that rate, open loop (the known-good sample, ``replicas: 0``: no pod starts, the figure is the operator's).
   A watch on Deployments timestamps each ADDED event; latency = ADDED arrival − create call start. Then the
   operator stops;
2. the floor, in another namespace the operator does not watch: per server, create the SGLangServer, then every
   write the operator makes for it (the rows of the table below) — server-side apply of the rendered Deployment and
   Service, create its ControllerRevision, the reconcile handler's status patch and Event, kopf's annotation patch,
   then, at the point of the observer's interval where the operator first observes that server
   (:func:`sglang_operator.control.observer.offset_in_interval`), the observer's status patch and its WarmingUp
   Event — at the same rate, as a ServiceAccount of its own (the operator's API Priority and Fairness level; a cluster
   admin's requests are exempt); latency the same way. The floor is the API server's own time for the operator's
   traffic; the ratio is what the operator adds to it.

Prints per rate: operator and floor p50/p99 (ms), the ratio operator p99 ÷ floor p99 (goal ≤ 1.5), Deployments
present 120 s after the last create, the operator's CPU, and its requests per server by verb and resource (kopf's
own included; watches and the Lease counted over the phase, divided like the rest) with how many the API server
refused and its own time for them (audit ``requestReceivedTimestamp`` → ``stageTimestamp``: queueing in the operator
shows as latency the API server did not spend). ``BENCH_KEEP_AUDIT=PREFIX`` keeps the audit log of each rate as
``PREFIX-<rate>.log``; ``BENCH_TRACE=1`` prints every latency in creation order.

    python bench/operator_apply.py                       # 500 servers at 5/s and at 20/s
    python bench/operator_apply.py --count 200 --rate 20

Exit status 0 either way (a benchmark, not a test).
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import copy
import datetime as dt
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config, watch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from e2e import audit  # noqa: E402
from e2e.build_k8s import build  # noqa: E402
from e2e.cluster import Cluster, NodeOptions  # noqa: E402
from e2e.conftest import K8sCluster  # noqa: E402
from e2e.operator_proc import OperatorProcess  # noqa: E402
from e2e.tests.test_chart_rbac import token_kubeconfig  # noqa: E402
from sglang_operator import builders  # noqa: E402
from sglang_operator.api import GROUP, PLURAL, VERSION  # noqa: E402
from sglang_operator.api.server import parse  # noqa: E402
from sglang_operator.api.status import SGLangServerStatus  # noqa: E402
from sglang_operator.builders.revision import controller_revision  # noqa: E402
from sglang_operator.decisions import status as st  # noqa: E402

SA_NS, SA, FLOOR_SA = "apply-bench", "operator", "floor"
USER, FLOOR_USER = f"system:serviceaccount:{SA_NS}:{SA}", f"system:serviceaccount:{SA_NS}:{FLOOR_SA}"
ADMIN_KUBECONFIG = ""  # set in main(): the cluster admin's (creates the SGLangServers, as a user would)
OBSERVER_INTERVAL = float(os.environ.get("SGLANG_OPERATOR_STATUS_INTERVAL", "5"))  # seconds, the operator's too
WAIT_AFTER = 120.0  # seconds after the last create until Deployments still missing count as missing


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class DeploymentWatch:
    """Timestamps (time.monotonic) of the first ADDED event of each Deployment in one namespace."""

    def __init__(self, namespace: str) -> None:
        self.namespace = namespace
        self.seen: dict[str, float] = {}
        self._stop = threading.Event()
        self._apps = client.AppsV1Api()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        time.sleep(1.0)

    def _run(self) -> None:
        rv = self._apps.list_namespaced_deployment(self.namespace).metadata.resource_version
        while not self._stop.is_set():  # a watch may be closed by the server: resume from the last resourceVersion
            w = watch.Watch()
            try:
                for ev in w.stream(self._apps.list_namespaced_deployment, self.namespace, timeout_seconds=60,
                                   resource_version=rv):
                    rv = ev["object"].metadata.resource_version
                    if ev["type"] == "ADDED":
                        self.seen.setdefault(ev["object"].metadata.name, time.monotonic())
                    if self._stop.is_set():
                        w.stop()
            except Exception as exc:
                print(f"watch ended: {type(exc).__name__}; re-watching", file=sys.stderr)

    def wait_all(self, names: list[str], timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while any(n not in self.seen for n in names) and time.monotonic() < deadline:
            time.sleep(0.2)
        self._stop.set()


@dataclass
class Phase:
    """One phase's figures: latencies in ms, Deployments present, and the operator's requests (empty for the
    floor)."""

    latencies: list[float]
    present: int
    count: int
    requests: list[audit.Write] = field(default_factory=list)
    cpu: float = 0.0
    wall: float = 0.0

    def line(self, who: str) -> str:
        lat = self.latencies
        if not lat:
            return f"{who}: no Deployment seen"
        return (f"{who}: p50 {statistics.median(lat):.0f} ms  p99 {percentile(lat, .99):.0f} ms  "
                f"max {max(lat):.0f} ms; Deployments present {self.present}/{self.count}")


SAMPLE: dict[str, Any] = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-known-good.yaml").read_text())
SAMPLE["spec"]["replicas"] = 0


def sample(name: str, namespace: str) -> dict[str, Any]:
    obj = copy.deepcopy(SAMPLE)
    obj["metadata"] = {"name": name, "namespace": namespace}
    return obj


async def open_loop(count: int, rate: float, one: Any) -> dict[str, float]:
    """Start ``one(i)`` (a coroutine function) for i in 0..count-1 at ``rate`` per second, each as its own task
    so a slow answer never delays the schedule; returns name → start time (time.monotonic) as ``one`` reports."""
    started: dict[str, float] = {}
    tasks = []
    t0 = time.monotonic()
    for i in range(count):
        if (delay := t0 + i / rate - time.monotonic()) > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one(i, started)))
    results = await asyncio.gather(*tasks, return_exceptions=True)
    errors = [r for r in results if isinstance(r, BaseException)]
    if errors:
        print(f"  {len(errors)} of {count} failed, e.g. {errors[0]!r}", file=sys.stderr)
    return started


async def create_servers(namespace: str, count: int, rate: float) -> dict[str, float]:
    from lightkube import AsyncClient

    from sglang_operator.io.kube import sglangserver_resource

    kube = AsyncClient()
    res = sglangserver_resource()

    async def one(i: int, started: dict[str, float]) -> None:
        name = f"bench-{i:04d}"
        started[name] = time.monotonic()
        await kube.create(res.from_dict(sample(name, namespace)))

    try:
        return await open_loop(count, rate, one)
    finally:
        await kube.close()


async def floor_writes(namespace: str, count: int, rate: float) -> dict[str, float]:
    """Per server: create it, then the operator's writes for it (apply Deployment and Service, create its
    ControllerRevision, patch its status, post an Event, kopf's annotation patch; one observer interval on, the
    observer's status patch and Event), through the operator's own client functions."""
    from lightkube import AsyncClient, KubeConfig
    from lightkube.types import PatchType

    from sglang_operator.control.observer import offset_in_interval
    from sglang_operator.decisions.conditions import condition
    from sglang_operator.io import kube, kube_write
    from sglang_operator.io import revisions as ledger_api
    from sglang_operator.io.kube import sglangserver_resource

    kube.reset_client()  # the process-wide client of an earlier phase belongs to another event loop
    creator = AsyncClient(KubeConfig.from_file(ADMIN_KUBECONFIG))  # the user; the writes: $KUBECONFIG, the floor SA
    kopf = AsyncClient()  # kopf's own client ($KUBECONFIG, the floor SA): the operator's is private to its io writers
    res = sglangserver_resource()
    servers = [parse(sample(f"floor-{i:04d}", namespace)) for i in range(count)]
    renders = [builders.render(s) for s in servers]  # rendering is not the API server's work: done ahead

    async def one(i: int, started: dict[str, float]) -> None:
        server, rendered = servers[i], renders[i]
        name = server.name
        started[name] = time.monotonic()
        created = (await creator.create(res.from_dict(sample(name, namespace)))).to_dict()
        for child in (rendered.workload, rendered.service):
            await kube_write.apply(builders.adopt(child, created))
        image = str(builders.pod_templates(rendered.workload)[0]["spec"]["containers"][0]["image"])
        spec = dict(created["spec"])
        await ledger_api.create_revision(builders.adopt(controller_revision(
            name, namespace, rendered.revision, 1, spec, rendered.command.command_line,
            str(rendered.command.version), image), created))
        now = dt.datetime.now(dt.UTC)
        entry = st.ledger_entry(rendered.revision, 1, rendered.command.command_line,
                                builders.summary(server, rendered), spec, now)
        await kube_write.patch_status(namespace, name, None, st.applied(
            SGLangServerStatus(), rendered.status, rendered.warnings, entry, 1, server.spec.rollback.history_limit,
            now))
        await kube_write.post_event(created, "Normal", "Created", f"revision {rendered.revision}")
        await kopf.patch(res, name, {"metadata": {"annotations": {  # kopf's, after the handler
            "sglang-operator.io/last-handled-configuration": json.dumps({"spec": spec})}}},
            namespace=namespace, patch_type=PatchType.MERGE)
        await asyncio.sleep(offset_in_interval(created["metadata"]) * OBSERVER_INTERVAL)  # the observer's first look
        now = dt.datetime.now(dt.UTC)
        conditions = [condition(t, v, r, m, 1, now) for t, v, r, m in (
            ("Progressing", "True", "WarmingUp", f"revision {rendered.revision}: warming up"),
            ("Ready", "False", "ScaledToZero", "0/0 pods Ready"), ("Available", "False", "ScaledToZero", "no pods"),
            ("Degraded", "False", "AsExpected", ""))]
        await kube_write.patch_status(namespace, name, None, {
            "conditions": conditions, "observedGeneration": 1, "analysis": {
            "revision": rendered.revision, "phase": "WarmingUp", "since": now.isoformat(),
            "progressStartedAt": now.isoformat()}})
        await kube_write.post_event(created, "Normal", "WarmingUp", f"revision {rendered.revision}: warming up")

    try:
        return await open_loop(count, rate, one)
    finally:
        await creator.close()
        await kopf.close()


def measure(namespace: str, count: int, rate: float, write: Any) -> Phase:
    dw = DeploymentWatch(namespace)
    started = asyncio.run(write(namespace, count, rate))
    dw.wait_all(list(started), WAIT_AFTER)
    lat = [(dw.seen[n] - t) * 1000 for n, t in started.items() if n in dw.seen]
    if os.environ.get("BENCH_TRACE"):
        print("latency by creation order (ms):", [round((dw.seen[n] - t) * 1000) for n, t in started.items()
                                                  if n in dw.seen])
    return Phase(lat, len(lat), count)


def wait_handled(namespace: str, count: int, timeout: float) -> int:
    """Wait until every SGLangServer in ``namespace`` has ``status.revision`` (its reconcile ended); how many have."""
    custom = client.CustomObjectsApi()
    deadline = time.monotonic() + timeout
    while True:
        listed: dict[str, Any] = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL)  # type: ignore[assignment]
        items = listed["items"]
        done = sum(bool((o.get("status") or {}).get("revision")) for o in items)
        if done >= count or time.monotonic() > deadline:
            return done
        time.sleep(1.0)


def table(requests: list[audit.Write], count: int) -> str:
    """Requests per server by verb and resource: count, how many the API server refused (not 2xx), and the API
    server's own time for them (p50 / p99 ms; a watch: until it started)."""
    groups: dict[str, list[audit.Write]] = collections.defaultdict(list)
    for w in requests:
        groups[f"{w.verb} {w.resource or '(non-resource URL)'}"].append(w)
    width = max((len(k) for k in groups), default=10)
    rows = []
    for k, ws in sorted(groups.items(), key=lambda kv: -len(kv[1])):
        ms = [w.seconds * 1000 for w in ws]
        refused = sum(not 200 <= w.code < 300 for w in ws)
        rows.append(f"    {k:<{width}}  {len(ws) / count:7.2f}  {len(ws):6d}  {refused:7d}  "
                    f"{statistics.median(ms):6.0f} / {percentile(ms, .99):.0f}")
    return "\n".join([f"    {'verb resource':<{width}}  /server   total  refused  API server ms p50 / p99", *rows,
                      f"    {'all':<{width}}  {len(requests) / count:7.2f}  {len(requests):6d}"])


def server_time(requests: list[audit.Write]) -> str:
    ms = [w.seconds * 1000 for w in requests if w.verb != "watch"]
    return f"p50 {statistics.median(ms):.0f} ms  p99 {percentile(ms, .99):.0f} ms" if ms else "no request"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=500)
    parser.add_argument("--rate", type=float, action="append", help="creations per second (repeatable; "
                        "default 5 and 20)")
    parser.add_argument("--no-floor", action="store_true", help="skip the plain client's run")
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # stopped in the background: clean up all the same
    rates: list[float] = args.rate or [5.0, 20.0]
    work = Path(tempfile.mkdtemp(prefix="sglang-bench-"))
    cluster = None
    if os.environ.get("E2E_USE_EXISTING_CLUSTER") == "1":
        kubeconfig = Path(os.environ["KUBECONFIG"])
        kubectl = Path("kubectl")
    else:
        cluster = Cluster(build(), NodeOptions(), audit_reads=True)
        cluster.start()
        kubeconfig, kubectl = cluster.kubeconfig, cluster.kubectl
    global ADMIN_KUBECONFIG
    ADMIN_KUBECONFIG = str(kubeconfig)
    os.environ["KUBECONFIG"] = str(kubeconfig)  # lightkube's clients in this process: the admin (the floor: its SA)
    config.load_kube_config(str(kubeconfig))
    k8s = K8sCluster(kubeconfig, kubectl, cluster)
    interval = float(os.environ.get("SGLANG_OPERATOR_STATUS_INTERVAL", "5"))
    op: OperatorProcess | None = None
    try:
        k8s.install_crd()
        k8s.run("create", "namespace", SA_NS)
        kubeconfigs = {}
        for sa in (SA, FLOOR_SA):  # both ServiceAccounts: the same API Priority and Fairness level, unlike an admin
            k8s.run("create", "serviceaccount", sa, "-n", SA_NS)
            k8s.run("create", "clusterrolebinding", f"{SA_NS}-{sa}-{int(time.time())}",
                    "--clusterrole=cluster-admin", f"--serviceaccount={SA_NS}:{sa}")
            token = k8s.run("create", "token", sa, "-n", SA_NS, "--duration=3h").stdout.strip()
            kubeconfigs[sa] = token_kubeconfig(k8s, token, work / f"{sa}.kubeconfig")
        op_kubeconfig = kubeconfigs[SA]
        for rate in rates:
            tag = f"{rate:g}".replace(".", "-")
            ns, floor_ns = f"apply-op-{tag}", f"apply-floor-{tag}"
            for n in (ns, floor_ns):
                k8s.run("create", "namespace", n)
            op = OperatorProcess(op_kubeconfig, work / f"operator-{tag}.log", status_interval=interval,
                                 sample_interval=None, args=[
                                     "--namespace", ns, "--leader-elect",
                                     f"--leader-elect-resource-namespace={SA_NS}",
                                     f"--leader-elect-resource-name=apply-{tag}"])
            op.start(timeout=120)
            assert op.proc is not None
            offset = audit.size(cluster.audit_log) if cluster else 0
            cpu0, t0 = cpu_seconds(op.proc.pid), time.monotonic()
            load = os.getloadavg()[0]
            phase = measure(ns, args.count, rate, create_servers)
            handled = wait_handled(ns, args.count, WAIT_AFTER)
            time.sleep(2 * interval)  # the observer's first ticks over them
            phase.cpu, phase.wall = cpu_seconds(op.proc.pid) - cpu0, time.monotonic() - t0
            if cluster:
                phase.requests = audit.requests(cluster.audit_log, USER, offset)
            op.stop()
            op = None
            print(f"\n== {args.count} SGLangServers at {rate:g}/s (load average at start {load:.1f}) ==")
            print(phase.line("operator"))
            print(f"operator CPU: {phase.cpu:.1f} s over {phase.wall:.0f} s wall; servers with a status.revision "
                  f"{handled}/{args.count}")
            if not args.no_floor:
                os.environ["KUBECONFIG"] = str(kubeconfigs[FLOOR_SA])
                offset = audit.size(cluster.audit_log) if cluster else 0
                floor = measure(floor_ns, args.count, rate, floor_writes)
                os.environ["KUBECONFIG"] = str(kubeconfig)
                print(floor.line("floor   "))
                if phase.latencies and floor.latencies:
                    ratio = percentile(phase.latencies, .99) / percentile(floor.latencies, .99)
                    print(f"ratio operator p99 / floor p99: {ratio:.2f} (goal <= 1.5)")
                if cluster:
                    floor.requests = audit.requests(cluster.audit_log, FLOOR_USER, offset)
                    print(f"API server time per request: operator {server_time(phase.requests)}; "
                          f"floor {server_time(floor.requests)} ({len(floor.requests) / args.count:.2f} "
                          f"requests per server)")
            if cluster:
                print(f"operator's requests per SGLangServer (audit log, user {USER}):")
                print(table(phase.requests, args.count))
                if os.environ.get("BENCH_KEEP_AUDIT"):
                    subprocess.run(["cp", str(cluster.audit_log), f"{os.environ['BENCH_KEEP_AUDIT']}-{tag}.log"],
                                   check=False)
            sys.stdout.flush()
    finally:
        if op is not None:
            op.stop()
        if cluster is not None:
            cluster.stop()
        subprocess.run(["rm", "-rf", str(work)], check=False)


if __name__ == "__main__":
    main()
