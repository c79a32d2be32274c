"""PURE: the canary companion of :func:`sglang_operator.decisions.rollback.step` (``spec.strategy.type: Canary``).

:func:`tick` is called by ``step()`` on every observer tick; it does no I/O and reads no clock. Its state is
``status.canary`` (:class:`~sglang_operator.api.analysis.CanaryState`), so an operator restarted at any step resumes
to the same end. The machine (docs/canary.md):

- **Start**: the spec asks for a revision that is not rejected while the stable revision serves (``status.revision``
  is ``status.stableRevision``): the canary starts at step 1 in the workload that does not serve
  (:func:`sglang_operator.builders.canary.other_name`). Without a stable revision serving (the first revision, one
  still verifying) the spec's revision replaces the pods as with Recreate.
- **Moving**: one pod at a time, only once every canary pod wanted so far is Ready: the canary gains a pod and the
  stable workload keeps ``replicas + maxSurge − canary`` (at most ``replicas``), so ready capacity never drops
  below ``replicas − 1`` (maxSurge 0) or ``replicas`` (maxSurge 1) beyond a pod that is starting.
- **Comparing**: once the step's pods have been Ready for ``warmupSeconds``, every interval whose sample of the canary
  revision and of the stable revision (the SAME interval: the sampler samples both each interval) are both measured
  is compared: the canary against the stable revision's figures of that interval (the relative criteria), and the
  absolute floors (``minTokensPerSecond``, ``minAcceptLength``); the stored baseline's relative criteria do not
  apply (load and time of day move both revisions alike). An interval without both measurements is inconclusive:
  ``onInconclusive: Hold`` counts it for nothing, ``Rollback`` as a failure. A canary pod restarting or leaving Ready
  after the warm-up fails the interval; one restarting ``maxRestartsBeforeReady`` times before it was ever Ready,
  or never starting (the kubelet's reason quoted: :mod:`sglang_operator.decisions.starts`), fails the canary at
  once. ``failureThreshold`` failures in a row fail the canary; ``samples`` passes and ``judgeSeconds`` end the step
  (defaults ``minSamples``, ``verifySeconds``). A step not warmed up
  ``progressDeadlineSeconds`` after its last move fails (a pending pod's scheduler message quoted).
- **Promoting**: after the last step (or ``kubectl sglang promote``) the canary takes every replica the same way;
  then :class:`~sglang_operator.decisions.actions.PromoteCanary` makes its workload the serving one, and once
  ``status.revision`` shows it the revision becomes the stable one, its baseline the stable's × the canary ÷ stable
  speed ratio of the compared intervals (:mod:`sglang_operator.decisions.baseline`).
- **Removing**: a failure (or ``kubectl sglang abort``) rejects the revision (``step()`` records it), a new spec or
  a strategy change supersedes it. With maxSurge 0 the canary is deleted and the stable scaled back to
  ``replicas`` together; with maxSurge 1 the stable is scaled back first and the canary deleted once the stable is
  Ready at ``replicas``. The state is cleared once no canary pod is left.
- **Held**: with ``spec.rollback.action`` Alert or DryRun a failure is reported (verdict ``Failed``, a Warning
  event except with DryRun) and the canary keeps its split, compared no more, until ``kubectl sglang abort`` or
  ``promote`` or a new spec; it is rejected and removed once no pod of it is Ready (it serves nothing). A user's
  abort, a progress deadline without a Ready canary pod and a crash loop before Ready are removed whatever the
  action. A canary's removal is not a rollback: it is not counted in ``status.rollbacks`` or against
  ``maxRollbacks`` (the stable revision never stopped serving).
- **Scaling** during a canary recomputes the canary's count from the new ``replicas`` (a percent step follows it,
  every step stays at most ``replicas`` − 1; :meth:`~sglang_operator.api.spec.CanaryStrategy.step_replicas`) and the
  stable workload takes the rest; a larger canary grows one pod at a time, a smaller one shrinks at once.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field

from sglang_operator.api.analysis import (
    Baseline,
    CanaryPhase,
    CanarySample,
    CanaryState,
    CanaryStepRecord,
    SampleFigures,
    SampleVerdict,
    Setup,
)
from sglang_operator.api.base import plural
from sglang_operator.api.rollback import RollbackAction, RollbackPolicy
from sglang_operator.api.spec import CanaryStrategy, OnInconclusive
from sglang_operator.api.status import Verdict
from sglang_operator.builders.canary import other_name
from sglang_operator.decisions import baseline, criteria, starts
from sglang_operator.decisions.actions import Action, Event, PlaceCanary, PromoteCanary, RecordVerdict
from sglang_operator.decisions.placement import canary_due, stable_replicas
from sglang_operator.decisions.sampling.model import PodView, Sample

FIGURES_KEPT = 120
"""Figures kept per list in ``status.canary`` (the most recent)."""


@dataclass(frozen=True)
class CanaryObservation:
    """What the observer saw for a canary this tick. ``policy``: ``spec.strategy``'s canary policy (None: the spec's
    strategy is not Canary); ``replicas``: ``spec.replicas`` of the object; ``name``: the SGLangServer's;
    ``serving_workload``: ``status.servingWorkload``; ``pods``: the live pods of the canary revision;
    ``stable_ready``: Ready pods of the serving revision; ``sample``: the interval's sample of the canary revision
    (None: not due or none); ``pending``: why a canary pod does not run (the scheduler's message); the annotations
    ``promote_token`` and ``abort_token``."""

    policy: CanaryStrategy | None
    replicas: int
    name: str
    serving_workload: str | None = None
    pods: tuple[PodView, ...] = ()
    stable_ready: int = 0
    sample: Sample | None = None
    pending: str | None = None
    promote_token: str | None = None
    abort_token: str | None = None


@dataclass(frozen=True)
class Rejected:
    """The canary failed: ``step()`` rejects the revision of ``record`` and records it (verdict ``Rejected``;
    ``reason``: why, with the numbers; figures: the canary's medians of its failing intervals; its steps);
    ``cause``: the CamelCase reason."""

    cause: str
    record: RecordVerdict


@dataclass
class CanaryTick:
    """What :func:`tick` decided: the new ``state`` (None: no canary), the ``actions``, a rejection for ``step()``
    to record, the ``baseline`` of a canary revision that now serves every replica (``step()`` makes it the stable
    revision), and ``owns``: whether the canary decides what runs this tick (``step()``'s converge stands aside)."""

    state: CanaryState | None
    actions: list[Action] = field(default_factory=list)
    rejected: Rejected | None = None
    promoted: str | None = None
    baseline: Baseline | None = None
    owns: bool = False


def split(stable: int, canary: int) -> str:
    """``3+1``: stable + canary pods (the printer column)."""
    return f"{stable}+{canary}"


def tick(state: CanaryState | None, obs: CanaryObservation, policy: RollbackPolicy, now: dt.datetime, *,
         wanted: str | None, runnable: bool, serving: str, stable: str | None, stable_sample: Sample | None,
         setup: Setup, stable_baseline: Baseline | None = None) -> CanaryTick:
    """One tick of the canary. ``wanted``: the spec's revision (None: the spec is refused); ``runnable``: it is not
    held back by a rejection (:func:`~sglang_operator.decisions.rollback.what_should_run`); ``serving``:
    ``status.revision``; ``stable``: ``status.stableRevision``; ``stable_sample``: the serving revision's sample of
    this interval; ``setup``: the canary's model, GPUs and parallelism (for its baseline); ``stable_baseline``:
    ``status.baseline`` (scaled into the canary's at promotion:
    :func:`~sglang_operator.decisions.baseline.from_canary`). ``state`` is not modified."""
    if state is None:
        if not canary_due(obs.policy, obs.replicas, wanted, runnable, serving, stable):
            return CanaryTick(None)
        assert obs.policy is not None and wanted is not None
        c = CanaryState(revision=wanted, stable_revision=serving, workload=other_name(obs.name, obs.serving_workload),
                        phase=CanaryPhase.STEPPING, steps=len(obs.policy.steps), stable_replicas=obs.replicas,
                        started_at=now, moved_at=now, promote_token=obs.promote_token, abort_token=obs.abort_token)
        run = _Canary(c, obs, policy, now, obs.policy)
        run.event("Normal", "CanaryStarted",
                  f"revision {wanted}: canary in {c.workload} beside the stable revision {serving}, "
                  f"{plural(c.steps, 'step')}, maxSurge {obs.policy.max_surge}")
    else:
        run = _Canary(state.model_copy(deep=True), obs, policy, now, obs.policy or CanaryStrategy())
    run.run(wanted, serving, stable_sample, setup, stable_baseline)
    return run.out


class _Canary:
    """The working copy of one :func:`tick`."""

    def __init__(self, canary: CanaryState, obs: CanaryObservation, policy: RollbackPolicy, now: dt.datetime,
                 strategy: CanaryStrategy) -> None:
        self.canary, self.obs, self.policy, self.now, self.strategy = canary, obs, policy, now, strategy
        self.out = CanaryTick(canary, owns=True)

    def event(self, type_: str, reason: str, message: str) -> None:
        if self.policy.action.value != "DryRun":
            self.out.actions.append(Event("Warning" if type_ == "Warning" else "Normal", reason, message))

    @property
    def ready(self) -> int:
        return sum(p.ready for p in self.obs.pods)

    # --- the tick --------------------------------------------------------------------------------------------

    def run(self, wanted: str | None, serving: str, stable_sample: Sample | None, setup: Setup,
            stable_baseline: Baseline | None) -> None:
        c = self.canary
        if c.phase is CanaryPhase.PROMOTING and serving == c.revision:
            self.promoted(setup, stable_baseline)
            return
        if c.phase is not CanaryPhase.REMOVING:
            if serving != c.stable_revision:
                self.remove("Superseded", f"revision {serving} was applied to the serving workload")
            elif self.obs.policy is None:
                self.remove("Superseded", "spec.strategy.type is no longer Canary")
            elif wanted is not None and wanted != c.revision:
                self.remove("Superseded", f"the spec asks for revision {wanted} now: the canary starts again")
            elif self.obs.abort_token is not None and self.obs.abort_token != c.abort_token:
                c.abort_token = self.obs.abort_token
                self.fail("Aborted", f"{c.revision}: canary aborted by the user (sglang-operator.io/abort)",
                          verdict="Aborted")
            elif self.obs.promote_token == c.revision and c.promote_token != c.revision \
                    and c.phase in (CanaryPhase.STEPPING, CanaryPhase.HELD):
                c.promote_token = c.revision
                self.end_step("Promoted", "promoted by the user (sglang-operator.io/promote): the remaining "
                                          "analysis is skipped")
                self.promote()
        if c.phase is CanaryPhase.STEPPING:
            self.stepping(stable_sample)
        elif c.phase is CanaryPhase.HELD:
            self.held()
        if c.phase is CanaryPhase.PROMOTING:
            self.promoting()
        if c.phase is CanaryPhase.REMOVING:
            self.removing()

    # --- moving pods -----------------------------------------------------------------------------------------

    def target(self) -> int:
        if self.canary.phase is CanaryPhase.PROMOTING:
            return self.obs.replicas
        return self.strategy.step_replicas(self.canary.step, self.obs.replicas)

    def move(self) -> bool:
        """One pod towards the target when every canary pod wanted is Ready (fewer at once when the target fell:
        a scale-down); the stable keeps its share. Returns whether the split is at the target."""
        c, target = self.canary, self.target()
        if c.canary_replicas > target:
            c.canary_replicas = target
            self.moved()
        elif c.canary_replicas < target and self.ready >= c.canary_replicas:
            c.canary_replicas += 1
            self.moved()
        c.stable_replicas = stable_replicas(self.obs.replicas, self.strategy.max_surge, c.canary_replicas)
        self.place(f"canary step {min(c.step + 1, c.steps)}/{c.steps}")
        return c.canary_replicas == target

    def moved(self) -> None:
        c = self.canary
        c.moved_at, c.ready_since, c.warmed_up_at = self.now, None, None

    def place(self, why: str) -> None:
        c = self.canary
        c.split = split(c.stable_replicas, c.canary_replicas)
        self.out.actions.append(PlaceCanary(c.revision, c.workload, c.canary_replicas, c.stable_replicas,
                                            f"{why}: {c.split} (stable+canary)"))

    # --- a step ----------------------------------------------------------------------------------------------

    def stepping(self, stable_sample: Sample | None) -> None:
        c = self.canary
        at_target = self.move()
        if self.crash_loop():
            return
        if c.warmed_up_at is None:
            if at_target and c.canary_replicas > 0 and self.ready >= c.canary_replicas:
                c.ready_since = c.ready_since or self.now
                warm = c.ready_since + dt.timedelta(seconds=self.policy.warmup_seconds)
                if self.now >= warm:
                    c.warmed_up_at = warm
                    c.pod_restarts = {p.name: p.restarts for p in self.obs.pods}
                    c.pod_starts = {}
                    self.event("Normal", "CanaryJudging",
                               f"revision {c.revision}: canary step {c.step + 1}/{c.steps} at {c.split} "
                               f"(stable+canary), judged side by side with {c.stable_revision}")
            else:
                c.ready_since = None
            if c.warmed_up_at is None:
                self.deadline()
                return
        self.watch_pods()
        self.compare(stable_sample)

    def deadline(self) -> None:
        c = self.canary
        if (self.now - c.moved_at).total_seconds() < self.policy.progress_deadline_seconds:
            return
        why = f"; {c.pending}" if c.pending else ""
        self.fail("ProgressDeadlineExceeded",
                  f"{c.revision}: canary {self.ready}/{c.canary_replicas} pods Ready, not warmed up "
                  f"{self.policy.progress_deadline_seconds} s after its last move (progressDeadlineSeconds){why}")

    def crash_loop(self) -> bool:
        """A canary pod never Ready in this canary crash-loops or never starts: fails at once
        (:mod:`~sglang_operator.decisions.starts`)."""
        c = self.canary
        c.pending = self.obs.pending
        c.pod_starts, failure = starts.check(c.pod_starts, self.obs.pods, self.policy.max_restarts_before_ready,
                                             self.now, c.revision, canary=True)
        if failure is not None:
            self.fail(failure.cause, failure.message)
        return failure is not None

    def watch_pods(self) -> None:
        c = self.canary
        for pod in self.obs.pods:
            before = c.pod_restarts.get(pod.name)
            if before is not None and pod.restarts > before:
                c.disruption = f"canary pod {pod.name} restarted ({before} → {pod.restarts} restarts)"
                c.pod_restarts[pod.name] = pod.restarts
            elif before is not None and not pod.ready:
                c.disruption = c.disruption or f"canary pod {pod.name} left Ready"
            elif before is None and pod.ready:
                c.pod_restarts[pod.name] = pod.restarts

    def compare(self, stable_sample: Sample | None) -> None:
        c, sample = self.canary, self.obs.sample
        if sample is None or c.phase is not CanaryPhase.STEPPING:
            return
        assert c.warmed_up_at is not None
        if sample.start < c.warmed_up_at:
            return
        if c.disruption:
            reason, c.disruption = c.disruption, None
            self.last(sample, SampleVerdict.FAIL, reason, None, stable_sample)
            self.failure(reason, "Unstable")
            return
        mine, theirs = criteria.measured(sample, self.policy), criteria.measured(stable_sample, self.policy)
        if mine is None or theirs is None or stable_sample is None or stable_sample.start < c.warmed_up_at:
            side = "the canary" if mine is None else f"the stable revision {c.stable_revision}"
            why = (sample.reason if mine is None else stable_sample.reason if stable_sample else "") \
                or "no decode speed"
            self.last(sample, SampleVerdict.SKIPPED, f"inconclusive: {side} was not measured in this interval "
                                                     f"({why})", mine, stable_sample)
            if self.strategy.on_inconclusive is OnInconclusive.ROLLBACK:
                c.consecutive_inconclusive += 1
                if c.consecutive_inconclusive >= self.policy.failure_threshold:
                    self.fail("Inconclusive", f"{c.revision}: {c.consecutive_inconclusive} inconclusive intervals in "
                                              f"a row (onInconclusive Rollback)")
            return
        c.consecutive_inconclusive = 0
        c.speed_ratios = [*c.speed_ratios, mine.tokens_per_second / theirs.tokens_per_second][-FIGURES_KEPT:]
        base = criteria.baseline_of(c.stable_revision, theirs, 1, self.policy.signal.value)
        result = criteria.check(mine, self.policy, base, True)
        if result.passed:
            self.last(sample, SampleVerdict.PASS, result.reason, mine, stable_sample)
            c.consecutive_failures, c.failing_figures = 0, []
            c.judged += 1
            c.figures = [*c.figures, mine][-FIGURES_KEPT:]
            c.step_figures = [*c.step_figures, mine][-FIGURES_KEPT:]
            c.stable_figures = [*c.stable_figures, theirs][-FIGURES_KEPT:]
            step = self.strategy.steps[min(c.step, len(self.strategy.steps) - 1)]
            need = step.samples if step.samples is not None else self.policy.min_samples
            compare_for = step.judge_seconds if step.judge_seconds is not None else self.policy.verify_seconds
            if c.judged >= need and (self.now - c.warmed_up_at).total_seconds() >= compare_for:
                self.end_step("Passed", f"{plural(c.judged, 'interval')} passed side by side with "
                                        f"{c.stable_revision}")
                c.step += 1
                if c.step >= c.steps:
                    self.promote()
                else:
                    self.reset_step()
                    self.move()
        else:
            self.last(sample, SampleVerdict.FAIL, result.reason, mine, stable_sample)
            c.failing_figures = [*c.failing_figures, mine][-self.policy.failure_threshold:]
            c.stable_figures = [*c.stable_figures, theirs][-FIGURES_KEPT:]
            self.failure(result.reason, "Regressed")

    def last(self, sample: Sample, verdict: SampleVerdict, reason: str, mine: SampleFigures | None,
             stable_sample: Sample | None) -> None:
        theirs = criteria.measured(stable_sample, self.policy)
        self.canary.last_sample = CanarySample(
            at=sample.end, verdict=verdict.value, reason=reason,
            tokens_per_second=mine.tokens_per_second if mine else None,
            accept_length=mine.accept_length if mine else None,
            stable_tokens_per_second=theirs.tokens_per_second if theirs else None,
            stable_accept_length=theirs.accept_length if theirs else None)

    def failure(self, reason: str, cause: str) -> None:
        c = self.canary
        c.consecutive_failures += 1
        if c.consecutive_failures < self.policy.failure_threshold:
            return
        med, stable_med = criteria.medians(c.failing_figures), criteria.medians(c.stable_figures[-len(
            c.failing_figures):] if c.failing_figures else [])
        if med is not None and stable_med is not None:
            base = criteria.baseline_of(c.stable_revision, stable_med, len(c.failing_figures),
                                        self.policy.signal.value)
            summary = criteria.check(med, self.policy, base, True)
            if not summary.passed:
                reason = (f"{summary.reason} (medians of {plural(len(c.failing_figures), 'interval')}, the stable "
                          f"pods measured in the same intervals)")
        self.fail(cause, f"{c.revision}: canary {reason}")

    def reset_step(self) -> None:
        c = self.canary
        c.judged, c.consecutive_failures, c.consecutive_inconclusive = 0, 0, 0
        c.step_figures, c.stable_figures, c.failing_figures = [], [], []
        c.warmed_up_at, c.ready_since, c.disruption = None, None, None

    def end_step(self, verdict: str, reason: str) -> None:
        c = self.canary
        compared = c.step_figures
        if verdict != "Passed" and c.failing_figures:  # the figures it failed with, beside the stable's of those
            compared = c.failing_figures
        mine, theirs = criteria.medians(compared), criteria.medians(c.stable_figures[-len(compared):] if compared
                                                                      else [])
        c.history = [*c.history, CanaryStepRecord(
            step=min(c.step, c.steps - 1) + 1, replicas=c.canary_replicas, stable_replicas=c.stable_replicas,
            verdict=verdict, reason=reason, at=self.now, samples=c.judged,
            tokens_per_second=mine.tokens_per_second if mine else None,
            stable_tokens_per_second=theirs.tokens_per_second if theirs else None)][-20:]
        if verdict == "Passed":
            self.event("Normal", "CanaryStepPassed", f"revision {c.revision}: canary step {c.step + 1}/{c.steps} at "
                                                     f"{c.split} passed: {reason}")

    # --- outcomes --------------------------------------------------------------------------------------------

    def promote(self) -> None:
        c = self.canary
        c.phase, c.reason, c.message = CanaryPhase.PROMOTING, "Promoting", f"{c.revision} takes every replica"
        c.step = c.steps
        self.reset_step()
        self.event("Normal", "CanaryPromoting", f"revision {c.revision}: every canary step passed; it takes every "
                                                f"replica, one pod at a time")

    def promoting(self) -> None:
        c = self.canary
        if self.move() and self.ready >= c.canary_replicas:
            c.stable_replicas = 0
            c.split = split(0, c.canary_replicas)
            self.out.actions = [a for a in self.out.actions if not isinstance(a, PlaceCanary)]
            self.out.actions.append(PromoteCanary(c.revision, c.workload,
                                                  f"canary {c.revision} serves every replica: {c.workload} becomes "
                                                  f"the serving workload"))

    def promoted(self, setup: Setup, stable_baseline: Baseline | None) -> None:
        """``status.revision`` shows the canary's revision: it is the stable one now, its baseline the stable's scaled
        by the same-interval ratio (:func:`~sglang_operator.decisions.baseline.from_canary`)."""
        c = self.canary
        med = criteria.medians(c.figures)
        self.out.baseline = baseline.from_canary(stable_baseline, c.stable_revision, c.revision, c.figures,
                                                 c.speed_ratios, self.policy.signal.value, setup, self.now)
        message = (f"{c.revision}: promoted by its canary ({plural(len(c.history), 'step')}"
                   + (f", {criteria.tps(med.tokens_per_second)} median of {plural(len(c.figures), 'interval')}"
                      if med else "") + f"); stable revision in place of {c.stable_revision}"
                   + (f"; baseline {baseline.origin(self.out.baseline)}" if self.out.baseline else ""))
        self.out.actions.append(self.record(Verdict.PROMOTED, message, med, len(c.figures) or None))
        self.event("Normal", "Promoted", message)
        self.out.state, self.out.promoted = None, c.revision

    def record(self, verdict: Verdict, message: str, med: SampleFigures | None = None,
               samples: int | None = None) -> RecordVerdict:
        """The ledger verdict of the canary's revision: ``med``'s figures (medians of ``samples`` intervals) where
        given, and the canary's steps."""
        c = self.canary
        return criteria.record(c.revision, verdict, message, med, samples, c.history)

    def fail(self, cause: str, message: str, verdict: str = "Failed") -> None:
        c = self.canary
        self.end_step(verdict, message)
        med = criteria.medians(c.failing_figures)
        if verdict == "Failed" and self.policy.action is not RollbackAction.ROLLBACK and self.ready > 0:
            self.hold(cause, message, med)
            return
        self.out.rejected = Rejected(cause, self.record(Verdict.REJECTED, message, med, len(c.failing_figures) or None))
        self.start_removing(cause, message)

    def hold(self, cause: str, message: str, med: SampleFigures | None) -> None:
        """``rollback.action`` Alert or DryRun: the failed canary is reported and left running at its split (as a
        failed revision is left running, Paused, without a canary); no rejection."""
        c = self.canary
        c.phase, c.reason, c.message = CanaryPhase.HELD, cause, message
        c.consecutive_failures, c.consecutive_inconclusive = 0, 0
        self.out.actions.append(self.record(Verdict.FAILED, message, med, len(c.failing_figures) or None))
        self.event("Warning", "CanaryFailed",
                   f"{message}; action {self.policy.action.value}: the canary is left running at {c.split} "
                   f"(stable+canary); kubectl sglang abort {self.obs.name} removes it, kubectl sglang promote "
                   f"{self.obs.name} promotes it")

    def held(self) -> None:
        """Keep the held canary's split; remove it (rejected) once it serves nothing: no pod of it Ready."""
        c = self.canary
        if self.ready == 0 and c.canary_replicas > 0:
            self.out.rejected = Rejected(c.reason or "Failed", self.record(
                Verdict.REJECTED, f"{c.message}; held (action {self.policy.action.value}) and now serving nothing: "
                f"0/{c.canary_replicas} canary pods Ready"))
            self.start_removing(c.reason or "Failed", f"{c.message}; the held canary serves nothing")
            return
        self.place(f"canary held at step {min(c.step + 1, c.steps)}/{c.steps}")

    def remove(self, cause: str, message: str) -> None:
        self.end_step("Superseded", message)
        self.out.actions.append(self.record(Verdict.SUPERSEDED, message))
        self.start_removing(cause, message)

    def start_removing(self, cause: str, message: str) -> None:
        c = self.canary
        c.phase, c.reason, c.message = CanaryPhase.REMOVING, cause, message
        self.event("Warning" if cause not in ("Superseded",) else "Normal", "CanaryRemoving",
                   f"{message}; the canary {c.workload} is removed, the stable revision {c.stable_revision} goes back "
                   f"to {plural(self.obs.replicas, 'replica')}")

    def removing(self) -> None:
        c = self.canary
        c.stable_replicas = self.obs.replicas
        if self.strategy.max_surge == 0 or self.obs.stable_ready >= self.obs.replicas:
            c.canary_replicas = 0
        self.place("removing the canary")
        if c.canary_replicas == 0 and not self.obs.pods:
            self.event("Normal", "CanaryRemoved", f"canary {c.revision} removed ({c.reason}); the stable revision "
                                                  f"{c.stable_revision} serves {plural(self.obs.replicas, 'replica')}")
            self.out.state = None
