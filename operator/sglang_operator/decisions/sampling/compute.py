"""PURE: one revision's :class:`~sglang_operator.decisions.sampling.model.Sample` from the previous and the current
scrape of each of its pods. No I/O, no clock: every time comes in as an argument.

Rules (Prometheus semantics where Prometheus has them):

- **Counter increase** per series: ``current - previous``; a decrease is a counter reset (a restart) and the new
  value is the increase, as ``rate()`` does (``promql/functions.go extrapolatedRate``, without extrapolation:
  both ends are real scrapes). A series absent from the previous scrape of the same pod was created since and
  counts from 0 (SGLang creates labelled series on first use). NaN or ±Inf on either side makes the figure
  ``None`` (NaN propagates).
- **Histograms**: bucket, sum and count increases per series (a decrease of any of them resets the series), summed
  by ``le`` over series and pods, then :func:`bucket_quantile` — a port of Prometheus' ``histogram_quantile``
  (``promql/quantile.go BucketQuantile``: linear interpolation inside the bucket, lower bound 0 for the first
  bucket, the second-highest bound when the rank falls into ``+Inf``, ``None`` without a ``+Inf`` bucket, counts
  forced monotonic).
- **Gauges** are read at the end of the interval: running and queued requests summed over pods, KV-cache usage
  the max, the cache hit rate the mean of finite values. The speculative gauges (``sglang:spec_accept_length``,
  ``sglang:spec_accept_rate``) are written by SGLang's scheduler only every ``--decode-log-interval`` (40) decode
  steps (``managers/scheduler_components/metrics_reporter.py``; ``../shared/sglang/README.md`` "Refresh
  semantics") and read 0 until a pod's first such window: a pod counts only once its accept-length gauge is above
  0 (:func:`refreshed`), so a gauge not yet refreshed is no data, never a 0. The accept length is the mean over the
  refreshed pods, the accept rate their mean weighted by the tokens each generated in the interval (the plain mean
  of the refreshed pods when none of them decoded in it).
- **Accept length** = generation-token increase ÷ ``sglang:spec_verify_calls_total`` increase where the release
  has that counter (both grow per finished request; ``../shared/sglang/README.md`` §2), else the
  ``sglang:spec_accept_length`` gauge of the refreshed pods (0.5.10); ``None`` when neither shows speculative
  decoding. The accept rate has no counter in any release: always the gauge.
- **Kind**: Error when a Ready pod's scrape (or the probe) failed and the pod is still there; Inconclusive
  without a Ready pod, when a pod has no previous scrape, when the pods covered differ from the revision's Ready
  pods, when no generation token was produced (idle), below the traffic floor, or without a decode speed;
  Measured otherwise.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from sglang_operator.api.base import truncate
from sglang_operator.decisions.sampling.model import Figures, PodView, Sample, SampleKind, Signal
from sglang_operator.decisions.sampling.parse import HistogramSeries, Parsed
from sglang_operator.decisions.sampling.roles import MetricRoles, Role


@dataclass(frozen=True)
class Scrape:
    """One pod's successful scrape: when it completed and what it held."""

    pod: str
    at: dt.datetime
    parsed: Parsed


@dataclass(frozen=True)
class ScrapeFailure:
    """One pod's failed scrape: the counted ``reason`` (``timeout``, ``connection``, ``http_status``, ``too_large``,
    ``truncated``, ``parse``, ...) and a message for humans."""

    pod: str
    reason: str
    message: str


@dataclass(frozen=True)
class ProbeOutcome:
    """The probe request of the interval: the pod it went to and its single-stream decode speed (tok/s after
    the first token), or the error."""

    pod: str
    decode_tokens_per_second: float | None = None
    error: str | None = None


def counter_increase(previous: Mapping[str, float], current: Mapping[str, float]) -> float | None:
    """Increase of a counter over the interval, summed over its series (see module docstring); ``None`` when a
    value is not finite."""
    total = 0.0
    for key, value in current.items():
        before = previous.get(key, 0.0)
        if not (math.isfinite(value) and math.isfinite(before)):
            return None
        total += value - before if value >= before else value
    return total


