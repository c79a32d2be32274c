"""The sampler (I/O glue): every interval, scrape every Ready pod of a server, probe one pod per revision, and turn
the previous and current scrapes into one :class:`~sglang_operator.decisions.sampling.model.Sample` per revision
(:func:`~sglang_operator.decisions.sampling.compute.compute_sample`).

- Scrapes share the operator's one :class:`~sglang_operator.io.sglang_http.SGLangHTTP` (keep-alive,
  per-target deadline, bounded concurrency) and are read under the operator's
  :class:`~sglang_operator.decisions.sampling.limits.ScrapeLimits` (body size, samples, labels, label value
  length), label sets through each pod's own bounded
  :class:`~sglang_operator.decisions.sampling.cache.SeriesCache` (dropped with the pod); each is counted in
  ``sglang_operator_scrape_duration_seconds`` and, when it fails, in
  ``sglang_operator_scrape_errors_total{endpoint="metrics", reason}``.
- Signal ``probe``: after the scrape that ends an interval, one probe request (the probe prompt, greedy, streamed,
  with the API key when one is set; :func:`sglang_operator.io.loadgen.stream_once`) goes to a Ready pod of each
  revision: round robin, except that on a speculative server it stays on a pod until that pod's speculative gauges
  were written once (:mod:`sglang_operator.decisions.sampling.probing`); the next interval collects its
  single-stream decode speed, so the probe's tokens and the counters cover the same interval. A probe never
  outlives its interval, and its answer is read under the operator's
  :class:`~sglang_operator.decisions.sampling.limits.ProbeLimits` (a breach is counted under
  ``{endpoint="probe", reason}`` with the limit's name, e.g. ``probe_line_too_long``).
- A pod that was deleted or left Ready while it was scraped is "vanished": its failure is neither an Error
  sample nor a counted scrape error.
- Off the loop: the loop keeps only the wanted lines of a body
  (:class:`~sglang_operator.decisions.sampling.parse.KeptFilter`, at C speed); their parse runs in a worker process
  (:class:`~sglang_operator.io.parse_pool.ParsePool`, ``ScrapeLimits.parse_workers``), one pod of a server at a time,
  so one server's pods never fill the pool while others wait. The parse CPU of a server's pods is summed per sample
  (``sglang_operator_scrape_parse_cpu_seconds``); over ``ScrapeLimits.cpu_budget_seconds`` the server is backed off
  (:mod:`sglang_operator.decisions.sampling.budget`, kept in :attr:`SamplerState.cost`: it is not due until then).
  No server is sampled more often than ``ScrapeLimits.min_interval_seconds``.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import time
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from sglang_operator.decisions.sampling import budget
from sglang_operator.decisions.sampling.cache import SeriesCache
from sglang_operator.decisions.sampling.compute import ProbeOutcome, Scrape, ScrapeFailure, compute_sample, refreshed
from sglang_operator.decisions.sampling.limits import LIMIT_REASONS, ProbeLimits, ScrapeLimits
from sglang_operator.decisions.sampling.model import PodView, Sample, Signal
from sglang_operator.decisions.sampling.parse import KeptFilter, LineFilter
from sglang_operator.decisions.sampling.probing import ProbeTurn, next_target
from sglang_operator.decisions.sampling.retain import BUDGET, retained, retained_bytes
from sglang_operator.decisions.sampling.roles import MetricRoles
from sglang_operator.io import loadgen
from sglang_operator.io import scrape_metrics as telemetry
from sglang_operator.io.parse_pool import ParsePool
from sglang_operator.io.pods import Target
from sglang_operator.io.sglang_http import READ_TIMEOUT_SECONDS, ScrapeError, SGLangHTTP, base_url

ANSWERED = frozenset({"http_status", "too_large", "truncated", "parse", "too_many_samples", "too_many_labels",
                      "label_value_too_long", "too_many_series", "worker_lost"})
"""Failure reasons of a read that nevertheless got an answer from the pod (it is alive)."""
DEFAULT_INTERVAL = 30.0
DUE_FRACTION = 0.95
"""A server is due when this fraction of its interval has passed since its last sample started (the observer's ticks
are not exact)..."""
DUE_SLACK_SECONDS = 0.5
"""... or its interval less this many seconds, at most half of it, when that is earlier: a tick the loop ran late (by
up to 0.5 s) does not make the next tick, on time, skip the server (at ``intervalSeconds: 1`` 5 % would be 50 ms)."""


@dataclass(frozen=True)
class SamplingParams:
    """How one server is sampled: ``interval_seconds``; ``signal``; ``min_running_requests`` (the ``traffic``
    floor); the probe's ``probe_prompt``, ``probe_max_tokens`` and ``probe_timeout_seconds``; the per-pod
    ``scrape_timeout_seconds`` (:data:`~sglang_operator.io.sglang_http.READ_TIMEOUT_SECONDS`)."""

    interval_seconds: float = DEFAULT_INTERVAL
    signal: Signal = Signal.PROBE
    min_running_requests: float = 1.0
    probe_prompt: str = loadgen.CODING_PROMPT
    probe_max_tokens: int = 256
    probe_timeout_seconds: float = 60.0
    scrape_timeout_seconds: float = READ_TIMEOUT_SECONDS


def sampling_params(rollback: Any, interval_override: float | None = None) -> SamplingParams:
    """:class:`SamplingParams` from ``spec.rollback`` (the parsed policy: ``signal``, ``intervalSeconds``,
    ``minTraffic.runningRequests``, ``probe.{prompt,maxTokens,timeoutSeconds}``; each read with a fallback to
    the default, so an object stored before a field existed still samples). ``interval_override``: the
    operator's ``--sample-interval``, which replaces every server's ``intervalSeconds`` (tests, demos)."""
    probe = getattr(rollback, "probe", None)
    traffic = getattr(rollback, "min_traffic", None)
    interval = interval_override or float(getattr(rollback, "interval_seconds", DEFAULT_INTERVAL))
    signal = getattr(rollback, "signal", Signal.PROBE)
    return SamplingParams(
        interval_seconds=interval,
        signal=Signal(getattr(signal, "value", signal)),
        min_running_requests=float(getattr(traffic, "running_requests", 1)),
        probe_prompt=str(getattr(probe, "prompt", "") or loadgen.CODING_PROMPT),  # empty: the built-in prompt
        probe_max_tokens=int(getattr(probe, "max_tokens", 256)),
        probe_timeout_seconds=float(getattr(probe, "timeout_seconds", 60)),
    )


@dataclass(eq=False)
class SamplerState:
    """What the sampler keeps about one SGLangServer between intervals (held by the server's
    :class:`~sglang_operator.control.memory.ServerMemory`, dropped with it): each pod's previous scrape (only what the
    figures need: :func:`~sglang_operator.decisions.sampling.retain.retained`) and the bytes it is charged
    (``retained_bytes``), when the last sample started (``last``), each revision's pending probe and whose turn it is
    to be probed, each pod's :class:`SeriesCache` (``caches``, kept while the pod lives)."""

    previous: dict[str, Scrape] = field(default_factory=dict)
    retained_bytes: dict[str, int] = field(default_factory=dict)
    caches: dict[str, SeriesCache] = field(default_factory=dict)
    last: dt.datetime | None = None
    probes: dict[str, asyncio.Task[ProbeOutcome]] = field(default_factory=dict)
    turn: dict[str, ProbeTurn] = field(default_factory=dict)
    refreshed: set[str] = field(default_factory=set)
    """The live pods whose speculative gauges SGLang has written at least once
    (:func:`~sglang_operator.decisions.sampling.compute.refreshed`)."""
    cost: budget.CostBackoff = field(default_factory=budget.CostBackoff)
    """The parse CPU of the last sample and the back-off of a server over its budget
    (:mod:`sglang_operator.decisions.sampling.budget`)."""
    reads: tuple[int, int] | None = None
    """``(answered, timed out)``: the scrapes of the last :meth:`Sampler.sample` that got an answer (an error status,
    a breached limit included) and those that got none within their timeout (None: not sampled since the caller
    cleared it)."""

    def cancel(self) -> None:
        """Cancel the pending probes (the server is gone)."""
        for task in self.probes.values():
            task.cancel()
        self.probes.clear()


