"""The tuning's budget and noise rules through the controller's pure decisions: Katib's trial count (every trial,
the control trial included), a small space finished early (repeats only while the noise rule asks), pruning after
the first level, a window without a finished request (no data, not a failure), and TPE replayed after a restart."""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

import pytest
import yaml

from e2e.policies import BAD, LOCAL
from sglang_operator.api.server import parse
from sglang_operator.api.tuning_spec import SGLangTuningSpec
from sglang_operator.api.tuning_status import LevelFigures, SGLangTuningStatus, Trial, TrialSettings
from sglang_operator.decisions.tuning import Point, SearchSettings, SearchSpace, TrialResult, enumerate_space, suggest
from sglang_operator.decisions.tuning import trials as plan
from sglang_operator.decisions.tuning.search import MAX_MEASUREMENTS, Algorithm
from tests.decisions.tuning.test_tuning_search import landscape, trial

SERVER: dict[str, Any] = yaml.safe_load((LOCAL / BAD).read_text())
SERVER["metadata"]["namespace"] = "ns"
SPEED = {None: 21.0, 1: 36.0, 2: 45.0, 3: 52.0, 4: 50.0, 5: 47.0}
"""Decode tok/s of the published case's chains (numSteps → tok/s; None: the control trial)."""


def tuning(max_trials: int, **extra: Any) -> SGLangTuningSpec:
    return SGLangTuningSpec.model_validate({"serverRef": {"name": "qwen36-27b"},
                                                "parameters": {"numSteps": {"min": 1, "max": 5}},
                                                "budget": {"maxTrialCount": max_trials}, **extra})


def level(value: float, concurrency: int = 1, requests: int = 10) -> LevelFigures:
    return LevelFigures(concurrency=concurrency, decode_tokens_per_second=value, output_tokens_per_second=value,
                            requests=requests, failed_requests=0)


def run(spec: SGLangTuningSpec, f: Callable[[Point | None, int], float]) -> tuple[list[Trial], str]:
    """The tuning to its end through :func:`plan.next_step`, trial k of a point measured as ``f(point, k)``."""
    valid, _ = plan.points(spec.parameters, parse(SERVER).spec)
    trials: list[Trial] = []
    seen: dict[Point | None, int] = {}
    for n in range(200):
        step = plan.next_step(spec, SGLangTuningStatus(trials=list(trials)), valid, 0)
        if step.kind == "finish":
            return trials, step.reason
        assert step.settings is not None
        p = plan.point_of(step.settings)
        k = seen.get(p, 0)
        seen[p] = k + 1
        v = f(p, k)
        trials.append(Trial(name=plan.trial_name("t", n), settings=step.settings, verdict="Completed",
                                levels=[level(v)], objective=v))
    raise AssertionError("the tuning did not end")


def speed(p: Point | None) -> float:
    return SPEED[None if p is None else p.num_steps]


def test_max_trial_count_counts_every_trial_and_says_the_users_number() -> None:
    trials, reason = run(tuning(5), lambda p, k: speed(p))
    assert len(trials) == 5 and trials[0].settings.speculative is False  # the control trial is one of the 5
    assert reason == "maxTrialCount 5 reached"


def test_a_five_point_space_finishes_early_and_repeats_only_what_the_noise_rule_asks() -> None:
    """maxTrialCount 25 on 5 valid points: each point at most once (the control trial and the chains the climb
    reaches: 1/1/2 is past a clear drop), then the 3 best measured again, and no more unless they are tied."""
    trials, reason = run(tuning(25), lambda p, k: speed(p))
    labels = [t.settings.summary() for t in trials]
    distinct = len(set(labels))
    assert distinct <= 1 + 5 and len(trials) == distinct + 3 and "by more than the noise" in reason
    assert sorted(labels[distinct:]) == ["3/1/4", "4/1/5", "5/1/6"]  # the finalists: the best three
    best, _ = plan.recommendation(tuning(25), trials)
    assert best is not None and best.summary == "3/1/4"
    # two points with identical figures (the simulator without noise): tied, but another measurement tells
    # nothing new, so the repeats end after the first round and the cheaper one wins
    same = {**SPEED, 2: 52.0}
    trials, reason = run(tuning(25), lambda p, k: same[None if p is None else p.num_steps])
    assert len(trials) == len({t.settings.summary() for t in trials}) + 3 and "identical figures" in reason
    best, _ = plan.recommendation(tuning(25), trials)
    assert best is not None and best.summary == "2/1/3"
    # with noise, a clear winner needs no more than the first round either
    noise = random.Random(1)
    trials, reason = run(tuning(25), lambda p, k: speed(p) * noise.gauss(1.0, 0.005))
    assert len(trials) == len({t.settings.summary() for t in trials}) + 3 and "beats" in reason
    # two points the noise cannot tell apart are measured again, up to MAX_MEASUREMENTS each, and no more
    tied = {**SPEED, 4: 52.0}
    trials, reason = run(tuning(25), lambda p, k: tied[None if p is None else p.num_steps]
                         * noise.gauss(1.0, 0.02))
    distinct = len({t.settings.summary() for t in trials})
    repeats = [t.settings.summary() for t in trials[distinct:]]
    assert len(trials) < 25 and all(repeats.count(x) <= MAX_MEASUREMENTS - 1 for x in repeats)


