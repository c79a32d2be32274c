"""A trial's load bounded in rate (``io/trialbench.py`` with ``decisions/tuning/trialload.py``), against a fake
SGLang pod on loopback (a real HTTP server in this process) that answers at once: the requests it receives stay
within the cap (depth + rate × span, with a slack of one request per stream for the loop's jitter: counted at the
pod, not timed against the machine's speed), its one-token answers fail the level as no measurement of decoding,
full answers at once under a low cap fail it as held back, and an honest pod whose answers sometimes stop early at
EOS is measured."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator, Callable

import pytest
from aiohttp import web

from e2e.cluster.procs import free_port
from sglang_operator.decisions.sampling.roles import roles_for
from sglang_operator.decisions.tuning.trialload import RequestPacer
from sglang_operator.io.sglang_http import SGLangHTTP
from sglang_operator.io.trialbench import BenchPlan, InvalidMeasurement, TrialPod, measure_trial
from sglang_operator.sglang.versions import parse_version

ROLES = roles_for(parse_version("0.5.10"))

Answer = Callable[[int, int], tuple[int, str, float]]
"""(request number, max_tokens) → (completion tokens, finish_reason, seconds before answering)."""


class FakePod:
    """A streamed chat completion of ``answer``'s tokens (one chunk each), ``/metrics`` and ``/server_info``;
    ``arrivals``: when each chat request came (``time.perf_counter``)."""

    def __init__(self, answer: Answer) -> None:
        self.answer, self.arrivals = answer, list[float]()
        self.port = free_port()
        self._runner: web.AppRunner | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def chat(self, request: web.Request) -> web.StreamResponse:
        self.arrivals.append(time.perf_counter())
        body = await request.json()
        tokens, finish, delay = self.answer(len(self.arrivals), int(body["max_tokens"]))
        if delay:
            await asyncio.sleep(delay)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        chunks = [b'data: {"choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n']
        chunks += [b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n'] * tokens
        last = {"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
        usage = {"choices": [], "usage": {"prompt_tokens": 10, "completion_tokens": tokens}}
        chunks += [f"data: {json.dumps(last)}\n\ndata: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode()]
        await resp.write(b"".join(chunks))
        return resp

    async def metrics(self, _: web.Request) -> web.Response:
        return web.Response(text='sglang:num_running_reqs{model_name="m"} 0.0\n', content_type="text/plain")

    async def server_info(self, _: web.Request) -> web.Response:
        return web.json_response({"version": "0.5.10", "internal_states": [{}]})

    async def start(self) -> None:
        app = web.Application()
        app.add_routes([web.post("/v1/chat/completions", self.chat), web.get("/metrics", self.metrics),
                        web.get("/server_info", self.server_info)])
        self._runner = web.AppRunner(app, access_log=None)
        await self._runner.setup()
        await web.TCPSite(self._runner, "127.0.0.1", self.port).start()

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()


async def _pod(answer: Answer) -> AsyncIterator[FakePod]:
    pod = FakePod(answer)
    await pod.start()
    yield pod
    await pod.stop()


@pytest.fixture
async def one_token_pod() -> AsyncIterator[FakePod]:
    async for pod in _pod(lambda _, __: (1, "stop", 0.0)):
        yield pod


@pytest.fixture
async def full_answers_at_once() -> AsyncIterator[FakePod]:
    async for pod in _pod(lambda _, max_tokens: (max_tokens, "length", 0.0)):
        yield pod


@pytest.fixture
async def honest_pod() -> AsyncIterator[FakePod]:
    # greedy decoding: one answer in three stops early at EOS (finish_reason stop), the others reach max_tokens
    async for pod in _pod(lambda n, max_tokens: (5, "stop", 0.05) if n % 3 == 0 else (max_tokens, "length", 0.05)):
        yield pod


def _excess(arrivals: list[float], rate: float, depth: float) -> float:
    """The largest excess of requests arrived in any span over depth + rate × span."""
    s = sorted(arrivals)
    return max((j - i + 1) - (depth + rate * (s[j] - s[i])) for i in range(len(s)) for j in range(i, len(s)))


async def test_a_pod_answering_one_token_at_once_is_sent_the_cap_and_fails_as_no_measurement(
        one_token_pod: FakePod) -> None:
    rate, concurrency = 40.0, 8
    plan = BenchPlan(levels=(concurrency,), max_output_tokens=64, seconds_per_level=1.5, warmup_seconds=0.5,
                     repetitions=1)
    http = SGLangHTTP(trial_request_rate=rate)
    try:
        with pytest.raises(InvalidMeasurement) as invalid:
            await measure_trial(http, [TrialPod("fast", one_token_pod.url)], "m", ROLES, plan)
    finally:
        await http.aclose()
    assert invalid.value.reason.startswith("answers of 1 tokens median at concurrency 8, maxOutputTokens 64: not a "
                                           "measurement of decoding"), invalid.value.reason
    arrivals = one_token_pod.arrivals
    span = max(arrivals) - min(arrivals)
    assert len(arrivals) > concurrency  # it was driven (without the cap: thousands in these 2 s)
    depth = RequestPacer(rate).depth
    assert len(arrivals) <= depth + rate * span + concurrency, (len(arrivals), span)
    assert _excess(arrivals, rate, depth) <= concurrency


async def test_full_answers_at_once_under_a_low_cap_fail_as_held_back(full_answers_at_once: FakePod) -> None:
    plan = BenchPlan(levels=(4,), max_output_tokens=32, seconds_per_level=1.0, warmup_seconds=0.3, repetitions=1)
    http = SGLangHTTP(trial_request_rate=20.0)
    try:
        with pytest.raises(InvalidMeasurement) as invalid:
            await measure_trial(http, [TrialPod("fast", full_answers_at_once.url)], "m", ROLES, plan)
    finally:
        await http.aclose()
    assert invalid.value.reason.startswith("the operator's cap of 20 requests per second per trial (sglang-operator "
                                           "run --trial-request-rate) kept concurrency 4's streams idle"), \
        invalid.value.reason
    span = max(full_answers_at_once.arrivals) - min(full_answers_at_once.arrivals)
    assert len(full_answers_at_once.arrivals) <= RequestPacer(20.0).depth + 20.0 * span + 4


async def test_an_honest_pod_with_early_stops_is_measured_under_the_default_cap(honest_pod: FakePod) -> None:
    plan = BenchPlan(levels=(2,), max_output_tokens=64, seconds_per_level=1.0, warmup_seconds=0.3, repetitions=1)
    http = SGLangHTTP()
    try:
        (level,) = await measure_trial(http, [TrialPod("honest", honest_pod.url)], "m", ROLES, plan)
    finally:
        await http.aclose()
    assert level.requests and level.failed_requests == 0
    assert level.output_tokens_per_second and level.decode_tokens_per_second


async def test_the_operators_setting_reaches_every_trials_http_client() -> None:
    from sglang_operator.control.observer import Observer

    observer = Observer(5.0, trial_request_rate=7.5)
    try:
        assert observer.http.trial_streams.request_rate == 7.5
    finally:
        await observer.http.aclose()
    with pytest.raises(ValueError):
        SGLangHTTP(trial_request_rate=0.0)
