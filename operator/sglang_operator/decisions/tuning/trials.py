"""The tuning controller's pure decisions: an SGLangTuning's spec as the search's inputs, its ``status.trials`` as
the search's finished trials, the next step, and the recommendation written into status (a trial's server spec:
:mod:`.trialspec`, re-exported here).

The controller (:mod:`sglang_operator.control.tuning`) reads the SGLangTuning and its server, asks
:func:`next_step` what to do, does it (apply a trial's workload, wait for it, measure it) and writes what
:func:`recommendation` and the helpers here return. Every fact is in ``status``: a restarted operator rebuilds the
search from ``status.trials`` (:func:`~.search.suggest` replays it) and repeats no finished trial.

Pure: no I/O, no clock (times are passed in).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum

from sglang_operator.api.spec import SGLangServerSpec
from sglang_operator.api.tuning_spec import AlgorithmName, ObjectiveMetric, Parameters, SGLangTuningSpec
from sglang_operator.api.tuning_status import (
    MAX_TRIAL_RECORDS,
    REASON_LIMIT,
    BestPoint,
    SGLangTuningStatus,
    Trial,
    TrialSettings,
    TrialVerdict,
    TuningPhase,
    objective_text,
)
from sglang_operator.api.tuning_status import LevelFigures as ApiLevelFigures
from sglang_operator.decisions.tuning.decide import decide
from sglang_operator.decisions.tuning.objective import (
    LevelWeight,
    Objective,
    ObjectiveKind,
    TrialLevelFigures,
    TrialResult,
    objective_value,
    reference_trial,
)
from sglang_operator.decisions.tuning.search import (
    MAX_MEASUREMENTS,
    Algorithm,
    SearchSettings,
    Suggestion,
    adaptive_extra,
    suggest,
)
from sglang_operator.decisions.tuning.space import InvalidPoint, Point, SearchSpace, enumerate_space, spec_validator
from sglang_operator.decisions.tuning.trialspec import trial_refusal
from sglang_operator.decisions.tuning.trialspec import trial_replicas as trial_replicas
from sglang_operator.decisions.tuning.trialspec import trial_spec as trial_spec
from sglang_operator.decisions.tuning.trialspec import write_memory as write_memory
from sglang_operator.decisions.tuning.trialspec import write_speculative as write_speculative

DEFAULT = Algorithm.COORDINATE_ASCENT
"""The search ``algorithmName: Default`` runs (``docs/tuning.md`` says why)."""
NO_LIMIT_SECONDS = 1e9
"""A goodput limit left unset in the API (it needs one of the two): the search's objective takes both."""
FINISHED = (TrialVerdict.COMPLETED.value, TrialVerdict.FAILED.value, TrialVerdict.PRUNED.value)
"""Verdicts of trials the search has a result for (a Pruned one is replayed as a point never to propose again,
without a value; Invalid ones were never started)."""
TERMINAL_PHASES = (TuningPhase.SUCCEEDED.value, TuningPhase.FAILED.value, TuningPhase.CANCELLED.value)


def trial_name(tuning: str, number: int) -> str:
    """``<tuning>-trial-<n>``: the name of trial ``number`` (0 is the first started one) and of its Shadow
    workload."""
    return f"{tuning}-trial-{number}"


def search_objective(spec: SGLangTuningSpec) -> Objective:
    """The API's ``spec.objective`` as the search's :class:`~.objective.Objective` (an unset goodput limit is
    :data:`NO_LIMIT_SECONDS`), with the workload's levels and weights: with two or more levels a decode or output
    objective is the weighted mean of each level's objective ÷ the control trial's at that level
    (:func:`~.objective.objective_value`)."""
    o = spec.objective
    weights = tuple(LevelWeight(concurrency=c.level, weight=c.weight) for c in spec.workload.concurrency)
    if o.objective_metric_name is ObjectiveMetric.OUTPUT_TOKENS_PER_SECOND:
        return Objective(kind=ObjectiveKind.OUTPUT_TOKENS_PER_SECOND, concurrency=o.concurrency or 1, weights=weights)
    if o.objective_metric_name is ObjectiveMetric.GOODPUT:
        return Objective(kind=ObjectiveKind.GOODPUT,
                         itl_p95_limit_seconds=o.max_p95_inter_token_latency_seconds or NO_LIMIT_SECONDS,
                         ttft_p95_limit_seconds=o.max_p95_time_to_first_token_seconds or NO_LIMIT_SECONDS)
    return Objective(weights=weights)


