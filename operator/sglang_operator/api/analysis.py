"""The rollback analysis in ``SGLangServer.status``: stable revision, baseline, analysis, rejections, rollbacks.

All of it is written by the operator's observer (the one writer of this state) from the pure decision
``sglang_operator.decisions.rollback.step``, and read back after an operator restart, so every key is declared here
(the API server silently prunes undeclared status keys, which would reset counters). Times are RFC 3339 UTC;
speeds tok/s; acceptance lengths are tokens per verify step (accepted draft tokens + 1).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from enum import StrEnum
from typing import Annotated, Any

from pydantic import AwareDatetime, BaseModel, Field, WithJsonSchema
from pydantic.alias_generators import to_camel

from sglang_operator.api.base import StatusModel
from sglang_operator.api.spec import SGLangServerSpec


class AnalysisPhase(StrEnum):
    """``status.analysis.phase``: where the revision that runs stands."""

    WARMING_UP = "WarmingUp"
    """Applied; waiting until all its pods are Ready and then warmupSeconds more (progressDeadlineSeconds runs)."""
    VERIFYING = "Verifying"
    """Samples are judged against the floors and, when comparable, the baseline."""
    STABLE = "Stable"
    """The stable revision runs (promoted); it is still sampled, a regression of it is reported, never rolled
    back."""
    ROLLING_BACK = "RollingBack"
    """The revision was rejected; the stable revision is being applied."""
    ROLLED_BACK = "RolledBack"
    """The stable revision serves again in place of the rejected one the spec asks for."""
    PAUSED = "Paused"
    """Judgement stopped (measurement errors in a row, a failing revision that may not be rolled back, or
    maxRollbacks reached) until the annotation ``sglang-operator.io/retry`` changes."""


class SampleVerdict(StrEnum):
    """What one sample counted for."""

    PASS = "Pass"
    FAIL = "Fail"
    SKIPPED = "Skipped"
    """Not judged: warming up, paused, rolling back, inconclusive, a measurement error (``reason`` says which)."""


SIMULATED_ACCEPTANCE_ENV = "SGLANG_SIMULATE_ACC_"
"""Prefix of SGLang's forced-acceptance benchmark knobs (``SGLANG_SIMULATE_ACC_LEN``, ``SGLANG_SIMULATE_ACC_METHOD``):
SGLang then commits draft tokens it never verified, so every accept length and tok/s of the revision is made up."""


def simulated_acceptance(env: list[dict[str, Any]]) -> list[str]:
    """The names of ``env`` (``spec.env``) that force SGLang's acceptance (:data:`SIMULATED_ACCEPTANCE_ENV`), in
    order."""
    return [str(e.get("name")) for e in env if str(e.get("name", "")).startswith(SIMULATED_ACCEPTANCE_ENV)]


class Setup(StatusModel):
    """What must be equal for two revisions' figures to be compared (relative criteria)."""

    model_path: str
    """``spec.model.path``."""
    model_revision: str | None = None
    """``spec.model.revision``."""
    gpu_product: str | None = None
    """GPU product the pods run on (node label ``nvidia.com/gpu.product``); unset when unknown."""
    tensor: int = 1
    """``spec.parallelism.tensor``."""
    pipeline: int = 1
    """``spec.parallelism.pipeline``."""
    data: int = 1
    """``spec.parallelism.data``."""
    nodes: int = 1
    """``spec.parallelism.nodes``."""
    simulated_acceptance: bool | None = None
    """True when ``spec.env`` forces SGLang's acceptance (:data:`SIMULATED_ACCEPTANCE_ENV`): the revision's figures
    are made up, so it is never judged (analysis Paused, reason ``SimulatedAcceptance``); unset otherwise."""


EXTRA_FIGURES = "extra_figures"
"""The field of the models holding a figure per rollback criterion (``decisions.criteria.CRITERIA``, by the
criterion's key) where the model has no field of that key's name: the criteria added after tok/s and accept length
need no field of their own."""


