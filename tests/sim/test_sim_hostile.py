"""The simulator's hostile modes (issue 16): each body is what the mode says, breaches the operator's bound it is
made for (read by the operator's own parser and probe client), and costs the simulator one block per request, not
the body, whatever the client reads."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from sglang_sim.cli import parse_command
from sglang_sim.faults import BLOCK_BYTES, faults_from
from simproc import REGRESSED, RunningSim, start_sim, to_0523

from sglang_operator.decisions import effective
from sglang_operator.decisions.sampling.limits import LINE_TOO_LONG, TOO_MANY_CHUNKS, ScrapeLimits
from sglang_operator.decisions.sampling.parse import ParseError, parse_text
from sglang_operator.decisions.sampling.roles import Role, roles_for
from sglang_operator.io import loadgen
from sglang_operator.sglang.versions import parse_version

MIB = 1024 * 1024
ROLES = roles_for(parse_version("0.5.23"))
WANTED = b"sglang:num_running_reqs{"


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSim]:
    s = start_sim([*to_0523(REGRESSED), "--enable-metrics"])
    yield s
    s.stop()


def _faults(sim: RunningSim, **changes: object) -> None:
    r = httpx.post(sim.base_url + "/sim/admin/faults", json=changes)
    assert r.status_code == 200, r.text


def rss_mib(sim: RunningSim) -> float:
    status = Path(f"/proc/{sim.proc.pid}/status").read_text()
    return int(next(ln for ln in status.splitlines() if ln.startswith("VmRSS:")).split()[1]) / 1024


def _chat(stream: bool = True) -> dict[str, object]:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stream": stream,
            "stream_options": {"include_usage": True}}


def test_a_7_mib_label_value_is_one_valid_line_the_operator_refuses(sim: RunningSim) -> None:
    _faults(sim, metrics_mode="long_label", metrics_label_mb=7)
    try:
        body = httpx.get(sim.base_url + "/metrics", timeout=30).content
    finally:
        _faults(sim, metrics_mode="ok")
    *head, evil, end = body.split(b"\n")
    assert end == b"" and evil.startswith(WANTED) and evil.endswith(b'"} 1.0')
    value = evil.split(b'evil="', 1)[1][:-len(b'"} 1.0')]
    assert value == b"v" * (7 * MIB)
    assert b'model_name="' in evil  # the labels of the real series, and one more
    assert any(line.startswith(WANTED) for line in head)  # the real body comes first
    with pytest.raises(ParseError) as err:
        parse_text(body, ROLES, ScrapeLimits())
    assert err.value.reason == "label_value_too_long"
    assert len(body) < ScrapeLimits().body_bytes  # the label's bound trips, not the body's


def test_100_000_series_of_a_gauge_the_sampler_reads(sim: RunningSim) -> None:
    _faults(sim, metrics_mode="many_series", metrics_series=2000)
    try:
        few = httpx.get(sim.base_url + "/metrics", timeout=30).content
        _faults(sim, metrics_series=100_000)
        body = httpx.get(sim.base_url + "/metrics", timeout=30).content
    finally:
        _faults(sim, metrics_mode="ok", metrics_series=100_000)
    parsed = parse_text(few, ROLES, ScrapeLimits(samples=10_000))  # valid text: under a limit, every series parses
    assert len(parsed.gauges[Role.RUNNING_REQUESTS]) == 2001
    series = [line for line in body.split(b"\n") if line.startswith(WANTED) and b'series="' in line]
    assert len(series) == 100_000 and len(set(series)) == 100_000
    assert series[0].endswith(b'series="0"} 1.0') and series[-1].endswith(b'series="99999"} 1.0')
    with pytest.raises(ParseError) as err:
        parse_text(body, ROLES, ScrapeLimits())
    assert err.value.reason == "too_many_samples"


def test_an_endless_line_is_valid_sse_when_it_ends_and_trips_the_probe_s_line_cap(sim: RunningSim) -> None:
    _faults(sim, probe_mode="endless_line", probe_line_mb=1)
    try:
        body = httpx.post(sim.base_url + "/v1/chat/completions", json=_chat(), timeout=30).content
        res = asyncio.run(_stream_once(sim))
    finally:
        _faults(sim, probe_mode="ok", probe_line_mb=1024)
    first, done = [e for e in body.split(b"\n\n") if e]
    chunk = json.loads(first.removeprefix(b"data: "))
    assert chunk["choices"][0]["delta"]["content"] == "x" * MIB and done == b"data: [DONE]"
    assert res.error == LINE_TOO_LONG


def test_millions_of_tiny_chunks_are_valid_and_trip_the_probe_s_chunk_cap(sim: RunningSim) -> None:
    _faults(sim, probe_mode="tiny_chunks", probe_chunks=3000)
    try:
        small = asyncio.run(_stream_once(sim))
        _faults(sim, probe_chunks=2_000_000)
        big = asyncio.run(_stream_once(sim))
    finally:
        _faults(sim, probe_mode="ok", probe_chunks=5_000_000)
    assert small.error is None and small.completion_tokens == 3000 and small.chunk_gaps.count == 2999
    assert big.error == TOO_MANY_CHUNKS
    non_stream = httpx.post(sim.base_url + "/v1/chat/completions", json=_chat(stream=False), timeout=30)
    assert non_stream.json()["object"] == "chat.completion"  # only streamed answers are hostile


def _streamed_requests(sim: RunningSim) -> float:
    body = httpx.get(sim.base_url + "/metrics", timeout=30).text
    return sum(float(line.rsplit(" ", 1)[1]) for line in body.splitlines()
               if line.startswith("sglang:num_requests_total{") and 'is_streaming="true"' in line)


def test_an_instant_answer_is_one_token_at_once_and_counted(sim: RunningSim) -> None:
    """``instant``: the trial pod answering at once of issue 42 (``bench/hostile.py fast-trial``): HTTP 200, one
    content chunk of one token, usage 1, ``[DONE]``; each answer counted as a finished streamed request."""
    before = _streamed_requests(sim)
    _faults(sim, probe_mode="instant")
    try:
        t0 = time.monotonic()
        resp = httpx.post(sim.base_url + "/v1/chat/completions", json=_chat(), timeout=30)
        res = asyncio.run(_stream_once(sim))
        took = time.monotonic() - t0
        plain = httpx.post(sim.base_url + "/v1/completions", json={"model": "m", "prompt": "hi", "max_tokens": 8,
                                                                   "stream": True}, timeout=30).content
        counted = _streamed_requests(sim) - before
    finally:
        _faults(sim, probe_mode="ok")
    assert resp.status_code == 200 and resp.headers["content-type"].startswith("text/event-stream")
    events = [e.removeprefix(b"data: ") for e in resp.content.split(b"\n\n") if e]
    assert events[-1] == b"[DONE]" and len(events) == 3
    first, usage = json.loads(events[0]), json.loads(events[1])
    assert first["choices"][0]["delta"]["content"] == "x" and usage["usage"]["completion_tokens"] == 1
    assert res.error is None and res.completion_tokens == 1
    assert json.loads(plain.split(b"\n\n")[0].removeprefix(b"data: "))["choices"][0]["text"] == "x"
    assert counted == 3 and took < 5  # regressed sim at real speed would take seconds for 8 tokens each
    non_stream = httpx.post(sim.base_url + "/v1/chat/completions", json=_chat(stream=False), timeout=30)
    assert non_stream.json()["usage"]["completion_tokens"] == 8  # only streamed answers are instant


def test_a_1_mib_server_info_string_is_cut_by_the_operator(sim: RunningSim) -> None:
    _faults(sim, server_info_string_mb=1)
    try:
        info = httpx.get(sim.base_url + "/server_info", timeout=30).json()
    finally:
        _faults(sim, server_info_string_mb=None)
    algo = info["speculative_algorithm"]
    assert len(algo) == MIB and algo.startswith("NEXTN")
    cut = effective.effective_settings(info)["algorithm"]
    assert len(cut) < 300 and cut.endswith("[truncated]")
    assert httpx.get(sim.base_url + "/server_info").json()["speculative_algorithm"] == "EAGLE"


async def _stream_once(sim: RunningSim) -> loadgen.StreamResult:
    async with httpx.AsyncClient(timeout=60) as client:
        return await loadgen.stream_once(client, sim.base_url, "m", max_tokens=8)


def test_the_simulator_holds_a_block_not_the_body_whatever_the_client_reads(sim: RunningSim) -> None:
    """64 MiB of a 1 GiB line and 40 MiB of tiny chunks read, then the client goes away: the simulator's RSS grows
    by far less than what it sent, and it answers as before."""
    _faults(sim, probe_mode="endless_line", probe_line_mb=1024)
    before = rss_mib(sim)
    try:
        for mode, limit in (("endless_line", 64 * MIB), ("tiny_chunks", 40 * MIB)):
            _faults(sim, probe_mode=mode)
            with httpx.stream("POST", sim.base_url + "/v1/chat/completions", json=_chat(), timeout=30) as r:
                got = 0
                for data in r.iter_raw():
                    got += len(data)
                    if got >= limit:
                        break
            assert got >= limit
    finally:
        _faults(sim, probe_mode="ok", probe_line_mb=1024)
    grown = rss_mib(sim) - before
    assert grown < 16, f"RSS grew {grown:.1f} MiB while sending 104 MiB in blocks of {BLOCK_BYTES} bytes"
    assert httpx.get(sim.base_url + "/health", timeout=5).status_code == 200
    ok = asyncio.run(_stream_once(sim))
    assert ok.error is None and ok.completion_tokens == 8


def test_hostile_faults_from_flags_and_env() -> None:
    cmd = parse_command(["--model-path", "m", "--sim-fault-probe-mode", "tiny_chunks", "--sim-fault-probe-chunks",
                         "42", "--sim-fault-metrics-label-mb=0.5", "--sim-fault-server-info-string-mb", "1"], {})
    faults = faults_from(cmd.faults, {"SGLANG_SIM_FAULT_METRICS_MODE": "many_series",
                                      "SGLANG_SIM_FAULT_METRICS_SERIES": "7", "SGLANG_SIM_FAULT_PROBE_MODE": "ok",
                                      "SGLANG_SIM_FAULT_PROBE_LINE_MB": "2"})
    assert faults_from({}, {"SGLANG_SIM_FAULT_PROBE_MODE": "instant"}).probe_mode == "instant"
    assert (faults.probe_mode, faults.probe_chunks, faults.metrics_label_mb) == ("tiny_chunks", 42, 0.5)
    assert (faults.metrics_mode, faults.metrics_series, faults.probe_line_mb) == ("many_series", 7, 2.0)
    assert faults.server_info_string_mb == 1.0 and cmd.argv == ["--model-path", "m"]
    with pytest.raises(ValueError):
        faults_from({"probe_mode": "sideways"}, {})
