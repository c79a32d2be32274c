"""The spec models of ``SGLangTuning`` (:mod:`sglang_operator.api.tuning`): the server to tune, the search space
(``spec.parameters``), the objective, the workload each trial is measured under, the budget, the algorithm and the
mode, with their cross-field :class:`~.base.CelRule` s and the bounds of the spec's lists and values.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated

from pydantic import Field

from sglang_operator.api.base import ApiModel, CelRule

MAX_TRIALS = 100
"""Upper bound of ``spec.budget.maxTrialCount``; ``status.trials`` holds at most this many plus the control trial
and the adaptive-mode trial (:data:`~sglang_operator.api.tuning_status.MAX_TRIAL_RECORDS`), so the object stays far
below etcd's 1.5 MiB."""
MAX_LEVELS = 6
"""Concurrency levels at most in ``spec.workload.concurrency`` (and figures per trial)."""
MAX_LOAD_SECONDS = 7200
"""Seconds of measured load one trial may ask for at most: ``secondsPerLevel × repetitions × levels`` (the load runs
inside the operator; without it a trial could ask 3600 × 5 × 6 s, 30 h)."""


class ServerRef(ApiModel):
    """The SGLangServer to tune, in the SGLangTuning's namespace."""

    name: Annotated[str, Field(min_length=1, max_length=63)]
    """Name of the SGLangServer."""


class IntParameter(ApiModel):
    """The feasible values of one integer setting (Katib's ``feasibleSpace``): either ``min`` and ``max`` (both
    included) with ``step``, or a ``list`` of values."""

    min: Annotated[int | None, Field(ge=0, le=4096)] = None
    """Smallest value of the range (included)."""
    max: Annotated[int | None, Field(ge=0, le=4096)] = None
    """Largest value of the range (included)."""
    step: Annotated[int, Field(ge=1, le=4096)] = 1
    """Distance between the values of the range."""
    list_: Annotated[list[Annotated[int, Field(ge=0, le=4096)]] | None,
                     Field(alias="list", min_length=1, max_length=32)] = None
    """The values, instead of a range (at most 32, each once)."""

    def values(self) -> tuple[int, ...]:
        """Every feasible value, ascending (``()`` when neither a range nor a list is set)."""
        if self.list_ is not None:
            return tuple(sorted(set(self.list_)))
        if self.min is None or self.max is None:
            return ()
        return tuple(range(self.min, self.max + 1, self.step))


def _param_rules(field: str, attr: str) -> tuple[CelRule, ...]:
    """The rules of ``spec.parameters.<field>`` (an :class:`IntParameter` at attribute ``attr`` of
    :class:`Parameters`): a range or a list, an ordered range, a list without repeats."""
    path = f"spec.parameters.{field}"
    cel = f"self.{field}"

    def get(m: Parameters) -> IntParameter | None:
        value: IntParameter | None = getattr(m, attr)
        return value

    def one_form(m: Parameters) -> bool:
        p = get(m)
        return p is None or ((p.min is not None and p.max is not None) if p.list_ is None
                             else (p.min is None and p.max is None))

    def ordered(m: Parameters) -> bool:
        p = get(m)
        return p is None or p.min is None or p.max is None or p.min <= p.max

    def distinct(m: Parameters) -> bool:
        p = get(m)
        return p is None or p.list_ is None or len(set(p.list_)) == len(p.list_)

    def _form(m: Parameters) -> str:
        p = get(m)
        assert p is not None
        return (f"{path} sets min: {str(p.min is not None).lower()}, max: {str(p.max is not None).lower()}, list: "
                f"{str(p.list_ is not None).lower()}: it takes min and max (a range) or list (the values), not both")

    def _dup(m: Parameters) -> int:
        p = get(m)
        assert p is not None and p.list_ is not None
        return next(v for v in p.list_ if p.list_.count(v) > 1)

    return (
        CelRule(
            f"!has({cel}) || (has({cel}.list) ? !has({cel}.min) && !has({cel}.max) : has({cel}.min) && "
            f"has({cel}.max))",
            f"{path} takes min and max (a range) or list (the values), not both",
            one_form,
            f".{field}",
            message_expression=f"'{path} sets min: %s, max: %s, list: %s: it takes min and max (a range) or list "
            f"(the values), not both'.format([has({cel}.min), has({cel}.max), has({cel}.list)])",
            explain=_form,
            name="parameter-range-or-list",
        ),
        CelRule(
            f"!has({cel}) || !has({cel}.min) || !has({cel}.max) || {cel}.min <= {cel}.max",
            f"{path}.min must not exceed {path}.max",
            ordered,
            f".{field}",
            message_expression=f"'{path}.min is %d but max is %d: the range is empty; swap them'.format("
            f"[{cel}.min, {cel}.max])",
            explain=lambda m: f"{path}.min is {get(m).min} but max is {get(m).max}: the range is empty; swap them",  # type: ignore[union-attr]
            name="parameter-range-ordered",
        ),
        CelRule(
            f"!has({cel}) || !has({cel}.list) || {cel}.list.all(v, {cel}.list.exists_one(w, w == v))",
            f"{path}.list names a value twice",
            distinct,
            f".{field}",
            message_expression=f"'{path}.list names %d more than once; list each value once'.format("
            f"[{cel}.list.filter(v, {cel}.list.filter(w, w == v).size() > 1)[0]])",
            explain=lambda m: f"{path}.list names {_dup(m)} more than once; list each value once",
            name="parameter-list-distinct",
        ),
    )


