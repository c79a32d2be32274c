"""The tuning controller's pure decisions: an SGLangTuning's spec as the search's inputs, its ``status.trials`` as
the search's finished trials, a trial's server spec, and the recommendation written into status.

The controller (:mod:`sglang_operator.control.tuning`) reads the SGLangTuning and its server, asks
:func:`next_step` what to do, does it (apply a trial's workload, wait for it, measure it) and writes what
:func:`recommendation` and the helpers here return. Every fact is in ``status``: a restarted operator rebuilds the
search from ``status.trials`` (:func:`~.search.suggest` replays it) and repeats no finished trial.

Pure: no I/O, no clock (times are passed in).
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sglang_operator.api import tuning as api
from sglang_operator.api.spec import SGLangServerSpec
from sglang_operator.decisions.tuning.objective import LevelFigures, Objective, ObjectiveKind, TrialResult
from sglang_operator.decisions.tuning.objective import TrialVerdict as SearchVerdict
from sglang_operator.decisions.tuning.search import (
    Algorithm,
    SearchSettings,
    Suggestion,
    adaptive_extra,
    decide,
    suggest,
)
from sglang_operator.decisions.tuning.space import InvalidPoint, Point, SearchSpace, enumerate_space, spec_validator

NO_LIMIT_SECONDS = 1e9
"""A goodput limit left unset in the API (it needs one of the two): the search's objective takes both."""
FINISHED = (api.TrialVerdict.COMPLETED.value, api.TrialVerdict.FAILED.value)
"""Verdicts of trials the search has a result for (Pruned and Invalid ones are not replayed)."""
TERMINAL_PHASES = (api.TuningPhase.SUCCEEDED.value, api.TuningPhase.FAILED.value, api.TuningPhase.CANCELLED.value)


def trial_name(tuning: str, number: int) -> str:
    """``<tuning>-trial-<n>``: the name of trial ``number`` (0 is the first started one) and of its Shadow
    workload."""
    return f"{tuning}-trial-{number}"


def search_objective(spec: api.SGLangTuningSpec) -> Objective:
    """The API's ``spec.objective`` as the search's :class:`~.objective.Objective` (an unset goodput limit is
    :data:`NO_LIMIT_SECONDS`)."""
    o = spec.objective
    if o.objective_metric_name is api.ObjectiveMetric.OUTPUT_TOKENS_PER_SECOND:
        return Objective(kind=ObjectiveKind.OUTPUT_TOKENS_PER_SECOND, concurrency=o.concurrency or 1)
    if o.objective_metric_name is api.ObjectiveMetric.GOODPUT:
        return Objective(kind=ObjectiveKind.GOODPUT,
                         itl_p95_limit_seconds=o.max_p95_inter_token_latency_seconds or NO_LIMIT_SECONDS,
                         ttft_p95_limit_seconds=o.max_p95_time_to_first_token_seconds or NO_LIMIT_SECONDS)
    return Objective()


def level_objective(spec: api.SGLangTuningSpec, concurrency: int) -> Objective:
    """What "best at level ``concurrency``" means: decode tok/s at concurrency 1 when the tuning's objective is
    decodeTokensPerSecond, else output tok/s at that level."""
    if concurrency == 1 and spec.objective.objective_metric_name is api.ObjectiveMetric.DECODE_TOKENS_PER_SECOND:
        return Objective()
    return Objective(kind=ObjectiveKind.OUTPUT_TOKENS_PER_SECOND, concurrency=concurrency)


def search_settings(spec: api.SGLangTuningSpec) -> SearchSettings:
    """``spec.objective``, ``spec.budget`` and ``spec.algorithm`` as the search's settings. ``maxTrialCount`` does not
    count the control trial (the API's rule), so the search gets one more."""
    name = spec.algorithm.algorithm_name
    algorithm = Algorithm.COORDINATE_ASCENT if name is api.AlgorithmName.DEFAULT else Algorithm(name.value)
    return SearchSettings(objective=search_objective(spec), max_trial_count=spec.budget.max_trial_count + 1,
                          max_failed_trial_count=spec.budget.max_failed_trial_count, algorithm=algorithm,
                          seed=spec.algorithm.seed)


