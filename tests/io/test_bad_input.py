"""Every bad ``/metrics`` of issue 7's "Bad input" list, served by real HTTP servers on loopback and sampled by the
real sampler next to a healthy server: each is a counted scrape error with a reason or handled as Prometheus
would, the healthy server's sample is unaffected (and not slowed down), the process' RSS stays within 64 MiB of
where it started, and nothing raises."""

from __future__ import annotations

import asyncio
import datetime as dt
import time
from collections.abc import AsyncIterator, Iterator

import pytest
from aiohttp import web
from expo import LABELS, exposition
from fakepods import FakePods, hang, last_sample, sampling, status, stream, text

from sglang_operator.decisions.sampling.model import SampleKind, Signal
from sglang_operator.decisions.sampling.roles import roles_for
from sglang_operator.io.pods import Target
from sglang_operator.io.sampler import Sampler, SamplingParams, ServerRef
from sglang_operator.io.sglang_http import SGLangHTTP
from sglang_operator.process import telemetry
from sglang_operator.sglang.versions import parse_version

ROLES = roles_for(parse_version("0.5.23"))
PARAMS = SamplingParams(interval_seconds=1, signal=Signal.TRAFFIC, scrape_timeout_seconds=3.0)
RSS_BOUND_MIB = 64
MIB = 1024 * 1024


def healthy(n: int, gen_per_scrape: float = 1635.0, **kw: object) -> str:
    """A busy server: counters and the ITL histogram grow with each scrape ``n``."""
    args: dict = dict(gen=gen_per_scrape * n, verify=600 * n, running=2, accept_rate=0.57,
                      itl=(0, 0, 1500 * n, 0, 0, 0, 0, 0), itl_sum=30.0 * n, ttft=(n, n, 0, 0, 0, 0, 0, 0),
                      ttft_sum=0.2 * n)
    args.update(kw)
    return exposition(**args)  # type: ignore[arg-type]


def rss_mib() -> float:
    with open("/proc/self/status") as f:
        line = next(ln for ln in f if ln.startswith("VmRSS:"))
    return int(line.split()[1]) / 1024


