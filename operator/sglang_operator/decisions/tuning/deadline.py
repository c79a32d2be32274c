"""PURE: how long a running trial may go on — the deadline of a trial in every state.

A trial waits for its pods to be Ready until ``budget.trialDeadlineSeconds`` (control/tuning.py); once Ready, its
measurement (io/trialbench.py) may still wait: for the operator's trial streams, for a window measured again for
want of data, for a pod that never answers. :func:`trial_cutoff` bounds all of it: no trial runs past the tuning's
own end by more than one trial's planned length, so the operator's ``--max-tuning-duration-seconds`` holds for
every tuning, in every state of its running trial.
"""

from __future__ import annotations

import datetime as dt

from sglang_operator.api.tuning_spec import SGLangTuningSpec, Workload

DEADLINE_GRACE_SECONDS = 60.0
"""Seconds a running trial is given beyond its planned end before it is cut (:func:`trial_cutoff`): scrapes at the
window boundaries, the requests in flight finishing."""


def nominal_measurement_seconds(workload: Workload) -> float:
    """Seconds a trial's measurement takes as planned (io/trialbench.py): the first level's ``warmupSeconds``, then
    per level its settling (at most ``warmupSeconds``) and ``repetitions`` × ``secondsPerLevel``."""
    per_level = workload.warmup_seconds + workload.repetitions * workload.seconds_per_level
    return float(workload.warmup_seconds + len(workload.concurrency) * per_level)


def trial_cutoff(spec: SGLangTuningSpec, started_at: dt.datetime, cap_seconds: float | None = None) -> dt.datetime:
    """The time past which a running trial is cut, whatever it waits for (its pods, the operator's trial streams,
    a window measured again for want of data, a pod that never answers): the tuning's end (``startedAt`` of the
    tuning ``started_at`` + ``budget.maxDurationSeconds``, or the operator's ``cap_seconds`` if shorter), plus one
    trial's ``budget.trialDeadlineSeconds`` to be Ready and its planned measurement
    (:func:`nominal_measurement_seconds`), plus :data:`DEADLINE_GRACE_SECONDS`. So a trial started just before the
    end still runs as planned, and no tuning keeps its slot longer than that."""
    budget = float(spec.budget.max_duration_seconds)
    if cap_seconds is not None:
        budget = min(budget, cap_seconds)
    return started_at + dt.timedelta(seconds=budget + spec.budget.trial_deadline_seconds
                                     + nominal_measurement_seconds(spec.workload) + DEADLINE_GRACE_SECONDS)


def cut_reason(cutoff: dt.datetime) -> str:
    """``Trial.reason`` of a trial cut at :func:`trial_cutoff` ``cutoff``."""
    return (f"still running at the tuning's deadline ({cutoff.isoformat(timespec='seconds')}: its "
            "budget.maxDurationSeconds or the operator's --max-tuning-duration-seconds, plus one trial's "
            "trialDeadlineSeconds and planned measurement): cut")