class Parameters(ApiModel):
    """The search space: every combination of the values below that SGLang's rules accept for the server's release
    (rendered and validated like the server's own spec before it runs; an invalid point is counted as ``Invalid``,
    never started). Unset optional settings keep the server's own value."""

    num_steps: IntParameter = Field(default_factory=lambda: IntParameter(min=1, max=8),
                                    json_schema_extra={"default": {"min": 1, "max": 8}})
    """``--speculative-num-steps``: draft steps per verify (1 to 16 are valid values)."""
    eagle_topk: IntParameter = Field(default_factory=lambda: IntParameter.model_validate({"list": [1]}),
                                     json_schema_extra={"default": {"list": [1]}})
    """``--speculative-eagle-topk``: branches per draft step (1 is a chain, more a tree; 1 to 16 are valid)."""
    num_draft_tokens: IntParameter | None = None
    """``--speculative-num-draft-tokens``. Unset: SGLang's rule, numSteps + 1 for a chain (topk 1, which SGLang
    forces), and for a tree the values from numSteps + 1 to numSteps × topk + 1 (the nodes a tree of that shape
    has). A value SGLang would rewrite (a chain with another count) is counted Invalid, not run."""
    adaptive: bool = False
    """Also run one trial with ``spec.speculative.adaptive`` (SGLang's ``--speculative-adaptive``, 0.5.11 on: it
    switches the number of steps at run time), so the best static point can be compared with it."""
    max_running_requests: IntParameter | None = None
    """``--max-running-requests`` values to search; unset: the server's ``spec.memory.maxRunningRequests``."""
    cuda_graph_max_bs: IntParameter | None = None
    """Largest batch size SGLang captures CUDA graphs for: ``--cuda-graph-max-bs`` up to 0.5.13,
    ``--cuda-graph-max-bs-decode`` from 0.5.14 (the old name a deprecated alias until 0.5.19, gone from 0.5.20; the
    flag name of the server's release is rendered); unset: SGLang's own choice."""

    cel_rules = tuple(
        rule
        for field, attr in (("numSteps", "num_steps"), ("eagleTopk", "eagle_topk"),
                            ("numDraftTokens", "num_draft_tokens"), ("maxRunningRequests", "max_running_requests"),
                            ("cudaGraphMaxBs", "cuda_graph_max_bs"))
        for rule in _param_rules(field, attr)
    )


class ObjectiveMetric(StrEnum):
    """What a trial is scored by (always maximized)."""

    DECODE_TOKENS_PER_SECOND = "decodeTokensPerSecond"
    """Median per-request decode speed after the first token at concurrency 1, tok/s: single-stream speed, what the
    published case measured."""
    OUTPUT_TOKENS_PER_SECOND = "outputTokensPerSecond"
    """Output tokens per second of all requests together at ``objective.concurrency``."""
    GOODPUT = "goodput"
    """The highest output tok/s over the workload's concurrency levels whose p95 inter-token latency and p95 time
    to first token stay within the limits."""


