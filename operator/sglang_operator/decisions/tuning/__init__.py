"""Speculative-decoding tuning, pure: the search space and its validity (:mod:`.space`), trial figures and
objectives (:mod:`.objective`), and the ask-and-tell search with its decision (:mod:`.search`). No I/O, no clock:
the control loop runs the trials and hands their results back (issue 17)."""

from sglang_operator.decisions.tuning.objective import (
    LevelFigures,
    Objective,
    ObjectiveKind,
    TrialResult,
    TrialVerdict,
    objective_value,
    speedups,
)
from sglang_operator.decisions.tuning.search import (
    DEFAULT_ALGORITHM,
    Algorithm,
    Decision,
    SearchSettings,
    Suggestion,
    decide,
    noise_estimate,
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
    "Decision",
    "InvalidPoint",
    "LevelFigures",
    "Objective",
    "ObjectiveKind",
    "Point",
    "SearchSettings",
    "SearchSpace",
    "Suggestion",
    "TrialResult",
    "TrialVerdict",
    "Validator",
    "decide",
    "enumerate_space",
    "noise_estimate",
    "objective_value",
    "shape_reason",
    "spec_validator",
    "speedups",
    "suggest",
]
