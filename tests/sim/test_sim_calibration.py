"""Calibration of the performance model on the published case, on the model itself and on what the
simulated scheduler emits (decode log lines and /metrics gauges), without wall-clock timing."""

from __future__ import annotations

import io
import itertools
import re

import pytest
from prometheus_client.parser import text_string_to_metric_families
from sglang_sim import perf
from sglang_sim.engine import SimRequest
from sglang_sim.facts import resolve, version_facts
from sglang_sim.launch import Built, build
from sglang_sim.logfmt import SimLogger
from sglang_sim.metrics import render
from sglang_sim.profiles import load_gpu_profile, load_model_profile
from simproc import (
    GPU,
    KNOWN_GOOD,
    KNOWN_GOOD_TOK_S,
    MODEL,
    REGRESSED,
    REGRESSED_ACCEPT_LEN,
    REGRESSED_TOK_S,
    SPEC_V2_ENV,
    to_0523,
)

DECODE = re.compile(r"accept len: ([\d.]+), accept rate: ([\d.]+), .*gen throughput \(token/s\): ([\d.]+)")


def _build(version: str, argv: list[str], seed: int = 7) -> tuple[Built, SimLogger]:
    facts = version_facts(version)
    log = SimLogger(io.StringIO())
    return build(facts, resolve(argv, facts, SPEC_V2_ENV), {"gpu": GPU, "seed": seed}, SPEC_V2_ENV, log), log


def _single_stream(b: Built, steps: int = 600) -> None:
    b.engine.submit(SimRequest("probe", 128, 100_000, True))
    for _ in range(steps):
        b.engine.step()


def _gauges(b: Built) -> dict[str, float]:
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(render(b.engine.stats, b.metrics_ctx)):
        for s in fam.samples:
            out.setdefault(s.name, s.value)
    return out


def test_model_reproduces_published_speeds() -> None:
    model, gpu = load_model_profile(MODEL), load_gpu_profile(GPU)
    regressed = perf.per_request_tok_s(model, gpu, 2, perf.SpecShape(1, 1, 2))
    good = perf.per_request_tok_s(model, gpu, 2, perf.SpecShape(3, 1, 4))
    assert regressed == pytest.approx(REGRESSED_TOK_S, rel=0.10)
    assert good == pytest.approx(KNOWN_GOOD_TOK_S, rel=0.10)
    assert perf.expected_accept_length(model.alpha, perf.SpecShape(1, 1, 2)) == pytest.approx(
        REGRESSED_ACCEPT_LEN, abs=0.05)


@pytest.mark.parametrize(("version", "argv", "tok_s", "accept_len", "accept_rate"), [
    # 0.5.10: accept rate = accept len / num_draft_tokens (scheduler_metrics_mixin.py) -> 1.75 / 2
    ("0.5.10", REGRESSED, REGRESSED_TOK_S, 1.75, 0.875),
    ("0.5.10", KNOWN_GOOD, KNOWN_GOOD_TOK_S, None, None),
    # 0.5.23: accept rate = accepted drafts / (num_draft_tokens - 1) (metrics_reporter.py) -> 0.75
    ("0.5.23", to_0523(REGRESSED), REGRESSED_TOK_S, 1.75, 0.75),
    ("0.5.23", to_0523(KNOWN_GOOD), KNOWN_GOOD_TOK_S, None, None),
])
def test_emitted_log_and_metrics_match_calibration(version: str, argv: list[str], tok_s: float,
                                                   accept_len: float | None, accept_rate: float | None) -> None:
    b, log = _build(version, argv)
    _single_stream(b)
    lines = [m for m in map(DECODE.search, log.lines) if m]
    assert len(lines) >= 5
    steady = lines[2:]  # the first window also spans the idle time and prefill, as in SGLang
    for m in steady:
        assert float(m[3]) == pytest.approx(tok_s, rel=0.10)
    gauges = _gauges(b)
    assert gauges["sglang:gen_throughput"] == pytest.approx(tok_s, rel=0.10)
    if accept_len is not None:
        assert all(float(m[1]) == pytest.approx(accept_len, abs=0.05) for m in steady)
        assert gauges["sglang:spec_accept_length"] == pytest.approx(accept_len, abs=0.05)
        assert gauges["sglang:spec_accept_rate"] == pytest.approx(accept_rate, abs=0.01)
        assert steady[-1][0].startswith(f"accept len: 1.75, accept rate: {accept_rate:.2f}")


def test_jitter_is_seeded() -> None:
    runs = []
    for seed in (1, 1, 2):
        b, log = _build("0.5.23", to_0523(REGRESSED), seed=seed)
        _single_stream(b, 300)
        runs.append([m[3] for m in map(DECODE.search, log.lines) if m])
    assert runs[0] == runs[1]
    assert runs[0] != runs[2]


def test_more_steps_help_until_draft_cost_wins() -> None:
    model, gpu = load_model_profile(MODEL), load_gpu_profile(GPU)
    speeds = [perf.per_request_tok_s(model, gpu, 2, perf.SpecShape(k, 1, k + 1)) for k in range(1, 16)]
    peak = speeds.index(max(speeds))
    assert 2 <= peak < len(speeds) - 1, speeds
    assert all(a < b for a, b in itertools.pairwise(speeds[: peak + 1])), speeds
    assert all(a > b for a, b in itertools.pairwise(speeds[peak:])), speeds


def test_lower_alpha_lowers_throughput() -> None:
    model, gpu = load_model_profile(MODEL), load_gpu_profile(GPU)
    shape = perf.SpecShape(3, 1, 4)
    speeds = [perf.per_request_tok_s(model, gpu, 2, shape, alpha=a) for a in (0.95, 0.75, 0.5, 0.25, 0.05)]
    assert speeds == sorted(speeds, reverse=True) and len(set(speeds)) == len(speeds)
    plain = perf.per_request_tok_s(model, gpu, 2, None)
    assert speeds[-1] < plain  # collapsed acceptance: drafting costs more than it gains


def test_per_request_speed_falls_with_running_requests() -> None:
    model, gpu = load_model_profile(MODEL), load_gpu_profile(GPU)
    shape = perf.SpecShape(3, 1, 4)
    per_req = [perf.per_request_tok_s(model, gpu, 2, shape, bs) for bs in (1, 2, 8, 16, 48)]
    assert per_req == sorted(per_req, reverse=True)
    aggregate = [s * bs for s, bs in zip(per_req, (1, 2, 8, 16, 48), strict=True)]
    assert aggregate == sorted(aggregate)


def test_tree_shape() -> None:
    chain = perf.chain_accept_length(0.75, 3)
    assert perf.tree_accept_length(0.75, perf.SpecShape(3, 1, 4), 0.5) == pytest.approx(chain)
    wide = perf.tree_accept_length(0.75, perf.SpecShape(3, 4, 8), 0.5)
    assert chain < wide <= 4.0
    # more draft tokens in the same tree never lower the expected accept length
    budget = [perf.tree_accept_length(0.75, perf.SpecShape(3, 4, n), 0.5) for n in range(2, 13)]
    assert budget == sorted(budget)
