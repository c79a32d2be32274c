"""The tuning modes of ``bench/hostile.py`` (issue 42, "Done when"), beside its healthy servers, and the event loop's
lag it adds to every mode's line.

- :data:`STARVATION_MODE` (``tuning-starvation``): namespace ``alice`` has 2 servers and 2 long Shadow SGLangTunings
  (:func:`long_tuning`: :data:`SECONDS_PER_LEVEL` s per level, 2 repetitions, up to 6 trials, each trial about
  :data:`TRIAL_SECONDS` s), which take both of the operator's running slots (``--max-running-tunings``, default 2);
  once both run a trial, namespace ``bob`` (1 server) creates 1 tuning. Reported: how long bob's waited from its
  creation to its ``status.startedAt``, the boundary of alice's yielding tuning (the ``finishedAt`` of the trial it
  ran when bob's arrived) and bob's start minus that boundary (the "within one trial boundary" figure; the status's
  times are whole seconds). Bob's start takes up to one of alice's trials: the mode is measured for at least
  :data:`MIN_STARVATION_SECONDS` s whatever ``--minutes``, so the yield falls inside the window.
- :data:`FAST_MODE` (``fast-trial``): namespace ``fast`` has a server whose pods answer every streamed request at
  once with one token (the simulator's ``probe_mode: instant``, through ``spec.env``, which a Shadow trial's pod
  inherits); its Shadow tunings (:func:`fast_tuning`: one level of 16 streams, then one of 256, in turn: the
  operator's ``--trial-streams`` default, ``io/trialstreams.py``, allows 256) are created one after another for the
  whole mode, each as soon as the previous ended (a failing trial ends fast). Reported: the requests per second the
  trial pods received (their ``sglang:num_requests_total``, read every :data:`POLL` s from the pod: over the span
  each pod was sent requests, and the highest over one poll), by level, and the trials' verdicts and reasons (a
  pod answering at once must fail its trial as an invalid measurement: short answers).
- :func:`lag_buckets` / :func:`lag_p99`: the 99th percentile of the operator's own
  ``sglang_operator_event_loop_lag_seconds`` histogram over a mode (its buckets read at the start and the end, the
  quantile interpolated within its bucket as PromQL's ``histogram_quantile`` does).
"""

from __future__ import annotations

import datetime as dt
import itertools
import json
import re
import threading
import time
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from e2e.conftest import K8sCluster, wait_for
from e2e.hostile import server
from sglang_operator.api import tuning as tuning_api

STARVATION_MODE = "tuning-starvation"
FAST_MODE = "fast-trial"
ALICE, BOB, FAST = "alice", "bob", "fast"
SECONDS_PER_LEVEL = 60
TRIAL_SECONDS = 5 + 2 * SECONDS_PER_LEVEL
"""One long trial's load: its warm-up and 2 repetitions of its one level (its pod's start not counted)."""
BOB_TIMEOUT = 3 * TRIAL_SECONDS + 120
MIN_STARVATION_SECONDS = 2 * TRIAL_SECONDS + 30
"""Seconds :data:`STARVATION_MODE` is measured at least, whatever ``--minutes``: alice's tunings' start, then up to
one of her trials before bob's starts, inside the measured window."""
FAST_LEVELS = (16, 256)
POLL = 2.0
SIM_PORT = 30000
LAG = "sglang_operator_event_loop_lag_seconds"
TERMINAL = ("Succeeded", "Failed", "Cancelled")