def histogram_increase(previous: HistogramSeries | None, current: HistogramSeries) -> HistogramSeries:
    """Increase of one histogram series over the interval (the whole series resets when any part decreased)."""
    if previous is None:
        return current
    before = dict(previous.buckets)
    decreased = any(count < before.get(le, 0.0) for le, count in current.buckets)
    for now, was in ((current.count, previous.count), (current.sum, previous.sum)):
        if now is not None and was is not None and now < was:
            decreased = True
    if decreased:
        return current
    buckets = tuple((le, count - before.get(le, 0.0)) for le, count in current.buckets)

    def diff(now: float | None, was: float | None) -> float | None:
        return None if now is None else now - (was or 0.0)

    return HistogramSeries(buckets, diff(current.sum, previous.sum), diff(current.count, previous.count))


def bucket_quantile(q: float, buckets: Mapping[float, float]) -> float | None:
    """Prometheus' ``histogram_quantile(q, sum by (le) (...))`` over cumulative ``{upper bound: count}``;
    ``None`` where Prometheus returns NaN (no ``+Inf`` bucket, fewer than two buckets, no observations)."""
    if not buckets or math.isnan(q) or any(math.isnan(c) for c in buckets.values()):
        return None
    ordered = sorted(buckets.items())
    if not math.isinf(ordered[-1][0]) or len(ordered) < 2:
        return None
    counts, top = [], -math.inf  # ensureMonotonic
    for _, count in ordered:
        top = max(top, count)
        counts.append(top)
    observations = counts[-1]
    if observations <= 0:
        return None
    rank = q * observations
    b = next((i for i in range(len(ordered) - 1) if counts[i] >= rank), len(ordered) - 1)
    if b == len(ordered) - 1:
        return ordered[-2][0]
    if b == 0 and ordered[0][0] <= 0:
        return ordered[0][0]
    start, end, count = 0.0, ordered[b][0], counts[b]
    if b > 0:
        start = ordered[b - 1][0]
        count -= counts[b - 1]
        rank -= counts[b - 1]
    return start + (end - start) * (rank / count) if count > 0 else end


@dataclass(frozen=True)
class _Histogram:
    buckets: dict[float, float]
    sum: float | None
    count: float | None


def _histogram_total(pairs: Iterable[tuple[Scrape, Scrape]], role: Role) -> _Histogram | None:
    buckets: dict[float, float] = {}
    total_sum: float | None = None
    total_count: float | None = None
    seen = False
    for prev, curr in pairs:
        before = prev.parsed.histograms.get(role, {})
        for key, series in curr.parsed.histograms.get(role, {}).items():
            seen = True
            inc = histogram_increase(before.get(key), series)
            for le, count in inc.buckets:
                buckets[le] = buckets.get(le, 0.0) + count
            if inc.sum is not None:
                total_sum = (total_sum or 0.0) + inc.sum
            if inc.count is not None:
                total_count = (total_count or 0.0) + inc.count
    return _Histogram(buckets, total_sum, total_count) if seen else None


def _counter_total(pairs: Iterable[tuple[Scrape, Scrape]], role: Role) -> float | None:
    total = 0.0
    for prev, curr in pairs:
        inc = counter_increase(prev.parsed.counters.get(role, {}), curr.parsed.counters.get(role, {}))
        if inc is None:
            return None
        total += inc
    return total


def _gauge_values(scrapes: Iterable[Scrape], role: Role) -> list[float]:
    return [v for s in scrapes for v in s.parsed.gauges.get(role, {}).values() if math.isfinite(v)]


def _summed_max(scrapes: Iterable[Scrape], role: Role) -> float | None:
    """Each pod's largest finite value of ``role`` (its fullest data-parallel rank), summed over the pods that have
    one; None when none has."""
    per_pod = [max(values) for s in scrapes
               if (values := [v for v in s.parsed.gauges.get(role, {}).values() if math.isfinite(v)])]
    return sum(per_pod) if per_pod else None


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def refreshed(parsed: Parsed) -> bool:
    """Whether a pod's scrape shows its speculative gauges written at least once: ``sglang:spec_accept_length``
    above 0 (at least 1 whenever written with speculative decoding on: the bonus token). SGLang writes them every
    ``--decode-log-interval`` decode steps only, so a pod that has decoded fewer steps since it started reads 0 for
    both the length and the rate."""
    return any(math.isfinite(v) and v > 0 for v in parsed.gauges.get(Role.ACCEPT_LENGTH, {}).values())


