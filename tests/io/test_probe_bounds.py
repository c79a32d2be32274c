"""Hostile probe answers (issue 16): the probe reads a streamed chat completion from a pod that may run any image.
Served by ``httpx.MockTransport`` from endless generators, so what the client pulled is counted exactly: each
stops at its cap with the cap's name as the error, having read no more than the cap and one chunk."""

from __future__ import annotations

import itertools
import tracemalloc
from collections.abc import AsyncIterator, Callable

import httpx
import pytest

from sglang_operator.decisions.sampling.limits import (
    BODY_TOO_LARGE,
    LINE_TOO_LONG,
    TOO_MANY_CHUNKS,
    ProbeLimits,
)
from sglang_operator.decisions.sampling.loghist import BUCKETS, LogHistogram
from sglang_operator.decisions.sampling.roles import roles_for
from sglang_operator.io import loadgen
from sglang_operator.io.pods import Target
from sglang_operator.io.sampler import Sampler, SamplingParams, ServerRef
from sglang_operator.io.sglang_http import SGLangHTTP
from sglang_operator.process import telemetry
from sglang_operator.sglang.versions import parse_version

MIB = 1024 * 1024
CONTENT = b'data: {"choices":[{"delta":{"content":"a"}}]}\n\n'


class Pulled:
    """An endless body whose chunks are counted as the client pulls them."""

    def __init__(self, chunks: Callable[[], AsyncIterator[bytes]]) -> None:
        self.chunks, self.bytes, self.count = chunks, 0, 0

    async def body(self) -> AsyncIterator[bytes]:
        async for chunk in self.chunks():
            self.bytes += len(chunk)
            self.count += 1
            yield chunk


def client_for(pulled: Pulled) -> httpx.AsyncClient:
    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["accept-encoding"] == "identity"
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=pulled.body())
    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


async def read(pulled: Pulled, limits: ProbeLimits | None = None,
               clock: Callable[[], float] | None = None) -> loadgen.StreamResult:
    async with client_for(pulled) as client:
        kw = {"clock": clock} if clock is not None else {}
        return await loadgen.stream_once(client, "http://pod", "m", limits=limits, **kw)  # type: ignore[arg-type]


async def test_an_endless_line_stops_at_the_line_cap_having_read_no_more_than_that() -> None:
    async def endless() -> AsyncIterator[bytes]:
        yield b"data: "
        while True:
            yield b"x" * 65536

    pulled = Pulled(endless)
    limits = ProbeLimits()
    tracemalloc.start()
    try:
        res = await read(pulled, limits)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert res.error == LINE_TOO_LONG
    assert res.bytes_read == pulled.bytes <= limits.line_bytes + 65536 + 6
    assert pulled.count <= limits.line_bytes // 65536 + 2
    assert peak < 4 * limits.line_bytes + MIB  # the line is never held beyond its cap


async def test_an_endless_line_in_one_huge_chunk_is_refused_without_being_split() -> None:
    async def huge() -> AsyncIterator[bytes]:
        yield b"data: " + b"y" * (4 * MIB) + b"\n"

    res = await read(Pulled(huge), ProbeLimits(line_bytes=MIB))
    assert res.error == LINE_TOO_LONG  # a data line longer than the cap, even inside one chunk


async def test_millions_of_tiny_chunks_stop_at_the_chunk_cap_with_the_gaps_in_a_histogram() -> None:
    """An endless stream of one-token chunks, the n-th arriving (n mod 100 + 1) ms after the previous one (a
    uniform 1..100 ms distribution): stopped at the cap, p50 and p95 of the histogram match the exact quantiles
    of the gaps, and the histogram holds at most :data:`BUCKETS` counts, not one float per chunk."""
    cap = 20_000
    now = [0.0]
    gaps: list[float] = []

    async def tiny() -> AsyncIterator[bytes]:
        for n in itertools.count():
            if n:  # the first content chunk is the first token (TTFT), the gaps start after it
                gap = (n % 100 + 1) / 1000
                gaps.append(gap)
                now[0] += gap
            yield CONTENT

    pulled = Pulled(tiny)
    res = await read(pulled, ProbeLimits(chunks=cap), clock=lambda: now[0])
    assert res.error == TOO_MANY_CHUNKS
    assert pulled.count == cap + 1  # the chunk past the cap is the last one pulled
    assert res.chunk_gaps.count == cap - 1 and len(res.chunk_gaps.counts) <= BUCKETS
    measured = sorted(gaps[:cap - 1])
    exact = {q: measured[int(q * len(measured))] for q in (0.5, 0.95)}
    assert res.chunk_gaps.p50 == pytest.approx(exact[0.5], rel=0.03)
    assert res.chunk_gaps.p95 == pytest.approx(exact[0.95], rel=0.03)
    assert res.chunk_gaps.mean == pytest.approx(sum(measured) / len(measured))


async def test_a_body_of_endless_comment_lines_stops_at_the_body_cap() -> None:
    async def pings() -> AsyncIterator[bytes]:
        while True:
            yield b": ping\n" * 4096

    pulled = Pulled(pings)
    limits = ProbeLimits(body_bytes=2 * MIB)
    res = await read(pulled, limits)
    assert res.error == BODY_TOO_LARGE
    assert limits.body_bytes < res.bytes_read == pulled.bytes <= limits.body_bytes + len(b": ping\n" * 4096)


