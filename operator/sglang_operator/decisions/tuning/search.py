"""The search: ask-and-tell over the valid points of a :class:`~.space.SearchSpace`, whose whole state is rebuilt
from the list of finished trials on every call (:func:`suggest`), so an operator restart resumes where it was
without repeating a finished trial, and the same seed and trial list always give the same next trial.

Algorithms (Katib's ``algorithm``); every one starts with the control trial (no speculative decoding), and every
trial counts in ``max_trial_count`` (Katib's rule), the control trial and the adaptive-mode trial included:

- ``Grid``: then every valid point, cheapest first (SGLang's sweep script's method);
- ``Random``: then valid points drawn without replacement (seeded);
- ``CoordinateAscent`` (the default), which uses what is known of the space's shape: for a chain the speed over
  numSteps rises while a draft step gains more than it costs, then falls (one hump); a tree's best draft-token
  budget grows with numSteps × eagleTopk; neighbouring points differ little. Stages:

  1. the control trial;
  2. chains: hill climbing over numSteps from SGLang's default 3 (or ``start_steps``; upwards first, downwards
     only when the first step up did not gain; ``PATIENCE`` step past a drop of less than ``CLEAR_DROP``, 5 %,
     which may be the noise; a clear drop ends the direction);
  3. trees: for each eagleTopk > 1 one probe, the fullest tree (the most draft tokens of the set, at most
     numSteps × eagleTopk + 1) at the best chain's numSteps; then the same climb over numSteps, with the fullest
     tree of each, for the width whose probe was best, when it reached ``WIDTH_CUTOFF`` (90 %) of the best value
     so far (the other widths are left to stage 4's moves over eagleTopk);
  4. coordinate hill climbing from the incumbent (the best point measured so far) over its neighbours:
     numDraftTokens one value of its set down and up, numSteps ± 1, for a tree the diagonal along its ridge
     (numSteps + 1 with numDraftTokens one value up, numSteps − 1 with one down), eagleTopk one value of its set
     up and down (numDraftTokens kept, or the nearest valid value), then ``maxRunningRequests`` /
     ``cudaGraphMaxBs`` one value of their sets down and up when listed, the move that last gained first; the
     first neighbour that
     beats the incumbent becomes it. Once every neighbour of the incumbent is measured, the walk goes on from the
     best point within ``EXPAND_MARGIN`` (5 %) of it that has unmeasured neighbours (a lucky measurement must not
     end the climb), until no such point is left (converged) or the exploration budget
     (:func:`exploration_budget`: ``max_trial_count`` less the adaptive-mode trial and a third of the rest, kept
     for the repeats) is spent;
  5. the repeats (:func:`confirm`): the best ``repeats`` (3) points measured again, then tied finalists again
     while they are within ``REPEAT_SIGMAS`` (2) standard deviations of the difference of their means (at most
     ``MAX_MEASUREMENTS`` each);
  6. when the exploration budget ran out and the repeats left trials of ``max_trial_count``, the walk of stage
     4 resumes with them (less ``repeats`` for a new incumbent's repeats) and the repeats run again over every
     measurement so far.

  With ``maxRunningRequests`` / ``cudaGraphMaxBs`` listed, stages 2–3 run at the middle value of each.
  Each point is measured once before the repeats; a failed or pruned trial counts as the worst value and is
  never proposed again.
- ``TPE``: Optuna's Tree-structured Parzen Estimator through its ask-and-tell interface (:mod:`.tpe`; Optuna is
  imported only then), then the same repeats.

Every algorithm runs one more trial when the space has adaptive-mode points (``parameters.adaptive`` on a release
that has SGLang's ``--speculative-adaptive``): the best static point found (highest value, the cheapest among
equals) in adaptive mode, when the release's rules accept it there (else none: it was counted Invalid). It counts
in ``max_trial_count`` (the exploration leaves room for it), competes in :func:`~.decide.decide` like any point,
and runs before the repeats, so that it can be a finalist.

Why this algorithm: the space is small (about a hundred points) and structured (one hump over numSteps, a tree's
best draft-token count tied to numSteps × eagleTopk, neighbours close), each trial costs minutes of GPU time
(model load, CUDA-graph capture, the load), and measurements are noisy by a few per cent: a walk that follows the
structure reaches the optimum's neighbourhood in a quarter of the grid's trials, and the repeats, not luck, pick
the winner among the last few candidates. ``bench/tuning.py`` measures it beside ``Grid``, ``Random`` and ``TPE``
on the same budget (``docs/tuning.md`` has the table).
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable, Generator, Sequence
from enum import StrEnum
from typing import Annotated

from pydantic import Field

from sglang_operator.decisions.tuning.decide import TuningDecision, cost, decide, noise_estimate, tied_set
from sglang_operator.decisions.tuning.neighbours import Move, SpaceIndex
from sglang_operator.decisions.tuning.objective import Objective, TrialResult, TrialVerdict, values
from sglang_operator.decisions.tuning.space import CONTROL_LABEL, Point, TuningModel

__all__ = ["DEFAULT_ALGORITHM", "Algorithm", "SearchSettings", "Suggestion", "TuningDecision", "decide",
           "noise_estimate", "suggest"]

Search = Generator[Point | None, float | None, str]
"""An algorithm as a generator: yields the next point (``None``: the control trial), is sent its objective value
(``None`` when the trial failed or was pruned), returns why it finished."""
CHAIN_START_STEPS = 3
"""SGLang's automatic numSteps for most models (``auto_choose_speculative_params``: 3/1/4)."""
PATIENCE = 1
"""Steps a climb over numSteps goes on past a small drop (one: a drop of about the noise must not end it)."""
CLEAR_DROP = 0.05
"""A drop of more than this fraction of the best value ends a climb over numSteps at once (not the noise)."""
EXPAND_MARGIN = 0.05
"""Stage 4 goes on from a point within this fraction of the incumbent once the incumbent's neighbours are all
measured (the incumbent's one figure may be the noise's lucky draw)."""
WIDTH_CUTOFF = 0.9
"""Stage 3 climbs the best tree width only when its probe reached this fraction of the best value so far."""
REPEAT_SIGMAS = 2.0
"""The repeats go on while finalists are within this many standard deviations of the difference of their means
(:func:`confirm`); the recommendation itself is the highest mean (:func:`~.decide.decide`)."""
MAX_MEASUREMENTS = 8
"""Measurements at most of one point in the repeats (the noise rule asks for more only while points are tied)."""


