"""Hostile ``/metrics`` bodies against the scrape limits (issue 16), served by real HTTP servers on loopback and
sampled by the real sampler: each breach is a counted scrape error with its reason, nothing of the offending line
is cached, each pod's label-set cache stays within its byte bound and is dropped when the pod goes away."""

from __future__ import annotations

import tracemalloc
from collections.abc import AsyncIterator, Iterator

import pytest
from expo import LABELS, SCHED, exposition
from fakepods import FakePods, serving, stream, text

from sglang_operator.decisions.sampling.cache import ENTRY_OVERHEAD, SeriesCache
from sglang_operator.decisions.sampling.limits import ScrapeLimits
from sglang_operator.decisions.sampling.model import SampleKind, Signal
from sglang_operator.decisions.sampling.parse import LineFilter, ParseError, parse_text
from sglang_operator.decisions.sampling.roles import Role, roles_for
from sglang_operator.io.sampler import Sampler, SamplingParams, ServerRef
from sglang_operator.io.sglang_http import SGLangHTTP
from sglang_operator.process import telemetry
from sglang_operator.sglang.versions import parse_version

ROLES = roles_for(parse_version("0.5.23"))
PARAMS = SamplingParams(interval_seconds=1, signal=Signal.TRAFFIC, scrape_timeout_seconds=5.0)
MIB = 1024 * 1024
HUGE_VALUE = "v" * (7 * MIB)


def healthy(n: int) -> str:
    return exposition(gen=1000.0 * n, verify=400 * n, running=2, accept_rate=0.6, itl=(0, 0, 1000 * n, 0, 0, 0, 0, 0),
                      itl_sum=20.0 * n, ttft=(n, n, 0, 0, 0, 0, 0, 0), ttft_sum=0.2 * n)


def long_label(n: int) -> str:
    """A wanted gauge whose label value is 7 MiB (the body stays under the 8 MiB body limit)."""
    return healthy(n) + f'sglang:num_queue_reqs{{{SCHED},evil="{HUGE_VALUE}"}} 1\n'


def many_series() -> Iterator[bytes]:
    """A healthy body followed by 100 000 series of a wanted gauge."""
    yield healthy(1).encode()
    for block in range(100):
        yield "".join(f'sglang:num_running_reqs{{{SCHED},series="{block}-{i}"}} 1\n'
                      for i in range(1000)).encode()


def many_labels(n: int) -> str:
    extra = ",".join(f'l{i}="x"' for i in range(100))
    return healthy(n) + f"sglang:num_queue_reqs{{{SCHED},{extra}}} 1\n"


def _errors(reason: str) -> float:
    return telemetry.SCRAPE_ERRORS.labels("metrics", reason)._value.get()


@pytest.fixture
async def fake() -> AsyncIterator[FakePods]:
    async with serving({"good": text(healthy), "long_label": text(long_label), "many_series": stream(many_series),
                        "many_labels": text(many_labels)}) as pods:
        yield pods


async def test_each_breached_limit_is_a_counted_error_and_nothing_of_it_is_cached(fake: FakePods) -> None:
    http = SGLangHTTP()
    sampler = Sampler(http)
    refs = {n: ServerRef("ns", n, ROLES, fake.port, "m") for n in ("good", "long_label", "many_series", "many_labels")}
    reasons = {"long_label": "label_value_too_long", "many_series": "too_many_samples",
               "many_labels": "too_many_labels"}
    before = {r: _errors(r) for r in reasons.values()}
    try:
        for _ in range(2):
            samples = {n: await sampler.sample(ref, fake.view({n}), PARAMS) for n, ref in refs.items()}
    finally:
        await http.aclose()
    [good] = samples["good"]
    assert good.kind is SampleKind.MEASURED, good.reason
    for name, reason in reasons.items():
        [s] = samples[name]
        assert s.kind is SampleKind.ERROR and f"({reason})" in s.reason, (name, s.reason)
        assert _errors(reason) - before[reason] == 2, name  # two scrapes, two counted errors
    limit = ScrapeLimits().cache_bytes
    for name, ref in refs.items():
        cache = ref.state.caches[name]
        assert cache.size <= limit
        assert all(len(raw) < 4096 for _, raw in cache.entries), name  # no line of the hostile series kept
    assert len(refs["good"].state.caches["good"]) > 0
    assert refs["long_label"].state.caches["long_label"].size < len(HUGE_VALUE) // 1000


