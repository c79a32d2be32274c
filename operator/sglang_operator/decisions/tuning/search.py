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
     numDraftTokens one value of its set down and up, numSteps ± 1, eagleTopk one value of its set up and down
     (numDraftTokens kept, or the nearest valid value), then ``maxRunningRequests`` / ``cudaGraphMaxBs`` one
     value of their sets down and up when listed, the move that last gained first; the first neighbour that
     beats the incumbent becomes it. Once every neighbour of the incumbent is measured, the walk goes on from the
     best point within ``EXPAND_MARGIN`` (5 %) of it that has unmeasured neighbours (a lucky measurement must not
     end the climb), until no such point is left (converged) or the exploration budget
     (:func:`exploration_budget`: ``max_trial_count`` less the adaptive-mode trial and a third of the rest, kept
     for the repeats) is spent;
  5. the repeats (:func:`confirm`): the best ``repeats`` (3) points measured again, then tied finalists again
     while the noise rule cannot tell them apart (at most ``MAX_MEASUREMENTS`` each).

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

from sglang_operator.decisions.tuning.decide import Decision, cost, decide, noise_estimate, tied_set
from sglang_operator.decisions.tuning.objective import Objective, TrialResult, TrialVerdict, values
from sglang_operator.decisions.tuning.space import CONTROL_LABEL, Point, TuningModel