@functools.cache
def _named(model: type[BaseModel]) -> dict[str, str]:
    """camelCase name → field name of ``model``'s fields but :data:`EXTRA_FIGURES`, once per class (pydantic's
    ``to_camel`` runs regular expressions: per field per figure per sample it was most of a judged sample's CPU)."""
    return {to_camel(n): n for n in model.model_fields if n != EXTRA_FIGURES}


def figure(model: BaseModel, key: str) -> float | None:
    """The figure of the criterion ``key`` (camelCase, e.g. ``tokensPerSecond``) that ``model`` holds: its field of
    that name (tok/s, accept length: the fields status had before the criteria table), else its
    ``extraFigures[key]``; None where it holds none."""
    name = _named(type(model)).get(key)
    if name is not None:
        value = getattr(model, name)
        return float(value) if isinstance(value, int | float) else None
    extra = getattr(model, EXTRA_FIGURES, None)
    return extra.get(key) if isinstance(extra, dict) else None


def figure_fields(model: type[BaseModel], figures: Mapping[str, float | None]) -> dict[str, object]:
    """``figures`` (criterion key → value; None: none) as keyword arguments of ``model``: a key with a field of its
    name goes there, any other into ``extraFigures`` (left out when empty)."""
    named = _named(model)
    out: dict[str, object] = {}
    extra: dict[str, float] = {}
    for key, value in figures.items():
        if value is None:
            continue
        if key in named:
            out[named[key]] = value
        else:
            extra[key] = value
    if extra:
        out[EXTRA_FIGURES] = extra
    return out


class BaselineSource(StrEnum):
    """``status.baseline.source``: where the baseline's figures came from (``docs/rollback.md``, "The baseline")."""

    MEASURED = "measured"
    """The medians of the revision's own samples at its promotion (verified alone, or a canary without a usable
    stable baseline)."""
    CANARY_RATIO = "canaryRatio"
    """A canary judged side by side: the stable revision's baseline × the median canary ÷ stable decode-speed
    ratio of the same intervals (a slowdown of every pod during the canary cancels out)."""
    REFRESHED = "refreshed"
    """Raised from the stable revision's own samples (upward only, ``decisions.baseline.refresh``)."""


class Baseline(StatusModel):
    """The figures new revisions are compared with: the stable revision's speed, as :attr:`source` says."""

    revision: str
    """Revision the figures were measured on (the stable revision at its promotion)."""
    tokens_per_second: float
    """Median decode speed, tok/s."""
    accept_length: float | None = None
    """Median acceptance length (unset without speculative decoding)."""
    accept_rate: float | None = None
    """Median acceptance rate, 0..1 (SGLang's ``sglang:spec_accept_rate``; its formula differs between releases;
    unset without speculative decoding). Not a criterion: shown beside the accept length."""
    samples: int
    """Samples behind the medians, count."""
    signal: str = "probe"
    """Signal the samples came from (``probe`` or ``traffic``); figures of different signals are not compared."""
    setup: Setup | None = None
    """Model, GPU product and parallelism of the baseline revision."""
    at: AwareDatetime | None = None
    """When the baseline was set (the promotion, or the refresh)."""
    source: Annotated[BaselineSource, WithJsonSchema({"type": "string", "enum": [s.value for s in BaselineSource]})
                      ] = BaselineSource.MEASURED
    """Where the figures came from: ``measured``, ``canaryRatio`` or ``refreshed``."""
    ratio: float | None = None
    """``canaryRatio``: the median canary ÷ stable decode-speed ratio of the judged intervals (unset otherwise)."""
    scaled_from: str | None = None
    """``canaryRatio``: the stable revision whose baseline was scaled by ``ratio`` (unset otherwise)."""
    extra_figures: dict[str, float] | None = None
    """Medians of the criteria with no field of their own (``decisions.criteria.CRITERIA``), by criterion key, e.g.
    ``{"timeToFirstTokenSeconds": 0.31}`` (seconds); unset: none."""


