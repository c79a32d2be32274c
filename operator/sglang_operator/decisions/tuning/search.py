"""The search: ask-and-tell over the valid points of a :class:`~.space.SearchSpace`, whose whole state is rebuilt
from the list of finished trials on every call (:func:`suggest`), so an operator restart resumes where it was
without repeating a finished trial, and the same seed and trial list always give the same next trial.

Algorithms (Katib's ``algorithm``):

- ``Grid``: the control trial, then every valid point, cheapest first (SGLang's sweep script's method);
- ``Random``: the control trial, then valid points drawn without replacement (seeded);
- ``CoordinateAscent`` (the default), which uses what is known of the space's shape: for a chain the speed over
  numSteps rises while a draft step gains more than it costs, then falls (one hump); a tree's best draft-token
  budget grows with numSteps × eagleTopk; neighbouring points differ little. Stages:

  1. the control trial (no speculative decoding);
  2. chains: hill climbing over numSteps from SGLang's default 3 (both directions, stop at the first drop);
  3. trees: for each eagleTopk > 1, one probe at the best chain's numSteps with the largest valid
     numDraftTokens ≤ numSteps × eagleTopk (a full tree), the best probe kept when it beats the chain;
  4. coordinate hill climbing from the incumbent over numSteps ± 1, numDraftTokens ± 1 step of its set and
     eagleTopk ± 1 step (numDraftTokens kept, or the nearest valid value), first improvement taken, until no
     neighbour improves or the budget (less the repeats) is spent;
  5. repeats by successive halving: the best three points by their first measurement are measured again, then
     the best two by their mean, and so on, with what is left of the budget (at least ``repeats`` trials); they
     give the noise estimate and the finalists of :func:`decide`.

  Each point is measured once before the repeats; a failed trial (crash, out of memory) counts as the worst value
  and is never proposed again.

Why not Optuna: ``bench/tuning.py`` measures its TPE sampler against this one on the same budget; on this
small, structured space the structured search reaches the optimum more reliably, needs no replay of a sampler's
random state and adds no dependency (Optuna with NumPy, SQLAlchemy and Alembic is about 115 MB installed).
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable, Generator, Sequence
from enum import StrEnum
from typing import Annotated

from pydantic import Field

from sglang_operator.decisions.tuning.objective import (
    Objective,
    TrialResult,
    TrialVerdict,
    objective_value,
    speedups,
)
from sglang_operator.decisions.tuning.space import CONTROL_LABEL, Point, TuningModel

Search = Generator[Point | None, float | None, None]
"""An algorithm as a generator: yields the next point (``None``: the control trial), is sent its objective value
(``None`` when the trial failed)."""
CHAIN_START_STEPS = 3
"""SGLang's automatic numSteps for most models (``auto_choose_speculative_params``: 3/1/4)."""
PATIENCE = 1
"""Steps a climb goes on past a drop (one: a drop of about the noise must not end it)."""
FINALISTS = 3
"""Points measured again at the end of ``CoordinateAscent`` (the best by their first measurement)."""


class Algorithm(StrEnum):
    GRID = "Grid"
    RANDOM = "Random"
    COORDINATE_ASCENT = "CoordinateAscent"


DEFAULT_ALGORITHM = Algorithm.COORDINATE_ASCENT


class SearchSettings(TuningModel):
    """The search's inputs besides the space: objective, budget (Katib's ``maxTrialCount`` /
    ``maxFailedTrialCount``), algorithm, seed and repeats (extra measurements for the noise estimate)."""

    objective: Objective = Objective()
    max_trial_count: Annotated[int, Field(ge=1)] = 24
    max_failed_trial_count: Annotated[int, Field(ge=0)] = 6
    algorithm: Algorithm = DEFAULT_ALGORITHM
    seed: int = 0
    repeats: Annotated[int, Field(ge=0)] = 2


class Suggestion(TuningModel):
    """What to do next: run ``point`` (``control``: the trial without speculative decoding), or stop (``done``,
    ``reason`` saying why)."""

    done: bool = False
    point: Point | None = None
    control: bool = False
    reason: str | None = None

    @property
    def label(self) -> str:
        return CONTROL_LABEL if self.control else self.point.label if self.point else "done"


class Decision(TuningModel):
    """The recommendation from the finished trials. ``best`` is ``None`` when no speculative point beats the
    control trial by more than the noise (speculation does not pay off). ``noise`` is the pooled relative
    standard deviation of repeated measurements (0 without repeats); ``tied`` the points within it of the highest
    mean, of which ``best`` is the cheapest (:meth:`Point.cost_key`); ``speedup`` per concurrency level is
    ``best`` ÷ the control trial (output tok/s). The lead wins when it beats a finalist by more than
    ``noise × sqrt(1/n_lead + 1/n)`` (the noise of a difference of means of n and n_lead measurements)."""

    best: Point | None
    value: float
    runner_up: Point | None = None
    runner_up_value: float | None = None
    noise: float = 0.0
    tied: tuple[str, ...] = ()
    measured_points: int = 0
    speedup: dict[int, float] = Field(default_factory=dict)
    reason: str = ""

    @property
    def label(self) -> str:
        return self.best.label if self.best is not None else CONTROL_LABEL


