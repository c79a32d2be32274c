"""Hostile SGLang pods and clients against a running operator (issue 16), shared by ``e2e/tests/test_hostile.py`` and
``bench/hostile.py``: the hostile modes as SGLangServers of the simulator (its faults set through ``spec.env``,
``sglang_sim.faults``), idle TCP clients of the operator's metrics port, and the reads of what the operator shows
(its ``/metrics``, its process in ``/proc``).
"""

from __future__ import annotations

import copy
import itertools
import os
import selectors
import socket
import threading
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from e2e.policies import GOOD, sample


@dataclass(frozen=True)
class Mode:
    """A hostile pod: the simulator's ``faults`` (``SGLANG_SIM_FAULT_<KEY>`` = value), and the scrape error the
    operator counts for it (``endpoint``, ``reason`` of ``sglang_operator_scrape_errors_total``; both empty when the
    outcome is not an error: the ``/server_info`` string is cut, not refused)."""

    faults: dict[str, str]
    endpoint: str
    reason: str
    what: str


MODES: dict[str, Mode] = {
    "endless-line": Mode({"PROBE_MODE": "endless_line"}, "probe", "probe_line_too_long",
                         "the probe's stream is one data: line of 1 GiB"),
    "tiny-chunks": Mode({"PROBE_MODE": "tiny_chunks"}, "probe", "probe_too_many_chunks",
                        "the probe's stream is 5 000 000 chunks of one character"),
    "long-label": Mode({"METRICS_MODE": "long_label", "METRICS_LABEL_MB": "7"}, "metrics", "label_value_too_long",
                       "/metrics has a 7 MiB label value"),
    "many-series": Mode({"METRICS_MODE": "many_series", "METRICS_SERIES": "100000"}, "metrics", "too_many_samples",
                        "/metrics has 100 000 series of a gauge the sampler reads"),
    "server-info": Mode({"SERVER_INFO_STRING_MB": "1"}, "", "",
                        "/server_info reports a 1 MiB speculative_algorithm"),
}
"""The hostile pods of issue 16's "Bad input" list, by SGLangServer name."""
IDLE_MODE = "idle-connections"
"""The hostile client: idle TCP connections to the operator's metrics port (:class:`IdleClients`)."""
FAST_SIM = [{"name": "SGLANG_SIM_TIME_SCALE", "value": "20"}]
"""``spec.env``: the simulator at 20 × speed (the probe's 64 tokens take milliseconds)."""
TUNINGS_MODE = "missing-server-tunings"
"""The hostile tenant of issue 31: :data:`TUNINGS` small SGLangTunings naming an SGLangServer that does not exist
(:func:`orphan_tunings`)."""
TUNINGS = 600
MISSING_SERVER = "no-such-server"
HOSTILE_ERROR_THRESHOLD = 1000
"""``spec.rollback.errorThreshold`` of a hostile server: never Paused, so ``status.analysis.lastSample`` names each
interval's error."""


def server(name: str, faults: dict[str, str] | None = None, *, hostile: bool = False) -> dict[str, Any]:
    """The known-good sample as SGLangServer ``name``: the fast policy (``e2e.policies``), the fast simulator, requests
    of 0.5 CPU and 2Gi (the fake kubelet enforces neither), and the simulator's ``faults``; ``hostile``: with
    :data:`HOSTILE_ERROR_THRESHOLD`."""
    obj = sample(GOOD, {"errorThreshold": HOSTILE_ERROR_THRESHOLD} if hostile else None)
    obj["metadata"] = {"name": name}
    obj["spec"]["env"] += copy.deepcopy(FAST_SIM) + [{"name": f"SGLANG_SIM_FAULT_{k}", "value": v}
                                                     for k, v in (faults or {}).items()]
    obj["spec"]["resources"] = {"cpu": "500m", "memory": "2Gi"}
    return obj


def orphan_tunings(count: int = TUNINGS, server_name: str = MISSING_SERVER) -> list[dict[str, Any]]:
    """``count`` small SGLangTunings ``orphan-NNN`` naming SGLangServer ``server_name`` (absent): what one
    namespace's ``edit`` user can create at will."""
    return [{"apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangTuning",
             "metadata": {"name": f"orphan-{i:03d}"},
             "spec": {"serverRef": {"name": server_name}, "parameters": {"numSteps": {"min": 1, "max": 3}},
                      "workload": {"secondsPerLevel": 5, "concurrency": [{"level": 1}]},
                      "budget": {"maxTrialCount": 4}}} for i in range(count)]


