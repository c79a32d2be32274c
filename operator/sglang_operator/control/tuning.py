"""The SGLangTuning controller: one kopf daemon per SGLangTuning runs its trials one after another and writes what it
learns into its OWN ``status`` (:mod:`sglang_operator.control.tuning_status`: one patch per step, with the
resourceVersion), so a restarted operator resumes where it was and repeats no finished trial. It never writes its
server: a tuning asks, the server's loop acts (docs/architecture.md, "Who writes what").

One step (:meth:`TuningRunner.step`) gathers (the tuning, its server's watched view), decides with the pure
:mod:`sglang_operator.decisions.tuning` (:func:`~sglang_operator.decisions.tuning.trials.next_step`, the records and
phases of :mod:`~sglang_operator.decisions.tuning.lifecycle`) and persists:

- first step: every point of ``spec.parameters`` rendered with the server's spec and validated with its release's
  rules; the invalid ones recorded ``Invalid`` (never started); ``trialsTotal``;
- ``start``: the search's next point gets a trial record (``<tuning>-trial-<n>``, its revision, ``startedAt``);
- ``resume`` (also after an operator restart, which measures the trial again from the start):
  - Shadow: Deployment ``<tuning>-trial-<n>`` (:func:`sglang_operator.builders.tuning.trial_workload`, owned by the
    SGLangTuning, the image pinned to the digest the server's Ready pods run) applied through the apply path
    (:func:`sglang_operator.control.apply.apply_trial_workload`, which refuses a name another owner holds); its pod
    from the watched pod cache; measured (:class:`sglang_operator.io.trialbench.TrialBench`); deleted, and its pods
    gone before the next trial;
  - InPlace: the trial record IS the request. The server's loop
    (:mod:`sglang_operator.decisions.tuning.inplace`) applies it on every replica through the one apply path and
    records it in the server's ``status.tuningHold``; the tuning waits until the server shows it running and its
    pods Ready (the watched caches), then measures them;
- ``finish``: the recommendation into ``status.best`` / ``bestPerLevel``, phase ``Succeeded`` or ``Failed``. An
  InPlace tuning's end (or its deletion) is seen by the server's loop, which applies the stable revision again and
  removes the hold; a spec change of the server ends the hold there, and the tuning sees it gone (``Cancelled``).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any, Protocol

import kopf

from sglang_operator import builders
from sglang_operator.api import GROUP, VERSION
from sglang_operator.api import tuning as api
from sglang_operator.api.server import SGLangServer, SpecError, parse, parse_status
from sglang_operator.builders.revision import image_digest, pinned_image
from sglang_operator.builders.tuning import trial_workload
from sglang_operator.control import tuning_status
from sglang_operator.control.apply import apply_trial_workload, delete_trial_workload
from sglang_operator.control.children import ChildApplyError
from sglang_operator.decisions import pods as pod_rules
from sglang_operator.decisions.sampling.limits import ProbeLimits, ScrapeLimits
from sglang_operator.decisions.sampling.roles import roles_for
from sglang_operator.decisions.tuning import lifecycle
from sglang_operator.decisions.tuning import trials as plan
from sglang_operator.io import kube
from sglang_operator.io.sglang_http import SGLangHTTP, base_url
from sglang_operator.io.trialbench import BenchPlan, TrialBench, TrialPod, default_score
from sglang_operator.process import telemetry
from sglang_operator.sglang.versions import SGLangVersion, dialect

log = logging.getLogger("sglang_operator.tuning")

RESOURCE = (GROUP, VERSION, api.PLURAL)
POLL_SECONDS = 1.0
"""Seconds between two looks (at the watched caches) while a trial starts."""
WAIT_SECONDS = 5.0
"""Seconds before a step is tried again when it cannot go on (server missing, a stale status patch)."""
GONE_SECONDS = 120.0
"""Seconds at most a finished trial's pods may take to go before the next trial starts anyway."""


