"""The operator's own ``/metrics`` (prometheus-client, default registry; ``sglang-operator run --metrics-port``).

Per server and revision (labels ``namespace``, ``sglang_server``, ``revision``) the latest figures of the sampler
(:class:`~sglang_operator.decisions.sampling.model.Sample`): speeds, accept length and rate and latency quantiles
are set from Measured samples only, so they keep the last measured value through idle or failed intervals, with
``sglang_operator_server_sample_timestamp_seconds`` telling how old it is; request counts and KV-cache usage are
set from every sample, and removed by a sample that did not read them (no pod scraped: KEDA's built-in queries,
:mod:`sglang_operator.builders.autoscaling`, read them, and an absent series holds the replica count where a stale
one would move it). Series of a retired revision (no pod left) or a deleted server are removed.
The speculative settings SGLang resolved for the serving revision (``status.effective``, its ``/server_info``):
``sglang_operator_server_speculative_num_steps`` and ``..._num_draft_tokens``, one revision per server (the one in
``status.revision``), for releases whose own ``/metrics`` has no ``sglang:spec_num_steps`` (0.5.10).
The operator's health: scrape errors by endpoint and reason, scrape durations, reconcile results, servers by
phase, the event loop's lag (:func:`watch_loop_lag`); prometheus-client adds ``process_*`` (RSS, CPU) and
``python_*`` series. Every series is listed in
``docs/metrics.md``. They are served, with ``/readyz`` (:mod:`sglang_operator.process.readiness`), by
:func:`sglang_operator.process.metrics_http.serve`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from prometheus_client import Counter, Gauge, Histogram

from sglang_operator.decisions.sampling.model import Figures, Sample, SampleKind
from sglang_operator.io.scrape_metrics import DUPLICATE_SAMPLES as DUPLICATE_SAMPLES
from sglang_operator.io.scrape_metrics import SCRAPE_DURATION as SCRAPE_DURATION
from sglang_operator.io.scrape_metrics import SCRAPE_ERRORS as SCRAPE_ERRORS
from sglang_operator.io.scrape_metrics import count_scrape_error as count_scrape_error

SERVER_LABELS = ("namespace", "sglang_server", "revision")
ANALYSIS_PHASES = ("WarmingUp", "Verifying", "Stable", "RollingBack", "RolledBack", "Paused")

RECONCILE = Counter(
    "sglang_operator_reconcile", "Reconciliations of SGLangServers by result (applied, invalid, refused, error).",
    ["result"],
)
EVENT_LOOP_LAG = Histogram(
    "sglang_operator_event_loop_lag_seconds", "How late the operator's event loop (kopf's: every server's "
    "observation, the watches, the Lease renewal) ran a timer, seconds: a sleep of 0.25 s measured every 0.25 s.",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0))
LAG_PERIOD_SECONDS = 0.25
"""The sleep :func:`watch_loop_lag` times, seconds."""
SERVERS = Gauge("sglang_operator_servers", "SGLangServers the operator tracks, by status.phase.", ["phase"])
SAMPLES = Counter(
    "sglang_operator_samples", "Samples taken per server and revision, by kind (Measured, Inconclusive, Error).",
    [*SERVER_LABELS, "kind"],
)

ACCEPT_LENGTH = Gauge("sglang_operator_server_accept_length", "Mean acceptance length (tokens per verify step) over "
                      "the last measured interval.", SERVER_LABELS)
ACCEPT_RATE = Gauge("sglang_operator_server_accept_rate", "Speculative acceptance rate, 0..1 (SGLang's "
                    "sglang:spec_accept_rate; its formula differs between releases).", SERVER_LABELS)
GENERATION_TPS = Gauge("sglang_operator_server_generation_tokens_per_second", "Aggregate generation throughput, "
                       "tok/s, over the revision's pods.", SERVER_LABELS)
DECODE_TPS = Gauge("sglang_operator_server_decode_tokens_per_second", "Per-request decode speed, tok/s (the probe's "
                   "single stream, or 1 / mean inter-token latency).", SERVER_LABELS)
RUNNING = Gauge("sglang_operator_server_running_requests", "Running requests, summed over the revision's pods.",
                SERVER_LABELS)
QUEUED = Gauge("sglang_operator_server_queued_requests", "Queued requests, summed over the revision's pods.",
               SERVER_LABELS)
KV_USAGE = Gauge("sglang_operator_server_kv_cache_usage", "KV-cache token pool usage, 0..1, max over pods.",
                 SERVER_LABELS)
KV_USAGE_SUMMED = Gauge("sglang_operator_server_kv_cache_usage_summed", "KV-cache token pool usage of each pod "
                        "(its fullest rank), summed over the revision's pods, 0..pods (autoscaling's kvCacheUsage).",
                        SERVER_LABELS)
TTFT = Gauge("sglang_operator_server_time_to_first_token_seconds", "Time to first token over the last measured "
             "interval, seconds, by quantile (0.5, 0.95).", [*SERVER_LABELS, "quantile"])
ITL = Gauge("sglang_operator_server_inter_token_latency_seconds", "Inter-token latency over the last measured "
            "interval, seconds, by quantile (0.5, 0.95).", [*SERVER_LABELS, "quantile"])
ANALYSIS_PHASE = Gauge("sglang_operator_server_analysis_phase", "1 for the rollback analysis phase the server is "
                       "in (WarmingUp, Verifying, Stable, RollingBack, RolledBack, Paused), 0 for the others.",
                       ["namespace", "sglang_server", "phase"])
BASELINE_TPS = Gauge("sglang_operator_server_baseline_tokens_per_second", "The stable revision's baseline decode "
                     "speed, tok/s (median of its valid samples), that new revisions are judged by.",
                     ["namespace", "sglang_server"])
BASELINE_ACCEPT = Gauge("sglang_operator_server_baseline_accept_length", "The stable revision's baseline "
                        "acceptance length (median of its valid samples).", ["namespace", "sglang_server"])
STABLE_INFO = Gauge("sglang_operator_server_stable_revision_info", "1 for the server's stable (last known-good) "
                    "revision.", ["namespace", "sglang_server", "stable_revision"])
STABLE_REGRESSION_TPS = Gauge("sglang_operator_server_stable_regression_tokens_per_second", "While the stable "
                              "revision fails its own baseline (condition StableRegressed): its current decode speed, "
                              "tok/s (median of the measured samples of the current failing run); absent otherwise.",
                              ["namespace", "sglang_server"])
STABLE_REGRESSION_ACCEPT = Gauge("sglang_operator_server_stable_regression_accept_length", "While the stable "
                                 "revision fails its own baseline: its current acceptance length (same samples); "
                                 "absent otherwise.", ["namespace", "sglang_server"])
ROLLBACKS = Counter("sglang_operator_rollbacks", "Automatic rollbacks to the stable revision.",
                    ["namespace", "sglang_server"])
SPEC_NUM_STEPS = Gauge("sglang_operator_server_speculative_num_steps", "speculative_num_steps SGLang resolved for "
                       "the serving revision (its /server_info, status.effective.numSteps).", SERVER_LABELS)
SPEC_NUM_DRAFT_TOKENS = Gauge("sglang_operator_server_speculative_num_draft_tokens", "speculative_num_draft_tokens "
                              "SGLang resolved for the serving revision (its /server_info, "
                              "status.effective.numDraftTokens; with eagle_topk 1 it forces num_steps + 1).",
                              SERVER_LABELS)
SAMPLE_TIMESTAMP = Gauge("sglang_operator_server_sample_timestamp_seconds", "End of the last Measured interval, "
                         "Unix seconds (how old the figures above are).", SERVER_LABELS)

_Getter = Callable[[Figures], float | None]
_MEASURED: tuple[tuple[Gauge, _Getter], ...] = (
    (ACCEPT_LENGTH, lambda f: f.accept_length),
    (ACCEPT_RATE, lambda f: f.accept_rate),
    (GENERATION_TPS, lambda f: f.generation_tokens_per_second),
    (DECODE_TPS, lambda f: f.decode_tokens_per_second),
)
_LOAD: tuple[tuple[Gauge, _Getter], ...] = (
    (RUNNING, lambda f: f.running_requests),
    (QUEUED, lambda f: f.queued_requests),
    (KV_USAGE, lambda f: f.kv_cache_usage),
    (KV_USAGE_SUMMED, lambda f: f.kv_cache_usage_summed),
)
_QUANTILED: tuple[tuple[Gauge, tuple[tuple[str, _Getter], ...]], ...] = (
    (TTFT, (("0.5", lambda f: f.ttft_p50_seconds), ("0.95", lambda f: f.ttft_p95_seconds))),
    (ITL, (("0.5", lambda f: f.itl_p50_seconds), ("0.95", lambda f: f.itl_p95_seconds))),
)
_PER_REVISION: tuple[Gauge | Counter, ...] = (
    *(g for g, _ in _MEASURED), *(g for g, _ in _LOAD), SAMPLE_TIMESTAMP,
)


TUNING_LABELS = ("namespace", "sglang_tuning")
TUNING_TRIALS = Counter("sglang_operator_tuning_trials", "Finished trials of SGLangTunings, by verdict (Completed, "
                        "Failed).", [*TUNING_LABELS, "verdict"])
TUNING_TRIAL_OBJECTIVE = Gauge("sglang_operator_tuning_trial_objective", "The objective a completed trial of an "
                               "SGLangTuning measured (tok/s), per trial and its settings (steps/topk/draft tokens).",
                               [*TUNING_LABELS, "trial", "settings"])
TUNING_BEST_SPEEDUP = Gauge("sglang_operator_tuning_best_speedup", "The recommended point's output tok/s ÷ the "
                            "control trial's (no speculative decoding), per concurrency level ('all': overall).",
                            [*TUNING_LABELS, "concurrency"])
TUNINGS = Counter("sglang_operator_tunings", "SGLangTunings ended, by phase (Succeeded, Failed, Cancelled).",
                  ["phase"])
_tuning_series: dict[tuple[str, str], set[tuple[Gauge, tuple[str, ...]]]] = {}


def count_tuning_trial(namespace: str, tuning: str, verdict: str, trial: str, settings: str,
                       objective: float | None) -> None:
    """Count a finished trial of SGLangTuning ``namespace/tuning`` and, when completed, export its objective
    (tok/s). Labels are bounded: at most ``api.tuning_status.MAX_TRIAL_RECORDS`` trials per tuning."""
    TUNING_TRIALS.labels(namespace, tuning, verdict).inc()
    if objective is not None:
        labels = (namespace, tuning, trial, settings)
        TUNING_TRIAL_OBJECTIVE.labels(*labels).set(objective)
        _tuning_series.setdefault((namespace, tuning), set()).add((TUNING_TRIAL_OBJECTIVE, labels))


def set_tuning_speedups(namespace: str, tuning: str, speedups: Mapping[str, float]) -> None:
    """Export the recommendation's speedup per concurrency level (``all``: overall)."""
    for level, value in speedups.items():
        labels = (namespace, tuning, level)
        TUNING_BEST_SPEEDUP.labels(*labels).set(value)
        _tuning_series.setdefault((namespace, tuning), set()).add((TUNING_BEST_SPEEDUP, labels))