@dataclass(frozen=True)
class ServerRef:
    """What the sampler needs to know about one SGLangServer: identity, metric roles of its SGLang release, HTTP
    port, the model name the probe asks for, its :class:`SamplerState` (the server's memory's) and whether its spec
    turns speculative decoding on (``spec.speculative`` set: where the probe goes depends on it)."""

    namespace: str
    name: str
    roles: MetricRoles
    port: int
    model: str
    state: SamplerState = field(default_factory=SamplerState, compare=False)
    speculative: bool = False


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


async def scrape_pod(http: SGLangHTTP, pod: str, url: str, roles: MetricRoles, cache: SeriesCache,
                     limits: ScrapeLimits, *, timeout: float, clock: Callable[[], dt.datetime] = _now,
                     ) -> Scrape | ScrapeFailure:
    """One pod's ``GET url/metrics`` read under ``limits`` (the sample lines of ``roles`` only, label sets through
    ``cache``), as the sampler's :class:`Scrape` (``at``: ``clock()`` when it completed) or, for any failure, a
    :class:`ScrapeFailure` with the counted reason; never raises for the pod's answer. Duplicate samples are
    counted in ``sglang_operator_scrape_duplicate_samples_total``; failures are left to the caller to count. Also
    used by the trial measurement (:mod:`sglang_operator.io.trialbench`)."""
    try:
        parsed = await http.get(url + "/metrics", LineFilter(roles, cache, limits), timeout=timeout,
                                max_bytes=limits.body_bytes)
    except ScrapeError as err:
        return ScrapeFailure(pod, err.reason, str(err))
    if parsed.duplicates:
        telemetry.DUPLICATE_SAMPLES.inc(parsed.duplicates)
    return Scrape(pod, clock(), parsed)