class Views(Protocol):
    """The watched caches a tuning reads (the operator's :class:`~sglang_operator.control.observer.Observer`):
    the newest view of a server, the pods of an instance (a server or a trial workload), one HTTP client."""

    async def server_view(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    async def instance_pods(self, namespace: str, instance: str) -> list[dict[str, Any]]: ...
    @property
    def http(self) -> SGLangHTTP: ...


class TrialFailure(Exception):
    """A trial failed: ``reason`` is SGLang's message (crash tail), the scheduler's, the deadline's or the server's."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _time(text: str | None) -> dt.datetime | None:
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00")) if text else None
    except ValueError:
        return None


def _live(pods: list[dict[str, Any]], revision: str | None = None) -> list[dict[str, Any]]:
    return [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp") and (
        revision is None or ((p.get("metadata") or {}).get("labels") or {}).get(builders.REVISION_LABEL) == revision)]


def _ready(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [p for p in pods if pod_rules.is_ready(p) and (p.get("status") or {}).get("podIP")]


def _crash(pods: list[dict[str, Any]]) -> str | None:
    return next((c for c in (pod_rules.crash_text(p, api.REASON_LIMIT) for p in pods) if c), None)


class TuningRunner:
    """Runs SGLangTuning ``namespace/name`` (see the module docstring) over the watched ``views``."""

    def __init__(self, namespace: str, name: str, views: Views, *, probe_limits: ProbeLimits | None = None,
                 scrape_limits: ScrapeLimits | None = None) -> None:
        self.namespace, self.name, self.views = namespace, name, views
        self.probe_limits = probe_limits or ProbeLimits()
        self.scrape_limits = scrape_limits or ScrapeLimits()
        self._said: tuple[str, str] | None = None  # the waiting condition last written (written again only if new)
        self._pending: str | None = None

    async def run(self, stopped: Any) -> None:
        """Steps until the tuning ends, is deleted or ``stopped`` (kopf's daemon flag) is set."""
        while not stopped and await self.step():
            pass

    async def step(self) -> bool:
        """One step; False when the tuning is over (or gone)."""
        obj = await kube.get_sglangtuning(self.namespace, self.name)
        if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
            return False
        status, now = api.parse_tuning_status(obj), _now()
        if status.phase in plan.TERMINAL_PHASES:
            await self._delete_workloads(obj, status)
            return False
        try:
            spec = api.parse_tuning(obj).spec
        except SpecError as err:
            return await self._end(obj, status, api.TuningPhase.FAILED, "InvalidSpec", "; ".join(err.messages), now)
        server_body = await self.views.server_view(self.namespace, spec.server_ref.name)
        if server_body is None:
            return await self._wait(obj, status, "ServerNotFound", f"SGLangServer {self.namespace}/"
                                    f"{spec.server_ref.name} does not exist (spec.serverRef.name)")
        try:
            server = parse(server_body)
            valid, invalid = plan.points(spec.parameters, server.spec)
        except (SpecError, ValueError) as err:
            text = "; ".join(err.messages) if isinstance(err, SpecError) else str(err)
            return await self._end(obj, status, api.TuningPhase.FAILED, "ServerNotTunable", text, now)
        in_place = spec.mode is api.TuningMode.IN_PLACE
        stable = None
        if in_place:
            where = lifecycle.in_place(parse_status(server_body), self.name, server.name, status.started_at is not None)
            if where.kind == "lost":
                return await self._end(obj, status, api.TuningPhase.CANCELLED, where.reason, where.message, now)
            if where.kind == "waiting":
                return await self._wait(obj, status, where.reason, where.message)
            stable = where.stable
        if status.started_at is None:
            new, message = lifecycle.begin(status, spec, self.name, valid, invalid, now, stable)
            await self._write(obj, new, "Running", "True", "Searching", message, "TuningStarted")
            return True
        elapsed = (now - (_time(status.started_at) or now)).total_seconds()
        step = plan.next_step(spec, status, valid, elapsed)
        if step.kind == "finish":
            ending = lifecycle.finish(spec, status, step.reason)
            speedups = {str(b.concurrency): b.speedup for b in ending.status.best_per_level if b.speedup is not None}
            if ending.status.best is not None and ending.status.best.speedup is not None:
                speedups["all"] = ending.status.best.speedup
            telemetry.set_tuning_speedups(self.namespace, self.name, speedups)
            return await self._end(obj, ending.status, ending.phase, ending.reason, ending.message, now)
        if step.kind == "start":
            assert step.settings is not None
            await self._start(obj, status, spec, server_body, server, step.settings, now)
            return True
        assert step.trial is not None
        await self._resume(obj, spec, server_body, server, step.trial)
        return True

    # --- persist: one status patch of the tuning per step -----------------------------------------------------

    async def _write(self, obj: Mapping[str, Any], status: api.SGLangTuningStatus, kind: str = "", state: str = "",
                     reason: str = "", message: str = "", event: str = "") -> dict[str, Any] | None:
        generation = int((obj.get("metadata") or {}).get("generation") or 0)
        conds = [lifecycle.condition(kind, state, reason, message, generation, _now())] if kind else None
        patched = await tuning_status.write(obj, status, conds)
        if patched is not None and event:
            await tuning_status.event(obj, "Warning" if "Failed" in event else "Normal", event, message)
        return patched

    async def _wait(self, obj: Mapping[str, Any], status: api.SGLangTuningStatus, reason: str, message: str) -> bool:
        """Not able to go on: ``Running=False`` written once per distinct reason (never every few seconds)."""
        if self._said != (reason, message):
            phase = status.phase or api.TuningPhase.PENDING.value
            if await self._write(obj, status.model_copy(update={"phase": phase}), "Running", "False", reason,
                                 message):
                self._said = (reason, message)
        await asyncio.sleep(WAIT_SECONDS)
        return True

    async def _end(self, obj: Mapping[str, Any], status: api.SGLangTuningStatus, phase: api.TuningPhase,
                   reason: str, message: str, now: dt.datetime) -> bool:
        generation = int((obj.get("metadata") or {}).get("generation") or 0)
        new, conds = lifecycle.ended(status, phase, reason, message, generation, now)
        if await tuning_status.write(obj, new, conds):
            ok = phase is api.TuningPhase.SUCCEEDED
            await tuning_status.event(obj, "Normal" if ok else "Warning", "TuningSucceeded" if ok else "TuningFailed",
                                      message)
            telemetry.count_tuning(phase.value)
            await self._delete_workloads(obj, new)
        return False

    # --- act ----------------------------------------------------------------------------------------------------

    async def _start(self, obj: Mapping[str, Any], status: api.SGLangTuningStatus, spec: api.SGLangTuningSpec,
                     server_body: Mapping[str, Any], server: SGLangServer, settings: api.TrialSettings,
                     now: dt.datetime) -> None:
        name = plan.trial_name(self.name, plan.started_count(status.trials))
        try:
            revision = self._render(obj, server, server_body, name, settings,
                                    spec.mode is api.TuningMode.IN_PLACE)[1].revision
        except (builders.InvalidSpec, SpecError, ValueError) as err:  # validated before: only a changed server
            reason = "; ".join(err.errors) if isinstance(err, builders.InvalidSpec) else str(err)
            await self._write(obj, lifecycle.refused(status, name, settings, reason, now))
            return
        new, message = lifecycle.started(status, name, settings, revision, now)
        await self._write(obj, new, "Running", "True", "TrialRunning", message, "TrialStarted")

    def _render(self, obj: Mapping[str, Any], server: SGLangServer, server_body: Mapping[str, Any], name: str,
                settings: api.TrialSettings, in_place: bool) -> tuple[dict[str, Any] | None, builders.Rendered]:
        """(The Shadow workload manifest or None, the trial rendered as the server would run it). Raises
        ``SpecError``, :class:`~sglang_operator.builders.InvalidSpec` or ``ValueError``."""
        replicas = server.spec.replicas if in_place else 1
        spec_dict = plan.trial_spec(server_body.get("spec") or {}, settings, replicas=replicas)
        trial_server = parse({"apiVersion": server.api_version, "kind": server.kind,
                              "metadata": {"name": server.name, "namespace": self.namespace}, "spec": spec_dict})
        if in_place:
            return None, builders.render(trial_server)
        work = trial_workload(trial_server.spec, server.name, self.namespace, name, dict(obj))
        return work.manifest, work.rendered

    async def _resume(self, obj: Mapping[str, Any], spec: api.SGLangTuningSpec, server_body: Mapping[str, Any],
                      server: SGLangServer, trial: api.Trial) -> None:
        started = _time(trial.started_at) or _now()
        deadline = started + dt.timedelta(seconds=spec.budget.trial_deadline_seconds)
        failure: str | None = None
        levels: list[api.LevelFigures] | None = None
        in_place = spec.mode is api.TuningMode.IN_PLACE
        try:
            if in_place:
                pods, version = await self._in_place_pods(obj, server, trial, deadline)
            else:
                pods, version = await self._shadow_pods(obj, server_body, server, trial, deadline)
            levels = await self._measure(spec, server, pods, version)
            crash = _crash(await self._pods_of(server.name if in_place else trial.name, trial.revision if in_place
                                               else None))
            if crash is not None:
                raise TrialFailure(crash)
        except TrialFailure as err:
            failure = err.reason
        finally:
            if not in_place:
                await self._delete_trial(obj, trial.name)
        done = lifecycle.measured(trial, spec, levels, failure, _now())
        fresh = await kube.get_sglangtuning(self.namespace, self.name)  # the trial took minutes: its newest view
        if fresh is None or (fresh.get("metadata") or {}).get("deletionTimestamp"):
            return
        current = api.parse_tuning_status(fresh)
        running = plan.running(current.trials)
        if running is None or running.name != trial.name:
            return
        new = current.model_copy(update={"trials": [done if t.name == trial.name else t for t in current.trials]})
        pending = ("TrialPending", "False", "TrialFinished", f"trial {trial.name} {done.verdict}") \
            if self._pending else ("", "", "", "")
        self._pending = None
        if await self._write(fresh, new, *pending):
            telemetry.count_tuning_trial(self.namespace, self.name, str(done.verdict), trial.name,
                                         trial.settings.summary(), done.objective)
            ok = done.verdict == api.TrialVerdict.COMPLETED.value
            text = (f"trial {trial.name} {trial.settings.summary()}: "
                    + (f"objective {done.objective:.1f} tok/s" if ok and done.objective is not None
                       else str(done.reason or "")))
            await tuning_status.event(fresh, "Normal" if ok else "Warning", "TrialCompleted" if ok else "TrialFailed",
                                      text)

    async def _pods_of(self, instance: str, revision: str | None = None) -> list[dict[str, Any]]:
        return _live(await self.views.instance_pods(self.namespace, instance), revision)

    async def _in_place_pods(self, obj: Mapping[str, Any], server: SGLangServer, trial: api.Trial,
                             deadline: dt.datetime) -> tuple[list[dict[str, Any]], SGLangVersion]:
        """Wait until the server's loop runs ``trial`` (its hold names it, its revision is applied) and as many of
        its pods as it was applied with are Ready. Raises :class:`TrialFailure`."""
        while True:
            body = await self.views.server_view(self.namespace, server.name)
            if body is None:
                raise TrialFailure(f"SGLangServer {server.name} is gone")
            status = parse_status(body)
            state, why = lifecycle.trial_state(status, self.name, trial)
            if state in ("failed", "lost"):
                raise TrialFailure(f"the server's loop did not run trial {trial.name}: {why}")
            if state == "running":
                record = status.applied_record
                want = int(((record.spec if record is not None else None) or {}).get("replicas") or 1)
                pods = await self._pods_of(server.name, trial.revision)
                if (crash := _crash(pods)) is not None:
                    raise TrialFailure(crash)
                ready = _ready(pods)
                if len(ready) >= want:
                    try:
                        version = self._render(obj, server, body, trial.name, trial.settings, True)[1].command.version
                    except (builders.InvalidSpec, SpecError, ValueError) as err:
                        raise TrialFailure(str(err)) from None
                    return ready, version
            if _now() >= deadline:
                trouble = next((t for t in map(pod_rules.trouble, await self._pods_of(server.name)) if t), None)
                raise TrialFailure(f"trial {trial.name} not running on every replica by budget.trialDeadlineSeconds"
                                   + (f": {trouble}" if trouble else f" ({state})"))
            await asyncio.sleep(POLL_SECONDS)

    async def _shadow_pods(self, obj: Mapping[str, Any], server_body: Mapping[str, Any], server: SGLangServer,
                           trial: api.Trial, deadline: dt.datetime) -> tuple[list[dict[str, Any]], SGLangVersion]:
        """Apply the trial's workload (through the apply path) and wait for its Ready pod. Raises
        :class:`TrialFailure`; a pod's trouble (Unschedulable) is written as condition ``TrialPending``."""
        try:
            manifest, rendered = self._render(obj, server, server_body, trial.name, trial.settings, False)
        except (builders.InvalidSpec, SpecError, ValueError) as err:
            raise TrialFailure("; ".join(err.errors) if isinstance(err, builders.InvalidSpec) else str(err)) from None
        assert manifest is not None
        revision = parse_status(server_body).revision
        digest = image_digest(_ready(await self._pods_of(server.name, revision))) if revision else None
        for container in manifest["spec"]["template"]["spec"]["containers"]:
            if container.get("name") == "sglang":
                container["image"] = pinned_image(container["image"], digest)
        try:
            await apply_trial_workload(obj, manifest)
        except ChildApplyError as err:
            raise TrialFailure(str(err)) from None
        while True:
            pods = await self._pods_of(trial.name)
            if (crash := _crash(pods)) is not None:
                raise TrialFailure(crash)
            if ready := _ready(pods):
                return ready[:1], rendered.command.version
            trouble = next((t for t in map(pod_rules.trouble, pods) if t), None)
            if trouble is not None and trouble != self._pending:
                fresh = await kube.get_sglangtuning(self.namespace, self.name)
                if fresh is not None and await self._write(fresh, api.parse_tuning_status(fresh), "TrialPending",
                                                           "True", "PodNotReady", f"trial {trial.name}: {trouble}"):
                    self._pending = trouble
            if _now() >= deadline:
                raise TrialFailure("not Ready by budget.trialDeadlineSeconds"
                                   + (f": {trouble}" if trouble else " (SGLang still loading)"))
            await asyncio.sleep(POLL_SECONDS)

    async def _measure(self, spec: api.SGLangTuningSpec, server: SGLangServer, pods: list[dict[str, Any]],
                       version: SGLangVersion) -> list[api.LevelFigures]:
        bench_plan = BenchPlan.from_workload(spec.workload, server_info_path=dialect(version).server_info_path)
        ref = server.spec.api_key_secret_ref
        api_key = await kube.secret_value(self.namespace, ref.name, ref.key) if ref is not None else None
        targets = [TrialPod(str(p["metadata"]["name"]), base_url(str(p["status"]["podIP"]), server.spec.port))
                   for p in pods]
        bench = TrialBench(self.views.http, targets, server.spec.model.served_model_name or server.spec.model.path,
                           roles_for(version), bench_plan, api_key=api_key, probe_limits=self.probe_limits,
                           scrape_limits=self.scrape_limits)
        return await bench.measure(default_score(spec.objective))

    async def _delete_trial(self, obj: Mapping[str, Any], trial: str) -> None:
        """Delete a Shadow trial's workload (the apply path: only when this tuning owns it) and wait (at most
        :data:`GONE_SECONDS`) until the watched pod cache holds none of its pods."""
        try:
            await delete_trial_workload(obj, trial)
        except Exception as exc:
            log.warning("deleting trial workload %s/%s failed: %s", self.namespace, trial, exc)
            return
        loop = asyncio.get_running_loop()
        end = loop.time() + GONE_SECONDS
        while loop.time() < end and await self._pods_of(trial):
            await asyncio.sleep(POLL_SECONDS)

    async def _delete_workloads(self, obj: Mapping[str, Any], status: api.SGLangTuningStatus) -> None:
        if (obj.get("spec") or {}).get("mode") == api.TuningMode.IN_PLACE.value:
            return
        for trial in status.trials:
            if trial.verdict != api.TrialVerdict.INVALID.value:
                with contextlib.suppress(Exception):
                    await delete_trial_workload(obj, trial.name)


def _views(memo: Any) -> Views:
    observer = getattr(memo, "observer", None)
    if observer is None:
        raise kopf.TemporaryError("the operator is starting: no observer yet", delay=1)
    views: Views = observer
    return views


@kopf.on.daemon(*RESOURCE, cancellation_timeout=10.0)
async def tuning_daemon(meta: kopf.Meta, stopped: kopf.DaemonStopped, memo: Any = None, **_: Any) -> None:
    """Run one SGLangTuning until it ends (see the module docstring); a restarted operator resumes it from its
    status. Deleting the SGLangTuning stops it (its Shadow trial workloads are garbage-collected with it; an InPlace
    tuning's server sees it go and applies its stable revision again)."""
    config = getattr(memo, "config", None)
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
    try:
        while not stopped:
            runner = TuningRunner(namespace, name, _views(memo), probe_limits=getattr(config, "probe_limits", None),
                                  scrape_limits=getattr(config, "scrape_limits", None))
            try:
                await runner.run(stopped)
                return
            except asyncio.CancelledError:
                raise
            except Exception:  # a transient API error: the step is decided again from the stored status
                log.exception("SGLangTuning %s/%s: step failed; tried again", namespace, name)
                await asyncio.sleep(WAIT_SECONDS)
    finally:  # a deleted tuning's series go; a finished one's stay
        with contextlib.suppress(Exception):
            if stopped or await kube.get_sglangtuning(namespace, name) is None:
                telemetry.forget_tuning(namespace, name)


@kopf.on.event(*RESOURCE)
async def tuning_event(event: kopf.RawEvent, body: kopf.Body, memo: Any = None, **_: Any) -> None:
    """Every SGLangTuning change reaches the server it names: its loop reads what the tuning asks (the hold, a
    trial, the release) from the watched copy (:meth:`sglang_operator.control.observer.Observer.tuning_event`)."""
    observer = getattr(memo, "observer", None)
    if observer is not None:
        kind = event.get("type")
        observer.tuning_event(None if kind is None else str(kind), dict(body))
