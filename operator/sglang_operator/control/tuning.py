"""The SGLangTuning controller (issue 17): one kopf daemon per SGLangTuning runs its trials one after another and
writes everything it learns into ``status``, so a restarted operator resumes where it was and repeats no finished
trial.

One step of the loop (:meth:`TuningRunner.step`) reads the SGLangTuning and its server, asks the pure decisions
(:func:`sglang_operator.decisions.tuning.trials.next_step`) what to do, does it, and writes ONE status patch with
the object's resourceVersion as precondition (refused as stale: the step is decided again from the newer object):

- first step: every point of ``spec.parameters`` is rendered with the server's spec and validated with its
  release's own rules (:func:`~sglang_operator.decisions.tuning.trials.points`); the invalid ones are recorded as
  ``Invalid`` trials with the release's reason (never started), ``trialsTotal`` is what the search may run;
- ``start``: the search's next point gets a trial record (``<tuning>-trial-<n>``, its revision hash, startedAt)
  and an Event ``TrialStarted``; its workload is applied at the next step;
- ``resume`` (the trial without verdict; also after an operator restart, which measures it again from the start):
  Shadow mode applies Deployment ``<tuning>-trial-<n>`` (:func:`sglang_operator.builders.tuning.trial_workload`:
  the server's spec with the trial's settings, the same builders, the image pinned to the digest the server's
  Ready pods run, owned by the SGLangTuning, not selected by the server's Service), waits until its pod is Ready
  (``budget.trialDeadlineSeconds`` from startedAt; a Pending pod's scheduler message is the ``TrialPending``
  condition), measures every level of ``spec.workload`` (:class:`sglang_operator.io.trialbench.TrialBench`),
  deletes the workload and waits for its pods to go (the GPUs are free for the next trial), and writes the verdict:
  ``Completed`` with the figures, or ``Failed`` with SGLang's crash tail
  (:func:`sglang_operator.decisions.pods.crash_text`: an out-of-memory at start-up or under load) or the deadline's
  reason; Events ``TrialCompleted`` / ``TrialFailed``;
- ``finish``: the recommendation (overall and per level, with the speedup over the control trial) into
  ``status.best`` / ``bestPerLevel``, phase ``Succeeded`` (``Failed`` without a completed speculative trial or with
  more than maxFailedTrialCount failures), every trial workload deleted.

The tuning never writes the server's spec: it recommends (``kubectl sglang tune apply`` writes the spec).

``mode: InPlace`` (CEL: only with ``disruption: Allowed``) runs every trial on the server's own pods, every replica:

- before the first trial the tuning takes the server's hold (:mod:`sglang_operator.decisions.tuning.hold`):
  ``status.tuningHold`` of the SGLangServer, with ``stableRevision`` = the revision serving (also the tuning's
  ``status.stableRevision``); it waits (``Running=False``, reason ``CanaryInProgress`` / ``HeldByTuning``) while a
  canary runs or another tuning holds the server. While held, the observer's tick judges nothing and converges to
  no revision (:func:`sglang_operator.decisions.observation.held`), and no canary starts;
- a trial's revision (the server's spec with the trial's settings, ``spec.replicas`` pods) is applied through the
  one apply path (:func:`sglang_operator.control.apply.apply_placement`) in the server's worker (its
  :class:`~sglang_operator.control.memory.ServerMemory` lock), and the apply's status keys are written with the hold
  in one status patch: the tuning never writes the server's children any other way;
- the end — success, failure, ``maxDurationSeconds``, deletion of the SGLangTuning (kopf's deletion handler,
  :func:`tuning_deleted`), a restarted operator finding the tuning over — applies the stable revision again
  (:func:`sglang_operator.control.restore.apply_revision`) and removes the hold; a spec change of the server (another
  generation than the hold's) cancels the tuning (phase ``Cancelled``) and leaves the spec's revision to the
  reconcile handler. An operator restart mid-trial measures the running trial again on its pods (the reconcile
  handler's resume leaves a held server alone; a finished trial is never repeated).
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any

import kopf

from sglang_operator import builders
from sglang_operator.api import GROUP, VERSION
from sglang_operator.api import tuning as api
from sglang_operator.api.server import SGLangServer, SpecError, parse, parse_status
from sglang_operator.builders.labels import selector_labels
from sglang_operator.builders.revision import image_digest, pinned_image
from sglang_operator.builders.tuning import TrialWorkload, trial_workload
from sglang_operator.control import ledger, restore
from sglang_operator.control.apply import apply_placement, placement
from sglang_operator.control.memory import ServerMemory
from sglang_operator.decisions import pods as pod_rules
from sglang_operator.decisions import status as server_st
from sglang_operator.decisions.conditions import merge, rfc3339
from sglang_operator.decisions.sampling.limits import ProbeLimits, ScrapeLimits
from sglang_operator.decisions.sampling.roles import roles_for
from sglang_operator.decisions.tuning import hold as holds
from sglang_operator.decisions.tuning import trials as plan
from sglang_operator.io import kube
from sglang_operator.io.sglang_http import SGLangHTTP, base_url
from sglang_operator.io.trialbench import BenchPlan, TrialBench, TrialPod, default_score
from sglang_operator.process import telemetry
from sglang_operator.sglang.versions import dialect

log = logging.getLogger("sglang_operator.tuning")

RESOURCE = (GROUP, VERSION, api.PLURAL)
POLL_SECONDS = 1.0
"""Seconds between two looks at a trial's pods while it starts."""
WAIT_SECONDS = 5.0
"""Seconds before a step is tried again when it cannot go on (server missing, a stale status patch)."""
INVALID_RECORDS = 16
"""Invalid points recorded in ``status.trials`` at most (with their reasons); ``trialsInvalid`` counts them all."""
GONE_SECONDS = 120.0
"""Seconds at most a finished trial's pods may take to go before the next trial starts anyway."""


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _parse_time(text: str | None) -> dt.datetime | None:
    if not text:
        return None
    try:
        return dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return None