def _decoding_mean(scrapes: Sequence[Scrape], role: Role, generated: Mapping[str, float]) -> float | None:
    """A per-pod speculative gauge (``sglang:spec_accept_rate``) over the pods whose gauges were refreshed
    (:func:`refreshed`): the mean of each pod's finite values weighted by its generation-token increase in the
    interval (``generated``, per pod name), so an idle pod does not dilute a busy one; the plain mean over the
    refreshed pods when none of them decoded in the interval; None without a refreshed pod (a not-yet-written 0 is
    no data)."""
    num = den = 0.0
    values_of = {s.pod: [v for v in s.parsed.gauges.get(role, {}).values() if math.isfinite(v)]
                 for s in scrapes if refreshed(s.parsed)}
    for pod, values in values_of.items():
        weight = generated.get(pod, 0.0)
        if values and weight > 0:
            num, den = num + weight * sum(values) / len(values), den + weight
    if den > 0:
        return num / den
    return _mean([v for values in values_of.values() for v in values])


def _ratio(num: float | None, den: float | None) -> float | None:
    if num is None or den is None or den <= 0 or not (math.isfinite(num) and math.isfinite(den)):
        return None
    return num / den


def figures(pairs: Sequence[tuple[Scrape, Scrape]], roles: MetricRoles, signal: Signal,
            probe: ProbeOutcome | None = None) -> tuple[Figures, float | None]:
    """(:class:`Figures`, generation-token increase) of the covered pods' (previous, current) scrapes."""
    current = [c for _, c in pairs]
    gen_rate = 0.0
    gen_total: float | None = 0.0
    generated: dict[str, float] = {}
    for prev, curr in pairs:
        inc = _counter_total([(prev, curr)], Role.GENERATION_TOKENS)
        seconds = (curr.at - prev.at).total_seconds()
        if inc is not None:
            generated[curr.pod] = inc
        if inc is None or gen_total is None:
            gen_total = None
            continue
        gen_total += inc
        if seconds > 0:
            gen_rate += inc / seconds
    accept_length = None
    if roles.has(Role.SPEC_VERIFY_CALLS):
        accept_length = _ratio(gen_total, _counter_total(pairs, Role.SPEC_VERIFY_CALLS))
    if accept_length is None:  # the gauge (0.5.10 has no verify counter): the refreshed pods' only
        accept_length = _mean([v for v in _gauge_values(current, Role.ACCEPT_LENGTH) if v > 0])
    ttft = _histogram_total(pairs, Role.TIME_TO_FIRST_TOKEN)
    itl = _histogram_total(pairs, Role.INTER_TOKEN_LATENCY)
    if signal is Signal.PROBE:
        decode = probe.decode_tokens_per_second if probe is not None and probe.error is None else None
    else:
        decode = _ratio(itl.count, itl.sum) if itl is not None else None
    running = _gauge_values(current, Role.RUNNING_REQUESTS)
    queued = _gauge_values(current, Role.QUEUED_REQUESTS)
    usage = _gauge_values(current, Role.TOKEN_USAGE)
    steps = _gauge_values(current, Role.NUM_STEPS)
    draft = _gauge_values(current, Role.NUM_DRAFT_TOKENS)
    out = Figures(
        generation_tokens_per_second=gen_rate if gen_total is not None and pairs else None,
        decode_tokens_per_second=decode,
        accept_length=accept_length,
        accept_rate=_decoding_mean(current, Role.ACCEPT_RATE, generated),
        running_requests=sum(running) if running else None,
        queued_requests=sum(queued) if queued else None,
        kv_cache_usage=max(usage) if usage else None,
        kv_cache_usage_summed=_summed_max(current, Role.TOKEN_USAGE),
        ttft_p50_seconds=bucket_quantile(0.5, ttft.buckets) if ttft else None,
        ttft_p95_seconds=bucket_quantile(0.95, ttft.buckets) if ttft else None,
        itl_p50_seconds=bucket_quantile(0.5, itl.buckets) if itl else None,
        itl_p95_seconds=bucket_quantile(0.95, itl.buckets) if itl else None,
        cache_hit_rate=_mean(_gauge_values(current, Role.CACHE_HIT_RATE)),
        num_steps=max(steps) if steps else None,
        num_draft_tokens=max(draft) if draft else None,
    )
    return out, gen_total


