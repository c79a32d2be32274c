"""What the sampler keeps of a pod's scrape between intervals is bounded: series keys hashed (no label text), gauges
dropped, series per pod and role capped (a breach is an Error sample of that pod, counted), and a process-wide byte
budget (a pod that does not fit keeps nothing: its next interval is inconclusive, counted; never memory taken).
Served by real HTTP servers on loopback and sampled by the real sampler."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from expo import SCHED, exposition
from fakepods import FakePods, last_sample, sampling, serving, text

from sglang_operator.decisions.sampling.limits import ScrapeLimits
from sglang_operator.decisions.sampling.model import SampleKind, Signal
from sglang_operator.decisions.sampling.parse import parse_text
from sglang_operator.decisions.sampling.retain import (
    BUDGET,
    TOO_MANY_SERIES,
    RetainError,
    compact,
    retained,
    retained_bytes,
    series_hash,
)
from sglang_operator.decisions.sampling.roles import Role, roles_for
from sglang_operator.io import scrape_metrics
from sglang_operator.io.sampler import Sampler, SamplingParams, ServerRef
from sglang_operator.io.sglang_http import SGLangHTTP
from sglang_operator.sglang.versions import parse_version

ROLES = roles_for(parse_version("0.5.23"))
PARAMS = SamplingParams(interval_seconds=1, signal=Signal.TRAFFIC, scrape_timeout_seconds=5.0)


def healthy(n: int) -> str:
    return exposition(gen=1000.0 * n, verify=400 * n, running=2, accept_rate=0.6, itl=(0, 0, 1000 * n, 0, 0, 0, 0, 0),
                      itl_sum=20.0 * n, ttft=(n, n, 0, 0, 0, 0, 0, 0), ttft_sum=0.2 * n)


def long_labels(n: int, series: int = 100, chars: int = 2000) -> str:
    """``series`` generation-token series with a label of ``chars`` characters, new each scrape ``n``."""
    pad = "x" * chars
    return healthy(n) + "".join(f'sglang:generation_tokens_total{{{SCHED},evil="{n}-{i}-{pad}"}} {i}\n'
                                for i in range(series))


def _breaches(reason: str) -> float:
    return scrape_metrics.RETENTION_BREACHES.labels(reason)._value.get()


def test_compact_hashes_the_keys_and_retained_keeps_what_the_next_interval_needs() -> None:
    parsed = parse_text(long_labels(1, series=10).encode(), ROLES)
    small = compact(parsed, retained_series=256)
    keys = list(small.counters[Role.GENERATION_TOKENS])
    assert len(keys) == len(parsed.counters[Role.GENERATION_TOKENS]) > 10 and all(len(k) == 16 for k in keys)
    assert sorted(small.counters[Role.GENERATION_TOKENS].values()) == sorted(
        parsed.counters[Role.GENERATION_TOKENS].values())
    assert series_hash(next(iter(parsed.counters[Role.GENERATION_TOKENS]))) in keys
    assert small.gauges and not retained(small).gauges  # the previous scrape's gauges are never read
    assert retained(small).histograms == small.histograms
    # what is kept does not grow with the label text
    assert retained_bytes(retained(small)) == retained_bytes(
        retained(compact(parse_text(long_labels(1, series=10, chars=20).encode(), ROLES), 256)))


def test_more_series_of_one_role_than_the_cap_is_refused() -> None:
    parsed = parse_text(long_labels(1, series=300, chars=10).encode(), ROLES)
    with pytest.raises(RetainError) as err:
        compact(parsed, retained_series=256)
    n = len(parsed.counters[Role.GENERATION_TOKENS])
    assert err.value.reason == TOO_MANY_SERIES
    assert f"{n} counter series of generation_tokens, over 256" in str(err.value)
    assert compact(parsed, retained_series=n).counters[Role.GENERATION_TOKENS]


@pytest.fixture
async def fake() -> AsyncIterator[FakePods]:
    async with serving({"good": text(healthy), "fat": text(long_labels),
                        "wide": text(lambda n: long_labels(n, series=300, chars=10))}) as pods:
        yield pods


async def test_hashed_keys_measure_the_same_and_keep_no_label_text(fake: FakePods) -> None:
    fat = ServerRef("ns", "fat", ROLES, fake.port, "m")
    async with sampling() as sampler:
        sample = await last_sample(sampler, fat, fake.view({"fat"}), PARAMS)
    assert sample.kind is SampleKind.MEASURED, sample.reason
    assert sample.figures.generation_tokens_per_second is not None
    kept = fat.state.previous["fat"].parsed
    assert all(len(k) == 16 for series in kept.counters.values() for k in series) and not kept.gauges
    assert 0 < fat.state.retained_bytes["fat"] < 64 * 1024 < 100 * 2000  # not the 200 KB of label text
    assert sampler.retained_total() == fat.state.retained_bytes["fat"]


async def test_a_pod_over_the_series_cap_is_an_error_counted_and_keeps_nothing(fake: FakePods) -> None:
    wide = ServerRef("ns", "wide", ROLES, fake.port, "m")
    before = _breaches(TOO_MANY_SERIES)
    async with sampling() as sampler:
        sample = await last_sample(sampler, wide, fake.view({"wide"}), PARAMS)
    assert sample.kind is SampleKind.ERROR and "(too_many_series)" in sample.reason
    assert _breaches(TOO_MANY_SERIES) - before == 2  # one per pod and interval
    assert wide.state.previous == {} and wide.state.retained_bytes == {}


async def test_the_process_wide_budget_keeps_one_pod_out_and_counts_it(fake: FakePods) -> None:
    http = SGLangHTTP()
    probe = Sampler(http)
    first = ServerRef("ns", "first", ROLES, fake.port, "m")
    try:
        await probe.sample(first, fake.view({"good"}), PARAMS)
        one = first.state.retained_bytes["good"]
        sampler = Sampler(http, limits=ScrapeLimits(retained_bytes=one + one // 2))  # room for one pod's scrape
        a, b = ServerRef("ns", "a", ROLES, fake.port, "m"), ServerRef("ns", "b", ROLES, fake.port, "m")
        before = _breaches(BUDGET)
        for _ in range(2):
            [sa] = await sampler.sample(a, fake.view({"good"}), PARAMS)
            [sb] = await sampler.sample(b, fake.view({"good"}), PARAMS)
    finally:
        await http.aclose()
    assert sa.kind is SampleKind.MEASURED, sa.reason  # the first server's pod fits and is measured
    assert sb.kind is SampleKind.INCONCLUSIVE and sb.reason.startswith("first scrape of pod good")
    assert _breaches(BUDGET) - before == 2 and b.state.previous == {}
    assert sampler.retained_total() == one <= sampler.limits.retained_bytes
    Sampler.forget(a.state)
    assert sampler.retained_total() == 0