class Objective(ApiModel):
    """What "best" means (Katib's ``objective``; always maximized). Scored on measured speed, not on acceptance:
    acceptance can stay flat while the best choice flips (vllm-project/vllm#26504)."""

    objective_metric_name: ObjectiveMetric = ObjectiveMetric.DECODE_TOKENS_PER_SECOND
    """``decodeTokensPerSecond`` (default), ``outputTokensPerSecond`` or ``goodput``."""
    concurrency: Annotated[int | None, Field(ge=1, le=1024)] = None
    """outputTokensPerSecond only: the concurrency level (of ``spec.workload.concurrency``) it is measured at
    (with several workload levels every level counts with its weight, and this one gives ``status.best.speedup``)."""
    max_p95_inter_token_latency_seconds: Annotated[float | None, Field(gt=0, le=60)] = None
    """goodput only: the p95 inter-token latency a level may have, seconds."""
    max_p95_time_to_first_token_seconds: Annotated[float | None, Field(gt=0, le=600)] = None
    """goodput only: the p95 time to first token a level may have, seconds."""
    goal: Annotated[float | None, Field(gt=0)] = None
    """Stop once a trial's objective reaches this value (Katib's ``goal``; tok/s, or with several workload levels
    the weighted ratio to the control trial, e.g. 1.5); unset: search until the search or the budget ends."""

    cel_rules = (
        CelRule(
            "(self.objectiveMetricName == 'outputTokensPerSecond') == has(self.concurrency)",
            "spec.objective.concurrency is set with objectiveMetricName outputTokensPerSecond, and only then",
            lambda m: (m.objective_metric_name is ObjectiveMetric.OUTPUT_TOKENS_PER_SECOND)
            == (m.concurrency is not None),
            ".concurrency",
            message_expression="has(self.concurrency) ? 'spec.objective.concurrency is %d but objectiveMetricName is "
            "%s, which %s; remove concurrency'.format([self.concurrency, self.objectiveMetricName, "
            "self.objectiveMetricName == 'goodput' ? 'scores every level' : 'is measured at concurrency 1']) : "
            "'spec.objective.objectiveMetricName outputTokensPerSecond needs spec.objective.concurrency (the level it "
            "is measured at); set it to one of spec.workload.concurrency[].level'",
            explain=lambda m: (
                f"spec.objective.concurrency is {m.concurrency} but objectiveMetricName is "
                f"{m.objective_metric_name.value}, which "
                + ("scores every level" if m.objective_metric_name is ObjectiveMetric.GOODPUT
                   else "is measured at concurrency 1") + "; remove concurrency"
                if m.concurrency is not None else
                "spec.objective.objectiveMetricName outputTokensPerSecond needs spec.objective.concurrency (the level "
                "it is measured at); set it to one of spec.workload.concurrency[].level"),
            name="objective-concurrency",
        ),
        CelRule(
            "(self.objectiveMetricName == 'goodput') == (has(self.maxP95InterTokenLatencySeconds) || "
            "has(self.maxP95TimeToFirstTokenSeconds))",
            "spec.objective latency limits go with objectiveMetricName goodput, which needs at least one",
            lambda m: (m.objective_metric_name is ObjectiveMetric.GOODPUT)
            == (m.max_p95_inter_token_latency_seconds is not None or m.max_p95_time_to_first_token_seconds is not None),
            message_expression="self.objectiveMetricName == 'goodput' ? 'spec.objective.objectiveMetricName goodput "
            "needs a limit: set maxP95InterTokenLatencySeconds, maxP95TimeToFirstTokenSeconds or both' : "
            "'spec.objective sets a latency limit but objectiveMetricName is %s: limits apply to goodput only; set "
            "objectiveMetricName: goodput or remove the limits'.format([self.objectiveMetricName])",
            explain=lambda m: (
                "spec.objective.objectiveMetricName goodput needs a limit: set maxP95InterTokenLatencySeconds, "
                "maxP95TimeToFirstTokenSeconds or both" if m.objective_metric_name is ObjectiveMetric.GOODPUT else
                "spec.objective sets a latency limit but objectiveMetricName is "
                f"{m.objective_metric_name.value}: limits apply to goodput only; set objectiveMetricName: goodput or "
                "remove the limits"),
            name="goodput-limits",
        ),
    )


class ConcurrencyLevel(ApiModel):
    """One load level: this many streamed requests kept in flight for ``workload.secondsPerLevel``."""

    level: Annotated[int, Field(ge=1, le=1024)]
    """Requests in flight at once (the sweep script's batch size)."""
    weight: Annotated[float, Field(gt=0, le=1000)] = 1.0
    """Weight of this level in a trial's overall score. With two or more levels (decodeTokensPerSecond or
    outputTokensPerSecond) a trial's objective is Σ weight × (its objective at the level ÷ the control trial's
    there) ÷ Σ weight: decode tok/s at level 1 with decodeTokensPerSecond, output tok/s elsewhere; the control
    trial scores 1.0 (when it failed, the first completed trial is the reference). goodput takes no weights."""