def count_tuning(phase: str) -> None:
    """Count an SGLangTuning that ended in ``phase``."""
    TUNINGS.labels(phase).inc()


def forget_tuning(namespace: str, tuning: str) -> None:
    """Remove the series of a deleted SGLangTuning (its trial counters included)."""
    for metric, labels in _tuning_series.pop((namespace, tuning), set()):
        _discard(metric, labels)
    for verdict in ("Completed", "Failed"):
        _discard(TUNING_TRIALS, (namespace, tuning, verdict))


async def watch_loop_lag(period: float = LAG_PERIOD_SECONDS,
                         observe: Callable[[float], None] = EVENT_LOOP_LAG.observe) -> None:
    """Until cancelled: sleep ``period`` seconds on the running loop and ``observe`` how much later than asked it
    woke up (seconds, never negative; default :data:`EVENT_LOOP_LAG`). A loop held by one callback for 0.2 s shows
    as a lag of up to 0.2 s."""
    loop = asyncio.get_running_loop()
    while True:
        started = loop.time()
        await asyncio.sleep(period)
        observe(max(0.0, loop.time() - started - period))


def count_reconcile(result: str) -> None:
    """Count one reconciliation by ``result`` (applied, invalid, refused, error)."""
    RECONCILE.labels(result).inc()


