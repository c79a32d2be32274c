"""PURE: the figures of a tuning trial's measurement windows (the I/O that produces them:
:mod:`sglang_operator.io.trialbench`, whose docstring says how a level is measured and what each figure means):
the tokens a request streamed inside a window, SGLang's step times appended between two ``/server_info`` reads, one
window's :class:`~sglang_operator.api.tuning_status.LevelFigures` and the combination of a level's repetitions (medians,
sums, the spread the noise rule reads)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from sglang_operator.api.tuning_spec import Objective, ObjectiveMetric
from sglang_operator.api.tuning_status import LevelFigures
from sglang_operator.decisions.sampling.compute import Scrape, figures
from sglang_operator.decisions.sampling.loghist import LogHistogram
from sglang_operator.decisions.sampling.model import Signal
from sglang_operator.decisions.sampling.roles import MetricRoles

STEP_TIME_QUANTILE = 0.2
"""The sweep script's percentile of step times ("20% percentile instead of median on purpose")."""


class Streamed(Protocol):
    """What a streamed request's client saw (:class:`sglang_operator.io.loadgen.StreamResult`)."""

    @property
    def completion_tokens(self) -> int: ...
    @property
    def error(self) -> str | None: ...
    @property
    def decode_tok_s(self) -> float: ...
    @property
    def chunk_gaps(self) -> LogHistogram: ...


def default_score(objective: Objective | None = None) -> Callable[[LevelFigures], float | None]:
    """The figure a window's spread is taken of: decode tok/s for ``decodeTokensPerSecond`` (the default), output
    tok/s for ``outputTokensPerSecond`` and ``goodput`` (whose limits are the search's to apply)."""
    metric = objective.objective_metric_name if objective else ObjectiveMetric.DECODE_TOKENS_PER_SECOND
    if metric is ObjectiveMetric.DECODE_TOKENS_PER_SECOND:
        return lambda f: f.decode_tokens_per_second
    return lambda f: f.output_tokens_per_second



@dataclass(frozen=True)
class Finished:
    """One request as the client saw it: ``start``, ``end`` on the bench's clock (seconds), time to first token
    (seconds; None without a content chunk), and what its stream gave
    (:class:`~sglang_operator.io.loadgen.StreamResult`)."""

    start: float
    end: float
    ttft: float | None
    result: Streamed


def tokens_within(r: Finished, lo: float, hi: float) -> float:
    """Output tokens of ``r`` streamed inside [lo, hi): the first at ``start + ttft``, the others spread evenly up to
    ``end`` (0 for a failed request)."""
    tokens = r.result.completion_tokens
    if r.result.error is not None or tokens <= 0 or r.ttft is None:
        return 0.0
    first = r.start + r.ttft
    out = 1.0 if lo <= first < hi else 0.0
    rest = tokens - 1
    if rest <= 0:
        return out
    span = r.end - first
    if span <= 0:
        return out + (rest if lo <= first < hi else 0.0)
    overlap = max(0.0, min(hi, r.end) - max(lo, first))
    return out + rest * overlap / span


def percentile(values: Sequence[float], q: float) -> float | None:
    """numpy's default (linear) percentile of ``values`` at ``q`` (0..1); None when empty."""
    xs = sorted(values)
    if not xs:
        return None
    pos = q * (len(xs) - 1)
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def step_time_lists(body: Mapping[str, Any]) -> list[dict[str, list[float]]]:
    """``step_time_dict`` of each DP rank of a ``/server_info`` body (``internal_states[]``; old builds carry it at
    the top level, as the sweep script reads ``/get_server_info``): batch size → step times (seconds), finite
    non-negative numbers only; ``[]`` when the release does not report it. Never raises for a malformed body."""
    sources: list[Any] = []
    states = body.get("internal_states")
    if isinstance(states, list):
        sources.extend(s.get("step_time_dict") for s in states if isinstance(s, dict))
    if not any(isinstance(s, dict) for s in sources):
        sources = [body.get("step_time_dict")]
    out: list[dict[str, list[float]]] = []
    for raw in sources:
        if not isinstance(raw, dict):
            continue
        clean: dict[str, list[float]] = {}
        for key, times in raw.items():
            if isinstance(times, list):
                clean[str(key)] = [float(t) for t in times if isinstance(t, int | float) and not isinstance(t, bool)
                                   and math.isfinite(t) and t >= 0]
        out.append(clean)
    return out


