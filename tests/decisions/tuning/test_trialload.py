"""The bound on a trial's request rate and the rules of an invalid measurement (``decisions/tuning/trialload.py``),
on a fake clock: the pacer never lets more than its depth + rate × span start in any span, whatever the callers do;
answers far shorter than ``maxOutputTokens`` fail a level by their median, an honest mix of early stops does not;
streams the cap kept idle fail it past the limit."""

from __future__ import annotations

import random
import statistics

import pytest

from sglang_operator.decisions.tuning.tally import LevelTally
from sglang_operator.decisions.tuning.trialload import (
    HELD_BACK_LIMIT,
    SHORT_ANSWER_FRACTION,
    AnswerLengths,
    RequestPacer,
    held_back,
    short_answers,
)
from sglang_operator.decisions.tuning.windows import Finished
from sglang_operator.io.loadgen import StreamResult


def _starts(pacer: RequestPacer, asks: list[float]) -> list[float]:
    """When each request asked at ``asks`` (in order) starts: asked + the pacer's wait."""
    return [t + pacer.reserve(t) for t in asks]


def _most_in_any_span(starts: list[float], rate: float, depth: float) -> float:
    """The largest excess of requests started in a span over depth + rate × span (≤ 0: the cap held)."""
    s = sorted(starts)
    return max((j - i + 1) - (depth + rate * (s[j] - s[i])) for i in range(len(s)) for j in range(i, len(s)))


def test_a_pod_answering_at_once_is_sent_the_rate_not_more() -> None:
    # 16 workers asking again the moment their answer came (at once): each asks when its last request started
    pacer = RequestPacer(50.0)
    assert pacer.depth == 50.0
    next_ask = [0.0] * 16
    starts: list[float] = []
    while len(starts) < 2000:
        w = min(range(16), key=lambda i: next_ask[i])
        start = next_ask[w] + pacer.reserve(next_ask[w])
        starts.append(start)
        next_ask[w] = start
    assert _most_in_any_span(starts[:400], 50.0, pacer.depth) <= 1e-9
    span = max(starts) - min(starts)
    assert len(starts) <= pacer.depth + 50.0 * span + 1e-9
    assert len(starts) >= 50.0 * span  # and the rate is given: no slower than the cap once the burst is spent


def test_random_asks_never_exceed_the_bucket_and_slow_asks_are_never_delayed() -> None:
    rng = random.Random(7)
    pacer = RequestPacer(20.0, burst_seconds=0.5)
    t, asks = 0.0, []
    for _ in range(600):
        t += rng.expovariate(40.0)  # twice the cap on average
        asks.append(t)
    starts = _starts(pacer, asks)
    assert all(s >= a for s, a in zip(starts, asks, strict=True))
    assert _most_in_any_span(starts, 20.0, pacer.depth) <= 1e-9

    slow = RequestPacer(20.0)
    assert all(slow.reserve(0.1 * i) == 0.0 for i in range(200))  # 10 a second under a cap of 20: never waits


def test_the_bucket_fills_again_after_a_pause_up_to_its_depth() -> None:
    pacer = RequestPacer(10.0, burst_seconds=1.0)
    assert [pacer.reserve(0.0) for _ in range(10)] == [0.0] * 10
    assert pacer.reserve(0.0) == pytest.approx(0.1)
    assert [pacer.reserve(100.0) for _ in range(10)] == [0.0] * 10  # full again, never beyond its depth
    assert pacer.reserve(100.0) > 0
    assert RequestPacer(0.2).depth == 1.0  # at least one request at once
    with pytest.raises(ValueError):
        RequestPacer(0.0)


def test_answer_lengths_median_is_statistics_median_within_the_clamp() -> None:
    rng = random.Random(3)
    for n in (1, 2, 7, 50):
        values = [rng.randint(0, 600) for _ in range(n)]
        lengths = AnswerLengths(512)
        for v in values:
            lengths.add(v)
        assert lengths.median() == statistics.median(min(v, 512) for v in values)
    assert AnswerLengths(512).median() is None
    big = AnswerLengths(64)
    big.add(10**9)
    big.add(-5)
    assert sorted(big.counts) == [0, 64]  # a pod's claim is clamped: bounded memory


def test_short_answers_fail_by_their_median_with_the_figures_in_the_reason() -> None:
    reason = short_answers(16, 1.0, 512)
    assert reason is not None
    assert reason.startswith("answers of 1 tokens median at concurrency 16, maxOutputTokens 512: not a measurement "
                             "of decoding")
    assert short_answers(16, SHORT_ANSWER_FRACTION * 512, 512) is None  # at the fraction: measured
    assert short_answers(16, 512, 512) is None
    assert short_answers(16, None, 512) is None  # no successful answer: the other rules' case


def _tally_of(lengths: list[int], max_tokens: int = 512) -> LevelTally:
    tally = LevelTally(4, 1, max_tokens)
    tally.bound(0.0)
    for i, n in enumerate(lengths):
        end = 1.0 + i * 0.01
        tally.add(Finished(end - 0.5, end, 0.05, StreamResult(ttft_s=0.05, e2e_s=0.5, completion_tokens=n)))
    tally.bound(100.0)
    return tally


def test_an_honest_mix_of_early_stops_and_lengths_is_a_measurement() -> None:
    # greedy decoding stops some answers early at EOS (finish_reason stop); most reach max_tokens (length)
    honest = _tally_of([512] * 60 + [37, 120, 5, 300] * 10)
    assert short_answers(4, honest.answers.median(), 512) is None
    # every answer ended by length: measured
    assert short_answers(4, _tally_of([512] * 20).answers.median(), 512) is None
    # a pod answering one token at once: not a measurement
    fast = _tally_of([1] * 100 + [512] * 3)
    reason = short_answers(4, fast.answers.median(), 512)
    assert reason is not None and "answers of 1 tokens median" in reason


def test_failed_requests_are_not_answers() -> None:
    tally = LevelTally(1, 1, 64)
    tally.bound(0.0)
    tally.add(Finished(0.0, 1.0, None, StreamResult(error="HTTP 500")))
    tally.add(Finished(0.0, 1.0, 0.1, StreamResult(ttft_s=0.1, e2e_s=1.0, completion_tokens=64)))
    assert tally.answers.count == 1 and tally.answers.median() == 64


def test_held_back_past_the_limit_of_the_stream_seconds() -> None:
    assert held_back(8, HELD_BACK_LIMIT * 8 * 30.0, 30.0, 200.0) is None  # at the limit
    reason = held_back(8, 0.5 * 8 * 30.0, 30.0, 200.0)
    assert reason is not None
    assert reason.startswith("the operator's cap of 200 requests per second per trial (sglang-operator run "
                             "--trial-request-rate) kept concurrency 8's streams idle 50 % of the measured time")
    assert held_back(8, 1.0, 0.0, 200.0) is None