def requests_in_flight(parsed: Parsed) -> int:
    """Requests a server has in flight by one ``/metrics`` body (parsed with roles
    :data:`~sglang_operator.decisions.sampling.roles.DRAIN_ROLES`): requests that streamed their first token minus
    those that finished or were aborted (``sglang:time_to_first_token_seconds_count`` minus
    ``sglang:e2e_request_latency_seconds_count``, summed over their series; the tokenizer manager observes both as it
    happens, ``TokenizerMetricsCollector``), else the ``sglang:num_running_reqs`` gauge summed, which the scheduler
    refreshes at decode-log intervals only (every 30 s when idle: ``scheduler.py`` ``check_memory``), so it reads 1 for
    up to 30 s after the last request ended. 0 when none is exposed."""
    started = parsed.histograms.get(Role.TIME_TO_FIRST_TOKEN)
    finished = parsed.histograms.get(Role.E2E_REQUEST_LATENCY)
    if started and finished:
        begun = sum(s.count or 0.0 for s in started.values())
        ended = sum(s.count or 0.0 for s in finished.values())
        return max(int(begun - ended), 0)
    return int(sum((parsed.gauges.get(Role.RUNNING_REQUESTS) or {}).values()))


def _names(pods: Iterable[str]) -> str:
    return ", ".join(sorted(pods)) or "none"


def compute_sample(
    revision: str,
    revision_pods: Sequence[PodView],
    current: Mapping[str, Scrape | ScrapeFailure],
    previous: Mapping[str, Scrape],
    roles: MetricRoles,
    end: dt.datetime,
    signal: Signal = Signal.PROBE,
    min_running_requests: float = 1.0,
    probe: ProbeOutcome | None = None,
    vanished: frozenset[str] = frozenset(),
) -> Sample:
    """The sample of ``revision`` for the interval ending at ``end``.

    ``revision_pods``: the revision's live pods now; ``current``: this interval's scrape of each pod that was
    Ready when it started; ``previous``: each pod's last successful scrape before it; ``vanished``: pods scraped
    that were deleted or left Ready meanwhile (their failure is not an error: the pod set changed);
    ``min_running_requests``: the traffic floor (signal ``traffic``).
    """
    ready = {p.name for p in revision_pods if p.ready} - vanished
    pairs = [(previous[name], s) for name, s in sorted(current.items())
             if isinstance(s, Scrape) and name in previous and name in ready]
    covered = tuple(c.pod for _, c in pairs)
    start = min((p.at for p, _ in pairs), default=end)
    figs, generated = figures(pairs, roles, signal, probe)

    def sample(kind: SampleKind, reason: str = "") -> Sample:
        return Sample(kind, revision, start, end, figs, covered, tuple(revision_pods), signal, truncate(reason))

    failed = [f for f in current.values() if isinstance(f, ScrapeFailure) and f.pod not in vanished]
    if failed:
        return sample(SampleKind.ERROR, "; ".join(f"scrape of pod {f.pod} failed ({f.reason}): {f.message}"
                                                  for f in failed))
    if signal is Signal.PROBE and probe is not None and probe.error is not None and probe.pod not in vanished:
        return sample(SampleKind.ERROR, f"probe of pod {probe.pod} failed: {probe.error}")
    if not ready:
        return sample(SampleKind.INCONCLUSIVE, "no Ready pod")
    first = sorted(n for n, s in current.items() if isinstance(s, Scrape) and n not in previous and n in ready)
    if first:
        return sample(SampleKind.INCONCLUSIVE, f"first scrape of pod {_names(first)}: no previous scrape to compare")
    if set(covered) != ready:
        return sample(SampleKind.INCONCLUSIVE, f"pods covered ({_names(covered)}) differ from the Ready pods "
                                               f"({_names(ready)})")
    if generated is None:
        return sample(SampleKind.INCONCLUSIVE, "generation-token counter not finite")
    if generated <= 0:
        return sample(SampleKind.INCONCLUSIVE, "idle: no generation tokens in the interval")
    if signal is Signal.TRAFFIC:
        running = figs.running_requests or 0.0
        if running < min_running_requests:
            return sample(SampleKind.INCONCLUSIVE, f"below the traffic floor: {running:g} running requests < "
                                                   f"{min_running_requests:g}")
        if figs.decode_tokens_per_second is None:
            return sample(SampleKind.INCONCLUSIVE, "no inter-token latency observed in the interval")
    elif figs.decode_tokens_per_second is None:
        return sample(SampleKind.INCONCLUSIVE, "no probe result in the interval")
    return sample(SampleKind.MEASURED)
