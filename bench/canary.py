"""What a regression rolled back costs the clients: full replacement (Recreate, RollingUpdate) vs a canary (prints
figures; not a test).

    python bench/canary.py                                  # Recreate and RollingUpdate, 4 replicas, 1 run each
    python bench/canary.py --strategy canary --max-surge 1  # the canary of issue 18 (docs/canary.md)
    python bench/canary.py --mode drift --strategy recreate --drift-pct 20,0   # every pod 25 % slower, no canary

On the local control plane with the simulator at real speed (one-second model load) and the operator as the demo
runs it, each run creates ``--replicas`` replicas of the published known-good sample (fast rollback policy of
``e2e/policies.py``) in a namespace of its own, waits for its promotion, then applies the regressed sample with the
same strategy and watches until the regressed revision is gone and every replica serves the known-good revision
again. The local cluster has no Service endpoints (no kube-proxy), so the client does what a Service would: each
request (``POST /generate``, 16 tokens, ``--rate`` per second, open loop, timeout 30 s) goes to a random pod that is
Ready and not being deleted, as the Pod watch shows it at the moment the request is sent; with no such pod the
request fails at once ("no endpoint", what a Service without endpoints does). Endpoint propagation (kube-proxy) is
instant here, so a real cluster fails a few more requests per removed pod. From the regressed spec applied to the
end, per run:

- **requests**, **failed** (no endpoint / an error or a non-2xx answer from the pod), **regressed** and
  **regressed %**: the requests the regressed revision served, and their share of all;
- **lost pod-s**: the integral of ``replicas − Ready pods`` over the run (pod-seconds of capacity lost), **lost/pod**
  that divided by the pods started (seconds not-Ready per replaced pod), **min Ready** and **0-Ready s** (seconds with
  no Ready pod at all: a full outage);
- **serve→Ready**: per pod started, from its first ``200`` on ``GET /health`` (polled every 0.1 s on every pod not
  yet Ready: the simulator serves) to its Ready condition, mean, median and max: the kubelet's probes' share of the
  gap. The simulator starts in about the same time each run, so its lag sits at one phase of the start-up probe's
  period (a real model's load varies: its lag is spread over the period, half of it on average);
- **done s**: from the regressed spec applied to the known-good revision Ready on every replica again.

``--mode drift`` measures the load-drift contrast of issue 18 without a canary: after the promotion it posts
``{"throughput_drop_pct": --drift-pct}`` (20: decode steps take 1 / 0.8 = 1.25 × as long) to every pod of the server
(``POST /sim/admin/faults``, each new pod as soon as it answers), watches the stable revision for ``--drift-watch``
seconds (it is never rolled back: ``analysis.stableRegression`` records it), then applies a revision that is fine (the
known-good spec plus one harmless env var) and reports whether the operator rolls it back, judged against the
baseline stored before the drift, and how long that takes.

With ``--strategy canary`` the drift mode shows the same drift during a canary (both revisions slowed, judged in the
same intervals). Exit status 0, or 2 when the API server refuses the spec (e.g. ``spec.strategy.type: Canary`` on
a cluster whose CRD predates the canary API).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from lightkube import AsyncClient, KubeConfig
from lightkube.resources.core_v1 import Pod

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from bench.common import commit_line, start_operator, tear_down
from e2e.build_k8s import build
from e2e.cluster import Cluster, NodeOptions
from e2e.operator_proc import OperatorProcess
from e2e.policies import BAD, GOOD, sample
from sglang_operator.io.kube import sglangserver_resource

ROOT = Path(__file__).resolve().parents[1]
NAME = "qwen36-27b"
PORT = 30000
REVISION_LABEL = "sglang-operator.io/revision"
HEALTH_POLL_SECONDS, HEALTH_TIMEOUT_SECONDS = 0.1, 0.5
REQUEST_TOKENS, REQUEST_TIMEOUT_SECONDS = 16, 30.0
RUN_TIMEOUT_SECONDS = 300.0
STRATEGIES = ("recreate", "rolling", "canary")


class Refused(Exception):
    """The API server refused the object (kubectl's message)."""


def strategy_of(name: str, max_surge: int, steps: list[Any] | None) -> dict[str, Any]:
    """``spec.strategy`` for ``--strategy name`` (camelCase). Canary: issue 18's ``{type: Canary, canary: {steps,
    maxSurge}}`` (default steps: the operator's, one replica then all)."""
    if name == "recreate":
        return {"type": "Recreate"}
    if name == "rolling":
        return {"type": "RollingUpdate", "maxUnavailable": 1}
    canary: dict[str, Any] = {"maxSurge": max_surge}
    if steps:
        canary["steps"] = steps
    return {"type": "Canary", "canary": canary}


@dataclass
class PodSeen:
    revision: str
    ip: str | None = None
    ready: bool = False
    deleting: bool = False
    created: float = 0.0
    first_ok: float | None = None
    ready_at: float | None = None
    faulted: bool = False


@dataclass
class Watch:
    """What the Pod watch and the clients saw (``time.monotonic()`` seconds)."""

    replicas: int
    pods: dict[str, PodSeen] = field(default_factory=dict)
    """Pods that exist (name → what was seen)."""
    history: list[PodSeen] = field(default_factory=list)
    """Every pod ever seen, deleted ones too."""
    ready_timeline: list[tuple[float, int]] = field(default_factory=list)
    """(moment, Ready pods not being deleted) at each change."""
    requests: list[tuple[float, str, str]] = field(default_factory=list)
    """(sent at, revision or "", outcome: "ok" | "no-endpoint" | "error")."""
    inflight: set[asyncio.Task[None]] = field(default_factory=set)
    drift: dict[str, Any] | None = None
    """Drift mode: the faults posted to every pod (``POST /sim/admin/faults``) once set."""

    def ready_pods(self) -> list[PodSeen]:
        return [p for p in self.pods.values() if p.ready and not p.deleting and p.ip]

    def note_ready(self, now: float) -> None:
        n = len(self.ready_pods())
        if not self.ready_timeline or self.ready_timeline[-1][1] != n:
            self.ready_timeline.append((now, n))


async def watch_pods(client: AsyncClient, ns: str, w: Watch) -> None:
    async for typ, pod in client.watch(Pod, namespace=ns):
        assert pod.metadata is not None and pod.metadata.name is not None
        now, name = time.monotonic(), pod.metadata.name
        if typ == "DELETED":
            w.pods.pop(name, None)
            w.note_ready(now)
            continue
        seen = w.pods.get(name)
        if seen is None:
            seen = w.pods[name] = PodSeen((pod.metadata.labels or {}).get(REVISION_LABEL, ""), created=now)
            w.history.append(seen)
        conditions = (pod.status.conditions if pod.status else None) or []
        seen.ready = any(c.type == "Ready" and c.status == "True" for c in conditions)
        seen.deleting = pod.metadata.deletionTimestamp is not None
        seen.ip = (pod.status.podIP if pod.status else None) or seen.ip
        if seen.ready and seen.ready_at is None:
            seen.ready_at = now
        w.note_ready(now)


async def poll_health(w: Watch) -> None:
    """First ``200`` of ``GET /health`` of every pod not yet Ready; once ``w.drift`` is set, post it to every pod
    (once each, as soon as it answers)."""
    async with httpx.AsyncClient(timeout=HEALTH_TIMEOUT_SECONDS, trust_env=False) as http:
        async def one(p: PodSeen) -> None:
            with contextlib.suppress(httpx.HTTPError):
                if p.first_ok is None and (await http.get(f"http://{p.ip}:{PORT}/health")).status_code == 200:
                    p.first_ok = time.monotonic()
                if w.drift is not None and p.first_ok is not None and not p.faulted:
                    r = await http.post(f"http://{p.ip}:{PORT}/sim/admin/faults", json=w.drift)
                    p.faulted = r.status_code == 200
        while True:
            todo = [p for p in list(w.pods.values()) if p.ip and not p.deleting
                    and (p.first_ok is None or (w.drift is not None and not p.faulted))]
            await asyncio.gather(*(one(p) for p in todo), asyncio.sleep(HEALTH_POLL_SECONDS))


async def client_load(w: Watch, rate: float) -> None:
    """Open loop: ``rate`` requests per second, each to a random Ready pod (what a Service does)."""
    async with httpx.AsyncClient(timeout=REQUEST_TIMEOUT_SECONDS, trust_env=False,
                                 limits=httpx.Limits(max_connections=256)) as http:
        async def send(p: PodSeen, sent: float) -> None:
            try:
                r = await http.post(f"http://{p.ip}:{PORT}/generate", json={
                    "text": "How long does a rollback take?",
                    "sampling_params": {"max_new_tokens": REQUEST_TOKENS, "ignore_eos": True}})
                outcome = "ok" if r.status_code == 200 else "error"
            except httpx.HTTPError:
                outcome = "error"
            w.requests.append((sent, p.revision, outcome))

        period, due = 1.0 / rate, time.monotonic()
        while True:
            due += period
            await asyncio.sleep(max(0.0, due - time.monotonic()))
            now, ready = time.monotonic(), w.ready_pods()
            if not ready:
                w.requests.append((now, "", "no-endpoint"))
                continue
            task = asyncio.create_task(send(random.choice(ready), now))
            w.inflight.add(task)
            task.add_done_callback(w.inflight.discard)


def kubectl(cluster: Cluster, *args: str, input: str | None = None) -> str:
    r = subprocess.run([str(cluster.kubectl), f"--kubeconfig={cluster.kubeconfig}", *args], input=input,
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise Refused(r.stderr.strip() or r.stdout.strip())
    return r.stdout


async def server_status(client: AsyncClient, ns: str) -> dict[str, Any]:
    obj = await client.get(sglangserver_resource(), NAME, namespace=ns)
    return dict(obj.to_dict().get("status") or {})


async def promoted(client: AsyncClient, ns: str, w: Watch, timeout: float = 240) -> str:
    """Wait until the applied revision is the stable one, Stable, on every replica; its hash."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        st = await server_status(client, ns)
        rev = st.get("revision")
        if rev and st.get("stableRevision") == rev and (st.get("analysis") or {}).get("phase") == "Stable" \
                and sum(1 for p in w.ready_pods() if p.revision == rev) >= w.replicas:
            return str(rev)
        await asyncio.sleep(0.5)
    raise RuntimeError(f"{ns}/{NAME}: not promoted after {timeout:.0f} s")


def figures(w: Watch, start: float, end: float, good: str) -> dict[str, float]:
    """The run's figures over [start, end] (see the module docstring)."""
    reqs = [r for r in w.requests if start <= r[0] <= end]
    total = len(reqs) or 1
    lost = zero = 0.0
    level = next((n for t, n in reversed(w.ready_timeline) if t <= start), 0)
    t_prev, low = start, level
    for t, n in [(t, n) for t, n in w.ready_timeline if start < t <= end] + [(end, -1)]:
        lost += max(0, w.replicas - level) * (t - t_prev)
        zero += (t - t_prev) if level == 0 else 0.0
        if n < 0:
            break
        level, t_prev, low = n, t, min(low, n)
    started = [p for p in w.history if p.created >= start]
    lags = [p.ready_at - p.first_ok for p in started if p.ready_at is not None and p.first_ok is not None]
    return {
        "requests": float(len(reqs)),
        "failed": float(sum(1 for r in reqs if r[2] != "ok")),
        "no_endpoint": float(sum(1 for r in reqs if r[2] == "no-endpoint")),
        "error": float(sum(1 for r in reqs if r[2] == "error")),
        "regressed": float(sum(1 for r in reqs if r[2] == "ok" and r[1] not in ("", good))),
        "regressed_pct": 100.0 * sum(1 for r in reqs if r[2] == "ok" and r[1] not in ("", good)) / total,
        "lost_pod_s": lost,
        "lost_per_pod_s": lost / max(len(started), 1),
        "min_ready": float(low),
        "zero_ready_s": zero,
        "serve_to_ready_mean_s": statistics.fmean(lags) if lags else float("nan"),
        "serve_to_ready_med_s": statistics.median(lags) if lags else float("nan"),
        "serve_to_ready_max_s": max(lags) if lags else float("nan"),
        "pods_started": float(len(started)),
        "done_s": end - start,
    }


COLUMNS = ("requests", "failed", "no_endpoint", "error", "regressed", "regressed_pct", "lost_pod_s", "lost_per_pod_s",
           "min_ready", "zero_ready_s",
           "serve_to_ready_mean_s", "serve_to_ready_med_s", "serve_to_ready_max_s", "pods_started", "done_s")
COUNTS = {"requests", "failed", "no_endpoint", "error", "regressed", "min_ready", "pods_started"}


def row(label: str, vals: dict[str, float]) -> str:
    return f"{label:<12}" + "".join(f"{vals[c]:>{len(c) + 2}.{0 if c in COUNTS else 1}f}" for c in COLUMNS)


async def namespace(cluster: Cluster, ns: str) -> None:
    await asyncio.to_thread(kubectl, cluster, "create", "namespace", ns)
    while True:  # pods need the namespace's ServiceAccount
        try:
            await asyncio.to_thread(kubectl, cluster, "get", "serviceaccount", "default", "-n", ns)
            return
        except Refused:
            await asyncio.sleep(0.2)


def spec_of(name: str, replicas: int, strategy: dict[str, Any], env: dict[str, str] | None = None) -> str:
    obj = sample(name)
    obj["spec"]["replicas"] = replicas
    obj["spec"]["strategy"] = strategy
    obj["spec"]["env"] = [*obj["spec"].get("env", []), *({"name": k, "value": v} for k, v in (env or {}).items())]
    return json.dumps(obj)


async def apply(cluster: Cluster, ns: str, obj: str) -> None:
    await asyncio.to_thread(kubectl, cluster, "apply", "-n", ns, "-f", "-", input=obj)


async def with_watch(cluster: Cluster, ns: str, replicas: int, rate: float, body: Any) -> Any:
    """Run ``body(client, watch)`` with the Pod watch, the /health poller and the client load running."""
    client = AsyncClient(config=KubeConfig.from_file(str(cluster.kubeconfig)), field_manager="bench-canary")
    w = Watch(replicas)
    tasks = [asyncio.create_task(watch_pods(client, ns, w)), asyncio.create_task(poll_health(w)),
             asyncio.create_task(client_load(w, rate))]
    try:
        job = asyncio.create_task(body(client, w))
        while not job.done():
            failed = [t for t in tasks if t.done()]
            if failed:
                job.cancel()
                raise RuntimeError(f"{ns}: the watch, poller or client stopped") from failed[0].exception()
            await asyncio.wait({job}, timeout=0.5)
        return job.result()
    finally:
        for t in [*tasks, *w.inflight]:
            t.cancel()
        await asyncio.gather(*tasks, *w.inflight, return_exceptions=True)
        await client.close()


async def regression_run(cluster: Cluster, ns: str, args: argparse.Namespace) -> dict[str, float]:
    await namespace(cluster, ns)
    strategy = strategy_of(args.strategy_name, args.max_surge, args.steps)

    async def body(client: AsyncClient, w: Watch) -> dict[str, float]:
        await apply(cluster, ns, spec_of(GOOD, args.replicas, strategy))
        good = await promoted(client, ns, w)
        await asyncio.sleep(1.0)
        start = time.monotonic()
        await apply(cluster, ns, spec_of(BAD, args.replicas, strategy))
        deadline = start + RUN_TIMEOUT_SECONDS
        while time.monotonic() < deadline:
            bad = [p for p in w.pods.values() if p.revision != good]
            ready_good = [p for p in w.ready_pods() if p.revision == good]
            st = await server_status(client, ns)
            rejected = any(r.get("revision") not in (None, good) for r in st.get("rejectedRevisions") or [])
            if rejected and not bad and len(ready_good) >= args.replicas:
                return figures(w, start, time.monotonic(), good)
            await asyncio.sleep(0.2)
        raise RuntimeError(f"{ns}: the regression not rolled back after {RUN_TIMEOUT_SECONDS:.0f} s")

    result: dict[str, float] = await with_watch(cluster, ns, args.replicas, args.rate, body)
    return result


async def drift_run(cluster: Cluster, ns: str, args: argparse.Namespace) -> list[str]:
    """The load-drift contrast without canary; lines of a report."""
    await namespace(cluster, ns)
    strategy = strategy_of(args.strategy_name, args.max_surge, args.steps)
    out: list[str] = []

    async def body(client: AsyncClient, w: Watch) -> list[str]:
        await apply(cluster, ns, spec_of(GOOD, args.replicas, strategy))
        good = await promoted(client, ns, w)
        base = (await server_status(client, ns)).get("baseline") or {}
        out.append(f"promoted {good}; baseline {json.dumps(base, sort_keys=True)[:300]}")
        t0 = time.monotonic()
        w.drift = {"throughput_drop_pct": args.drift_pct_now}  # the poller posts it to every pod from now on
        regressed_at: float | None = None
        while time.monotonic() - t0 < args.drift_watch:
            st = await server_status(client, ns)
            if regressed_at is None and (st.get("analysis") or {}).get("stableRegression"):
                regressed_at = time.monotonic()
                out.append(f"stable revision under drift: analysis.stableRegression after {regressed_at - t0:.1f} s: "
                           f"{json.dumps(st['analysis']['stableRegression'], sort_keys=True)[:400]}")
            await asyncio.sleep(0.5)
        st = await server_status(client, ns)
        out.append(f"stable revision after {args.drift_watch:.0f} s of drift: revision {st.get('revision')}, "
                   f"phase {(st.get('analysis') or {}).get('phase')}, rollbacks {len(st.get('rollbacks') or [])}"
                   + ("" if regressed_at else ", no stableRegression"))
        start = time.monotonic()
        await apply(cluster, ns, spec_of(GOOD, args.replicas, strategy, {"BENCH_NOTE": "a harmless change"}))
        fine: str | None = None
        while time.monotonic() - start < RUN_TIMEOUT_SECONDS:
            st = await server_status(client, ns)
            canary = (st.get("canary") or {}).get("revision")  # a canary: status.revision stays the stable one
            fine = fine or (str(canary) if canary not in (None, good) else None) \
                or (str(st["revision"]) if st.get("revision") not in (None, good) else None)
            an = st.get("analysis") or {}
            rejected = [r for r in st.get("rejectedRevisions") or [] if fine and r.get("revision") == fine]
            if rejected:
                out.append(f"fine revision {fine} ROLLED BACK {time.monotonic() - start:.1f} s after it was applied: "
                           f"{rejected[0].get('reason', '')[:400]}")
                while time.monotonic() - start < RUN_TIMEOUT_SECONDS:
                    if not [p for p in w.pods.values() if p.revision != good] \
                            and len([p for p in w.ready_pods() if p.revision == good]) >= args.replicas:
                        vals = figures(w, start, time.monotonic(), good)
                        out.append("the fine revision and its rollback, from its apply: " + ", ".join(
                            f"{c} {vals[c]:.{0 if c in COUNTS else 1}f}" for c in COLUMNS))
                        break
                    await asyncio.sleep(0.2)
                return out
            if fine and an.get("revision") == fine and an.get("phase") == "Stable":
                out.append(f"fine revision {fine} promoted {time.monotonic() - start:.1f} s after it was applied "
                           "(no rollback)")
                return out
            await asyncio.sleep(0.5)
        out.append(f"fine revision {fine}: neither rolled back nor promoted after {RUN_TIMEOUT_SECONDS:.0f} s")
        return out

    result: list[str] = await with_watch(cluster, ns, args.replicas, args.rate, body)
    return result


def main() -> None:
    parser = argparse.ArgumentParser(prog="python bench/canary.py", description=__doc__.split("\n")[0])
    parser.add_argument("--strategy", default="recreate,rolling",
                        help="comma-separated, of recreate, rolling, canary (default recreate,rolling)")
    parser.add_argument("--mode", choices=("regression", "drift"), default="regression")
    parser.add_argument("--replicas", type=int, default=4, help="replicas of the server (default 4)")
    parser.add_argument("--runs", type=int, default=1, help="runs per strategy (default 1)")
    parser.add_argument("--rate", type=float, default=10.0, help="client requests per second (default 10)")
    parser.add_argument("--max-surge", type=int, choices=(0, 1), default=0, help="canary only (default 0)")
    parser.add_argument("--steps", type=json.loads, default=None,
                        help="canary only: spec.strategy.canary.steps as JSON (default: the operator's)")
    parser.add_argument("--drift-pct", default="20",
                        help="drift mode: throughput_drop_pct, comma-separated for one run each (default 20; 0: the "
                             "control, no drift)")
    parser.add_argument("--drift-watch", type=float, default=60.0,
                        help="drift mode: seconds the stable revision is watched under drift (default 60)")
    args = parser.parse_args()
    names = [s.strip() for s in args.strategy.split(",") if s.strip()]
    if not names or any(s not in STRATEGIES for s in names):
        parser.error(f"--strategy: one or more of {', '.join(STRATEGIES)}")
    cluster = Cluster(build(), NodeOptions())
    op: OperatorProcess | None = None
    status = 0
    try:
        cluster.start()
        op = start_operator(cluster)
        commit = commit_line()
        print(f"bench/canary.py at {commit}\n{args.replicas} replicas, {args.rate:g} requests/s to a random Ready pod, "
              f"simulator at real speed, model load 1 s; mode {args.mode}")
        if args.mode == "regression":
            print(f"{'run':<12}" + "".join(f"{c:>{len(c) + 2}}" for c in COLUMNS))
        for name in names:
            args.strategy_name = name
            runs = []
            for i in range(args.runs):
                ns = f"bench-{args.mode}-{name}-{i + 1}"
                try:
                    if args.mode == "regression":
                        vals = asyncio.run(regression_run(cluster, ns, args))
                        runs.append(vals)
                        print(row(f"{name}-{i + 1}", vals), flush=True)
                    else:
                        for j, pct in enumerate(float(x) for x in args.drift_pct.split(",")):
                            args.drift_pct_now = pct
                            print(f"-- {name}{' (no canary)' if name != 'canary' else ''}: drift {pct:g} %", flush=True)
                            for line in asyncio.run(drift_run(cluster, f"{ns}-{j + 1}", args)):
                                print("   " + line, flush=True)
                            kubectl(cluster, "delete", "namespace", f"{ns}-{j + 1}", "--wait=true", "--timeout=120s")
                except Refused as exc:
                    print(f"{name}: the API server refused the SGLangServer with spec.strategy "
                          f"{json.dumps(strategy_of(name, args.max_surge, args.steps))}"
                          + (" (spec.strategy.type Canary needs the canary API of issue 18)" if name == "canary"
                             else "") + f":\n  {exc}", file=sys.stderr)
                    status = 2
                    break
                finally:
                    with contextlib.suppress(Refused):
                        kubectl(cluster, "delete", "namespace", ns, "--wait=true", "--timeout=120s")
            if len(runs) > 1:
                print(row(f"{name}-median", {c: statistics.median(r[c] for r in runs) for c in COLUMNS}))
    finally:
        tear_down(op, cluster)
    sys.exit(status)


if __name__ == "__main__":
    main()
