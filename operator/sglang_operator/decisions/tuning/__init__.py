"""Speculative-decoding tuning, pure. No I/O, no clock: the control loop runs the trials and hands their
results back.

- :mod:`.deadline`: how long a running trial may go on (its cutoff, in every state).
- :mod:`.decide`: the recommendation from the finished trials, and the noise rule it follows.
- :mod:`.hold`: an InPlace tuning's hold on its server (``status.tuningHold``).
- :mod:`.inplace`: what the server's loop does about the InPlace tunings that name it.
- :mod:`.known_best`: the known best settings across a namespace's servers, from the tunings' figures.
- :mod:`.lifecycle`: the phases of one SGLangTuning and the records its step writes.
- :mod:`.neighbours`: the search's index of the space and the neighbours of a point.
- :mod:`.objective`: what one trial measured (:class:`~.objective.TrialLevelFigures`) and the objectives.
- :mod:`.prune`: pruning: whether a trial stops after its first level.
- :mod:`.queue`: which SGLangTunings may run now (the operator's tuning queue).
- :mod:`.search`: the ask-and-tell search over the valid points, rebuilt from the finished trials.
- :mod:`.space`: the search space: which points exist and which are valid.
- :mod:`.tally`: a trial level's figures aggregated online, in bounded memory.
- :mod:`.tpe`: ``algorithmName: TPE``, Optuna's Tree-structured Parzen Estimator.
- :mod:`.trialload`: the bound on a trial's request rate and the rules of an invalid measurement.
- :mod:`.trialspec`: a trial's server spec (one workload, never canaried nor scaled) and whether it may run.
- :mod:`.trials`: the tuning controller's pure decisions (the spec as the search's inputs, the next step).
- :mod:`.windows`: the figures of a trial's measurement windows."""

from sglang_operator.decisions.tuning.decide import TuningDecision, decide, noise_estimate
from sglang_operator.decisions.tuning.objective import (
    LevelWeight,
    Objective,
    ObjectiveKind,
    TrialLevelFigures,
    TrialResult,
    TrialVerdict,
    objective_value,
    reference_trial,
    speedups,
)
from sglang_operator.decisions.tuning.search import (
    DEFAULT_ALGORITHM,
    Algorithm,
    SearchSettings,
    Suggestion,
    suggest,
)
from sglang_operator.decisions.tuning.space import (
    CONTROL_LABEL,
    InvalidPoint,
    Point,
    SearchSpace,
    Validator,
    enumerate_space,
    shape_reason,
    spec_validator,
)

__all__ = [
    "CONTROL_LABEL",
    "DEFAULT_ALGORITHM",
    "Algorithm",
    "InvalidPoint",
    "LevelWeight",
    "Objective",
    "ObjectiveKind",
    "Point",
    "SearchSettings",
    "SearchSpace",
    "Suggestion",
    "TrialLevelFigures",
    "TrialResult",
    "TrialVerdict",
    "TuningDecision",
    "Validator",
    "decide",
    "enumerate_space",
    "noise_estimate",
    "objective_value",
    "reference_trial",
    "shape_reason",
    "spec_validator",
    "speedups",
    "suggest",
]
