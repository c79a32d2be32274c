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

  With ``maxRunningRequests`` / ``cudaGraphMaxBs`` listed, stages 2–4 run at the middle value of each and a stage
  4b climbs each of them in turn from the incumbent (both directions, one step of the set at a time, ``PATIENCE``
  past a drop), until a round over them improves nothing.

  Each point is measured once before the repeats; a failed trial (crash, out of memory) counts as the worst value
  and is never proposed again.

Every algorithm then runs one more trial when the space has adaptive-mode points (``parameters.adaptive`` on a
release that has SGLang's ``--speculative-adaptive``): the best static point found (highest value, the cheapest
among equals) in adaptive mode, when the release's rules accept it there (else none: it was counted Invalid). It is
not counted in ``max_trial_count`` (the API's rule, like the control trial), competes in :func:`decide` like any
point, and ``CoordinateAscent`` runs it before its repeats, so that it can be a finalist.

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


def adaptive_extra(valid: Sequence[Point]) -> int:
    """Trials the search runs beyond ``max_trial_count``: 1 when ``valid`` has adaptive-mode points (the one
    adaptive trial), else 0."""
    return int(any(p.adaptive for p in valid))


def suggest(settings: SearchSettings, valid: Sequence[Point], trials: Sequence[TrialResult]) -> Suggestion:
    """The next trial, from the settings, the valid points (:func:`~.space.enumerate_space`) and every finished
    trial so far (in the order they ran). Replays the algorithm from the start, answering each point it asks for
    with the next recorded result of that point; the first point without one is the suggestion."""
    failed = sum(t.verdict is TrialVerdict.FAILED for t in trials)
    if failed > settings.max_failed_trial_count:
        return Suggestion(done=True, reason=f"{failed} failed trials > maxFailedTrialCount "
                                            f"{settings.max_failed_trial_count}")
    extra = adaptive_extra(valid)
    if len(trials) >= settings.max_trial_count + extra:
        return Suggestion(done=True, reason=f"maxTrialCount {settings.max_trial_count} reached"
                                            + (" (and the adaptive-mode trial)" if extra else ""))
    recorded: dict[Point | None, deque[float | None]] = {}
    for t in trials:
        recorded.setdefault(t.point, deque()).append(objective_value(settings.objective, t))
    search = ALGORITHMS[settings.algorithm](settings, list(valid))
    try:
        ask = next(search)
        while True:
            answers = recorded.get(ask)
            if not answers:
                return Suggestion(point=ask, control=ask is None)
            ask = search.send(answers.popleft())
    except StopIteration:
        return Suggestion(done=True, reason=f"{settings.algorithm.value} search finished")


# --- algorithms ----------------------------------------------------------------------------------------------


def _static(valid: list[Point]) -> list[Point]:
    return [p for p in valid if not p.adaptive]


def _best_static(values: dict[Point | None, float]) -> Point | None:
    """The best static point measured (highest value, the cheapest among equals), or None (none completed)."""
    done = [p for p, v in values.items() if p is not None and not p.adaptive and v > -math.inf]
    return min(done, key=lambda p: (-values[p], p.cost_key())) if done else None


def _adaptive_of(best: Point | None, valid: list[Point]) -> Point | None:
    """``best`` in adaptive mode when the release's rules accept it there (it is among ``valid``), else None."""
    if best is None:
        return None
    p = best.model_copy(update={"adaptive": True})
    return p if p in valid else None


def _grid(settings: SearchSettings, valid: list[Point]) -> Search:
    yield None
    values: dict[Point | None, float] = {}
    for p in _static(valid)[: settings.max_trial_count - 1]:
        got = yield p
        values[p] = -math.inf if got is None else got
    if (a := _adaptive_of(_best_static(values), valid)) is not None:
        _ = yield a


def _random(settings: SearchSettings, valid: list[Point]) -> Search:
    yield None
    rng = random.Random(settings.seed)
    static = _static(valid)
    values: dict[Point | None, float] = {}
    for p in rng.sample(static, min(len(static), settings.max_trial_count - 1)):
        got = yield p
        values[p] = -math.inf if got is None else got
    if (a := _adaptive_of(_best_static(values), valid)) is not None:
        _ = yield a


class _OutOfBudget(Exception):
    pass


Extras = tuple[int | None, int | None]
"""(maxRunningRequests, cudaGraphMaxBs) of a point (``None``: the server's own value)."""


def _extras(p: Point) -> Extras:
    return (p.max_running_requests, p.cuda_graph_max_bs)


def _middle(values: Sequence[int | None]) -> int | None:
    """The middle of the sorted values (the lower one of two), ``None`` when the dimension is not searched."""
    known = sorted({v for v in values if v is not None})
    return known[(len(known) - 1) // 2] if known else None


class _Space:
    """Index of the valid static points: (numSteps, eagleTopk) → sorted valid draft-token values, at the start
    values of maxRunningRequests / cudaGraphMaxBs (``base``: the middle of each, or the combination nearest it that
    has valid points); every valid static point for the climbs over those."""

    def __init__(self, valid: list[Point]) -> None:
        self.points = set(valid)
        combos = sorted({_extras(p) for p in valid}, key=lambda e: tuple(-1 if v is None else v for v in e))
        want = (_middle([e[0] for e in combos]), _middle([e[1] for e in combos]))
        self.base: Extras = min(combos, key=lambda e: sum(0 if a == b else 1 + abs((a or 0) - (b or 0))
                                                          for a, b in zip(e, want, strict=True))) \
            if combos else (None, None)
        at_base = [p for p in valid if _extras(p) == self.base]
        self.steps = sorted({p.num_steps for p in at_base})
        self.topks = sorted({p.eagle_topk for p in at_base})
        self.ndts: dict[tuple[int, int], list[int]] = {}
        for p in at_base:
            self.ndts.setdefault((p.num_steps, p.eagle_topk), []).append(p.num_draft_tokens)
        for v in self.ndts.values():
            v.sort()
        self.mrrs = sorted({p.max_running_requests for p in valid if p.max_running_requests is not None})
        self.bss = sorted({p.cuda_graph_max_bs for p in valid if p.cuda_graph_max_bs is not None})

    def steps_of(self, topk: int) -> list[int]:
        return [s for s in self.steps if (s, topk) in self.ndts]

    def full(self, steps: int, topk: int) -> Point:
        """The fullest tree of ``steps``/``topk``: the most draft tokens of the set (at most steps × topk + 1);
        the chain itself for eagleTopk 1."""
        return Point(num_steps=steps, eagle_topk=topk, num_draft_tokens=self.ndts[(steps, topk)][-1],
                     max_running_requests=self.base[0], cuda_graph_max_bs=self.base[1])

    def line(self, p: Point, field: str) -> list[Point]:
        """The valid points that differ from ``p`` in ``field`` only, ``p`` among them, by that field's value."""
        values = self.mrrs if field == "max_running_requests" else self.bss
        return [q for v in values if (q := p.model_copy(update={field: v})) in self.points]


def _coordinate_ascent(settings: SearchSettings, valid: list[Point]) -> Search:
    space = _Space(_static(valid))
    budget = settings.max_trial_count - min(settings.repeats, max(settings.max_trial_count - 2, 0))
    memo: dict[Point | None, float] = {}
    used = 0

    def measure(p: Point | None, free: bool = False) -> Generator[Point | None, float | None, float]:
        """``p``'s value (measured when new: a trial, counted in the budget unless ``free``)."""
        nonlocal used
        if p in memo:
            return memo[p]
        if used >= budget and not free:
            raise _OutOfBudget
        if not free:
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
        line = [space.full(n, topk) for n in steps]
        top = yield from measure(line[i])
        return line[(yield from hill(line, i, top))]

    def climb_line(p: Point, field: str) -> Generator[Point | None, float | None, Point]:
        """Hill climbing from ``p`` (measured) over the values of ``field`` (maxRunningRequests or
        cudaGraphMaxBs), like :func:`climb` over numSteps. Returns the best point of the line measured."""
        line = space.line(p, field)
        if len(line) < 2:
            return p
        i = line.index(p)
        return line[(yield from hill(line, i, memo[p]))]

    def hill(line: list[Point], i: int, top: float) -> Generator[Point | None, float | None, int]:
        """The walk both climbs share: from ``line[i]`` (measured: ``top``) upwards first, downwards only when the
        first direction did not gain; one step past a drop is still tried (``PATIENCE``). Returns the best index."""
        best_j = i
        for direction in (1, -1):
            j, misses = i, 0
            while 0 <= j + direction < len(line) and misses <= PATIENCE:
                j += direction
                v = yield from measure(line[j])
                if v > top:
                    top, best_j, misses = v, j, 0
                else:
                    misses += 1
            if best_j != i:
                break
        return best_j

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
                                         num_draft_tokens=ndts[i - 1], max_running_requests=space.base[0],
                                         cuda_graph_max_bs=space.base[1]))
        # 4b. maxRunningRequests and cudaGraphMaxBs as further coordinates, from the incumbent, until a round
        # over both improves nothing
        fields = [f for f, values in (("max_running_requests", space.mrrs), ("cuda_graph_max_bs", space.bss))
                  if len(values) > 1]
        incumbent = _best_static(memo)
        while fields and incumbent is not None:
            before = incumbent
            for field in fields:
                incumbent = yield from climb_line(incumbent, field)
            if incumbent == before:
                break
    except _OutOfBudget:
        pass
    # the adaptive-mode trial of the best static point, before the repeats (so that it can be a finalist)
    if (a := _adaptive_of(_best_static(memo), valid)) is not None:
        yield from measure(a, free=True)
    # 5. repeats, successive halving: the best FINALISTS by their first measurement get one more each, then the
    # best two by their mean one more each, and so on, with what is left of the budget (at least ``repeats``)
    first = {p: v for p, v in memo.items() if v > -math.inf}
    runs: dict[Point | None, list[float]] = {p: [v] for p, v in first.items()}

    def order(points: Sequence[Point | None]) -> list[Point | None]:
        return sorted(points, key=lambda p: (-sum(runs[p]) / len(runs[p]), _cost(p)))

    # the search kept >= ``repeats`` free; the adaptive-mode trial is not counted (``free``)
    left = settings.max_trial_count - used if settings.repeats else 0
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


def _cost(p: Point | None) -> tuple[int, ...]:
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