def search_space(params: api.Parameters) -> SearchSpace:
    """``spec.parameters`` as a :class:`~.space.SearchSpace`. numDraftTokens unset: SGLang's rule (chains get
    numSteps + 1 anyway; trees every value from the smallest numSteps + 1 to numSteps × eagleTopk + 1, the
    larger ones then refused per point by the shape rule). ``maxRunningRequests`` / ``cudaGraphMaxBs`` unset: not
    searched (the server's own value); ``adaptive``: the points in adaptive mode too."""
    steps = params.num_steps.values()
    topks = params.eagle_topk.values()
    if params.num_draft_tokens is not None:
        ndts: tuple[int, ...] = params.num_draft_tokens.values()
    elif any(k > 1 for k in topks):
        ndts = tuple(range(min(steps) + 1, max(steps) * max(topks) + 2))
    else:
        ndts = ()
    return SearchSpace(num_steps=steps, eagle_topk=topks, num_draft_tokens=ndts,
                       max_running_requests=params.max_running_requests.values()
                       if params.max_running_requests is not None else (),
                       cuda_graph_max_bs=params.cuda_graph_max_bs.values() if params.cuda_graph_max_bs is not None
                       else (), adaptive=params.adaptive)


def planned_trials(spec: api.SGLangTuningSpec, valid: int | Sequence[Point]) -> int:
    """``status.trialsTotal``: the trials the search runs unless failures end it, the control trial included. Grid
    and Random run each of the valid static points once (at most maxTrialCount); the default search spends the
    whole maxTrialCount, its last trials measuring the finalists again (the noise estimate). ``valid``: the valid
    points (:func:`points`; with adaptive-mode points among them the adaptive trial is one more, at most), or the
    number of valid static points."""
    settings = search_settings(spec)
    static, extra = (valid, 0) if isinstance(valid, int) else (sum(not p.adaptive for p in valid),
                                                               adaptive_extra(valid))
    if settings.algorithm is Algorithm.COORDINATE_ASCENT and settings.repeats:
        return settings.max_trial_count + extra
    return min(static + 1, settings.max_trial_count) + extra


def points(params: api.Parameters, server: SGLangServerSpec) -> tuple[list[Point], list[InvalidPoint]]:
    """Valid points (cheapest first) and invalid ones with their reasons: the shape rules, then the server's spec
    rendered with each point and checked with its release's rules (:func:`~.space.spec_validator`). With
    ``parameters.adaptive`` the valid points include the adaptive-mode ones the release accepts (none before
    0.5.11, none of a tree), of which the search runs one. Raises ``ValueError`` when the server has no
    ``spec.speculative``."""
    return enumerate_space(search_space(params), spec_validator(server))


def settings_of(point: Point | None) -> api.TrialSettings:
    """The API's settings of ``point`` (``None``: the control trial without speculative decoding)."""
    if point is None:
        return api.TrialSettings(speculative=False)
    return api.TrialSettings(num_steps=point.num_steps, eagle_topk=point.eagle_topk,
                             num_draft_tokens=point.num_draft_tokens, adaptive=True if point.adaptive else None,
                             max_running_requests=point.max_running_requests,
                             cuda_graph_max_bs=point.cuda_graph_max_bs)


def point_of(settings: api.TrialSettings) -> Point | None:
    """The search's point of ``settings`` (``None``: the control trial)."""
    if not settings.speculative:
        return None
    return Point(num_steps=settings.num_steps or 1, eagle_topk=settings.eagle_topk or 1,
                 num_draft_tokens=settings.num_draft_tokens or (settings.num_steps or 1) + 1,
                 max_running_requests=settings.max_running_requests, cuda_graph_max_bs=settings.cuda_graph_max_bs,
                 adaptive=bool(settings.adaptive))


