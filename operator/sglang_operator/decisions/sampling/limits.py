"""Bounds on what the operator reads from an SGLang pod: the pod runs any image (``spec.sglang.image``), so its
answers are untrusted input to the shared operator. :class:`ScrapeLimits` bound one ``/metrics`` scrape, after
Prometheus' scrape-config limits; :class:`ProbeLimits` bound one probe answer (a streamed chat completion,
:func:`sglang_operator.io.loadgen.stream_once`). Every limit is an operator flag (``sglang-operator run``).

=========================  ===========================  ==========================  ==========================
limit                      Prometheus                   operator flag               reason counted on a breach
=========================  ===========================  ==========================  ==========================
``body_bytes``             ``body_size_limit``          ``--scrape-body-limit``     ``too_large``
``samples``                ``sample_limit``             ``--scrape-sample-limit``   ``too_many_samples``
``labels``                 ``label_limit``              ``--scrape-label-limit``    ``too_many_labels``
``label_value_length``     ``label_value_length_limit`` ``--scrape-label-value-``   ``label_value_too_long``
                                                        ``length-limit``
``cache_bytes``            (none)                       ``--scrape-cache-bytes``    (not an error)
``retained_series``        (none)                       ``--scrape-retained-``      ``too_many_series``
                                                        ``series``
``retained_bytes``         (none)                       ``--scrape-retained-bytes`` (not an error: counted in
                                                                                    ``..._retention_breaches``)
``cpu_budget_seconds``     (none)                       ``--scrape-cpu-budget-``    (not an error: the server is
                                                        ``seconds``                 backed off, a condition)
``parse_workers``          (none)                       ``--scrape-parse-workers``  (not a bound: processes)
``min_interval_seconds``   (none)                       ``--min-sample-interval``   (not an error: the floor)
=========================  ===========================  ==========================  ==========================

A breach fails that pod's scrape (``sglang_operator_scrape_errors_total{endpoint="metrics", reason}``), as
Prometheus fails the scrape. All three apply to the sample lines the sampler reads (:mod:`.roles`), which are the
only ones it keeps and parses; the other lines are dropped by the line filter at C speed and bounded by
``body_bytes`` alone — as Prometheus' ``sample_limit`` counts the samples left after ``metric_relabel_configs``.
``cache_bytes``: the per-pod memory of label sets seen before
(:class:`~sglang_operator.decisions.sampling.cache.SeriesCache`). ``retained_series``: series of one role a scrape
may have, as the sampler keeps it until the next interval (label text hashed away: :mod:`.retain`);
``retained_bytes``: what the sampler keeps between intervals for all pods of all servers together; a pod whose scrape
does not fit is not kept (its next interval is inconclusive) and counted. ``parse_workers``: the processes that parse
the kept lines off the event loop (:mod:`sglang_operator.io.parse_pool`; 0: on the loop); ``cpu_budget_seconds``: the
parse CPU one server's pods may cost per interval, over which the server is sampled less often and told so in its
``SamplingBackedOff`` condition (:mod:`.budget`); ``min_interval_seconds``: the floor on any server's sampling
interval.

A probe answer over ``body_bytes`` (``--probe-body-limit``), with a line over ``line_bytes``
(``--probe-line-limit``; a line is never held beyond it) or more than ``chunks`` ``data:`` lines
(``--probe-chunk-limit``) stops being read; the probe fails with the limit's reason (:data:`LIMIT_REASONS`),
counted under ``{endpoint="probe", reason}``. The caps of one probe are those of the answer it asked for
(:meth:`ProbeLimits.for_max_tokens`): at ``probe.maxTokens`` 256, 576 chunks and 1.1 MiB, so a hostile answer
stops after a few ms of parsing instead of at the flags' 100 000 chunks.
"""

from __future__ import annotations

from dataclasses import dataclass

# The simulator's largest /metrics body (DP 8 x TP 8, 0.5.23, after traffic) is 21 661 bytes: 147 samples, at most
# 6 labels, label values of at most 16 characters (a real 0.5.23 server's is ~200 KiB). Defaults are >= 10 x that.
BODY_BYTES = 8 * 1024 * 1024
"""Default ``body_bytes``: bytes of one decoded body."""
SAMPLES = 2_000
"""Default ``samples``: sample lines the sampler reads in one body. What SGLang emits of them: 79 for one pod of the
simulator's largest layout and of a real 0.5.23 server (``bench/scrape.py``'s body: 62 histogram buckets, the rest
one per role); each scheduler gauge once more per DP rank, so a pod of 64 ranks ~700. 2 000 is 25 x the usual 79
(10 000 long-labelled lines cost 0.3-0.4 s of CPU to parse: docs/bounds-and-sizing.md, "Parsing off the event loop")."""
LABELS = 64
"""Default ``labels``: labels of one sample (``le`` included)."""
LABEL_VALUE_LENGTH = 2048
"""Default ``label_value_length``: characters of one label value."""
CACHE_BYTES = 320 * 1024
"""Default ``cache_bytes``: bytes of label sets remembered per pod (the simulator's wanted series of that body, as
:class:`~sglang_operator.decisions.sampling.cache.SeriesCache` counts them: 79 entries, 29 951 bytes)."""
RETAINED_SERIES = 256
"""Default ``retained_series``: series of one role in one scrape (a legitimate pod has one per role and rank)."""
RETAINED_BYTES = 64 * 1024 * 1024
"""Default ``retained_bytes``: bytes the sampler keeps between intervals, all pods together (a legitimate pod's
kept scrape is ~10 KiB: 6 400 pods)."""
CPU_BUDGET_SECONDS = 0.25
"""Default ``cpu_budget_seconds``: CPU seconds the parse of one server's scrapes may cost per interval, all its pods
together (measured in the worker that parses, :func:`time.thread_time`); a pod of a real 0.5.23 server costs ~2 ms
(``bench/scrape.py``'s 200 KiB body), so ~100 pods fit. A server over it is backed off
(:mod:`~sglang_operator.decisions.sampling.budget`)."""
PARSE_WORKERS = 1
"""Default of ``--scrape-parse-workers``: processes that parse the kept sample lines off the event loop (0: on the
loop). :class:`ScrapeLimits` itself defaults to 0 (the offline tests parse on their loop; the operator's flag sets
it)."""
MIN_INTERVAL_SECONDS = 1.0
"""Default ``min_interval_seconds``: the shortest sampling interval the sampler keeps to, whatever
``spec.rollback.intervalSeconds`` or ``--sample-interval`` say (the CRD's own minimum is 1 s)."""
REASONS = ("too_large", "too_many_samples", "too_many_labels", "label_value_too_long")
"""The scrape-error reasons of a breached limit (in the order of the table above)."""


