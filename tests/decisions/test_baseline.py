"""The baseline's rule (decisions/baseline.py): a passing slowdown cannot lower it.

The drift scenario: every pod 25 % slower (both revisions) while a same-speed canary is judged side by side; it is
promoted (right) with the stable's baseline × the same-interval ratio, not the slowed median; the drift passes; a
revision at two thirds of the real speed applied without a canary is then rolled back. With the slowed median as the
baseline (0.75 × 51.6 = 38.7 tok/s) it would have passed: 34.4 ≥ 0.85 × 38.7 = 32.9. The stable's own samples raise
a baseline measured during a slowdown, never lower one.
"""

from __future__ import annotations

import datetime as dt

import pytest

from sglang_operator.api.analysis import (
    Analysis,
    AnalysisPhase,
    Baseline,
    BaselineSource,
    SampleFigures,
    StableRegression,
)
from sglang_operator.api.rollback import RollbackPolicy
from sglang_operator.api.spec import CanaryStep, CanaryStrategy
from sglang_operator.api.status import SGLangServerStatus
from sglang_operator.decisions import baseline, judging
from sglang_operator.decisions.actions import RecordVerdict
from sglang_operator.decisions.rollback_state import Observation
from sglang_operator.decisions.sampling.model import Figures, PodView, Sample, SampleKind, Signal
from tests.decisions.rollback_driver import FAST, GOOD, GOOD_LEN, GOOD_TPS, SETUP, T0
from tests.decisions.test_canary_decision import STABLE_REV, World

SLOW = "3333333333"
"""A revision at two thirds of the real speed."""


def drift_world(roundtrip: bool = False) -> World:
    w = World(strategy=CanaryStrategy(steps=[CanaryStep(replicas=1)]), roundtrip=roundtrip)
    w.state.baseline = baseline.measured(STABLE_REV, [SampleFigures(tokens_per_second=GOOD_TPS,
                                                                     accept_length=GOOD_LEN)] * 5,
                                         "probe", SETUP, w.now)
    w.speed[SLOW], w.length[SLOW] = GOOD_TPS * 2 / 3, GOOD_LEN
    return w


@pytest.mark.parametrize("roundtrip", [False, True])
def test_a_canary_promoted_under_drift_keeps_the_real_speed_and_a_later_slow_revision_is_rolled_back(
        roundtrip: bool) -> None:
    w = drift_world(roundtrip)
    w.drift = 0.75  # every pod (both revisions) 25 % slower for the whole canary
    w.apply_spec(GOOD)
    w.run_until(lambda: w.state.stable_revision == GOOD)
    base = w.state.baseline
    assert base is not None and base.revision == GOOD
    assert base.source is BaselineSource.CANARY_RATIO and base.scaled_from == STABLE_REV
    assert base.ratio == pytest.approx(1.0)
    assert base.tokens_per_second == pytest.approx(GOOD_TPS)  # not the slowed 38.7
    assert base.accept_length == pytest.approx(GOOD_LEN)
    [promoted] = [v for v in w.verdicts(GOOD) if v.verdict.value == "Promoted"]
    assert promoted.tokens_per_second == pytest.approx(0.75 * GOOD_TPS)  # what was measured, in the drift
    assert "canaryRatio: 51.6 tok/s of 1111111111 × 1.00" in promoted.reason, promoted.reason
    w.drift = 1.0  # the slowdown passes
    for _ in range(5):
        w.tick()
    assert w.state.baseline == base  # the stable's own samples do not move it (within the refresh margin)
    w.strategy = None  # applied without a canary: verified alone against the baseline
    w.apply_spec(SLOW)
    w.run_until(lambda: w.state.rejection(SLOW) is not None)
    rejection = w.state.rejection(SLOW)
    assert rejection is not None and "34.4 tok/s" in rejection.reason and "0.85 × 51.6 tok/s" in rejection.reason
    w.run_until(lambda: w.revision == GOOD)
    assert w.state.stable_revision == GOOD


