"""Speculative-decoding tuning, pure: the search space and its validity (:mod:`.space`), trial figures and
objectives (:mod:`.objective`), the ask-and-tell search (:mod:`.search`; its index of the space and the neighbours
of a point, :mod:`.neighbours`; :mod:`.tpe`), the recommendation and its noise rule (:mod:`.decide`), pruning
(:mod:`.prune`). No I/O, no clock: the control loop runs the trials and hands their results back."""

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