def level_objective(spec: SGLangTuningSpec, concurrency: int) -> Objective:
    """What "best at level ``concurrency``" means: decode tok/s at concurrency 1 when the tuning's objective is
    decodeTokensPerSecond, else output tok/s at that level."""
    if concurrency == 1 and spec.objective.objective_metric_name is ObjectiveMetric.DECODE_TOKENS_PER_SECOND:
        return Objective()
    return Objective(kind=ObjectiveKind.OUTPUT_TOKENS_PER_SECOND, concurrency=concurrency)


def search_settings(spec: SGLangTuningSpec) -> SearchSettings:
    """``spec.objective``, ``spec.budget`` and ``spec.algorithm`` as the search's settings. ``maxTrialCount`` counts
    every trial started, the control trial and the adaptive-mode trial included (Katib's rule)."""
    name = spec.algorithm.algorithm_name
    algorithm = DEFAULT if name is AlgorithmName.DEFAULT else Algorithm(name.value)
    return SearchSettings(objective=search_objective(spec), max_trial_count=spec.budget.max_trial_count,
                          max_failed_trial_count=spec.budget.max_failed_trial_count, algorithm=algorithm,
                          seed=spec.algorithm.seed, start_steps=spec.algorithm.start_num_steps)


def search_space(params: Parameters) -> SearchSpace:
    """``spec.parameters`` as a :class:`~.space.SearchSpace`. numDraftTokens unset: SGLang's rule (chains get
    numSteps + 1 anyway; each tree every value from the smallest numSteps + 1 to its own numSteps × eagleTopk + 1:
    :attr:`~.space.SearchSpace.derived_draft_tokens`, no point refused for a value nobody listed).
    ``maxRunningRequests`` / ``cudaGraphMaxBs`` unset: not searched (the server's own value); ``adaptive``: the
    points in adaptive mode too."""
    steps = params.num_steps.values()
    topks = params.eagle_topk.values()
    if params.num_draft_tokens is not None:
        ndts: tuple[int, ...] = params.num_draft_tokens.values()
    elif any(k > 1 for k in topks):
        ndts = tuple(range(min(steps) + 1, max(steps) * max(topks) + 2))
    else:
        ndts = ()
    return SearchSpace(num_steps=steps, eagle_topk=topks, num_draft_tokens=ndts,
                       derived_draft_tokens=params.num_draft_tokens is None,
                       max_running_requests=params.max_running_requests.values()
                       if params.max_running_requests is not None else (),
                       cuda_graph_max_bs=params.cuda_graph_max_bs.values() if params.cuda_graph_max_bs is not None
                       else (), adaptive=params.adaptive)


def planned_trials(spec: SGLangTuningSpec, valid: int | Sequence[Point]) -> int:
    """``status.trialsTotal``: the trials the search starts at most unless failures end it, the control trial
    included, never more than maxTrialCount. Grid and Random run the control trial and each valid static point
    once (and the adaptive-mode trial); the default search and TPE may also measure points again (the repeats the
    noise rule asks for, at most ``MAX_MEASUREMENTS`` − 1 of each finalist) and often finish earlier (converged).
    ``valid``: the valid points (:func:`points`; with adaptive-mode points among them the adaptive trial is one
    more), or the number of valid static points."""
    settings = search_settings(spec)
    static, extra = (valid, 0) if isinstance(valid, int) else (sum(not p.adaptive for p in valid),
                                                               adaptive_extra(valid))
    most = 1 + static + extra
    if settings.algorithm in (Algorithm.COORDINATE_ASCENT, Algorithm.TPE):
        most += settings.repeats * (MAX_MEASUREMENTS - 1)
    return min(most, settings.max_trial_count)


def points(params: Parameters, server: SGLangServerSpec,
           in_place: bool = False) -> tuple[list[Point], list[InvalidPoint]]:
    """Valid points (cheapest first) and invalid ones with their reasons: the shape rules, then the spec each trial
    runs (:func:`~.trialspec.trial_spec` of the server's, on :func:`~.trialspec.trial_replicas` pods: ``in_place``,
    the server's replicas, else one Shadow pod) checked with the API's rules and its release's, and a Shadow trial's
    (:func:`~.space.spec_validator`). With ``parameters.adaptive`` the valid points include the adaptive-mode ones
    the release accepts (none before 0.5.11, none of a tree), of which the search runs one. Raises ``ValueError``
    when the server has no ``spec.speculative``."""
    validator = spec_validator(server, trial_replicas(server, in_place), shadow=not in_place)
    return enumerate_space(search_space(params), validator)


