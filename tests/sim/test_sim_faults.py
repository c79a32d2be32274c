"""Fault injection: admin endpoint, flags and env, and what a client then observes."""

from __future__ import annotations

import time
from collections.abc import Iterator

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from simproc import REGRESSED, RunningSim, start_sim, to_0523

from sglang_operator.io.loadgen import hold_concurrency, probe


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSim]:
    s = start_sim([*to_0523(REGRESSED), "--enable-metrics"])
    yield s
    s.stop()


def _faults(sim: RunningSim, **changes: object) -> dict[str, object]:
    r = httpx.post(sim.base_url + "/sim/admin/faults", json=changes)
    assert r.status_code == 200, r.text
    return dict(r.json())


def _gauge(sim: RunningSim, name: str) -> float:
    for fam in text_string_to_metric_families(httpx.get(sim.base_url + "/metrics").text):
        for s in fam.samples:
            if s.name == name:
                return float(s.value)
    raise AssertionError(f"{name} missing")


def _generate(sim: RunningSim, tokens: int) -> None:
    r = httpx.post(sim.base_url + "/generate", json={"text": "x", "sampling_params": {"max_new_tokens": tokens}},
                   timeout=60)
    assert r.status_code == 200


def test_acceptance_collapse_and_throughput_drop(sim: RunningSim) -> None:
    _generate(sim, 400)
    normal_len = _gauge(sim, "sglang:spec_accept_length")
    normal_tps = _gauge(sim, "sglang:gen_throughput")
    assert normal_len == pytest.approx(1.75, abs=0.05)
    _faults(sim, accept_alpha=0.05)
    _generate(sim, 400)
    assert _gauge(sim, "sglang:spec_accept_length") < 1.15
    assert _gauge(sim, "sglang:gen_throughput") < normal_tps * 0.7
    _faults(sim, accept_alpha=None, throughput_drop_pct=50)
    _generate(sim, 400)
    assert _gauge(sim, "sglang:spec_accept_length") == pytest.approx(1.75, abs=0.05)
    assert _gauge(sim, "sglang:gen_throughput") == pytest.approx(normal_tps * 0.5, rel=0.15)
    _faults(sim, throughput_drop_pct=0)


def test_http_500s_and_bad_admin_input(sim: RunningSim) -> None:
    _faults(sim, http_500_rate=1.0)
    try:
        assert httpx.get(sim.base_url + "/v1/models").status_code == 500
        assert httpx.get(sim.base_url + "/health").status_code == 500
    finally:
        _faults(sim, http_500_rate=0.0)
    assert httpx.get(sim.base_url + "/v1/models").status_code == 200
    assert httpx.post(sim.base_url + "/sim/admin/faults", json={"no_such_fault": 1}).status_code == 400
    assert httpx.post(sim.base_url + "/sim/admin/faults", json={"metrics_mode": "odd"}).status_code == 400


def test_metrics_faults(sim: RunningSim) -> None:
    try:
        _faults(sim, metrics_mode="garbage")
        body = httpx.get(sim.base_url + "/metrics").text
        with pytest.raises(ValueError):
            list(text_string_to_metric_families(body))
        _faults(sim, metrics_mode="huge", metrics_huge_mb=6)
        huge = httpx.get(sim.base_url + "/metrics", timeout=30)
        assert len(huge.content) > 6 * 1024 * 1024
        assert any(f.name == "sglang:gen_throughput" for f in text_string_to_metric_families(huge.text))
        _faults(sim, metrics_mode="slow", metrics_delay_s=1.0)
        with pytest.raises(httpx.ReadTimeout):
            httpx.get(sim.base_url + "/metrics", timeout=0.3)
        _faults(sim, metrics_mode="hang")
        with pytest.raises(httpx.ReadTimeout):
            httpx.get(sim.base_url + "/metrics", timeout=0.5)
    finally:
        _faults(sim, metrics_mode="ok")
    assert httpx.get(sim.base_url + "/metrics", timeout=5).status_code == 200


def test_readiness_flapping(sim: RunningSim) -> None:
    _faults(sim, ready_flap_period_s=0.2)
    try:
        seen = set()
        deadline = time.monotonic() + 3
        while time.monotonic() < deadline and len(seen) < 2:
            seen.add(httpx.get(sim.base_url + "/ready").status_code)
            time.sleep(0.03)
        assert seen == {200, 503}
    finally:
        _faults(sim, ready_flap_period_s=None)
    assert httpx.get(sim.base_url + "/ready").status_code == 200


def test_crash_after_seconds_from_env() -> None:
    # not waited for healthy: on a loaded machine the start-up can take longer than the 0.5 s to the crash
    s = start_sim(to_0523(REGRESSED), env={"SGLANG_SIM_FAULT_CRASH_AFTER_S": "0.5"}, wait_ready=False)
    try:
        assert s.proc.wait(timeout=15) == 1
    finally:
        err = s.stop()
    assert "Scheduler hit an exception" in err


async def test_loadgen_probe_and_concurrency(sim: RunningSim) -> None:
    single = await probe(sim.base_url, max_tokens=64)
    r = single.results[0]
    assert r.error is None and r.completion_tokens == 64 and r.ttft_s is not None and r.tok_s > 0
    assert r.chunk_gaps.count > 0  # several chunks: about 1.75 tokens per chunk
    load = await hold_concurrency(sim.base_url, 4, requests_per_worker=2, max_tokens=32)
    assert len(load.results) == 8 and load.errors == 0
    assert load.total_tok_s > 0 and load.gap_quantile(0.99) >= load.gap_quantile(0.5) > 0
