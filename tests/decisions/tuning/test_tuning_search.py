"""The ask-and-tell search: state rebuilt from the trial list (restart-safe, deterministic), budgets, failures,
and the noise-aware decision."""

from __future__ import annotations

import math
import random
from collections.abc import Callable

import pytest

from sglang_operator.decisions.tuning import (
    Algorithm,
    Objective,
    Point,
    SearchSettings,
    SearchSpace,
    TrialLevelFigures,
    TrialResult,
    TrialVerdict,
    decide,
    enumerate_space,
    noise_estimate,
    suggest,
)

VALID, _ = enumerate_space(SearchSpace())


def P(s: int, k: int, n: int) -> Point:
    return Point(num_steps=s, eagle_topk=k, num_draft_tokens=n)


def landscape(p: Point | None) -> float:
    """A smooth stand-in for decode tok/s: a hump over steps, trees better, wide trees best at 8/4/32."""
    if p is None:
        return 100.0
    steps = -((p.num_steps - 6) ** 2) * 2.0
    width = {1: 0.0, 2: 20.0, 4: 40.0, 8: 30.0}[p.eagle_topk]
    fill = -abs(math.log2(p.num_draft_tokens) - math.log2(p.num_steps * p.eagle_topk)) * 8.0
    return 200.0 + steps + width + fill + p.num_steps * 3.0


def trial(p: Point | None, value: float | None) -> TrialResult:
    if value is None:
        return TrialResult(point=p, verdict=TrialVerdict.FAILED, reason="RuntimeError: Not enough memory.")
    return TrialResult(point=p, figures=(TrialLevelFigures(concurrency=1, decode_tokens_per_second=value,
                                                      output_tokens_per_second=value),))


def drive(settings: SearchSettings, f: Callable[[Point | None, int], float | None]) -> list[TrialResult]:
    """Run the search to the end, rebuilding it from the trial list at every step (as after a restart)."""
    done: list[TrialResult] = []
    seen: dict[Point | None, int] = {}
    while not (s := suggest(settings, VALID, done)).done:
        k = seen.get(s.point, 0)
        seen[s.point] = k + 1
        done.append(trial(s.point, f(s.point, k)))
    return done


@pytest.mark.parametrize("algorithm", list(Algorithm))
def test_control_first_budget_kept_only_valid_points(algorithm: Algorithm) -> None:
    settings = SearchSettings(algorithm=algorithm, max_trial_count=24)
    done = drive(settings, lambda p, k: landscape(p))
    assert done[0].point is None  # the control trial without speculative decoding
    assert len(done) <= 24 and all(t.point in VALID for t in done[1:])
    if algorithm in (Algorithm.GRID, Algorithm.RANDOM):
        assert len({t.point for t in done}) == len(done)  # no repeats without a noise stage


def test_coordinate_ascent_finds_the_optimum_with_a_quarter_of_the_grid() -> None:
    best = max(VALID, key=landscape)
    done = drive(SearchSettings(max_trial_count=24), lambda p, k: landscape(p))
    d = decide(done, Objective())
    assert d is not None and d.best == best and d.noise == 0.0
    assert len(done) <= (len(VALID) + 1) // 4
    first = [t.point for t in done]
    repeats = len(first) - len(set(first))
    assert repeats >= 2  # the noise stage measured the finalists again


def test_a_restarted_search_resumes_without_repeating_a_trial() -> None:
    """Every suggestion depends only on the settings and the finished trials: cut the run anywhere, suggest from
    the prefix, and the next trial is the one the uninterrupted run made; a finished point is never asked for
    again before the noise stage."""
    noise = random.Random(5)
    values = {(p, k): landscape(p) * noise.gauss(1.0, 0.02) for p in [None, *VALID] for k in range(6)}
    settings = SearchSettings(max_trial_count=24, seed=3)
    done = drive(settings, lambda p, k: values[(p, k)])
    for cut in range(len(done)):
        again = suggest(settings, VALID, done[:cut])
        assert not again.done and again.point == done[cut].point
    assert suggest(settings, VALID, done).done
    points = [t.point for t in done]
    first_repeat = next(i for i, p in enumerate(points) if p in points[:i])
    assert len(set(points[:first_repeat])) == first_repeat  # every point once before the repeats
    assert set(points[first_repeat:]) <= set(points[:first_repeat])  # then only repeats


def test_random_is_deterministic_per_seed() -> None:
    runs = [[t.point for t in drive(SearchSettings(algorithm=Algorithm.RANDOM, max_trial_count=10, seed=s),
                                    lambda p, k: landscape(p))] for s in (1, 1, 2)]
    assert runs[0] == runs[1] and runs[0] != runs[2]