class SampleFigures(StatusModel):
    """One measured sample's figures, kept for a median."""

    tokens_per_second: float
    """Decode speed, tok/s."""
    accept_length: float | None = None
    """Acceptance length."""
    accept_rate: float | None = None
    """Acceptance rate, 0..1 (SGLang's ``sglang:spec_accept_rate`` of the pods whose gauges were refreshed; its
    formula differs between releases); None where no pod had refreshed it yet."""
    extra_figures: dict[str, float] | None = None
    """Figures of the criteria with no field of their own (``decisions.criteria.CRITERIA``) that apply, by
    criterion key, e.g. ``{"timeToFirstTokenSeconds": 0.31}`` (seconds)."""


class LastSample(StatusModel):
    """The last sample of the analysed revision and what it counted for."""

    at: AwareDatetime
    """End of the sample's interval."""
    kind: Annotated[str, Field(json_schema_extra={"enum": ["Measured", "Inconclusive", "Error", "Missing"]})]
    """``Measured``, ``Inconclusive``, ``Error`` (as the sampler said) or ``Missing`` (no sample came for an interval in
    which a pod of the revision restarted or left Ready)."""
    verdict: Annotated[str, Field(json_schema_extra={"enum": [v.value for v in SampleVerdict]})]
    """``Pass``, ``Fail`` or ``Skipped``."""
    reason: str = ""
    """Why, in plain words (the failed criterion with both numbers, the error, why it was skipped)."""
    tokens_per_second: float | None = None
    """Decode speed, tok/s."""
    accept_length: float | None = None
    """Acceptance length."""
    accept_rate: float | None = None
    """Acceptance rate (0..1; the formula differs between SGLang releases)."""
    running_requests: float | None = None
    """Running requests at the end of the interval (load), count."""


class StableRegression(StatusModel):
    """The stable revision fails its own baseline (reported, never rolled back), with the current figures: every
    failing sample while it lasts updates ``message``, the figures and ``updatedAt``."""

    message: str
    """The failed criteria with the current numbers (the medians of the current run of failing samples)."""
    since: AwareDatetime
    """When failureThreshold failing samples in a row were reached."""
    updated_at: AwareDatetime | None = None
    """When the message and figures were last updated (a failing sample)."""
    tokens_per_second: float | None = None
    """Current decode speed, tok/s: the median of the measured samples of the current run of failing samples (unset:
    none was measured, e.g. a pod restarting)."""
    accept_length: float | None = None
    """Current acceptance length, median of the same samples."""
    reported: SampleFigures | None = None
    """The figures the last ``StableRegressed`` event named (unset: it named none); another event is posted when
    a figure moves by more than a tenth from them (``decisions.rollback.REGRESSION_CHANGE``)."""


class PodStart(StatusModel):
    """A pod of the analysed revision during the warm-up, for ``maxRestartsBeforeReady`` (multi-node: a group's
    leader pod)."""

    uid: str | None = None
    """``metadata.uid`` last seen: another uid under the same name is the pod recreated (a LeaderWorkerSet group
    recreated after a restart: ``RecreateGroupOnPodRestart``), which counts as a restart."""
    restart_count: int = 0
    """Sum of its containers' ``restartCount`` last seen."""
    restarts: int = 0
    """Restarts counted since the analysis began while it was never Ready, count."""
    ready: bool = False
    """It has been Ready in this analysis (its restarts no longer count)."""
    crash: str | None = None
    """The end of its last crash seen (``container NAME exited with code N: <termination message tail>``)."""
    waiting: str | None = None
    """The kubelet's reason and message while its container waits for a reason no wait fixes (``ImagePullBackOff:
    Back-off pulling image …``); unset otherwise."""
    waiting_since: AwareDatetime | None = None
    """Since when :attr:`waiting` has been seen without a break."""