class Algorithm(StrEnum):
    GRID = "Grid"
    RANDOM = "Random"
    COORDINATE_ASCENT = "CoordinateAscent"
    TPE = "TPE"


DEFAULT_ALGORITHM = Algorithm.COORDINATE_ASCENT


class SearchSettings(TuningModel):
    """The search's inputs besides the space: objective, budget (Katib's ``maxTrialCount`` /
    ``maxFailedTrialCount``: every trial counts, the control trial included), algorithm, seed and repeats (the
    finalists measured again for the noise estimate; ``CoordinateAscent`` and ``TPE`` keep that many trials of
    the budget for them)."""

    objective: Objective = Objective()
    max_trial_count: Annotated[int, Field(ge=1)] = 24
    max_failed_trial_count: Annotated[int, Field(ge=0)] = 6
    algorithm: Algorithm = DEFAULT_ALGORITHM
    seed: int = 0
    repeats: Annotated[int, Field(ge=0)] = 3
    start_steps: Annotated[int | None, Field(ge=1)] = None
    """``CoordinateAscent``: the numSteps its climb over chains starts from (the nearest of the space's;
    ``algorithm.startNumSteps``); None: :data:`CHAIN_START_STEPS`."""


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


# --- replay --------------------------------------------------------------------------------------------------


def adaptive_extra(valid: Sequence[Point]) -> int:
    """Trials the search spends on adaptive mode: 1 when ``valid`` has adaptive-mode points (the one adaptive
    trial), else 0. It counts in ``max_trial_count``."""
    return int(any(p.adaptive for p in valid))