def control_refusal(server: SGLangServerSpec, in_place: bool = False) -> str | None:
    """Why the control trial (the server without speculative decoding) cannot run, as :func:`points` validates a
    point (the API's rules on its trial spec, its release's, a Shadow trial's), or None when it can."""
    return trial_refusal(server.dump(), TrialSettings(speculative=False), trial_replicas(server, in_place),
                         shadow=not in_place)


def settings_of(point: Point | None) -> TrialSettings:
    """The API's settings of ``point`` (``None``: the control trial without speculative decoding)."""
    if point is None:
        return TrialSettings(speculative=False)
    return TrialSettings(num_steps=point.num_steps, eagle_topk=point.eagle_topk,
                             num_draft_tokens=point.num_draft_tokens, adaptive=True if point.adaptive else None,
                             max_running_requests=point.max_running_requests,
                             cuda_graph_max_bs=point.cuda_graph_max_bs)


def point_of(settings: TrialSettings) -> Point | None:
    """The search's point of ``settings`` (``None``: the control trial)."""
    if not settings.speculative:
        return None
    return Point(num_steps=settings.num_steps or 1, eagle_topk=settings.eagle_topk or 1,
                 num_draft_tokens=settings.num_draft_tokens or (settings.num_steps or 1) + 1,
                 max_running_requests=settings.max_running_requests, cuda_graph_max_bs=settings.cuda_graph_max_bs,
                 adaptive=bool(settings.adaptive))


def results(trials: Sequence[Trial]) -> list[TrialResult]:
    """The finished trials (Completed, Failed) of ``status.trials`` as the search's results, in order."""
    out = []
    for t in trials:
        if t.verdict not in FINISHED:
            continue
        figures = tuple(TrialLevelFigures(
            concurrency=f.concurrency, decode_tokens_per_second=f.decode_tokens_per_second or 0.0,
            output_tokens_per_second=f.output_tokens_per_second or 0.0,
            itl_p50_seconds=f.inter_token_latency_p50_seconds or 0.0,
            itl_p95_seconds=f.inter_token_latency_p95_seconds or 0.0,
            ttft_p50_seconds=f.time_to_first_token_p50_seconds or 0.0,
            ttft_p95_seconds=f.time_to_first_token_p95_seconds or 0.0,
            accept_length=f.accept_length) for f in t.levels)
        verdict = TrialVerdict(t.verdict)
        out.append(TrialResult(point=point_of(t.settings), verdict=verdict, figures=figures, reason=t.reason))
    return out


def running(trials: Sequence[Trial]) -> Trial | None:
    """The trial started but without a verdict (at most one: trials run one after another), or None."""
    return next((t for t in trials if t.verdict is None), None)


def started_count(trials: Sequence[Trial]) -> int:
    """Trials started so far (every record but the Invalid ones): the next trial's number."""
    return sum(t.verdict != TrialVerdict.INVALID.value for t in trials)


@dataclass(frozen=True)
class Step:
    """What the controller does next: ``resume`` the running trial, ``start`` a new one with ``settings``, or
    ``finish`` (``reason``)."""

    kind: str
    trial: Trial | None = None
    settings: TrialSettings | None = None
    reason: str = ""


DURATION_CAP_SECONDS = 86400
"""The operator's cap on every SGLangTuning's wall time by default (``--max-tuning-duration-seconds``, chart value
``maxTuningDurationSeconds``): one day, well under the 7 days ``budget.maxDurationSeconds`` allows, so no tenant's
tuning keeps a slot of the operator's queue (and its server's hold) for days."""


