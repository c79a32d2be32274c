"""One observer tick of the rollback analysis for one SGLangServer, as a pure function of its typed status.

:func:`judge` reads the analysis held in ``status`` (:class:`~sglang_operator.api.status.SGLangServerStatus`,
parsed once per view) as the typed :class:`~sglang_operator.decisions.rollback_state.RollbackState`, runs
:func:`~sglang_operator.decisions.rollback.step`, writes the ledger verdicts it decided
(:func:`sglang_operator.decisions.status.judged`) and derives every condition the observer owns
(:func:`sglang_operator.decisions.derive.derive`). The observer merges :attr:`Judged.status` into its one status
patch and carries out :attr:`Judged.actions` (events, applying a revision). No I/O, no clock.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from sglang_operator.api.analysis import Analysis, AnalysisPhase, CanaryPhase, CanaryState
from sglang_operator.api.base import PROMOTE_ANNOTATION as PROMOTE_ANNOTATION
from sglang_operator.api.base import clone, plural, truncate
from sglang_operator.api.rollback import RollbackPolicy
from sglang_operator.api.status import SGLangServerStatus, Verdict
from sglang_operator.decisions import baseline, criteria
from sglang_operator.decisions import status as status_decisions
from sglang_operator.decisions.conditions import Condition, condition
from sglang_operator.decisions.derive import derive
from sglang_operator.decisions.rollback import Action, Event, RecordVerdict, step
from sglang_operator.decisions.rollback_state import Observation, RollbackState
from sglang_operator.decisions.sampling.model import Sample


@dataclass(frozen=True)
class Judged:
    """The outcome of one tick: ``status`` (camelCase keys to merge into the patch: the analysis keys, and
    ``revisions`` when a verdict was recorded), ``conditions`` (every observer-owned condition), ``actions``
    (for the observer to carry out, in order), ``state`` (the new analysis)."""

    state: RollbackState
    status: dict[str, Any]
    conditions: list[Condition]
    actions: list[Action] = field(default_factory=list)


def sample_for(samples: Sequence[Sample] | None, revision: str) -> Sample | None:
    """The sample of ``revision`` among one interval's ``samples`` (None: not sampled this tick)."""
    return next((s for s in samples or () if s.revision == revision), None)


def judge(
    status: SGLangServerStatus, sample: Sample | None, policy: RollbackPolicy, now: dt.datetime,
    observed: Observation, pod_conditions: list[Condition], generation: int,
    speculative: Condition | None = None, promote_token: str | None = None,
) -> Judged:
    """One tick: ``status`` (the stored status with what the server's job applied, typed; read, never modified), the
    interval's ``sample`` of the applied revision (or None), the policy of the object's spec, what the observer saw
    (``observed``), pod health's conditions, the ``SpeculativeDecodingActive`` condition when it can be told, and
    the annotation :data:`PROMOTE_ANNOTATION` (:func:`promote`)."""
    before = RollbackState.from_status(status)
    state, actions = step(before, sample, policy, now, observed=observed)
    if promote_token is not None:
        state, more = promote(state, promote_token, policy, now, observed)
        actions += more
    out: dict[str, Any] = state.status_patch()
    verdicts = [a for a in actions if isinstance(a, RecordVerdict)]
    if verdicts or state.baseline != before.baseline:  # the ledger rewritten: a verdict, a baseline's source
        ledger = status_decisions.ledger_of(status)
        for v in verdicts:
            ledger = status_decisions.judged(ledger, v.revision, v.verdict.value, v.reason, now, v.tokens_per_second,
                                             v.accept_length, v.samples, v.accept_rate if v.accept_rate is not None
                                             else accept_rate(v.revision, sample, before), v.canary_steps,
                                             v.extra_figures)
        if state.baseline is not None and state.baseline != before.baseline:  # where it came from, on its record
            ledger = baseline.noted(ledger, state.baseline)
        out["revisions"] = ledger
    conditions = derive(pod_conditions, state, policy.action, generation, now, speculative)
    canary_cond = canary_condition(before.canary, state.canary, generation, now)
    if canary_cond is not None:
        conditions = [*conditions, canary_cond]
    return Judged(state, out, conditions, [a for a in actions if not isinstance(a, RecordVerdict)])


