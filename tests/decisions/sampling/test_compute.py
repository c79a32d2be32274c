"""The pure computation of a sample from two scrapes: Prometheus' rate() and histogram_quantile() semantics, the
accept length from counters or the gauge, and every reason a sample is Inconclusive or an Error."""

from __future__ import annotations

import datetime as dt
import math

import pytest
from expo import exposition

from sglang_operator.decisions.sampling.compute import (
    ProbeOutcome,
    Scrape,
    ScrapeFailure,
    bucket_quantile,
    compute_sample,
    counter_increase,
)
from sglang_operator.decisions.sampling.model import PodView, SampleKind, Signal
from sglang_operator.decisions.sampling.parse import parse_text
from sglang_operator.decisions.sampling.roles import Role, roles_for
from sglang_operator.sglang.versions import parse_version

T0 = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
T1 = T0 + dt.timedelta(seconds=30)
R23 = roles_for(parse_version("0.5.23"))
R10 = roles_for(parse_version("0.5.10"))
POD = PodView("p0", True, 0)


def scrape(at: dt.datetime, pod: str = "p0", roles=R23, **kw) -> Scrape:
    return Scrape(pod, at, parse_text(exposition(**kw).encode(), roles))


def test_counter_increase_follows_rate_resets_and_new_series() -> None:
    assert counter_increase({"a": 100.0}, {"a": 160.0}) == 60.0
    assert counter_increase({"a": 1000.0}, {"a": 50.0}) == 50.0  # went backwards: a reset, the new value is the rise
    assert counter_increase({"a": 10.0}, {"a": 15.0, "b": 7.0}) == 12.0  # b created since: counts from 0
    assert counter_increase({"a": 10.0}, {"a": math.nan}) is None
    assert counter_increase({"a": math.inf}, {"a": 5.0}) is None


@pytest.mark.parametrize(("q", "buckets", "expected"), [
    (0.5, {0.1: 10, 0.2: 20, 0.4: 40, math.inf: 40}, 0.2),
    (0.95, {0.1: 10, 0.2: 20, 0.4: 40, math.inf: 40}, 0.38),
    (0.25, {0.1: 10, 0.2: 20, 0.4: 40, math.inf: 40}, 0.1),
    (0.1, {0.1: 10, 0.2: 20, 0.4: 40, math.inf: 40}, 0.04),  # first bucket: lower bound 0
    (0.9, {0.1: 5, math.inf: 10}, 0.1),  # rank in +Inf: the second-highest bound
    (0.5, {0.1: 10, 0.2: 8, math.inf: 10}, 0.05),  # forced monotonic, as Prometheus does
    (0.5, {0.1: 10, 0.2: 20}, None),  # no +Inf bucket: NaN in Prometheus
    (0.5, {0.1: 0, math.inf: 0}, None),  # no observations
    (0.5, {math.inf: 3}, None),  # fewer than two buckets
])
def test_bucket_quantile_is_prometheus_histogram_quantile(q: float, buckets: dict[float, float],
                                                          expected: float | None) -> None:
    got = bucket_quantile(q, buckets)
    assert got == (None if expected is None else pytest.approx(expected))


def _sample(prev: dict, curr: dict, **kw):
    return compute_sample("r1", [POD], {"p0": scrape(T1, **curr)}, {"p0": scrape(T0, **prev)}, R23, T1, **kw)


def test_measured_interval_figures() -> None:
    s = _sample(
        dict(gen=1000, verify=400, ttft=(1, 1, 0, 0, 0, 0, 0, 0), ttft_sum=0.25, itl=(0,) * 8),
        dict(gen=1000 + 1635, verify=400 + 600, running=3, queued=1, accept_length=2.7, accept_rate=0.57, usage=0.31,
             ttft=(1, 5, 3, 1, 0, 0, 0, 0), ttft_sum=3.0, itl=(0, 100, 1400, 100, 0, 0, 0, 0), itl_sum=30.0),
        probe=ProbeOutcome("p0", 51.6),
    )
    assert s.kind is SampleKind.MEASURED, s.reason
    f = s.figures
    assert f.generation_tokens_per_second == pytest.approx(1635 / 30)
    assert f.accept_length == pytest.approx(1635 / 600)  # counters, not the gauge
    assert f.accept_rate == pytest.approx(0.57) and f.kv_cache_usage == pytest.approx(0.31)
    assert (f.running_requests, f.queued_requests) == (3, 1)
    assert f.decode_tokens_per_second == 51.6  # the probe's single stream
    # TTFT increases: 0, 4, 3, 1 in (0.1, 0.2, 0.4, 0.6] -> 8 observations; p50 rank 4 -> le 0.2 exactly
    assert f.ttft_p50_seconds == pytest.approx(0.2)
    assert f.ttft_p95_seconds == pytest.approx(0.4 + 0.2 * (7.6 - 7) / 1)
    assert f.itl_p50_seconds == pytest.approx(0.015 + 0.005 * (800 - 100) / 1400)
    assert (s.start, s.end, s.pods, s.interval_seconds) == (T0, T1, ("p0",), 30.0)


