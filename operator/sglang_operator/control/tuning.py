"""The SGLangTuning controller: a runner per admitted SGLangTuning (started and stopped by the operator's tuning
queue, :mod:`sglang_operator.control.tunings`) runs its trials one after another and writes what it
learns into its OWN ``status`` only (:mod:`~sglang_operator.control.tuning_status`), so a restarted operator resumes
and repeats no finished trial. A tuning asks, the server's loop acts (docs/architecture.md, "Who writes what"). A
step gathers (the tuning, its server's watched view), decides (:mod:`sglang_operator.decisions.tuning`: ``trials``,
``lifecycle``) and persists one patch; a Shadow trial runs in its own Deployment through the apply path; an InPlace
trial's record is the request the server's loop carries out (:mod:`~sglang_operator.decisions.tuning.inplace`), and
the tuning measures once the server shows it running and its pods Ready. The whole flow: docs/tuning.md.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Coroutine
from typing import TYPE_CHECKING, Any, TypeVar

from sglang_operator import builders
from sglang_operator.api import GROUP, VERSION
from sglang_operator.api import tuning as api
from sglang_operator.api.server import SGLangServer, SpecError
from sglang_operator.api.tuning_spec import SGLangTuningSpec, TuningMode
from sglang_operator.api.tuning_status import (
    REASON_LIMIT,
    LevelFigures,
    SGLangTuningStatus,
    Trial,
    TrialSettings,
    TuningPhase,
)
from sglang_operator.api.view import ObjectRef, ServerView, TuningView
from sglang_operator.builders.revision import image_digest
from sglang_operator.control import tuning_status
from sglang_operator.control.apply import apply_trial_workload, delete_trial_workload, delete_trial_workloads
from sglang_operator.control.children import ChildApplyError
from sglang_operator.decisions import groups
from sglang_operator.decisions import pods as pod_rules
from sglang_operator.decisions.conditions import parse_time
from sglang_operator.decisions.sampling.limits import ProbeLimits, ScrapeLimits
from sglang_operator.decisions.tuning import deadline as deadlines
from sglang_operator.decisions.tuning import known_best, lifecycle
from sglang_operator.decisions.tuning import trials as plan
from sglang_operator.decisions.tuning.lifecycle import TrialFailure
from sglang_operator.io import kube
from sglang_operator.io.trialbench import measure_pods
from sglang_operator.process import telemetry
from sglang_operator.sglang.versions import SGLangVersion

if TYPE_CHECKING:
    from sglang_operator.control.observer import Observer

log = logging.getLogger("sglang_operator.tuning")

RESOURCE = (GROUP, VERSION, api.PLURAL)
POLL_SECONDS = 1.0
"""Seconds between two looks (at the watched caches) while a trial starts."""
WAIT_SECONDS = 5.0
"""Seconds before a step is tried again when it cannot go on (server missing, waiting for the hold, a stale status
patch); doubled at each wait in a row up to :data:`WAIT_MAX_SECONDS`, and cut short by :meth:`TuningRunner.wake`."""
WAIT_MAX_SECONDS = 60.0
"""Seconds at most between two looks of a waiting runner (:data:`WAIT_SECONDS`)."""
GONE_SECONDS = 120.0
"""Seconds at most a finished trial's pods may take to go before the next trial starts anyway."""


T = TypeVar("T")


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _why(err: Exception) -> str:
    if isinstance(err, SpecError):
        return "; ".join(err.messages)
    return "; ".join(err.errors) if isinstance(err, builders.InvalidSpec) else str(err)


async def _whole(act: Coroutine[Any, Any, T]) -> T:
    """Run ``act`` (a status patch and what follows it: its Event, its counter) to its end even if the runner is
    cancelled meanwhile: the queue cancels the runner of a tuning it no longer runs (:class:`~sglang_operator.control.
    tunings.TuningWorker`), and the patch that ends a tuning is what makes it so; cancelled between the patch and its
    Event, the Event was lost (the e2e tuning test saw no ``TuningSucceeded``). A cancelled caller still gets its
    :class:`asyncio.CancelledError`, once ``act`` is done or as it goes on in the background."""
    return await asyncio.shield(act)


