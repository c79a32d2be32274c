"""The recommendation from finished trials, and the noise rule it follows (shared with the search's repeats,
:func:`~.search.suggest`, and with pruning, :mod:`.prune`).

The noise is measured, not assumed: the pooled relative standard deviation of the points measured more than once
(:func:`noise_estimate`: the search measures its finalists again for it). Two means of n₁ and n₂ measurements are
told apart when they differ by more than ``noise × sqrt(1/n₁ + 1/n₂)`` (one standard deviation of their
difference) relative to the higher one; closer points are *tied*. Among tied points the control trial (no
speculative decoding) wins: speculation must beat it by more than the noise. Otherwise the highest mean wins (the
best estimate; the cheapest of tied points lost up to 2.6 % of the optimum in ``bench/tuning.py``); ``tied``
names the others, and among equal means the cheaper point (:meth:`~.space.Point.cost_key`) comes first.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from pydantic import Field

from sglang_operator.decisions.tuning.objective import Objective, TrialResult, speedups, values
from sglang_operator.decisions.tuning.space import CONTROL_LABEL, Point, TuningModel


class TuningDecision(TuningModel):
    """The recommendation from the finished trials. ``best`` is ``None`` when no speculative point beats the
    control trial by more than the noise (speculation does not pay off). ``noise`` is the pooled relative
    standard deviation of repeated measurements (0 without repeats); ``tied`` the points within it of the highest
    mean (within ``noise × sqrt(1/n_lead + 1/n)``, the noise of a difference of means of n and n_lead
    measurements), highest mean first; ``best`` is the first of them, or the control trial when it is among
    them; ``speedup`` per concurrency level is ``best`` ÷ the control trial (output tok/s).
    ``measurements``: how many completed measurements ``best`` has."""

    best: Point | None
    value: float
    runner_up: Point | None = None
    runner_up_value: float | None = None
    noise: float = 0.0
    tied: tuple[str, ...] = ()
    measured_points: int = 0
    measurements: int = 1
    speedup: dict[int, float] = Field(default_factory=dict)
    reason: str = ""

    @property
    def label(self) -> str:
        return self.best.label if self.best is not None else CONTROL_LABEL


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


def cost(p: Point | None) -> tuple[int, ...]:
    """:meth:`Point.cost_key`, the control trial (no speculative decoding) cheapest of all."""
    return (0, 0, 0) if p is None else p.cost_key()


def measured(trials: Sequence[TrialResult], objective: Objective) -> dict[Point | None, list[float]]:
    """The objective values of every point's completed trials, in order (:func:`~.objective.values`)."""
    out: dict[Point | None, list[float]] = {}
    for t, v in zip(trials, values(objective, trials), strict=True):
        if v is not None:
            out.setdefault(t.point, []).append(v)
    return out


def tied_set(runs: dict[Point | None, list[float]], finalists: Sequence[Point | None],
             sigmas: float = 1.0) -> tuple[float, list[Point | None]]:
    """The noise and the finalists tied with the highest mean (its own first): those within
    ``sigmas × noise × sqrt(1/n_lead + 1/n_p)`` of it, relative. ``finalists`` must not be empty."""
    noise = noise_estimate(runs)
    means = {p: sum(runs[p]) / len(runs[p]) for p in finalists}
    ranked = sorted(finalists, key=lambda p: (-means[p], cost(p)))
    lead, top = ranked[0], means[ranked[0]]
    tied = [p for p in ranked
            if top - means[p] <= top * sigmas * noise * math.sqrt(1.0 / len(runs[lead]) + 1.0 / len(runs[p]))]
    return noise, tied


def decide(trials: Sequence[TrialResult], objective: Objective) -> TuningDecision | None:
    """The recommendation (``None`` before any completed trial). The finalists are the points measured more than
    once (the search's repeats; every point when none was); the highest mean among them wins, unless the control
    trial is within the noise of it (then speculation does not pay off and the control trial wins). A point
    measured once cannot win over repeated ones: its one figure is as likely the lucky draw of the noise as the
    truth. Failed and pruned trials have no value and never win."""
    runs = measured(trials, objective)
    if not runs:
        return None
    means = {p: sum(vs) / len(vs) for p, vs in runs.items()}
    finalists = [p for p, vs in runs.items() if len(vs) > 1] or list(runs)
    noise, tied = tied_set(runs, finalists)
    top = means[tied[0]]
    winner = None if None in tied else tied[0]
    ranked = sorted(finalists, key=lambda p: (-means[p], cost(p)))
    others = [p for p in ranked if p != winner]
    runner = others[0] if others else None
    if winner is None and len(tied) > 1:
        reason = (f"no speculative point beats the control trial by more than the noise ({noise:.1%}; highest "
                  f"mean {_fmt(top, objective)})")
    elif len(tied) > 1:
        reason = (f"the highest mean {_fmt(top, objective)}; {len(tied) - 1} more within the noise ({noise:.1%}): "
                  + ", ".join(_label(p) for p in tied[1:]))
    elif runner is not None:
        reason = (f"beats {_label(runner)} ({_fmt(means[runner], objective)}) by more than the noise "
                  f"({noise:.1%})")
    else:
        reason = "the only point measured"
    return TuningDecision(best=winner, value=means[winner], runner_up=runner,
                    runner_up_value=means[runner] if runner is not None else None, noise=noise,
                    tied=tuple(_label(p) for p in tied), measured_points=len(means), measurements=len(runs[winner]),
                    speedup=speedups(trials, winner) if winner is not None else {}, reason=reason)


def _fmt(value: float, objective: Objective) -> str:
    return f"{value:.3f}× the control trial" if objective.weighted else f"{value:.1f} {objective.unit}"


def _label(p: Point | None) -> str:
    return CONTROL_LABEL if p is None else p.label