def next_step(spec: SGLangTuningSpec, status: SGLangTuningStatus, valid: Sequence[Point],
              elapsed_seconds: float, cap_seconds: float | None = None) -> Step:
    """The next step from the status alone: the running trial first (an operator restart measures it again from
    the start: its result was never written), else the search's suggestion (:func:`~.search.suggest`), else
    finish — also when ``budget.maxDurationSeconds`` has passed (``elapsed_seconds`` since ``status.startedAt``), or
    the operator's cap on every tuning's duration ``cap_seconds`` (``--max-tuning-duration-seconds``; None: none) if
    it is shorter, or
    a completed trial's objective reached ``objective.goal`` (Katib's early stop; the recommendation still follows
    the noise rule over the trials measured so far), or when ``status.trials`` has no room for one more record
    (:data:`~sglang_operator.api.tuning_status.MAX_TRIAL_RECORDS`, the CRD's cap). A point recorded ``Invalid`` (refused
    when its trial was to start: the server changed since it was validated) is never proposed again."""
    current = running(status.trials)
    if current is not None:
        return Step("resume", trial=current)
    if len(status.trials) >= MAX_TRIAL_RECORDS:
        return Step("finish", reason=f"status.trials holds {len(status.trials)} records, the most the API stores "
                                     f"({MAX_TRIAL_RECORDS}): no room for another trial")
    if cap_seconds is not None and cap_seconds < spec.budget.max_duration_seconds and elapsed_seconds >= cap_seconds:
        return Step("finish", reason=f"the operator's cap on a tuning's duration reached ({cap_seconds:.0f} s, "
                                     f"--max-tuning-duration-seconds; budget.maxDurationSeconds "
                                     f"{spec.budget.max_duration_seconds})")
    if elapsed_seconds >= spec.budget.max_duration_seconds:
        return Step("finish", reason=f"maxDurationSeconds {spec.budget.max_duration_seconds} reached")
    goal = spec.objective.goal
    reached = next((t for t in status.trials if goal is not None and t.verdict == TrialVerdict.COMPLETED.value
                    and t.objective is not None and t.objective >= goal), None)
    if reached is not None:
        return Step("finish", reason=f"objective.goal {goal:g} reached by {reached.name} "
                                     f"({reached.settings.summary()}: {reached.objective:g})")
    refused = {point_of(t.settings) for t in status.trials if t.verdict == TrialVerdict.INVALID.value}
    s: Suggestion = suggest(search_settings(spec), [p for p in valid if p not in refused], results(status.trials))
    if s.done:
        return Step("finish", reason=s.reason or "search finished")
    return Step("start", settings=settings_of(s.point))


def trial_objective(spec: SGLangTuningSpec, levels: Sequence[ApiLevelFigures],
                    trials: Sequence[Trial] = ()) -> tuple[float | None, list[ApiLevelFigures]]:
    """A measured trial's score and its levels with each level's ``objective`` (:func:`level_objective`).
    ``trials``: ``status.trials`` so far (the trial itself may be among them, without a verdict): with several
    weighted levels the score is relative to the control trial's figures
    (:func:`~.objective.reference_trial`; the trial itself when it is the first to complete, so the control
    trial scores 1.0)."""
    tmp = Trial(name="x", settings=TrialSettings(), verdict=TrialVerdict.COMPLETED.value,
                    levels=list(levels))
    result = results([tmp])[0]
    objective = search_objective(spec)
    out = []
    for f in levels:
        value = objective_value(level_objective(spec, f.concurrency), result)
        out.append(f.model_copy(update={"objective": value}))
    reference = reference_trial(objective, [*results(trials), result]) if objective.weighted else None
    return objective_value(objective, result, reference), out


def prune_verdict(spec: SGLangTuningSpec, trials: Sequence[Trial], settings: TrialSettings,
                  levels: Sequence[ApiLevelFigures]) -> str | None:
    """Whether the running trial with ``settings`` stops as ``Pruned`` after its first measured level ``levels``
    (of two or more), given ``status.trials``: the reason for ``Trial.reason`` (verdict Pruned), or None
    to measure on (:func:`~.prune.prune_reason`: below the incumbent by more than two standard deviations of the
    noise). Never the control trial."""
    from sglang_operator.decisions.tuning.prune import prune_reason

    partial = results([Trial(name="x", settings=settings, verdict=TrialVerdict.COMPLETED.value,
                                 levels=list(levels))])[0]
    return prune_reason(search_objective(spec), results(trials), partial)


class Measured(StrEnum):
    """What a trial's measurement windows gave (:func:`measurement`)."""

    MEASURED = "Measured"
    NO_DATA = "NoData"
    """No request finished in a level's window: no figure, not a failure; measure again with a longer window."""
    FAILED = "Failed"
    """Requests finished and every one of them failed."""


WINDOW_LIMIT_SECONDS = 3600
"""The longest window :func:`longer_window` asks for (``workload.secondsPerLevel``'s upper bound)."""