__all__ = ["DEFAULT_ALGORITHM", "Algorithm", "Decision", "SearchSettings", "Suggestion", "decide",
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


def confirm(settings: SearchSettings, memo: dict[Point | None, float]) -> Generator[Point | None, float | None, str]:
    """The repeats, as the noise rule asks for them (``memo``: every point's first value, ``-inf`` when it failed).
    Round 1: the best ``settings.repeats`` points by their first value are measured again (the noise estimate,
    :func:`~.decide.noise_estimate`; they are the finalists of :func:`~.decide.decide`). Then, while finalists
    are tied with the highest mean (within ``noise × sqrt(1/n_lead + 1/n)``) and the noise is not 0, each tied
    finalist with fewer than ``MAX_MEASUREMENTS`` measurements is measured once more (more measurements shrink
    the margin until the points are told apart or the cheapest tied one wins on its own). Stops when the winner
    is clear, when the noise is 0 (identical figures: another measurement tells nothing new), or at
    ``MAX_MEASUREMENTS``; the budget is :func:`suggest`'s. Returns why it stopped."""
    runs: dict[Point | None, list[float]] = {p: [v] for p, v in memo.items() if v > -math.inf}
    if not runs or settings.repeats == 0:
        return "no repeats"
    finalists = sorted(runs, key=lambda p: (-runs[p][0], cost(p)))[:settings.repeats]
    for p in finalists:
        got = yield p
        runs[p].append(-math.inf if got is None else got)
    while True:
        finalists = [p for p in finalists if all(v > -math.inf for v in runs[p])]
        if not finalists:
            return "every finalist failed when measured again"
        noise, tied = tied_set(runs, finalists)
        if len(tied) <= 1:
            return f"{_label(tied[0])} beats the other finalists by more than the noise ({noise:.1%})"
        if noise == 0.0:
            return "the repeats measured identical figures (no noise)"
        more = [p for p in tied if len(runs[p]) < MAX_MEASUREMENTS]
        if not more:
            return f"{len(tied)} finalists within the noise ({noise:.1%}) after {MAX_MEASUREMENTS} measurements each"
        for p in more:
            got = yield p
            runs[p].append(-math.inf if got is None else got)


def _label(p: Point | None) -> str:
    return CONTROL_LABEL if p is None else p.label


class _OutOfBudget(Exception):
    pass


class Budgeted:
    """Measurements with a memo (``memo``: first value of every point, ``-inf`` when it failed) and an exploration
    budget (trials at most, the control trial included)."""

    def __init__(self, budget: int) -> None:
        self.budget, self.used = budget, 0
        self.memo: dict[Point | None, float] = {}

    def measure(self, p: Point | None) -> Generator[Point | None, float | None, float]:
        """``p``'s value: measured when new (one trial of the budget; raises ``_OutOfBudget`` when spent)."""
        if p in self.memo:
            return self.memo[p]
        if self.used >= self.budget:
            raise _OutOfBudget
        self.used += 1
        got = yield p
        self.memo[p] = -math.inf if got is None else got
        return self.memo[p]


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
        got = yield a
        b.memo[a] = -math.inf if got is None else got
    repeats = yield from confirm(settings, b.memo)
    return f"{why}; {repeats}"


# --- algorithms ----------------------------------------------------------------------------------------------


def _grid(settings: SearchSettings, valid: list[Point]) -> Search:
    points = static(valid)
    room = settings.max_trial_count - 1 - adaptive_extra(valid)
    memo: dict[Point | None, float] = {}
    got = yield None
    memo[None] = -math.inf if got is None else got
    for p in points[:max(room, 0)]:
        got = yield p
        memo[p] = -math.inf if got is None else got
    if (a := adaptive_of(best_static(memo), valid)) is not None:
        _ = yield a
    return "every valid point measured" if room >= len(points) else "its share of maxTrialCount measured"


def _random(settings: SearchSettings, valid: list[Point]) -> Search:
    rng = random.Random(settings.seed)
    points = static(valid)
    room = settings.max_trial_count - 1 - adaptive_extra(valid)
    memo: dict[Point | None, float] = {}
    got = yield None
    memo[None] = -math.inf if got is None else got
    for p in rng.sample(points, min(len(points), max(room, 0))):
        got = yield p
        memo[p] = -math.inf if got is None else got
    if (a := adaptive_of(best_static(memo), valid)) is not None:
        _ = yield a
    return "every valid point measured" if room >= len(points) else "its share of maxTrialCount measured"


Extras = tuple[int | None, int | None]
"""(maxRunningRequests, cudaGraphMaxBs) of a point (``None``: the server's own value)."""


def _extras(p: Point) -> Extras:
    return (p.max_running_requests, p.cuda_graph_max_bs)


def _middle(values: Sequence[int | None]) -> int | None:
    """The middle of the sorted values (the lower one of two), ``None`` when the dimension is not searched."""
    known = sorted({v for v in values if v is not None})
    return known[(len(known) - 1) // 2] if known else None


def _rest(p: Point) -> tuple[int, int, int | None, int | None]:
    """A static point's coordinates but numDraftTokens."""
    return (p.num_steps, p.eagle_topk, p.max_running_requests, p.cuda_graph_max_bs)


class _Space:
    """Index of the valid static points: (numSteps, eagleTopk) → sorted valid draft-token values, at the start
    values of maxRunningRequests / cudaGraphMaxBs (``base``: the middle of each, or the combination nearest it that
    has valid points); every valid static point for the neighbours."""

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
        self.by_rest: dict[tuple[int, int, int | None, int | None], list[int]] = {}
        for p in valid:
            self.by_rest.setdefault(_rest(p), []).append(p.num_draft_tokens)
        for v in self.by_rest.values():
            v.sort()
        self.all_steps = sorted({p.num_steps for p in valid})
        self.all_topks = sorted({p.eagle_topk for p in valid})
        self.mrrs = sorted({p.max_running_requests for p in valid if p.max_running_requests is not None})
        self.bss = sorted({p.cuda_graph_max_bs for p in valid if p.cuda_graph_max_bs is not None})

    def steps_of(self, topk: int) -> list[int]:
        return [s for s in self.steps if (s, topk) in self.ndts]

    def full(self, steps: int, topk: int) -> Point:
        """The fullest tree of ``steps``/``topk``: the most draft tokens of the set (at most steps × topk + 1);
        the chain itself for eagleTopk 1."""
        return Point(num_steps=steps, eagle_topk=topk, num_draft_tokens=self.ndts[(steps, topk)][-1],
                     max_running_requests=self.base[0], cuda_graph_max_bs=self.base[1])

    def _nearest(self, p: Point, **change: int | None) -> Point | None:
        """``p`` with ``change``, its numDraftTokens kept when valid there, else the valid value nearest it (in
        ratio; the smaller of two); None when no such point is valid."""
        q = p.model_copy(update=change)
        if q in self.points:
            return q
        ndts = self.by_rest.get(_rest(q))
        if not ndts:
            return None
        n = min(ndts, key=lambda v: (abs(math.log(v / q.num_draft_tokens)), v))
        return q.model_copy(update={"num_draft_tokens": n})

    def neighbours(self, p: Point) -> list[tuple[Move, Point]]:
        """Stage 4's neighbours of ``p`` with the move to each, in the order tried (see the module docstring)."""
        out: list[tuple[Move, Point]] = []
        ndts = self.by_rest[_rest(p)]
        i = ndts.index(p.num_draft_tokens)
        out += [(("num_draft_tokens", d), p.model_copy(update={"num_draft_tokens": ndts[i + d]}))
                for d in (-1, 1) if 0 <= i + d < len(ndts)]
        for field, axis in (("num_steps", self.all_steps), ("eagle_topk", self.all_topks),
                            ("max_running_requests", self.mrrs), ("cuda_graph_max_bs", self.bss)):
            current = getattr(p, field)
            if current not in axis:
                continue
            i = axis.index(current)
            for d in ((1, -1) if field in ("num_steps", "eagle_topk") else (-1, 1)):
                if 0 <= i + d < len(axis) and (q := self._nearest(p, **{field: axis[i + d]})) is not None:
                    out.append(((field, d), q))
        seen: set[Point] = set()
        return [(m, q) for m, q in out if q != p and not (q in seen or seen.add(q))]  # type: ignore[func-returns-value]


Move = tuple[str, int]
"""A step of stage 4: (the field, -1 or +1 value of its set)."""


def _coordinate_ascent(settings: SearchSettings, valid: list[Point]) -> Search:
    space = _Space(static(valid))
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

    why = "the space is exhausted"
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
        # 4. coordinate hill climbing from the incumbent, first improvement taken (the last improving move
        # first); once its neighbours are measured, from the next best point within EXPAND_MARGIN of it
        last: Move | None = None
        while (incumbent := best_static(b.memo)) is not None:
            top = b.memo[incumbent]
            open_ = [(p, fresh) for p in sorted((q for q in b.memo if q is not None and not q.adaptive
                                                 and b.memo[q] >= (1.0 - EXPAND_MARGIN) * top),
                                                key=lambda q: (-b.memo[q], q.cost_key()))
                     if (fresh := [(m, q) for m, q in space.neighbours(p) if q not in b.memo])]
            if not open_:
                why = f"converged: no neighbour of {incumbent.label} or of the points near it beats them"
                break
            p, fresh = open_[0]
            for m, q in sorted(fresh, key=lambda mq: mq[0] != last):
                if (yield from b.measure(q)) > b.memo[p]:
                    last = m
                    break
        if len(b.memo) > len(space.points):
            why = "every valid point measured"
    except _OutOfBudget:
        why = "the exploration budget is spent"
    return (yield from _finish(settings, valid, b, why))
