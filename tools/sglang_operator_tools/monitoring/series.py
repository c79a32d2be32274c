"""The series the alert rules and the dashboard query, named once.

SGLang's own families are looked up in the package's per-release metric tables
(``sglang_operator/sglang/data/metrics-<version>.json``, extracted from SGLang's
``python/sglang/srt/observability/metrics_collector.py``): :func:`sglang_family` raises ``KeyError`` for a name
no supported release declares, so a typo or a rename fails at import time, not as an empty panel.
:func:`releases_with` says which releases have a family (``sglang:spec_verify_calls_total`` and
``sglang:spec_num_steps`` exist only in the 0.5.2x table).

The operator's own series (``sglang_operator_*``) are exported by the operator's ``/metrics``
(``sglang_operator.process.telemetry``, ``sglang-operator run --metrics-port``, default 9808). Server series carry the
labels ``namespace``, ``sglang_server`` and ``revision``; the rollback series are listed in
``docs/monitoring.md`` with their exact labels so the exporter matches them.
"""

from __future__ import annotations

from functools import cache

from sglang_operator.sglang.metrics import load_metrics
from sglang_operator.sglang.versions import SUPPORTED


@cache
def _declared() -> dict[str, tuple[str, ...]]:
    out: dict[str, list[str]] = {}
    for version in SUPPORTED:
        for name in load_metrics(version):
            out.setdefault(name, []).append(str(version))
    return {k: tuple(v) for k, v in out.items()}


def sglang_family(name: str) -> str:
    """``name`` (as exposed: counters end in ``_total``) when a supported SGLang release declares it.

    Raises ``KeyError`` naming the family otherwise.
    """
    if name not in _declared():
        raise KeyError(f"no supported SGLang release declares the metric family {name!r}")
    return name


def releases_with(name: str) -> tuple[str, ...]:
    """The supported SGLang metric tables (``"0.5.10"``, ``"0.5.23"``) that declare ``name``."""
    return _declared().get(name, ())


# SGLang (per pod; target labels namespace, pod, sglang_server, revision added by the scrape config)
GENERATION_TOKENS = sglang_family("sglang:generation_tokens_total")
SPEC_VERIFY_CALLS = sglang_family("sglang:spec_verify_calls_total")
SPEC_ACCEPT_LENGTH = sglang_family("sglang:spec_accept_length")
SPEC_ACCEPT_RATE = sglang_family("sglang:spec_accept_rate")
SPEC_NUM_STEPS = sglang_family("sglang:spec_num_steps")
SPEC_NUM_DRAFT_TOKENS = sglang_family("sglang:spec_num_draft_tokens")
NUM_RUNNING_REQS = sglang_family("sglang:num_running_reqs")
NUM_QUEUE_REQS = sglang_family("sglang:num_queue_reqs")
TOKEN_USAGE = sglang_family("sglang:token_usage")
CACHE_HIT_RATE = sglang_family("sglang:cache_hit_rate")
RETRACTED_REQUESTS = sglang_family("sglang:num_retracted_requests_total")
TTFT = sglang_family("sglang:time_to_first_token_seconds")
ITL = sglang_family("sglang:inter_token_latency_seconds")

# The operator's sampler (issue 7): gauges, labels namespace, sglang_server, revision
OP_ACCEPT_LENGTH = "sglang_operator_server_accept_length"
OP_ACCEPT_RATE = "sglang_operator_server_accept_rate"
OP_GENERATION_TPS = "sglang_operator_server_generation_tokens_per_second"
OP_DECODE_TPS = "sglang_operator_server_decode_tokens_per_second"
OP_RUNNING = "sglang_operator_server_running_requests"
OP_QUEUED = "sglang_operator_server_queued_requests"
OP_KV_CACHE_USAGE = "sglang_operator_server_kv_cache_usage"
OP_TTFT = "sglang_operator_server_time_to_first_token_seconds"
"""Gauge with label ``quantile`` (``0.5``, ``0.95``)."""
OP_ITL = "sglang_operator_server_inter_token_latency_seconds"
"""Gauge with label ``quantile`` (``0.5``, ``0.95``)."""
OP_SPEC_NUM_STEPS = "sglang_operator_server_speculative_num_steps"
"""Gauge: ``speculative_num_steps`` SGLang resolved for the serving revision (``status.effective.numSteps``); the
fallback where SGLang has no ``sglang:spec_num_steps`` (0.5.10)."""
OP_SPEC_NUM_DRAFT_TOKENS = "sglang_operator_server_speculative_num_draft_tokens"
"""Gauge: ``speculative_num_draft_tokens`` SGLang resolved for the serving revision (``status.effective``)."""

