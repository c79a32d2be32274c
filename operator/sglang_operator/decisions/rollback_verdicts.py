"""The verdicts of the rollback decision (:mod:`sglang_operator.decisions.rollback`): :class:`Verdicts`, the working
copy of one :func:`~sglang_operator.decisions.rollback.step` call (state, policy, clock, observation, the actions so
far) with its helpers, and what is done once a revision is judged: promote it, reject it (a rollback, or a failed
canary), pause the analysis, replace a Paused revision that serves nothing. The step machine (the tick, the samples,
a failure's outcome, what runs) extends it in :mod:`sglang_operator.decisions.rollback`.
"""

from __future__ import annotations

import datetime as dt
from typing import Literal

from sglang_operator.api.analysis import (
    Analysis,
    AnalysisPhase,
    LastSample,
    Rejection,
    RollbackRecord,
    SampleFigures,
    SampleVerdict,
)
from sglang_operator.api.base import MESSAGE_LIMIT, RETRY_ANNOTATION, plural, truncate
from sglang_operator.api.rollback import RollbackAction, RollbackPolicy
from sglang_operator.api.status import Verdict
from sglang_operator.decisions import baseline, canary, criteria
from sglang_operator.decisions.actions import Action, Event
from sglang_operator.decisions.rollback_state import (
    REJECTIONS_KEPT,
    ROLLBACKS_KEPT,
    Observation,
    RollbackState,
    kept_rejections,
)
from sglang_operator.decisions.sampling.model import Sample