def new_step_times(before: Sequence[Mapping[str, Sequence[float]]],
                   after: Sequence[Mapping[str, Sequence[float]]]) -> list[float]:
    """The step times SGLang appended between two ``/server_info`` reads of one pod: per DP rank, the new entries
    of the batch size with the most new entries (ties: the larger batch). SGLang only appends, so a list shorter
    than before means the pod restarted: then all of it is new."""
    out: list[float] = []
    for rank, now in enumerate(after):
        was = before[rank] if rank < len(before) else {}
        fresh: dict[str, list[float]] = {}
        for key, times in now.items():
            old = len(was.get(key, ()))
            fresh[key] = list(times[old:] if len(times) >= old else times)
        best = max(fresh.items(), key=lambda kv: (len(kv[1]), _int(kv[0])), default=None)
        if best is not None:
            out.extend(best[1])
    return out


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        return -1


def window_figures(concurrency: int, requests: Sequence[Finished], lo: float, hi: float,
                   pairs: Sequence[tuple[Scrape, Scrape]] | None, roles: MetricRoles,
                   step_times: Sequence[float] | None) -> LevelFigures:
    """The figures of one window [lo, hi) (seconds on the bench's clock): ``requests`` is every request of the
    level (those that ended in the window are its requests); ``pairs``: each pod's (start, end) scrape, None when
    a scrape failed; ``step_times``: SGLang's step times appended in the window, None when unknown."""
    ended = [r for r in requests if lo <= r.end < hi]
    ok = [r for r in ended if r.result.error is None]
    seconds = hi - lo
    tokens = sum(tokens_within(r, lo, hi) for r in requests)
    decode = [s for r in ok if (s := r.result.decode_tok_s) > 0]
    gaps, ttft = LogHistogram(), LogHistogram()
    for r in ok:
        gaps.merge(r.result.chunk_gaps)
        if r.ttft is not None:
            ttft.add(r.ttft)
    accept_length = accept_rate = None
    if pairs:
        server, _ = figures(pairs, roles, Signal.TRAFFIC)
        accept_length, accept_rate = server.accept_length, server.accept_rate
    p20 = percentile(step_times, STEP_TIME_QUANTILE) if step_times else None
    return LevelFigures(
        concurrency=concurrency,
        output_tokens_per_second=tokens / seconds if seconds > 0 else None,
        decode_tokens_per_second=statistics.median(decode) if decode else None,
        inter_token_latency_p50_seconds=gaps.p50 if gaps.count else None,
        inter_token_latency_p95_seconds=gaps.p95 if gaps.count else None,
        time_to_first_token_p50_seconds=ttft.p50 if ttft.count else None,
        time_to_first_token_p95_seconds=ttft.p95 if ttft.count else None,
        accept_length=accept_length,
        accept_rate=accept_rate,
        step_time_p20_seconds=p20,
        requests=len(ended),
        failed_requests=len(ended) - len(ok),
    )


_MEDIAN_FIELDS = ("output_tokens_per_second", "decode_tokens_per_second", "inter_token_latency_p50_seconds",
                  "inter_token_latency_p95_seconds", "time_to_first_token_p50_seconds",
                  "time_to_first_token_p95_seconds", "accept_length", "accept_rate", "step_time_p20_seconds")


def combine(windows: Sequence[LevelFigures], score: Callable[[LevelFigures], float | None]) -> LevelFigures:
    """One level's figures from its repetitions (see the module docstring). Raises ``ValueError`` without
    windows."""
    if not windows:
        raise ValueError("no window to combine")
    values: dict[str, Any] = {"concurrency": windows[0].concurrency}
    for name in _MEDIAN_FIELDS:
        xs = [v for w in windows if (v := getattr(w, name)) is not None]
        values[name] = statistics.median(xs) if xs else None
    values["requests"] = sum(w.requests or 0 for w in windows)
    values["failed_requests"] = sum(w.failed_requests or 0 for w in windows)
    scores = [s for w in windows if (s := score(w)) is not None]
    middle = statistics.median(scores) if scores else 0.0
    values["spread"] = (max(scores) - min(scores)) / middle if len(scores) > 1 and middle > 0 else None
    return LevelFigures(**values)