def test_failed_points_are_not_retried_and_too_many_failures_stop() -> None:
    def oom_beyond_16(p: Point | None, k: int) -> float | None:
        return None if p is not None and p.num_draft_tokens > 16 else landscape(p)

    done = drive(SearchSettings(max_trial_count=24), oom_beyond_16)
    failed = [t.point for t in done if t.verdict is TrialVerdict.FAILED]
    assert failed and len(failed) == len(set(failed))
    d = decide(done, Objective())
    assert d is not None and d.best is not None and d.best.num_draft_tokens <= 16
    stop = SearchSettings(max_trial_count=24, max_failed_trial_count=1)
    done = drive(stop, lambda p, k: None if p is not None else 100.0)
    assert len(done) == 3 and "maxFailedTrialCount 1" in (suggest(stop, VALID, done).reason or "")


def test_winner_must_beat_the_runner_up_by_more_than_the_noise() -> None:
    objective = Objective()
    tied = [trial(None, 100.0), trial(P(8, 8, 64), 374.0), trial(P(8, 8, 64), 366.0), trial(P(8, 4, 32), 368.0),
            trial(P(8, 4, 32), 364.0)]
    d = decide(tied, objective)
    assert d is not None
    assert d.noise == pytest.approx(noise_estimate({P(8, 8, 64): [374.0, 366.0], P(8, 4, 32): [368.0, 364.0]}))
    assert d.best == P(8, 8, 64) and d.tied == ("8/8/64", "8/4/32")  # within the noise: the highest mean wins
    clear = [*tied[:3], trial(P(8, 4, 32), 330.0), trial(P(8, 4, 32), 334.0)]
    d = decide(clear, objective)
    assert d is not None and d.best == P(8, 8, 64) and d.runner_up == P(8, 4, 32) and "more than the noise" in d.reason
    control_tied = [trial(None, 100.0), trial(None, 104.0), trial(P(3, 1, 4), 103.0), trial(P(3, 1, 4), 105.0)]
    d = decide(control_tied, objective)  # speculation must beat the control trial by more than the noise
    assert d is not None and d.best is None and "no speculative point beats the control trial" in d.reason
    lone = [trial(None, 100.0), trial(P(3, 1, 4), 180.0)]  # nothing repeated: every point is a finalist
    d = decide(lone, objective)
    assert d is not None and d.best == P(3, 1, 4) and d.speedup == {1: pytest.approx(1.8)}


def test_no_speculation_wins_when_speculation_does_not_pay() -> None:
    trials = [trial(None, 2000.0), trial(None, 2040.0), trial(P(3, 1, 4), 2030.0), trial(P(3, 1, 4), 1990.0)]
    d = decide(trials, Objective())
    assert d is not None and d.best is None and d.label == "no-speculation"
    assert decide([trial(P(3, 1, 4), None)], Objective()) is None


def test_a_trees_neighbours_include_the_diagonal_along_its_ridge() -> None:
    from sglang_operator.decisions.tuning.neighbours import SpaceIndex
    from sglang_operator.decisions.tuning.search import static

    index = SpaceIndex(static(VALID))
    moves = dict((q, m) for m, q in index.neighbours(P(4, 4, 8)))
    assert moves[P(5, 4, 16)] == ("diagonal", 1) and moves[P(3, 4, 4)] == ("diagonal", -1)
    assert not [m for m, _ in index.neighbours(P(3, 1, 4)) if m[0] == "diagonal"]  # a chain has no ridge


def test_trials_the_repeats_left_resume_the_walk_and_the_repeats_run_again() -> None:
    """A landscape whose climb spends the exploration budget (24 less 8 kept for the repeats), measured without
    noise: the repeats end after their first round (no noise, nothing tied), leaving trials of maxTrialCount; the
    walk resumes with them, less the room for a new incumbent's repeats, and the search says so."""
    settings = SearchSettings(max_trial_count=24)
    done = drive(settings, lambda p, k: landscape(p))
    labels = [t.point.label if t.point else "control" for t in done]
    first_repeat = next(i for i, x in enumerate(labels) if labels.index(x) != i)
    assert first_repeat == 16, labels  # the exploration budget
    assert [x for i, x in enumerate(labels) if i > first_repeat and labels.index(x) == i], labels  # new points after
    assert 24 - settings.repeats <= len(done) <= 24
    assert "resumed with the trials the repeats left" in (suggest(settings, VALID, done).reason or "")
