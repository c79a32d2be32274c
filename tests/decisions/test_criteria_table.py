"""The rollback criteria are a table (``decisions/criteria.py``, ``CRITERIA``): a criterion added as one row, and
nothing else, is judged by the rollback and by a canary's side-by-side verdict, named in the condition, recorded in
the ledger and listed by ``kubectl sglang history`` (issue 39, item 1).

The fake row: the prefix cache hit rate (``Figures.cache_hit_rate``, higher is better), with its policy fields in a
policy of the test's own (a real criterion adds them to ``spec.rollback``, ``api/rollback.py``)."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest

from sglang_operator.api.analysis import SampleFigures, figure
from sglang_operator.api.rollback import ProbePolicy, RollbackPolicy
from sglang_operator.api.status import SGLangServerStatus
from sglang_operator.decisions import criteria, judging
from sglang_operator.decisions.actions import Apply, RecordVerdict
from sglang_operator.decisions.criteria import Criterion
from sglang_operator.decisions.sampling.model import Figures, Sample, SampleKind
from sglang_operator.plugin.view import history_rows, history_table
from tests.decisions.rollback_driver import BAD, GOOD, GOOD_LEN, GOOD_TPS, Run
from tests.decisions.test_canary_decision import STABLE_REV, World

HIT_RATE = Criterion(key="cacheHitRate", read=lambda f: f.cache_hit_rate, unit="", digits=2, column="HIT RATE",
                     series="sglang_operator_server_cache_hit_rate", label="cache hit rate",
                     limit="minCacheHitRate", relative="minRelativeCacheHitRate")


class HitPolicy(RollbackPolicy):
    """The fast policy of the e2e tests with the fake row's two fields."""

    min_cache_hit_rate: float | None = None
    min_relative_cache_hit_rate: float | None = 0.8


POLICY = HitPolicy(warmup_seconds=10, interval_seconds=5, min_samples=3, verify_seconds=15,
                   probe=ProbePolicy(timeout_seconds=4))