class Workload(ApiModel):
    """The load every trial is measured under, by the operator's own load generator (client side, as users see it):
    streamed requests, decode speed after the first token, output tok/s, inter-token latency and time to first
    token; accept length from SGLang's counters over the same window."""

    prompts: Annotated[list[Annotated[str, Field(min_length=1, max_length=12288)]], Field(max_length=16)] = Field(
        default_factory=list)
    """Prompts sent in turn (at most 16, each at most 12288 characters: about 3000 tokens). Empty (default): a fixed
    set of eight like SGLang's ``bench_speculative.py``, the rollback probe's prompt among them."""
    max_output_tokens: Annotated[int, Field(ge=16, le=16384)] = 512
    """``max_tokens`` of every request (the sweep script's 512)."""
    concurrency: Annotated[list[ConcurrencyLevel], Field(min_length=1, max_length=MAX_LEVELS)] = Field(
        default_factory=lambda: [ConcurrencyLevel(level=1)],
        json_schema_extra={"default": [{"level": 1, "weight": 1.0}]})
    """The levels, each measured in turn (at most 6, each level once); default concurrency 1 only."""
    seconds_per_level: Annotated[int, Field(ge=5, le=3600)] = 30
    """Seconds each level is measured for, after the trial's warm-up (``secondsPerLevel × repetitions × levels`` at
    most 7200: the measured load of one trial)."""
    warmup_seconds: Annotated[int, Field(ge=0, le=3600)] = 10
    """Seconds of load after the trial is Ready (SGLang's CUDA-graph capture is done by then) that are not
    measured."""
    repetitions: Annotated[int, Field(ge=1, le=5)] = 2
    """Measurement windows of each level within one trial, back to back; the level's figures are their medians and
    their spread is reported (``levels[].spread``). The noise a winner must beat the runner-up by comes from trials
    of the same point run again (the search's repeats; ``docs/tuning.md``), which also see the trial-to-trial
    variation a window-to-window spread misses."""

    cel_rules = (
        CelRule(
            "self.concurrency.all(c, self.concurrency.exists_one(d, d.level == c.level))",
            "spec.workload.concurrency names a level twice",
            lambda m: len({c.level for c in m.concurrency}) == len(m.concurrency),
            ".concurrency",
            message_expression="'spec.workload.concurrency names level %d more than once; list each level once (its "
            "weight says how much it counts)'.format([self.concurrency.filter(c, self.concurrency.filter(d, "
            "d.level == c.level).size() > 1)[0].level])",
            explain=lambda m: "spec.workload.concurrency names level "
            f"{next(c.level for c in m.concurrency if [d.level for d in m.concurrency].count(c.level) > 1)} more than "
            "once; list each level once (its weight says how much it counts)",
            name="concurrency-levels-distinct",
        ),
        CelRule(
            f"self.secondsPerLevel * self.repetitions * size(self.concurrency) <= {MAX_LOAD_SECONDS}",
            f"spec.workload asks more than {MAX_LOAD_SECONDS} s of measured load per trial (secondsPerLevel × "
            "repetitions × levels)",
            lambda m: m.seconds_per_level * m.repetitions * len(m.concurrency) <= MAX_LOAD_SECONDS,
            ".secondsPerLevel",
            message_expression=f"'spec.workload asks %d s of measured load per trial (secondsPerLevel %d × "
            f"repetitions %d × %d levels), over the {MAX_LOAD_SECONDS} s limit; lower secondsPerLevel, repetitions or "
            "the number of levels'.format([self.secondsPerLevel * self.repetitions * size(self.concurrency), "
            "self.secondsPerLevel, self.repetitions, size(self.concurrency)])",
            explain=lambda m: f"spec.workload asks {m.seconds_per_level * m.repetitions * len(m.concurrency)} s of "
            f"measured load per trial (secondsPerLevel {m.seconds_per_level} × repetitions {m.repetitions} × "
            f"{len(m.concurrency)} levels), over the {MAX_LOAD_SECONDS} s limit; lower secondsPerLevel, repetitions "
            "or the number of levels",
            name="workload-load-bounded",
        ),
    )

    def levels(self) -> tuple[int, ...]:
        """The concurrency levels, in the spec's order."""
        return tuple(c.level for c in self.concurrency)


