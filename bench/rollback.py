"""How fast the operator rolls back, and how long the server does not serve meanwhile (prints figures; not a test).

    python bench/rollback.py [--runs 3]

On the local control plane with the simulator at real speed (time scale 1, ``SGLANG_SIM_LOAD_SECONDS=1``) and the
operator as the demo runs it (``OperatorProcess(sample_interval=None)``: samples every ``intervalSeconds``), each
run promotes the published known-good sample with the fast policy of ``e2e/policies.py`` in a namespace of its
own, applies the regressed sample and watches (API server watches on Pods, the Deployment and the SGLangServer;
times are this process's monotonic clock at the event's arrival):

- **detection**: from all of the regressed revision's pods Ready to the stable revision applied (the Deployment's
  pod template carrying the stable revision's ``sglang-operator.io/revision`` label again), against the earliest
  possible rollback ``warmupSeconds + failureThreshold × intervalSeconds`` (docs/rollback.md), as a ratio (goal
  ≤ 1.05); split into Ready → the operator's ``Verifying`` (its warm-up end), ``Verifying`` → ``RollingBack``
  (its decision) and ``RollingBack`` → the Deployment patched;
- **not serving**: the Deployment's ``Recreate`` strategy stops the regressed pod before the stable one starts
  and loads the model again. By readiness: from the regressed pod leaving Ready (or being deleted) to the stable
  pod Ready. By a client polling ``GET /health`` on every pod IP (loopback) each 0.1 s (timeout 0.5 s, at most
  ``MAX_REQUESTS`` per run): from the regressed pod's last 200 to the stable pod's first 200. With a real model
  the load takes minutes (the simulator's is one second), so read this figure as the operator's and Kubernetes'
  share of the gap.

Each run is printed, then the median of each figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx
from lightkube import AsyncClient, KubeConfig
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Pod

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import commit_line, start_operator, tear_down
from e2e.build_k8s import build
from e2e.cluster import Cluster, NodeOptions
from e2e.operator_proc import OperatorProcess
from e2e.policies import BAD, GOOD, earliest_rollback_seconds, policy, sample
from sglang_operator.io.kube import sglangserver_resource

ROOT = Path(__file__).resolve().parents[1]
NAME = "qwen36-27b"
REVISION_LABEL = "sglang-operator.io/revision"
POLL_SECONDS, POLL_TIMEOUT_SECONDS, MAX_REQUESTS = 0.1, 0.5, 5000
RUN_TIMEOUT_SECONDS = 240.0


@dataclass
class Moments:
    """What the watches saw, as ``time.monotonic()`` seconds; ``None`` until seen."""

    rev_good: str
    rev_bad: str | None = None
    bad_applied: float | None = None
    bad_ready: float | None = None
    verifying: float | None = None
    rolling_back: float | None = None
    stable_applied: float | None = None
    bad_unready: float | None = None
    good_ready: float | None = None
    last_ok_bad: float | None = None
    first_ok_good: float | None = None
    requests: int = 0
    pods: dict[str, tuple[str, bool, str | None]] = field(default_factory=dict)
    """Pod name → (revision, Ready, pod IP), pods not being deleted."""
    seen_deployment: asyncio.Event = field(default_factory=asyncio.Event)

    def done(self) -> bool:
        return self.good_ready is not None and self.first_ok_good is not None


async def watch_deployment(client: AsyncClient, ns: str, m: Moments) -> None:
    async for _, dep in client.watch(Deployment, namespace=ns, fields={"metadata.name": NAME}):
        assert dep.spec is not None and dep.spec.template.metadata is not None
        rev = (dep.spec.template.metadata.labels or {}).get(REVISION_LABEL)
        now = time.monotonic()
        if rev == m.rev_good:
            m.seen_deployment.set()
            if m.bad_applied is not None and m.stable_applied is None:
                m.stable_applied = now
        elif rev is not None and m.rev_bad is None:
            m.rev_bad, m.bad_applied = rev, now


async def watch_pods(client: AsyncClient, ns: str, m: Moments) -> None:
    async for typ, pod in client.watch(Pod, namespace=ns):
        assert pod.metadata is not None and pod.metadata.name is not None
        now, name = time.monotonic(), pod.metadata.name
        rev = (pod.metadata.labels or {}).get(REVISION_LABEL, "")
        conditions = (pod.status.conditions if pod.status else None) or []
        ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
        if typ == "DELETED" or pod.metadata.deletionTimestamp is not None:
            m.pods.pop(name, None)
            ready = False
        else:
            m.pods[name] = (rev, ready, pod.status.podIP if pod.status else None)
        if m.rev_bad is None and rev and rev != m.rev_good:  # before the Deployment's event, if ever
            m.rev_bad = rev
        if m.rev_bad is None or rev not in (m.rev_bad, m.rev_good):
            continue
        if rev == m.rev_bad:
            bad = [r for r, _, _ in m.pods.values() if r == m.rev_bad]
            if m.bad_ready is None and bad and all(rd for r, rd, _ in m.pods.values() if r == m.rev_bad):
                m.bad_ready = now
            elif m.bad_ready is not None and m.bad_unready is None and not ready:
                m.bad_unready = now
        elif m.stable_applied is not None and m.good_ready is None and ready:
            m.good_ready = now


async def watch_server(client: AsyncClient, ns: str, m: Moments) -> None:
    """The operator's analysis of the regressed revision: when it entered Verifying and RollingBack."""
    async for _, obj in client.watch(sglangserver_resource(), namespace=ns, fields={"metadata.name": NAME}):
        an = (obj.to_dict().get("status") or {}).get("analysis") or {}
        if m.rev_bad is None or an.get("revision") != m.rev_bad:
            continue
        if an.get("phase") == "Verifying" and m.verifying is None:
            m.verifying = time.monotonic()
        elif an.get("phase") == "RollingBack" and m.rolling_back is None:
            m.rolling_back = time.monotonic()