def tunings_path(namespace: str) -> str:
    """The API path of the SGLangTunings of ``namespace`` (``kubectl delete --raw`` on it deletes them all in one
    request, as a namespace's deletion does, without kubectl's own one-by-one deletes and waits)."""
    return f"/apis/sglang-operator.io/v1alpha1/namespaces/{namespace}/sglangtunings"


def proc_fields(pid: int) -> dict[str, str]:
    """``/proc/<pid>/status`` as a dict (values as written, e.g. ``"123456 kB"``)."""
    return {k: v.strip() for k, v in (line.split(":", 1) for line in
                                      Path(f"/proc/{pid}/status").read_text().splitlines())}


def rss_mib(pid: int) -> tuple[float, float, int]:
    """(VmRSS, VmHWM, i.e. the peak RSS, in MiB; threads) of process ``pid``."""
    f = proc_fields(pid)
    return int(f["VmRSS"].split()[0]) / 1024, int(f["VmHWM"].split()[0]) / 1024, int(f["Threads"])


def reset_peak(pid: int) -> bool:
    """Reset process ``pid``'s VmHWM to its current RSS (``/proc/<pid>/clear_refs`` ``5``, Linux ≥ 4.0); False when
    not allowed (then VmHWM is the peak since the process started)."""
    try:
        Path(f"/proc/{pid}/clear_refs").write_text("5")
    except OSError:
        return False
    return True


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@dataclass
class Reading:
    """One read of the operator's ``/metrics`` at ``at`` (monotonic seconds): ``samples`` of the namespace by
    (server, kind) (``sglang_operator_samples_total``, revisions summed) and ``errors`` by (endpoint, reason)
    (``sglang_operator_scrape_errors_total``)."""

    at: float
    samples: dict[tuple[str, str], float]
    errors: dict[tuple[str, str], float]

    def count(self, name: str, error: bool = False) -> float:
        """Samples of server ``name``: its Error samples (``error``) or all the others."""
        return sum(v for (n, kind), v in self.samples.items() if n == name and (kind == "Error") == error)


