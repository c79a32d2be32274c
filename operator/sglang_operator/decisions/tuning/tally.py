"""PURE: a trial level's figures aggregated online, request by request, in memory bounded by the number of windows
(never by the number of requests): what :mod:`sglang_operator.io.trialbench` keeps while a level runs.

:class:`LevelTally` takes each request as it ends (:meth:`LevelTally.add`) and each window boundary as it is taken
(:meth:`LevelTally.bound`); at the level's end :meth:`LevelTally.figures` gives each window's
:class:`~sglang_operator.api.tuning_status.LevelFigures`, the same as
:func:`~sglang_operator.decisions.tuning.windows.window_figures` over every request of the level, with sums and
counts exact and the quantiles from bounded histograms:

- ``outputTokensPerSecond``: each request's tokens are split over the windows when it ends
  (:func:`~sglang_operator.decisions.tuning.windows.tokens_within`): the bounds before its end are known then, and
  the window it ends in has no upper bound yet that could cut it (the next bound is taken later);
- ``decodeTokensPerSecond``: the median of the requests that ended in the window, from a
  :class:`SpeedHistogram` (buckets 1 % wide: within 0.5 % of the exact median);
- inter-token latency and time to first token: :class:`~sglang_operator.decisions.sampling.loghist.LogHistogram`
  as before (each request's gaps merged in when it ends).

Beside the figures, :attr:`LevelTally.answers` counts the completion tokens of the successful requests that ended in
the windows (:class:`~sglang_operator.decisions.tuning.trialload.AnswerLengths`, for the short-answer rule).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

from sglang_operator.api.tuning_status import LevelFigures
from sglang_operator.decisions.sampling.compute import Scrape, figures
from sglang_operator.decisions.sampling.loghist import LogHistogram
from sglang_operator.decisions.sampling.model import Signal
from sglang_operator.decisions.sampling.roles import MetricRoles
from sglang_operator.decisions.tuning.trialload import AnswerLengths
from sglang_operator.decisions.tuning.windows import STEP_TIME_QUANTILE, Finished, percentile, tokens_within

MAX_ANSWER_TOKENS = 16384
"""The largest ``maxOutputTokens`` the API allows: what an answer's completion tokens are clamped to by default."""
SPEED_STEP = 0.01
"""Relative width of a :class:`SpeedHistogram` bucket (1 %)."""
SPEED_LOW, SPEED_HIGH = 1e-3, 1e7
"""Speeds (tok/s) below or above are counted at these bounds: at most ~2 300 buckets."""
_LOG_STEP = math.log1p(SPEED_STEP)


