"""The status observer: one loop that, every ``interval`` seconds, observes every SGLangServer's pods and,
once Ready, SGLang itself, and writes what changed into ``status`` — one direction per server and tick:
pods (from a watch) → sampler → status patch (the rollback decision will sit between the last two).

Per server and tick: pods (:class:`~sglang_operator.io.pods.PodCache`, fed by ``control.handlers.pod_event``) →
Ready / Progressing / Degraded (:func:`decisions.pods.pod_health`; per group of leader and workers when
multi-node, :func:`decisions.groups.server_health`); when Ready, ``/server_info`` once per
revision → ``status.effective`` and ``SettingsDiffer`` (:mod:`decisions.effective`); when the server's sampling
interval has passed, the sampler (:mod:`sglang_operator.io.sampler`) scrapes every Ready pod (and probes
one per revision) → one sample per revision → the operator's ``/metrics`` (:mod:`sglang_operator.process.telemetry`)
and, for the serving revision, ``acceptLength``, ``acceptRate``, ``tokensPerSecond`` (per-request decode tok/s)
when they moved enough (:func:`decisions.status.figures_patch`).
Status is patched once per observation with the object's ``resourceVersion`` as precondition, so a patch
computed from a stale view is refused (409) and the server is decided again on the watch's newer object; the
revision the analysis wants applied is applied only from a view known to be current.

Every observation runs in the server's own worker (:class:`~sglang_operator.control.memory.ServerMemory`'s lock,
shared with the reconcile handler): a server whose worker is busy (the handler applying, a rollback draining) is
not observed that tick, and a rollback's drain and apply run as that server's job, outside the tick, so one
server never delays another's observation. A resync (a full LIST of SGLangServers and of the pods of every
namespace the pod cache holds, every ``resync_seconds`` and after every watch restart) forgets servers and pods
deleted during a watch gap.
Replicas, port and requested settings come from the spec last applied (the ledger), not a refused update.
Read failures are counted (``sglang_operator_scrape_errors_total``) and logged; one server's failure never
stops the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
import time
from collections.abc import Mapping
from typing import Any

from sglang_operator import builders
from sglang_operator.api.rollback import same_spec
from sglang_operator.api.server import SGLangServer, SpecError
from sglang_operator.api.spec import SGLangServerSpec
from sglang_operator.api.view import ServerView
from sglang_operator.builders.canary import serving_name
from sglang_operator.builders.labels import APP_NAME, MANAGED_BY
from sglang_operator.control import autoscaling, failures, restore, server_status, testhooks
from sglang_operator.control.apply import ApplyOptions, apply_placement, placement
from sglang_operator.control.gather import Gatherer
from sglang_operator.control.gather import read_effective as read_effective
from sglang_operator.control.gather import requested_settings as requested_settings
from sglang_operator.control.memory import Key, Memories, ParseCache, ServerMemory, TuningRequests, key_of
from sglang_operator.control.multinode import apply_when_served
from sglang_operator.control.ticks import CONCURRENCY as CONCURRENCY
from sglang_operator.control.ticks import SPREAD as SPREAD
from sglang_operator.control.ticks import Ticker
from sglang_operator.control.ticks import offset_in_interval as offset_in_interval
from sglang_operator.decisions import capacity, groups
from sglang_operator.decisions import status as status_decisions
from sglang_operator.decisions.observation import ObservationDecision, ServerAction, decide
from sglang_operator.decisions.rollback import Apply
from sglang_operator.decisions.sampling.limits import ProbeLimits, ScrapeLimits
from sglang_operator.decisions.tuning import hold as holds
from sglang_operator.decisions.tuning.inplace import ApplyTrial
from sglang_operator.decisions.tuning.trialload import TRIAL_REQUEST_RATE
from sglang_operator.io import kube
from sglang_operator.io.pods import PodCache
from sglang_operator.io.sampler import Sampler
from sglang_operator.io.sglang_http import SGLangHTTP
from sglang_operator.io.trialstreams import TRIAL_STREAMS
from sglang_operator.process import telemetry

log = logging.getLogger("sglang_operator.control.observer")
HANDLED_WAIT_SECONDS = 30.0
"""How long an observation waits for a view showing the reconcile handler's apply (its status patch) at most."""
RESYNC_SECONDS = 300.0
"""Seconds between two resyncs (:meth:`Observer.resync`), the operator's ``--resync-seconds``."""
MANAGED = {"app.kubernetes.io/name": APP_NAME, "app.kubernetes.io/managed-by": MANAGED_BY}