class Verdicts:
    """The working copy of one :func:`~sglang_operator.decisions.rollback.step` call and the verdicts it writes
    (the step machine, ``decisions.rollback._RollbackDecision``, extends it)."""

    def __init__(self, state: RollbackState, policy: RollbackPolicy, now: dt.datetime, obs: Observation) -> None:
        self.state, self.policy, self.now, self.obs = state, policy, now, obs
        self.actions: list[Action] = []
        self.wanted = obs.spec_revision or obs.revision

    # --- helpers -------------------------------------------------------------------------------------------

    @property
    def analysis(self) -> Analysis:
        assert self.state.analysis is not None
        return self.state.analysis

    def event(self, type_: Literal["Normal", "Warning"], reason: str, message: str) -> None:
        if self.policy.action != RollbackAction.DRY_RUN:
            self.actions.append(Event(type_, reason, message))

    def enter(self, phase: AnalysisPhase, reason: str | None = None, message: str | None = None) -> None:
        analysis = self.analysis
        analysis.phase, analysis.since, analysis.reason, analysis.message = phase, self.now, reason, message

    def fresh(self, phase: AnalysisPhase, reason: str | None = None, message: str | None = None) -> None:
        self.state.analysis = Analysis(revision=self.obs.revision, phase=phase, since=self.now, reason=reason,
                                       message=message, progress_started_at=self.now,
                                       retry_token=self.obs.retry_token)

    def last(self, kind: str, verdict: SampleVerdict, reason: str, sample: Sample | None = None) -> None:
        fig = sample.figures if sample is not None else None
        self.analysis.last_sample = LastSample(
            at=sample.end if sample is not None else self.now, kind=kind, verdict=verdict.value, reason=reason,
            tokens_per_second=criteria.finite(fig.decode_tokens_per_second) if fig else None,
            accept_length=criteria.finite(fig.accept_length) if fig else None,
            accept_rate=criteria.finite(fig.accept_rate) if fig else None,
            running_requests=criteria.finite(fig.running_requests) if fig else None)

    def is_stable(self) -> bool:
        return self.analysis.revision == self.state.stable_revision

    def comparable(self) -> bool:
        base = self.state.baseline
        return base is not None and not criteria.setup_differences(base, self.obs.setup, self.policy.signal.value)

    # --- verdicts --------------------------------------------------------------------------------------------

    def promote(self, verified_for: float) -> None:
        a = self.analysis
        med = criteria.medians(a.valid_figures)
        new = baseline.measured(a.revision, a.valid_figures, self.policy.signal.value, self.obs.setup, self.now)
        assert med is not None and new is not None
        previous, self.state.baseline, self.state.stable_revision = self.state.stable_revision, new, a.revision
        self.state.rejected_revisions = [r for r in self.state.rejected_revisions if r.revision != a.revision]
        message = (f"{a.revision}: {criteria.figures_text(med, self.policy)} "
                   f"(median of {plural(len(a.valid_figures), 'sample')} over {verified_for:.0f} s); "
                   f"stable revision" + (f" in place of {previous}" if previous else ""))
        a.valid_figures, a.failing_figures = [], []
        self.enter(AnalysisPhase.STABLE, "Promoted", message)
        self.actions.append(criteria.record(a.revision, Verdict.PROMOTED, message, med,
                                            self.state.baseline.samples))
        self.event("Normal", "Promoted", message)

    def serves_nothing(self) -> bool:
        """No pod of the analysed revision is Ready while some are wanted (``desired_pods`` > 0)."""
        return self.obs.desired_pods > 0 and not any(p.ready for p in self.obs.pods)

    def ready_pods(self) -> str:
        return f"{sum(p.ready for p in self.obs.pods)}/{self.obs.desired_pods} pods Ready"

    def replace_paused(self) -> None:
        """A revision Paused for ``MaxRollbacksReached`` that serves nothing now: replaced by the stable revision
        (the limit is for revisions that serve but regress)."""
        a, stable = self.analysis, self.state.stable_revision
        if stable is None or stable == a.revision or self.policy.action != RollbackAction.ROLLBACK:
            return
        before = truncate(a.message or a.revision, MESSAGE_LIMIT // 2)
        message = f"{before}; then {self.ready_pods()}: it serves nothing"
        self.reject("NotServing", message, stable, None)

    def reject(self, cause: str, message: str, stable: str, med: SampleFigures | None, samples: int | None = None,
               note: str = "") -> None:
        """Reject the analysed revision (``message``; ``med``: the medians of ``samples`` failing samples, for the
        ledger) and apply ``stable``."""
        a = self.analysis
        others = [r for r in self.state.rejected_revisions if r.revision != a.revision]
        rejections = [*others, Rejection(revision=a.revision, reason=message, at=self.now,
                                         retry_token=self.obs.retry_token)]
        self.state.rejected_revisions, evicted = kept_rejections(rejections, self.wanted)
        for old in evicted:
            self.event("Warning", "RejectionForgotten",
                       f"the rejection of revision {old.revision} (at {old.at.isoformat()}) is forgotten: only the "
                       f"newest {REJECTIONS_KEPT} rejections are kept; a spec asking for {old.revision} again would "
                       f"run it without the rollback's memory of: {old.reason}")
        kept = max(ROLLBACKS_KEPT, self.policy.max_rollbacks)
        record = RollbackRecord(**{"from": a.revision, "to": stable, "reason": message, "at": self.now})
        self.state.rollbacks = [*self.state.rollbacks, record][-kept:]
        self.enter(AnalysisPhase.ROLLING_BACK, cause, message)
        self.actions.append(criteria.record(a.revision, Verdict.REJECTED, message, med, samples))
        self.event("Warning", "RollingBack", f"{message}; applying the stable revision {stable}{note}")

    def reject_canary(self, r: canary.Rejected) -> None:
        """A failed canary's revision is rejected (as a failed revision is; no rollback record: the stable revision
        never stopped serving)."""
        revision, message = r.record.revision, r.record.reason
        others = [x for x in self.state.rejected_revisions if x.revision != revision]
        rejections = [*others, Rejection(revision=revision, reason=message, at=self.now,
                                         retry_token=self.obs.retry_token, canary_reason=r.cause)]
        self.state.rejected_revisions, evicted = kept_rejections(rejections, self.wanted)
        for old in evicted:
            self.event("Warning", "RejectionForgotten",
                       f"the rejection of revision {old.revision} (at {old.at.isoformat()}) is forgotten: only the "
                       f"newest {REJECTIONS_KEPT} rejections are kept")
        self.actions.append(r.record)
        self.event("Warning", "CanaryFailed", f"{message}; the stable revision {self.obs.revision} keeps serving; "
                                              f"change the annotation {RETRY_ANNOTATION} to try {revision} again")

    def pause(self, reason: str, message: str) -> None:
        self.enter(AnalysisPhase.PAUSED, reason, message)
        self.analysis.retry_token = self.obs.retry_token
        self.event("Warning", "Paused", f"{message}; change the annotation {RETRY_ANNOTATION} to verify again")