def test_the_sample_limit_stops_the_read_at_the_chunk_that_passes_it() -> None:
    limits = ScrapeLimits(samples=10_000)
    f = LineFilter(ROLES, limits=limits)
    fed = 0
    with pytest.raises(ParseError) as err:
        for chunk in many_series():
            for pos in range(0, len(chunk), 65536):
                fed += 1
                f.feed(chunk[pos:pos + 65536])
    assert err.value.reason == "too_many_samples"
    assert len(f.kept) <= limits.samples  # the read stopped: not 100 000 lines kept
    assert fed * 65536 < sum(len(c) for c in many_series()) // 5


def test_a_label_value_over_the_limit_is_refused_as_its_line_arrives_and_not_cached() -> None:
    limits = ScrapeLimits(label_value_length=100)
    cache = SeriesCache(limits.cache_bytes)
    line = f'sglang:num_queue_reqs{{{LABELS},evil="{"w" * 101}"}} 1\n'.encode()
    f = LineFilter(ROLES, cache, limits)
    f.feed(healthy(1).encode())
    with pytest.raises(ParseError) as err:
        f.feed(line)
    assert err.value.reason == "label_value_too_long"
    assert all(b"evil" not in raw for _, raw in cache.entries)
    ok = parse_text((healthy(1) + f'sglang:num_queue_reqs{{{LABELS},evil="{"w" * 100}"}} 1\n').encode(), ROLES,
                    limits)
    assert any('evil="' in key for key in ok.gauges[Role.QUEUED_REQUESTS])  # at the limit: accepted


@pytest.mark.parametrize("value", ["v" * (7 * MIB), "\\n" * (7 * MIB // 2)], ids=["plain", "escapes"])
def test_a_7_mib_label_value_is_refused_in_memory_of_the_order_of_the_line(value: str) -> None:
    """The label value is matched without a backtracking point per character (the regex engine kept ~190 bytes per
    character of a 7 MiB value: 1.3 GiB for one scrape, found by e2e/tests/test_hostile.py)."""
    body = (healthy(1) + f'sglang:num_queue_reqs{{{SCHED},evil="{value}"}} 1\n').encode()
    chunks = [body[pos:pos + 65536] for pos in range(0, len(body), 65536)]
    tracemalloc.start()
    try:
        f = LineFilter(ROLES)
        with pytest.raises(ParseError) as err:
            for chunk in chunks:
                f.feed(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert err.value.reason == "label_value_too_long"
    assert peak < 4 * len(body), f"peak {peak / MIB:.0f} MiB for a {len(body) / MIB:.0f} MiB line"


def test_the_cache_is_bounded_by_bytes_not_entries() -> None:
    cache = SeriesCache(64 * 1024)
    body = "".join(f'sglang:num_running_reqs{{{SCHED},series="{i:06d}"}} 1\n' for i in range(5000))
    parsed = parse_text(body.encode(), ROLES, ScrapeLimits(samples=10_000), cache=cache)
    assert len(parsed.gauges[Role.RUNNING_REQUESTS]) == 5000  # every series parsed, cached or not
    assert 0 < cache.size <= 64 * 1024
    assert len(cache) * ENTRY_OVERHEAD <= cache.size
    cache.put((b"x", b"y" * (128 * 1024)), None, 0)  # larger than the cache on its own: not kept
    assert (b"x", b"y" * (128 * 1024)) not in cache


async def test_a_pod_s_cache_goes_with_the_pod_and_all_go_with_the_server(fake: FakePods) -> None:
    http = SGLangHTTP()
    sampler = Sampler(http, limits=ScrapeLimits(cache_bytes=32 * 1024))
    ref = ServerRef("ns", "s", ROLES, fake.port, "m")
    try:
        await sampler.sample(ref, fake.view({"good", "many_labels"}), PARAMS)
        assert set(ref.state.caches) == {"good", "many_labels"}
        assert all(c.max_bytes == 32 * 1024 for c in ref.state.caches.values())
        await sampler.sample(ref, fake.view({"good"}), PARAMS)  # many_labels deleted
        assert set(ref.state.caches) == {"good"}
        sampler.forget(ref.state)
        assert ref.state.caches == {}
    finally:
        await http.aclose()


async def test_the_body_limit_of_the_operator_applies_to_every_scrape(fake: FakePods) -> None:
    http = SGLangHTTP()
    before = _errors("too_large")
    sampler = Sampler(http, limits=ScrapeLimits(body_bytes=4096))
    ref = ServerRef("ns", "g", ROLES, fake.port, "m")
    try:
        [s] = await sampler.sample(ref, fake.view({"good"}), PARAMS)
    finally:
        await http.aclose()
    assert len(healthy(1)) > 4096
    assert s.kind is SampleKind.ERROR and "(too_large)" in s.reason and _errors("too_large") - before == 1