async def restore_children(namespace: str, name: str, owner_uid: str | None, missing: str,
                           child_name: str | None = None) -> None:  # in the worker
    """Re-apply the children of SGLangServer ``namespace/name`` after ``missing`` (a kind) was deleted behind
    the operator's back, but only while that very owner (``owner_uid``) exists and is not being deleted, and
    only for the revision status says is applied (a newer, not yet handled or invalid spec is left alone)."""
    body = await kube.get_sglangserver(namespace, name)
    if body is None:
        return
    view = ServerView.of(body)
    if view.deleting or (owner_uid and view.uid != owner_uid):
        return
    try:
        rendered = builders.render(view.server)
    except (SpecError, builders.InvalidSpec):
        return
    status = view.status
    if rendered.revision != status.revision:
        return
    if missing == "Deployment" and child_name is not None and child_name != serving_name(name, status.serving_workload):
        return  # a canary's workload, or the one a promotion retired: the operator deleted it
    rendered = await restore.as_ran(view, rendered)  # recreated with the image it ran (pinned by a rollback)
    await apply_placement(view, [placement(view, rendered)], dt.datetime.now(dt.UTC), options=ApplyOptions(drain=False))
    log.warning("%s/%s: %s deleted; re-applied revision %s", namespace, name, missing, rendered.revision)
    await server_status.event(view.ref, "Warning", "ChildRecreated", f"{missing} was deleted; re-applied revision "
                              f"{rendered.revision}")