@dataclass(frozen=True)
class ScrapeLimits:
    """The limits of the module docstring: the byte and count bounds at least 1, ``cpu_budget_seconds`` and
    ``min_interval_seconds`` (seconds) above 0, ``parse_workers`` (processes) at least 0. Raises ``ValueError``
    otherwise."""

    body_bytes: int = BODY_BYTES
    samples: int = SAMPLES
    labels: int = LABELS
    label_value_length: int = LABEL_VALUE_LENGTH
    cache_bytes: int = CACHE_BYTES
    retained_series: int = RETAINED_SERIES
    retained_bytes: int = RETAINED_BYTES
    cpu_budget_seconds: float = CPU_BUDGET_SECONDS
    parse_workers: int = 0
    min_interval_seconds: float = MIN_INTERVAL_SECONDS

    def __post_init__(self) -> None:
        if min(self.body_bytes, self.samples, self.labels, self.label_value_length, self.cache_bytes,
               self.retained_series, self.retained_bytes) < 1:
            raise ValueError(f"scrape limits must be positive: {self}")
        if self.cpu_budget_seconds <= 0 or self.parse_workers < 0 or self.min_interval_seconds <= 0:
            raise ValueError(f"the CPU budget and the interval floor must be positive, the workers at least 0: {self}")


# The simulator's longest probe answer (DP 8 x TP 8, max_tokens 2048, speculative: ~1.75 tokens per chunk) is
# 201 092 bytes in 1 506 lines (753 chunks), its longest line 273 bytes; spec.rollback.probe.maxTokens is at most
# 8 192, one token per chunk without speculative decoding: ~8 200 chunks, ~2.2 MB. The defaults are >= 10 x that.
PROBE_BODY_BYTES = 32 * 1024 * 1024
"""Default cap on one probe answer, bytes (``--probe-body-limit``)."""
PROBE_LINE_BYTES = 64 * 1024
"""Default cap on one line of a probe answer, bytes (``--probe-line-limit``)."""
PROBE_CHUNKS = 100_000
"""Default cap on the ``data:`` chunks of one probe answer (``--probe-chunk-limit``)."""
CHUNKS_PER_TOKEN = 2
"""Chunks per requested token :meth:`ProbeLimits.for_max_tokens` allows (a legitimate answer has at most one)."""
CHUNKS_EXTRA = 64
"""Chunks beyond the tokens :meth:`ProbeLimits.for_max_tokens` allows (role, finish, usage, keep-alives)."""
BYTES_PER_CHUNK = 2048
"""Bytes per chunk :meth:`ProbeLimits.for_max_tokens` allows (the simulator's are ~270 with their blank line; a long
served model name and an id add a few hundred)."""
BODY_TOO_LARGE = "probe_body_too_large"
LINE_TOO_LONG = "probe_line_too_long"
TOO_MANY_CHUNKS = "probe_too_many_chunks"
LIMIT_REASONS = frozenset({BODY_TOO_LARGE, LINE_TOO_LONG, TOO_MANY_CHUNKS})
"""The ``error`` of a stream stopped at a :class:`ProbeLimits` cap (also the reason it is counted under)."""


@dataclass(frozen=True)
class ProbeLimits:
    """Caps on one streamed answer: ``body_bytes`` in all, ``line_bytes`` per line, ``chunks`` (``data:`` lines).
    Raises ``ValueError`` when one is below 1."""

    body_bytes: int = PROBE_BODY_BYTES
    line_bytes: int = PROBE_LINE_BYTES
    chunks: int = PROBE_CHUNKS

    def __post_init__(self) -> None:
        if min(self.body_bytes, self.line_bytes, self.chunks) < 1:
            raise ValueError(f"probe limits must be positive: {self}")

    def for_max_tokens(self, max_tokens: int) -> ProbeLimits:
        """The caps of one probe asking for ``max_tokens`` output tokens (``spec.rollback.probe.maxTokens``):
        ``chunks`` at most :data:`CHUNKS_PER_TOKEN` per token plus :data:`CHUNKS_EXTRA` (SGLang streams at most one
        chunk per decode step, each with at least one token, plus the role, finish and usage chunks), ``body_bytes``
        at most :data:`BYTES_PER_CHUNK` per such chunk; never above this object's own caps (the operator's flags).
        Raises ``ValueError`` when ``max_tokens`` is below 1."""
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be positive: {max_tokens}")
        chunks = min(self.chunks, CHUNKS_PER_TOKEN * max_tokens + CHUNKS_EXTRA)
        return ProbeLimits(body_bytes=min(self.body_bytes, chunks * BYTES_PER_CHUNK), line_bytes=self.line_bytes,
                           chunks=chunks)