async def poll_health(m: Moments) -> None:
    """GET /health on every pod IP each POLL_SECONDS, from the regressed pods Ready until the stable pod answers."""
    async with httpx.AsyncClient(timeout=POLL_TIMEOUT_SECONDS) as http:
        async def one(rev: str, ip: str) -> None:
            try:
                ok = (await http.get(f"http://{ip}:30000/health")).status_code == 200
            except httpx.HTTPError:
                ok = False
            now = time.monotonic()
            if ok and rev == m.rev_bad:
                m.last_ok_bad = now
            elif ok and rev == m.rev_good and m.stable_applied is not None and m.first_ok_good is None:
                m.first_ok_good = now

        while m.bad_ready is None:
            await asyncio.sleep(POLL_SECONDS)
        while m.first_ok_good is None:
            if m.requests >= MAX_REQUESTS:
                raise RuntimeError(f"{MAX_REQUESTS} /health requests and the stable pod has not answered")
            targets = [(rev, ip) for rev, _, ip in list(m.pods.values()) if ip]
            m.requests += len(targets)
            await asyncio.gather(*(one(rev, ip) for rev, ip in targets), asyncio.sleep(POLL_SECONDS))


def kubectl(cluster: Cluster, *args: str, input: str | None = None) -> str:
    return subprocess.run([str(cluster.kubectl), f"--kubeconfig={cluster.kubeconfig}", *args], input=input,
                          capture_output=True, text=True, check=True).stdout


