"""The rollback decision: ONE pure function, :func:`step`, and the "what should run" rule, :func:`what_should_run`.

``step(state, sample, policy, now, observed=...) -> (state, actions)`` is called by the observer on every tick for
every SGLangServer, with the interval's :class:`~sglang_operator.decisions.sampling.model.Sample` when the sampler
produced one (else ``None``: pod readiness, the progress deadline and the retry annotation are still judged). It does no
I/O, reads no clock and never sees a raw API dict: the observer turns ``status`` into
:class:`~sglang_operator.decisions.rollback_state.RollbackState` (``RollbackState.from_status``) and back
(``RollbackState.status_patch``), and carries out the actions (:class:`Apply`, :class:`Event`,
:class:`RecordVerdict`). The state and the observation are in :mod:`sglang_operator.decisions.rollback_state`; the
verdicts (promote, reject, pause) in :mod:`sglang_operator.decisions.rollback_verdicts`. The state machine is in
``docs/rollback.md``:

- WarmingUp: from the first tick a revision is applied until all its pods have been Ready, without interruption
  (a pod leaving Ready or restarting starts it over), for ``warmupSeconds``; a revision that has not done so
  ``progressDeadlineSeconds`` after it was applied fails (the deadline is never reset). A pod never Ready in this
  analysis that crash-loops (``maxRestartsBeforeReady`` restarts) or never starts (an image that cannot be pulled, a
  missing Secret: the kubelet's reason quoted) fails the revision at once (:mod:`sglang_operator.decisions.starts`);
  a pod that has been Ready once is left to the deadline (readiness blips).
- Verifying: every sample whose interval starts after the warm-up counts. Inconclusive samples (no data) count for
  nothing; errors count only towards ``errorThreshold`` in a row → Paused (``MeasurementErrors``); a pod whose
  ``/server_info`` answered but not as SGLang (``Observation.not_sglang``) is Paused at its first sample
  (``NotSGLang``, the sentence naming ``spec.sglang.image``); a measured sample passes or fails
  (:func:`sglang_operator.decisions.criteria.check`); a pod of the revision restarting or leaving Ready makes the
  interval a failure. ``failureThreshold`` failures in a row fail the revision; ``minSamples`` measured samples
  and ``verifySeconds`` promote it. The baseline's rule (its sources, the upward-only refresh of the stable one):
  :mod:`sglang_operator.decisions.baseline`.
- A failed revision is rejected and the stable revision applied again (RollingBack → RolledBack), unless the
  action is Alert or DryRun, there is no stable revision, or ``maxRollbacks`` were used in the window while it
  still serves (a Ready pod): then it keeps running, Paused. A failed revision that serves nothing (no Ready pod
  of ``desired_pods`` > 0) is always replaced, whatever ``maxRollbacks`` says, and so is one Paused for
  ``MaxRollbacksReached`` as soon as it serves nothing. The stable revision itself is never rolled back: its
  failures set ``analysis.stableRegression`` (condition StableRegressed) instead, updated with the current figures
  by every failing sample while it lasts (another Warning event when a figure moves by more than
  :data:`REGRESSION_CHANGE`).
- A rejected revision runs again only when the annotation ``sglang-operator.io/retry`` changes value; a Paused
  analysis starts over (WarmingUp) on such a change too.

``DryRun`` posts no events; :mod:`sglang_operator.decisions.derive` gives no conditions for it either.
"""

from __future__ import annotations

import datetime as dt

from sglang_operator.api.analysis import (
    AnalysisPhase,
    CanaryPhase,
    PodStart,
    SampleFigures,
    SampleVerdict,
    StableRegression,
    figure,
)
from sglang_operator.api.base import RETRY_ANNOTATION as RETRY_ANNOTATION
from sglang_operator.api.base import clone, plural
from sglang_operator.api.rollback import RollbackAction, RollbackPolicy
from sglang_operator.api.status import Verdict
from sglang_operator.decisions import baseline, canary, criteria, starts
from sglang_operator.decisions.actions import Action, Apply, Event, RecordVerdict
from sglang_operator.decisions.effective import NOT_SGLANG
from sglang_operator.decisions.rollback_state import (
    CANARY_REASON_PREFIX,
    FIGURES_KEPT,
    Observation,
    RollbackState,
    Target,
)
from sglang_operator.decisions.rollback_verdicts import Verdicts
from sglang_operator.decisions.sampling.model import PodView, Sample, SampleKind

