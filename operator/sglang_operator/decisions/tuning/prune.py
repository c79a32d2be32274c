"""Pruning, Katib's early stopping for one trial: after the first of a trial's concurrency levels is measured (a
workload of one level is measured whole: nothing is left to save), whether it cannot beat the incumbent within the
noise, so that it stops as ``Pruned`` and frees its GPUs.

The rule (:func:`prune_reason`): let I be the incumbent's value (:func:`~.decide.decide` over the completed trials:
its mean of n measurements), σ the relative noise (:func:`~.decide.noise_estimate` of the repeats, at least
:data:`NOISE_FLOOR` — before any repeat it is unknown, and 2 % is about one trial-to-trial draw on a real server),
and B the trial's optimistic value from what it measured so far. The trial is pruned when

    B × (1 + PRUNE_SIGMAS × σ × sqrt(1 + 1/n)) < I

that is, when it is below the incumbent by more than ``PRUNE_SIGMAS`` (2) standard deviations of the difference
between one measurement and a mean of n: a point truly as good as the incumbent is pruned with a probability of
about 2 % (one-sided, normal noise). With the noise floor and n = 1 the margin is 5.7 %.

B is the trial's objective when the level it needs is measured (decode or output objective of one level). For a
weighted objective of several levels, B takes each unmeasured level at the best ratio any completed trial measured
there so far: an assumption (a point does not beat every point measured so far at a level it was not measured at),
so pruning waits until :data:`MIN_COMPLETED` speculative points completed. ``goodput`` is never pruned early (its
best level may be any). The control trial (the reference) and a repeat of a point measured before (the noise
rule's measurement) are never pruned, and a pruned trial is never
recommended (it has no objective value: :func:`~.objective.objective_value`), is not proposed again and counts
against no failure budget.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from sglang_operator.api.tuning_status import TrialVerdict
from sglang_operator.decisions.tuning.decide import decide
from sglang_operator.decisions.tuning.objective import (
    Objective,
    ObjectiveKind,
    TrialResult,
    objective_value,
    reference_trial,
)

PRUNE_SIGMAS = 2.0
"""Standard deviations of the difference a trial must be below the incumbent by to be pruned."""
NOISE_FLOOR = 0.02
"""The relative noise assumed at least (before the repeats measured it, and when they measured less)."""
MIN_COMPLETED = 3
"""Completed speculative points before a weighted objective's trials may be pruned."""


def optimistic_value(objective: Objective, trials: Sequence[TrialResult], partial: TrialResult) -> float | None:
    """The best value ``partial`` (the figures measured so far, verdict Completed) can still reach, or None when
    it cannot be bounded (see the module docstring)."""
    if objective.kind is ObjectiveKind.GOODPUT:
        return None
    if not objective.weighted:
        return objective_value(objective, partial)
    reference = reference_trial(objective, trials)
    done = [t for t in trials if t.verdict is TrialVerdict.COMPLETED and t.point is not None]
    if reference is None or len({t.point for t in done}) < MIN_COMPLETED:
        return None
    total = 0.0
    for w in objective.weights:
        ref = reference.level(w.concurrency)
        if ref is None or objective.level_value(ref) <= 0:
            return None
        mine = partial.level(w.concurrency)
        if mine is not None:
            ratio = objective.level_value(mine) / objective.level_value(ref)
        else:
            seen = [objective.level_value(f) for t in done if (f := t.level(w.concurrency)) is not None]
            if not seen:
                return None
            ratio = max(seen) / objective.level_value(ref)
        total += w.weight * ratio
    return total / sum(w.weight for w in objective.weights)


def prune_reason(objective: Objective, trials: Sequence[TrialResult], partial: TrialResult) -> str | None:
    """Why the running trial ``partial`` (its point, the figures of its first measured level or repetition) stops
    as Pruned given the finished ``trials``, or None when it may still beat the incumbent (the rule and its margin:
    the module docstring)."""
    if partial.point is None or any(t.point == partial.point for t in trials):
        return None  # the control trial, or a repeat: the noise rule's measurement, never cut short
    d = decide(trials, objective)
    if d is None:
        return None
    bound = optimistic_value(objective, trials, partial)
    if bound is None:
        return None
    noise = max(d.noise, NOISE_FLOOR)
    margin = PRUNE_SIGMAS * noise * math.sqrt(1.0 + 1.0 / d.measurements)
    if bound * (1.0 + margin) >= d.value:
        return None
    unit = "× the control trial" if objective.weighted else objective.unit
    return (f"pruned: at most {bound:.3g} {unit} from what it measured, below the incumbent {d.label} "
            f"({d.value:.3g}) by more than {PRUNE_SIGMAS:g} standard deviations of the noise "
            f"({margin:.1%}; noise {noise:.1%})")
