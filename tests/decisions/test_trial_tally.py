"""A trial level's figures aggregated online (:class:`LevelTally`) match the per-request computation
(:func:`window_figures` over every request kept) on a fixed input."""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

import pytest

from sglang_operator.decisions.sampling.loghist import LogHistogram
from sglang_operator.decisions.sampling.roles import roles_for
from sglang_operator.decisions.tuning.tally import SPEED_STEP, LevelTally, SpeedHistogram
from sglang_operator.decisions.tuning.windows import Finished, window_figures
from sglang_operator.sglang.versions import parse_version

ROLES = roles_for(parse_version("0.5.10"))


@dataclass
class Stream:
    completion_tokens: int
    error: str | None
    decode_tok_s: float
    chunk_gaps: LogHistogram = field(default_factory=LogHistogram)


def requests(seed: int, count: int, span: float) -> list[Finished]:
    """``count`` requests over ``span`` seconds, some crossing window bounds, some failed, ordered by their end."""
    rng = random.Random(seed)
    out = []
    for _ in range(count):
        start = rng.uniform(-5.0, span)
        ttft = rng.uniform(0.05, 2.0)
        tokens = rng.randint(1, 600)
        speed = rng.uniform(20.0, 140.0)
        end = start + ttft + (tokens - 1) / speed
        error = "HTTP 500" if rng.random() < 0.08 else None
        gaps = LogHistogram()
        for _ in range(min(tokens - 1, 40)):
            gaps.add(rng.uniform(0.5, 1.5) / speed)
        decode = 0.0 if error or tokens < 2 else (tokens - 1) / (end - start - ttft)
        out.append(Finished(start, end, None if error and rng.random() < 0.5 else ttft,
                            Stream(0 if error else tokens, error, decode, gaps)))
    return sorted(out, key=lambda r: r.end)


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_online_figures_match_the_per_request_ones(seed: int) -> None:
    bounds = [10.0, 40.0, 70.0, 100.0]  # warm-up before 10 s, three windows of 30 s
    reqs = requests(seed, 3000, 105.0)
    tally = LevelTally(16, len(bounds) - 1)
    pending = list(bounds)
    for r in reqs:  # the bench's order: a bound is taken before every request that ends after it
        while pending and pending[0] <= r.end:
            tally.bound(pending.pop(0))
        tally.add(r)
    for b in pending:
        tally.bound(b)
    assert tally.requests == len(reqs)
    for k in range(len(bounds) - 1):
        old = window_figures(16, reqs, bounds[k], bounds[k + 1], None, ROLES, None)
        new = tally.figures(k, None, ROLES, None)
        assert new.requests == old.requests and new.failed_requests == old.failed_requests
        assert old.requests and old.failed_requests  # the input exercises both
        assert new.output_tokens_per_second == pytest.approx(old.output_tokens_per_second, rel=1e-9)
        for name in ("inter_token_latency_p50_seconds", "inter_token_latency_p95_seconds",
                     "time_to_first_token_p50_seconds", "time_to_first_token_p95_seconds"):
            assert getattr(new, name) == getattr(old, name), name  # the same histograms, merged in another order
        assert old.decode_tokens_per_second is not None and new.decode_tokens_per_second is not None
        assert new.decode_tokens_per_second == pytest.approx(old.decode_tokens_per_second, rel=SPEED_STEP / 2)
        assert new.concurrency == old.concurrency == 16


def test_requests_outside_the_windows_count_only_their_tokens_inside() -> None:
    early = Finished(0.0, 8.0, 2.0, Stream(61, None, 10.0))  # ended in the warm-up, before the first bound
    tally = LevelTally(1, 1)
    tally.add(early)
    assert tally.windows[0] == LevelTally(1, 1).windows[0]  # nothing of it counts
    warm = Finished(0.0, 12.0, 2.0, Stream(101, None, 10.0))  # its tokens at 2 s, then 10/s up to 12 s
    tally.bound(10.0)
    tally.add(warm)
    tally.bound(20.0)
    late = Finished(15.0, 25.0, 1.0, Stream(91, None, 10.0))  # ends after the last window: its share counts
    tally.add(late)
    fig = tally.figures(0, None, ROLES, None)
    assert fig.requests == 1  # only the one that ended inside
    assert fig.output_tokens_per_second == pytest.approx((20 + 1 + 40) / 10)  # 10..12 s of warm; late's first, 16..20 s


def test_the_tally_is_bounded_whatever_the_number_of_requests() -> None:
    tally = LevelTally(256, 2)
    tally.bound(0.0)
    rng = random.Random(7)
    for i in range(50_000):
        end = i * 0.001
        tally.add(Finished(end - 1.0, end, 0.1, Stream(100, None, rng.uniform(1.0, 1e4))))
    w = tally.windows[0]
    assert w.requests == 50_000
    assert len(w.decode.counts) <= math.log(1e4) / math.log1p(SPEED_STEP) + 2  # buckets, not requests


def test_the_speed_histogram_median_is_statistics_median_within_half_a_bucket() -> None:
    rng = random.Random(3)
    for n in (1, 2, 3, 10, 101, 1000):
        values = [rng.lognormvariate(4.0, 0.6) for _ in range(n)]
        h = SpeedHistogram()
        for v in values:
            h.add(v)
        exact = sorted(values)
        mid = exact[n // 2] if n % 2 else (exact[n // 2 - 1] + exact[n // 2]) / 2
        assert h.median() == pytest.approx(mid, rel=SPEED_STEP / 2)
    assert SpeedHistogram().median() is None
    h = SpeedHistogram()
    for bad in (0.0, -1.0, math.inf, math.nan):
        h.add(bad)
    assert h.count == 0