__all__ = ["Action", "Apply", "Event", "RecordVerdict", "step", "what_should_run"]

"""Annotation whose change of value (any string) allows one new attempt of a rejected revision, or resumes a
Paused analysis."""
SIMULATED_ACCEPTANCE = ("spec.env forces SGLang's acceptance (SGLANG_SIMULATE_ACC_*): draft tokens are committed "
                        "unverified, so accept length and tok/s are made up; not judged (remove it, then retry)")
"""Why a revision whose spec forces acceptance is never judged (its last sample, its Paused message, its verdict)."""
REGRESSION_CHANGE = 0.1
"""A stable regression's ``StableRegressed`` event is posted again when its decode speed or accept length moves by
more than this fraction from the figures the last such event named (the condition and the gauges follow every
failing sample)."""


def what_should_run(wanted: str, state: RollbackState, retry_token: str | None) -> Target:
    """The revision to apply when ``wanted`` is asked for (the spec's revision; the revision applied when the spec
    is refused): ``wanted``, unless it was rejected while the annotation :data:`RETRY_ANNOTATION` had the value
    ``retry_token`` still has, then the stable revision. Used by the reconcile handler (create, update, resume)
    and by :func:`step`, so both agree."""
    rejected = state.rejection(wanted)
    stable = state.stable_revision
    if rejected is None or rejected.retry_token != retry_token or stable is None or stable == wanted:
        return Target(wanted)
    return Target(stable, f"revision {wanted} was rejected ({rejected.reason}); the stable revision {stable} "
                          f"runs; change the annotation {RETRY_ANNOTATION} to try {wanted} again")


def step(
    state: RollbackState, sample: Sample | None, policy: RollbackPolicy, now: dt.datetime, *,
    observed: Observation,
) -> tuple[RollbackState, list[Action]]:
    """One tick of the rollback analysis: the new state and what to do. Pure; ``state`` is not modified."""
    decision = _RollbackDecision(clone(state), policy, now, observed)
    decision.run(sample)
    return decision.state, decision.actions