@pytest.fixture(autouse=True)
def table(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The fake row appended to the table: the one change."""
    monkeypatch.setattr(criteria, "CRITERIA", (*criteria.CRITERIA, HIT_RATE))
    yield


def sample(run: Run, hit: float) -> Sample:
    """The interval that ends at now + intervalSeconds: known-good speed and accept length, cache hit rate ``hit``."""
    s = run.sample()
    return dataclasses.replace(s, figures=Figures(decode_tokens_per_second=GOOD_TPS, accept_length=GOOD_LEN,
                                                  cache_hit_rate=hit))


def test_the_table_holds_tok_s_accept_length_and_ttft_off_by_default() -> None:
    keys = [c.key for c in criteria.CRITERIA]
    assert keys[:3] == ["tokensPerSecond", "acceptLength", "timeToFirstTokenSeconds"]
    assert [c.key for c in criteria.active(RollbackPolicy())] == ["tokensPerSecond", "acceptLength"]
    on = RollbackPolicy(max_relative_time_to_first_token=1.5)
    assert "timeToFirstTokenSeconds" in [c.key for c in criteria.active(on)]


def test_ttft_once_set_fails_a_slower_first_token_against_the_baseline() -> None:
    policy = RollbackPolicy(max_relative_time_to_first_token=1.5, max_time_to_first_token_seconds=2.0)
    s = Sample(SampleKind.MEASURED, BAD, dt.datetime(2026, 5, 1, tzinfo=dt.UTC), dt.datetime(2026, 5, 1, tzinfo=dt.UTC),
               Figures(decode_tokens_per_second=GOOD_TPS, accept_length=GOOD_LEN, ttft_p50_seconds=0.9))
    fig = criteria.measured(s, policy)
    assert fig is not None and figure(fig, "timeToFirstTokenSeconds") == 0.9
    assert criteria.measured(s) is not None and not criteria.measured(s).extra_figures  # type: ignore[union-attr]
    base = criteria.baseline_of(GOOD, SampleFigures(tokens_per_second=GOOD_TPS, accept_length=GOOD_LEN,
                                                    extra_figures={"timeToFirstTokenSeconds": 0.4}), 5, "probe")
    result = criteria.check(fig, policy, base, True)
    assert not result.passed and result.reason == f"TTFT 0.900 s > 1.5 × 0.400 s of {GOOD}", result
    fast = fig.model_copy(update={"extra_figures": {"timeToFirstTokenSeconds": 0.5}})
    assert criteria.check(fast, policy, base, True).reason == (
        f"51.6 tok/s, accept length 2.73 ≥ 0.85 × 51.6 tok/s, 0.9 × 2.73, TTFT 0.500 s ≤ 1.5 × 0.400 s of {GOOD}")
    slow = fig.model_copy(update={"extra_figures": {"timeToFirstTokenSeconds": 2.5}})
    assert "TTFT 2.500 s > maxTimeToFirstTokenSeconds 2" in criteria.check(slow, policy, None, False).reason


def test_a_fake_row_is_judged_named_in_the_condition_recorded_and_listed_by_history() -> None:
    run = Run(policy=POLICY)
    run.revision = run.spec = GOOD
    run.warm_up()
    while run.phase != "Stable":
        run.tick(POLICY.interval_seconds, sample(run, 0.60))
    assert run.state.baseline is not None and figure(run.state.baseline, "cacheHitRate") == pytest.approx(0.60)
    run.apply_spec(BAD)
    run.warm_up()
    for _ in range(POLICY.failure_threshold - 1):
        run.tick(POLICY.interval_seconds, sample(run, 0.20))
    assert run.phase == "Verifying"

    # the last failing interval, judged by the tick of the server's loop (judging.judge): status in, status out
    ledger = [{"revision": GOOD, "verdict": "Promoted", "tokensPerSecond": GOOD_TPS, "acceptLength": GOOD_LEN},
              {"revision": BAD, "verdict": "Verifying"}]
    status = SGLangServerStatus.model_validate({**run.state.status_patch(), "revision": BAD, "revisions": ledger})
    last = sample(run, 0.20)
    run.now += dt.timedelta(seconds=POLICY.interval_seconds)
    out = judging.judge(status, last, POLICY, run.now, run.observation(), [], 1)

    reason = f"{BAD}: cache hit rate 0.20 < 0.8 × 0.60 of {GOOD}"
    assert out.state.analysis is not None and out.state.analysis.phase == "RollingBack"
    assert [a.revision for a in out.actions if isinstance(a, Apply)] == [GOOD]
    [degraded] = [c for c in out.conditions if c["type"] == "Degraded"]
    assert (degraded["status"], degraded["reason"], degraded["message"]) == ("True", "RolledBack", reason)
    record = next(r for r in out.status["revisions"] if r["revision"] == BAD)
    assert record["verdict"] == "Rejected" and record["reason"] == reason
    assert record["extraFigures"] == {"cacheHitRate": pytest.approx(0.20)}

    stored = SGLangServerStatus.model_validate({**status.dump(), **out.status})
    rows = history_rows(stored, [], run.now)
    assert rows[1].as_json()["cacheHitRate"] == pytest.approx(0.20)
    header, good, bad = history_table(rows, 200)[:3]
    assert header.split()[3:6] == ["TOK/S", "ACCEPT", "LEN"] and "HIT RATE" in header
    at = header.index("HIT RATE")
    assert bad[at:].startswith("0.20") and good[at:].startswith("—"), (header, good, bad)


@dataclass
class HitWorld(World):
    """The canary decision's world, both revisions as fast, the canary's prefix cache hit rate lower."""

    hits: dict[str, float] = field(default_factory=lambda: {STABLE_REV: 0.6, BAD: 0.2})

    def sample(self, revision: str, start: dt.datetime) -> Sample | None:
        s = super().sample(revision, start)
        if s is None:
            return None
        return dataclasses.replace(s, figures=dataclasses.replace(s.figures, cache_hit_rate=self.hits[revision]))


def test_a_fake_row_fails_a_canary_side_by_side() -> None:
    w = HitWorld(policy=POLICY, speed={STABLE_REV: GOOD_TPS, BAD: GOOD_TPS},
                 length={STABLE_REV: GOOD_LEN, BAD: GOOD_LEN})
    w.apply_spec(BAD)
    w.run_until(lambda: w.state.canary is None and w.state.rejection(BAD) is not None)
    rejection = w.state.rejection(BAD)
    assert rejection is not None and "cache hit rate 0.20 < 0.8 × 0.60" in rejection.reason, rejection
    [verdict] = [v for v in w.verdicts(BAD) if isinstance(v, RecordVerdict) and v.verdict.value == "Rejected"]
    assert verdict.extra_figures == {"cacheHitRate": pytest.approx(0.2)}