def lag_buckets(port: int) -> dict[float, float]:
    """The cumulative buckets (upper bound → count) of the operator's :data:`LAG` histogram; empty when it has
    none or does not answer."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
            text = r.read().decode()
    except OSError:
        return {}
    return {float(s.labels["le"]): s.value for fam in text_string_to_metric_families(text) if fam.name == LAG
            for s in fam.samples if s.name == LAG + "_bucket"}


def lag_p99(first: dict[float, float], last: dict[float, float]) -> float | None:
    """The 99th percentile (seconds) of the lags observed between two :func:`lag_buckets` reads, interpolated within
    its bucket (over the largest finite bound: that bound); None without observations."""
    bounds = sorted(last)
    counts = [last[b] - first.get(b, 0.0) for b in bounds]
    if not counts or counts[-1] <= 0:
        return None
    rank, lower, below = 0.99 * counts[-1], 0.0, 0.0
    for bound, cum in zip(bounds, counts, strict=True):
        if cum >= rank:
            if bound == float("inf"):
                return lower
            return lower + (bound - lower) * (rank - below) / max(cum - below, 1e-12)
        lower, below = bound, cum
    return lower


def when(stamp: str | None) -> float:
    """An RFC 3339 time as epoch seconds (inf when unset)."""
    return dt.datetime.fromisoformat(stamp).timestamp() if stamp else float("inf")


def long_tuning(name: str, server_name: str) -> dict[str, Any]:
    """A long Shadow SGLangTuning of ``server_name``: trials of :data:`TRIAL_SECONDS` s, up to 6."""
    return {"apiVersion": tuning_api.API_VERSION, "kind": tuning_api.KIND, "metadata": {"name": name},
            "spec": {"serverRef": {"name": server_name}, "parameters": {"numSteps": {"min": 1, "max": 3}},
                     "workload": {"maxOutputTokens": 32, "secondsPerLevel": SECONDS_PER_LEVEL, "warmupSeconds": 5,
                                  "repetitions": 2, "concurrency": [{"level": 1}]},
                     "budget": {"maxTrialCount": 6}}}


def fast_tuning(name: str, server_name: str, level: int) -> dict[str, Any]:
    """A Shadow SGLangTuning of ``server_name`` at one ``level`` (60 s), Failed once a trial failed (2 at most)."""
    return {"apiVersion": tuning_api.API_VERSION, "kind": tuning_api.KIND, "metadata": {"name": name},
            "spec": {"serverRef": {"name": server_name}, "parameters": {"numSteps": {"min": 1, "max": 3}},
                     "objective": {"objectiveMetricName": "outputTokensPerSecond", "concurrency": level},
                     "workload": {"maxOutputTokens": 64, "secondsPerLevel": 60, "warmupSeconds": 5,
                                  "repetitions": 1, "concurrency": [{"level": level}]},
                     "budget": {"maxTrialCount": 2, "maxFailedTrialCount": 1}}}


def tuning_status(k8s: K8sCluster, ns: str, name: str) -> dict[str, Any]:
    got = k8s.run("get", "sglangtuning", name, "-n", ns, "-o", "json", check=False)
    if got.returncode != 0:
        return {}
    return dict(json.loads(got.stdout).get("status") or {})


def servers_ready(k8s: K8sCluster, placed: list[tuple[str, str]], timeout: float = 300) -> None:
    """Until every (namespace, server) of ``placed`` is Ready."""
    wait_for(f"{len(placed)} servers Ready", lambda: all(
        (k8s.get("sglangserver", n, "-n", ns).get("status") or {}).get("phase") == "Ready" for ns, n in placed),
        timeout=timeout, interval=2)


def _namespace(k8s: K8sCluster, ns: str) -> None:
    if k8s.run("get", "namespace", ns, check=False).returncode != 0:
        k8s.create_namespace(ns)


@dataclass
class Starvation:
    """What :func:`starvation_mode`'s thread saw (epoch seconds)."""

    arrived: float | None = None
    started: float | None = None
    boundary: float | None = None
    yielded: str | None = None
    error: str | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def run(self, k8s: K8sCluster) -> None:
        try:
            k8s.apply(long_tuning("a1", "s1"), ALICE)
            k8s.apply(long_tuning("a2", "s2"), ALICE)
            wait_for("both of alice's tunings running a trial", lambda: all(
                any(not t.get("verdict") for t in tuning_status(k8s, ALICE, n).get("trials") or [])
                for n in ("a1", "a2")), timeout=300, interval=1)
            k8s.apply(long_tuning("b1", "s1"), BOB)
            self.arrived = time.time()
            self.started = when(wait_for("bob's tuning started", lambda: tuning_status(k8s, BOB, "b1").get(
                "startedAt"), timeout=BOB_TIMEOUT, interval=0.5))
            for name in ("a2", "a1"):  # the younger first: the one the queue asks to yield
                st = tuning_status(k8s, ALICE, name)
                cond: dict[str, Any] = next((c for c in st.get("conditions") or [] if c["type"] == "Running"), {})
                trials = st.get("trials") or []
                ran = [when(t.get("finishedAt")) for t in trials if when(t.get("startedAt")) <= self.arrived]
                if cond.get("status") == "False" and ran:
                    self.yielded, self.boundary = name, max(max(ran), self.arrived)
                    break
        except Exception as exc:  # reported on the mode's line
            self.error = f"{type(exc).__name__}: {str(exc)[:300]}"
        finally:
            self.done.set()

    def summary(self) -> str:
        if self.arrived is None or self.started is None:
            return f"bob's tuning did not start ({self.error})"
        line = f"bob's tuning waited {self.started - self.arrived:.1f} s from creation to startedAt"
        if self.boundary is None or self.boundary == float("inf"):
            return line + f"; no yielding tuning of alice's found ({self.error or 'none Queued'})"
        return (line + f"; alice's {self.yielded} yielded at its trial boundary {self.boundary - self.arrived:.1f} s "
                f"after bob's arrival; bob started {self.started - self.boundary:+.1f} s after that boundary")