async def promoted(client: AsyncClient, ns: str, timeout: float = 180) -> str:
    """Wait until the known-good revision is the stable one and serves (analysis Stable); its hash."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = (await client.get(sglangserver_resource(), NAME, namespace=ns)).to_dict().get("status") or {}
        if st.get("stableRevision") and st["stableRevision"] == st.get("revision") \
                and (st.get("analysis") or {}).get("phase") == "Stable":
            return str(st["revision"])
        await asyncio.sleep(1)
    raise RuntimeError(f"{ns}/{NAME}: the known-good revision not promoted after {timeout:.0f} s")


async def one_run(cluster: Cluster, ns: str) -> Moments:
    await asyncio.to_thread(kubectl, cluster, "create", "namespace", ns)
    client = AsyncClient(config=KubeConfig.from_file(str(cluster.kubeconfig)), field_manager="bench-rollback")
    while True:  # pods need the namespace's ServiceAccount
        try:
            await asyncio.to_thread(kubectl, cluster, "get", "serviceaccount", "default", "-n", ns)
            break
        except subprocess.CalledProcessError:
            await asyncio.sleep(0.2)
    await asyncio.to_thread(kubectl, cluster, "apply", "-n", ns, "-f", "-", input=json.dumps(sample(GOOD)))
    m = Moments(rev_good=await promoted(client, ns))
    tasks = [asyncio.create_task(f(client, ns, m)) for f in (watch_deployment, watch_pods, watch_server)]
    tasks.append(asyncio.create_task(poll_health(m)))
    try:
        await asyncio.wait_for(m.seen_deployment.wait(), 30)
        await asyncio.to_thread(kubectl, cluster, "apply", "-n", ns, "-f", "-", input=json.dumps(sample(BAD)))
        deadline = time.monotonic() + RUN_TIMEOUT_SECONDS
        while not m.done():
            failed = [t for t in tasks if t.done() and t.exception()]
            if failed:
                raise RuntimeError(f"{ns}: a watch or the poller failed") from failed[0].exception()
            if time.monotonic() > deadline:
                raise RuntimeError(f"{ns}: no rollback after {RUN_TIMEOUT_SECONDS:.0f} s: {m}")
            await asyncio.sleep(0.1)
    finally:
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        await client.close()
    return m


def figures(m: Moments, expected: int) -> dict[str, float]:
    """The run's figures in seconds (and the ratio)."""
    assert m.bad_ready is not None and m.stable_applied is not None and m.good_ready is not None
    assert m.first_ok_good is not None
    vals = {
        "detection_s": m.stable_applied - m.bad_ready,
        "ratio": (m.stable_applied - m.bad_ready) / expected,
        "ready_to_verifying_s": (m.verifying or float("nan")) - m.bad_ready,
        "verifying_to_decision_s": (m.rolling_back or float("nan")) - (m.verifying or float("nan")),
        "decision_to_applied_s": m.stable_applied - (m.rolling_back or float("nan")),
        "not_ready_s": m.good_ready - (m.bad_unready or m.stable_applied),
        "not_serving_s": m.first_ok_good - (m.last_ok_bad or m.stable_applied),
        "health_requests": float(m.requests),
    }
    return vals


COLUMNS = ("detection_s", "ratio", "ready_to_verifying_s", "verifying_to_decision_s", "decision_to_applied_s",
           "not_ready_s", "not_serving_s", "health_requests")


def row(label: str, vals: dict[str, float]) -> str:
    return f"{label:<8}" + "".join(f"{vals[c]:>{len(c) + 2}.{0 if c == 'health_requests' else 2}f}" for c in COLUMNS)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python bench/rollback.py", description=__doc__.split("\n")[0])
    parser.add_argument("--runs", type=int, default=3, help="rollbacks to measure (default 3)")
    args = parser.parse_args()
    p = policy()
    expected = earliest_rollback_seconds(p)
    cluster = Cluster(build(), NodeOptions())
    op: OperatorProcess | None = None
    try:
        cluster.start()
        op = start_operator(cluster)
        commit = commit_line()
        print(f"bench/rollback.py at {commit}\npolicy: warmupSeconds {p.warmup_seconds} + failureThreshold "
              f"{p.failure_threshold} × intervalSeconds {p.interval_seconds} = {expected} s (the earliest rollback); "
              f"simulator at real speed, model load 1 s; {args.runs} runs")
        print(f"{'run':<8}" + "".join(f"{c:>{len(c) + 2}}" for c in COLUMNS))
        runs = []
        for i in range(args.runs):
            ns = f"bench-rollback-{i + 1}"
            vals = figures(asyncio.run(one_run(cluster, ns)), expected)
            runs.append(vals)
            print(row(str(i + 1), vals), flush=True)
            kubectl(cluster, "delete", "namespace", ns, "--wait=true", "--timeout=120s")
        print(row("median", {c: statistics.median(r[c] for r in runs) for c in COLUMNS}))
        print("goal: ratio <= 1.05; not_serving_s: Recreate's gap with a 1 s model load (a real model adds its load)")
    finally:
        tear_down(op, cluster)


if __name__ == "__main__":
    main()