class Budget(ApiModel):
    """How much the tuning may spend (Katib's ``maxTrialCount`` / ``maxFailedTrialCount``). Every started trial
    counts, the control trial (no speculative decoding) and the adaptive-mode trial included (Katib's rule);
    Invalid points cost nothing."""

    max_trial_count: Annotated[int, Field(ge=1, le=MAX_TRIALS)] = 24
    """Trials at most (started ones: Completed, Failed or Pruned, the control trial included). The search may
    finish earlier: when the space is exhausted, or converged and its repeats told the finalists apart."""
    max_failed_trial_count: Annotated[int, Field(ge=0, le=MAX_TRIALS)] = 3
    """Failed trials (crash, out of memory, not Ready by the deadline) after which the tuning is Failed (Pruned
    trials do not count)."""
    max_duration_seconds: Annotated[int, Field(ge=60, le=7 * 86400)] = 7200
    """Wall time at most, from the first trial; then the best so far is the result (phase Succeeded) or, with no
    completed trial, the tuning Failed."""
    trial_deadline_seconds: Annotated[int, Field(ge=30, le=86400)] = 900
    """Seconds a trial may take to be Ready (scheduling, model load, CUDA-graph capture); after it the trial is
    Failed with the scheduler's or SGLang's reason."""

    cel_rules = (
        CelRule(
            "self.maxFailedTrialCount <= self.maxTrialCount",
            "spec.budget.maxFailedTrialCount must not exceed maxTrialCount",
            lambda m: m.max_failed_trial_count <= m.max_trial_count,
            ".maxFailedTrialCount",
            message_expression="'spec.budget.maxFailedTrialCount is %d but maxTrialCount is %d: it could never be "
            "reached; lower maxFailedTrialCount or raise maxTrialCount'.format([self.maxFailedTrialCount, "
            "self.maxTrialCount])",
            explain=lambda m: f"spec.budget.maxFailedTrialCount is {m.max_failed_trial_count} but maxTrialCount is "
            f"{m.max_trial_count}: it could never be reached; lower maxFailedTrialCount or raise maxTrialCount",
            name="budget-failed-within-trials",
        ),
    )


class AlgorithmName(StrEnum):
    """How the points are chosen (Katib's ``algorithmName``)."""

    DEFAULT = "Default"
    """The operator's own search (``docs/tuning.md`` says which and why)."""
    GRID = "Grid"
    """Every valid point, cheapest first (the sweep script's exhaustive method; ``maxTrialCount`` still bounds it)."""
    RANDOM = "Random"
    """Valid points drawn at random without repeats (seeded by ``algorithm.seed``)."""
    TPE = "TPE"
    """Optuna's Tree-structured Parzen Estimator (ask-and-tell, seeded by ``algorithm.seed`` and the number of
    trials, so a resumed tuning asks for the same points), then the default search's repeats."""


class Algorithm(ApiModel):
    """The search algorithm (Katib's ``algorithm``)."""

    algorithm_name: AlgorithmName = AlgorithmName.DEFAULT
    """``Default``, ``Grid``, ``Random`` or ``TPE``."""
    seed: Annotated[int, Field(ge=0, le=2**31 - 1)] = 0
    """Seed of the random choices (Random and TPE), so a resumed tuning chooses the same points."""
    start_num_steps: Annotated[int | None, Field(ge=1, le=16)] = None
    """``Default`` only: the numSteps its climb over chains starts from (the nearest value of
    ``parameters.numSteps``), e.g. the server's own to see the climb from it; unset: SGLang's default 3, usually
    the closest to the optimum (the fewest trials)."""


class TuningMode(StrEnum):
    """Where the trials run."""

    SHADOW = "Shadow"
    """In a separate workload with the server's model, parallelism, node selector and image digest, on other GPUs,
    owned by the SGLangTuning and deleted at the end; it never carries the server's Service-selector labels, so no
    user request reaches it."""
    IN_PLACE = "InPlace"
    """The trials replace the server's own pods one after another (every trial reloads the model); the revision
    serving when the tuning began is applied again at the end, also on failure, deletion or an operator restart."""


class Disruption(StrEnum):
    """Whether the tuning may interrupt the server."""

    FORBIDDEN = "Forbidden"
    ALLOWED = "Allowed"