@dataclass
class SpeedHistogram:
    """Counts of positive values (tok/s) in log buckets :data:`SPEED_STEP` wide; :meth:`median` as
    ``statistics.median`` of the values would give (the middle one, or the mean of the middle two), each read as
    its bucket's geometric middle clamped to the values' minimum and maximum: within half a bucket (0.5 %)."""

    counts: dict[int, int] = field(default_factory=dict)
    count: int = 0
    min: float = math.inf
    max: float = 0.0

    def add(self, value: float) -> None:
        """Count ``value`` (non-finite or non-positive: ignored)."""
        if not math.isfinite(value) or value <= 0:
            return
        clamped = min(max(value, SPEED_LOW), SPEED_HIGH)
        i = math.floor(math.log(clamped) / _LOG_STEP)
        self.counts[i] = self.counts.get(i, 0) + 1
        self.count += 1
        self.min, self.max = min(self.min, value), max(self.max, value)

    def _nth(self, n: int) -> float:
        """The ``n``-th smallest value (0-based), as its bucket's middle."""
        seen = 0
        for i in sorted(self.counts):
            seen += self.counts[i]
            if seen > n:
                return min(self.max, max(self.min, math.exp((i + 0.5) * _LOG_STEP)))
        return self.max

    def median(self) -> float | None:
        """The median (None without values)."""
        if not self.count:
            return None
        if self.count % 2:
            return self._nth(self.count // 2)
        return (self._nth(self.count // 2 - 1) + self._nth(self.count // 2)) / 2


@dataclass
class WindowTally:
    """The running figures of one window: output tokens inside it, requests that ended in it and how many of them
    failed, their decode speeds, inter-chunk gaps and times to first token."""

    tokens: float = 0.0
    requests: int = 0
    failed: int = 0
    decode: SpeedHistogram = field(default_factory=SpeedHistogram)
    gaps: LogHistogram = field(default_factory=LogHistogram)
    ttft: LogHistogram = field(default_factory=LogHistogram)


class LevelTally:
    """One level's windows, filled online (see the module docstring). ``repetitions``: its windows; ``max_tokens``:
    the requests' ``max_tokens`` (answers claiming more are counted at it). Memory: the windows' tallies and at most
    ``max_tokens`` + 1 answer lengths, whatever the number of requests."""

    def __init__(self, concurrency: int, repetitions: int, max_tokens: int = MAX_ANSWER_TOKENS) -> None:
        self.concurrency = concurrency
        self.windows = [WindowTally() for _ in range(repetitions)]
        self.answers = AnswerLengths(max_tokens)
        """Completion tokens of the successful requests that ended in a window."""
        self.bounds: list[float] = []
        self.requests = 0
        """Requests added (ended), windows or not."""

    def bound(self, at: float) -> None:
        """A window boundary taken at ``at`` (the bench's clock, seconds; each later than the previous)."""
        self.bounds.append(at)

    def add(self, r: Finished) -> None:
        """One request, as it ends (``r.end`` no earlier than every bound given so far)."""
        self.requests += 1
        bounds, n = self.bounds, len(self.windows)
        for k in range(min(n, len(bounds))):
            hi = bounds[k + 1] if k + 1 < len(bounds) else math.inf
            self.windows[k].tokens += tokens_within(r, bounds[k], hi)
        k = len(bounds) - 1  # the window it ended in: after the last bound taken
        if not 0 <= k < n:
            return
        w = self.windows[k]
        w.requests += 1
        if r.result.error is not None:
            w.failed += 1
            return
        self.answers.add(r.result.completion_tokens)
        if (speed := r.result.decode_tok_s) > 0:
            w.decode.add(speed)
        w.gaps.merge(r.result.chunk_gaps)
        if r.ttft is not None:
            w.ttft.add(r.ttft)

    def figures(self, k: int, pairs: Sequence[tuple[Scrape, Scrape]] | None, roles: MetricRoles,
                step_times: Sequence[float] | None) -> LevelFigures:
        """Window ``k``'s figures (its bounds taken): ``pairs``, each pod's (start, end) scrape (None when one
        failed); ``step_times``: SGLang's step times appended in the window (None when unknown)."""
        w = self.windows[k]
        seconds = self.bounds[k + 1] - self.bounds[k]
        accept_length = accept_rate = None
        if pairs:
            server, _ = figures(pairs, roles, Signal.TRAFFIC)
            accept_length, accept_rate = server.accept_length, server.accept_rate
        return LevelFigures(
            concurrency=self.concurrency,
            output_tokens_per_second=w.tokens / seconds if seconds > 0 else None,
            decode_tokens_per_second=w.decode.median(),
            inter_token_latency_p50_seconds=w.gaps.p50 if w.gaps.count else None,
            inter_token_latency_p95_seconds=w.gaps.p95 if w.gaps.count else None,
            time_to_first_token_p50_seconds=w.ttft.p50 if w.ttft.count else None,
            time_to_first_token_p95_seconds=w.ttft.p95 if w.ttft.count else None,
            accept_length=accept_length,
            accept_rate=accept_rate,
            step_time_p20_seconds=percentile(step_times, STEP_TIME_QUANTILE) if step_times else None,
            requests=w.requests,
            failed_requests=w.failed,
        )