def test_a_trial_far_below_the_incumbent_after_its_first_level_is_pruned_and_never_wins() -> None:
    spec = tuning(24, workload={"concurrency": [{"level": 1}]})
    done = [Trial(name="t-trial-0", settings=TrialSettings(speculative=False), verdict="Completed",
                      levels=[level(21.0)]),
            Trial(name="t-trial-1", settings=TrialSettings(num_steps=3, eagle_topk=1, num_draft_tokens=4),
                      verdict="Completed", levels=[level(52.0)])]
    chain = TrialSettings(num_steps=1, eagle_topk=1, num_draft_tokens=2)
    reason = plan.prune_verdict(spec, done, chain, [level(36.0)])
    assert reason is not None and "below the incumbent 3/1/4" in reason and "5.7%" in reason  # 2 × 2 % × √2
    assert plan.prune_verdict(spec, done, chain, [level(50.0)]) is None  # within the margin: measured on
    assert plan.prune_verdict(spec, done, TrialSettings(speculative=False), [level(10.0)]) is None
    assert plan.prune_verdict(spec, done[:0], chain, [level(1.0)]) is None  # no incumbent yet
    again = TrialSettings(num_steps=3, eagle_topk=1, num_draft_tokens=4)
    assert plan.prune_verdict(spec, done, again, [level(30.0)]) is None  # a repeat is the noise rule's
    pruned = Trial(name="t-trial-2", settings=chain, verdict="Pruned", reason=reason, levels=[level(80.0)])
    trials = [*done, pruned]
    best, _ = plan.recommendation(spec, trials)
    assert best is not None and best.summary == "3/1/4"  # a pruned trial's partial figures never win
    valid, _ = plan.points(spec.parameters, parse(SERVER).spec)
    step = plan.next_step(spec, SGLangTuningStatus(trials=trials), valid, 0)
    assert step.kind == "start" and step.settings != chain  # not proposed again
    assert plan.counts(trials)["trials_pruned"] == 1
    stop = tuning(24, budget={"maxTrialCount": 24, "maxFailedTrialCount": 0})
    assert plan.next_step(stop, SGLangTuningStatus(trials=trials), valid, 0).kind == "start"  # not a failure


def test_a_window_without_a_finished_request_is_no_data_not_a_failure() -> None:
    none_finished = [level(0.0, requests=0)]
    outcome, message = plan.measurement(none_finished)
    assert outcome is plan.Measured.NO_DATA and "no request finished" in message and "concurrency 1" in message
    all_failed = [LevelFigures(concurrency=1, requests=4, failed_requests=4)]
    assert plan.measurement(all_failed)[0] is plan.Measured.FAILED
    assert plan.measurement([level(50.0), level(0.0, concurrency=16, requests=0)])[0] is plan.Measured.NO_DATA
    assert plan.measurement([level(50.0)]) == (plan.Measured.MEASURED, "")
    assert plan.longer_window(10) == 20 and plan.longer_window(10, 31.2) == 63
    assert plan.longer_window(3000) == 3600 and plan.longer_window(3600) is None


VALID, _ = enumerate_space(SearchSpace())


@pytest.mark.parametrize("seed", [0, 7])
def test_tpe_replays_to_the_same_next_point_after_a_restart(seed: int) -> None:
    """TPE's study is rebuilt from the trials at every ask and its sampler seeded from (seed, trials): the same
    trials give the same next point, also in a fresh study (the cache emptied, as in a restarted operator)."""
    pytest.importorskip("optuna")
    from sglang_operator.decisions.tuning import tpe

    settings = SearchSettings(algorithm=Algorithm.TPE, max_trial_count=24, seed=seed)
    noise = random.Random(seed)
    done: list[TrialResult] = []
    while not (s := suggest(settings, VALID, done)).done:
        done.append(trial(s.point, landscape(s.point) * noise.gauss(1.0, 0.02)))
    assert 10 < len(done) <= 24 and done[0].point is None
    for cut in (1, 5, 9, len(done) - 1):
        tpe._ask.cache_clear()
        first = suggest(settings, VALID, done[:cut])
        tpe._ask.cache_clear()
        again = suggest(settings, VALID, done[:cut])
        assert first == again and first.point == done[cut].point
    other = SearchSettings(algorithm=Algorithm.TPE, max_trial_count=24, seed=seed + 1)
    assert [suggest(other, VALID, done[:k]).point for k in range(6, 10)] != [t.point for t in done[6:10]]