Measure = Callable[[float], tuple[Any, ...]]
Report = Callable[..., None]


def starvation_mode(k8s: K8sCluster, measure: Measure, report: Report, healthy: list[str], minutes: float) -> None:
    """:data:`STARVATION_MODE` (module docstring)."""
    for ns in (ALICE, BOB):
        _namespace(k8s, ns)
    placed = [(ALICE, "s1"), (ALICE, "s2"), (BOB, "s1")]
    for ns, name in placed:
        k8s.apply(server(name), ns)
    servers_ready(k8s, placed)
    seen = Starvation()
    thread = threading.Thread(target=seen.run, args=(k8s,), name="starvation", daemon=True)
    thread.start()
    got = measure(max(60 * minutes, MIN_STARVATION_SECONDS))
    thread.join(BOB_TIMEOUT + 330)
    report(STARVATION_MODE, healthy, None, *got, extra=seen.summary())
    for ns, names in ((ALICE, ("a1", "a2")), (BOB, ("b1",))):
        k8s.run("delete", "sglangtuning", *names, "-n", ns, "--ignore-not-found", "--wait=true", timeout=300,
                check=False)
    for ns, name in placed:
        k8s.run("delete", "sglangserver", name, "-n", ns, "--wait=true", timeout=120, check=False)


