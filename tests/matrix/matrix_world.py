"""The neighbour matrix' fake world: the fake API of the control tests (:class:`fakekube.FakeKube`) with a kubelet
that makes every workload's pods Ready as soon as the workload is written (Deployments through a ReplicaSet,
LeaderWorkerSets as groups of a leader and its workers, each with the owner chain the operator checks), fake SGLang
pods behind the operator's HTTP client (``/metrics`` text, ``/server_info``, the probe's stream), a tuning trial's
load measured by the same physics, and a clock the server's loop, the sampler and the pods share.

The physics (what real pods would show; nothing here asks the operator's code what to expect):

- a pod runs the speculative settings of its command line; with ``numSteps`` s it accepts :func:`accept_length`
  ``1 + 0.6 s`` tokens per verify step at rate :func:`accept_rate` ``(L - 1) / (s + 1)`` (0.5.10's formula: accepted
  tokens ÷ draft tokens), and decodes one stream at :func:`decode_speed` ``20 L`` tok/s (20 without speculative
  decoding);
- SGLang 0.5.10 (the sample's release) has no verify counter: the acceptance is only in the gauges
  ``sglang:spec_accept_length`` / ``_rate``, which its scheduler writes every ``--decode-log-interval``
  (:data:`DECODE_LOG_INTERVAL`) decode steps, counted over the pod's life, and which read 0 until the first such
  write, then keep the last value (``../shared/sglang/README.md``, "Refresh semantics");
- the only traffic is the operator's own probe, one pod per interval: an idle replica generates nothing;
- a worker pod of a multi-node group serves no HTTP (only rank 0 does): a scrape or a request sent to it fails;
- under load, a replica (a pod, or a multi-node group) running k requests gives each ``(44 - 4 k) × L / 2.8`` tok/s
  (:func:`per_request`); a trial's level of c requests is spread evenly over the pods it is sent to.
"""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
import itertools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from expo import exposition
from fakekube import FakeKube

from sglang_operator.api.tuning_status import LevelFigures
from sglang_operator.builders import REVISION_LABEL
from sglang_operator.builders.leaderworkerset import (
    GROUP_INDEX_LABEL,
    LEADER_INDEX,
    SET_NAME_LABEL,
    WORKER_INDEX_LABEL,
)
from sglang_operator.io.loadgen import StreamResult
from sglang_operator.io.sglang_http import ScrapeError
from sglang_operator.io.trialbench import TrialMeasurement

NS = "matrix"
"""The namespace of every object of the matrix (its own: the metrics registry is the process's)."""
PROBE_TTFT = 0.1
DECODE_LOG_INTERVAL = 40
"""SGLang's ``--decode-log-interval`` default: decode steps between two writes of the scheduler's gauges."""


def accept_length(steps: int | None) -> float | None:
    return None if steps is None else round(1 + 0.6 * steps, 3)


def accept_rate(steps: int | None) -> float | None:
    length = accept_length(steps)
    return None if steps is None or length is None else round((length - 1) / (steps + 1), 3)


def decode_speed(steps: int | None) -> float:
    return 20.0 * (accept_length(steps) or 1.0)


def per_request(steps: int | None, running: float) -> float:
    """Each request's output tok/s on a replica running ``running`` requests."""
    return max(1.0, (44.0 - 4.0 * running) * (accept_length(steps) or 1.0) / 2.8)


class Clock:
    """The world's time: the server's loop, the sampler and the pods read it; :meth:`advance` moves it."""

    def __init__(self) -> None:
        self.at = dt.datetime.now(dt.UTC).replace(microsecond=0)

    def now(self) -> dt.datetime:
        return self.at

    def advance(self, seconds: float) -> dt.datetime:
        self.at += dt.timedelta(seconds=seconds)
        return self.at


@dataclass
class SGLangPod:
    """One fake SGLang process: what it runs and the counters and gauges it exposes."""

    name: str
    steps: int | None
    serves: bool
    generated: float = 0.0
    decode_steps: float = 0.0
    length_gauge: float = 0.0
    rate_gauge: float = 0.0

    def metrics(self) -> str:
        return exposition(self.generated, None, accept_length=self.length_gauge, accept_rate=self.rate_gauge)

    def decode(self, tokens: int) -> None:
        """One request of ``tokens`` decoded: its steps counted, the gauges written at each log interval passed."""
        self.generated += tokens
        before = self.decode_steps
        self.decode_steps += tokens / (accept_length(self.steps) or 1.0)
        if self.steps is not None and self.decode_steps // DECODE_LOG_INTERVAL > before // DECODE_LOG_INTERVAL:
            self.length_gauge = accept_length(self.steps) or 0.0
            self.rate_gauge = accept_rate(self.steps) or 0.0


def _steps(template: Mapping[str, Any]) -> int | None:
    """``--speculative-num-steps`` of the SGLang container's command line (None: no speculative decoding)."""
    container = template["spec"]["containers"][0]
    argv = [*container.get("command", []), *container.get("args", [])]
    if "--speculative-algorithm" not in argv:
        return None
    return int(argv[argv.index("--speculative-num-steps") + 1]) if "--speculative-num-steps" in argv else 1