def suggest(settings: SearchSettings, valid: Sequence[Point], trials: Sequence[TrialResult]) -> Suggestion:
    """The next trial, from the settings, the valid points (:func:`~.space.enumerate_space`) and every finished
    trial so far (in the order they ran: Completed, Failed and Pruned ones). Replays the algorithm from the start,
    answering each point it asks for with the next recorded result of that point; the first point without one is
    the suggestion. Done when more than ``max_failed_trial_count`` trials failed, when ``max_trial_count`` trials
    ran, or when the algorithm finished (the space exhausted, the climb converged and the noise rule satisfied)."""
    failed = sum(t.verdict is TrialVerdict.FAILED for t in trials)
    if failed > settings.max_failed_trial_count:
        return Suggestion(done=True, reason=f"{failed} failed trials > maxFailedTrialCount "
                                            f"{settings.max_failed_trial_count}")
    if len(trials) >= settings.max_trial_count:
        return Suggestion(done=True, reason=f"maxTrialCount {settings.max_trial_count} reached")
    recorded: dict[Point | None, deque[float | None]] = {}
    for t, v in zip(trials, values(settings.objective, trials), strict=True):
        recorded.setdefault(t.point, deque()).append(v)
    search = algorithm(settings.algorithm)(settings, list(valid))
    try:
        ask = next(search)
        while True:
            answers = recorded.get(ask)
            if not answers:
                return Suggestion(point=ask, control=ask is None)
            ask = search.send(answers.popleft())
    except StopIteration as stop:
        why = f": {stop.value}" if stop.value else ""
        return Suggestion(done=True, reason=f"{settings.algorithm.value} search finished{why}")


def algorithm(name: Algorithm) -> Callable[[SearchSettings, list[Point]], Search]:
    """The generator of algorithm ``name`` (``TPE`` imports Optuna, :mod:`.tpe`)."""
    if name is Algorithm.TPE:
        from sglang_operator.decisions.tuning.tpe import tpe

        return tpe
    return {Algorithm.GRID: _grid, Algorithm.RANDOM: _random, Algorithm.COORDINATE_ASCENT: _coordinate_ascent}[name]


# --- shared pieces -------------------------------------------------------------------------------------------


def static(valid: Sequence[Point]) -> list[Point]:
    """The points without adaptive mode."""
    return [p for p in valid if not p.adaptive]


def best_static(memo: dict[Point | None, float]) -> Point | None:
    """The best static point measured (highest value, the cheapest among equals), or None (none completed)."""
    done = [p for p, v in memo.items() if p is not None and not p.adaptive and v > -math.inf]
    return min(done, key=lambda p: (-memo[p], p.cost_key())) if done else None


def adaptive_of(best: Point | None, valid: Sequence[Point]) -> Point | None:
    """``best`` in adaptive mode when the release's rules accept it there (it is among ``valid``), else None."""
    if best is None:
        return None
    p = best.model_copy(update={"adaptive": True})
    return p if p in valid else None


def confirm(settings: SearchSettings, b: Budgeted) -> Generator[Point | None, float | None, str]:
    """The repeats, as the noise rule asks for them (``b.runs``: every measurement of every point so far, ``-inf``
    when it failed). Round 1: the best ``settings.repeats`` points by their mean are measured again when measured
    once (the noise estimate, :func:`~.decide.noise_estimate`; they are the finalists of :func:`~.decide.decide`).
    Then, while finalists are tied with the highest mean (within ``noise × sqrt(1/n_lead + 1/n)``) and the noise is
    not 0, each tied finalist with fewer than ``MAX_MEASUREMENTS`` measurements is measured once more (more
    measurements shrink the margin until the points are told apart or the cheapest tied one wins on its own).
    Stops when the winner is clear, when the noise is 0 (identical figures: another measurement tells nothing new),
    or at ``MAX_MEASUREMENTS``; the budget is :func:`suggest`'s. Returns why it stopped."""
    runs = b.runs
    candidates = [p for p, got in runs.items() if all(v > -math.inf for v in got)]
    if not candidates or settings.repeats == 0:
        return "no repeats"
    finalists = sorted(candidates, key=lambda p: (-sum(runs[p]) / len(runs[p]), cost(p)))[:settings.repeats]
    for p in finalists:
        if len(runs[p]) < 2:
            yield from b.again(p)
    while True:
        finalists = [p for p in finalists if all(v > -math.inf for v in runs[p])]
        if not finalists:
            return "every finalist failed when measured again"
        noise, tied = tied_set(runs, finalists, REPEAT_SIGMAS)
        if len(tied) <= 1:
            return f"{_label(tied[0])} beats the other finalists by more than the noise ({noise:.1%})"
        if noise == 0.0:
            return "the repeats measured identical figures (no noise)"
        more = [p for p in tied if len(runs[p]) < MAX_MEASUREMENTS]
        if not more:
            return f"{len(tied)} finalists within the noise ({noise:.1%}) after {MAX_MEASUREMENTS} measurements each"
        for p in more:
            yield from b.again(p)