# --- replay --------------------------------------------------------------------------------------------------


def _key(p: Point | None) -> tuple[int, int, int] | None:
    return None if p is None else (p.num_steps, p.eagle_topk, p.num_draft_tokens)


def suggest(settings: SearchSettings, valid: Sequence[Point], trials: Sequence[TrialResult]) -> Suggestion:
    """The next trial, from the settings, the valid points (:func:`~.space.enumerate_space`) and every finished
    trial so far (in the order they ran). Replays the algorithm from the start, answering each point it asks for
    with the next recorded result of that point; the first point without one is the suggestion."""
    failed = sum(t.verdict is TrialVerdict.FAILED for t in trials)
    if failed > settings.max_failed_trial_count:
        return Suggestion(done=True, reason=f"{failed} failed trials > maxFailedTrialCount "
                                            f"{settings.max_failed_trial_count}")
    if len(trials) >= settings.max_trial_count:
        return Suggestion(done=True, reason=f"maxTrialCount {settings.max_trial_count} reached")
    recorded: dict[tuple[int, int, int] | None, deque[float | None]] = {}
    for t in trials:
        recorded.setdefault(_key(t.point), deque()).append(objective_value(settings.objective, t))
    search = ALGORITHMS[settings.algorithm](settings, list(valid))
    try:
        ask = next(search)
        while True:
            answers = recorded.get(_key(ask))
            if not answers:
                return Suggestion(point=ask, control=ask is None)
            ask = search.send(answers.popleft())
    except StopIteration:
        return Suggestion(done=True, reason=f"{settings.algorithm.value} search finished")


# --- algorithms ----------------------------------------------------------------------------------------------


def _grid(settings: SearchSettings, valid: list[Point]) -> Search:
    yield None
    for p in valid[: settings.max_trial_count - 1]:
        _ = yield p  # the value is not needed (and ``yield from`` a list would not take it)


def _random(settings: SearchSettings, valid: list[Point]) -> Search:
    yield None
    rng = random.Random(settings.seed)
    for p in rng.sample(valid, min(len(valid), settings.max_trial_count - 1)):
        _ = yield p


class _OutOfBudget(Exception):
    pass


class _Space:
    """Index of the valid points: (numSteps, eagleTopk) → sorted valid draft-token values."""

    def __init__(self, valid: list[Point]) -> None:
        self.steps = sorted({p.num_steps for p in valid})
        self.topks = sorted({p.eagle_topk for p in valid})
        self.ndts: dict[tuple[int, int], list[int]] = {}
        for p in valid:
            self.ndts.setdefault((p.num_steps, p.eagle_topk), []).append(p.num_draft_tokens)
        for v in self.ndts.values():
            v.sort()

    def steps_of(self, topk: int) -> list[int]:
        return [s for s in self.steps if (s, topk) in self.ndts]

    def full(self, steps: int, topk: int) -> Point:
        """The fullest tree of ``steps``/``topk``: the most draft tokens of the set (at most steps × topk + 1);
        the chain itself for eagleTopk 1."""
        return Point(num_steps=steps, eagle_topk=topk, num_draft_tokens=self.ndts[(steps, topk)][-1])


