"""The sampler against the SGLang simulator (a real HTTP server process): the probe streams the probe prompt with
the API key, the next interval's sample has the probe's single-stream speed and the accept length from the
counters over the same interval; a wrong API key makes the probe an Error sample."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest
from simproc import KNOWN_GOOD, MODEL, SPEC_V2_ENV, TIME_SCALE, start_sim, to_0523, wait_healthy

from sglang_operator.decisions.sampling.model import SampleKind, Signal
from sglang_operator.decisions.sampling.roles import roles_for
from sglang_operator.io import sampler as sampler_module
from sglang_operator.io.pods import Target
from sglang_operator.io.sampler import Sampler, SamplingParams, ServerRef
from sglang_operator.io.sglang_http import SGLangHTTP
from sglang_operator.process import telemetry
from sglang_operator.sglang.versions import parse_version

SIM_0523 = [*to_0523(KNOWN_GOOD), "--enable-metrics", "--api-key", "sk-test"]


@pytest.fixture
def sim() -> Iterator[str]:
    running = start_sim(SIM_0523, env=SPEC_V2_ENV)
    yield running.base_url
    running.stop()


async def _two_intervals(url: str, api_key: str) -> list:  # type: ignore[type-arg]
    port = int(url.rsplit(":", 1)[1])
    http = SGLangHTTP()
    sampler = Sampler(http)
    ref = ServerRef("ns", "qwen", roles_for(parse_version("0.5.23")), port, MODEL)
    pod = Target("qwen-0", "rev1", "127.0.0.1", True, 0)
    params = SamplingParams(interval_seconds=5, signal=Signal.PROBE, probe_max_tokens=256, probe_timeout_seconds=4)
    try:
        first = await sampler.sample(ref, lambda: [pod], params, api_key=api_key)
        await asyncio.sleep(1.5)  # 256 tokens at ~52 tok/s x 20: ~0.25 s of wall clock
        second = await sampler.sample(ref, lambda: [pod], params, api_key=api_key)
    finally:
        await sampler.aclose()
        await http.aclose()
    return [*first, *second]


async def test_probe_and_counters_measure_the_known_good_revision(sim: str) -> None:
    first, second = await _two_intervals(sim, "sk-test")
    assert first.kind is SampleKind.INCONCLUSIVE and "first scrape" in first.reason
    assert second.kind is SampleKind.MEASURED, second.reason
    f = second.figures
    assert f.accept_length == pytest.approx(2.725, abs=0.1)  # 256 tokens / verify calls of the probe
    assert f.decode_tokens_per_second is not None and f.decode_tokens_per_second > 20 * TIME_SCALE
    assert f.num_steps == 3 and f.num_draft_tokens == 4
    assert f.ttft_p50_seconds is not None and 0 < f.ttft_p50_seconds < 0.5  # ~0.5k-token prompt: ~0.2 s
    assert f.itl_p50_seconds is not None and f.generation_tokens_per_second and f.generation_tokens_per_second > 0
    assert second.signal is Signal.PROBE and second.pods == ("qwen-0",)


async def test_a_refused_probe_is_an_error_sample_and_counted(sim: str) -> None:
    before = telemetry.SCRAPE_ERRORS.labels("probe", "http_status")._value.get()
    _, second = await _two_intervals(sim, "sk-wrong")
    assert second.kind is SampleKind.ERROR and "HTTP 401" in second.reason
    assert telemetry.SCRAPE_ERRORS.labels("probe", "http_status")._value.get() == before + 1


async def _intervals(urls: list[str], version: str, speculative: bool, rounds: int) -> list:  # type: ignore[type-arg]
    """The samples of ``rounds`` intervals over one revision whose pods are the simulators at ``urls``. A server's
    pods share one port (``ServerRef.port``) and differ by IP; these share 127.0.0.1 and differ by port, so pod i
    gets the fake IP 127.0.0.<i+1>, mapped back to its simulator's port."""
    http = SGLangHTTP()
    sampler = Sampler(http)
    ports = [int(u.rsplit(":", 1)[1]) for u in urls]
    ref = ServerRef("ns", "qwen", roles_for(parse_version(version)), 0, MODEL, speculative=speculative)
    pods = [Target(f"qwen-{i}", "rev1", f"127.0.0.{i + 1}", True, 0) for i in range(len(urls))]
    params = SamplingParams(interval_seconds=5, signal=Signal.PROBE, probe_max_tokens=64, probe_timeout_seconds=4)
    real_base = sampler_module.base_url

    def base(ip: str, _port: int) -> str:  # pod i is the simulator on ports[i]
        return real_base("127.0.0.1", ports[int(ip.rsplit(".", 1)[1]) - 1])

    out = []
    try:
        with pytest.MonkeyPatch.context() as mp:
            mp.setattr(sampler_module, "base_url", base)
            for _ in range(rounds):
                out += await sampler.sample(ref, lambda: pods, params)
                await asyncio.sleep(0.6)  # 64 tokens at ~52 tok/s x 20: ~0.07 s of wall clock
    finally:
        await sampler.aclose()
        await http.aclose()
    return out


@pytest.mark.parametrize("version", ["0.5.10", "0.5.23"])
async def test_four_pods_keep_their_accept_length_and_rate_from_the_third_interval(version: str) -> None:
    """Issue 38: SGLang writes the speculative gauges every 40 decode steps; a 64-token probe is about 24 steps at
    accept length 2.7, so probes sent round robin over 4 pods wrote no pod's gauges in the 3 intervals a first
    revision is judged in (0.5.10: no verify counter, the accept length lost too; the accept rate has no counter in
    any release). The probe now stays on a pod until its gauges are written: from the third interval on, every
    measured sample has both, within 10 % of what the simulator computes for these settings."""
    from sglang_sim import perf

    argv = [*(KNOWN_GOOD if version == "0.5.10" else to_0523(KNOWN_GOOD)), "--enable-metrics"]
    sims = [start_sim(argv, version=version, env=SPEC_V2_ENV, wait_ready=False) for _ in range(4)]
    try:
        for s in sims:  # started together, waited for in turn
            wait_healthy(s)
        samples = await _intervals([s.base_url for s in sims], version, True, 5)
    finally:
        for s in sims:
            s.stop()
    shape = perf.SpecShape(num_steps=3, topk=1, num_draft_tokens=4)
    formula = "len_over_ndt" if version == "0.5.10" else "drafts_over_ndt_minus_1"
    want_rate = perf.accept_rate(2.725, shape, formula)
    later = samples[2:]
    assert all(s.kind is SampleKind.MEASURED for s in later), [s.reason for s in later]
    for s in later:
        assert s.figures.accept_length == pytest.approx(2.725, rel=0.1), s
        assert s.figures.accept_rate == pytest.approx(want_rate, rel=0.1), s