class Analysis(StatusModel):
    """The state of the analysis of the revision that runs: enough to resume after an operator restart."""

    revision: str
    """Revision analysed (the one applied, ``status.revision``)."""
    phase: Annotated[AnalysisPhase, WithJsonSchema({"type": "string", "enum": [p.value for p in AnalysisPhase]})]
    """WarmingUp, Verifying, Stable, RollingBack, RolledBack or Paused."""
    since: AwareDatetime
    """When the phase was entered."""
    reason: str | None = None
    """CamelCase reason of the phase, e.g. ``RolledBack``, ``MeasurementErrors``, ``Regressed``."""
    message: str | None = None
    """The phase's reason in words, e.g. the failed criteria with both revisions' numbers."""
    progress_started_at: AwareDatetime
    """When the revision was first seen applied; progressDeadlineSeconds counts from here (never reset)."""
    ready_since: AwareDatetime | None = None
    """Since when all of its pods have been Ready without interruption (unset: not all Ready)."""
    warmed_up_at: AwareDatetime | None = None
    """When the warm-up ended (readySince + warmupSeconds); samples count from here."""
    consecutive_failures: int = 0
    """Failing samples in a row, count."""
    consecutive_errors: int = 0
    """Measurement errors in a row, count."""
    consecutive_passes: int = 0
    """Passing samples in a row, count (clears a stable regression at failureThreshold)."""
    valid_samples: int = 0
    """Measured samples judged since the warm-up, count."""
    valid_figures: list[SampleFigures] = Field(default_factory=list)
    """The most recent valid samples' figures (the baseline is their median at promotion)."""
    failing_figures: list[SampleFigures] = Field(default_factory=list)
    """Figures of the current run of failing samples (the rollback message gives their median)."""
    pod_restarts: dict[str, int] = Field(default_factory=dict)
    """Restart count seen per pod that has been Ready (a rise is a restart)."""
    pod_starts: dict[str, PodStart] = Field(default_factory=dict)
    """During the warm-up, per pod name (multi-node: per leader pod): restarts before it was ever Ready."""
    verify_restarts: int = 0
    """Restarts of the revision's pods since its warm-up ended, count (``maxRestartsWhileVerifying``)."""
    disruption: str | None = None
    """A pod restart or a pod leaving Ready after the warm-up, not yet counted as a failing sample."""
    last_interval_at: AwareDatetime | None = None
    """End of the last interval counted (a sample, or an interval without one)."""
    last_sample: LastSample | None = None
    """The last sample and its verdict."""
    retry_token: str | None = None
    """Value of the annotation ``sglang-operator.io/retry`` last seen (a change resumes a Paused analysis)."""
    promote_token: str | None = None
    """Value of the annotation ``sglang-operator.io/promote`` last acted on (a user's promotion, once)."""
    stable_regression: StableRegression | None = None
    """Set while the stable revision fails its own baseline."""
    refresh_figures: list[SampleFigures] = Field(default_factory=list)
    """The stable revision's current run of passing measured samples (any failure empties it): what a baseline
    refresh takes its median of (``decisions.baseline.refresh``)."""
    refresh_since: AwareDatetime | None = None
    """Start of the first interval of ``refreshFigures``."""


class Rejection(StatusModel):
    """A revision the operator will not run again until the annotation ``sglang-operator.io/retry`` changes."""

    revision: str
    """Rejected revision hash."""
    reason: str
    """Why, with the numbers."""
    at: AwareDatetime
    """When."""
    retry_token: str | None = None
    """Value of ``sglang-operator.io/retry`` when it was rejected (any other value allows one new attempt)."""
    canary_reason: str | None = None
    """The CamelCase reason its canary was removed for (``Regressed``, ``Aborted``, ``CrashLoop``,
    ``ProgressDeadlineExceeded``, ``Inconclusive``, ``Unstable``…) when it was rejected as a canary: no rollback (the
    stable revision never stopped serving); unset for a revision rolled back."""


class RollbackRecord(StatusModel):
    """One automatic rollback."""

    from_revision: str = Field(alias="from")
    """Revision rolled back from."""
    to_revision: str = Field(alias="to")
    """Revision applied (the stable one)."""
    reason: str
    """Why, with the numbers."""
    at: AwareDatetime
    """When it was decided."""