def measurement(levels: Sequence[ApiLevelFigures]) -> tuple[Measured, str]:
    """The outcome of a trial's measured levels, with a message: ``Failed`` when requests finished and none
    succeeded at any level ("every request failed"); else ``NoData`` when a level (or none at all) had no request
    finish inside its windows (a window shorter than one answer: "no data, extend the window", never a
    failure); else ``Measured``."""
    finished = sum(f.requests or 0 for f in levels)
    failed = sum(f.failed_requests or 0 for f in levels)
    if finished > 0 and failed >= finished:
        return Measured.FAILED, f"every request failed ({failed} of {finished})"
    empty = [f.concurrency for f in levels if not f.requests]
    if not levels or empty:
        where = ", ".join(str(c) for c in empty) or "every level"
        return Measured.NO_DATA, (f"no request finished within the measurement window at concurrency {where}: no "
                                  "data (answers take longer than workload.secondsPerLevel); measuring again with a "
                                  "longer window")
    return Measured.MEASURED, ""


def longer_window(seconds_per_level: int, longest_request_seconds: float | None = None) -> int | None:
    """The window to measure again with after :data:`Measured.NO_DATA`: twice ``seconds_per_level``, at least
    twice the longest request seen (``longest_request_seconds``, when known), at most
    :data:`WINDOW_LIMIT_SECONDS`; None when ``seconds_per_level`` is that already (then the trial is Failed: no
    request finishes within the longest window)."""
    if seconds_per_level >= WINDOW_LIMIT_SECONDS:
        return None
    want = max(2 * seconds_per_level, math.ceil(2 * longest_request_seconds) if longest_request_seconds else 0)
    return min(want, WINDOW_LIMIT_SECONDS)


def _best_point(trials: Sequence[Trial], objective: Objective, concurrency: int | None,
                speedup_level: int) -> BestPoint | None:
    found = results(trials)
    d = decide(found, objective)
    if d is None:
        return None
    settings = settings_of(d.best)
    name = next((t.name for t in trials if t.verdict == TrialVerdict.COMPLETED.value
                 and point_of(t.settings) == d.best), "")
    value = round(d.value, 3)
    return BestPoint(concurrency=concurrency, trial=name, settings=settings, summary=settings.summary(),
                     objective=value, objective_summary=objective_text(value, objective.weighted),
                     speedup=d.speedup.get(speedup_level))


def recommendation(spec: SGLangTuningSpec, trials: Sequence[Trial]) -> tuple[BestPoint | None,
                                                                                    list[BestPoint]]:
    """The best point overall (the search's :func:`~.search.decide`: the noise rule and the cheaper point among
    ties) and at each concurrency level, with the speedup over the control trial (output tok/s, at the objective's
    level overall)."""
    objective = search_objective(spec)
    best = _best_point(trials, objective, None, objective.concurrency)
    per_level = [b for c in spec.workload.levels()
                 if (b := _best_point(trials, level_objective(spec, c), c, c)) is not None]
    return best, per_level


def counts(trials: Sequence[Trial]) -> dict[str, int]:
    """``trialsCompleted`` / ``trialsFailed`` / ``trialsPruned`` / ``trialsInvalid`` of ``status.trials``."""
    def n(v: TrialVerdict) -> int:
        return sum(t.verdict == v.value for t in trials)

    return {"trials_completed": n(TrialVerdict.COMPLETED), "trials_failed": n(TrialVerdict.FAILED),
            "trials_pruned": n(TrialVerdict.PRUNED)}


INVALID_RECORDS = 16
"""Invalid points recorded in ``status.trials`` at most (with their reasons); ``trialsInvalid`` counts them all."""


def invalid_room(spec: SGLangTuningSpec) -> int:
    """The Invalid points the first step records at most: :data:`INVALID_RECORDS`, fewer when the trials the budget
    may start (``maxTrialCount``) and one refused start would not fit beside them in
    :data:`~sglang_operator.api.tuning_status.MAX_TRIAL_RECORDS` (:func:`next_step` finishes at that cap anyway)."""
    return max(0, min(INVALID_RECORDS, MAX_TRIAL_RECORDS - spec.budget.max_trial_count - 1))


def invalid_records(tuning: str, invalid: Sequence[InvalidPoint], room: int) -> list[Trial]:
    """Invalid points as ``status.trials`` records (verdict Invalid, the release's reason), at most ``room``."""
    return [Trial(name=f"{tuning}-invalid-{i}", settings=settings_of(p.point),
                      verdict=TrialVerdict.INVALID.value, reason=api_reason(p.reason))
            for i, p in enumerate(invalid[:max(room, 0)])]


def api_reason(text: str) -> str:
    """``text`` cut to :data:`~sglang_operator.api.tuning_status.REASON_LIMIT` characters (its end kept: SGLang's
    error is last in a crash tail)."""
    from sglang_operator.decisions.pods import tail

    return tail(text, REASON_LIMIT)
