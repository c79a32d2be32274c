"""The sampler's own counters of its reads of SGLang pods (part of the operator's ``/metrics``,
:mod:`sglang_operator.process.telemetry`; docs/metrics.md): kept in the I/O layer, where the reads happen, so the
sampler counts without importing the process layer above it."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

SCRAPE_ERRORS = Counter(
    "sglang_operator_scrape_errors", "Failed reads of SGLang endpoints, by endpoint (metrics, server_info, probe) "
    "and reason (timeout, connection, transport, http_status, too_large, truncated, parse, worker_lost, bad_url; a "
    "breached limit: too_many_samples, too_many_labels, label_value_too_long, too_many_series, probe_body_too_large, "
    "probe_line_too_long, probe_too_many_chunks).",
    ["endpoint", "reason"],
)
SCRAPE_DURATION = Histogram(
    "sglang_operator_scrape_duration_seconds", "Duration of one /metrics scrape of one SGLang pod, seconds "
    "(failed scrapes included).", buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0),
)
RETENTION_BREACHES = Counter(
    "sglang_operator_scrape_retention_breaches", "Pod scrapes the sampler did not keep until the next interval, by "
    "reason: too_many_series (more series of one role than --scrape-retained-series: the pod's sample is an Error), "
    "retained_budget (--scrape-retained-bytes, all pods together, is spent: its next interval is inconclusive). "
    "One per pod and interval.",
    ["reason"],
)
PARSE_CPU = Histogram(
    "sglang_operator_scrape_parse_cpu_seconds", "CPU seconds the parse of one pod's /metrics sample lines took in "
    "the worker that parsed it (--scrape-parse-workers; on the event loop with 0).",
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0),
)
CPU_BUDGET_BREACHES = Counter(
    "sglang_operator_scrape_cpu_budget_breaches", "Samples of a server whose pods' parses cost more CPU than "
    "--scrape-cpu-budget-seconds: the server is sampled less often (condition SamplingBackedOff).",
)
DUPLICATE_SAMPLES = Counter(
    "sglang_operator_scrape_duplicate_samples", "Samples dropped from SGLang scrapes because their series appeared "
    "earlier in the same body (the first is kept, as Prometheus does).",
)


def count_scrape_error(endpoint: str, reason: str) -> None:
    """Count one failed read of an SGLang endpoint."""
    SCRAPE_ERRORS.labels(endpoint, reason).inc()
