"""The simulator counts like SGLang (``TokenizerMetricsCollector.observe_one_finished_request``): request counters
grow when a request finishes, so generation tokens ÷ verify calls is the accept length; time to first token is
queueing plus prefill (it grows with the prompt, also on the client's wall clock) and the latency histograms fill."""

from __future__ import annotations

import asyncio
import io
import time

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families
from sglang_sim.engine import SimRequest
from sglang_sim.facts import resolve, version_facts
from sglang_sim.launch import Built, build
from sglang_sim.logfmt import SimLogger
from sglang_sim.metrics import render
from simproc import GPU, KNOWN_GOOD, SPEC_V2_ENV, start_sim, to_0523


def _built() -> Built:
    facts = version_facts("0.5.23")
    return build(facts, resolve(to_0523(KNOWN_GOOD), facts, SPEC_V2_ENV), {"gpu": GPU, "seed": 3}, SPEC_V2_ENV,
                 SimLogger(io.StringIO()))


def _generating(prompt_tokens: int, until: int) -> tuple[Built, SimRequest]:
    """A fresh engine with one streamed request of ``prompt_tokens`` prompt and 400 output tokens, stepped until
    it has generated ``until`` tokens or more."""
    b = _built()
    req = SimRequest("a", prompt_tokens, 400, True)
    b.engine.submit(req)
    while req.generated < until:
        b.engine.step()
    return b, req


def _values(b: Built) -> dict[str, float]:
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(render(b.engine.stats, b.metrics_ctx)):
        for s in fam.samples:
            out[s.name] = out.get(s.name, 0.0) + s.value
    return out


def test_token_and_verify_counters_grow_when_a_request_finishes() -> None:
    b, req = _generating(prompt_tokens=512, until=200)
    mid = _values(b)
    assert mid["sglang:generation_tokens_total"] == 0 and mid["sglang:spec_verify_calls_total"] == 0
    assert mid["sglang:num_requests_total"] == 0
    while not req.finished:
        b.engine.step()
    done = _values(b)
    assert done["sglang:generation_tokens_total"] == 400
    assert done["sglang:prompt_tokens_total"] == 512 and done["sglang:num_requests_total"] == 1
    ratio = done["sglang:generation_tokens_total"] / done["sglang:spec_verify_calls_total"]
    assert ratio == pytest.approx(2.725, abs=0.05)  # the known-good accept length (alpha 0.75, 3 steps)


def test_aborted_requests_count_their_tokens() -> None:
    b, req = _generating(prompt_tokens=64, until=100)
    req.aborted = True
    b.engine.step()
    v = _values(b)
    assert v["sglang:num_aborted_requests_total"] == 1
    assert v["sglang:generation_tokens_total"] == req.generated > 0


def test_time_to_first_token_grows_with_the_prompt_in_the_histogram() -> None:
    b = _built()
    for i, prompt in enumerate((64, 4096)):
        b.engine.submit(SimRequest(f"r{i}", prompt, 8, True))
        for _ in range(50):
            b.engine.step()
    v = _values(b)
    ttft = b.engine.stats.ttft["true"]
    assert ttft.count == 2 and v["sglang:time_to_first_token_seconds_count"] == 2
    # 4096 prompt tokens at 120 x 21.45 tok/s prefill: ~1.6 s; 64 tokens: ~0.03 s
    assert 1.2 < ttft.total < 2.5
    assert ttft.counts[0] == 1  # the short prompt is under the first bucket (0.1 s)
    assert v["sglang:inter_token_latency_seconds_count"] > 0 and v["sglang:e2e_request_latency_seconds_count"] == 2


async def _ttft(base_url: str, chars: int) -> float:
    body = {"model": "m", "messages": [{"role": "user", "content": "x" * chars}], "max_tokens": 4, "stream": True}
    async with httpx.AsyncClient(timeout=30) as client:
        t0 = time.perf_counter()
        async with client.stream("POST", base_url + "/v1/chat/completions", json=body) as resp:
            async for line in resp.aiter_lines():
                if '"content":"' in line and '"content":""' not in line:
                    return time.perf_counter() - t0
    raise AssertionError("no content chunk")


def test_clients_see_the_prefill_time_on_the_wall_clock() -> None:
    sim = start_sim(to_0523(KNOWN_GOOD), extra=["--sim-time-scale", "1", "--enable-metrics"])
    try:
        short = asyncio.run(_ttft(sim.base_url, 200))  # ~60 tokens: ~0.03 s
        time.sleep(0.5)  # an idle gap must not count into the next request's TTFT
        long = asyncio.run(_ttft(sim.base_url, 8192))  # ~2050 tokens: ~0.8 s
        assert long > 0.5 and short < 0.3, (short, long)
        families = {f.name: f for f in text_string_to_metric_families(httpx.get(sim.base_url + "/metrics").text)}
        total = sum(s.value for s in families["sglang:time_to_first_token_seconds"].samples
                    if s.name.endswith("_sum"))
        assert 0.5 < total < 1.5, total  # the idle gap is not in it
    finally:
        sim.stop()