def trial_spec(server_spec: Mapping[str, Any], settings: api.TrialSettings, replicas: int = 1) -> dict[str, Any]:
    """The server's spec (camelCase dict) with the trial's settings: ``spec.speculative`` without it for the
    control trial, else its numSteps / eagleTopk / numDraftTokens replaced and ``adaptive`` as the settings say
    (``enabled: true``, the server's ConfigMap kept; removed for a static trial); ``spec.memory.maxRunningRequests``
    and ``spec.memory.cudaGraphMaxBs`` when set (the builders render the latter under the release's flag name:
    ``--cuda-graph-max-bs`` up to 0.5.13, ``--cuda-graph-max-bs-decode`` from 0.5.14); ``replicas`` pods. A
    copy."""
    spec = copy.deepcopy(dict(server_spec))
    spec["replicas"] = replicas
    if not settings.speculative:
        spec.pop("speculative", None)
        return spec
    spec_dec = dict(spec.get("speculative") or {})
    for key, value in (("numSteps", settings.num_steps), ("eagleTopk", settings.eagle_topk),
                       ("numDraftTokens", settings.num_draft_tokens)):
        if value is not None:
            spec_dec[key] = value
    if settings.adaptive:
        adaptive = spec_dec.get("adaptive")
        spec_dec["adaptive"] = {**(adaptive if isinstance(adaptive, dict) else {}), "enabled": True}
    else:
        spec_dec.pop("adaptive", None)
    spec["speculative"] = spec_dec
    for key, value in (("maxRunningRequests", settings.max_running_requests),
                       ("cudaGraphMaxBs", settings.cuda_graph_max_bs)):
        if value is not None:
            memory = spec.get("memory")
            spec["memory"] = {**(memory if isinstance(memory, dict) else {}), key: value}
    return spec


def results(trials: Sequence[api.Trial]) -> list[TrialResult]:
    """The finished trials (Completed, Failed) of ``status.trials`` as the search's results, in order."""
    out = []
    for t in trials:
        if t.verdict not in FINISHED:
            continue
        figures = tuple(LevelFigures(
            concurrency=f.concurrency, decode_tokens_per_second=f.decode_tokens_per_second or 0.0,
            output_tokens_per_second=f.output_tokens_per_second or 0.0,
            itl_p50_seconds=f.inter_token_latency_p50_seconds or 0.0,
            itl_p95_seconds=f.inter_token_latency_p95_seconds or 0.0,
            ttft_p50_seconds=f.time_to_first_token_p50_seconds or 0.0,
            ttft_p95_seconds=f.time_to_first_token_p95_seconds or 0.0,
            accept_length=f.accept_length) for f in t.levels)
        verdict = SearchVerdict.COMPLETED if t.verdict == api.TrialVerdict.COMPLETED.value else SearchVerdict.FAILED
        out.append(TrialResult(point=point_of(t.settings), verdict=verdict, figures=figures, reason=t.reason))
    return out


def running(trials: Sequence[api.Trial]) -> api.Trial | None:
    """The trial started but without a verdict (at most one: trials run one after another), or None."""
    return next((t for t in trials if t.verdict is None), None)


def started_count(trials: Sequence[api.Trial]) -> int:
    """Trials started so far (every record but the Invalid ones): the next trial's number."""
    return sum(t.verdict != api.TrialVerdict.INVALID.value for t in trials)


@dataclass(frozen=True)
class Step:
    """What the controller does next: ``resume`` the running trial, ``start`` a new one with ``settings``, or
    ``finish`` (``reason``)."""

    kind: str
    trial: api.Trial | None = None
    settings: api.TrialSettings | None = None
    reason: str = ""