def _label(p: Point | None) -> str:
    return CONTROL_LABEL if p is None else p.label


class _OutOfBudget(Exception):
    pass


class Budgeted:
    """Measurements with a memo (``memo``: first value of every point, ``-inf`` when it failed; ``runs``: every
    value of every point), an exploration budget (new points at most, the control trial included) and ``trials``:
    every trial asked for so far (exploration, the adaptive-mode trial, the repeats)."""

    def __init__(self, budget: int) -> None:
        self.budget, self.used, self.trials = budget, 0, 0
        self.memo: dict[Point | None, float] = {}
        self.runs: dict[Point | None, list[float]] = {}

    def measure(self, p: Point | None) -> Generator[Point | None, float | None, float]:
        """``p``'s value: measured when new (one trial of the budget; raises ``_OutOfBudget`` when spent)."""
        if p in self.memo:
            return self.memo[p]
        if self.used >= self.budget:
            raise _OutOfBudget
        self.used += 1
        self.memo[p] = yield from self.again(p)
        return self.memo[p]

    def again(self, p: Point | None) -> Generator[Point | None, float | None, float]:
        """One more measurement of ``p`` (outside the exploration budget): its value, ``-inf`` when it failed."""
        self.trials += 1
        got = yield p
        value = -math.inf if got is None else got
        self.runs.setdefault(p, []).append(value)
        return value


SPENT = "the exploration budget is spent"
"""Why an exploration stopped when its budget ran out (:func:`_coordinate_ascent` resumes it with the trials the
repeats left)."""