def test_traffic_signal_uses_one_over_mean_inter_token_latency_and_the_floor() -> None:
    prev = dict(gen=0, verify=0, itl_sum=10.0, itl=(0, 0, 500, 0, 0, 0, 0, 0))
    curr = dict(gen=2725, verify=1000, running=4, itl_sum=10.0 + 50.0, itl=(0, 0, 500 + 2600, 0, 0, 0, 0, 0))
    s = _sample(prev, curr, signal=Signal.TRAFFIC, min_running_requests=2)
    assert s.kind is SampleKind.MEASURED and s.signal is Signal.TRAFFIC
    assert s.figures.decode_tokens_per_second == pytest.approx(2600 / 50.0)
    low = _sample(prev, {**curr, "running": 1}, signal=Signal.TRAFFIC, min_running_requests=2)
    assert low.kind is SampleKind.INCONCLUSIVE and "traffic floor" in low.reason
    assert low.figures.decode_tokens_per_second == pytest.approx(52.0)  # figures are kept for the record


def test_counter_reset_by_a_restart_is_an_increase_not_a_negative_rate() -> None:
    s = _sample(dict(gen=90_000, verify=33_000, itl=(0, 0, 9000, 0, 0, 0, 0, 0), itl_sum=180.0),
                dict(gen=545, verify=200, itl=(0, 0, 500, 0, 0, 0, 0, 0), itl_sum=10.0, running=1),
                signal=Signal.TRAFFIC)
    assert s.kind is SampleKind.MEASURED
    assert s.figures.generation_tokens_per_second == pytest.approx(545 / 30)
    assert s.figures.accept_length == pytest.approx(545 / 200)
    assert s.figures.decode_tokens_per_second == pytest.approx(50.0)  # the histogram reset too


def test_idle_interval_is_inconclusive_never_a_failure() -> None:
    s = _sample(dict(gen=500, verify=200), dict(gen=500, verify=200), probe=ProbeOutcome("p0", 50.0))
    assert s.kind is SampleKind.INCONCLUSIVE and s.reason.startswith("idle")
    assert s.figures.generation_tokens_per_second == 0.0 and s.figures.accept_length is None


def test_first_scrape_and_pod_set_mismatch_are_inconclusive() -> None:
    both = [PodView("p0", True, 0), PodView("p1", True, 0)]
    first = compute_sample("r1", both, {"p0": scrape(T1, gen=10, verify=4), "p1": scrape(T1, "p1", gen=9)},
                           {"p0": scrape(T0)}, R23, T1, probe=ProbeOutcome("p0", 50.0))
    assert first.kind is SampleKind.INCONCLUSIVE and "first scrape of pod p1" in first.reason
    # p1 is Ready but was not scraped (it became Ready after the scrape started)
    partial = compute_sample("r1", both, {"p0": scrape(T1, gen=10, verify=4)}, {"p0": scrape(T0)}, R23, T1,
                             probe=ProbeOutcome("p0", 50.0))
    assert partial.kind is SampleKind.INCONCLUSIVE and "differ from the Ready pods (p0, p1)" in partial.reason
    nothing = compute_sample("r1", [PodView("p0", False, 2)], {}, {}, R23, T1)
    assert nothing.kind is SampleKind.INCONCLUSIVE and nothing.reason == "no Ready pod"
    assert nothing.revision_pods == (PodView("p0", False, 2),)


def test_scrape_or_probe_failure_of_a_ready_pod_is_an_error_unless_it_vanished() -> None:
    failed = {"p0": ScrapeFailure("p0", "timeout", "no answer within 5 s")}
    err = compute_sample("r1", [POD], failed, {"p0": scrape(T0)}, R23, T1)
    assert err.kind is SampleKind.ERROR and "(timeout)" in err.reason
    gone = compute_sample("r1", [], failed, {"p0": scrape(T0)}, R23, T1, vanished=frozenset({"p0"}))
    assert gone.kind is SampleKind.INCONCLUSIVE
    probe = _sample(dict(gen=0, verify=0), dict(gen=100, verify=40), probe=ProbeOutcome("p0", error="HTTP 401"))
    assert probe.kind is SampleKind.ERROR and "probe of pod p0 failed: HTTP 401" in probe.reason
    no_probe = _sample(dict(gen=0, verify=0), dict(gen=100, verify=40))
    assert no_probe.kind is SampleKind.INCONCLUSIVE and "no probe result" in no_probe.reason


def test_release_without_verify_counter_takes_the_accept_length_gauge() -> None:
    assert not R10.has(Role.SPEC_VERIFY_CALLS) and R23.has(Role.SPEC_VERIFY_CALLS)
    prev = scrape(T0, roles=R10, gen=100, verify=None)
    curr = scrape(T1, roles=R10, gen=400, verify=None, accept_length=1.75)
    s = compute_sample("r1", [POD], {"p0": curr}, {"p0": prev}, R10, T1, probe=ProbeOutcome("p0", 36.0))
    assert s.kind is SampleKind.MEASURED and s.figures.accept_length == 1.75