def read_metrics(port: int, namespace: str) -> Reading:
    """:class:`Reading` of the operator whose metrics port is ``port``. Raises ``OSError`` when it does not answer."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as r:
        text = r.read().decode()
    samples: dict[tuple[str, str], float] = {}
    errors: dict[tuple[str, str], float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            if s.name == "sglang_operator_samples_total" and s.labels.get("namespace") == namespace:
                key = (s.labels["sglang_server"], s.labels["kind"])
                samples[key] = samples.get(key, 0.0) + s.value
            elif s.name == "sglang_operator_scrape_errors_total":
                errors[(s.labels["endpoint"], s.labels["reason"])] = s.value
    return Reading(time.monotonic(), samples, errors)


def error_deltas(first: Reading, last: Reading) -> dict[tuple[str, str], float]:
    """Scrape errors counted between two readings, by (endpoint, reason); only those that grew."""
    out = {key: v - first.errors.get(key, 0.0) for key, v in last.errors.items()}
    return {k: v for k, v in out.items() if v > 0}


def gaps(readings: list[Reading], name: str) -> list[tuple[float, float]]:
    """The spans (start, end: monotonic seconds) between consecutive moments at which server ``name``'s sample count
    (any kind) grew, the first and last reading counting as such moments."""
    grew, prev = [readings[0].at], None
    for r in readings:
        n = r.count(name) + r.count(name, error=True)
        if prev is not None and n > prev:
            grew.append(r.at)
        prev = n
    grew.append(readings[-1].at)
    return list(itertools.pairwise(grew))


def longest_gap(readings: list[Reading], name: str) -> float:
    """The longest of :func:`gaps`, seconds."""
    return max(b - a for a, b in gaps(readings, name))


@dataclass
class StallMeter:
    """How long this machine kept a runnable thread waiting: :meth:`run` (in a thread, until ``stop`` is set) sleeps
    ``tick`` seconds in a loop and records every wake-up more than ``slack`` seconds late as (monotonic time of the
    wake-up, seconds late). On a machine loaded past its cores (the other test worker, its simulators, anything
    else) the operator and the test's own reader are kept waiting the same way, which stretches the gaps between
    samples without the operator skipping a tick: :meth:`late_between` is what a gap may exceed its bound by."""

    tick: float = 0.05
    slack: float = 0.05
    stalls: list[tuple[float, float]] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        while not self.stop.is_set():
            before = time.monotonic()
            time.sleep(self.tick)
            late = time.monotonic() - before - self.tick
            if late > self.slack:
                self.stalls.append((time.monotonic(), late))

    def start(self) -> threading.Thread:
        t = threading.Thread(target=self.run, name="stall-meter", daemon=True)
        t.start()
        return t

    def late_between(self, start: float, end: float) -> float:
        """Seconds of stall whose wake-up fell in [``start``, ``end``]."""
        return sum(late for at, late in self.stalls if start <= at <= end)

    def longest(self) -> float:
        """The longest stall recorded, seconds (0 when none)."""
        return max((late for _, late in self.stalls), default=0.0)

    def total(self) -> float:
        """All the stall recorded, seconds."""
        return sum(late for _, late in self.stalls)


def gaps_over(readings: list[Reading], name: str, bound: float, meter: StallMeter) -> list[tuple[float, float]]:
    """The gaps (length, stall inside it), seconds, of server ``name`` longer than ``bound`` plus the machine's stall
    (:class:`StallMeter`) inside them: the intervals the operator skipped on its own."""
    out = []
    for a, b in gaps(readings, name):
        stall = meter.late_between(a, b)
        if b - a > bound + stall:
            out.append((b - a, stall))
    return out


@dataclass
class IdleClients:
    """Keeps ``count`` idle TCP connections to ``port`` on loopback, sending nothing; each one the server closes is
    recorded (``closed_after``: its age in seconds; ``refused`` when the server answered something first, i.e. its
    503 of the connection cap) and opened again at once. :meth:`run` in a thread until ``stop`` is set;
    ``oldest_at_end``: the age of the oldest connection still open then, seconds."""

    port: int
    count: int
    stop: threading.Event = field(default_factory=threading.Event)
    closed_after: list[float] = field(default_factory=list)
    refused: int = 0
    most_open: int = 0
    oldest_at_end: float = 0.0
    error: BaseException | None = None

    def run(self) -> None:
        sel = selectors.DefaultSelector()
        try:
            while not self.stop.is_set():
                while len(sel.get_map()) < self.count:
                    s = socket.create_connection(("127.0.0.1", self.port), timeout=5)
                    s.setblocking(False)
                    sel.register(s, selectors.EVENT_READ, time.monotonic())
                self.most_open = max(self.most_open, len(sel.get_map()))
                for key, _ in sel.select(timeout=0.2):
                    sock: socket.socket = key.fileobj  # type: ignore[assignment]
                    try:
                        data = sock.recv(4096)
                    except (ConnectionResetError, BlockingIOError):
                        data = b""
                    if data:
                        self.refused += 1
                    else:
                        self.closed_after.append(time.monotonic() - key.data)
                    sel.unregister(sock)
                    sock.close()
        except BaseException as exc:  # reported by the caller
            self.error = exc
        finally:
            now = time.monotonic()
            self.oldest_at_end = max((now - k.data for k in sel.get_map().values()), default=0.0)
            for key in list(sel.get_map().values()):
                key.fileobj.close()  # type: ignore[union-attr]
            sel.close()

    def start(self) -> threading.Thread:
        """Run in a daemon thread (returned)."""
        thread = threading.Thread(target=self.run, name="idle-clients", daemon=True)
        thread.start()
        return thread

    def summary(self) -> str:
        """One line: closed connections and their ages, refused, most open at once."""
        ages = self.closed_after
        return (f"{len(ages)} idle connections closed by the operator (after {min(ages, default=0):.1f}-"
                f"{max(ages, default=0):.1f} s), {self.refused} refused, {self.most_open} open at most")
