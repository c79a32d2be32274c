"""The status models of ``SGLangTuning`` (:mod:`sglang_operator.api.tuning`): the phase, each trial's settings,
verdict and figures per concurrency level, the recommendation (``status.best``) and the status itself, with the
bounds of its lists and strings.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import Field

from sglang_operator.api.base import StatusModel
from sglang_operator.api.status import Condition
from sglang_operator.api.tuning_setup import TuningSetup
from sglang_operator.api.tuning_spec import MAX_LEVELS, MAX_TRIALS

MAX_TRIAL_RECORDS = MAX_TRIALS + 2
"""``status.trials`` holds at most this many records: ``spec.budget.maxTrialCount`` at most
(:data:`~sglang_operator.api.tuning_spec.MAX_TRIALS`) plus the control trial and the adaptive-mode trial."""
STRING_LIMIT = 256
"""Characters at most of a short status string (names, hashes, summaries)."""
REASON_LIMIT = 1024
"""Characters at most of ``status.trials[].reason`` (SGLang's crash tail is cut to it, like condition messages:
:data:`sglang_operator.api.base.MESSAGE_LIMIT`)."""

ShortText = Annotated[str, Field(max_length=STRING_LIMIT)]
SPEEDUP_DIGITS = 2
"""Decimals of every speedup (:func:`speedup_of`)."""


def speedup_of(value: float, control: float) -> float | None:
    """``value`` ÷ ``control`` (a point's mean output tok/s over the control trial's) rounded to
    :data:`SPEEDUP_DIGITS` decimals, None when ``control`` is not positive: the one computation of a speedup.
    ``status.best.speedup`` and ``bestPerLevel[].speedup`` store it, and every view shows the stored value as it is
    (``kubectl get sgtune``'s SPEEDUP, ``kubectl sglang tune status`` and ``tune plot``, the events, the gauge
    ``sglang_operator_tuning_best_speedup``)."""
    return round(value / control, SPEEDUP_DIGITS) if control > 0 else None


def objective_text(value: float | None, relative: bool) -> str:
    """An objective with its unit: ``52.0 tok/s``; ``relative`` (a tuning of two or more weighted workload levels
    with a decode or output objective, :meth:`~sglang_operator.api.tuning_spec.SGLangTuningSpec.relative_objective`)
    the weighted ratio to the control trial, ``1.43× control``; ``-`` for None."""
    if value is None:
        return "-"
    return f"{value:.2f}× control" if relative else f"{value:.1f} tok/s"


class TuningPhase(StrEnum):
    """Documented values of ``status.phase``."""

    PENDING = "Pending"
    """Accepted; no trial started yet (waiting for the server, for GPUs, or for a canary or another tuning that
    holds the server)."""
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    """Done: ``status.best`` holds the recommendation."""
    FAILED = "Failed"
    """maxFailedTrialCount reached, or the budget ended without a completed trial."""
    CANCELLED = "Cancelled"
    """Stopped before the end (an InPlace tuning whose server's spec changed)."""


class TrialVerdict(StrEnum):
    """Outcome of one trial (unset while it runs)."""

    COMPLETED = "Completed"
    """Measured at every level."""
    FAILED = "Failed"
    """Crashed, ran out of memory or was not Ready by ``budget.trialDeadlineSeconds``: ``reason`` has SGLang's
    message (the crash tail) or the scheduler's; counted against maxFailedTrialCount."""
    PRUNED = "Pruned"
    """Stopped after its first measured level or repetition: below the best so far by more than two standard
    deviations of the noise (``reason`` gives the figures); never recommended, not counted against
    maxFailedTrialCount."""
    INVALID = "Invalid"
    """Refused by the release's own rules when rendered: never started, costs nothing; ``reason`` says why."""


class TrialSettings(StatusModel):
    """The candidate point of a trial (unset: the server's own value)."""

    speculative: bool = True
    """False for the control trial: the server's spec without speculative decoding (the sweep script's all-zero
    point)."""
    num_steps: int | None = None
    """``--speculative-num-steps``."""
    eagle_topk: int | None = None
    """``--speculative-eagle-topk``."""
    num_draft_tokens: int | None = None
    """``--speculative-num-draft-tokens``."""
    adaptive: bool | None = None
    """``--speculative-adaptive``."""
    max_running_requests: int | None = None
    """``--max-running-requests``."""
    cuda_graph_max_bs: int | None = None
    """CUDA-graph batch size at most (``--cuda-graph-max-bs`` / ``--cuda-graph-max-bs-decode``)."""

    def summary(self) -> str:
        """Short form for columns: ``3/1/4`` (steps/topk/draft tokens), ``adaptive 3/1/4``, ``no speculation``;
        max running requests and the CUDA-graph batch size appended when set (``3/1/4 mrr 16 bs 32``)."""
        return settings_text(self.num_steps, self.eagle_topk, self.num_draft_tokens, speculative=self.speculative,
                             adaptive=bool(self.adaptive), max_running_requests=self.max_running_requests,
                             cuda_graph_max_bs=self.cuda_graph_max_bs)


def settings_text(num_steps: int | None, eagle_topk: int | None, num_draft_tokens: int | None, *,
                  speculative: bool = True, adaptive: bool = False, max_running_requests: int | None = None,
                  cuda_graph_max_bs: int | None = None) -> str:
    """The short form of a trial's settings (:meth:`TrialSettings.summary`, the search's ``Point.label``):
    ``3/1/4`` (``?`` for an unset value), ``adaptive 3/1/4``, ``no speculation``, then ``mrr N`` / ``bs N`` when
    set."""
    if not speculative:
        text = "no speculation"
    else:
        text = "/".join("?" if v is None else str(v) for v in (num_steps, eagle_topk, num_draft_tokens))
        if adaptive:
            text = "adaptive " + text
    if max_running_requests is not None:
        text += f" mrr {max_running_requests}"
    if cuda_graph_max_bs is not None:
        text += f" bs {cuda_graph_max_bs}"
    return text


class LevelFigures(StatusModel):
    """What one trial measured at one concurrency level (medians over ``workload.repetitions``)."""

    concurrency: int
    """The level: requests in flight."""
    output_tokens_per_second: float | None = None
    """Output tokens per second of all requests together."""
    decode_tokens_per_second: float | None = None
    """Median per-request decode speed after the first token, tok/s."""
    inter_token_latency_p50_seconds: float | None = None
    """Median inter-token latency, seconds (client side)."""
    inter_token_latency_p95_seconds: float | None = None
    """95th percentile inter-token latency, seconds."""
    time_to_first_token_p50_seconds: float | None = None
    """Median time to first token, seconds."""
    time_to_first_token_p95_seconds: float | None = None
    """95th percentile time to first token, seconds."""
    accept_length: float | None = None
    """Accept length from SGLang's counters over the same window (``sglang:spec_verify_calls_total`` and
    generation tokens)."""
    accept_rate: float | None = None
    """SGLang's accept rate (accepted ÷ proposed draft tokens, ``sglang:spec_accept_rate``, a gauge of the last
    decode log window) at the end of the window, where the release reports it."""
    step_time_p20_seconds: float | None = None
    """SGLang's own 20th-percentile decode step time (``/server_info`` ``step_time_dict``) where the release reports
    it: the sweep script scores accept length ÷ this."""
    spread: float | None = None
    """Relative spread of the repetitions' objective values ((max − min) ÷ median): the noise estimate."""
    objective: float | None = None
    """The objective's value at this level."""
    requests: int | None = None
    """Requests finished in the measured windows."""
    failed_requests: int | None = None
    """Requests that failed in the measured windows."""


class Trial(StatusModel):
    """One trial: a revision rendered from the server's spec with one candidate point."""

    name: ShortText
    """``<tuning>-trial-<n>`` (the trial workload's name in Shadow mode)."""
    settings: TrialSettings
    """The candidate point."""
    revision: ShortText | None = None
    """Revision hash of the rendered pod template (as ``status.revision`` of a server)."""
    verdict: Annotated[str | None, Field(max_length=32, json_schema_extra={"enum": [v.value for v in TrialVerdict]})] \
        = None
    """Completed, Failed, Pruned or Invalid; unset while the trial runs."""
    reason: Annotated[str | None, Field(max_length=REASON_LIMIT)] = None
    """Why the verdict (SGLang's error, the scheduler's message, the pruning rule)."""
    started_at: ShortText | None = None
    """When the trial's workload was applied (RFC 3339)."""
    finished_at: ShortText | None = None
    """When the verdict was given (RFC 3339)."""
    objective: float | None = None
    """The trial's score: the objective (tok/s) with one concurrency level; with several, the weighted mean of each
    level's objective ÷ the control trial's (``workload.concurrency[].weight``)."""
    levels: Annotated[list[LevelFigures], Field(max_length=MAX_LEVELS)] = Field(default_factory=list)
    """Figures per concurrency level."""


class BestPoint(StatusModel):
    """The recommendation, overall or at one concurrency level."""

    concurrency: int | None = None
    """The level (unset: overall, over the weighted levels)."""
    trial: ShortText
    """Name of the winning trial."""
    settings: TrialSettings
    """Its settings."""
    summary: ShortText = ""
    """Its settings in short form (``3/1/4``)."""
    objective: float | None = None
    """Its objective value (the mean over its measurements): tok/s; overall with several weighted workload levels
    (decodeTokensPerSecond, outputTokensPerSecond) the weighted ratio to the control trial, dimensionless."""
    objective_summary: ShortText = ""
    """``objective`` with its unit, for ``kubectl get``: ``52.0 tok/s``, or ``1.43× control`` for the weighted ratio
    to the control trial."""
    speedup: float | None = None
    """Its mean output tok/s ÷ the control trial's (no speculative decoding) at the same concurrency (overall: the
    objective's level), two decimals: what speculation buys on this server; below 1 it costs
    (:func:`sglang_operator.decisions.tuning.objective.speedups`)."""


class TuningCondition(Condition):
    """A ``metav1.Condition`` with its bounds (``k8s.io/apimachinery/pkg/apis/meta/v1/types.go``: type 316,
    reason 1024, message 32768 characters); the operator cuts its messages to
    :data:`~sglang_operator.api.base.MESSAGE_LIMIT`."""

    type: Annotated[str, Field(max_length=316)]
    """Condition type."""
    reason: Annotated[str, Field(max_length=1024)] = ""
    """CamelCase reason."""
    message: Annotated[str, Field(max_length=32768)] = ""
    """Human-readable details."""
    last_transition_time: Annotated[str | None, Field(max_length=64)] = None
    """When status last changed (RFC 3339)."""


class SGLangTuningStatus(StatusModel):
    """Observed state of a tuning: written only by the operator, complete enough that a restarted operator resumes
    without repeating a finished trial."""

    observed_generation: int | None = None
    """metadata.generation last acted on."""
    phase: Annotated[str | None, Field(max_length=32, json_schema_extra={"enum": [p.value for p in TuningPhase]})] \
        = None
    """Pending, Running, Succeeded, Failed or Cancelled."""
    conditions: Annotated[list[TuningCondition], Field(max_length=16)] = Field(default_factory=list)
    """Conditions in metav1 shape."""
    started_at: ShortText | None = None
    """When the first trial started (RFC 3339); ``budget.maxDurationSeconds`` counts from it."""
    completed_at: ShortText | None = None
    """When the tuning ended (RFC 3339)."""
    progress: Annotated[str | None, Field(max_length=32)] = None
    """``done/total`` trials (``7/24``), for ``kubectl get``."""
    trials_total: int | None = None
    """Trials the algorithm may start, the control trial and repeats included (at most maxTrialCount; the
    default search and TPE often finish earlier)."""
    trials_completed: int | None = None
    """Trials Completed."""
    trials_failed: int | None = None
    """Trials Failed."""
    trials_pruned: int | None = None
    """Trials Pruned."""
    trials_invalid: int | None = None
    """Points refused by the release's rules (never started)."""
    trials: Annotated[list[Trial], Field(max_length=MAX_TRIAL_RECORDS)] = Field(default_factory=list)
    """Every started trial and every Invalid point, in order."""
    control_trial: ShortText | None = None
    """Name of the control trial (no speculative decoding) the speedups are relative to."""
    best: BestPoint | None = None
    """The recommendation overall."""
    best_per_level: Annotated[list[BestPoint], Field(max_length=MAX_LEVELS)] = Field(default_factory=list)
    """The best trial at each concurrency level, with its speedup over the control trial at that level."""
    stable_revision: ShortText | None = None
    """InPlace: the revision serving when the tuning began, applied again at the end."""
    setup: TuningSetup | None = None
    """What the trials ran on (model, GPU product, parallelism, release, workload), recorded when the tuning began:
    the known best across the namespace's servers compares only equal setups."""

    def dump(self) -> dict[str, Any]:
        """camelCase dict for a status patch, unset fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")

