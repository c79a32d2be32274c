"""The noise model of issue 8's "Done when": seeded traces through ``step()``.

Each trace: the known-good revision (the published case: 51.6 tok/s decode, accept length 2.725) is applied,
verified and promoted on noisy samples; then a candidate revision gets 60 samples, each figure multiplied by its
own factor drawn from a normal distribution (σ = 5 %), plus one sample, at a random position, at 0.35× (a probe
that met a hiccup). A healthy candidate has the known-good figures; a regressed one 0.7× the decode speed and
0.65× the acceptance length (≈ 36 tok/s / 1.77, the published regressed revision). 100 healthy traces give 0
rollbacks and 100 regressed ones 100, with the default policy and with the fast policy of the e2e tests.
"""

from __future__ import annotations

import datetime as dt
import random
from dataclasses import dataclass

import pytest
from rollback_driver import BAD, DEFAULT, FAST, GOOD, GOOD_LEN, GOOD_TPS, Run

from sglang_operator.api.rollback import RollbackPolicy

TRACES = 100
SAMPLES = 60
SIGMA = 0.05
OUTLIER = 0.35


@dataclass
class Outcome:
    rolled_back: bool
    seconds_to_rollback: float | None
    """From the candidate's pods all Ready to the Apply of the stable revision, seconds."""
    promoted: bool
    stable_regressed: bool


def noisy(rng: random.Random, tps: float, accept: float) -> tuple[float, float]:
    return tps * rng.gauss(1.0, SIGMA), accept * rng.gauss(1.0, SIGMA)


def trace(seed: int, policy: RollbackPolicy, tps_factor: float, accept_factor: float) -> Outcome:
    rng = random.Random(seed)
    run = Run(policy=policy)
    run.revision = run.spec = GOOD
    run.warm_up()
    while run.phase != "Stable":
        tps, accept = noisy(rng, GOOD_TPS, GOOD_LEN)
        run.interval(tps=tps, accept=accept)
    run.apply_spec(BAD)
    ready_at = run.now
    run.tick(policy.warmup_seconds)
    outlier = rng.randrange(SAMPLES)
    for i in range(SAMPLES):
        tps, accept = noisy(rng, GOOD_TPS * tps_factor, GOOD_LEN * accept_factor)
        if i == outlier:
            tps, accept = tps * OUTLIER, accept * OUTLIER
        run.interval(tps=tps, accept=accept)
        if run.applies:
            break
    analysis = run.state.analysis
    return Outcome(
        rolled_back=bool(run.applies),
        seconds_to_rollback=(run.now - ready_at).total_seconds() if run.applies else None,
        promoted=run.state.stable_revision == BAD,
        stable_regressed=bool(analysis and analysis.revision == BAD and analysis.stable_regression),
    )


@pytest.mark.parametrize("policy", [DEFAULT, FAST], ids=["default", "fast"])
def test_healthy_traces_are_never_rolled_back(policy: RollbackPolicy) -> None:
    outcomes = [trace(seed, policy, 1.0, 1.0) for seed in range(TRACES)]
    assert sum(o.rolled_back for o in outcomes) == 0
    assert all(o.promoted for o in outcomes)


@pytest.mark.parametrize("policy", [DEFAULT, FAST], ids=["default", "fast"])
def test_regressed_traces_are_always_rolled_back_at_the_earliest_moment(policy: RollbackPolicy) -> None:
    outcomes = [trace(1000 + seed, policy, 0.7, 0.65) for seed in range(TRACES)]
    assert sum(o.rolled_back for o in outcomes) == TRACES
    earliest = policy.warmup_seconds + policy.failure_threshold * policy.interval_seconds
    assert {o.seconds_to_rollback for o in outcomes} == {float(earliest)}
    assert not any(o.promoted for o in outcomes)


def test_an_outlier_in_the_baseline_window_does_not_move_the_baseline() -> None:
    run = Run(policy=DEFAULT)
    run.warm_up()
    rng = random.Random(7)
    i = 0
    while run.phase != "Stable":
        tps, accept = noisy(rng, GOOD_TPS, GOOD_LEN)
        factor = OUTLIER if i == 3 else 1.0
        run.interval(tps=tps * factor, accept=accept * factor)
        i += 1
    assert run.state.baseline is not None
    assert run.state.baseline.tokens_per_second == pytest.approx(GOOD_TPS, rel=0.03)
    assert run.state.baseline.accept_length == pytest.approx(GOOD_LEN, rel=0.03)
    assert run.now - run.state.baseline.at < dt.timedelta(seconds=1)  # type: ignore[operator]