@dataclass(frozen=True)
class Wanted:
    """A pod a workload wants: its name, template, labels, controller and whether it serves HTTP (a leader)."""

    name: str
    template: Mapping[str, Any]
    labels: Mapping[str, str]
    owner: dict[str, Any]
    serves: bool


@dataclass
class Kubelet:
    """Makes the pods of every Deployment and LeaderWorkerSet the fake API holds, Ready at once, and tells the
    observer's pod cache (its watch); a workload's pods of another template, or of a deleted workload, go."""

    kube: WorldKube
    clock: Clock
    observer: Any = None
    pods: dict[str, SGLangPod] = field(default_factory=dict)
    """By pod IP."""
    seen: dict[str, int] = field(default_factory=dict)
    """Most pods seen Ready at once per revision label."""
    _ips: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    def _pod(self, want: Wanted) -> dict[str, Any]:
        n = next(self._ips)
        ip = f"10.1.{n // 250}.{n % 250 + 1}"
        rev = str(want.labels.get(REVISION_LABEL, ""))
        at = self.clock.now().isoformat().replace("+00:00", "Z")
        self.pods[ip] = SGLangPod(want.name, _steps(want.template), want.serves)
        return {"kind": "Pod", "metadata": {
            "name": want.name, "namespace": NS, "uid": f"uid-pod-{want.name}-{rev}", "labels": dict(want.labels),
            "ownerReferences": [{**want.owner, "controller": True}]},
            "spec": copy.deepcopy(want.template["spec"]),
            "status": {"phase": "Running", "podIP": ip, "startTime": at,
                       "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": at}],
                       "containerStatuses": [{"name": "sglang", "ready": True, "restartCount": 0,
                                              "state": {"running": {"startedAt": at}}}]}}

    def _owner(self, kind: str, name: str, uid: str, parent: Mapping[str, Any]) -> dict[str, Any]:
        """A ReplicaSet or StatefulSet ``name`` controlled by ``parent`` (stored once), as an owner reference."""
        if self.kube.get(kind, NS, name) is None:
            self.kube.put({"kind": kind, "metadata": {"name": name, "namespace": NS, "uid": uid, "ownerReferences": [
                {"kind": parent["kind"], "name": parent["metadata"]["name"], "uid": parent["metadata"]["uid"],
                 "controller": True}]}})
        return {"kind": kind, "name": name, "uid": uid}

    def _wanted(self) -> dict[str, Wanted]:
        out: dict[str, Wanted] = {}
        for (kind, _, name), obj in list(self.kube.objects.items()):
            if kind == "Deployment":
                template = obj["spec"]["template"]
                rev = template["metadata"]["labels"].get(REVISION_LABEL, "")
                owner = self._owner("ReplicaSet", f"{name}-{rev[:6]}", f"uid-rs-{name}-{rev}", obj)
                for i in range(int(obj["spec"].get("replicas") or 0)):
                    pod = f"{name}-{rev[:6]}-{i}"
                    out[pod] = Wanted(pod, template, template["metadata"]["labels"], owner, True)
            elif kind == "LeaderWorkerSet":
                lwt = obj["spec"]["leaderWorkerTemplate"]
                leader_t, worker_t = lwt.get("leaderTemplate") or lwt["workerTemplate"], lwt["workerTemplate"]
                rev = leader_t["metadata"]["labels"].get(REVISION_LABEL, "")
                sset = self._owner("StatefulSet", name, f"uid-sts-{name}", obj)
                for g in range(int(obj["spec"].get("replicas") or 0)):
                    lws = {SET_NAME_LABEL: name, GROUP_INDEX_LABEL: str(g)}
                    leader = f"{name}-{g}-{rev[:6]}"
                    out[leader] = Wanted(leader, leader_t, {**leader_t["metadata"]["labels"], **lws,
                                                            WORKER_INDEX_LABEL: LEADER_INDEX}, sset, True)
                    group = {"kind": "Pod", "metadata": {"name": leader, "uid": f"uid-pod-{leader}-{rev}"}}
                    wset = self._owner("StatefulSet", f"{leader}-w", f"uid-sts-{leader}-{rev}", group)
                    for w in range(1, int(lwt["size"])):
                        out[f"{leader}-{w}"] = Wanted(f"{leader}-{w}", worker_t, {
                            **worker_t["metadata"]["labels"], **lws, WORKER_INDEX_LABEL: str(w)}, wset, False)
        return out

    def sync(self) -> None:
        """Bring the pods in line with the workloads (the observer's pod cache is told of each change)."""
        wanted = self._wanted()
        live = {n: o for (k, _, n), o in self.kube.objects.items() if k == "Pod"}
        for name, pod in live.items():
            if name not in wanted:
                self.kube.delete("Pod", NS, name)
                self.pods.pop(pod["status"]["podIP"], None)
                if self.observer is not None:
                    self.observer.pod_event("DELETED", pod)
        for name, want in wanted.items():
            if name in live:
                continue
            stored = self.kube.put(self._pod(want))
            if self.observer is not None:
                self.observer.pod_event("ADDED", stored)
        by_rev: dict[str, int] = {}
        for (k, _, _), o in self.kube.objects.items():
            if k == "Pod":
                rev = o["metadata"]["labels"].get(REVISION_LABEL, "")
                by_rev[rev] = by_rev.get(rev, 0) + 1
        for rev, n in by_rev.items():
            self.seen[rev] = max(self.seen.get(rev, 0), n)

    def by_ip(self, ip: str) -> SGLangPod | None:
        return self.pods.get(ip)


