"""The trial measurement (``io/trialbench.py``) against the SGLang simulator (a real HTTP server process) and its
pure pieces: concurrency 4 gives more output tok/s than 1 and less per-request speed, ITL p95 >= p50, the accept
length comes from SGLang's counters over the window and SGLang's own step-time figure (``SGLANG_RECORD_STEP_TIME``)
agrees with the client's speed; a pod answering 500s records failed requests, never raises."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Iterator

import httpx
import pytest
from simproc import KNOWN_GOOD, MODEL, SPEC_V2_ENV, TIME_SCALE, start_sim, to_0523

from e2e.cluster.procs import free_port
from sglang_operator.api.tuning_spec import Objective, Workload
from sglang_operator.api.tuning_status import LevelFigures
from sglang_operator.decisions.sampling.roles import roles_for
from sglang_operator.io import loadgen
from sglang_operator.io.sglang_http import SGLangHTTP
from sglang_operator.io.trialbench import (
    DEFAULT_PROMPTS,
    BenchPlan,
    Finished,
    TrialPod,
    combine,
    default_score,
    measure_trial,
    new_step_times,
    percentile,
    step_time_lists,
    tokens_within,
)
from sglang_operator.sglang.versions import parse_version

ROLES = roles_for(parse_version("0.5.23"))
PLAN = BenchPlan(levels=(1, 4), max_output_tokens=128, seconds_per_level=1.5, warmup_seconds=0.5, repetitions=2)


def _started(env: dict[str, str]) -> Iterator[str]:
    """A 0.5.23 simulator of the published known-good configuration with metrics and ``env``; its base URL."""
    running = start_sim([*to_0523(KNOWN_GOOD), "--enable-metrics"], env={**SPEC_V2_ENV, **env})
    yield running.base_url
    running.stop()


@pytest.fixture
def recording_sim() -> Iterator[str]:
    yield from _started({"SGLANG_RECORD_STEP_TIME": "1"})


@pytest.fixture
def plain_sim() -> Iterator[str]:
    yield from _started({})


@pytest.fixture
async def http() -> AsyncIterator[SGLangHTTP]:
    client = SGLangHTTP()
    yield client
    await client.aclose()


async def test_levels_measure_throughput_latency_and_sglang_figures(recording_sim: str, http: SGLangHTTP) -> None:
    one, four = await measure_trial(http, [TrialPod("trial-0", recording_sim)], MODEL, ROLES, PLAN)
    assert (one.concurrency, four.concurrency) == (1, 4)
    for lv in (one, four):
        assert lv.failed_requests == 0 and lv.requests is not None and lv.requests >= 2 * lv.concurrency
        assert lv.output_tokens_per_second and lv.decode_tokens_per_second
        assert lv.inter_token_latency_p50_seconds is not None and lv.inter_token_latency_p95_seconds is not None
        assert lv.inter_token_latency_p95_seconds >= lv.inter_token_latency_p50_seconds > 0
        assert lv.time_to_first_token_p95_seconds is not None and lv.time_to_first_token_p50_seconds is not None
        assert lv.time_to_first_token_p95_seconds >= lv.time_to_first_token_p50_seconds > 0
        # 3/1/4 on the published case: ~2.7 tokens per verify step, from the counters over the windows
        assert lv.accept_length is not None and 2.0 < lv.accept_length < 3.6
        assert lv.accept_rate is not None and 0 < lv.accept_rate <= 1
        assert lv.spread is not None and lv.spread >= 0
        assert lv.objective is None  # the search's to fill
    assert four.output_tokens_per_second > 1.5 * one.output_tokens_per_second  # batching: more in all ...
    assert four.decode_tokens_per_second < one.decode_tokens_per_second  # ... and less per request
    # single stream: the client's speed (the decode is ~all of a 128-token request) matches what the sweep script
    # scores, accept length / SGLang's p20 step time, in simulated seconds
    assert one.step_time_p20_seconds is not None and four.step_time_p20_seconds is not None
    sweep_speed = one.accept_length / one.step_time_p20_seconds
    assert sweep_speed == pytest.approx(one.decode_tokens_per_second / TIME_SCALE, rel=0.25)
    assert four.step_time_p20_seconds > one.step_time_p20_seconds  # a batch of 4 steps slower


async def test_no_step_time_without_recording_and_failures_of_a_500_pod(plain_sim: str, http: SGLangHTTP) -> None:
    plan = BenchPlan(levels=(2,), max_output_tokens=64, seconds_per_level=1.0, warmup_seconds=0.3, repetitions=1)
    pods = [TrialPod("trial-0", plain_sim)]
    (healthy,) = await measure_trial(http, pods, MODEL, ROLES, plan)
    assert healthy.failed_requests == 0 and healthy.accept_length is not None
    assert healthy.step_time_p20_seconds is None  # SGLang records step times only with SGLANG_RECORD_STEP_TIME
    assert healthy.spread is None  # one repetition: no noise estimate

    httpx.post(plain_sim + "/sim/admin/faults", json={"http_500_rate": 1.0}, timeout=5).raise_for_status()
    (broken,) = await measure_trial(http, pods, MODEL, ROLES, plan)
    assert broken.requests is not None and broken.requests >= 2  # failed at once, retried after the pause
    assert broken.failed_requests == broken.requests
    assert broken.output_tokens_per_second == 0.0
    assert broken.decode_tokens_per_second is None and broken.inter_token_latency_p50_seconds is None
    assert broken.accept_length is None and broken.step_time_p20_seconds is None  # /metrics answers 500 too


async def test_an_unreachable_pod_is_measured_as_failures(http: SGLangHTTP) -> None:
    plan = BenchPlan(levels=(1,), max_output_tokens=16, seconds_per_level=0.6, warmup_seconds=0.0, repetitions=1)
    (lv,) = await measure_trial(http, [TrialPod("gone", f"http://127.0.0.1:{free_port()}")], MODEL, ROLES, plan)
    assert lv.requests and lv.failed_requests == lv.requests and lv.accept_length is None


# --- pure pieces --------------------------------------------------------------------------------------------


def _finished(start: float, ttft: float, end: float, tokens: int, error: str | None = None) -> Finished:
    res = loadgen.StreamResult(ttft_s=ttft, e2e_s=end - start, completion_tokens=tokens, error=error)
    return Finished(start, end, ttft, res)


def test_tokens_of_a_request_crossing_the_window_count_for_their_share() -> None:
    r = _finished(0.0, 1.0, 11.0, 101)  # first token at 1 s, 100 more evenly over 1..11 s
    assert tokens_within(r, 0.0, 20.0) == 101
    assert tokens_within(r, 6.0, 20.0) == pytest.approx(50.0)
    assert tokens_within(r, 0.0, 6.0) == pytest.approx(51.0)
    assert tokens_within(r, 0.0, 6.0) + tokens_within(r, 6.0, 20.0) == pytest.approx(101.0)
    assert tokens_within(_finished(0.0, 1.0, 11.0, 101, error="HTTP 500"), 0.0, 20.0) == 0.0


def test_percentile_follows_numpys_linear_rule() -> None:
    assert percentile([0.04, 0.01, 0.02, 0.03, 0.05], 0.2) == pytest.approx(0.018)  # numpy.percentile(..., 20)
    assert percentile([0.5], 0.2) == 0.5 and percentile([], 0.2) is None


def test_step_times_are_the_new_entries_of_the_steady_batch() -> None:
    before = step_time_lists({"internal_states": [{"step_time_dict": {"1": [0.01, 0.011], "4": [0.02]}}]})
    after = step_time_lists({"internal_states": [{"step_time_dict": {"1": [0.01, 0.011, 0.012],
                                                                     "4": [0.02, 0.021, 0.022, 0.023],
                                                                     "3": ["x", math.nan, True, -1, 0.03]}}]})
    assert after[0]["3"] == [0.03]  # junk from an untrusted pod is dropped
    assert new_step_times(before, after) == [0.021, 0.022, 0.023]  # batch 4 grew most
    restarted = step_time_lists({"internal_states": [{"step_time_dict": {"1": [0.5]}}]})
    assert new_step_times(after, restarted) == [0.5]  # shorter than before: the pod restarted
    legacy = step_time_lists({"step_time_dict": {"2": [0.1]}})  # old /get_server_info layout (top level)
    assert legacy == [{"2": [0.1]}]
    assert step_time_lists({"internal_states": [{"last_gen_throughput": 3.0}]}) == []
    assert step_time_lists({"internal_states": "junk", "step_time_dict": [1, 2]}) == []


def test_repetitions_combine_into_medians_and_a_spread() -> None:
    a = LevelFigures(concurrency=1, decode_tokens_per_second=100.0, output_tokens_per_second=90.0, requests=3,
                     failed_requests=0, accept_length=2.5)
    b = LevelFigures(concurrency=1, decode_tokens_per_second=110.0, output_tokens_per_second=99.0, requests=4,
                     failed_requests=1, accept_length=None)
    c = combine([a, b], default_score())
    assert c.decode_tokens_per_second == 105.0 and c.accept_length == 2.5
    assert (c.requests, c.failed_requests) == (7, 1)
    assert c.spread == pytest.approx(10.0 / 105.0)
    out = combine([a, b], default_score(Objective.model_validate({"objectiveMetricName": "outputTokensPerSecond",
                                                                  "concurrency": 1})))
    assert out.spread == pytest.approx(9.0 / 94.5)


def test_the_plan_of_a_workload() -> None:
    w = Workload.model_validate({"concurrency": [{"level": 1}, {"level": 16, "weight": 2}], "secondsPerLevel": 20,
                                 "maxOutputTokens": 256})
    plan = BenchPlan.from_workload(w, server_info_path="/get_server_info")
    assert plan.levels == (1, 16) and plan.prompts == DEFAULT_PROMPTS and plan.seconds_per_level == 20.0
    assert plan.max_output_tokens == 256 and plan.repetitions == 2 and plan.server_info_path == "/get_server_info"
    assert DEFAULT_PROMPTS[0] == loadgen.CODING_PROMPT and len(DEFAULT_PROMPTS) == 8
    assert BenchPlan.from_workload(Workload.model_validate({"prompts": ["hi"]})).prompts == ("hi",)