class SGLangTuningSpec(ApiModel):
    """Desired tuning: which server, which settings, scored how, under which load, within which budget."""

    server_ref: ServerRef
    """The SGLangServer whose settings are searched (same namespace)."""
    parameters: Parameters = Field(default_factory=Parameters, json_schema_extra={"default": {}})
    """The search space."""
    objective: Objective = Field(default_factory=Objective, json_schema_extra={"default": {}})
    """What is maximized."""
    workload: Workload = Field(default_factory=Workload, json_schema_extra={"default": {}})
    """The load each trial is measured under."""
    budget: Budget = Field(default_factory=Budget, json_schema_extra={"default": {}})
    """Trials, failures and time at most."""
    algorithm: Algorithm = Field(default_factory=Algorithm, json_schema_extra={"default": {}})
    """How points are chosen."""
    mode: TuningMode = TuningMode.SHADOW
    """``Shadow`` (default: trials on other GPUs) or ``InPlace`` (trials replace the server's pods; needs
    ``disruption: Allowed``)."""
    disruption: Disruption = Disruption.FORBIDDEN
    """``Allowed`` lets an InPlace tuning restart the server's pods for every trial."""

    def relative_objective(self) -> bool:
        """Whether a trial's overall objective is the weighted ratio to the control trial (dimensionless, 1.0: as
        fast) rather than tok/s: two or more workload levels with decodeTokensPerSecond or outputTokensPerSecond
        (goodput picks its best level and stays tok/s)."""
        return len(self.workload.concurrency) > 1 and \
            self.objective.objective_metric_name is not ObjectiveMetric.GOODPUT

    cel_rules = (
        CelRule(
            "self.mode != 'InPlace' || self.disruption == 'Allowed'",
            "spec.mode InPlace needs spec.disruption: Allowed (every trial restarts the server's pods)",
            lambda m: m.mode is not TuningMode.IN_PLACE or m.disruption is Disruption.ALLOWED,
            ".disruption",
            message_expression="'spec.mode is InPlace but spec.disruption is %s: every trial replaces the server\\'s "
            "pods and reloads the model; set disruption: Allowed, or use mode: Shadow (trials on other "
            "GPUs)'.format([self.disruption])",
            explain=lambda m: f"spec.mode is InPlace but spec.disruption is {m.disruption.value}: every trial replaces "
            "the server's pods and reloads the model; set disruption: Allowed, or use mode: Shadow (trials on other "
            "GPUs)",
            name="in-place-needs-disruption",
        ),
        CelRule(
            "self.objective.objectiveMetricName == 'goodput' || self.workload.concurrency.exists(c, c.level == "
            "(self.objective.objectiveMetricName == 'outputTokensPerSecond' && has(self.objective.concurrency) ? "
            "self.objective.concurrency : 1))",
            "spec.objective is measured at a concurrency level spec.workload.concurrency lacks",
            lambda m: m.objective.objective_metric_name is ObjectiveMetric.GOODPUT
            or _objective_level(m) in m.workload.levels(),
            ".workload.concurrency",
            message_expression="'spec.objective.objectiveMetricName %s is measured at concurrency %d, which "
            "spec.workload.concurrency does not list (levels %s); add level %d to spec.workload.concurrency'.format("
            "[self.objective.objectiveMetricName, self.objective.objectiveMetricName == 'outputTokensPerSecond' && "
            "has(self.objective.concurrency) ? self.objective.concurrency : 1, self.workload.concurrency.map(c, "
            "c.level), self.objective.objectiveMetricName == 'outputTokensPerSecond' && "
            "has(self.objective.concurrency) ? self.objective.concurrency : 1])",
            explain=lambda m: f"spec.objective.objectiveMetricName {m.objective.objective_metric_name.value} is "
            f"measured at concurrency {_objective_level(m)}, which spec.workload.concurrency does not list (levels "
            f"{list(m.workload.levels())}); add level {_objective_level(m)} to spec.workload.concurrency",
            name="objective-level-measured",
        ),
    )


def _objective_level(m: SGLangTuningSpec) -> int:
    """The concurrency level the objective is measured at (goodput: every level; 1 is returned then)."""
    o = m.objective
    return o.concurrency if o.objective_metric_name is ObjectiveMetric.OUTPUT_TOKENS_PER_SECOND and o.concurrency \
        else 1