class Observer:
    """Tracks SGLangServers and their pods (fed by kopf event handlers) and observes every server each
    ``interval`` s; samples each server every ``spec.rollback.intervalSeconds``, or every ``sample_interval``
    s when that is set (``--sample-interval``: an operator-wide override for tests and demos). Every per-server
    thing it keeps is in that server's :class:`~sglang_operator.control.memory.ServerMemory` (:attr:`memories`).
    ``namespaces``: the watched namespaces (empty: clusterwide), for the resync's LIST. ``scrape_limits`` and
    ``probe_limits``: the bounds on what the HTTP client and the sampler read from a pod (defaults
    :class:`ScrapeLimits`, :class:`ProbeLimits`; ``/server_info`` shares the scrape's body limit); ``trial_streams``:
    the HTTP client's cap on tuning trials' streams in flight, ``trial_request_rate`` the requests per second one
    trial may start (:mod:`sglang_operator.io.trialstreams`);
    ``hold_max_seconds``: how long an InPlace tuning may hold a server (``--in-place-hold-max-seconds``; None: no
    bound). Its collaborators, by name: :attr:`ticker` (when each server is observed, :mod:`~sglang_operator.control.
    ticks`), :attr:`gatherer` (an observation's reads, :mod:`~sglang_operator.control.gather`)."""

    def __init__(self, interval: float, sample_interval: float | None = None, resync_seconds: float = RESYNC_SECONDS,
                 namespaces: tuple[str, ...] = (), *, scrape_limits: ScrapeLimits | None = None,
                 probe_limits: ProbeLimits | None = None, trial_streams: int = TRIAL_STREAMS,
                 trial_request_rate: float = TRIAL_REQUEST_RATE,
                 hold_max_seconds: float | None = holds.MAX_SECONDS) -> None:
        self.interval = interval
        self.hold_max_seconds = hold_max_seconds
        self.trial_streams = trial_streams
        self.trial_request_rate = trial_request_rate
        self.scrape_limits = scrape_limits or ScrapeLimits()
        self.probe_limits = probe_limits or ProbeLimits()
        self.sample_interval = sample_interval
        self.resync_seconds = resync_seconds
        self.namespaces = namespaces
        self.memories = Memories()
        self.tunings = TuningRequests()
        self.pods = PodCache(lambda ns: kube.list_pods(ns, MANAGED))
        self.series = telemetry.ServerSeries()
        self._http: SGLangHTTP | None = None
        self._sampler: Sampler | None = None
        self._task: asyncio.Task[None] | None = None
        self._last_resync: float | None = None
        self.relisted = False
        """Set when a watch was re-listed (kopf restarts a watch after a 410 Gone or a lost connection with a LIST,
        whose events have type None and whose deletions come as no event): the loop resyncs after its tick."""
        self.gatherer = Gatherer(self.pods, self.series, self.tunings, lambda: self.http, lambda: self.sampler,
                                 self._spec_revision, sample_interval, hold_max_seconds)
        """The reads of an observation (:mod:`sglang_operator.control.gather`)."""
        self.ticker = Ticker(self.memories, interval, lambda view, now: self.observe(view, now))
        """When each server is observed (:mod:`sglang_operator.control.ticks`)."""

    async def tick(self) -> None:
        """Observe every tracked server once (:meth:`~sglang_operator.control.ticks.Ticker.tick`)."""
        await self.ticker.tick()

    def wake(self, key: Key) -> None:
        """Observe server ``key`` now, off the tick (:meth:`~sglang_operator.control.ticks.Ticker.wake`)."""
        self.ticker.wake(key)

    @property
    def http(self) -> SGLangHTTP:
        """The one HTTP client for SGLang pods (created on the running loop at first use)."""
        if self._http is None:
            self._http = SGLangHTTP(max_body_bytes=self.scrape_limits.body_bytes, trial_streams=self.trial_streams,
                                    trial_request_rate=self.trial_request_rate)
        return self._http

    @property
    def sampler(self) -> Sampler:
        """The sampler (created with the HTTP client)."""
        if self._sampler is None:
            self._sampler = Sampler(self.http, draining=self.memories.draining, limits=self.scrape_limits,
                                    probe_limits=self.probe_limits)
        return self._sampler

    def memory(self, body: Mapping[str, Any]) -> ServerMemory:
        """The memory of the server ``body`` (created on first sight)."""
        return self.memories.of(key_of(body), str((body.get("metadata") or {}).get("uid") or ""))

    def track(self, event_type: str | None, body: dict[str, Any]) -> None:
        """Record the latest ``body`` of a watch event (``DELETED`` forgets the server: :meth:`forget`; None: kopf's
        listing, a re-list when the server was known already: :attr:`relisted`)."""
        if event_type == "DELETED":
            self.forget(key_of(body))
            return
        mem = self.memory(body)
        if event_type is None and mem.body is not None:
            self.relisted = True
        mem.seen.body = body

    def superseded(self, mem: ServerMemory) -> None:
        """The reconcile handler decides from the object itself (in the server's worker, its job cancelled): what a
        cancelled job applied and had not written is moot (:attr:`ServerMemory.applied` emptied)."""
        mem.applied = {}

    def rendered(self, mem: ServerMemory, generation: int, revision: str) -> None:
        """The reconcile handler rendered the spec of ``generation`` to ``revision``: the observer's converge does not
        render it again (:attr:`ServerMemory.spec_revision`)."""
        mem.spec_revision = (generation, revision)

    def handled(self, mem: ServerMemory, generation: int, revision: str) -> None:
        """The reconcile handler applied ``revision`` for ``generation``: no observation is made from a view older
        than its status patch (:attr:`ServerMemory.handled`, for :data:`HANDLED_WAIT_SECONDS` at most)."""
        mem.handled = (generation, revision, time.monotonic())

    def answered(self, patched: dict[str, Any]) -> None:
        """A status patch's answer (``patched``: the object as the API server stored it, the reconcile handler's
        write): the server's newest view until the watch brings another (:attr:`ServerMemory.seen`)."""
        self.memory(patched).seen.body = patched

    def forget(self, key: Key) -> None:
        """Drop everything kept about server ``key``: its memory, its series, the sampler's state, its pods."""
        self.memories.drop(key)  # the sampler's state goes with it (pending probes cancelled)
        self.series.forget(*key)
        self.pods.forget_server(*key)

    def pod_event(self, event_type: str | None, body: dict[str, Any]) -> None:
        """A watch event of a managed pod (None: kopf's listing; of a pod the cache holds already, a re-list:
        :attr:`relisted`)."""
        if event_type is None and self.pods.holds(body):
            self.relisted = True
        self.pods.apply(event_type, body)

    async def child_deleted(self, child: dict[str, Any]) -> None:
        """A managed Deployment or Service was deleted: re-apply it (in its server's worker) if its SGLangServer
        still wants it."""
        meta = child.get("metadata", {})
        owner = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
        ns = str(meta.get("namespace"))
        mem = self.memories.get((ns, str((owner or {}).get("name"))))
        if owner is None or mem is None:
            return
        try:
            async with mem.lock:
                await restore_children(ns, str(owner["name"]), owner.get("uid"), str(child.get("kind")),
                                       str(meta.get("name")))
        except Exception:
            log.exception("re-applying the children of %s/%s failed", ns, owner.get("name"))

    def start(self) -> None:
        """Start the loop on the running event loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="sglang-observer")

    async def stop(self) -> None:
        """Cancel the loop and every server's job and wait for them; cancel probes and close the HTTP client."""
        jobs = [t for m in self.memories.values() for t in (m.job, m.observation) if t is not None and not t.done()]
        for task in [self._task, *jobs]:
            if task is not None:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        self._task = None
        if self._sampler is not None:
            await self._sampler.aclose()
            self._sampler = None
        if self._http is not None:
            await self._http.aclose()
            self._http = None

    async def observe(self, view: ServerView, now: dt.datetime) -> None:
        """Observe one SGLangServer (``view``: its newest object, :meth:`ServerMemory.view`) and persist what that
        decides (nothing when nothing changed): gather (:attr:`gatherer`: pods, ``/server_info``, the samples) → decide
        (pure: :func:`~sglang_operator.decisions.observation.decide`) → the autoscaler's decision
        (:func:`sglang_operator.control.autoscaling.follow`: ``status.autoscaling`` and the ScaledObject, written by
        nothing yet) → persist (:meth:`persist`: one status patch, the events, the ScaledObject, the job's apply). The
        caller holds the server's lock."""
        mem = self.memories.of(view.key, view.uid)
        merged = view.with_status(mem.applied)  # with what the server's job applied
        status = merged.status
        if groups.waiting_for_lws(status):  # nothing applied for want of the LeaderWorkerSet API: re-check
            await self._apply_when_served(mem, view, now)
            return
        if not status.revision or view.deleting:
            return
        if mem.handled is not None:  # the reconcile handler applied a revision its patch has not shown yet
            generation, handled, at = mem.handled
            if status.revision == handled or time.monotonic() - at > HANDLED_WAIT_SECONDS \
                    or view.generation != generation:
                mem.handled = None
            else:
                return  # an older view than what runs: the watch brings the handler's status next
        try:
            server, spec = self._parsed(mem, merged)
        except SpecError:
            return
        observed, policy = await self.gatherer.gather(mem, merged, server, spec, now)
        decided = decide(status, observed, policy, merged.applied)
        measured = capacity.capacity(self.tunings.known_best(server.namespace), server, spec, status.revision) \
            if capacity.uses_measured_capacity(server) else None
        await self.persist(mem, view, await autoscaling.follow(mem, view, server, decided, now, measured=measured),
                           now)

    async def _apply_when_served(self, mem: ServerMemory, view: ServerView, now: dt.datetime) -> None:
        """A server that waited for the LeaderWorkerSet API: applied once it is served
        (:func:`~sglang_operator.control.multinode.apply_when_served`), its status written here in one patch."""
        applied = await apply_when_served(view, now)
        if applied is None:
            return
        new, message, created = applied
        patched, _ = await server_status.write_changed(view, new)
        if patched is None:
            return  # changed meanwhile: the next tick sees the new object (applying again is a no-op)
        mem.seen.body = patched
        log.info("%s/%s: %s", mem.namespace, mem.name, message)
        await server_status.event(view.ref, "Normal", "Created", created)

    async def persist(self, mem: ServerMemory, view: ServerView, decision: ObservationDecision,
                      now: dt.datetime) -> None:
        """Write ``decision`` for ``view`` (the view it was decided from): ONE status patch, what of the decided status
        differs from the status as stored (:func:`~sglang_operator.control.server_status.write_changed`), with the
        view's resourceVersion (refused as stale: the view is marked and nothing else is written; the watch's newer
        object is decided again), then the events, then the apply as the server's job, only from a view known to be
        current (the patch's answer, else one GET): the KEDA ScaledObject the tick decided
        (:func:`sglang_operator.control.autoscaling.write`, through the apply path), the job's apply."""
        patched, delta = await server_status.write_changed(view, decision.status_json)
        if delta:
            if patched is None:  # stale view: decide again on the watch's newer object, never on this one
                mem.seen.stale_rv = view.resource_version
                return
            mem.applied = {}
            newest = mem.view()
            if newest is None or newest.resource_version == view.resource_version:  # the answer is the newest view
                mem.seen.body = patched  # until the watch brings another
            view = ServerView.of(patched)
        else:
            mem.applied = {}  # nothing differs: the stored status holds what the job applied already
            writes = decision.apply is not None or decision.scaled_object is not None
            if writes and not await self._current(mem, view):
                return  # a write is decided from the newest object only: the watch's next view is decided
        self.series.export_analysis(mem.namespace, mem.name, decision.state)
        mem.diffs = decision.diffs
        for event in decision.events:
            await server_status.event(view.ref, event.type, event.reason, event.message)
        phase = decision.state.analysis.phase if decision.state.analysis else None
        if phase in ("WarmingUp", "Verifying", "RollingBack"):
            testhooks.exit_at(str(phase))
        if decision.state.canary is not None:
            testhooks.exit_at(f"Canary{decision.state.canary.phase}")
        if decision.scaled_object is not None:  # the child the tick decided, after its status patch
            await autoscaling.write(mem, view.ref, decision.scaled_object)
        if decision.apply is not None:
            self._start_job(mem, view, decision.apply, now)

    async def _current(self, mem: ServerMemory, view: ServerView) -> bool:
        """Whether ``view`` is the object as the API server holds it now (one GET; an unreadable object: False)."""
        try:
            live = await kube.get_sglangserver(mem.namespace, mem.name)
        except Exception as exc:
            log.warning("%s/%s not read before applying: %s", mem.namespace, mem.name, exc)
            return False
        rv = view.resource_version
        if live is None or (live.get("metadata") or {}).get("resourceVersion") != rv:
            mem.seen.stale_rv = rv
            return False
        return True

    def _parsed(self, mem: ServerMemory, view: ServerView) -> tuple[SGLangServer, SGLangServerSpec]:
        """The object of ``view`` parsed without its status, and the spec it last applied
        (:meth:`ServerView.applied_spec`), cached while its uid, generation and ``status.revision`` stay: parsing both
        was a fifth of an observation's time (every server, every interval). Raises :class:`SpecError`."""
        status = view.status
        stamp = (view.uid, view.generation, str(status.revision))
        cached = mem.parsed
        if cached is not None and cached.stamp == stamp:
            return cached.server, cached.applied
        server = view.server  # the status is the observer's to write
        spec = view.applied_spec()
        if spec == server.spec:  # mostly: one model held per server, not two
            spec = server.spec
        record = status.applied_record
        unchanged = record is not None and same_spec(record.spec, view.spec_data)
        mem.parsed = ParseCache(stamp, server, spec, unchanged)
        return server, spec

    def _spec_revision(self, mem: ServerMemory, server: SGLangServer, view: ServerView) -> str | None:
        """The revision the object's spec asks for, for the analysis' ``converge`` (None: nothing to converge to).

        None when the spec was refused at this generation (``SpecValid=False``: the API server or the validation
        refused it; kopf retries, the analysis does not). ``status.revision`` when the spec is the one that
        revision was applied from (replicas aside): a render that differs only because the operator's defaults
        changed (an upgrade) is applied at the server's next spec change, never by a resume. Else the spec's
        render, cached per generation."""
        generation, status = view.generation, view.status
        valid = status.condition(status_decisions.SPEC_VALID)
        if valid is not None and valid.status == "False" and valid.observed_generation == generation:
            return None
        self._parsed(mem, view)  # cached per uid, generation and revision: with whether the spec changed
        if mem.parsed is not None and mem.parsed.unchanged:
            return str(status.revision)
        cached = mem.spec_revision
        if cached is not None and cached[0] == generation:
            return cached[1]
        try:
            rev: str | None = builders.render(server).revision
        except builders.InvalidSpec:
            rev = None
        mem.spec_revision = (generation, rev)
        return rev

    def _start_job(self, mem: ServerMemory, view: ServerView, action: ServerAction, now: dt.datetime) -> None:
        """Carry out the analysis' Apply as the server's job: it waits for the server's lock (the observation
        holding it ends first), drains and applies there, and no tick waits for it."""
        if mem.job is not None and not mem.job.done():
            return

        async def job() -> None:
            async with mem.lock:
                await self._apply(mem, view, action, now)

        mem.job = asyncio.get_running_loop().create_task(job(), name=f"apply {mem.namespace}/{mem.name}")

    async def _apply(self, mem: ServerMemory, view: ServerView, action: ServerAction, now: dt.datetime) -> None:
        """Carry out the analysis' Apply: the revision from the ledger (drained first); its status keys are kept in
        ``mem.applied`` for the next observation's one status patch (one status patch per server and tick). A
        failure is tried again next tick (:mod:`~sglang_operator.control.failures`)."""
        try:
            if isinstance(action, Apply):
                new = await restore.apply_revision(view, action.revision, action.reason, now, mem)
            elif isinstance(action, ApplyTrial):  # a refusal is the trial's failure, in the hold
                new = await restore.apply_trial(view, action, now, mem)
            else:  # the canary's placement (only what differs is written) or its promotion
                new = await restore.place_canary(view, action, now, mem)
        except Exception as exc:  # NotInLedger, a refused child (another owner's: a condition), a ledger entry
            await failures.job_failed(mem, view, action.revision, exc)  # this release cannot render
            return
        failures.job_succeeded(mem)
        mem.applied = new

    def tuning_event(self, event_type: str | None, body: dict[str, Any]) -> None:
        """A watch event of an SGLangTuning: what it asks of its server recorded (:class:`TuningRequests`), and that
        server woken (:meth:`wake`)."""
        key = self.tunings.apply(event_type, body)
        if key is not None:
            self.wake(key)

    async def server_view(self, namespace: str, name: str) -> ServerView | None:
        """The newest view of SGLangServer ``namespace/name``: the watched one, else one GET (not tracked yet)."""
        mem = self.memories.get((namespace, name))
        view = mem.view() if mem is not None else None
        if view is not None:
            return view
        body = await kube.get_sglangserver(namespace, name)
        return ServerView.of(body) if body is not None else None

    async def instance_pods(self, namespace: str, instance: str, owner_uid: str) -> list[dict[str, Any]]:
        """The pods of ``app.kubernetes.io/instance: instance`` (a server or a Shadow trial) owned through their
        workload by ``owner_uid`` (the server's; the tuning's), from the watched pod cache (:meth:`PodCache.owned`)."""
        return await self.pods.owned(namespace, instance, (owner_uid,))

    async def resync(self) -> None:
        """A full LIST of SGLangServers (the watched namespaces, or clusterwide), of the managed pods of every
        namespace the pod cache holds and of SGLangTunings: a server, pod or tuning deleted while the watch was away
        (kopf re-lists after a 410 Gone without DELETED events) is forgotten, its series leave ``/metrics``; a
        server whose tunings changed is observed (a gone tuning's hold is released). Failures are logged; the next
        resync tries again."""
        try:
            live = await kube.sglangserver_keys(self.namespaces)
        except Exception as exc:
            log.warning("resync: SGLangServers not listed: %s", exc)
            return
        for mem in self.memories.values():
            if mem.key not in live and not mem.busy:
                log.info("resync: %s/%s is gone; forgotten", *mem.key)
                self.forget(mem.key)
            elif mem.key in live and live[mem.key] and mem.uid and live[mem.key] != mem.uid:
                self.forget(mem.key)  # deleted and created again under that name during the gap
        for ns in self.pods.namespaces():
            try:
                await self.pods.resync(ns)
            except Exception as exc:
                log.warning("resync: pods of %s not listed: %s", ns, exc)
        try:  # a tuning deleted during a watch gap: its server's hold is released
            for key in self.tunings.resync(await kube.sglangtunings(self.namespaces)):
                self.wake(key)
        except Exception as exc:
            log.warning("resync: SGLangTunings not listed: %s", exc)

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        self._last_resync = loop.time()
        while True:
            started = loop.time()
            try:
                await self.tick()
                due = self.resync_seconds > 0 and loop.time() - self._last_resync >= self.resync_seconds
                if due or self.relisted:  # periodic, and after every watch restart
                    if self.relisted:
                        log.info("resync: a watch was re-listed (kopf restarts a watch after a 410 Gone)")
                    self._last_resync, self.relisted = loop.time(), False
                    await self.resync()
            except Exception:  # never let the loop die silently: log and go on next tick
                log.exception("observer tick failed")
            await asyncio.sleep(max(0.05, self.interval - (loop.time() - started)))