def canary_condition(before: CanaryState | None, after: CanaryState | None, generation: int,
                     now: dt.datetime) -> Condition | None:
    """``Canary``: True while a canary runs (reason its phase, or ``Pending`` with the scheduler's message while a
    canary pod cannot run), False once it ended (reason how: ``Promoted``, ``Regressed``, ``Aborted``…); None when
    no canary ran before nor runs now (the condition is left as it is)."""
    if after is not None:
        if after.pending and after.phase is not CanaryPhase.REMOVING:
            return condition("Canary", "True", "Pending", truncate(f"{after.split} (stable+canary): {after.pending}"),
                             generation, now)
        message = after.message or (f"revision {after.revision}: step {min(after.step + 1, after.steps)}/{after.steps} "
                                    f"at {after.split} (stable+canary)")
        return condition("Canary", "True", after.phase.value, truncate(message), generation, now)
    if before is None:
        return None
    reason = before.reason if before.phase is CanaryPhase.REMOVING else "Promoted"
    message = before.message or f"canary {before.revision} ended"
    if reason == "Promoted":
        message = f"canary {before.revision} promoted to every replica"
    return condition("Canary", "False", reason or "Ended", truncate(message), generation, now)


def accept_rate(revision: str, sample: Sample | None, before: RollbackState) -> float | None:
    """The acceptance rate to record with a verdict on ``revision`` that carries none of its own (the median of the
    samples behind it, :attr:`~sglang_operator.decisions.actions.RecordVerdict.accept_rate`): SGLang's
    ``sglang:spec_accept_rate`` (0..1, the release's own formula) in this interval's ``sample`` of that same revision,
    else in the analysis' last sample of it; None where the release reports none (or no sample measured it)."""
    if sample is not None and sample.revision == revision and sample.figures.accept_rate is not None:
        return criteria.finite(sample.figures.accept_rate)
    a = before.analysis
    if a is not None and a.revision == revision and a.last_sample is not None:
        return a.last_sample.accept_rate
    return None


def promote(state: RollbackState, token: str, policy: RollbackPolicy, now: dt.datetime,
            observed: Observation) -> tuple[RollbackState, list[Action]]:
    """A user's promotion (``sglang-operator promote``): when ``token`` (the annotation
    :data:`PROMOTE_ANNOTATION`) names the revision being verified (``observed.revision``, not already stable, not
    being rolled back), it becomes the stable revision now, its baseline the median of its valid samples so far.
    With no valid sample yet nothing happens but a Warning event (once per token: the analysis remembers it); with
    fewer than ``minSamples`` the promotion's event is a Warning that says so (a baseline from one sample is a
    guess). Pure; ``state`` is not modified."""
    a = state.analysis
    if (a is None or token != observed.revision or a.revision != token or state.stable_revision == token
            or a.phase in (AnalysisPhase.ROLLING_BACK, AnalysisPhase.ROLLED_BACK) or a.promote_token == token):
        return state, []
    state = clone(state)
    assert state.analysis is not None
    a = state.analysis
    a.promote_token = token
    med = criteria.medians(a.valid_figures)
    new = baseline.measured(token, a.valid_figures, policy.signal.value, observed.setup, now)
    if med is None or new is None:
        return state, [Event("Warning", "PromoteRefused", f"revision {token} has no measured sample yet: promote it "
                                                          f"once a sample was taken (status.analysis.lastSample)")]
    previous = state.stable_revision
    state.baseline = new
    state.stable_revision = token
    state.rejected_revisions = [r for r in state.rejected_revisions if r.revision != token]
    shown = criteria.figures_text(med, policy)
    samples = len(a.valid_figures)
    early = (f"; only {plural(samples, 'sample')} of minSamples {policy.min_samples}: the baseline new revisions are "
             "compared with is less certain than a verified one" if samples < policy.min_samples else "")
    message = (f"{token}: promoted by the user ({PROMOTE_ANNOTATION}) with {shown} (median of "
               f"{plural(samples, 'sample')}); stable revision" + (f" in place of {previous}" if previous else "")
               + early)
    a.valid_figures, a.failing_figures = [], []
    a.phase, a.since, a.reason, a.message = AnalysisPhase.STABLE, now, "Promoted", message
    a.consecutive_failures = 0
    return state, [criteria.record(token, Verdict.PROMOTED, message, med, state.baseline.samples),
                   Event("Warning" if early else "Normal", "Promoted", message)]


def warm_up_ends(analysis: Analysis | None, warmup_seconds: float, now: dt.datetime) -> bool:
    """Whether the warm-up of the analysed revision ends at this tick (all its pods Ready since
    ``analysis.readySince`` for ``warmup_seconds``, not yet marked warmed up): the observer then starts a sampling
    interval now, so the first judged interval begins at the warm-up's end and the earliest rollback is
    warm-up + failureThreshold × interval after the pods were Ready, not up to one interval later."""
    a = analysis
    if a is None or a.phase not in (AnalysisPhase.WARMING_UP, AnalysisPhase.ROLLED_BACK, AnalysisPhase.STABLE) \
            or a.warmed_up_at is not None or a.ready_since is None:
        return False
    return now >= a.ready_since + dt.timedelta(seconds=warmup_seconds)
