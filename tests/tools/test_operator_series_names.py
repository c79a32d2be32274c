"""The operator series the rules and the dashboard query (``sglang_operator_tools.monitoring.series``) are the ones the
operator's ``/metrics`` exports (``sglang_operator.process.telemetry``), with the labels the queries rely on."""

from __future__ import annotations

from prometheus_client.metrics import MetricWrapperBase
from sglang_operator_tools.monitoring import series

from sglang_operator.process import telemetry

SERVER = ("namespace", "sglang_server", "revision")
# what the queries group or match by, per series (labels beyond these are allowed)
LABELS = {
    series.OP_ACCEPT_LENGTH: SERVER, series.OP_ACCEPT_RATE: SERVER, series.OP_GENERATION_TPS: SERVER,
    series.OP_DECODE_TPS: SERVER, series.OP_RUNNING: SERVER, series.OP_QUEUED: SERVER,
    series.OP_KV_CACHE_USAGE: SERVER, series.OP_SPEC_NUM_STEPS: SERVER, series.OP_SPEC_NUM_DRAFT_TOKENS: SERVER,
    series.OP_TTFT: (*SERVER, "quantile"), series.OP_ITL: (*SERVER, "quantile"),
    series.OP_SCRAPE_ERRORS: ("reason",), series.OP_SCRAPE_DURATION: (), series.OP_RECONCILE: ("result",),
    series.OP_EVENT_LOOP_LAG: (),
    series.OP_SERVERS: ("phase",),
    series.OP_ANALYSIS_PHASE: ("namespace", "sglang_server", "phase"),
    series.OP_BASELINE_TPS: ("namespace", "sglang_server"),
    series.OP_BASELINE_ACCEPT_LENGTH: ("namespace", "sglang_server"),
    series.OP_STABLE_REVISION: ("namespace", "sglang_server", "stable_revision"),
    series.OP_ROLLBACKS: ("namespace", "sglang_server"),
    series.OP_TUNING_TRIALS: ("namespace", "sglang_tuning", "verdict"),
    series.OP_TUNING_TRIAL_OBJECTIVE: ("namespace", "sglang_tuning", "trial", "settings"),
    series.OP_TUNING_BEST_SPEEDUP: ("namespace", "sglang_tuning", "concurrency"),
    series.OP_TUNINGS: ("phase",),
}


def exported() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Exposed name (counters with ``_total``) → (type, label names) of every metric telemetry defines."""
    out = {}
    for value in vars(telemetry).values():
        if isinstance(value, MetricWrapperBase):
            name = value._name + ("_total" if value._type == "counter" else "")
            out[name] = (value._type, tuple(value._labelnames))
    return out


def test_every_queried_operator_series_is_exported_with_its_labels() -> None:
    names = {v for k, v in vars(series).items() if k.startswith("OP_")}
    assert names == set(LABELS), "LABELS must list every OP_ series"
    got = exported()
    missing = sorted(n for n in names if n not in got and n not in series.ROLLBACK_SERIES)
    assert missing == [], f"queried but not exported: {missing}"
    for name, labels in LABELS.items():
        if name in got:
            assert set(labels) <= set(got[name][1]), (name, got[name])
    if series.OP_ROLLBACKS in got:
        assert got[series.OP_ROLLBACKS][0] == "counter"
    assert got[series.OP_SCRAPE_DURATION][0] == got[series.OP_EVENT_LOOP_LAG][0] == "histogram"
    assert got[series.OP_TUNING_TRIALS][0] == got[series.OP_TUNINGS][0] == "counter"
    assert "namespace" not in got[series.OP_TUNINGS][1]  # the dashboard does not filter it by the namespace