def next_step(spec: api.SGLangTuningSpec, status: api.SGLangTuningStatus, valid: Sequence[Point],
              elapsed_seconds: float) -> Step:
    """The next step from the status alone: the running trial first (an operator restart measures it again from
    the start: its result was never written), else the search's suggestion (:func:`~.search.suggest`), else
    finish — also when ``budget.maxDurationSeconds`` has passed (``elapsed_seconds`` since ``status.startedAt``) or
    a completed trial's objective reached ``objective.goal`` (Katib's early stop; the recommendation still follows
    the noise rule over the trials measured so far)."""
    current = running(status.trials)
    if current is not None:
        return Step("resume", trial=current)
    if elapsed_seconds >= spec.budget.max_duration_seconds:
        return Step("finish", reason=f"maxDurationSeconds {spec.budget.max_duration_seconds} reached")
    goal = spec.objective.goal
    reached = next((t for t in status.trials if goal is not None and t.verdict == api.TrialVerdict.COMPLETED.value
                    and t.objective is not None and t.objective >= goal), None)
    if reached is not None:
        return Step("finish", reason=f"objective.goal {goal:g} reached by {reached.name} "
                                     f"({reached.settings.summary()}: {reached.objective:g})")
    s: Suggestion = suggest(search_settings(spec), valid, results(status.trials))
    if s.done:
        return Step("finish", reason=s.reason or "search finished")
    return Step("start", settings=settings_of(s.point))


def trial_objective(spec: api.SGLangTuningSpec, levels: Sequence[api.LevelFigures]) -> tuple[float | None,
                                                                                          list[api.LevelFigures]]:
    """A measured trial's score and its levels with each level's ``objective`` (:func:`level_objective`)."""
    tmp = api.Trial(name="x", settings=api.TrialSettings(), verdict=api.TrialVerdict.COMPLETED.value,
                    levels=list(levels))
    result = results([tmp])[0]
    from sglang_operator.decisions.tuning.objective import objective_value

    out = []
    for f in levels:
        value = objective_value(level_objective(spec, f.concurrency), result)
        out.append(f.model_copy(update={"objective": value}))
    return objective_value(search_objective(spec), result), out


def _best_point(trials: Sequence[api.Trial], objective: Objective, concurrency: int | None,
                speedup_level: int) -> api.BestPoint | None:
    found = results(trials)
    d = decide(found, objective)
    if d is None:
        return None
    settings = settings_of(d.best)
    name = next((t.name for t in trials if t.verdict == api.TrialVerdict.COMPLETED.value
                 and point_of(t.settings) == d.best), "")
    return api.BestPoint(concurrency=concurrency, trial=name, settings=settings, summary=settings.summary(),
                         objective=round(d.value, 3), speedup=round(d.speedup[speedup_level], 4)
                         if speedup_level in d.speedup else None)


def recommendation(spec: api.SGLangTuningSpec, trials: Sequence[api.Trial]) -> tuple[api.BestPoint | None,
                                                                                    list[api.BestPoint]]:
    """The best point overall (the search's :func:`~.search.decide`: the noise rule and the cheaper point among
    ties) and at each concurrency level, with the speedup over the control trial (output tok/s, at the objective's
    level overall)."""
    objective = search_objective(spec)
    best = _best_point(trials, objective, None, objective.concurrency)
    per_level = [b for c in spec.workload.levels()
                 if (b := _best_point(trials, level_objective(spec, c), c, c)) is not None]
    return best, per_level


def counts(trials: Sequence[api.Trial]) -> dict[str, int]:
    """``trialsCompleted`` / ``trialsFailed`` / ``trialsPruned`` / ``trialsInvalid`` of ``status.trials``."""
    def n(v: api.TrialVerdict) -> int:
        return sum(t.verdict == v.value for t in trials)

    return {"trials_completed": n(api.TrialVerdict.COMPLETED), "trials_failed": n(api.TrialVerdict.FAILED),
            "trials_pruned": n(api.TrialVerdict.PRUNED)}


def invalid_records(tuning: str, invalid: Sequence[InvalidPoint], room: int) -> list[api.Trial]:
    """Invalid points as ``status.trials`` records (verdict Invalid, the release's reason), at most ``room``."""
    return [api.Trial(name=f"{tuning}-invalid-{i}", settings=settings_of(p.point),
                      verdict=api.TrialVerdict.INVALID.value, reason=api_reason(p.reason))
            for i, p in enumerate(invalid[:max(room, 0)])]


def api_reason(text: str) -> str:
    """``text`` cut to :data:`~sglang_operator.api.tuning.REASON_LIMIT` characters (its end kept: SGLang's error is
    last in a crash tail)."""
    from sglang_operator.decisions.pods import tail

    return tail(text, api.REASON_LIMIT)