def _streamed_requests(ip: str) -> float | None:
    try:
        with urllib.request.urlopen(f"http://{ip}:{SIM_PORT}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return None
    return sum(float(m.group(2)) for m in re.finditer(  # is_streaming from 0.5.23 on; none before
        r'^sglang:num_requests_total(\{[^}]*\})? (\S+)$', text, re.MULTILINE) if 'is_streaming="false"' not in
        (m.group(1) or ""))


@dataclass
class FastTrials:
    """What :func:`fast_trial_mode`'s thread saw: per trial pod, its reads (monotonic time, requests) and level;
    the trials' verdicts and reasons."""

    reads: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    level_of: dict[str, int] = field(default_factory=dict)
    verdicts: Counter[str] = field(default_factory=Counter)
    tunings: int = 0
    error: str | None = None
    stop: threading.Event = field(default_factory=threading.Event)

    def poll_pods(self, k8s: K8sCluster, level_of_tuning: dict[str, int]) -> None:
        for pod in k8s.get("pods", "-n", FAST)["items"]:
            name, ip = pod["metadata"]["name"], (pod.get("status") or {}).get("podIP")
            tuning = name.split("-trial-", 1)[0]
            if "-trial-" not in name or not ip or tuning not in level_of_tuning:
                continue
            n = _streamed_requests(ip)
            if n is not None:
                self.reads.setdefault(name, []).append((time.monotonic(), n))
                self.level_of[name] = level_of_tuning[tuning]

    def run(self, k8s: K8sCluster) -> None:
        levels: dict[str, int] = {}
        try:
            while not self.stop.is_set():
                name, level = f"ft-{self.tunings:03d}", FAST_LEVELS[self.tunings % len(FAST_LEVELS)]
                levels[name] = level
                k8s.apply(fast_tuning(name, "instant", level), FAST)
                self.tunings += 1
                st: dict[str, Any] = {}
                while not self.stop.is_set():
                    self.poll_pods(k8s, levels)
                    st = tuning_status(k8s, FAST, name)
                    if st.get("phase") in TERMINAL:
                        break
                    self.stop.wait(POLL)
                for t in st.get("trials") or []:
                    verdict = t.get("verdict") or "unfinished at the mode's end"
                    self.verdicts[f"{verdict} at {level}: {str(t.get('reason') or '')[:100]}"] += 1
                k8s.run("delete", "sglangtuning", name, "-n", FAST, "--wait=false", check=False)
        except Exception as exc:  # reported on the mode's line
            self.error = f"{type(exc).__name__}: {str(exc)[:300]}"

    def rates(self) -> dict[int, tuple[float, float, float]]:
        """By level: (requests, mean requests per second over the spans the pods were sent requests, the highest
        over one poll)."""
        out: dict[int, list[float]] = {}
        for pod, reads in self.reads.items():
            grew = [(a, b) for a, b in itertools.pairwise(reads) if b[1] > a[1]]
            acc = out.setdefault(self.level_of[pod], [0.0, 0.0, 0.0])
            if not grew:
                continue
            acc[0] += grew[-1][1][1] - grew[0][0][1]
            acc[1] += grew[-1][1][0] - grew[0][0][0]
            acc[2] = max(acc[2], *((b[1] - a[1]) / max(b[0] - a[0], 1e-3) for a, b in grew))
        return {lvl: (n, n / span if span else 0.0, peak) for lvl, (n, span, peak) in sorted(out.items())}

    def summary(self) -> str:
        rates = "; ".join(f"concurrency {lvl}: {n:.0f} requests, {mean:.0f}/s while loaded (highest {peak:.0f}/s "
                          f"over {POLL:g} s)" for lvl, (n, mean, peak) in self.rates().items()) or "no trial load seen"
        verdicts = ", ".join(f"{v} × {k}" for k, v in self.verdicts.most_common()) or "none"
        return (f"{self.tunings} tunings, trial pods {rates}; trials {verdicts}"
                + (f" ({self.error})" if self.error else ""))


def fast_trial_mode(k8s: K8sCluster, measure: Measure, report: Report, healthy: list[str], minutes: float) -> None:
    """:data:`FAST_MODE` (module docstring)."""
    _namespace(k8s, FAST)
    k8s.apply(server("instant", {"PROBE_MODE": "instant"}, hostile=True), FAST)
    servers_ready(k8s, [(FAST, "instant")])
    seen = FastTrials()
    thread = threading.Thread(target=seen.run, args=(k8s,), name="fast-trial", daemon=True)
    thread.start()
    try:
        got = measure(60 * minutes)
    finally:
        seen.stop.set()
        thread.join(120)
    report(FAST_MODE, healthy, None, *got, extra=seen.summary())
    k8s.run("delete", "sglangtunings", "--all", "-n", FAST, "--wait=true", timeout=300, check=False)
    k8s.run("delete", "sglangserver", "instant", "-n", FAST, "--wait=true", timeout=120, check=False)