class Sampler:
    """Scrapes and probes; what it keeps between intervals is each server's :class:`SamplerState` (no per-server
    state of its own, so nothing outlives a server's memory). Only the probe tasks are tracked here as well, to be
    cancelled when the operator stops. ``limits`` and ``probe_limits``: the operator's bounds on a scrape and on a
    probe answer (defaults :class:`ScrapeLimits`, :class:`ProbeLimits`)."""

    def __init__(self, http: SGLangHTTP, clock: Callable[[], dt.datetime] = _now,
                 draining: Callable[[str, str], bool] = lambda _ns, _name: False,
                 limits: ScrapeLimits | None = None, probe_limits: ProbeLimits | None = None) -> None:
        self.http = http
        self.limits = limits or ScrapeLimits()
        self.probe_limits = probe_limits or ProbeLimits()
        self.clock = clock
        self._draining = draining  # (namespace, name) -> whether its old pods are being drained: send no probe
        self._tasks: weakref.WeakSet[asyncio.Task[ProbeOutcome]] = weakref.WeakSet()
        self._states: weakref.WeakSet[SamplerState] = weakref.WeakSet()  # whose kept scrapes share the budget
        self.parser = ParsePool(self.limits.parse_workers)

    def retained_total(self) -> int:
        """Bytes of the scrapes kept between intervals, every server's pods together (the live states')."""
        return sum(sum(s.retained_bytes.values()) for s in list(self._states))

    def due(self, state: SamplerState, interval: float, now: dt.datetime | None = None) -> bool:
        """Whether the server whose state is ``state`` and interval ``interval`` seconds (no shorter than
        ``limits.min_interval_seconds``) should be sampled now: its interval has passed and no CPU back-off holds
        it."""
        now = now or self.clock()
        if not budget.may_sample(state.cost, now):
            return False
        interval = max(interval, self.limits.min_interval_seconds)
        wait = min(DUE_FRACTION * interval, interval - min(DUE_SLACK_SECONDS, interval / 2))
        return state.last is None or (now - state.last).total_seconds() >= wait

    async def sample(self, server: ServerRef, pods: Callable[[], Sequence[Target]], params: SamplingParams,
                     api_key: str | None = None) -> list[Sample]:
        """Sample ``server`` now: one :class:`Sample` per revision that has live pods (none without pods).

        ``pods`` returns the server's live pods as known now; it is called before and after the scrape.
        Never raises for an SGLang failure (those are Error samples and counted errors).
        """
        state = server.state
        self._states.add(state)
        params = replace(params, interval_seconds=max(params.interval_seconds, self.limits.min_interval_seconds))
        started = self.clock()
        before = list(pods())
        ready = [t for t in before if t.ready and t.ip]
        outcomes = {rev: await self._collect(state, rev) for rev in sorted({t.revision for t in before})}
        turn, spent = asyncio.Lock(), [0.0]  # one parse of this server's at a time; their CPU seconds
        results = await asyncio.gather(*(self._scrape(server, t, params, turn, spent) for t in ready))
        end = self.clock()
        state.cost = budget.after_sample(state.cost, end, params.interval_seconds, spent[0], len(ready),
                                         self.limits.cpu_budget_seconds)
        if state.cost.over:
            telemetry.CPU_BUDGET_BREACHES.inc()
        after = {t.name: t for t in pods()}
        vanished = frozenset(t.name for t in ready if t.name not in after or not after[t.name].ready)
        for r in results:  # a pod deleted while it was scraped is not a failed scrape
            if isinstance(r, ScrapeFailure) and r.pod not in vanished:
                telemetry.count_scrape_error("metrics", r.reason)
        by_name = {r.pod: r for r in results}
        timed_out = sum(isinstance(r, ScrapeFailure) and r.reason == "timeout" for r in results)
        state.reads = (sum(isinstance(r, Scrape) or r.reason in ANSWERED for r in results), timed_out)
        samples = []
        for rev in sorted({t.revision for t in before}):
            members = [t for t in before if t.revision == rev]
            current = {t.name: by_name[t.name] for t in members if t.name in by_name}
            previous = {n: p for n in current if (p := state.previous.get(n)) is not None}
            views = tuple(PodView(t.name, after[t.name].ready if t.name in after else False, t.restarts)
                          for t in members)
            samples.append(compute_sample(rev, views, current, previous, server.roles, end, params.signal,
                                          params.min_running_requests, outcomes.get(rev), vanished))
        self._remember(state, results, {t.name for t in before})
        state.refreshed = {p for p in state.refreshed if p in after} | {
            r.pod for r in results if isinstance(r, Scrape) and refreshed(r.parsed)}
        state.last = started  # the next is due an interval after this one started, however long its reads took
        if params.signal is Signal.PROBE:
            for rev in sorted({t.revision for t in ready if t.name not in vanished}):
                self._launch(server, rev, [t for t in ready if t.revision == rev and t.name not in vanished],
                             params, api_key)
        return samples

    @staticmethod
    def restart_interval(state: SamplerState) -> None:
        """Make the server due now, so its next interval starts at this moment (the observer calls it when a
        revision's warm-up ends: the first judged interval then starts right at the warm-up's end)."""
        state.last = None

    @staticmethod
    def forget(state: SamplerState) -> None:
        """Drop everything kept for a deleted server (and cancel its probes)."""
        state.cancel()
        state.previous.clear()
        state.retained_bytes.clear()
        state.caches.clear()
        state.turn.clear()
        state.refreshed.clear()
        state.last = None

    async def aclose(self) -> None:
        """Cancel pending probes and stop the parse workers."""
        self.parser.close()
        tasks = list(self._tasks)
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t

    def _remember(self, state: SamplerState, results: Sequence[Scrape | ScrapeFailure], live: set[str]) -> None:
        """Keep each successful scrape of a live pod until the next interval, within the process-wide budget: a pod
        whose scrape does not fit keeps nothing (its next interval is inconclusive) and is counted."""
        for pod in set(state.previous) - live:
            del state.previous[pod]
            state.retained_bytes.pop(pod, None)
        for r in results:
            if not isinstance(r, Scrape) or r.pod not in live:
                continue
            keep = Scrape(r.pod, r.at, retained(r.parsed))
            size = retained_bytes(keep.parsed)
            if self.retained_total() - state.retained_bytes.get(r.pod, 0) + size > self.limits.retained_bytes:
                telemetry.RETENTION_BREACHES.labels(BUDGET).inc()
                state.previous.pop(r.pod, None)
                state.retained_bytes.pop(r.pod, None)
                continue
            state.previous[r.pod] = keep
            state.retained_bytes[r.pod] = size
        for pod in set(state.caches) - live:
            del state.caches[pod]

    async def _scrape(self, server: ServerRef, t: Target, params: SamplingParams, turn: asyncio.Lock,
                      spent: list[float]) -> Scrape | ScrapeFailure:
        """One pod's scrape: its lines read and kept on the loop, then parsed by :attr:`parser` once ``turn`` (the
        server's) is free; its parse CPU seconds added to ``spent[0]``."""
        assert t.ip is not None
        cache = server.state.caches.get(t.name)
        if cache is None:
            cache = server.state.caches[t.name] = SeriesCache(self.limits.cache_bytes)
        started = time.perf_counter()
        try:
            kept = await self.http.get(base_url(t.ip, server.port) + "/metrics", KeptFilter(server.roles, self.limits),
                                       timeout=params.scrape_timeout_seconds, max_bytes=self.limits.body_bytes)
        except ScrapeError as err:
            return ScrapeFailure(t.name, err.reason, str(err))
        finally:
            telemetry.SCRAPE_DURATION.observe(time.perf_counter() - started)
        at = self.clock()
        async with turn:
            got = await self.parser.parse(kept, server.roles, self.limits, cache)
        del kept
        spent[0] += got.cpu_seconds
        telemetry.PARSE_CPU.observe(got.cpu_seconds)
        if got.parsed is None:  # the label text never left the worker: series keys hashed, series capped
            if not got.retained:
                telemetry.RETENTION_BREACHES.labels(got.reason).inc()
            return ScrapeFailure(t.name, got.reason, got.message)
        if got.parsed.duplicates:
            telemetry.DUPLICATE_SAMPLES.inc(got.parsed.duplicates)
        return Scrape(t.name, at, got.parsed)

    def _launch(self, server: ServerRef, revision: str, ready: list[Target], params: SamplingParams,
                api_key: str | None) -> None:
        state = server.state
        old = state.probes.pop(revision, None)
        if old is not None:
            old.cancel()
        if not ready or self._draining(server.namespace, server.name):  # no probe into pods being drained
            return
        name, state.turn[revision] = next_target([t.name for t in ready], state.turn.get(revision, ProbeTurn()),
                                                 state.refreshed, server.speculative)
        target = next(t for t in ready if t.name == name)
        timeout = min(params.probe_timeout_seconds, params.interval_seconds)
        task = asyncio.get_running_loop().create_task(
            self._probe(server, target, params, timeout, api_key), name=f"probe {server.namespace}/{target.name}")
        state.probes[revision] = task
        self._tasks.add(task)

    @staticmethod
    async def _collect(state: SamplerState, revision: str) -> ProbeOutcome | None:
        task = state.probes.pop(revision, None)
        if task is None:
            return None
        try:
            return await task
        except asyncio.CancelledError:
            return None

    async def _probe(self, server: ServerRef, t: Target, params: SamplingParams, timeout: float,
                     api_key: str | None) -> ProbeOutcome:
        assert t.ip is not None
        try:
            async with asyncio.timeout(timeout):
                res = await loadgen.stream_once(self.http.http, base_url(t.ip, server.port), server.model,
                                                prompt=params.probe_prompt, max_tokens=params.probe_max_tokens,
                                                api_key=api_key,
                                                limits=self.probe_limits.for_max_tokens(params.probe_max_tokens))
        except TimeoutError:
            telemetry.count_scrape_error("probe", "timeout")
            return ProbeOutcome(t.name, error=f"no complete answer within {timeout:g} s")
        if res.error is not None:
            reason = res.error if res.error in LIMIT_REASONS else \
                "http_status" if res.error.startswith("HTTP") else "transport"
            telemetry.count_scrape_error("probe", reason)
            return ProbeOutcome(t.name, error=res.error)
        speed = res.decode_tok_s
        return ProbeOutcome(t.name, speed if speed > 0 else None)
