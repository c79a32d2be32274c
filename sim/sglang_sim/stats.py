"""Counters, gauges and histograms the simulated scheduler and tokenizer manager keep for ``/metrics``.

The names mirror SGLang's collectors (``python/sglang/srt/observability/metrics_collector.py``); the
rendering (which families exist in which version, labels) is in :mod:`sglang_sim.metrics`.
All durations are simulated seconds.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

# Default buckets of SGLang's TokenizerMetricsCollector (0.5.10 and 0.5.23), in seconds.
TTFT_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0,
                200.0, 400.0)
ITL_BUCKETS = (0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060,
               0.080, 0.100, 0.200, 0.400, 0.600, 0.800, 1.0, 2.0, 4.0, 6.0, 8.0)
E2E_BUCKETS = (0.1, 0.2, 0.4, 0.6, 0.8, 1.0, 2.0, 4.0, 6.0, 8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0,
               200.0, 400.0, 600.0, 1200.0, 1800.0, 2400.0)


@dataclass
class Histogram:
    """A cumulative Prometheus histogram: per-bucket counts (``le`` upper bounds), sum and count."""

    buckets: tuple[float, ...]
    counts: list[int] = field(default_factory=list)
    total: float = 0.0
    count: int = 0

    def __post_init__(self) -> None:
        if not self.counts:
            self.counts = [0] * len(self.buckets)

    def observe(self, value: float, times: int = 1) -> None:
        """Record ``value`` (seconds) ``times`` times."""
        i = bisect.bisect_left(self.buckets, value)
        if i < len(self.counts):
            self.counts[i] += times
        self.total += value * times
        self.count += times

    def cumulative(self) -> list[tuple[str, int]]:
        """``(le, cumulative count)`` pairs including ``+Inf``."""
        out: list[tuple[str, int]] = []
        run = 0
        for b, c in zip(self.buckets, self.counts, strict=True):
            run += c
            out.append((repr(float(b)), run))
        out.append(("+Inf", self.count))
        return out


@dataclass
class SchedulerGauges:
    """Scheduler gauges, refreshed every ``--decode-log-interval`` decode steps and on prefill batches."""

    num_running_reqs: int = 0
    num_queue_reqs: int = 0
    gen_throughput: float = 0.0
    spec_accept_length: float = 0.0
    spec_accept_rate: float = 0.0
    token_usage: float = 0.0
    num_used_tokens: int = 0
    mamba_usage: float = 0.0
    cache_hit_rate: float = 0.0
    spec_num_steps: int | None = None
    """Adaptive mode: the active tier (``sglang:spec_num_steps``, "Currently active speculative_num_steps"); None:
    the start-up value."""
    spec_num_draft_tokens: int | None = None


@dataclass
class Stats:
    """Everything ``/metrics`` and ``/server_info`` report; ``is_streaming`` keys are ``"true"``/``"false"``."""

    gauges: SchedulerGauges = field(default_factory=SchedulerGauges)
    prompt_tokens: dict[str, int] = field(default_factory=lambda: {"true": 0, "false": 0})
    generation_tokens: dict[str, int] = field(default_factory=lambda: {"true": 0, "false": 0})
    num_requests: dict[str, int] = field(default_factory=lambda: {"true": 0, "false": 0})
    num_aborted_requests: int = 0
    spec_verify_calls: dict[str, int] = field(default_factory=lambda: {"true": 0, "false": 0})
    realtime_decode_tokens: int = 0
    realtime_prefill_tokens: int = 0
    ttft: dict[str, Histogram] = field(
        default_factory=lambda: {k: Histogram(TTFT_BUCKETS) for k in ("true", "false")})
    e2e: dict[str, Histogram] = field(
        default_factory=lambda: {k: Histogram(E2E_BUCKETS) for k in ("true", "false")})
    itl: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS))
    total_accept_tokens: int = 0
    total_verify_ct: int = 0
    last_gen_throughput: float = 0.0
    step_time_dict: dict[int, list[float]] = field(default_factory=dict)
    """``SGLANG_RECORD_STEP_TIME`` only: running requests → mean decode step time of each log window, seconds
    (``MetricsReporter.step_time_dict``; SGLang keeps every entry, so does the simulator)."""

    def avg_spec_accept_length(self) -> float | None:
        """Cumulative accept length since start (``internal_states[].avg_spec_accept_length``)."""
        return self.total_accept_tokens / self.total_verify_ct if self.total_verify_ct else None
