"""``algorithmName: TPE``: Optuna's Tree-structured Parzen Estimator (``optuna.samplers.TPESampler``) through its
ask-and-tell interface, the sampler the nearest peer tuner uses. Optuna is a hard dependency of the operator
(``pyproject.toml`` ``dependencies``: ``optuna>=3.6``; there is no ``tpe`` extra), imported only when this algorithm
is chosen, so the operator's start does not pay for it.

Replayable like every algorithm of :func:`~.search.suggest`: at every ask, a fresh in-memory study is rebuilt from
the points measured so far (each told its first value; a failed or pruned one 0) and asked with a fresh sampler
seeded from ``(seed, number of points measured)``. A reused sampler's random state would not survive an operator
restart; this one is the same for the same trials, so a restarted operator asks for the same next point.

Encoding: numSteps, eagleTopk, maxRunningRequests and cudaGraphMaxBs as the index of their value among the
space's values (integers, so that the Parzen estimators see neighbours as near), numDraftTokens as the index among
every draft-token value of the space, mapped to the valid value of the drawn (numSteps, eagleTopk, …) nearest to
it; a drawn combination without a valid point is told the worst value and drawn again. A draw that maps to a
point already measured is told that point's value without a trial and drawn again (at most ``MAX_DRAWS`` draws
per trial; then the first unmeasured point in a seeded order). ``N_STARTUP_TRIALS`` random points before the
estimators take over (Optuna's default is 10: too many for a quarter of a small grid). The search then ends like
``CoordinateAscent``: the adaptive-mode trial, then the repeats (:func:`~.search.confirm`).
"""

from __future__ import annotations

import math
import random
import zlib
from functools import lru_cache
from typing import Any

from sglang_operator.decisions.tuning.search import (
    Budgeted,
    Search,
    SearchSettings,
    _finish,
    _OutOfBudget,
    exploration_budget,
    static,
)
from sglang_operator.decisions.tuning.space import Point

N_STARTUP_TRIALS = 4
"""Random points (the control trial not counted) before TPE's estimators take over."""
MAX_DRAWS = 64
"""Draws at most per trial (a draw of a measured point costs no trial)."""
_FIELDS = ("num_steps", "eagle_topk", "num_draft_tokens", "max_running_requests", "cuda_graph_max_bs")


def sampler_seed(seed: int, measured: int) -> int:
    """The sampler's seed at the ask after ``measured`` points: a function of both only (replayable)."""
    return zlib.crc32(f"{seed}/{measured}".encode()) & 0x7FFFFFFF


class _Encoding:
    """The valid static points as integer indices per dimension (see the module docstring)."""

    def __init__(self, valid: list[Point]) -> None:
        self.points = set(valid)
        self.values: dict[str, list[int]] = {}
        for f in _FIELDS:
            vs = sorted({v for p in valid if (v := getattr(p, f)) is not None})
            if vs:
                self.values[f] = vs
        self.by_rest: dict[tuple[Any, ...], list[int]] = {}
        for p in valid:
            self.by_rest.setdefault(self._rest(p), []).append(p.num_draft_tokens)

    @staticmethod
    def _rest(p: Point) -> tuple[Any, ...]:
        return (p.num_steps, p.eagle_topk, p.max_running_requests, p.cuda_graph_max_bs)

    def params(self, p: Point) -> dict[str, int]:
        return {f: vs.index(getattr(p, f)) for f, vs in self.values.items()}

    def point(self, params: dict[str, int]) -> Point | None:
        """The valid point of drawn indices (numDraftTokens the nearest valid value), None when there is none."""
        chosen = {f: self.values[f][params[f]] for f in self.values}
        want = chosen.pop("num_draft_tokens")
        draft = Point(num_steps=chosen["num_steps"], eagle_topk=chosen["eagle_topk"], num_draft_tokens=want,
                      max_running_requests=chosen.get("max_running_requests"),
                      cuda_graph_max_bs=chosen.get("cuda_graph_max_bs"))
        ndts = self.by_rest.get(self._rest(draft))
        if not ndts:
            return None
        return draft.model_copy(update={"num_draft_tokens": min(ndts, key=lambda v: (abs(math.log(v / want)), v))})


@lru_cache(maxsize=4096)
def _ask(seed: int, enc: _Encoding, history: tuple[tuple[Point, float], ...]) -> Point | None:
    """The next unmeasured point TPE proposes after ``history`` (points in the order measured, their values), or
    None when every valid point is measured. A function of its arguments only (cached: the search replays every
    ask at every :func:`~.search.suggest`)."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    dists: dict[str, optuna.distributions.BaseDistribution] = {
        f: optuna.distributions.IntDistribution(0, len(vs) - 1) for f, vs in enc.values.items()}
    sampler = optuna.samplers.TPESampler(seed=sampler_seed(seed, len(history)),
                                         n_startup_trials=N_STARTUP_TRIALS)
    study = optuna.create_study(direction="maximize", sampler=sampler)
    known: dict[Point, float] = {}
    for p, v in history:
        known.setdefault(p, v)
        study.add_trial(optuna.trial.create_trial(params=enc.params(p), distributions=dists, value=v))
    worst = min((v for v in known.values()), default=0.0)
    for _ in range(MAX_DRAWS):
        trial = study.ask(dists)
        drawn = enc.point(trial.params)
        if drawn is not None and drawn not in known:
            return drawn
        study.tell(trial, worst if drawn is None else known[drawn])
    left = sorted(enc.points - set(known), key=Point.cost_key)
    random.Random(sampler_seed(seed, len(history))).shuffle(left)
    return left[0] if left else None


@lru_cache(maxsize=16)
def _encoding(valid: tuple[Point, ...]) -> _Encoding:
    return _Encoding(list(valid))


def tpe(settings: SearchSettings, valid: list[Point]) -> Search:
    """The TPE search (see the module docstring), as a :data:`~.search.Search` generator."""
    enc = _encoding(tuple(static(valid)))
    b = Budgeted(exploration_budget(settings, valid))
    history: list[tuple[Point, float]] = []
    why = "every valid point measured"
    try:
        yield from b.measure(None)
        while (p := _ask(settings.seed, enc, tuple(history))) is not None:
            v = yield from b.measure(p)
            history.append((p, v if v > -math.inf else 0.0))
    except _OutOfBudget:
        why = "the exploration budget is spent"
    return (yield from _finish(settings, valid, b, why))