# The operator's health
OP_SCRAPE_ERRORS = "sglang_operator_scrape_errors_total"
"""Counter, label ``reason``."""
OP_SCRAPE_DURATION = "sglang_operator_scrape_duration_seconds"
"""Histogram."""
OP_EVENT_LOOP_LAG = "sglang_operator_event_loop_lag_seconds"
"""Histogram: how late the operator's event loop ran a 0.25 s timer, seconds (issue 42)."""
OP_RECONCILE = "sglang_operator_reconcile_total"
"""Counter, label ``result``."""
OP_SERVERS = "sglang_operator_servers"
"""Gauge: SGLangServers per ``phase`` (``status.phase``: Ready, Progressing, Degraded, ...)."""

# The rollback (issue 8): the names its exporter must use
OP_ANALYSIS_PHASE = "sglang_operator_server_analysis_phase"
"""Gauge, labels ``namespace``, ``sglang_server``, ``phase``: 1 for the server's current analysis phase."""
OP_BASELINE_TPS = "sglang_operator_server_baseline_tokens_per_second"
"""Gauge, labels ``namespace``, ``sglang_server``: the stable revision's decode tok/s the new one is judged by."""
OP_BASELINE_ACCEPT_LENGTH = "sglang_operator_server_baseline_accept_length"
"""Gauge, labels ``namespace``, ``sglang_server``: the stable revision's accept length."""
OP_STABLE_REVISION = "sglang_operator_server_stable_revision_info"
"""Gauge 1, labels ``namespace``, ``sglang_server``, ``stable_revision``."""
OP_ROLLBACKS = "sglang_operator_rollbacks_total"
"""Counter, labels ``namespace``, ``sglang_server``: automatic rollbacks done."""

ROLLBACK_SERIES = (OP_ANALYSIS_PHASE, OP_BASELINE_TPS, OP_BASELINE_ACCEPT_LENGTH, OP_STABLE_REVISION, OP_ROLLBACKS)
"""Exported once the rollback lands (issue 8); panels and the rollback alert on them show nothing before."""

# SGLangTunings (issue 17; ``sglang_operator.process.telemetry``, called by ``control/tuning.py``)
OP_TUNING_TRIALS = "sglang_operator_tuning_trials_total"
"""Counter, labels ``namespace``, ``sglang_tuning``, ``verdict`` (``Completed``, ``Failed``): finished trials."""
OP_TUNING_TRIAL_OBJECTIVE = "sglang_operator_tuning_trial_objective"
"""Gauge, labels ``namespace``, ``sglang_tuning``, ``trial``, ``settings`` (``3/1/4``, ``no speculation``): a
completed trial's objective, tok/s (``status.trials[].objective``)."""
OP_TUNING_BEST_SPEEDUP = "sglang_operator_tuning_best_speedup"
"""Gauge, labels ``namespace``, ``sglang_tuning``, ``concurrency`` (a level, or ``all``): the recommendation's
output tok/s ÷ the control trial's (no speculative decoding), a ratio; set when the tuning ends."""
OP_TUNINGS = "sglang_operator_tunings_total"
"""Counter, label ``phase`` (``Succeeded``, ``Failed``, ``Cancelled``): tunings ended. No ``namespace`` label of its
own: scraped, it carries the operator's."""

TUNING_SERIES = (OP_TUNING_TRIALS, OP_TUNING_TRIAL_OBJECTIVE, OP_TUNING_BEST_SPEEDUP, OP_TUNINGS)
"""Exported only once an SGLangTuning has finished a trial (or ended): the dashboard's Tuning row is empty before."""
