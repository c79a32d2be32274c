"""``SGLangServer.status``: what the operator observed and decided.

Written only by the operator (status subresource). Conditions use the ``metav1.Condition`` shape
(``k8s.io/apimachinery/pkg/apis/meta/v1/types.go``); ``sglang_operator.decisions.conditions`` builds and
merges them. ``effective`` holds what SGLang reports it runs (``GET /server_info``, keys as
``sglang_operator.decisions.effective.FIELDS``); ``revisions`` is the ledger of revisions with their verdicts;
``stableRevision``, ``baseline``, ``analysis``, ``rejectedRevisions`` and ``rollbacks`` are the rollback analysis
(:mod:`sglang_operator.api.analysis`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from pydantic import AwareDatetime, Field

from sglang_operator.api.analysis import (
    Analysis,
    Baseline,
    BaselineSource,
    CanaryState,
    CanaryStepRecord,
    Rejection,
    RollbackRecord,
)
from sglang_operator.api.autoscaling import AutoscalingStatus
from sglang_operator.api.base import FreeForm, StatusModel


class ConditionType(StrEnum):
    """Condition types the operator writes."""

    READY = "Ready"
    """All requested pods are Ready (SGLang answers on its readiness endpoint)."""
    AVAILABLE = "Available"
    """At least one replica serves (the Deployment convention; True during a scale-up or a rollout while an
    old or a new pod answers)."""
    PROGRESSING = "Progressing"
    """A new revision is rolling out, or pods are starting."""
    DEGRADED = "Degraded"
    """Pods fail (Unschedulable, CrashLoopBackOff with the termination message), or the revision the spec asks
    for was rolled back (reason ``RolledBack``: both revisions and their numbers) or judged regressed and left
    running (reason ``Regressed``: action Alert, no stable revision, or maxRollbacks reached)."""
    SPEC_VALID = "SpecValid"
    """The spec is valid for the target SGLang release. False: nothing is applied; the message says why.
    True with reason ``ValidWithWarnings``: the message lists the warnings (e.g. maxRunningRequests unset
    under speculative decoding)."""
    SETTINGS_DIFFER = "SettingsDiffer"
    """True when SGLang resolved other settings than the spec asked for (message: ``key: spec X, SGLang Y``;
    NEXTN reported as EAGLE is not a difference)."""
    STABLE_REGRESSED = "StableRegressed"
    """True while the stable revision fails its own baseline (failureThreshold samples in a row; message: the
    numbers). Reported only: the stable revision is never rolled back automatically."""
    TUNING_HELD = "TuningHeld"
    """True while an InPlace SGLangTuning holds the server (``status.tuningHold``): its trials run on every replica,
    the rollback analysis and any canary wait (message: the tuning, the trial, the revision applied again at the
    end)."""
    SPECULATIVE_DECODING_ACTIVE = "SpeculativeDecodingActive"
    """Once Ready: True when SGLang reports an acceptance length; False when speculation was asked for but
    ``/server_info`` shows none or the acceptance-length series are absent (NEXTN reported as EAGLE is not a
    difference)."""
    SPECULATIVE_SETTINGS = "SpeculativeSettings"
    """False (reason ``BelowKnownBest``) when a finished SGLangTuning of the namespace, on the same model, GPU
    product, parallelism and release, measured the spec's speculative settings clearly worse than its best
    (message: the better settings, both figures, the tuning); True (``AtKnownBest``) when it measured them within
    the noise of the best. Nothing is changed by itself (``docs/tuning.md``, "Known best across servers")."""
    AUTOSCALING = "Autoscaling"
    """With ``spec.autoscaling``: True while the ScaledObject is applied (mode KEDA, reason ``ScaledObjectApplied``)
    or the user's scaler owns the count (reason ``External``); False when it cannot be (reasons
    ``KEDANotInstalled``, ``NoPrometheusAddress``, ``ApplyFailed``): the server keeps ``spec.replicas`` and serves."""
    SAMPLING_BACKED_OFF = "SamplingBackedOff"
    """True (reason ``ParseBudgetExceeded``) while the server is sampled less often because parsing its pods'
    ``/metrics`` cost more CPU in one interval than ``--scrape-cpu-budget-seconds`` (message: the cost, the budget,
    when it is sampled again); False (``WithinBudget``) once a sample fits again
    (``decisions/sampling/budget.py``)."""


class Phase(StrEnum):
    """Documented values of ``status.phase`` (not enforced by the schema)."""

    PENDING = "Pending"
    PROGRESSING = "Progressing"
    READY = "Ready"
    DEGRADED = "Degraded"
    STOPPED = "Stopped"
    INVALID = "Invalid"


class Condition(StatusModel):
    """A ``metav1.Condition``."""

    type: str
    """Condition type, one of ConditionType."""
    status: Annotated[str, Field(json_schema_extra={"enum": ["True", "False", "Unknown"]})]
    """True, False or Unknown."""
    reason: str = ""
    """CamelCase reason, e.g. ``Unschedulable``, ``CrashLoopBackOff``, ``AllReplicasReady``."""
    message: str = ""
    """Human-readable details."""
    last_transition_time: str | None = None
    """When status last changed (RFC 3339)."""
    observed_generation: int | None = None
    """metadata.generation the condition was computed for."""


class EffectiveSettings(StatusModel):
    """Settings SGLang reports it runs with (``GET /server_info``), read once the server is Ready."""

    algorithm: str | None = None
    """Resolved ``speculative_algorithm`` (SGLang reports NEXTN as EAGLE)."""
    num_steps: int | None = None
    """Resolved ``speculative_num_steps``."""
    eagle_topk: int | None = None
    """Resolved ``speculative_eagle_topk``."""
    num_draft_tokens: int | None = None
    """Resolved ``speculative_num_draft_tokens``."""
    max_running_requests: int | None = None
    """Effective max running requests (``internal_states[0].effective_max_running_requests_per_dp`` when
    reported, else ``max_running_requests``)."""
    mem_fraction_static: float | None = None
    """Resolved ``mem_fraction_static``."""
    context_length: int | None = None
    """Resolved ``context_length`` in tokens."""
    avg_spec_accept_length: float | None = None
    """``internal_states[0].avg_spec_accept_length``: cumulative mean acceptance length since start."""
    adaptive: bool | None = None
    """Resolved ``speculative_adaptive``: false when SGLang turned adaptive mode off at start-up (it does so with
    a warning only, ``speculative_hook.py:_maybe_disable_adaptive``)."""
    active_num_steps: int | None = None
    """Adaptive mode: the tier SGLang runs now, ``sglang:spec_num_steps`` ("Currently active speculative_num_steps",
    0.5.13 on; ``/server_info`` keeps the start-up value), updated as it switches."""
    active_num_draft_tokens: int | None = None
    """Adaptive mode: ``sglang:spec_num_draft_tokens`` now (steps + 1)."""
    observed_at: str | None = None
    """When it was read (RFC 3339)."""


class Verdict(StrEnum):
    """Judgement of a revision in the ledger (``status.revisions[].verdict``); the stable revision is
    ``status.stableRevision``, the analysis of the serving one ``status.analysis``."""

    VERIFYING = "Verifying"
    """Applied and being judged (warming up or verifying)."""
    PROMOTED = "Promoted"
    """Passed its verification; it became the stable revision then."""
    REJECTED = "Rejected"
    """Failed and rolled back; not run again until the annotation ``sglang-operator.io/retry`` changes."""
    FAILED = "Failed"
    """Failed and left running: action Alert or DryRun, no stable revision to return to, or maxRollbacks
    reached."""
    UNVERIFIED = "Unverified"
    """Analysis stopped without a verdict (measurement errors in a row)."""
    SUPERSEDED = "Superseded"
    """Replaced by another revision before a verdict."""


class RevisionRecord(StatusModel):
    """One entry of the revision ledger: a rendered pod template and how it performed."""

    revision: str
    """Revision hash (pod template hash, label ``sglang-operator.io/revision``)."""
    generation: int | None = None
    """metadata.generation that produced it."""
    created_at: str | None = None
    """When the revision was first applied (RFC 3339)."""
    command: str | None = None
    """The rendered SGLang command line."""
    summary: dict[str, str] = Field(default_factory=dict)
    """Key settings for humans, e.g. ``{"image": ..., "tp": "2", "algorithm": "NEXTN", "numSteps": "3"}``."""
    spec: FreeForm | None = None
    """Snapshot of the spec that produced the revision (what a rollback restores)."""
    tokens_per_second: float | None = None
    """Decode speed at the verdict, tok/s: median of the valid samples (Promoted) or of the failing ones."""
    accept_length: float | None = None
    """Acceptance length at the verdict (medians as tokensPerSecond)."""
    samples: int | None = None
    """Samples behind those figures, count."""
    accept_rate: float | None = None
    """Acceptance rate at the verdict, 0..1: SGLang's ``sglang:spec_accept_rate``, median of the same samples as
    tokensPerSecond (of those whose pods had refreshed the gauge; else the revision's last sample's); its formula
    differs between releases; unset where the release reports none."""
    verdict: Annotated[str, Field(json_schema_extra={"enum": [v.value for v in Verdict]})] = "Verifying"
    """Verifying, Promoted, Rejected, Failed, Unverified or Superseded."""
    reason: str | None = None
    """Why the verdict, e.g. ``9f4c2d9294: 36.0 tok/s < 0.85 × 51.6 tok/s of 9699b6738c``."""
    judged_at: str | None = None
    """When the verdict was given (RFC 3339)."""
    canary_steps: list[CanaryStepRecord] = Field(default_factory=list)
    """The steps of its canary, when it ran as one (``spec.strategy.type: Canary``)."""
    baseline_source: Annotated[str | None, Field(json_schema_extra={"enum": [s.value for s in BaselineSource]})] = None
    """Where its baseline (as the stable revision) came from, last set: ``measured``, ``canaryRatio`` or
    ``refreshed`` (``status.baseline.source``); unset for a revision never stable."""
    baseline_tokens_per_second: float | None = None
    """Its baseline decode speed, tok/s, last set (may differ from ``tokensPerSecond``, the median measured at
    the verdict: a ``canaryRatio`` or ``refreshed`` baseline)."""
    extra_figures: dict[str, float] | None = None
    """Figures at the verdict of the criteria with no field of their own (``decisions.criteria.CRITERIA``), by
    criterion key, medians as tokensPerSecond, e.g. ``{"timeToFirstTokenSeconds": 0.31}`` (seconds); unset: none."""


class TuningHold(StatusModel):
    """An ``SGLangTuning`` of ``spec.mode: InPlace`` holding the server: its trials replace the server's own pods
    one after another, the rollback analysis is held (no verdicts, rejections or rollbacks; the spec's revision is
    not converged to) and no canary starts until the hold is released, when ``stableRevision`` is applied again.
    Decided by the server's own loop from what the tuning asks in its status
    (:mod:`sglang_operator.decisions.tuning.inplace`) and written by the server's one status patch; survives an
    operator restart."""

    name: str
    """The SGLangTuning's name (same namespace)."""
    uid: Annotated[str | None, Field(max_length=128)] = None
    """The SGLangTuning's ``metadata.uid``: the hold is that object's, not its name's. A tuning deleted and
    created again under the same name (another uid) does not inherit it: the server's next tick releases it. Unset
    (a hold written by an older operator): the tuning of that name, whose uid the next tick records."""
    since: AwareDatetime | None = None
    """When the hold began. A hold older than the operator's ``--in-place-hold-max-seconds`` (chart value
    ``inPlaceHoldMaxSeconds``) is released (reason ``HoldExpired``) and its tuning cancelled. Unset (a hold written by
    an older operator): the next tick records its own time."""
    released: Annotated[str | None, Field(max_length=64)] = None
    """Set while the hold is being released (the stable revision is applied again before it is removed), with why:
    ``Released`` (the tuning ended, or is gone), ``HoldExpired`` (older than the bound). No trial is applied then."""
    stable_revision: str
    """The revision serving when the tuning began: applied again at the end (success, failure, deletion, restart)."""
    generation: int
    """The server's ``metadata.generation`` the hold last followed (a scale moves it along)."""
    spec_hash: Annotated[str | None, Field(max_length=64)] = None
    """SHA-256 of the server's spec without ``replicas`` when the hold began
    (:func:`sglang_operator.decisions.tuning.hold.spec_hash`): a change of anything else cancels the tuning and the
    spec's revision is applied instead of the stable one; a scale does not. Unset (a hold written by an older
    operator): any generation change cancels."""
    trial: str | None = None
    """The trial that runs now (``<tuning>-trial-<n>``), unset between trials."""
    trial_revision: str | None = None
    """Revision hash of that trial, applied on every replica."""
    trial_failure: Annotated[str | None, Field(max_length=1024)] = None
    """Why that trial could not be applied (a refused child, a spec this release cannot render): the tuning fails
    the trial with it; the server's loop does not try it again."""