def _cond(type_: str, status: str, reason: str, message: str, generation: int, now: dt.datetime) -> dict[str, Any]:
    return {"type": type_, "status": status, "reason": reason, "message": api_message(message),
            "observedGeneration": generation, "lastTransitionTime": rfc3339(now)}


def api_message(text: str) -> str:
    from sglang_operator.api.base import truncate

    return truncate(text)


class TrialFailure(Exception):
    """A trial failed: ``reason`` is SGLang's message (crash tail), the scheduler's or the deadline's."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class TuningRunner:
    """Runs one SGLangTuning ``namespace/name`` (see the module docstring). ``http``: the client for the trial
    pods (closed by :meth:`close`)."""

    def __init__(self, namespace: str, name: str, *, probe_limits: ProbeLimits | None = None,
                 scrape_limits: ScrapeLimits | None = None, observer: Any = None) -> None:
        self.namespace, self.name = namespace, name
        self.observer = observer
        """The operator's observer (kopf's ``memo.observer``): its servers' memories hold their workers' locks."""
        self._own_locks: dict[str, asyncio.Lock] = {}
        self.http = SGLangHTTP()
        self.probe_limits = probe_limits or ProbeLimits()
        self.scrape_limits = scrape_limits or ScrapeLimits()
        self._pending_message: str | None = None

    async def close(self) -> None:
        await self.http.aclose()

    # --- status -----------------------------------------------------------------------------------------------

    async def _write(self, obj: Mapping[str, Any], status: api.SGLangTuningStatus,
                     conditions: list[dict[str, Any]] | None = None) -> dict[str, Any] | None:
        """The step's ONE status patch (resourceVersion of ``obj`` as precondition): ``status`` with ``progress``
        and the counts derived, ``conditions`` merged into its own. None when refused as stale or gone."""
        trials = status.trials
        counts = plan.counts(trials)
        done = counts["trials_completed"] + counts["trials_failed"] + counts["trials_pruned"]
        status = status.model_copy(update={
            **counts, "progress": f"{done}/{status.trials_total or done}",
            "observed_generation": int((obj.get("metadata") or {}).get("generation") or 0)})
        body = status.dump()
        if conditions:
            body["conditions"] = merge([c.model_dump(by_alias=True, exclude_none=True) for c in status.conditions],
                                       conditions)
        meta = obj.get("metadata") or {}
        patched = await kube.patch_tuning_status(self.namespace, self.name, meta.get("resourceVersion"), body)
        if patched is None:
            log.info("SGLangTuning %s/%s changed while a step ran: decided again", self.namespace, self.name)
        return patched

    async def _event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        await kube.post_event(dict(obj), type_, reason, api_message(message))

    # --- the loop ---------------------------------------------------------------------------------------------

    async def run(self, stopped: Any) -> None:
        """Steps until the tuning ends, is deleted or ``stopped`` (kopf's daemon flag) is set."""
        try:
            while not stopped:
                if not await self.step():
                    return
        finally:
            await self.close()

    async def step(self) -> bool:
        """One step; False when the tuning is over (or gone)."""
        obj = await kube.get_sglangtuning(self.namespace, self.name)
        if obj is None or (obj.get("metadata") or {}).get("deletionTimestamp"):
            return False
        generation = int((obj.get("metadata") or {}).get("generation") or 0)
        status = api.parse_tuning_status(obj)
        now = _now()
        if status.phase in plan.TERMINAL_PHASES:
            await self._cleanup(status)
            ref = ((obj.get("spec") or {}).get("serverRef") or {}).get("name")
            if ref and (obj.get("spec") or {}).get("mode") == api.TuningMode.IN_PLACE.value:
                await self.release(str(ref), f"SGLangTuning {self.name} ended ({status.phase})")
            return False
        try:
            tuning = api.parse_tuning(obj)
        except SpecError as err:
            await self._end(obj, status, api.TuningPhase.FAILED, "InvalidSpec", "; ".join(err.messages), now)
            return False
        spec = tuning.spec
        in_place = spec.mode is api.TuningMode.IN_PLACE
        server_body = await kube.get_sglangserver(self.namespace, spec.server_ref.name)
        if server_body is None:
            await self._wait(obj, status, "ServerNotFound", f"SGLangServer {self.namespace}/"
                             f"{spec.server_ref.name} does not exist (spec.serverRef.name)", generation, now)
            return True
        try:
            server = parse(server_body)
            valid, invalid = plan.points(spec.parameters, server.spec)
        except (SpecError, ValueError) as err:
            text = "; ".join(err.messages) if isinstance(err, SpecError) else str(err)
            await self._end(obj, status, api.TuningPhase.FAILED, "ServerNotTunable", text, now)
            return False
        if status.started_at is None:
            stable = None
            if in_place:
                got = await self._acquire(server_body)
                if got.hold is None:
                    await self._wait(obj, status, got.reason, got.message, generation, now)
                    return True
                stable = got.hold.stable_revision
            await self._begin(obj, status, spec, valid, invalid, generation, now, stable)
            return True
        started = _parse_time(status.started_at) or now
        step = plan.next_step(spec, status, valid, (now - started).total_seconds())
        if step.kind == "finish":
            if in_place:
                await self.release(spec.server_ref.name, f"SGLangTuning {self.name} finished")
            await self._finish(obj, status, spec, step.reason, now)
            return False
        if in_place:
            s_status = parse_status(server_body)
            hold = s_status.tuning_hold
            s_generation = int((server_body.get("metadata") or {}).get("generation") or 0)
            if hold is None or hold.name != self.name:
                await self._end(obj, status, api.TuningPhase.CANCELLED, "HoldLost",
                                f"SGLangServer {spec.server_ref.name} is no longer held by this tuning "
                                "(status.tuningHold)", now)
                return False
            if holds.cancelled(hold, s_generation):
                await self.release(spec.server_ref.name, "the server's spec changed")
                await self._end(obj, status, api.TuningPhase.CANCELLED, "SpecChanged",
                                f"the spec of SGLangServer {spec.server_ref.name} changed (generation "
                                f"{hold.generation} -> {s_generation}): the tuning is cancelled, the spec's revision "
                                "is applied", now)
                return False
        if step.kind == "start":
            assert step.settings is not None
            await self._start(obj, status, spec, server_body, server, step.settings, generation, now)
            return True
        assert step.trial is not None
        await self._resume(obj, status, spec, server_body, server, step.trial, generation)
        return True

    async def _wait(self, obj: Mapping[str, Any], status: api.SGLangTuningStatus, reason: str, message: str,
                    generation: int, now: dt.datetime) -> None:
        await self._write(obj, status.model_copy(update={"phase": status.phase or api.TuningPhase.PENDING.value}),
                          [_cond("Running", "False", reason, message, generation, now)])
        await asyncio.sleep(WAIT_SECONDS)

    async def _begin(self, obj: Mapping[str, Any], status: api.SGLangTuningStatus, spec: api.SGLangTuningSpec,
                     valid: list[Any], invalid: list[Any], generation: int, now: dt.datetime,
                     stable: str | None = None) -> None:
        room = min(INVALID_RECORDS, api.MAX_TRIAL_RECORDS - spec.budget.max_trial_count - 1)
        total = plan.planned_trials(spec, valid)
        new = status.model_copy(update={
            "phase": api.TuningPhase.RUNNING.value, "started_at": rfc3339(now), "trials_total": total,
            "trials_invalid": len(invalid), "trials": plan.invalid_records(self.name, invalid, room),
            "stable_revision": stable})
        message = (f"{len(valid)} valid points, {len(invalid)} refused by the release's rules; up to {total} trials "
                   f"(the control trial without speculative decoding included)")
        if await self._write(obj, new, [_cond("Running", "True", "Searching", message, generation, now)]):
            await self._event(obj, "Normal", "TuningStarted", message)

    async def _start(self, obj: Mapping[str, Any], status: api.SGLangTuningStatus, spec: api.SGLangTuningSpec,
                     server_body: Mapping[str, Any], server: SGLangServer, settings: api.TrialSettings,
                     generation: int, now: dt.datetime) -> None:
        name = plan.trial_name(self.name, plan.started_count(status.trials))
        try:
            work = self._render(obj, server, server_body.get("spec") or {}, name, settings) \
                if spec.mode is api.TuningMode.SHADOW else None
            revision = work.revision if work is not None else self._in_place(server_body, server, settings)[0].revision
        except (builders.InvalidSpec, SpecError, ValueError) as err:  # validated before: only a changed server
            reason = "; ".join(err.errors) if isinstance(err, builders.InvalidSpec) else str(err)
            record = api.Trial(name=name, settings=settings, verdict=api.TrialVerdict.INVALID.value,
                               reason=plan.api_reason(reason), finished_at=rfc3339(now))
            await self._write(obj, status.model_copy(update={"trials": [*status.trials, record]}))
            return
        record = api.Trial(name=name, settings=settings, revision=revision, started_at=rfc3339(now))
        update: dict[str, Any] = {"trials": [*status.trials, record]}
        if not settings.speculative:
            update["control_trial"] = name
        message = f"trial {name}: {settings.summary()} (revision {revision})"
        if await self._write(obj, status.model_copy(update=update),
                             [_cond("Running", "True", "TrialRunning", message, generation, now)]):
            await self._event(obj, "Normal", "TrialStarted", message)

    def _render(self, obj: Mapping[str, Any], server: SGLangServer, server_spec: Mapping[str, Any], name: str,
                settings: api.TrialSettings) -> TrialWorkload:
        """The trial's workload from the server's spec as stored (camelCase, ``server_spec``) with ``settings``.
        Raises ``SpecError``, :class:`~sglang_operator.builders.InvalidSpec` or ``ValueError``."""
        spec_dict = plan.trial_spec(server_spec, settings)
        trial_server = parse({"apiVersion": server.api_version, "kind": server.kind,
                              "metadata": {"name": server.name, "namespace": self.namespace}, "spec": spec_dict})
        return trial_workload(trial_server.spec, server.name, self.namespace, name, dict(obj))

    async def _resume(self, obj: Mapping[str, Any], status: api.SGLangTuningStatus, spec: api.SGLangTuningSpec,
                      server_body: Mapping[str, Any], server: SGLangServer, trial: api.Trial,
                      generation: int) -> None:
        started = _parse_time(trial.started_at) or _now()
        reason: str | None = None
        score: float | None = None
        in_place = spec.mode is api.TuningMode.IN_PLACE
        try:
            if in_place:
                levels = await self._run_in_place(obj, spec, server, trial, started, generation)
            else:
                levels = await self._run_trial(obj, spec, server_body, server, trial, started, generation)
        except TrialFailure as failure:
            verdict, reason, levels, score = api.TrialVerdict.FAILED, failure.reason, [], None
        else:
            verdict = api.TrialVerdict.COMPLETED
            score, levels = plan.trial_objective(spec, levels)
        finally:
            if not in_place:
                await self._delete_trial(trial.name)
        done = trial.model_copy(update={
            "verdict": verdict.value, "reason": plan.api_reason(reason) if reason else None,
            "finished_at": rfc3339(_now()), "objective": round(score, 3) if score is not None else None,
            "levels": levels})
        fresh = await kube.get_sglangtuning(self.namespace, self.name)  # the trial took minutes: its newest view
        if fresh is None or (fresh.get("metadata") or {}).get("deletionTimestamp"):
            return
        current = api.parse_tuning_status(fresh)
        if plan.running(current.trials) is None or plan.running(current.trials).name != trial.name:  # type: ignore[union-attr]
            return
        trials = [done if t.name == trial.name else t for t in current.trials]
        conds = [_cond("TrialPending", "False", "TrialFinished", f"trial {trial.name} {verdict.value}",
                       generation, _now())] if self._pending_message else None
        self._pending_message = None
        if await self._write(fresh, current.model_copy(update={"trials": trials}), conds):
            telemetry.count_tuning_trial(self.namespace, self.name, verdict.value, trial.name,
                                         trial.settings.summary(), done.objective)
            if verdict is api.TrialVerdict.COMPLETED:
                await self._event(fresh, "Normal", "TrialCompleted",
                                  f"trial {trial.name} {trial.settings.summary()}: objective {score:.1f} tok/s"
                                  if score is not None else f"trial {trial.name} {trial.settings.summary()}")
            else:
                await self._event(fresh, "Warning", "TrialFailed",
                                  f"trial {trial.name} {trial.settings.summary()}: {reason}")

    async def _run_trial(self, obj: Mapping[str, Any], spec: api.SGLangTuningSpec, server_body: Mapping[str, Any],
                         server: SGLangServer, trial: api.Trial, started: dt.datetime,
                         generation: int) -> list[api.LevelFigures]:
        """Apply the trial's workload, wait for its pod, measure it. Raises :class:`TrialFailure`."""
        try:
            work = self._render(obj, server, server_body.get("spec") or {}, trial.name, trial.settings)
        except (builders.InvalidSpec, SpecError, ValueError) as err:
            raise TrialFailure("; ".join(err.errors) if isinstance(err, builders.InvalidSpec) else str(err)) from None
        manifest = work.manifest
        digest = await self._serving_digest(server_body)
        for c in manifest["spec"]["template"]["spec"]["containers"]:
            if c.get("name") == "sglang":
                c["image"] = pinned_image(c["image"], digest)
        await kube.apply(manifest)
        deadline = started + dt.timedelta(seconds=spec.budget.trial_deadline_seconds)
        pod = await self._ready_pod(obj, trial.name, deadline, generation)
        version = work.rendered.command.version
        roles = roles_for(version)
        bench_plan = BenchPlan.from_workload(spec.workload, server_info_path=dialect(version).server_info_path)
        api_key = None
        ref = server.spec.api_key_secret_ref
        if ref is not None:
            api_key = await kube.secret_value(self.namespace, ref.name, ref.key)
        ip = str((pod.get("status") or {}).get("podIP"))
        bench = TrialBench(self.http, [TrialPod(str(pod["metadata"]["name"]), base_url(ip, server.spec.port))],
                           server.spec.model.served_model_name or server.spec.model.path, roles, bench_plan,
                           api_key=api_key, probe_limits=self.probe_limits, scrape_limits=self.scrape_limits)
        levels = await bench.measure(default_score(spec.objective))
        crash = await self._crash(trial.name)
        if crash is not None:
            raise TrialFailure(crash)
        if levels and all(f.requests is not None and f.failed_requests == f.requests for f in levels):
            raise TrialFailure(f"every request of trial {trial.name} failed")
        return levels

    # --- InPlace: the server's hold, its trials on the server's pods -----------------------------------------

    def _memory(self, server_body: Mapping[str, Any]) -> ServerMemory | None:
        """The server's memory in the operator's observer (None without one: a unit test's runner)."""
        return self.observer.memory(server_body) if self.observer is not None else None

    def _lock(self, server_body: Mapping[str, Any], mem: ServerMemory | None) -> asyncio.Lock:
        """The server's worker lock (:attr:`ServerMemory.lock`): every write for the server holds it."""
        if mem is not None:
            return mem.lock
        name = str((server_body.get("metadata") or {}).get("name"))
        return self._own_locks.setdefault(name, asyncio.Lock())

    async def _patch_server(self, server: str, delta: Mapping[str, Any], mem: ServerMemory | None,
                            attempts: int = 5) -> dict[str, Any] | None:
        """Write ``delta`` (top-level status keys; None removes one) into SGLangServer ``server``'s status: one merge
        patch with the stored object's resourceVersion, read again when refused as stale (the observer wrote in
        between: it holds the same lock, so only a reconcile's or a watch's older view). The caller holds the
        server's lock. Returns the object as patched, None when gone or always stale."""
        for _ in range(attempts):
            body = await kube.get_sglangserver(self.namespace, server)
            if body is None:
                return None
            stored = body.get("status") or {}
            rv = (body.get("metadata") or {}).get("resourceVersion")
            keys = {**(mem.applied if mem is not None else {}), **delta}  # with what the server's job applied
            patched = await kube.patch_status(self.namespace, server, rv, server_st.merge_patch(stored, keys))
            if patched is not None:
                if mem is not None:
                    mem.applied = {}  # written by this patch
                    mem.body = patched
                return patched
        return None

    async def _acquire(self, server_body: Mapping[str, Any]) -> holds.Acquired:
        """Take the server's hold (:func:`~sglang_operator.decisions.tuning.hold.acquire`) in its worker: written
        into its ``status.tuningHold`` unless it is there already."""
        mem = self._memory(server_body)
        server = str((server_body.get("metadata") or {}).get("name"))
        async with self._lock(server_body, mem):
            body = await kube.get_sglangserver(self.namespace, server)
            if body is None:
                return holds.Acquired(None, "ServerNotFound", f"SGLangServer {self.namespace}/{server} is gone")
            s_status = parse_status(body)
            got = holds.acquire(s_status, self.name, int((body.get("metadata") or {}).get("generation") or 0))
            if got.hold is None or s_status.tuning_hold == got.hold:
                return got
            if await self._patch_server(server, {"tuningHold": got.hold.model_dump(
                    by_alias=True, exclude_none=True, mode="json")}, mem) is None:
                return holds.Acquired(None, "ServerChanged", f"SGLangServer {server}'s status could not be written")
            log.info("SGLangTuning %s/%s holds SGLangServer %s (stable revision %s)", self.namespace, self.name,
                     server, got.hold.stable_revision)
            return got

    async def release(self, server: str, reason: str) -> str | None:
        """End this tuning's hold on SGLangServer ``server`` in its worker: the stable revision applied again through
        the one apply path (:func:`~sglang_operator.control.restore.apply_revision`) unless it serves or the spec
        changed (:func:`~sglang_operator.decisions.tuning.hold.release_revision`), and ``status.tuningHold`` removed,
        in one status patch. Idempotent (no hold of this tuning: nothing). Returns the revision applied, if any."""
        body = await kube.get_sglangserver(self.namespace, server)
        if body is None:
            return None
        mem = self._memory(body)
        async with self._lock(body, mem):
            body = await kube.get_sglangserver(self.namespace, server)
            if body is None:
                return None
            s_status = parse_status(body)
            hold = s_status.tuning_hold
            if hold is None or hold.name != self.name:
                return None
            generation = int((body.get("metadata") or {}).get("generation") or 0)
            revision = holds.release_revision(hold, s_status, generation)
            delta: dict[str, Any] = {}
            if revision is not None:
                delta = await restore.apply_revision(dict(body), revision, reason, _now(), mem)
            await self._patch_server(server, {**delta, "tuningHold": None}, mem)
            log.info("SGLangTuning %s/%s released SGLangServer %s (%s)%s", self.namespace, self.name, server, reason,
                     f": revision {revision} applied again" if revision else "")
            return revision

    def _in_place(self, server_body: Mapping[str, Any], server: SGLangServer,
                  settings: api.TrialSettings) -> tuple[builders.Rendered, dict[str, Any]]:
        """The InPlace trial's revision: the server's spec (as stored) with ``settings`` on ``spec.replicas`` pods,
        rendered as the server itself (same name, labels, Service). Raises ``SpecError``,
        :class:`~sglang_operator.builders.InvalidSpec`."""
        spec_dict = plan.trial_spec(server_body.get("spec") or {}, settings, replicas=server.spec.replicas)
        trial_server = parse({"apiVersion": server.api_version, "kind": server.kind,
                              "metadata": {"name": server.name, "namespace": self.namespace}, "spec": spec_dict})
        return builders.render(trial_server), spec_dict

    async def _apply_in_place(self, server_name: str, trial: api.Trial) -> tuple[builders.Rendered, SGLangServer]:
        """Apply ``trial``'s revision on every replica of the server, in its worker, through the one apply path; the
        apply's status keys and the hold's trial in one status patch. Not applied again when it runs already (a
        resumed step). Raises :class:`TrialFailure` (the hold is gone, the spec changed, the apply was refused)."""
        body = await kube.get_sglangserver(self.namespace, server_name)
        if body is None:
            raise TrialFailure(f"SGLangServer {server_name} is gone")
        mem = self._memory(body)
        async with self._lock(body, mem):
            body = await kube.get_sglangserver(self.namespace, server_name)
            fresh = await kube.get_sglangtuning(self.namespace, self.name)
            if body is None or fresh is None or (fresh.get("metadata") or {}).get("deletionTimestamp"):
                raise TrialFailure("the SGLangTuning or its server is gone")
            s_status = parse_status(body)
            hold = holds.active(s_status, int((body.get("metadata") or {}).get("generation") or 0))
            if hold is None or hold.name != self.name:
                raise TrialFailure("the server is no longer held by this tuning (its spec changed)")
            server = parse(body)
            try:
                rendered, spec_dict = self._in_place(body, server, trial.settings)
            except (builders.InvalidSpec, SpecError) as err:
                raise TrialFailure("; ".join(err.errors) if isinstance(err, builders.InvalidSpec)
                                   else "; ".join(err.messages)) from None
            if s_status.revision == rendered.revision and hold.trial == trial.name:
                return rendered, server
            digest = await self._serving_digest(body)  # the image the serving revision's pods run, as Shadow trials
            if digest:
                rendered = ledger.pinned(rendered, digest)
            try:
                delta = await apply_placement(body, [placement(body, rendered, spec_dict)], _now(), mem,
                                              keep_spec_valid=True, history_limit=server.spec.rollback.history_limit)
            except Exception as err:  # a refused child: the trial fails, the search goes on
                raise TrialFailure(f"applying trial {trial.name} failed: {err}") from None
            held = holds.with_trial(hold, trial.name, rendered.revision)
            await self._patch_server(server_name, {**delta, "tuningHold": held.model_dump(
                by_alias=True, exclude_none=True, mode="json")}, mem)
            log.info("SGLangTuning %s/%s: trial %s (revision %s) applied on SGLangServer %s", self.namespace,
                     self.name, trial.name, rendered.revision, server_name)
            return rendered, server

    async def _server_pods(self, server: str, revision: str) -> list[dict[str, Any]]:
        pods = await kube.list_pods(self.namespace, selector_labels(server))
        return [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")
                and ((p.get("metadata") or {}).get("labels") or {}).get(builders.REVISION_LABEL) == revision]

    async def _run_in_place(self, obj: Mapping[str, Any], spec: api.SGLangTuningSpec, server: SGLangServer,
                            trial: api.Trial, started: dt.datetime, generation: int) -> list[api.LevelFigures]:
        """Apply the trial on the server's pods, wait until ``spec.replicas`` of them run it Ready, measure them all.
        Raises :class:`TrialFailure`."""
        rendered, server = await self._apply_in_place(server.name, trial)
        deadline = started + dt.timedelta(seconds=spec.budget.trial_deadline_seconds)
        want = server.spec.replicas
        while True:
            pods = await self._server_pods(server.name, rendered.revision)
            crash = next((c for c in (pod_rules.crash_text(p, api.REASON_LIMIT) for p in pods) if c), None)
            if crash is not None:
                raise TrialFailure(crash)
            ready = [p for p in pods if pod_rules.is_ready(p) and (p.get("status") or {}).get("podIP")]
            if len(ready) >= want:
                break
            if _now() >= deadline:
                trouble = next((t for t in map(pod_rules.trouble, pods) if t), None)
                raise TrialFailure(f"{len(ready)}/{want} pods Ready by budget.trialDeadlineSeconds"
                                   + (f": {trouble}" if trouble else " (SGLang still loading)"))
            await asyncio.sleep(POLL_SECONDS)
        version = rendered.command.version
        bench_plan = BenchPlan.from_workload(spec.workload, server_info_path=dialect(version).server_info_path)
        api_key = None
        ref = server.spec.api_key_secret_ref
        if ref is not None:
            api_key = await kube.secret_value(self.namespace, ref.name, ref.key)
        targets = [TrialPod(str(p["metadata"]["name"]), base_url(str(p["status"]["podIP"]), server.spec.port))
                   for p in ready]
        bench = TrialBench(self.http, targets, server.spec.model.served_model_name or server.spec.model.path,
                           roles_for(version), bench_plan, api_key=api_key, probe_limits=self.probe_limits,
                           scrape_limits=self.scrape_limits)
        levels = await bench.measure(default_score(spec.objective))
        for p in await self._server_pods(server.name, rendered.revision):
            crash = pod_rules.crash_text(p, api.REASON_LIMIT)
            if crash is not None:
                raise TrialFailure(crash)
        if levels and all(f.requests is not None and f.failed_requests == f.requests for f in levels):
            raise TrialFailure(f"every request of trial {trial.name} failed")
        return levels

    async def _serving_digest(self, server_body: Mapping[str, Any]) -> str | None:
        meta = server_body.get("metadata") or {}
        revision = parse_status(server_body).revision
        pods = await kube.list_pods(self.namespace, selector_labels(str(meta.get("name"))))
        ready = [p for p in pods if pod_rules.is_ready(p)
                 and ((p.get("metadata") or {}).get("labels") or {}).get("sglang-operator.io/revision") == revision]
        return image_digest(ready)

    async def _trial_pods(self, trial: str) -> list[dict[str, Any]]:
        pods = await kube.list_pods(self.namespace, {"app.kubernetes.io/instance": trial})
        return [p for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp")]

    async def _crash(self, trial: str) -> str | None:
        for p in await self._trial_pods(trial):
            text = pod_rules.crash_text(p, api.REASON_LIMIT)
            if text is not None:
                return text
        return None

    async def _ready_pod(self, obj: Mapping[str, Any], trial: str, deadline: dt.datetime,
                         generation: int) -> dict[str, Any]:
        """The trial's Ready pod with an IP. Raises :class:`TrialFailure` on a crash or at ``deadline``; a pod's
        trouble (Unschedulable: the scheduler's message) is written as condition ``TrialPending``."""
        trouble: str | None = None
        while True:
            pods = await self._trial_pods(trial)
            for p in pods:
                crash = pod_rules.crash_text(p, api.REASON_LIMIT)
                if crash is not None:
                    raise TrialFailure(crash)
                if pod_rules.is_ready(p) and (p.get("status") or {}).get("podIP"):
                    return p
            trouble = next((t for t in map(pod_rules.trouble, pods) if t), None)
            if trouble is not None and trouble != self._pending_message:
                self._pending_message = trouble
                fresh = await kube.get_sglangtuning(self.namespace, self.name)
                if fresh is not None:
                    await self._write(fresh, api.parse_tuning_status(fresh),
                                      [_cond("TrialPending", "True", "PodNotReady", f"trial {trial}: {trouble}",
                                             generation, _now())])
            if _now() >= deadline:
                raise TrialFailure("not Ready by budget.trialDeadlineSeconds"
                                   + (f": {trouble}" if trouble else " (SGLang still loading)"))
            await asyncio.sleep(POLL_SECONDS)

    async def _delete_trial(self, trial: str) -> None:
        """Delete the trial's workload and wait (at most :data:`GONE_SECONDS`) until its pods are gone."""
        try:
            await kube.delete_object("Deployment", self.namespace, trial)
        except Exception as exc:
            log.warning("deleting trial workload %s/%s failed: %s", self.namespace, trial, exc)
            return
        loop = asyncio.get_running_loop()
        end = loop.time() + GONE_SECONDS
        while loop.time() < end:
            with contextlib.suppress(Exception):
                if not await kube.list_pods(self.namespace, {"app.kubernetes.io/instance": trial}):
                    return
            await asyncio.sleep(POLL_SECONDS)

    async def _cleanup(self, status: api.SGLangTuningStatus) -> None:
        for t in status.trials:
            if t.verdict != api.TrialVerdict.INVALID.value:
                with contextlib.suppress(Exception):
                    await kube.delete_object("Deployment", self.namespace, t.name)

    async def _finish(self, obj: Mapping[str, Any], status: api.SGLangTuningStatus, spec: api.SGLangTuningSpec,
                      reason: str, now: dt.datetime) -> None:
        best, per_level = plan.recommendation(spec, status.trials)
        failed = sum(t.verdict == api.TrialVerdict.FAILED.value for t in status.trials)
        if failed > spec.budget.max_failed_trial_count or best is None:
            phase = api.TuningPhase.FAILED
            why = "TooManyFailedTrials" if best is not None or failed else "NoCompletedTrial"
            message = f"{reason}; {failed} failed trials" + ("" if best is None else f"; best so far {best.summary}")
        else:
            phase, why = api.TuningPhase.SUCCEEDED, "Recommended"
            speedup = f", {best.speedup:.2f}x over no speculation" if best.speedup is not None else ""
            message = f"{reason}: recommends {best.summary} ({best.objective} tok/s{speedup}) from {best.trial}"
        new = status.model_copy(update={"best": best, "best_per_level": per_level})
        speedups = {str(b.concurrency): b.speedup for b in per_level if b.speedup is not None}
        if best is not None and best.speedup is not None:
            speedups["all"] = best.speedup
        telemetry.set_tuning_speedups(self.namespace, self.name, speedups)
        await self._end(obj, new, phase, why, message, now)

    async def _end(self, obj: Mapping[str, Any], status: api.SGLangTuningStatus, phase: api.TuningPhase,
                   reason: str, message: str, now: dt.datetime) -> None:
        generation = int((obj.get("metadata") or {}).get("generation") or 0)
        new = status.model_copy(update={"phase": phase.value, "completed_at": rfc3339(now)})
        ok = "True" if phase is api.TuningPhase.SUCCEEDED else "False"
        if await self._write(obj, new, [_cond("Running", "False", reason, message, generation, now),
                                        _cond("Complete", ok, reason, message, generation, now)]):
            await self._event(obj, "Normal" if ok == "True" else "Warning",
                              "TuningSucceeded" if ok == "True" else "TuningFailed", message)
            telemetry.count_tuning(phase.value)
        await self._cleanup(new)


def _limits(memo: Any) -> tuple[ProbeLimits | None, ScrapeLimits | None]:
    config = getattr(memo, "config", None)
    return getattr(config, "probe_limits", None), getattr(config, "scrape_limits", None)


@kopf.on.daemon(*RESOURCE, cancellation_timeout=30.0)
async def tuning_daemon(meta: kopf.Meta, stopped: kopf.DaemonStopped, memo: Any = None, **_: Any) -> None:
    """Run one SGLangTuning until it ends (see the module docstring); a restarted operator resumes it from its
    status. Deleting the SGLangTuning stops it (its Shadow trial workloads are deleted, and garbage-collected
    with it anyway)."""
    probe, scrape = _limits(memo)
    observer = getattr(memo, "observer", None)
    runner = TuningRunner(str(meta.get("namespace") or "default"), str(meta.get("name")), probe_limits=probe,
                          scrape_limits=scrape, observer=observer)
    try:
        await _run(runner, stopped, probe, scrape, observer)
    finally:  # a deleted tuning's series go; a finished one's stay
        with contextlib.suppress(Exception):
            if stopped or await kube.get_sglangtuning(runner.namespace, runner.name) is None:
                telemetry.forget_tuning(runner.namespace, runner.name)


async def _run(runner: TuningRunner, stopped: Any, probe: ProbeLimits | None, scrape: ScrapeLimits | None,
               observer: Any = None) -> None:
    while not stopped:
        try:
            await runner.run(stopped)
            return
        except asyncio.CancelledError:
            raise
        except Exception:  # a transient API error: the step is decided again from the stored status
            log.exception("SGLangTuning %s/%s: step failed; tried again", runner.namespace, runner.name)
            runner = TuningRunner(runner.namespace, runner.name, probe_limits=probe, scrape_limits=scrape,
                                  observer=observer)
            await asyncio.sleep(WAIT_SECONDS)


@kopf.on.delete(*RESOURCE)
async def tuning_deleted(meta: kopf.Meta, spec: kopf.Spec, memo: Any = None, **_: Any) -> None:
    """An InPlace SGLangTuning deleted (kopf's finalizer holds it until this ran; its daemon is stopped first):
    its hold on the server is released and the stable revision applied again (:meth:`TuningRunner.release`). A
    Shadow tuning's trial workloads are garbage-collected with it."""
    if spec.get("mode") != api.TuningMode.IN_PLACE.value:
        return
    ref = (spec.get("serverRef") or {}).get("name")
    if not ref:
        return
    runner = TuningRunner(str(meta.get("namespace") or "default"), str(meta.get("name")),
                          observer=getattr(memo, "observer", None))
    try:
        await runner.release(str(ref), f"SGLangTuning {runner.name} deleted")
    finally:
        await runner.close()