class WorldKube(FakeKube):
    """The fake API whose workload writes the :class:`Kubelet` follows at once."""

    kubelet: Kubelet

    async def apply(self, manifest: Mapping[str, Any], dry_run: bool = False) -> None:
        await super().apply(manifest, dry_run)
        self.kubelet.sync()

    async def patch_replicas(self, kind: str, namespace: str, name: str, replicas: int) -> None:
        await super().patch_replicas(kind, namespace, name, replicas)
        self.kubelet.sync()

    async def delete_object(self, kind: str, namespace: str, name: str, uid: str | None = None) -> bool:
        gone = await super().delete_object(kind, namespace, name, uid)
        self.kubelet.sync()
        return gone


def _ip_of(url: str) -> str:
    return url.split("://", 1)[-1].split("/", 1)[0].rsplit(":", 1)[0]


@dataclass
class FakeSGLang:
    """The operator's HTTP reads of the pods, answered by the kubelet's fake SGLang processes (installed by the
    conftest over :class:`~sglang_operator.io.sglang_http.SGLangHTTP` and :func:`~sglang_operator.io.loadgen.
    stream_once`) and a tuning trial's load (:func:`~sglang_operator.io.trialbench.measure_pods`)."""

    kubelet: Kubelet

    def serving(self, url: str) -> SGLangPod:
        pod = self.kubelet.by_ip(_ip_of(url))
        if pod is None or not pod.serves:
            raise ScrapeError("connection", f"GET {url}: connection refused")
        return pod

    async def get(self, url: str, consumer: Any, **_: Any) -> Any:
        pod = self.serving(url)
        if url.endswith("/metrics"):
            body = pod.metrics()
        else:
            body = json.dumps({"speculative_algorithm": "EAGLE" if pod.steps else None,
                               "speculative_num_steps": pod.steps, "speculative_eagle_topk": 1 if pod.steps else None,
                               "speculative_num_draft_tokens": pod.steps + 1 if pod.steps else None,
                               "max_running_requests": 16, "mem_fraction_static": 0.88, "context_length": 131072})
        consumer.feed(body.encode())
        return consumer.finish()

    async def stream_once(self, client: Any, base_url: str, model: str, *, max_tokens: int = 256,
                          **_: Any) -> StreamResult:
        try:
            pod = self.serving(base_url)
        except ScrapeError as err:
            return StreamResult(error=str(err))
        await asyncio.sleep(0)  # a stream yields to the loop
        pod.decode(max_tokens)
        speed = decode_speed(pod.steps)
        return StreamResult(ttft_s=PROBE_TTFT, e2e_s=PROBE_TTFT + (max_tokens - 1) / speed,
                            completion_tokens=max_tokens)

    async def measure_pods(self, http: Any, tuning: Any, server_object: Any, pods: Sequence[Mapping[str, Any]],
                           version: Any, *_: Any, **__: Any) -> TrialMeasurement:
        """A trial's load (:func:`~sglang_operator.io.trialbench.measure_pods`) by the physics: each level's
        requests spread evenly over ``pods``, those sent to a pod that serves no HTTP failed."""
        targets = [self.kubelet.by_ip(str(p["status"]["podIP"])) for p in pods]
        serving = [t for t in targets if t is not None and t.serves]
        levels = []
        for c in tuning.workload.levels():
            sent = [c // len(targets) + (1 if i < c % len(targets) else 0) for i in range(len(targets))]
            ok = [(t, n) for t, n in zip(targets, sent, strict=True) if t is not None and t.serves and n]
            failed = sum(n for t, n in zip(targets, sent, strict=True) if t is None or not t.serves)
            if not ok:
                levels.append(LevelFigures(concurrency=c, requests=0, failed_requests=failed or c))
                continue
            speeds = [(per_request(t.steps, n), n) for t, n in ok]
            output = sum(s * n for s, n in speeds)
            steps = ok[0][0].steps
            levels.append(LevelFigures(
                concurrency=c, output_tokens_per_second=round(output, 3),
                decode_tokens_per_second=round(output / sum(n for _, n in ok), 3),
                accept_length=accept_length(steps), accept_rate=accept_rate(steps),
                requests=10 * sum(n for _, n in ok), failed_requests=10 * failed))
        if not serving:
            return TrialMeasurement(levels, failure="every request failed")
        return TrialMeasurement(levels)
