"""The operator's /metrics: per-revision figures keep their last measured value through idle intervals, series of
retired revisions and deleted servers are removed, and the endpoint serves the Prometheus text."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
import urllib.request

from prometheus_client import REGISTRY
from prometheus_client.parser import text_string_to_metric_families

from sglang_operator.api.analysis import Analysis, AnalysisPhase, StableRegression
from sglang_operator.decisions.rollback_state import RollbackState
from sglang_operator.decisions.sampling.model import Figures, Sample, SampleKind
from sglang_operator.process import metrics_http, telemetry

T1 = dt.datetime(2026, 12, 1, 12, 0, 30, tzinfo=dt.UTC)


def sample(revision: str, kind: SampleKind = SampleKind.MEASURED, **figures: float) -> Sample:
    return Sample(kind, revision, T1 - dt.timedelta(seconds=30), T1, Figures(**figures))


def value(name: str, **labels: str) -> float | None:
    return REGISTRY.get_sample_value(name, {"namespace": "tns", "sglang_server": "qwen", **labels})


def test_last_measured_value_survives_idle_intervals_and_load_follows() -> None:
    series = telemetry.ServerSeries()
    series.export("tns", "qwen", [sample("r1", accept_length=2.72, decode_tokens_per_second=51.6, running_requests=3,
                                         ttft_p50_seconds=0.2, itl_p95_seconds=0.03)])
    assert value("sglang_operator_server_accept_length", revision="r1") == 2.72
    assert value("sglang_operator_server_time_to_first_token_seconds", revision="r1", quantile="0.5") == 0.2
    assert value("sglang_operator_server_inter_token_latency_seconds", revision="r1", quantile="0.95") == 0.03
    assert value("sglang_operator_server_sample_timestamp_seconds", revision="r1") == T1.timestamp()
    idle = Sample(SampleKind.INCONCLUSIVE, "r1", T1, T1 + dt.timedelta(seconds=30),
                  Figures(generation_tokens_per_second=0.0, running_requests=0.0), reason="idle")
    series.export("tns", "qwen", [idle])
    assert value("sglang_operator_server_accept_length", revision="r1") == 2.72  # kept
    assert value("sglang_operator_server_decode_tokens_per_second", revision="r1") == 51.6
    assert value("sglang_operator_server_running_requests", revision="r1") == 0.0  # load is read every time
    assert value("sglang_operator_server_sample_timestamp_seconds", revision="r1") == T1.timestamp()
    assert value("sglang_operator_samples_total", revision="r1", kind="Inconclusive") == 1
    series.forget("tns", "qwen")


def test_load_a_sample_did_not_read_is_removed_not_kept() -> None:
    """Autoscaling's built-in queries read the load series (builders/autoscaling.py): a sample that scraped no pod
    removes them, so KEDA finds no series (an error: its fallback holds the count) rather than a stale figure."""
    series = telemetry.ServerSeries()
    series.export("tns", "qwen", [sample("r1", running_requests=7, queued_requests=2, kv_cache_usage=0.6,
                                         kv_cache_usage_summed=1.1)])
    assert value("sglang_operator_server_kv_cache_usage_summed", revision="r1") == 1.1
    series.export("tns", "qwen", [sample("r1", SampleKind.ERROR)])  # no pod answered its scrape
    for name in ("running_requests", "queued_requests", "kv_cache_usage", "kv_cache_usage_summed"):
        assert value(f"sglang_operator_server_{name}", revision="r1") is None, name
    series.export("tns", "qwen", [sample("r1", SampleKind.INCONCLUSIVE, running_requests=1)])
    assert value("sglang_operator_server_running_requests", revision="r1") == 1
    series.forget("tns", "qwen")
    assert value("sglang_operator_server_running_requests", revision="r1") is None


def test_retired_revisions_and_deleted_servers_lose_their_series() -> None:
    series = telemetry.ServerSeries()
    series.export("tns", "qwen", [sample("old", accept_length=1.75, ttft_p50_seconds=0.1),
                                  sample("new", accept_length=2.7)])
    series.export("tns", "qwen", [sample("new", accept_length=2.71)])  # no pod of "old" left
    assert value("sglang_operator_server_accept_length", revision="old") is None
    assert value("sglang_operator_server_time_to_first_token_seconds", revision="old", quantile="0.5") is None
    assert value("sglang_operator_samples_total", revision="old", kind="Measured") is None
    assert value("sglang_operator_server_accept_length", revision="new") == 2.71
    series.forget("tns", "qwen")
    assert value("sglang_operator_server_accept_length", revision="new") is None


def test_effective_speculative_settings_follow_the_serving_revision() -> None:
    series = telemetry.ServerSeries()
    steps = "sglang_operator_server_speculative_num_steps"
    drafts = "sglang_operator_server_speculative_num_draft_tokens"
    series.export_effective("tns", "qwen", "good", None)  # not read yet: nothing exported
    assert value(steps, revision="good") is None
    series.export_effective("tns", "qwen", "good", {"algorithm": "EAGLE", "numSteps": 3, "numDraftTokens": 4})
    assert (value(steps, revision="good"), value(drafts, revision="good")) == (3, 4)
    series.export_effective("tns", "qwen", "bad", None)  # a new revision: status.effective was reset
    assert value(steps, revision="good") is None and value(steps, revision="bad") is None
    series.export_effective("tns", "qwen", "bad", {"numSteps": 1, "numDraftTokens": 2})
    series.export_effective("tns", "qwen", "good", {"numSteps": 3, "numDraftTokens": 4})  # rolled back
    assert (value(steps, revision="bad"), value(drafts, revision="bad")) == (None, None)
    assert (value(steps, revision="good"), value(drafts, revision="good")) == (3, 4)
    series.export_effective("tns", "qwen", "good", {"numSteps": 3, "numDraftTokens": True})  # not a count
    assert (value(steps, revision="good"), value(drafts, revision="good")) == (3, None)
    series.forget("tns", "qwen")
    assert value(steps, revision="good") is None


def test_a_stable_regression_exports_its_current_figures_while_it_lasts() -> None:
    """The gauges follow the regression's figures (``decisions.rollback`` updates them with every failing sample),
    and vanish when it clears."""
    series = telemetry.ServerSeries()
    analysis = Analysis(revision="r1", phase=AnalysisPhase.STABLE, since=T1, progress_started_at=T1)
    state = RollbackState(stable_revision="r1", analysis=analysis)
    series.export_analysis("tns", "qwen", state)
    assert value("sglang_operator_server_stable_regression_accept_length") is None
    for tps, accept in ((51.6, 2.2), (40.0, 1.9)):
        analysis.stable_regression = StableRegression(message="…", since=T1, tokens_per_second=tps,
                                                      accept_length=accept)
        series.export_analysis("tns", "qwen", state)
        assert value("sglang_operator_server_stable_regression_accept_length") == accept
        assert value("sglang_operator_server_stable_regression_tokens_per_second") == tps
    analysis.stable_regression = StableRegression(message="pod restarted", since=T1)  # no figure measured
    series.export_analysis("tns", "qwen", state)
    assert value("sglang_operator_server_stable_regression_tokens_per_second") is None
    analysis.stable_regression = StableRegression(message="…", since=T1, tokens_per_second=30.0)
    series.export_analysis("tns", "qwen", state)
    assert value("sglang_operator_server_stable_regression_tokens_per_second") == 30.0
    analysis.stable_regression = None
    series.export_analysis("tns", "qwen", state)
    assert value("sglang_operator_server_stable_regression_tokens_per_second") is None
    series.forget("tns", "qwen")


def test_servers_by_phase_and_counters() -> None:
    telemetry.set_servers(["Ready", "Ready", None], known=["Ready", "Degraded"])
    assert REGISTRY.get_sample_value("sglang_operator_servers", {"phase": "Ready"}) == 2
    assert REGISTRY.get_sample_value("sglang_operator_servers", {"phase": "Unknown"}) == 1
    telemetry.set_servers([], known=["Ready", "Degraded", "Unknown"])
    assert REGISTRY.get_sample_value("sglang_operator_servers", {"phase": "Ready"}) == 0
    before = REGISTRY.get_sample_value("sglang_operator_reconcile_total", {"result": "applied"}) or 0
    telemetry.count_reconcile("applied")
    assert REGISTRY.get_sample_value("sglang_operator_reconcile_total", {"result": "applied"}) == before + 1


def test_the_endpoint_serves_every_operator_family() -> None:
    series = telemetry.ServerSeries()
    series.export("tns", "qwen", [sample("r1", accept_length=2.72)])
    server = metrics_http.serve(0, "127.0.0.1")
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{server.port}/metrics", timeout=5) as r:
            families = {f.name: f for f in text_string_to_metric_families(r.read().decode())}
    finally:
        server.shutdown()
    for name in ("sglang_operator_server_accept_length", "sglang_operator_scrape_errors",
                 "sglang_operator_scrape_duration_seconds", "sglang_operator_reconcile", "sglang_operator_servers",
                 "process_resident_memory_bytes"):
        assert name in families, name
    [s] = [s for s in families["sglang_operator_server_accept_length"].samples if s.labels["namespace"] == "tns"]
    assert s.labels == {"namespace": "tns", "sglang_server": "qwen", "revision": "r1"} and s.value == 2.72
    series.forget("tns", "qwen")


async def test_the_event_loop_lag_is_measured_and_exported() -> None:
    """Issue 42: a callback that holds the loop shows as lag (sglang_operator_event_loop_lag_seconds)."""
    seen: list[float] = []
    watch = asyncio.get_running_loop().create_task(telemetry.watch_loop_lag(0.05, seen.append))
    await asyncio.sleep(0.12)
    time.sleep(0.3)  # the loop held for 0.3 s
    await asyncio.sleep(0.12)
    watch.cancel()
    assert max(seen) >= 0.2 and min(seen) >= 0.0
    before = REGISTRY.get_sample_value("sglang_operator_event_loop_lag_seconds_count") or 0.0
    telemetry.EVENT_LOOP_LAG.observe(0.01)
    assert REGISTRY.get_sample_value("sglang_operator_event_loop_lag_seconds_count") == before + 1


def test_every_criterion_names_a_series_the_operator_exports() -> None:
    """Each row of the criteria table (``decisions/criteria.py``) names the operator's series that shows its figure
    (``Criterion.series``, what the dashboard plots): a series this process registers, never a made-up name."""
    from prometheus_client.metrics import MetricWrapperBase

    from sglang_operator.decisions.criteria import CRITERIA

    exported = {m._name for m in vars(telemetry).values() if isinstance(m, MetricWrapperBase)}
    assert "sglang_operator_server_decode_tokens_per_second" in exported
    assert [c.series for c in CRITERIA if c.series not in exported] == []