def exploration_budget(settings: SearchSettings, valid: Sequence[Point]) -> int:
    """Trials a search with repeats spends before them (the control trial included): ``max_trial_count`` less
    the adaptive-mode trial and a third of the rest for the repeats (at least ``repeats``, at most half of what is
    left after the control trial and one point); at least 1."""
    room = settings.max_trial_count - adaptive_extra(valid)
    keep = max(settings.repeats, room // 3) if settings.repeats else 0
    return max(room - min(keep, max(room - 2, 0) // 2), 1)


def _finish(settings: SearchSettings, valid: list[Point], b: Budgeted,
            why: str) -> Generator[Point | None, float | None, str]:
    """The adaptive-mode trial of the best static point, then the repeats; returns the reason."""
    if (a := adaptive_of(best_static(b.memo), valid)) is not None and a not in b.memo:
        b.memo[a] = yield from b.again(a)
    repeats = yield from confirm(settings, b)
    return f"{why}; {repeats}"


# --- algorithms ----------------------------------------------------------------------------------------------


def _each(settings: SearchSettings, valid: list[Point], pick: Callable[[list[Point], int], list[Point]]) -> Search:
    """The control trial, then the static points ``pick`` chooses (given the static points and how many fit in
    maxTrialCount), then the adaptive twin of the best of them when the space has one."""
    points = static(valid)
    room = settings.max_trial_count - 1 - adaptive_extra(valid)
    memo: dict[Point | None, float] = {}
    got = yield None
    memo[None] = -math.inf if got is None else got
    for p in pick(points, max(room, 0)):
        got = yield p
        memo[p] = -math.inf if got is None else got
    if (a := adaptive_of(best_static(memo), valid)) is not None:
        _ = yield a
    return "every valid point measured" if room >= len(points) else "its share of maxTrialCount measured"


def _grid(settings: SearchSettings, valid: list[Point]) -> Search:
    return _each(settings, valid, lambda points, room: points[:room])


def _random(settings: SearchSettings, valid: list[Point]) -> Search:
    rng = random.Random(settings.seed)
    return _each(settings, valid, lambda points, room: rng.sample(points, min(len(points), room)))


def _coordinate_ascent(settings: SearchSettings, valid: list[Point]) -> Search:
    space = SpaceIndex(static(valid))
    b = Budgeted(exploration_budget(settings, valid))

    def hill(line: list[Point], i: int) -> Generator[Point | None, float | None, int]:
        """From ``line[i]`` upwards first, downwards only when the first direction did not gain; ``PATIENCE``
        step past a drop within ``CLEAR_DROP`` of the best (which may be the noise), none past a clear drop.
        Returns the best index."""
        top = yield from b.measure(line[i])
        best_j = i
        for direction in (1, -1):
            j, misses = i, 0
            while 0 <= j + direction < len(line) and misses <= PATIENCE:
                j += direction
                v = yield from b.measure(line[j])
                if v > top:
                    top, best_j, misses = v, j, 0
                else:
                    misses += 1 if v >= top * (1.0 - CLEAR_DROP) else PATIENCE + 1
            if best_j != i:
                break
        return best_j

    last: list[Move | None] = [None]

    def walk() -> Generator[Point | None, float | None, str]:
        """4. coordinate hill climbing from the incumbent, first improvement taken (the last improving move first);
        once its neighbours are measured, from the next best point within EXPAND_MARGIN of it. Returns why it
        stopped; raises ``_OutOfBudget``."""
        while (incumbent := best_static(b.memo)) is not None:
            top = b.memo[incumbent]
            open_ = [(p, fresh) for p in sorted((q for q in b.memo if q is not None and not q.adaptive
                                                 and b.memo[q] >= (1.0 - EXPAND_MARGIN) * top),
                                                key=lambda q: (-b.memo[q], q.cost_key()))
                     if (fresh := [(m, q) for m, q in space.neighbours(p) if q not in b.memo])]
            if not open_:
                if len(b.memo) > len(space.points):
                    return "every valid point measured"
                return f"converged: no neighbour of {incumbent.label} or of the points near it beats them"
            p, fresh = open_[0]
            for m, q in sorted(fresh, key=lambda mq: mq[0] != last[0]):
                if (yield from b.measure(q)) > b.memo[p]:
                    last[0] = m
                    break
        return "the space is exhausted"

    try:
        yield from b.measure(None)
        start = settings.start_steps or CHAIN_START_STEPS
        lines: dict[int, tuple[list[Point], int]] = {}
        for topk in space.topks:
            steps = space.steps_of(topk)
            if steps:
                i = min(range(len(steps)), key=lambda j: (abs(steps[j] - start), j))
                lines[topk] = ([space.full(n, topk) for n in steps], i)
        if 1 in lines:  # 2. the chain
            line, i = lines.pop(1)
            best = line[(yield from hill(line, i))]
            lines = {k: (ln, min(range(len(ln)), key=lambda j: (abs(ln[j].num_steps - best.num_steps), j)))
                     for k, (ln, _) in lines.items()}
        for line, i in lines.values():  # 3. one probe per tree width, ...
            yield from b.measure(line[i])
        if lines:  # ... and the climb of the best width's line when it is not far behind
            line, i = max(lines.values(), key=lambda li: (b.memo[li[0][li[1]]], -li[0][0].eagle_topk))
            incumbent = best_static(b.memo)
            if incumbent is not None and b.memo[line[i]] >= WIDTH_CUTOFF * b.memo[incumbent]:
                yield from hill(line, i)
        why = yield from walk()
    except _OutOfBudget:
        why = SPENT
    result = yield from _finish(settings, valid, b, why)
    while why == SPENT and (left := settings.max_trial_count - b.trials) > settings.repeats:
        # 6. trials left after the repeats (the noise rule was satisfied early): the walk resumes with them, less
        # room for the repeats of a new incumbent, and the repeats run again over every measurement so far
        b.budget = b.used + left - settings.repeats
        try:
            why = yield from walk()
        except _OutOfBudget:
            why = SPENT
        result = f"{why} (resumed with the trials the repeats left); {(yield from confirm(settings, b))}"
    return result