class TuningRunner:
    """Runs SGLangTuning ``namespace/name`` (see the module docstring) over ``views``: the operator's watched caches
    (:class:`~sglang_operator.control.observer.Observer`: ``server_view``, ``instance_pods``, its ``http`` client);
    ``duration_cap``: the operator's cap on its wall time, seconds (``--max-tuning-duration-seconds``; None: its
    ``budget.maxDurationSeconds`` alone)."""

    def __init__(self, namespace: str, name: str, views: Observer, *, probe_limits: ProbeLimits | None = None,
                 scrape_limits: ScrapeLimits | None = None, duration_cap: float | None = None) -> None:
        self.namespace, self.name, self.views = namespace, name, views
        self.duration_cap = duration_cap
        self.probe_limits = probe_limits or ProbeLimits()
        self.scrape_limits = scrape_limits or ScrapeLimits()
        self._said: tuple[str, str] | None = None  # the waiting condition last written (written again only if new)
        self._pending: str | None = None
        self._woken = asyncio.Event()
        self._backoff = WAIT_SECONDS
        self.yielding = False
        """Set by the tuning queue: stop at the next trial boundary (no trial running), the slot is another
        namespace's (:func:`~sglang_operator.decisions.tuning.queue.admit`)."""

    def wake(self) -> None:
        """Look again now if waiting (its server missing, the hold not given yet): something it waits for may have
        changed (its object, its server)."""
        self._woken.set()

    async def run(self) -> None:
        """Steps until the tuning ends or is gone (or the task is cancelled: the queue stopped it)."""
        while await self.step():
            pass

    async def step(self) -> bool:
        """One step; False when the tuning is over (or gone)."""
        got = await kube.get_sglangtuning(self.namespace, self.name)
        if got is None:
            return False
        tuning = TuningView.of(got)  # the one typed view of this step
        if tuning.deleting:
            return False
        status, now = tuning.status, _now()
        if status.phase in plan.TERMINAL_PHASES:
            await self._delete_workloads(tuning, status)
            return False
        if self.yielding and plan.running(status.trials) is None:  # a trial boundary: the slot goes to another
            log.info("SGLangTuning %s/%s yields its slot at a trial boundary", self.namespace, self.name)
            return False
        try:
            spec = tuning.tuning.spec
        except SpecError as err:
            return await self._end(tuning, status, TuningPhase.FAILED, "InvalidSpec", _why(err), now)
        server_view = await self.views.server_view(self.namespace, spec.server_ref.name)
        if server_view is None:
            return await self._wait(tuning, status, "ServerNotFound", f"SGLangServer {self.namespace}/"
                                    f"{spec.server_ref.name} does not exist (spec.serverRef.name)")
        in_place = spec.mode is TuningMode.IN_PLACE
        try:
            server = server_view.server
            valid, invalid = plan.points(spec.parameters, server.spec, in_place)
            setup = known_best.tuning_setup(server.spec, spec.workload, plan.trial_replicas(server.spec, in_place))
            refusal = plan.control_refusal(server.spec, in_place) if status.started_at is None else None
        except (SpecError, ValueError) as err:
            return await self._end(tuning, status, TuningPhase.FAILED, "ServerNotTunable", _why(err), now)
        forced = lifecycle.forced_refused(status, server.name, server.spec.env)
        if forced is not None:  # made-up figures: never measured, never recorded for the namespace
            return await self._finish(tuning, forced, now)
        if refusal is not None:  # before any hold or trial: no trial of this server can run
            return await self._finish(tuning, lifecycle.control_refused(status, refusal), now)
        stable = None
        if in_place:
            where = lifecycle.in_place(server_view.status, self.name, server.name, status.started_at is not None,
                                       tuning.uid)
            if where.kind == "lost":
                return await self._end(tuning, status, TuningPhase.CANCELLED, where.reason, where.message, now)
            if where.kind == "waiting":
                return await self._wait(tuning, status, where.reason, where.message)
            stable = where.stable
        self._backoff = WAIT_SECONDS  # it goes on: the next wait starts short again
        if status.started_at is None:
            new, message = lifecycle.begin(status, spec, self.name, valid, invalid, now, stable, setup)
            await self._write(tuning, new, "Running", "True", "Searching", message, "TuningStarted")
            return True
        step = plan.next_step(spec, status, valid, (now - (parse_time(status.started_at) or now)).total_seconds(),
                              self.duration_cap)
        if step.kind == "finish":
            ending = lifecycle.finish(spec, status, step.reason)
            telemetry.set_tuning_speedups(self.namespace, self.name, lifecycle.speedups(ending.status))
            return await self._finish(tuning, ending, now)
        if step.kind == "start":
            assert step.settings is not None
            return await self._start(tuning, status, spec, server_view, step.settings, now)
        assert step.trial is not None
        await self._resume(tuning, status, spec, server_view, server, step.trial)
        return True

    # --- persist: one status patch of the tuning per step -----------------------------------------------------

    async def _write(self, tuning: TuningView, status: SGLangTuningStatus, kind: str = "", state: str = "",
                     reason: str = "", message: str = "", event: str = "") -> dict[str, Any] | None:
        generation = tuning.generation
        conds = [lifecycle.condition(kind, state, reason, message, generation, _now())] if kind else None

        async def act() -> dict[str, Any] | None:
            patched = await tuning_status.write(tuning, status, conds)
            if patched is not None and event:
                await tuning_status.event(tuning.ref, "Warning" if "Failed" in event else "Normal", event, message)
            return patched

        return await _whole(act())

    async def _wait(self, tuning: TuningView, status: SGLangTuningStatus, reason: str, message: str) -> bool:
        """Not able to go on: ``Running=False`` written once per distinct reason (never every few seconds)."""
        if self._said != (reason, message):
            phase = status.phase or TuningPhase.PENDING.value
            if await self._write(tuning, status.model_copy(update={"phase": phase}), "Running", "False", reason,
                                 message):
                self._said = (reason, message)
        self._woken.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._woken.wait(), self._backoff)
        self._backoff = min(WAIT_MAX_SECONDS, 2 * self._backoff)
        return True

    async def _finish(self, tuning: TuningView, ending: lifecycle.Ending, now: dt.datetime) -> bool:
        return await self._end(tuning, ending.status, ending.phase, ending.reason, ending.message, now)

    async def _end(self, tuning: TuningView, status: SGLangTuningStatus, phase: TuningPhase,
                   reason: str, message: str, now: dt.datetime) -> bool:
        generation = tuning.generation
        new, conds = lifecycle.ended(status, phase, reason, message, generation, now)
        await self._delete_workloads(tuning, new)  # first: an operator stopped in between finds the tuning unended

        async def act() -> None:
            if await tuning_status.write(tuning, new, conds):
                await tuning_status.event(tuning.ref, *lifecycle.end_event(phase, message))
                telemetry.count_tuning(phase.value)

        await _whole(act())
        return False

    # --- act ----------------------------------------------------------------------------------------------------

    async def _start(self, tuning: TuningView, status: SGLangTuningStatus, spec: SGLangTuningSpec,
                     server_view: ServerView, settings: TrialSettings, now: dt.datetime) -> bool:
        """Start the trial of ``settings`` (its record); False when the tuning ended (its control trial refused)."""
        name = plan.trial_name(self.name, plan.started_count(status.trials))
        try:
            revision = lifecycle.render_trial(tuning.ref, server_view, name, settings,
                                              spec.mode is TuningMode.IN_PLACE)[1].revision
        except (builders.InvalidSpec, SpecError, ValueError) as err:  # validated before: only a changed server
            refusal = lifecycle.refused(status, name, settings, _why(err), now)
            if refusal.ending is not None:
                return await self._finish(tuning, refusal.ending, now)
            await self._write(tuning, refusal.status)
            return True
        new, message = lifecycle.started(status, name, settings, revision, now)
        await self._write(tuning, new, "Running", "True", "TrialRunning", message, "TrialStarted")
        return True

    async def _resume(self, tuning: TuningView, status: SGLangTuningStatus, spec: SGLangTuningSpec,
                      server_view: ServerView, server: SGLangServer, trial: Trial) -> None:
        deadline = (parse_time(trial.started_at) or _now()) + dt.timedelta(seconds=spec.budget.trial_deadline_seconds)
        failure = pruned = None
        levels: list[LevelFigures] | None = None
        in_place = spec.mode is TuningMode.IN_PLACE
        cutoff = deadlines.trial_cutoff(spec, parse_time(status.started_at) or _now(), self.duration_cap)
        timer = asyncio.timeout((cutoff - _now()).total_seconds())  # every state of the trial, a restart's too
        try:
            async with timer:
                if in_place:
                    pods, version = await self._in_place_pods(tuning, server, trial, deadline)
                else:
                    pods, version = await self._shadow_pods(tuning, server_view, server, trial, deadline)
                got = await measure_pods(self.views.http, spec, server, pods, version, self.probe_limits,
                                         self.scrape_limits, lambda first: plan.prune_verdict(
                                             spec, status.trials, trial.settings, first))
                levels, failure, pruned = got.levels, got.failure, got.pruned
                crash = pod_rules.first_crash(await self._pods_of(
                    server.name if in_place else trial.name, server_view.ref if in_place else tuning.ref,
                    trial.revision if in_place else None), REASON_LIMIT)
                if crash is not None:
                    raise TrialFailure(crash)
        except TrialFailure as err:
            failure = err.reason
        except TimeoutError:
            if not timer.expired():
                raise
            failure = deadlines.cut_reason(cutoff)
        finally:
            if not in_place:
                await self._delete_trial(tuning, trial.name)
        done = lifecycle.measured(trial, spec, levels, failure, _now(), status.trials, pruned)
        newest = await kube.get_sglangtuning(self.namespace, self.name)  # the trial took minutes: its newest view
        fresh = TuningView.of(newest) if newest is not None else None
        if fresh is None or fresh.deleting:
            return
        new = lifecycle.with_verdict(fresh.status, done)
        if new is None:  # not the running trial any more
            return
        pending = ("TrialPending", "False", "TrialFinished", f"trial {trial.name} {done.verdict}") if self._pending \
            else ("", "", "", "")
        self._pending = None

        async def act() -> None:
            if await self._write(fresh, new, *pending):
                telemetry.count_tuning_trial(self.namespace, self.name, str(done.verdict), trial.name,
                                             trial.settings.summary(), done.objective)
                await tuning_status.event(fresh.ref, *lifecycle.trial_event(done))

        await _whole(act())

    async def _pods_of(self, instance: str, owner: ObjectRef, revision: str | None = None
                       ) -> list[dict[str, Any]]:
        """The live pods of ``instance`` owned through their workload by ``owner`` (the server for its own pods, this
        tuning for a Shadow trial's), labelled ``revision`` when given: never a stranger carrying the labels."""
        return pod_rules.live(await self.views.instance_pods(self.namespace, instance, owner.uid), revision)

    async def _in_place_pods(self, tuning: TuningView, server: SGLangServer, trial: Trial,
                             deadline: dt.datetime) -> tuple[list[dict[str, Any]], SGLangVersion]:
        """Wait until the server's loop runs ``trial`` (its hold names it, its revision is applied) and as many of
        its replicas as it was applied with are Ready; the pods the load goes to (multi-node: one leader per Ready
        group, :func:`~sglang_operator.decisions.groups.serving_pods`, as the sampler's; a worker serves no HTTP).
        Raises :class:`TrialFailure`."""
        while True:
            view = await self.views.server_view(self.namespace, server.name)
            if view is None:
                raise TrialFailure(f"SGLangServer {server.name} is gone")
            status = view.status
            state, why = lifecycle.trial_state(status, self.name, trial, tuning.uid)
            if state in ("failed", "lost"):
                raise TrialFailure(f"the server's loop did not run trial {trial.name}: {why}")
            if state == "running":
                record = status.applied_record
                want = int(((record.spec if record is not None else None) or {}).get("replicas") or 1)
                pods = await self._pods_of(server.name, view.ref, trial.revision)
                if (crash := pod_rules.first_crash(pods, REASON_LIMIT)) is not None:
                    raise TrialFailure(crash)
                ready = pod_rules.ready_with_ip(groups.serving_pods(pods, view.server.spec))  # multi-node: leaders
                if len(ready) >= want:
                    try:
                        rendered = lifecycle.render_trial(tuning.ref, view, trial.name, trial.settings, True)[1]
                        return ready, rendered.command.version
                    except (builders.InvalidSpec, SpecError, ValueError) as err:
                        raise TrialFailure(_why(err)) from None
            if _now() >= deadline:
                trouble = pod_rules.first_trouble(await self._pods_of(server.name, view.ref))
                raise TrialFailure(f"trial {trial.name} not running on every replica by budget.trialDeadlineSeconds"
                                   + (f": {trouble}" if trouble else f" ({state})"))
            await asyncio.sleep(POLL_SECONDS)

    async def _shadow_pods(self, tuning: TuningView, server_view: ServerView, server: SGLangServer,
                           trial: Trial, deadline: dt.datetime) -> tuple[list[dict[str, Any]], SGLangVersion]:
        """Apply the trial's workload (through the apply path) and wait for its Ready pod. Raises
        :class:`TrialFailure`; a pod's trouble (Unschedulable) is written as condition ``TrialPending``."""
        revision = server_view.status.revision  # the image the serving revision's Ready pods run
        own = await self._pods_of(server.name, server_view.ref, revision) if revision else []
        digest = image_digest(pod_rules.ready_with_ip(own)) if revision else None
        try:
            manifest, rendered = lifecycle.render_trial(tuning.ref, server_view, trial.name, trial.settings, False,
                                                        digest)
            assert manifest is not None
            await apply_trial_workload(tuning.ref, manifest)
        except (builders.InvalidSpec, SpecError, ValueError, ChildApplyError) as err:
            raise TrialFailure(_why(err)) from None
        while True:
            pods = await self._pods_of(trial.name, tuning.ref)
            if (crash := pod_rules.first_crash(pods, REASON_LIMIT)) is not None:
                raise TrialFailure(crash)
            if ready := pod_rules.ready_with_ip(pods):
                return ready[:1], rendered.command.version
            trouble = pod_rules.first_trouble(pods)
            if trouble is not None and trouble != self._pending:
                newest = await kube.get_sglangtuning(self.namespace, self.name)
                fresh = TuningView.of(newest) if newest is not None else None
                if fresh is not None and await self._write(fresh, fresh.status, "TrialPending",
                                                           "True", "PodNotReady", f"trial {trial.name}: {trouble}"):
                    self._pending = trouble
            if _now() >= deadline:
                raise TrialFailure("not Ready by budget.trialDeadlineSeconds"
                                   + (f": {trouble}" if trouble else " (SGLang still loading)"))
            await asyncio.sleep(POLL_SECONDS)

    async def _delete_trial(self, tuning: TuningView, trial: str) -> None:
        """Delete a Shadow trial's workload (the apply path: only when this tuning owns it) and wait (at most
        :data:`GONE_SECONDS`) until the watched pod cache holds none of its pods."""
        try:
            await delete_trial_workload(tuning.ref, trial)
        except Exception as exc:
            log.warning("deleting trial workload %s/%s failed: %s", self.namespace, trial, exc)
            return
        loop = asyncio.get_running_loop()
        end = loop.time() + GONE_SECONDS
        while loop.time() < end and await self._pods_of(trial, tuning.ref):
            await asyncio.sleep(POLL_SECONDS)

    async def _delete_workloads(self, tuning: TuningView, status: SGLangTuningStatus) -> None:
        if tuning.mode != TuningMode.IN_PLACE.value:
            await delete_trial_workloads(tuning.ref, [t.name for t in status.trials if t.verdict != "Invalid"])