def _coordinate_ascent(settings: SearchSettings, valid: list[Point]) -> Search:
    space = _Space(valid)
    budget = settings.max_trial_count - min(settings.repeats, max(settings.max_trial_count - 2, 0))
    memo: dict[Point | None, float] = {}
    used = 0

    def measure(p: Point | None) -> Generator[Point | None, float | None, float]:
        nonlocal used
        if p in memo:
            return memo[p]
        if used >= budget:
            raise _OutOfBudget
        used += 1
        got = yield p
        memo[p] = -math.inf if got is None else got
        return memo[p]

    def climb(topk: int, start: int) -> Generator[Point | None, float | None, Point]:
        """Hill climbing over numSteps with the fullest tree of each, from ``start``: upwards first, downwards
        only when the first step up did not gain; one step past a drop is still tried (``PATIENCE``: a drop may be
        the noise). Returns the best point it measured."""
        steps = space.steps_of(topk)
        i = min(range(len(steps)), key=lambda j: (abs(steps[j] - start), j))
        top = yield from measure(space.full(steps[i], topk))
        best_j = i
        for direction in (1, -1):
            j, misses = i, 0
            while 0 <= j + direction < len(steps) and misses <= PATIENCE:
                j += direction
                v = yield from measure(space.full(steps[j], topk))
                if v > top:
                    top, best_j, misses = v, j, 0
                else:
                    misses += 1
            if best_j != i:
                break
        return space.full(steps[best_j], topk)

    try:
        yield from measure(None)
        start = CHAIN_START_STEPS
        results: list[Point] = []
        for topk in space.topks:  # 2. the chain, 3. each tree width from the last width's best numSteps
            if not space.steps_of(topk):
                continue
            results.append((yield from climb(topk, start)))
            start = results[-1].num_steps
        # 4. fewer draft tokens than the fullest tree at the best points (one step of the set down)
        for p in sorted(results, key=lambda q: -memo[q])[:2]:
            ndts = space.ndts[(p.num_steps, p.eagle_topk)]
            i = ndts.index(p.num_draft_tokens)
            if p.eagle_topk > 1 and i > 0:
                yield from measure(Point(num_steps=p.num_steps, eagle_topk=p.eagle_topk,
                                         num_draft_tokens=ndts[i - 1]))
    except _OutOfBudget:
        pass
    # 5. repeats, successive halving: the best FINALISTS by their first measurement get one more each, then the
    # best two by their mean one more each, and so on, with what is left of the budget (at least ``repeats``)
    first = {p: v for p, v in memo.items() if v > -math.inf}
    runs: dict[Point | None, list[float]] = {p: [v] for p, v in first.items()}

    def order(points: Sequence[Point | None]) -> list[Point | None]:
        return sorted(points, key=lambda p: (-sum(runs[p]) / len(runs[p]), _cost(p)))

    left = settings.max_trial_count - used if settings.repeats else 0  # the search kept >= ``repeats`` free
    width = FINALISTS
    while left > 0 and runs:
        for q in order(list(runs))[:width]:
            if left <= 0:
                break
            got = yield q
            left -= 1
            runs[q].append(-math.inf if got is None else got)
        width = 2


ALGORITHMS: dict[Algorithm, Callable[[SearchSettings, list[Point]], Search]] = {
    Algorithm.GRID: _grid,
    Algorithm.RANDOM: _random,
    Algorithm.COORDINATE_ASCENT: _coordinate_ascent,
}


# --- the decision --------------------------------------------------------------------------------------------


def noise_estimate(values: dict[Point | None, list[float]]) -> float:
    """Pooled relative standard deviation of the points measured more than once (0 without repeats):
    sqrt(Σ_p Σ_i (v_pi / mean_p − 1)² / Σ_p (n_p − 1))."""
    ss, dof = 0.0, 0
    for vs in values.values():
        if len(vs) < 2:
            continue
        mean = sum(vs) / len(vs)
        if mean <= 0:
            continue
        ss += sum((v / mean - 1.0) ** 2 for v in vs)
        dof += len(vs) - 1
    return math.sqrt(ss / dof) if dof else 0.0


def _cost(p: Point | None) -> tuple[int, int, int]:
    return (0, 0, 0) if p is None else p.cost_key()


def decide(trials: Sequence[TrialResult], objective: Objective) -> Decision | None:
    """The recommendation (``None`` before any completed trial). The finalists are the points measured more than
    once (the search's repeats; every point when none was): the highest mean among them wins only by more than the
    noise; every finalist within the noise of it is tied and the cheapest tied one wins (the control trial,
    cheapest of all, when speculation does not beat it). A point measured once cannot win over repeated ones:
    its one figure is as likely the lucky draw of the noise as the truth."""
    values: dict[Point | None, list[float]] = {}
    for t in trials:
        v = objective_value(objective, t)
        if v is not None:
            values.setdefault(t.point, []).append(v)
    if not values:
        return None
    means = {p: sum(vs) / len(vs) for p, vs in values.items()}
    noise = noise_estimate(values)
    finalists = [p for p, vs in values.items() if len(vs) > 1] or list(values)
    ranked = sorted(finalists, key=lambda p: (-means[p], _cost(p)))
    lead = ranked[0]
    top = means[lead]

    def margin(p: Point | None) -> float:
        """The noise of the difference of two means: noise × sqrt(1/n_lead + 1/n_p), relative to the lead."""
        return top * noise * math.sqrt(1.0 / len(values[lead]) + 1.0 / len(values[p]))

    tied = [p for p in ranked if top - means[p] <= margin(p)]
    winner = min(tied, key=_cost)
    others = [p for p in ranked if p != winner]
    runner = others[0] if others else None
    if len(tied) > 1:
        reason = (f"{len(tied)} points within the noise ({noise:.1%}) of the highest mean {top:.1f} "
                  f"{objective.unit}: the cheapest wins")
    elif runner is not None:
        reason = f"beats {_label(runner)} ({means[runner]:.1f} {objective.unit}) by more than the noise ({noise:.1%})"
    else:
        reason = "the only point measured"
    return Decision(best=winner, value=means[winner], runner_up=runner,
                    runner_up_value=means[runner] if runner is not None else None, noise=noise,
                    tied=tuple(_label(p) for p in tied), measured_points=len(means),
                    speedup=speedups(trials, winner) if winner is not None else {}, reason=reason)


def _label(p: Point | None) -> str:
    return CONTROL_LABEL if p is None else p.label