async def test_a_normal_answer_is_measured_as_before() -> None:
    now = [0.0]

    async def answer() -> AsyncIterator[bytes]:
        for _ in range(5):
            now[0] += 0.02
            yield CONTENT
        yield b'data: {"choices":[],"usage":{"completion_tokens":5}}\n\ndata: [DONE]\n\n'

    res = await read(Pulled(answer), clock=lambda: now[0])
    assert res.error is None and res.completion_tokens == 5
    assert res.ttft_s == pytest.approx(0.02) and res.chunk_gaps.count == 4
    assert res.chunk_gaps.p50 == pytest.approx(0.02) and res.decode_tok_s == pytest.approx(4 / 0.08)


async def test_a_chunk_that_is_not_a_json_object_is_an_error_not_an_exception() -> None:
    async def odd() -> AsyncIterator[bytes]:
        yield b"data: [1, 2]\n\n"

    res = await read(Pulled(odd))
    assert res.error is not None and "not a JSON object" in res.error


def test_the_histogram_merges_and_bounds_its_quantiles() -> None:
    a, b = LogHistogram(), LogHistogram()
    for i in range(1, 101):
        (a if i % 2 else b).add(i / 1000)
    a.merge(b)
    assert a.count == 100 and a.min == 0.001 and a.max == 0.1
    assert a.quantile(0) == 0.001 and a.quantile(1) == pytest.approx(0.1)
    assert a.p50 == pytest.approx(0.05, rel=0.05)
    assert LogHistogram().p95 == 0.0
    with pytest.raises(ValueError):
        a.quantile(1.5)


async def test_the_sampler_counts_a_probe_stopped_at_a_cap_under_the_cap_s_name() -> None:
    async def endless() -> AsyncIterator[bytes]:
        while True:
            yield b"z" * 65536

    http = SGLangHTTP()
    await http.http.aclose()
    http.http = client_for(Pulled(endless))
    sampler = Sampler(http, probe_limits=ProbeLimits(line_bytes=256 * 1024))
    server = ServerRef("ns", "s", roles_for(parse_version("0.5.23")), 30000, "m")
    target = Target("p", "r1", "127.0.0.1", True, 0)
    counter = telemetry.SCRAPE_ERRORS.labels("probe", LINE_TOO_LONG)
    before = counter._value.get()
    try:
        outcome = await sampler._probe(server, target, SamplingParams(), 5.0, None)
    finally:
        await http.aclose()
    assert outcome.error == LINE_TOO_LONG and counter._value.get() - before == 1


async def test_a_fast_endless_stream_does_not_hold_the_event_loop() -> None:
    """The mock transport never suspends: only the reader's own yields let another task run meanwhile."""
    import asyncio

    async def tiny() -> AsyncIterator[bytes]:
        while True:
            yield CONTENT * 100

    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.get_running_loop().create_task(ticker())
    try:
        res = await read(Pulled(tiny), ProbeLimits(chunks=20_000))
    finally:
        task.cancel()
    assert res.error == TOO_MANY_CHUNKS
    assert ticks >= res.bytes_read // loadgen.YIELD_BYTES >= 3


def test_the_caps_of_a_probe_follow_its_max_tokens() -> None:
    flags = ProbeLimits()
    assert flags.for_max_tokens(256) == ProbeLimits(body_bytes=576 * 2048, line_bytes=flags.line_bytes, chunks=576)
    # the largest maxTokens still stays within the flags' caps, and the flags win when lower
    big = flags.for_max_tokens(8192)
    assert big.chunks == 2 * 8192 + 64 <= flags.chunks and big.body_bytes <= flags.body_bytes
    assert ProbeLimits(chunks=100, body_bytes=1000).for_max_tokens(256) == ProbeLimits(body_bytes=1000, chunks=100)
    with pytest.raises(ValueError):
        flags.for_max_tokens(0)


async def test_the_sampler_stops_a_probe_at_the_chunks_its_max_tokens_allow() -> None:
    pulled = Pulled(lambda: _one_token_chunks())
    http = SGLangHTTP()
    await http.http.aclose()
    http.http = client_for(pulled)
    sampler = Sampler(http)  # the flags' defaults: 100 000 chunks
    server = ServerRef("ns", "s", roles_for(parse_version("0.5.23")), 30000, "m")
    target = Target("p", "r1", "127.0.0.1", True, 0)
    counter = telemetry.SCRAPE_ERRORS.labels("probe", TOO_MANY_CHUNKS)
    before = counter._value.get()
    try:
        outcome = await sampler._probe(server, target, SamplingParams(probe_max_tokens=16), 5.0, None)
    finally:
        await http.aclose()
    assert outcome.error == TOO_MANY_CHUNKS and counter._value.get() - before == 1
    assert pulled.count <= 2 * 16 + 64 + 2  # the cap and the chunk that passed it, not 100 000


async def _one_token_chunks() -> AsyncIterator[bytes]:
    while True:
        yield CONTENT