def filler(total: int) -> Iterator[bytes]:
    line = b'sglang_sim_filler{series="000000000"} 1.0\n'
    chunk = line * (MIB // len(line))
    for _ in range(total // len(chunk) + 1):
        yield chunk


def comments(total: int) -> Iterator[bytes]:
    """Comment lines only: no sample to count, so only the body size limit stops them."""
    chunk = b"# HELP sglang_sim_filler " + b"x" * (MIB - 26) + b"\n"
    for _ in range(total // len(chunk) + 1):
        yield chunk


def flood(total: int) -> Iterator[bytes]:
    """Wanted lines (the same series again and again): the worst case for the line filter's memory."""
    line = f'sglang:generation_tokens_total{{{LABELS},is_streaming="true"}} 1.0\n'.encode()
    chunk = line * (MIB // len(line))
    for _ in range(total // len(chunk) + 1):
        yield chunk


async def drip(request: web.Request, n: int) -> web.StreamResponse:
    resp = web.StreamResponse(headers={"Content-Type": "text/plain"})
    await resp.prepare(request)
    for ch in healthy(n).encode():
        await resp.write(bytes([ch]))
        await asyncio.sleep(0.05)
    return resp


def _vanishing(fake: FakePods) -> web.StreamResponse:
    async def answer(request: web.Request, n: int) -> web.StreamResponse:
        if n == 1:
            return web.Response(text=healthy(n))
        fake.remove("vanishing")  # deleted while its scrape runs
        await asyncio.sleep(0.05)
        if request.transport is not None:
            request.transport.close()
        return web.Response(text="")
    return answer  # type: ignore[return-value]


def _errors(reason: str) -> float:
    return telemetry.SCRAPE_ERRORS.labels("metrics", reason)._value.get()


# name -> (behaviour factory, expected kind of the second sample, counted reason or None)
CASES: dict[str, tuple[object, SampleKind, str | None]] = {
    "garbage": (lambda f: text("<html><body>502 Bad Gateway</body></html>\n"), SampleKind.ERROR, "parse"),
    "truncated": (lambda f: text(lambda n: healthy(n)[:-25]), SampleKind.ERROR, "truncated"),
    "cut": (lambda f: stream(lambda: [healthy(1).encode()[:500]], total=len(healthy(1)), cut=True),
            SampleKind.ERROR, "transport"),
    "huge": (lambda f: stream(lambda: filler(50 * MIB)), SampleKind.ERROR, "too_large"),
    "comments": (lambda f: stream(lambda: comments(50 * MIB)), SampleKind.ERROR, "too_large"),
    "flood": (lambda f: stream(lambda: flood(50 * MIB)), SampleKind.ERROR, "too_many_samples"),
    "hanging": (lambda f: hang(30), SampleKind.ERROR, "timeout"),
    "dripping": (lambda f: drip, SampleKind.ERROR, "timeout"),
    "http500": (lambda f: status(500), SampleKind.ERROR, "http_status"),
    "duplicates": (lambda f: text(lambda n: healthy(n) + f'sglang:spec_verify_calls_total{{{LABELS}}} 1\n'),
                   SampleKind.MEASURED, None),
    "nan_gauges": (lambda f: text(lambda n: healthy(n).replace(" 0.57\n", " NaN\n").replace(
        "sglang:num_queue_reqs{", "sglang:num_queue_reqs{x=\"inf\",") + 'sglang:num_queue_reqs{x="y"} +Inf\n'),
                   SampleKind.MEASURED, None),
    "inf_counter": (lambda f: text(lambda n: healthy(n, gen=float("inf") if n > 1 else 1.0)),
                    SampleKind.INCONCLUSIVE, None),
    "backwards": (lambda f: text(lambda n: healthy(3 if n == 1 else 1)), SampleKind.MEASURED, None),
    "no_inf_bucket": (lambda f: text(lambda n: "\n".join(ln for ln in healthy(n).splitlines()
                                                         if 'le="+Inf"' not in ln) + "\n"),
                      SampleKind.MEASURED, None),
    "vanishing": (_vanishing, SampleKind.INCONCLUSIVE, None),
}


@pytest.fixture
async def fake() -> AsyncIterator[FakePods]:
    pods = FakePods()
    pods.add("good", text(healthy))
    for name, (make, _, _) in CASES.items():
        pods.add(name, make(pods))  # type: ignore[operator]
    async with pods.running():
        yield pods


async def test_every_bad_input_is_counted_or_handled_and_others_are_unaffected(fake: FakePods) -> None:
    http = SGLangHTTP(concurrency=32)
    sampler = Sampler(http)
    refused = Target("refused", "r1", "127.77.255.254", True, 0)  # nothing listens there
    names = ["good", *CASES, "refused"]
    refs = {n: ServerRef("ns", n, ROLES, fake.port, "m") for n in names}

    def view(name: str):  # type: ignore[no-untyped-def]
        return (lambda: [refused]) if name == "refused" else fake.view({name})

    async def timed(name: str) -> tuple[list, float]:  # type: ignore[type-arg]
        t0 = time.perf_counter()
        out = await sampler.sample(refs[name], view(name), PARAMS)
        return out, time.perf_counter() - t0

    rss_before = rss_mib()
    before = {r: _errors(r) for r in ("parse", "truncated", "transport", "too_large", "timeout", "http_status",
                                      "connection", "too_many_samples")}
    dup_before = telemetry.DUPLICATE_SAMPLES._value.get()
    try:
        first = dict(zip(names, await asyncio.gather(*(timed(n) for n in names)), strict=True))
        await asyncio.sleep(0.3)
        second = dict(zip(names, await asyncio.gather(*(timed(n) for n in names)), strict=True))
    finally:
        await sampler.aclose()
        await http.aclose()
    [good1], _ = first["good"]
    [good2], good_seconds = second["good"]
    assert good1.kind is SampleKind.INCONCLUSIVE and "first scrape" in good1.reason
    assert good2.kind is SampleKind.MEASURED, good2.reason
    assert good2.figures.accept_length == pytest.approx(1635 / 600)
    assert good_seconds < 0.4  # not held up by the hanging, dripping or huge targets beside it

    for name, (_, kind, reason) in [*CASES.items(), ("refused", (None, SampleKind.ERROR, "connection"))]:
        samples, _ = second[name]
        if name == "vanishing":
            assert samples == [] or samples[0].kind is kind, samples
            continue
        [s] = samples
        assert s.kind is kind, (name, s.kind, s.reason)
        if reason is not None:
            assert f"({reason})" in s.reason, (name, s.reason)
    counted = {r: _errors(r) - before[r] for r in before}
    assert counted == {"parse": 2, "truncated": 2, "transport": 2, "too_large": 4, "timeout": 4, "http_status": 2,
                       "connection": 2, "too_many_samples": 2}, counted
    assert telemetry.DUPLICATE_SAMPLES._value.get() - dup_before == 2
    [nan], _ = second["nan_gauges"]
    assert nan.figures.accept_rate is None and nan.figures.queued_requests == 0  # non-finite gauges left out
    [back], _ = second["backwards"]
    assert back.figures.accept_length == pytest.approx(1635 / 600)  # the reset's new values are the increase
    [inf], _ = second["inf_counter"]
    assert "not finite" in inf.reason
    [noinf], _ = second["no_inf_bucket"]
    assert noinf.figures.itl_p50_seconds is None and noinf.figures.decode_tokens_per_second == pytest.approx(50.0)
    grown = rss_mib() - rss_before
    assert grown < RSS_BOUND_MIB, f"RSS grew {grown:.0f} MiB"


async def test_one_broken_pod_makes_its_revision_an_error_naming_it(fake: FakePods) -> None:
    ref = ServerRef("ns", "two", ROLES, fake.port, "m")
    async with sampling() as sampler:
        s = await last_sample(sampler, ref, fake.view({"good", "http500"}), PARAMS)
    assert s.kind is SampleKind.ERROR and "pod http500" in s.reason and "good" not in s.reason
    assert s.pods == ("good",) and s.figures.generation_tokens_per_second is not None


async def test_deleted_pods_and_servers_are_forgotten(fake: FakePods) -> None:
    http = SGLangHTTP()
    sampler = Sampler(http, clock=lambda: dt.datetime.now(dt.UTC))
    ref = ServerRef("ns", "good", ROLES, fake.port, "m")
    try:
        await sampler.sample(ref, fake.view({"good"}), PARAMS)
        assert "good" in ref.state.previous
        assert not sampler.due(ref.state, 60)
        assert await sampler.sample(ref, lambda: [], PARAMS) == []  # no pod left: no sample, nothing kept
        assert "good" not in ref.state.previous
        sampler.forget(ref.state)
        assert sampler.due(ref.state, 60)
    finally:
        await http.aclose()