class CanaryPhase(StrEnum):
    """``status.canary.phase``: where a canary stands (docs/canary.md)."""

    STEPPING = "Stepping"
    """At a step: the canary's pods move to the step's split one pod at a time, warm up, and are judged side by
    side with the stable pods."""
    PROMOTING = "Promoting"
    """Every step passed (or ``kubectl sglang promote``): the canary workload takes every replica, one pod at a time;
    then it becomes the serving workload and its revision the stable one."""
    HELD = "Held"
    """The canary failed with ``spec.rollback.action`` Alert or DryRun (report only): it keeps its pods at the
    failed step's split, judged no more, until ``kubectl sglang abort`` removes it, ``kubectl sglang promote``
    promotes it or a new spec supersedes it. A held canary that serves nothing (no Ready pod) is removed anyway."""
    REMOVING = "Removing"
    """The canary failed, was aborted or superseded: the stable workload is back at ``spec.replicas`` and the
    canary workload is deleted."""


class CanarySample(StatusModel):
    """The last interval judged in a canary: both revisions' figures of that same interval."""

    at: AwareDatetime
    """End of the interval."""
    verdict: Annotated[str, Field(json_schema_extra={"enum": [v.value for v in SampleVerdict]})]
    """``Pass``, ``Fail`` or ``Skipped``."""
    reason: str = ""
    """Why, with both revisions' numbers."""
    tokens_per_second: float | None = None
    """The canary revision's decode speed, tok/s."""
    accept_length: float | None = None
    """The canary revision's acceptance length."""
    stable_tokens_per_second: float | None = None
    """The stable revision's decode speed in the same interval, tok/s."""
    stable_accept_length: float | None = None
    """The stable revision's acceptance length in the same interval."""


class CanaryStepRecord(StatusModel):
    """One step of a canary as it ended (``status.canary.history`` while it runs, then the canary revision's ledger
    record, for ``kubectl sglang history``)."""

    step: int
    """Step number, from 1."""
    replicas: int
    """Canary pods at that step, count (of ``stableReplicas`` + ``replicas`` running)."""
    stable_replicas: int
    """Stable pods at that step, count."""
    verdict: Annotated[str, Field(json_schema_extra={"enum": ["Passed", "Failed", "Promoted", "Aborted",
                                                              "Superseded"]})]
    """``Passed`` (judged and went on), ``Failed`` (the canary was removed), ``Promoted`` (skipped by ``kubectl sglang
    promote``), ``Aborted`` (``kubectl sglang abort``) or ``Superseded`` (a new spec)."""
    reason: str = ""
    """Why, with the numbers."""
    at: AwareDatetime
    """When the step ended."""
    samples: int = 0
    """Intervals measured for both revisions at this step, count."""
    tokens_per_second: float | None = None
    """The canary's median decode speed at this step, tok/s."""
    stable_tokens_per_second: float | None = None
    """The stable revision's median decode speed in the same intervals, tok/s."""