def test_with_the_slowed_median_as_baseline_the_slow_revision_would_pass() -> None:
    """The counterfactual the rule removes: the drifted median as the baseline lets two thirds of the speed pass."""
    w = drift_world()
    w.state.baseline = None  # no stable baseline to scale: the canary's own (slowed) median
    w.drift = 0.75
    w.apply_spec(GOOD)
    w.run_until(lambda: w.state.stable_revision == GOOD)
    assert w.state.baseline is not None and w.state.baseline.source is BaselineSource.MEASURED
    assert w.state.baseline.tokens_per_second == pytest.approx(0.75 * GOOD_TPS)
    w.drift = 1.0
    w.strategy = None
    w.apply_spec(SLOW)
    w.run_until(lambda: w.state.stable_revision == SLOW, limit=60)
    assert w.state.rejection(SLOW) is None


def run_stable(policy: RollbackPolicy, base: Baseline, speeds: list[float]) -> tuple[Analysis, list[Baseline]]:
    """The stable revision GOOD, Stable, sampled once per interval at ``speeds``: its analysis and every baseline
    refresh returned."""
    a = Analysis(revision=GOOD, phase=AnalysisPhase.STABLE, since=T0, progress_started_at=T0)
    out: list[Baseline] = []
    now = T0
    for speed in speeds:
        start, now = now, now + dt.timedelta(seconds=policy.interval_seconds)
        fig = SampleFigures(tokens_per_second=speed, accept_length=GOOD_LEN)
        if speed < policy.min_relative_tokens_per_second * base.tokens_per_second:
            baseline.interrupt(a)  # what count_failure does
            continue
        new = baseline.refresh(base, a, GOOD, policy, fig, start, SETUP, now)
        if new is not None:
            base = new
            out.append(new)
    return a, out


SLOWED = Baseline(revision=GOOD, tokens_per_second=0.75 * GOOD_TPS, accept_length=GOOD_LEN, samples=5,
                  signal="probe", setup=SETUP, at=T0)
"""A baseline measured during a slowdown (a first revision promoted while every pod ran 25 % slower)."""


def test_a_baseline_measured_in_a_slowdown_rises_back_from_the_stables_own_samples() -> None:
    need = max(FAST.min_samples, baseline.REFRESH_MIN_SAMPLES)
    _, early = run_stable(FAST, SLOWED, [GOOD_TPS] * (need - 1))
    assert early == []  # not before max(minSamples, 10) passing samples over verifySeconds
    _, raised = run_stable(FAST, SLOWED, [GOOD_TPS] * need)
    assert len(raised) == 1 and raised[0].source is BaselineSource.REFRESHED
    assert raised[0].tokens_per_second == pytest.approx(GOOD_TPS) and raised[0].samples == need
    assert raised[0].accept_length == GOOD_LEN
    # a failing interval in the run starts it over
    _, interrupted = run_stable(FAST, SLOWED, [GOOD_TPS] * (need - 1) + [0.5 * SLOWED.tokens_per_second]
                                + [GOOD_TPS] * (need - 1))
    assert interrupted == []


def test_a_transient_slowdown_never_lowers_a_baseline_and_small_gains_do_not_move_it() -> None:
    real = SLOWED.model_copy(update={"tokens_per_second": GOOD_TPS})
    _, lowered = run_stable(FAST, real, [0.9 * GOOD_TPS] * 40 + [0.75 * GOOD_TPS] * 40)
    assert lowered == []
    _, small = run_stable(FAST, real, [1.08 * GOOD_TPS] * 40)  # within REFRESH_MARGIN
    assert small == []


def test_no_refresh_on_the_traffic_signal_or_while_regressed_or_for_another_setup() -> None:
    traffic = FAST.model_copy(update={"signal": Signal.TRAFFIC})
    _, out = run_stable(traffic, SLOWED.model_copy(update={"signal": "traffic"}), [GOOD_TPS] * 40)
    assert out == []
    other = SLOWED.model_copy(update={"setup": SETUP.model_copy(update={"gpu_product": "NVIDIA-H100"})})
    _, out = run_stable(FAST, other, [GOOD_TPS] * 40)
    assert out == []
    regressed = Analysis(revision=GOOD, phase=AnalysisPhase.STABLE, since=T0, progress_started_at=T0,
                         stable_regression=StableRegression(message="m", since=T0, updated_at=T0))
    fig = SampleFigures(tokens_per_second=GOOD_TPS)
    for i in range(40):
        at = T0 + dt.timedelta(seconds=5 * i)
        assert baseline.refresh(SLOWED, regressed, GOOD, FAST, fig, at, SETUP, at) is None
    assert regressed.refresh_figures == []