def set_servers(phases: Iterable[str | None], known: Iterable[str] = ()) -> None:
    """Set ``sglang_operator_servers{phase}`` from the tracked servers' phases (``None`` → ``Unknown``); every phase
    in ``known`` is exported, 0 when no server has it, so a phase that empties reads 0, not stale."""
    counts = dict.fromkeys([*known, "Unknown"], 0)  # Unknown too: a server deleted before its first status
    for phase in phases:
        key = phase or "Unknown"
        counts[key] = counts.get(key, 0) + 1
    for phase, n in counts.items():
        SERVERS.labels(phase).set(n)


class ServerSeries:
    """Which server and revision series exist, so retired and deleted ones can be removed."""

    def __init__(self) -> None:
        self._revisions: dict[tuple[str, str], set[str]] = {}
        self._kinds: dict[tuple[str, str, str], set[str]] = {}
        self._stable: dict[tuple[str, str], str] = {}
        self._rollbacks: dict[tuple[str, str], set[Any]] = {}
        self._exported: dict[tuple[str, str], tuple[Any, ...]] = {}
        self._effective: dict[tuple[str, str], tuple[str, int | None, int | None]] = {}

    def export(self, namespace: str, server: str, samples: Sequence[Sample]) -> None:
        """Export this interval's samples of one server (one per live revision); the series of revisions without
        a sample (no pod left) are removed."""
        key = (namespace, server)
        live = {s.revision for s in samples}
        for revision in self._revisions.get(key, set()) - live:
            self._remove(namespace, server, revision)
        self._revisions[key] = live
        for s in samples:
            self._export_one(namespace, server, s)

    def export_analysis(self, namespace: str, server: str, state: Any) -> None:
        """Export the rollback analysis of one server (a ``decisions.rollback_state.RollbackState``): phase, baseline,
        stable revision; ``sglang_operator_rollbacks_total`` grows by the rollbacks recorded since last seen (from
        0 when the server is first seen: the operator counts what it did, as a restart resets counters)."""
        key = (namespace, server)
        a = state.analysis
        phase = a.phase if a is not None else None
        base = state.baseline
        reg = a.stable_regression if a is not None and a.revision == state.stable_revision else None
        regression = (reg.tokens_per_second, reg.accept_length) if reg is not None else (None, None)
        exported = (phase, base.tokens_per_second if base else None, base.accept_length if base else None,
                    state.stable_revision, tuple(r.at for r in state.rollbacks), regression)
        if self._exported.get(key) == exported:  # most observations: nothing moved
            return
        self._exported[key] = exported
        for gauge, value in zip((STABLE_REGRESSION_TPS, STABLE_REGRESSION_ACCEPT), regression, strict=True):
            if value is None:
                _discard(gauge, key)
            else:
                gauge.labels(namespace, server).set(value)
        for p in ANALYSIS_PHASES:
            ANALYSIS_PHASE.labels(namespace, server, p).set(1 if p == phase else 0)
        if state.baseline is not None:
            BASELINE_TPS.labels(namespace, server).set(state.baseline.tokens_per_second)
            if state.baseline.accept_length is not None:
                BASELINE_ACCEPT.labels(namespace, server).set(state.baseline.accept_length)
        old = self._stable.get(key)
        if old is not None and old != state.stable_revision:
            _discard(STABLE_INFO, (namespace, server, old))
        if state.stable_revision is not None:
            STABLE_INFO.labels(namespace, server, state.stable_revision).set(1)
            self._stable[key] = state.stable_revision
        stamps = {r.at for r in state.rollbacks}
        seen = self._rollbacks.get(key)
        counter = ROLLBACKS.labels(namespace, server)
        if seen is not None:
            counter.inc(len(stamps - seen))
        self._rollbacks[key] = stamps if seen is None else seen | stamps

    def export_effective(self, namespace: str, server: str, revision: str,
                         settings: Mapping[str, Any] | None) -> None:
        """Export the speculative settings SGLang resolved for ``revision``, the serving one (``settings``:
        ``status.effective`` keys, ``numSteps``, ``numDraftTokens``; None or missing keys: not read yet). The series
        of the server's previous serving revision are removed, so each server has at most one."""
        key = (namespace, server)
        wanted = (revision, _int(settings, "numSteps"), _int(settings, "numDraftTokens"))
        old = self._effective.get(key)
        if old == wanted:
            return
        if old is not None:  # a value gone, or another revision serving: its series go first
            for gauge in (SPEC_NUM_STEPS, SPEC_NUM_DRAFT_TOKENS):
                _discard(gauge, (namespace, server, old[0]))
        for gauge, value in ((SPEC_NUM_STEPS, wanted[1]), (SPEC_NUM_DRAFT_TOKENS, wanted[2])):
            if value is not None:
                gauge.labels(namespace, server, revision).set(value)
        self._effective[key] = wanted

    def forget(self, namespace: str, server: str) -> None:
        """Remove every series of a deleted server."""
        effective = self._effective.pop((namespace, server), None)
        if effective is not None:
            for gauge in (SPEC_NUM_STEPS, SPEC_NUM_DRAFT_TOKENS):
                _discard(gauge, (namespace, server, effective[0]))
        for p in ANALYSIS_PHASES:
            _discard(ANALYSIS_PHASE, (namespace, server, p))
        for metric in (BASELINE_TPS, BASELINE_ACCEPT, ROLLBACKS, STABLE_REGRESSION_TPS, STABLE_REGRESSION_ACCEPT):
            _discard(metric, (namespace, server))
        stable = self._stable.pop((namespace, server), None)
        if stable is not None:
            _discard(STABLE_INFO, (namespace, server, stable))
        self._rollbacks.pop((namespace, server), None)
        self._exported.pop((namespace, server), None)
        for revision in self._revisions.pop((namespace, server), set()):
            self._remove(namespace, server, revision)

    def _export_one(self, namespace: str, server: str, s: Sample) -> None:
        labels = (namespace, server, s.revision)
        SAMPLES.labels(*labels, s.kind.value).inc()
        self._kinds.setdefault(labels, set()).add(s.kind.value)
        f = s.figures
        for gauge, get in _LOAD:  # a figure the sample did not read is no load: its series goes (autoscaling)
            value = get(f)
            if value is not None:
                gauge.labels(*labels).set(value)
            else:
                _discard(gauge, labels)
        if s.kind is not SampleKind.MEASURED:
            return
        for gauge, get in _MEASURED:
            value = get(f)
            if value is not None:
                gauge.labels(*labels).set(value)
        for gauge, quantiles in _QUANTILED:
            for q, get in quantiles:
                value = get(f)
                if value is not None:
                    gauge.labels(*labels, q).set(value)
        SAMPLE_TIMESTAMP.labels(*labels).set(s.end.timestamp())

    def _remove(self, namespace: str, server: str, revision: str) -> None:
        labels = (namespace, server, revision)
        for metric in _PER_REVISION:
            _discard(metric, labels)
        for gauge, quantiles in _QUANTILED:
            for q, _get in quantiles:
                _discard(gauge, (*labels, q))
        for kind in self._kinds.pop(labels, set()):
            _discard(SAMPLES, (*labels, kind))


def _int(settings: Mapping[str, Any] | None, key: str) -> int | None:
    value = (settings or {}).get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _discard(metric: Gauge | Counter, labels: tuple[str, ...]) -> None:
    with contextlib.suppress(KeyError):
        metric.remove(*labels)