class _RollbackDecision(Verdicts):
    """One :func:`step` call: the tick, its samples, a failure's outcome and what runs, over the working copy and
    the verdicts of :class:`~sglang_operator.decisions.rollback_verdicts.Verdicts`."""

    # --- the tick --------------------------------------------------------------------------------------------

    def run(self, sample: Sample | None) -> None:
        self.follow_revision()
        token_changed = self.obs.retry_token != self.analysis.retry_token
        if self.analysis.phase == AnalysisPhase.PAUSED:
            if token_changed:
                self.resume()
            elif self.analysis.reason == "MaxRollbacksReached" and self.serves_nothing():
                self.replace_paused()
        else:
            self.analysis.retry_token = self.obs.retry_token
        if self.analysis.phase not in (AnalysisPhase.PAUSED, AnalysisPhase.ROLLING_BACK):
            self.watch_pods(self.obs.pods)
            analysis = self.analysis
            if sample is not None and sample.revision == analysis.revision and analysis.warmed_up_at is not None:
                self.watch_pods(sample.revision_pods)
        if sample is not None and sample.revision == self.analysis.revision:
            self.judge(sample)
        elif sample is None:
            self.missing_interval()
        self.settle_stable_phase()
        if self.run_canary(sample):
            return
        self.converge(token_changed)

    def run_canary(self, sample: Sample | None) -> bool:
        """The canary companion (:func:`sglang_operator.decisions.canary.tick`) when a canary policy is in force or a
        canary runs; returns whether it decides what runs this tick (then :meth:`converge` stands aside)."""
        obs = self.obs.canary
        if obs is None and self.state.canary is None:
            return False
        obs = obs or canary.CanaryObservation(policy=None, replicas=self.obs.desired_pods, name="")
        runnable = what_should_run(self.wanted, self.state, self.obs.retry_token).revision == self.wanted
        out = canary.tick(self.state.canary, obs, self.policy, self.now, wanted=self.obs.spec_revision,
                          runnable=runnable, serving=self.obs.revision, stable=self.state.stable_revision,
                          stable_sample=sample if sample is not None and sample.revision == self.obs.revision else None,
                          setup=self.obs.setup, stable_baseline=self.state.baseline)
        self.state.canary = out.state
        self.actions += out.actions
        if out.rejected is not None:
            self.reject_canary(out.rejected)
        if out.promoted is not None:
            self.state.stable_revision = out.promoted
            if out.baseline is not None:
                self.state.baseline = out.baseline
            self.state.rejected_revisions = [r for r in self.state.rejected_revisions if r.revision != out.promoted]
            a = self.state.analysis
            if a is not None and a.revision == out.promoted:
                if a.phase == AnalysisPhase.WARMING_UP:  # its pods were warmed up and judged as the canary's
                    a.ready_since = a.warmed_up_at = a.last_interval_at = self.now
                    a.pod_restarts, a.pod_starts = {p.name: p.restarts for p in self.obs.pods}, {}
                    self.enter(AnalysisPhase.STABLE, "Promoted", f"stable revision {a.revision} (promoted by its "
                                                                 f"canary)")
                self.settle_stable_phase()
        return out.owns

    def follow_revision(self) -> None:
        """A new analysis when the applied revision changed (the stable one coming back ends a rollback)."""
        a = self.state.analysis
        rev = self.obs.revision
        if a is not None and a.revision == rev:
            return
        if a is not None and a.phase == AnalysisPhase.ROLLING_BACK and rev == self.state.stable_revision:
            self.fresh(AnalysisPhase.ROLLED_BACK, a.reason, a.message)
            self.event("Warning", "RolledBack", f"{a.message}; the stable revision {rev} is applied again")
            return
        self.fresh(AnalysisPhase.WARMING_UP)
        c = self.state.canary
        if c is not None and c.phase is CanaryPhase.PROMOTING and c.revision == rev:
            return  # a promoted canary: Stable in this same tick (run_canary), its pods warmed up and judged already
        self.event("Normal", "WarmingUp", f"revision {rev}: warming up, {self.policy.warmup_seconds} s once all "
                                          f"pods are Ready (deadline {self.policy.progress_deadline_seconds} s)")

    def resume(self) -> None:
        """The retry annotation changed while Paused: verification starts over; the restarts its pods made before
        count no longer (``maxRestartsBeforeReady`` counts from here)."""
        self.fresh(AnalysisPhase.WARMING_UP)
        self.analysis.pod_starts = {p.name: PodStart(uid=p.uid, restart_count=p.start_restarts, ready=p.ready)
                             for p in self.obs.pods}
        if not self.is_stable():
            self.actions.append(RecordVerdict(self.analysis.revision, Verdict.VERIFYING,
                                              f"{RETRY_ANNOTATION} changed"))
        self.event("Normal", "Retry",
                   f"annotation {RETRY_ANNOTATION} changed: verifying {self.analysis.revision} again")

    def watch_pods(self, pods: tuple[PodView, ...]) -> None:
        """Warm-up and progress deadline before the warm-up ended; restarts and readiness losses after it."""
        a = self.analysis
        if a.warmed_up_at is None:
            restarted = any(p.restarts > a.pod_restarts.get(p.name, p.restarts) for p in pods)
            a.pod_restarts = {p.name: p.restarts for p in pods}
            a.pod_starts, failure = starts.check(a.pod_starts, pods, self.policy.max_restarts_before_ready, self.now,
                                                 a.revision)  # a crash loop, or a pod that never starts
            if failure is not None and self.obs.desired_pods > 0:
                self.failed(failure.cause, failure.message)
                return
            ready = sum(p.ready for p in pods)
            desired = self.obs.desired_pods
            if desired > 0 and ready >= desired:
                a.ready_since = self.now if restarted else a.ready_since or self.now
                warm_at = a.ready_since + dt.timedelta(seconds=self.policy.warmup_seconds)
                if self.now >= warm_at:
                    self.warmed_up(warm_at, ready)
                    return
            else:
                a.ready_since = None
            deadline = a.progress_started_at + dt.timedelta(seconds=self.policy.progress_deadline_seconds)
            if desired > 0 and self.now >= deadline:
                self.failed("ProgressDeadlineExceeded",
                            f"{a.revision}: {ready}/{desired} pods Ready, not warmed up "
                            f"{self.policy.progress_deadline_seconds} s after it was applied "
                            f"(progressDeadlineSeconds)")
            return
        seen = {p.name for p in pods}
        crashed: PodView | None = None
        for pod in pods:
            before = a.pod_restarts.get(pod.name)
            if before is not None and pod.restarts > before:
                a.disruption = f"pod {pod.name} restarted ({before} → {pod.restarts} restarts)"
                a.pod_restarts[pod.name] = pod.restarts
                a.verify_restarts += pod.restarts - before
                crashed = pod
            elif before is not None and not pod.ready:
                a.disruption = a.disruption or f"pod {pod.name} left Ready"
            elif before is None and pod.ready:
                a.pod_restarts[pod.name] = pod.restarts
        if pods is self.obs.pods:
            a.pod_restarts = {k: v for k, v in a.pod_restarts.items() if k in seen}
        limit = self.policy.max_restarts_while_verifying
        if crashed is not None and a.phase == AnalysisPhase.VERIFYING and a.verify_restarts >= limit:
            head = (f"{a.revision}: its pods restarted {a.verify_restarts} times since the warm-up ended "
                    f"(maxRestartsWhileVerifying {limit}), the last one pod {crashed.name}")
            self.failed("CrashLoop", f"{head}; its last crash: {crashed.crash}" if crashed.crash else head)

    def warmed_up(self, at: dt.datetime, ready: int) -> None:
        a = self.analysis
        a.warmed_up_at = a.last_interval_at = at
        a.pod_starts = {}
        if self.is_stable():
            if a.phase == AnalysisPhase.WARMING_UP:
                self.enter(AnalysisPhase.STABLE, "Promoted", f"stable revision {a.revision}")
                self.event("Normal", "Stable", f"stable revision {a.revision}: {plural(ready, 'pod')} Ready for "
                                               f"{self.policy.warmup_seconds} s; sampled against its baseline")
            return
        self.enter(AnalysisPhase.VERIFYING)
        self.event("Normal", "Verifying", f"revision {a.revision}: {plural(ready, 'pod')} Ready for "
                                          f"{self.policy.warmup_seconds} s; verifying for "
                                          f"{self.policy.verify_seconds} s, "
                                          f"{plural(self.policy.min_samples, 'sample')}")

    # --- samples ---------------------------------------------------------------------------------------------

    def judge(self, sample: Sample) -> None:
        a = self.analysis
        if a.phase in (AnalysisPhase.PAUSED, AnalysisPhase.ROLLING_BACK):
            self.last(sample.kind.value, SampleVerdict.SKIPPED, f"{a.phase}: not judged", sample)
            return
        if a.warmed_up_at is None or sample.start < a.warmed_up_at:
            self.last(sample.kind.value, SampleVerdict.SKIPPED, "warming up: not judged", sample)
            return
        if self.obs.setup.simulated_acceptance:
            self.last(sample.kind.value, SampleVerdict.SKIPPED, SIMULATED_ACCEPTANCE, sample)
            self.pause("SimulatedAcceptance", f"{a.revision}: {SIMULATED_ACCEPTANCE}")
            if not self.is_stable():
                self.actions.append(RecordVerdict(a.revision, Verdict.UNVERIFIED, SIMULATED_ACCEPTANCE))
            return
        if self.obs.not_sglang:  # its /server_info answered, not as SGLang: nothing of it can be measured
            self.last(sample.kind.value, SampleVerdict.SKIPPED, self.obs.not_sglang, sample)
            self.pause(NOT_SGLANG, f"{a.revision}: {self.obs.not_sglang}")
            if not self.is_stable():
                self.actions.append(RecordVerdict(a.revision, Verdict.UNVERIFIED, self.obs.not_sglang))
            return
        a.last_interval_at = sample.end
        if a.disruption:
            reason, a.disruption = a.disruption, None
            self.last(sample.kind.value, SampleVerdict.FAIL, reason, sample)
            self.count_failure(reason, "Unstable")
            return
        if sample.kind == SampleKind.ERROR:
            a.consecutive_errors += 1
            n, limit = a.consecutive_errors, self.policy.error_threshold
            self.last(sample.kind.value, SampleVerdict.SKIPPED,
                      f"measurement error ({n}/{limit} in a row): {sample.reason}", sample)
            if n >= limit:
                self.pause("MeasurementErrors", f"{a.revision}: {n} measurement errors in a row, the last: "
                                                f"{sample.reason}")
                if not self.is_stable():
                    self.actions.append(RecordVerdict(a.revision, Verdict.UNVERIFIED, a.message or ""))
            return
        a.consecutive_errors = 0
        figures = criteria.measured(sample, self.policy)
        if figures is None:
            why = sample.reason or "no decode speed measured"
            self.last(sample.kind.value, SampleVerdict.SKIPPED, f"inconclusive: {why}", sample)
            return
        result = criteria.check(figures, self.policy, self.state.baseline, self.comparable())
        if a.phase == AnalysisPhase.VERIFYING:
            a.valid_samples += 1
            a.valid_figures = [*a.valid_figures, figures][-FIGURES_KEPT:]
        if result.passed:
            self.last(sample.kind.value, SampleVerdict.PASS, result.reason, sample)
            a.consecutive_failures, a.failing_figures = 0, []
            a.consecutive_passes += 1
            self.refresh_baseline(figures, sample)
            self.passed()
        else:
            self.last(sample.kind.value, SampleVerdict.FAIL, result.reason, sample)
            a.failing_figures = [*a.failing_figures, figures][-self.policy.failure_threshold:]
            self.count_failure(result.reason, "Regressed")

    def missing_interval(self) -> None:
        """No sample: an interval with a pod restart or readiness loss still counts as a failure."""
        a = self.analysis
        if a.warmed_up_at is None or not a.disruption or a.phase in (AnalysisPhase.PAUSED,
                                                                     AnalysisPhase.ROLLING_BACK):
            return
        since = a.last_interval_at or a.warmed_up_at
        if (self.now - since).total_seconds() < self.policy.interval_seconds:
            return
        reason, a.disruption, a.last_interval_at = a.disruption, None, self.now
        self.last("Missing", SampleVerdict.FAIL, reason)
        self.count_failure(reason, "Unstable")

    def passed(self) -> None:
        a, p = self.analysis, self.policy
        if a.phase == AnalysisPhase.VERIFYING:
            assert a.warmed_up_at is not None
            verified_for = (self.now - a.warmed_up_at).total_seconds()
            if a.valid_samples >= p.min_samples and verified_for >= p.verify_seconds:
                self.promote(verified_for)
        elif a.stable_regression is not None and a.consecutive_passes >= p.failure_threshold:
            a.stable_regression = None
            self.event("Normal", "StableRecovered", f"stable revision {a.revision} meets its baseline again")

    def refresh_baseline(self, figures: SampleFigures, sample: Sample) -> None:
        new = baseline.refresh(self.state.baseline, self.analysis, self.state.stable_revision, self.policy, figures,
                               sample.start, self.obs.setup, self.now)
        if new is not None:
            self.state.baseline = new
            self.event("Normal", "BaselineRefreshed", f"stable revision {new.revision}: baseline "
                                                      f"{baseline.origin(new)}")

    def count_failure(self, reason: str, cause: str) -> None:
        a = self.analysis
        baseline.interrupt(a)
        a.consecutive_failures += 1
        a.consecutive_passes = 0
        tracking = self.is_stable() and a.stable_regression is not None  # every failure updates its figures
        if a.consecutive_failures < self.policy.failure_threshold and not tracking:
            return
        med = criteria.medians(a.failing_figures)
        if med is not None and len(a.failing_figures) >= self.policy.failure_threshold:
            summary = criteria.check(med, self.policy, self.state.baseline, self.comparable())
            if not summary.passed:
                reason = summary.reason
        self.failed(cause, f"{a.revision}: {reason}")

    # --- outcomes --------------------------------------------------------------------------------------------

    def failed(self, cause: str, message: str) -> None:
        """The analysed revision failed: reject and roll back, or report and leave it running."""
        a, p = self.analysis, self.policy
        med = criteria.medians(a.failing_figures)
        samples = len(a.failing_figures) if med else None
        if self.is_stable():
            self.track_regression(message, med)
            return
        stable = self.state.stable_revision
        window_start = self.now - dt.timedelta(seconds=p.rollback_window_seconds)
        recent = [r for r in self.state.rollbacks if r.at > window_start]
        used_up = (f"{len(recent)} rollbacks in the last {p.rollback_window_seconds} s "
                   f"(maxRollbacks {p.max_rollbacks})")
        if stable is None:
            why, reason = "no stable revision to return to", "NoStableRevision"
        elif p.action != RollbackAction.ROLLBACK:
            why, reason = f"action {p.action.value}: not rolled back", "NotRolledBack"
        elif len(recent) >= p.max_rollbacks and not self.serves_nothing():
            why, reason = f"not rolled back: {used_up}", "MaxRollbacksReached"
        else:
            note = "" if len(recent) < p.max_rollbacks else (
                f" although {used_up}: it serves nothing ({self.ready_pods()})")
            self.reject(cause, message, stable, med, samples, note)
            return
        self.actions.append(criteria.record(a.revision, Verdict.FAILED, message, med, samples))
        self.pause(reason, f"{message}; {why}")

    def track_regression(self, message: str, med: SampleFigures | None) -> None:
        """The stable revision failed (``message``; ``med``: the medians of the current run's measured failures):
        a new ``analysis.stableRegression`` and its Warning event, or the current one updated, with another event
        when a figure moved by more than :data:`REGRESSION_CHANGE` from those of the last event."""
        a = self.analysis
        tps, length = (med.tokens_per_second, med.accept_length) if med is not None else (None, None)
        reg = a.stable_regression
        if reg is None:
            a.stable_regression = StableRegression(message=message, since=self.now, updated_at=self.now,
                                                   tokens_per_second=tps, accept_length=length, reported=med)
            self.event("Warning", "StableRegressed", f"stable revision {message}; not rolled back automatically")
            return
        moved = _moved(reg.reported, med)
        reg.message, reg.updated_at, reg.tokens_per_second, reg.accept_length = message, self.now, tps, length
        if moved:
            was = criteria.figures_text(reg.reported, self.policy)
            reg.reported = med
            self.event("Warning", "StableRegressed", f"stable revision {message} (was {was} at the last report; "
                                                     f"regressed since {reg.since.isoformat()}); not rolled back "
                                                     f"automatically")

    # --- what runs -------------------------------------------------------------------------------------------

    def settle_stable_phase(self) -> None:
        """The stable revision serving is RolledBack while the spec asks for a rejected revision, else Stable."""
        a = self.analysis
        if not self.is_stable() or a.phase not in (AnalysisPhase.STABLE, AnalysisPhase.ROLLED_BACK):
            return
        target = what_should_run(self.wanted, self.state, self.obs.retry_token)
        rejected = self.state.rejection(self.wanted)
        held_back = self.wanted != a.revision and target.revision == a.revision and rejected is not None
        if held_back and rejected is not None and rejected.canary_reason:  # never a rollback: still Stable
            reason = CANARY_REASON_PREFIX + rejected.canary_reason
            if a.phase != AnalysisPhase.STABLE or a.reason != reason:
                self.enter(AnalysisPhase.STABLE, reason, rejected.reason)
        elif held_back and rejected is not None:
            if a.phase != AnalysisPhase.ROLLED_BACK:
                self.enter(AnalysisPhase.ROLLED_BACK, "Rejected", rejected.reason)
        elif a.phase == AnalysisPhase.ROLLED_BACK or (a.reason or "").startswith(CANARY_REASON_PREFIX):
            self.enter(AnalysisPhase.STABLE, "Promoted", f"stable revision {a.revision}")

    def converge(self, token_changed: bool) -> None:
        """Apply what should run when it does not: the stable revision in place of a rejected one, a rejected one
        whose retry token changed, or the spec's own revision when it is not rejected but another runs (a spec
        update that an apply of the stable revision overwrote, or one the operator did not apply before a restart):
        no update is ever lost. ``observed.spec_revision`` None (the spec refused) asks for nothing."""
        target = what_should_run(self.wanted, self.state, self.obs.retry_token)
        if target.revision == self.obs.revision:
            return
        if self.state.rejection(self.wanted) is None:
            if self.obs.spec_revision is not None:
                self.actions.append(Apply(self.wanted, f"the spec's revision {self.wanted} is not running "
                                                       f"(revision {self.obs.revision} is): applying it"))
            return
        if target.revision == self.wanted:
            reason = f"annotation {RETRY_ANNOTATION} changed: one new attempt of {self.wanted}"
            if token_changed:
                self.event("Normal", "Retry", reason)
            self.actions.append(Apply(self.wanted, reason))
        else:
            self.actions.append(Apply(target.revision, target.reason))


def _moved(old: SampleFigures | None, new: SampleFigures | None) -> bool:
    """Whether a stable regression's figures moved enough for another event: one of them appeared or vanished, or
    moved by more than :data:`REGRESSION_CHANGE` of its old value."""
    if old is None or new is None:
        return (old is None) != (new is None)
    for was, now in ((figure(old, c.key), figure(new, c.key)) for c in criteria.CRITERIA):
        if (was is None) != (now is None):
            return True
        if was is not None and now is not None and abs(now - was) > REGRESSION_CHANGE * abs(was):
            return True
    return False