class StatusSummary(StatusModel):
    """What the default ``kubectl get sgls`` columns REPLICAS, ANALYSIS and REASON show, written by the observer every
    tick it changes (:func:`sglang_operator.decisions.status.summary`): one row that is true during a canary too."""

    ready: str
    """Ready replicas: ``4``; during a canary ``stable+canary`` Ready pods, e.g. ``3+1``."""
    analysis: str | None = None
    """``analysis.phase``; ``Canary`` while a canary runs (``status.canary``)."""
    reason: str | None = None
    """``analysis.reason``; while a canary runs its ``Canary`` condition's reason and step: ``Stepping 1/2``,
    ``Pending 1/2``, ``Held 1/2``, ``Promoting``, ``Removing Regressed``."""


class SGLangServerStatus(StatusModel):
    """Observed state of an SGLang server."""

    observed_generation: int | None = None
    """metadata.generation last reconciled."""
    phase: str | None = None
    """Pending, Progressing, Ready, Degraded, Stopped or Invalid (pod health; the rollback analysis has its
    own phase, ``analysis.phase``)."""
    conditions: list[Condition] = Field(default_factory=list)
    """Conditions in metav1 shape: Ready, Available, Progressing, Degraded, SpecValid, SettingsDiffer,
    StableRegressed, SpeculativeDecodingActive, TuningHeld, Autoscaling."""
    replicas: int | None = None
    """Pods existing (scale subresource statusReplicasPath)."""
    ready_replicas: int | None = None
    """Pods Ready."""
    selector: str | None = None
    """Label selector of the pods as a string (scale subresource labelSelectorPath)."""
    revision: str | None = None
    """Revision applied and serving (the spec's, or the stable one after a rollback)."""
    sglang_version: str | None = None
    """SGLang release the command line was rendered for."""
    command: str | None = None
    """The rendered SGLang command line (entry point + flags; secrets appear as ``$(VAR)``)."""
    num_draft_tokens: int | None = None
    """``--speculative-num-draft-tokens`` as rendered (explicit or derived)."""
    effective: EffectiveSettings | None = None
    """What SGLang reports it runs."""
    accept_length: float | None = None
    """Latest acceptance length (``sglang:spec_accept_length``)."""
    accept_rate: float | None = None
    """Latest acceptance rate (``sglang:spec_accept_rate``; its formula differs between releases)."""
    tokens_per_second: float | None = None
    """Latest per-request decode speed of the serving revision, tok/s: the probe's single-stream speed after the
    first token (signal probe) or 1 / mean inter-token latency (signal traffic), over the last measured interval.
    What the rollback compares; not ``sglang:gen_throughput`` (aggregate, moves with load)."""
    metrics_updated_at: str | None = None
    """When the metrics above were scraped (RFC 3339)."""
    revisions: list[RevisionRecord] = Field(default_factory=list)
    """Revision ledger, newest last, at most spec.rollback.historyLimit entries."""
    stable_revision: str | None = None
    """The last promoted revision: what a rollback returns to (never rolled back automatically itself)."""
    baseline: Baseline | None = None
    """The stable revision's figures new revisions are compared with."""
    analysis: Analysis | None = None
    """The analysis of the revision that runs (phase, counters, last sample)."""
    rejected_revisions: list[Rejection] = Field(default_factory=list)
    """Revisions not run again until the annotation ``sglang-operator.io/retry`` changes, oldest first."""
    rollbacks: list[RollbackRecord] = Field(default_factory=list)
    """Automatic rollbacks, oldest first, the newest few kept."""
    canary: CanaryState | None = None
    """The canary in progress (``spec.strategy.type: Canary``), unset when none runs."""
    summary: StatusSummary | None = None
    """The row ``kubectl get sgls`` shows (REPLICAS, ANALYSIS, REASON), canary-aware."""
    serving_workload: str | None = None
    """Name of the Deployment serving ``revision``: unset for ``<name>``; ``<name>-canary`` after a canary was
    promoted (the canary's workload took every replica; the next canary runs in ``<name>``)."""

    tuning_hold: TuningHold | None = None
    """The InPlace SGLangTuning holding the server (its trials run on the server's pods), unset when none does."""
    autoscaling: AutoscalingStatus | None = None
    """With ``spec.autoscaling``: the scale target, whether the loop judges now and the pause in force
    (docs/autoscaling.md)."""

    def dump(self) -> dict[str, Any]:
        """camelCase dict for a status patch, unset fields left out."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")

    def record(self, revision: str | None) -> RevisionRecord | None:
        """The ledger record of ``revision`` (None: no such record, or ``revision`` is None)."""
        return next((r for r in self.revisions if revision is not None and r.revision == revision), None)

    @property
    def applied_record(self) -> RevisionRecord | None:
        """The ledger record of :attr:`revision`, the revision applied (what a refused update leaves running)."""
        return self.record(self.revision)

    def condition(self, type_: str) -> Condition | None:
        """The condition of type ``type_`` (:class:`ConditionType`), None when status has none."""
        return next((c for c in self.conditions if c.type == type_), None)