def test_non_finite_counter_is_no_figure_not_a_crash() -> None:
    s = _sample(dict(gen=100, verify=40), dict(gen=math.nan, verify=80), probe=ProbeOutcome("p0", 50.0))
    assert s.kind is SampleKind.INCONCLUSIVE and "not finite" in s.reason
    assert s.figures.generation_tokens_per_second is None and s.figures.accept_length is None


def test_several_pods_sum_rates_and_pool_histograms() -> None:
    pods = [PodView("p0", True, 0), PodView("p1", True, 1)]
    prev = {n: scrape(T0, n, gen=0, verify=0) for n in ("p0", "p1")}
    curr = {"p0": scrape(T1, "p0", gen=600, verify=200, running=2, usage=0.2),
            "p1": scrape(T1, "p1", gen=300, verify=150, running=1, usage=0.5)}
    s = compute_sample("r1", pods, curr, prev, R23, T1, probe=ProbeOutcome("p1", 50.0))
    assert s.kind is SampleKind.MEASURED and s.pods == ("p0", "p1")
    assert s.figures.generation_tokens_per_second == pytest.approx(900 / 30)
    assert s.figures.accept_length == pytest.approx(900 / 350)
    assert s.figures.running_requests == 3 and s.figures.kv_cache_usage == 0.5
    assert s.figures.kv_cache_usage_summed == pytest.approx(0.7)  # each pod's usage, summed (autoscaling)


def test_accept_rate_is_not_divided_by_idle_pods() -> None:
    """4 pods, the probe's request decoded on one (0.69); the idle ones report 0: the rate stays 0.69, not 0.17; two
    decoding pods weigh by the tokens they generated."""
    names = ("p0", "p1", "p2", "p3")
    pods = [PodView(n, True, 0) for n in names]
    prev = {n: scrape(T0, n, gen=1000, verify=400) for n in names}
    curr = {"p0": scrape(T1, "p0", gen=1000 + 64, verify=400 + 24, running=1, accept_length=2.7, accept_rate=0.69),
            **{n: scrape(T1, n, gen=1000, verify=400, accept_rate=0.0) for n in names[1:]}}
    s = compute_sample("r1", pods, curr, prev, R23, T1, probe=ProbeOutcome("p0", 50.0))
    assert s.kind is SampleKind.MEASURED, s.reason
    assert s.figures.accept_rate == pytest.approx(0.69)
    curr["p1"] = scrape(T1, "p1", gen=1000 + 192, verify=400 + 96, running=1, accept_length=2.0, accept_rate=0.5)
    s = compute_sample("r1", pods, curr, prev, R23, T1, probe=ProbeOutcome("p0", 50.0))
    assert s.figures.accept_rate == pytest.approx((64 * 0.69 + 192 * 0.5) / 256)


def test_a_gauge_not_yet_written_is_no_data_never_a_zero() -> None:
    """SGLang writes the speculative gauges every 40 decode steps only: a pod that decoded fewer since it started
    reads 0 for both. On 0.5.10 (no verify counter) such a pod gives no accept length and no accept rate, even while
    it decodes; one pod whose gauges were written (and then idle) gives both, unweighted; a written pod that decodes
    weighs by its tokens and an unwritten one that decodes counts for nothing."""
    names = ("p0", "p1")
    pods = [PodView(n, True, 0) for n in names]
    prev = {n: scrape(T0, n, R10, gen=1000, verify=None) for n in names}
    unwritten = {"p0": scrape(T1, "p0", R10, gen=1064, verify=None, running=1),
                 "p1": scrape(T1, "p1", R10, gen=1000, verify=None)}
    s = compute_sample("r1", pods, unwritten, prev, R10, T1, probe=ProbeOutcome("p0", 50.0))
    assert s.kind is SampleKind.MEASURED, s.reason
    assert s.figures.accept_length is None and s.figures.accept_rate is None
    written_idle = {**unwritten, "p1": scrape(T1, "p1", R10, gen=1000, verify=None, accept_length=2.73,
                                              accept_rate=0.43)}
    s = compute_sample("r1", pods, written_idle, prev, R10, T1, probe=ProbeOutcome("p0", 50.0))
    assert s.figures.accept_length == pytest.approx(2.73)
    assert s.figures.accept_rate == pytest.approx(0.43)
    both = {"p0": scrape(T1, "p0", R10, gen=1064, verify=None, running=1, accept_length=2.6, accept_rate=0.4),
            "p1": written_idle["p1"]}
    s = compute_sample("r1", pods, both, prev, R10, T1, probe=ProbeOutcome("p0", 50.0))
    assert s.figures.accept_rate == pytest.approx(0.4)  # p1 generated nothing in the interval: weight 0
    assert s.figures.accept_length == pytest.approx((2.6 + 2.73) / 2)