class CanaryState(StatusModel):
    """``status.canary``: a canary in progress (unset when none runs), enough to resume after an operator restart.

    The serving workload runs ``stableRevision`` on ``stableReplicas`` pods (``status.revision`` stays the stable
    revision while the canary runs) and ``workload`` runs ``revision`` on ``canaryReplicas``."""

    revision: str
    """The canary revision (the spec's)."""
    stable_revision: str
    """The revision the serving workload runs (``status.revision``)."""
    workload: str
    """Name of the canary's Deployment (``<name>-canary``, or ``<name>`` when ``<name>-canary`` is the serving one)."""
    phase: Annotated[CanaryPhase, WithJsonSchema({"type": "string", "enum": [p.value for p in CanaryPhase]})]
    """Stepping, Promoting or Removing."""
    reason: str | None = None
    """CamelCase reason of the phase, e.g. ``Regressed``, ``Aborted``, ``Superseded``, ``CrashLoop``."""
    message: str | None = None
    """The phase's reason in words."""
    step: int = 0
    """Index of the current step (0-based; ``len(steps)`` while Promoting)."""
    steps: int = 1
    """Steps of the policy, count."""
    canary_replicas: int = 0
    """Canary pods wanted now, count."""
    stable_replicas: int = 0
    """Stable pods wanted now, count."""
    split: str = ""
    """``stable+canary`` pods wanted, e.g. ``3+1`` (the printer column ``Canary``)."""
    started_at: AwareDatetime
    """When the canary started."""
    moved_at: AwareDatetime
    """When the split last changed (``progressDeadlineSeconds`` counts from here for the canary's pods)."""
    ready_since: AwareDatetime | None = None
    """Since when every wanted canary pod has been Ready (unset: not all Ready)."""
    warmed_up_at: AwareDatetime | None = None
    """When the current step's warm-up ended (intervals starting later are judged)."""
    judged: int = 0
    """Intervals passed at the current step, count."""
    consecutive_failures: int = 0
    """Failing intervals in a row, count."""
    consecutive_inconclusive: int = 0
    """Inconclusive intervals in a row, count (``onInconclusive: Rollback`` fails at failureThreshold)."""
    figures: list[SampleFigures] = Field(default_factory=list)
    """The canary's measured figures of every passing interval of every step."""
    speed_ratios: list[float] = Field(default_factory=list)
    """Canary ÷ stable decode speed of the same intervals as ``figures`` (its baseline at promotion: the stable
    baseline × their median)."""
    step_figures: list[SampleFigures] = Field(default_factory=list)
    """The canary's figures at the current step."""
    stable_figures: list[SampleFigures] = Field(default_factory=list)
    """The stable revision's figures of the same intervals at the current step."""
    failing_figures: list[SampleFigures] = Field(default_factory=list)
    """The canary's figures of the current run of failing intervals."""
    pod_restarts: dict[str, int] = Field(default_factory=dict)
    """Restart count per canary pod that has been Ready (a rise is a restart)."""
    pod_starts: dict[str, PodStart] = Field(default_factory=dict)
    """Canary pods not Ready yet: restarts before Ready (``maxRestartsBeforeReady``)."""
    disruption: str | None = None
    """A canary pod restart or readiness loss after the warm-up, not yet counted as a failing interval."""
    pending: str | None = None
    """Why a canary pod is not running (the scheduler's message, e.g. ``0/2 nodes are available: 2 Insufficient
    nvidia.com/gpu``)."""
    last_sample: CanarySample | None = None
    """The last interval judged."""
    history: list[CanaryStepRecord] = Field(default_factory=list)
    """The steps ended so far."""
    promote_token: str | None = None
    """Value of ``sglang-operator.io/promote`` when the canary started or last acted on."""
    abort_token: str | None = None
    """Value of ``sglang-operator.io/abort`` when the canary started or last acted on."""


GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"
"""The node label naming a node's GPU model (NVIDIA's GPU feature discovery): part of a :class:`Setup`."""


def setup_fields(spec: SGLangServerSpec, gpu_product: str | None = None) -> dict[str, Any]:
    """The :class:`Setup` fields of a spec, by field name (not validated: :func:`setup_of` validates them, and so does
    a model holding a subset of them); ``gpu_product`` (the pods' node label :data:`GPU_PRODUCT_LABEL`, when the
    caller knows it) defaults to the spec's nodeSelector for that label."""
    return {"model_path": spec.model.path, "model_revision": spec.model.revision,
            "gpu_product": gpu_product or spec.node_selector.get(GPU_PRODUCT_LABEL),
            "tensor": spec.parallelism.tensor, "pipeline": spec.parallelism.pipeline, "data": spec.parallelism.data,
            "nodes": spec.parallelism.nodes, "simulated_acceptance": True if simulated_acceptance(spec.env) else None}


def setup_of(spec: SGLangServerSpec, gpu_product: str | None = None) -> Setup:
    """The :class:`Setup` of a spec (:func:`setup_fields`)."""
    return Setup(**setup_fields(spec, gpu_product))