def test_a_stable_revision_refreshes_through_step_with_an_event_and_the_ledger_says_refreshed() -> None:
    """Through :func:`judging.judge` (the observer's call): the event, ``status.baseline`` and the ledger record."""
    status = {"revision": GOOD, "stableRevision": GOOD,
              "baseline": SLOWED.model_dump(by_alias=True, exclude_none=True, mode="json"),
              "revisions": [{"revision": GOOD, "verdict": "Promoted", "baselineSource": "measured"}],
              "analysis": {"revision": GOOD, "phase": "Stable", "since": T0.isoformat(),
                           "progressStartedAt": T0.isoformat(), "warmedUpAt": T0.isoformat()}}
    pods = (PodView("p0", True, 0),)
    observed = Observation(revision=GOOD, desired_pods=1, setup=SETUP, pods=pods, spec_revision=GOOD)
    now, events = T0, []
    for _ in range(baseline.REFRESH_MIN_SAMPLES):
        start, now = now, now + dt.timedelta(seconds=FAST.interval_seconds)
        sample = Sample(kind=SampleKind.MEASURED, revision=GOOD, start=start, end=now,
                        figures=Figures(decode_tokens_per_second=GOOD_TPS, accept_length=GOOD_LEN), pods=("p0",),
                        revision_pods=pods)
        out = judging.judge(status, sample, FAST, now, observed, [], 1)
        status = {**status, **{k: v for k, v in out.status.items() if v is not None}}
        events += [a for a in out.actions if not isinstance(a, RecordVerdict) and a.reason == "BaselineRefreshed"]
    typed = SGLangServerStatus.model_validate(status)
    assert typed.baseline is not None and typed.baseline.source is BaselineSource.REFRESHED
    assert typed.baseline.tokens_per_second == pytest.approx(GOOD_TPS)
    [record] = typed.revisions
    assert record.baseline_source == "refreshed" and record.baseline_tokens_per_second == pytest.approx(GOOD_TPS)
    assert len(events) == 1 and "51.6 tok/s (refreshed, median of 10 passing samples)" in events[0].message


def test_from_canary_falls_back_to_the_measured_median() -> None:
    figs = [SampleFigures(tokens_per_second=40.0, accept_length=2.0)] * 3
    other = SLOWED.model_copy(update={"revision": "0000000000"})
    assert baseline.from_canary(other, GOOD, "x", figs, [1.2], "probe", SETUP, T0).source is BaselineSource.MEASURED
    assert baseline.from_canary(SLOWED, GOOD, "x", figs, [], "probe", SETUP, T0).source is BaselineSource.MEASURED
    assert baseline.from_canary(SLOWED, GOOD, "x", figs, [1.2], "traffic", SETUP, T0).source \
        is BaselineSource.MEASURED
    scaled = baseline.from_canary(SLOWED, GOOD, "x", figs, [1.1, 1.2, 1.3], "probe", SETUP, T0)
    assert scaled is not None and scaled.tokens_per_second == pytest.approx(1.2 * SLOWED.tokens_per_second)
    assert baseline.from_canary(SLOWED, GOOD, "x", [], [1.2], "probe", SETUP, T0) is None


def test_a_measured_baseline_carries_the_median_accept_rate_and_a_canary_its_own() -> None:
    """status.baseline shows the accept rate beside the accept length: the medians of the promoted revision's own
    samples (a sample whose pods had not written SGLang's gauges has none and does not count), a canary's own."""
    from sglang_operator.api.analysis import SampleFigures
    from sglang_operator.decisions import baseline as rule

    figures = [SampleFigures(tokens_per_second=50.0, accept_length=2.7, accept_rate=0.68),
               SampleFigures(tokens_per_second=52.0),
               SampleFigures(tokens_per_second=51.0, accept_length=2.8, accept_rate=0.70)]
    base = rule.measured("r1", figures, "probe", None, T0)
    assert base is not None and (base.accept_length, base.accept_rate) == (2.75, 0.69)
    stable = base.model_copy(update={"accept_rate": 0.5})
    promoted = rule.from_canary(stable, "r1", "r2", figures, [1.02], "probe", None, T0)
    assert promoted is not None and promoted.source.value == "canaryRatio" and promoted.accept_rate == 0.69
