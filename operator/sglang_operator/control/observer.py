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
import zlib
from collections.abc import Mapping
from typing import Any

from sglang_operator import builders
from sglang_operator.api.base import ABORT_ANNOTATION
from sglang_operator.api.rollback import without_default_prompt
from sglang_operator.api.server import SGLangServer, SpecError, parse, parse_spec, parse_status
from sglang_operator.api.spec import SGLangServerSpec
from sglang_operator.api.status import Phase, SGLangServerStatus
from sglang_operator.builders.canary import serving_name
from sglang_operator.builders.labels import APP_NAME, MANAGED_BY
from sglang_operator.builders.revision import DIGEST_ANNOTATION
from sglang_operator.control import autoscaling, ledger, restore, server_status, testhooks
from sglang_operator.control.apply import apply_placement, placement
from sglang_operator.control.memory import Key, Memories, ParseCache, ServerMemory, TuningRequests, key_of
from sglang_operator.control.multinode import apply_when_served
from sglang_operator.decisions import effective as eff
from sglang_operator.decisions import groups, judging
from sglang_operator.decisions import status as st
from sglang_operator.decisions.canary import CanaryObservation
from sglang_operator.decisions.derive import speculative_condition
from sglang_operator.decisions.observation import Decision, Observed, ServerAction, decide
from sglang_operator.decisions.pods import trouble
from sglang_operator.decisions.rollback import Apply, Observation, setup_of
from sglang_operator.decisions.sampling.limits import ProbeLimits, ScrapeLimits
from sglang_operator.decisions.sampling.model import Sample, SampleKind, Signal
from sglang_operator.decisions.sampling.roles import roles_for
from sglang_operator.decisions.tuning import hold as holds
from sglang_operator.decisions.tuning.inplace import ApplyTrial
from sglang_operator.io import kube
from sglang_operator.io.pods import PodCache, targets
from sglang_operator.io.sampler import Sampler, ServerRef, sampling_params
from sglang_operator.io.sglang_http import ScrapeError, SGLangHTTP, base_url
from sglang_operator.process import telemetry
from sglang_operator.sglang.versions import SGLangVersionError, dialect, parse_version

log = logging.getLogger("sglang_operator.control.observer")
HANDLED_WAIT_SECONDS = 30.0
"""How long an observation waits for a view showing the reconcile handler's apply (its status patch) at most."""
RESYNC_SECONDS = 300.0
"""Seconds between two resyncs (:meth:`Observer.resync`), the operator's ``--resync-seconds``."""
CONCURRENCY = 8
SPREAD = 0.8
"""Fraction of the interval over which one tick's observations are spread."""
MANAGED = {"app.kubernetes.io/name": APP_NAME, "app.kubernetes.io/managed-by": MANAGED_BY}


def requested_settings(server_spec: Any, num_draft_tokens: int | None) -> dict[str, Any]:
    """What the spec asks SGLang for, keyed as :data:`decisions.effective.FIELDS` (unset keys left out)."""
    out: dict[str, Any] = {}
    spec_dec = server_spec.speculative
    if spec_dec is not None:
        out |= {"algorithm": spec_dec.algorithm.value, "numSteps": spec_dec.num_steps,
                "eagleTopk": spec_dec.eagle_topk, "numDraftTokens": num_draft_tokens}
        if spec_dec.adaptive is not None and spec_dec.adaptive.enabled:
            out["adaptive"] = True
    mem = server_spec.memory
    for key, value in (("maxRunningRequests", mem.max_running_requests),
                       ("memFractionStatic", mem.mem_fraction_static), ("contextLength", mem.context_length)):
        if value is not None:
            out[key] = value
    return out


async def read_effective(
    http: SGLangHTTP, url: str, version: str, status: SGLangServerStatus, server_spec: Any, namespace: str = "default"
) -> tuple[dict[str, Any] | None, list[str] | None]:
    """(new effective settings or None, differences or None) of a Ready server at ``url``.

    ``/server_info`` is read once per revision; the differences are recomputed every call from the
    effective settings (new or already in status). Failures are logged and counted, never raised.
    """
    effective = None
    stored = status.effective.dump() if status.effective is not None else None
    if not stored:
        try:
            path = dialect(parse_version(version)).server_info_path
            ref = server_spec.api_key_secret_ref  # SGLang's --api-key guards /server_info (not /metrics)
            api_key = await kube.secret_value(namespace, ref.name, ref.key) if ref is not None else None
            effective = eff.effective_settings(await http.server_info(url, path, api_key=api_key))
        except ScrapeError as err:
            telemetry.count_scrape_error("server_info", err.reason)
            log.debug("server info not read yet: %s", err)
    known = effective or stored
    diffs = None
    if known:
        diffs = eff.differences(requested_settings(server_spec, status.num_draft_tokens), known)
    return effective, diffs


def applied_spec(body: Mapping[str, Any], status: SGLangServerStatus) -> SGLangServerSpec:
    """The spec last applied (the ledger record of ``status.revision``), else the object's spec; parsed.

    After a refused update the object's spec is not what runs: replicas, port and requested settings must
    come from what was applied. Raises :class:`SpecError` when neither parses.
    """
    record = status.applied_record
    if record is not None and record.spec:
        try:
            return parse_spec(record.spec)
        except SpecError:
            pass
    return parse_spec(body.get("spec") or {})


async def restore_children(namespace: str, name: str, owner_uid: str | None, missing: str,
                           child_name: str | None = None) -> None:  # in the worker
    """Re-apply the children of SGLangServer ``namespace/name`` after ``missing`` (a kind) was deleted behind
    the operator's back, but only while that very owner (``owner_uid``) exists and is not being deleted, and
    only for the revision status says is applied (a newer, not yet handled or invalid spec is left alone)."""
    body = await kube.get_sglangserver(namespace, name)
    meta = (body or {}).get("metadata", {})
    if body is None or meta.get("deletionTimestamp") or (owner_uid and meta.get("uid") != owner_uid):
        return
    try:
        server = parse(body)
        rendered = builders.render(server)
    except (SpecError, builders.InvalidSpec):
        return
    status = parse_status(body)
    if rendered.revision != status.revision:
        return
    if missing == "Deployment" and child_name is not None and child_name != serving_name(name, status.serving_workload):
        return  # a canary's workload, or the one a promotion retired: the operator deleted it
    rendered = await restore.as_ran(body, rendered)  # recreated with the image it ran (pinned by a rollback)
    await apply_placement(body, [placement(body, rendered)], dt.datetime.now(dt.UTC), drain=False)
    log.warning("%s/%s: %s deleted; re-applied revision %s", namespace, name, missing, rendered.revision)
    await server_status.event(body, "Warning", "ChildRecreated", f"{missing} was deleted; re-applied revision "
                              f"{rendered.revision}")


def offset_in_interval(meta: Mapping[str, Any]) -> float:
    """Where in the observer's interval a server is observed, in [0, 1): fixed per server (a hash of its uid, else
    of its namespace and name), so the first observations of servers created together (a status patch and an
    event each) spread over the interval like the servers' own hashes, not in bursts (why and the figures:
    docs/architecture.md, "Under load")."""
    key = str(meta.get("uid") or f"{meta.get('namespace')}/{meta.get('name')}")
    return zlib.crc32(key.encode()) / 2**32


class Observer:
    """Tracks SGLangServers and their pods (fed by kopf event handlers) and observes every server each
    ``interval`` s; samples each server every ``spec.rollback.intervalSeconds``, or every ``sample_interval``
    s when that is set (``--sample-interval``: an operator-wide override for tests and demos). Every per-server
    thing it keeps is in that server's :class:`~sglang_operator.control.memory.ServerMemory` (:attr:`memories`).
    ``namespaces``: the watched namespaces (empty: clusterwide), for the resync's LIST. ``scrape_limits`` and
    ``probe_limits``: the bounds on what the HTTP client and the sampler read from a pod (defaults
    :class:`ScrapeLimits`, :class:`ProbeLimits`; ``/server_info`` shares the scrape's body limit)."""

    def __init__(self, interval: float, sample_interval: float | None = None, resync_seconds: float = RESYNC_SECONDS,
                 namespaces: tuple[str, ...] = (), *, scrape_limits: ScrapeLimits | None = None,
                 probe_limits: ProbeLimits | None = None) -> None:
        self.interval = interval
        self.scrape_limits = scrape_limits or ScrapeLimits()
        self.probe_limits = probe_limits or ProbeLimits()
        self.sample_interval = sample_interval
        self.resync_seconds = resync_seconds
        self.namespaces = namespaces
        self.memories = Memories()
        self.tunings = TuningRequests()
        self._woken: set[asyncio.Task[None]] = set()  # observations started off the tick (kept referenced)
        self.pods = PodCache(lambda ns: kube.list_pods(ns, MANAGED))
        self.series = telemetry.ServerSeries()
        self._http: SGLangHTTP | None = None
        self._sampler: Sampler | None = None
        self._task: asyncio.Task[None] | None = None
        self._slots: asyncio.Semaphore | None = None  # CONCURRENCY observations at a time, across ticks
        self._last_resync: float | None = None
        self.relisted = False
        """Set when a watch was re-listed (kopf restarts a watch after a 410 Gone or a lost connection with a LIST,
        whose events have type None and whose deletions come as no event): the loop resyncs after its tick."""

    @property
    def http(self) -> SGLangHTTP:
        """The one HTTP client for SGLang pods (created on the running loop at first use)."""
        if self._http is None:
            self._http = SGLangHTTP(max_body_bytes=self.scrape_limits.body_bytes)
        return self._http

    @property
    def sampler(self) -> Sampler:
        """The sampler (created with the HTTP client)."""
        if self._sampler is None:
            self._sampler = Sampler(self.http, draining=self.memories.draining, limits=self.scrape_limits,
                                    probe_limits=self.probe_limits)
        return self._sampler

    @property
    def servers(self) -> dict[Key, dict[str, Any]]:
        """The newest view of every tracked server (a copy of the map; read-only use)."""
        return {m.key: m.body for m in self.memories.values() if m.body is not None}

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
        mem.body = body

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

    async def observe(self, body: dict[str, Any], now: dt.datetime) -> None:
        """Observe one SGLangServer ``body`` and persist what that decides (nothing when nothing changed): gather
        (:meth:`gather`: pods, ``/server_info``, the samples) → decide (pure: :func:`~sglang_operator.decisions.
        observation.decide`) → the autoscaler (:func:`sglang_operator.control.autoscaling.follow`: the ScaledObject) →
        persist (:meth:`persist`: one status patch, the events, the job's apply). The caller holds the server's lock."""
        meta, stored = body.get("metadata", {}), body.get("status") or {}
        mem = self.memory(body)
        view = {**body, "status": {**stored, **mem.applied}} if mem.applied else body  # what the server's job applied
        status = mem.status_of(view)
        if groups.waiting_for_lws(status):  # nothing applied for want of the LeaderWorkerSet API: re-check
            await self._apply_when_served(mem, body, now)
            return
        if not status.revision or meta.get("deletionTimestamp"):
            return
        if mem.handled is not None:  # the reconcile handler applied a revision its patch has not shown yet
            generation, handled, at = mem.handled
            if status.revision == handled or time.monotonic() - at > HANDLED_WAIT_SECONDS \
                    or int(meta.get("generation") or 0) != generation:
                mem.handled = None
            else:
                return  # an older view than what runs: the watch brings the handler's status next
        try:
            server, spec = self._parsed(mem, view, status)
        except SpecError:
            return
        decided = decide(stored, mem.applied, *await self.gather(mem, view, status, server, spec, now), status)
        await self.persist(mem, body, await autoscaling.follow(mem, body, server, stored, decided, now), now)

    async def _apply_when_served(self, mem: ServerMemory, body: dict[str, Any], now: dt.datetime) -> None:
        """A server that waited for the LeaderWorkerSet API: applied once it is served
        (:func:`~sglang_operator.control.multinode.apply_when_served`), its status written here in one patch."""
        applied = await apply_when_served(body, now)
        if applied is None:
            return
        new, message, created = applied
        patched, _ = await server_status.write_changed(body, body.get("status") or {}, new)
        if patched is None:
            return  # changed meanwhile: the next tick sees the new object (applying again is a no-op)
        mem.body = patched
        log.info("%s/%s: %s", mem.namespace, mem.name, message)
        await server_status.event(body, "Normal", "Created", created)

    async def gather(self, mem: ServerMemory, view: dict[str, Any], status: SGLangServerStatus, server: SGLangServer,
                     spec: SGLangServerSpec, now: dt.datetime) -> tuple[Observed, Any]:
        """The I/O of one observation: the pods (from the cache), ``/server_info`` once Ready, the image digest, the
        interval's samples. Returns what was observed and the policy in force (``intervalSeconds`` the sampling
        interval). ``view``: the object with what the server's job applied, ``status`` its status (a revision
        applied); ``spec``: the spec it runs."""
        meta = view.get("metadata", {})
        revision = str(status.revision)
        generation = int(meta.get("generation") or 0)
        pods = await self.pods.pods(server.namespace, server.name)
        running = status.canary
        canary_rev = running.revision if running is not None else None
        own = [p for p in pods if _revision_of(p) != canary_rev] if canary_rev else pods  # the serving workload's
        health_spec = spec if running is None else spec.model_copy(update={"replicas": running.stable_replicas})
        health = groups.server_health(own, health_spec, revision, generation, now)  # per group (leaders) multi-node
        effective = diffs = None
        if health.phase == "Ready" and health.pod_ips:
            effective, diffs = await read_effective(self.http, base_url(health.pod_ips[0], spec.port),
                                                    status.sglang_version or "", status, spec, server.namespace)
            await self._note_digest(mem, revision, pods)
        known = effective or (status.effective.dump() if status.effective is not None else None)
        self.series.export_effective(server.namespace, server.name, revision, known)  # for 0.5.10's missing gauges
        policy = server.spec.rollback
        if judging.warm_up_ends(status.analysis, policy.warmup_seconds, now):  # align the first judged interval
            Sampler.restart_interval(mem.sampling)
        samples, figures, interval = await self.sample(view, status, spec, policy, now, mem)
        policy = policy.model_copy(update={"interval_seconds": max(1, round(interval))})
        sample = judging.sample_for(samples, revision)
        stable_views = groups.pod_views(pods, spec, revision)
        annotations = meta.get("annotations") or {}
        canary_obs = None
        if running is not None or server.spec.strategy.canary_policy is not None:
            mine = [p for p in pods if canary_rev and _revision_of(p) == canary_rev
                    and not (p.get("metadata") or {}).get("deletionTimestamp")]
            canary_obs = CanaryObservation(
                policy=server.spec.strategy.canary_policy, replicas=server.spec.replicas, name=server.name,
                serving_workload=status.serving_workload,
                pods=groups.pod_views(pods, spec, canary_rev) if canary_rev else (),
                stable_ready=sum(v.ready for v in stable_views),
                sample=judging.sample_for(samples, canary_rev) if canary_rev else None,
                pending=next((t for t in map(trouble, mine) if t), None),
                promote_token=annotations.get(judging.PROMOTE_ANNOTATION),
                abort_token=annotations.get(ABORT_ANNOTATION))
        observation = Observation(
            revision=revision, desired_pods=health_spec.replicas, setup=setup_of(spec), pods=stable_views,
            spec_revision=None if mem.apply_failure else self._spec_revision(mem, server, view, status),  # kopf retries
            retry_token=restore.retry_token(view), canary=canary_obs)
        speculative = speculative_condition(
            spec.speculative.algorithm.value if spec.speculative else None,
            known,
            None if sample is None or sample.kind is not SampleKind.MEASURED
            else sample.figures.accept_length is not None,
            health.phase == "Ready", generation, now)
        return Observed(
            now=now, generation=generation, health=health, observation=observation, effective=effective, diffs=diffs,
            samples=samples, figures=figures, speculative=speculative,
            promote_token=(meta.get("annotations") or {}).get(judging.PROMOTE_ANNOTATION),
            apply_failure=mem.apply_failure, previous_diffs=mem.diffs, tunings=self.tunings.of(mem.key),
            spec_hash=self._spec_hash(mem, view)), policy

    @staticmethod
    def _spec_hash(mem: ServerMemory, view: Mapping[str, Any]) -> str:
        """The object's spec hashed without ``replicas`` (:func:`~sglang_operator.decisions.tuning.hold.spec_hash`),
        once per generation."""
        generation = int((view.get("metadata") or {}).get("generation") or 0)
        if mem.spec_hash is None or mem.spec_hash[0] != generation:
            mem.spec_hash = (generation, holds.spec_hash(view.get("spec") or {}))
        return mem.spec_hash[1]

    async def persist(self, mem: ServerMemory, body: dict[str, Any], decision: Decision, now: dt.datetime) -> None:
        """Write ``decision`` for ``body`` (the view it was decided from): ONE status patch with the view's
        resourceVersion (refused as stale: the view is marked and nothing else is written; the watch's newer object is
        decided again), then the events, then the apply as the server's job, only from a view known to be current
        (the patch's answer, else one GET)."""
        meta = body.get("metadata", {})
        stored = body.get("status") or {}
        view = body
        if decision.delta:
            patched = await server_status.patch(body, st.merge_patch(stored, decision.delta))
            if patched is None:  # stale view: decide again on the watch's newer object, never on this one
                mem.stale_rv = str(meta.get("resourceVersion"))
                return
            mem.applied = {}
            if mem.body is body:  # the answer is the newest view until the watch brings another
                mem.body = patched
            view = patched
        else:
            mem.applied = {}  # nothing differs: the stored status holds what the job applied already
            if decision.apply is not None and not await self._current(mem, body):
                return  # an apply is decided from the newest object only: the watch's next view is judged
        self.series.export_analysis(mem.namespace, mem.name, decision.state)
        mem.diffs = decision.diffs
        for event in decision.events:
            await server_status.event(body, event.type, event.reason, event.message)
        phase = decision.state.analysis.phase if decision.state.analysis else None
        if phase in ("WarmingUp", "Verifying", "RollingBack"):
            testhooks.exit_at(str(phase))
        if decision.state.canary is not None:
            testhooks.exit_at(f"Canary{decision.state.canary.phase}")
        if decision.apply is not None:
            self._start_job(mem, view, decision.apply, now)

    async def _current(self, mem: ServerMemory, body: dict[str, Any]) -> bool:
        """Whether ``body`` is the object as the API server holds it now (one GET; an unreadable object: False)."""
        try:
            live = await kube.get_sglangserver(mem.namespace, mem.name)
        except Exception as exc:
            log.warning("%s/%s not read before applying: %s", mem.namespace, mem.name, exc)
            return False
        rv = (body.get("metadata") or {}).get("resourceVersion")
        if live is None or (live.get("metadata") or {}).get("resourceVersion") != rv:
            mem.stale_rv = str(rv)
            return False
        return True

    def _parsed(self, mem: ServerMemory, body: dict[str, Any],
                status: SGLangServerStatus) -> tuple[SGLangServer, SGLangServerSpec]:
        """``body`` parsed without its status, and the spec it last applied (:func:`applied_spec`), cached while
        its uid, generation and ``status.revision`` stay: parsing both was a fifth of an observation's time
        (every server, every interval). Raises :class:`SpecError`."""
        meta = body.get("metadata", {})
        stamp = (str(meta.get("uid")), int(meta.get("generation") or 0), str(status.revision))
        cached = mem.parsed
        if cached is not None and cached.stamp == stamp:
            return cached.server, cached.applied
        server = parse({k: v for k, v in body.items() if k != "status"})  # the status is the observer's to write
        spec = applied_spec(body, status)
        if spec == server.spec:  # mostly: one model held per server, not two
            spec = server.spec
        record = status.applied_record
        unchanged = record is not None and same_spec(record.spec, body.get("spec"))
        mem.parsed = ParseCache(stamp, server, spec, unchanged)
        return server, spec

    def note_spec_revision(self, body: Mapping[str, Any], generation: int, revision: str | None) -> None:
        """The revision the reconcile handler rendered the object's spec at ``generation`` to, so the observer does
        not render it again (:meth:`_spec_revision`; a refused spec, rare, the observer renders once itself)."""
        self.memory(body).spec_revision = (generation, revision)

    def _spec_revision(self, mem: ServerMemory, server: SGLangServer, body: Mapping[str, Any],
                       status: SGLangServerStatus) -> str | None:
        """The revision the object's spec asks for, for the analysis' ``converge`` (None: nothing to converge to).

        None when the spec was refused at this generation (``SpecValid=False``: the API server or the validation
        refused it; kopf retries, the analysis does not). ``status.revision`` when the spec is the one that
        revision was applied from (replicas aside): a render that differs only because the operator's defaults
        changed (an upgrade) is applied at the server's next spec change, never by a resume. Else the spec's
        render, cached per generation."""
        generation = int((body.get("metadata") or {}).get("generation") or 0)
        valid = status.condition(st.SPEC_VALID)
        if valid is not None and valid.status == "False" and valid.observed_generation == generation:
            return None
        self._parsed(mem, dict(body), status)  # cached per uid, generation and revision: with whether the spec changed
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

    async def _note_digest(self, mem: ServerMemory, revision: str, pods: list[dict[str, Any]]) -> None:
        """Record, once per revision, the image digest its Ready pods run on its ControllerRevision."""
        if revision in mem.digests:
            return
        ns, name = mem.key
        mine = [p for p in pods if (p.get("metadata", {}).get("labels") or {}).get(builders.REVISION_LABEL)
                == revision and not p.get("metadata", {}).get("deletionTimestamp")]
        cr = await ledger.load(ns, name, revision)
        known = ((cr or {}).get("metadata", {}).get("annotations") or {}).get(DIGEST_ANNOTATION)
        digest = await ledger.note_digest(ns, name, revision, mine, known) if cr is not None else None
        if digest is not None:
            mem.digests[revision] = digest

    def _start_job(self, mem: ServerMemory, body: dict[str, Any], action: ServerAction, now: dt.datetime) -> None:
        """Carry out the analysis' Apply as the server's job: it waits for the server's lock (the observation
        holding it ends first), drains and applies there, and no tick waits for it."""
        if mem.job is not None and not mem.job.done():
            return

        async def job() -> None:
            async with mem.lock:
                await self._apply(mem, body, action, now)

        mem.job = asyncio.get_running_loop().create_task(job(), name=f"apply {mem.namespace}/{mem.name}")

    async def _apply(self, mem: ServerMemory, body: dict[str, Any], action: ServerAction, now: dt.datetime) -> None:
        """Carry out the analysis' Apply: the revision from the ledger (drained first); its status keys are kept in
        ``mem.applied`` for the next observation's one status patch (one status patch per server and tick). A
        failure is a Warning event (once per message) and is tried again next tick."""
        ns, name = mem.key
        try:
            if isinstance(action, Apply):
                new = await restore.apply_revision(body, action.revision, action.reason, now, mem)
            elif isinstance(action, ApplyTrial):  # a refusal is the trial's failure, in the hold
                new = await restore.apply_trial(body, action, now, mem)
            else:  # the canary's placement (only what differs is written) or its promotion
                new = await restore.place_canary(body, action, now, mem)
        except Exception as exc:  # NotInLedger, a refused child, a ledger entry this release cannot render
            message = f"applying revision {action.revision} failed: {exc}"
            log.warning("%s/%s: %s", ns, name, message)
            if mem.apply_error != message:
                mem.apply_error = message
                await server_status.event(body, "Warning", "ApplyFailed", message)
            return
        mem.apply_error = None
        mem.applied = new

    async def sample(self, body: dict[str, Any], status: SGLangServerStatus, spec: Any, policy: Any, now: dt.datetime,
                     mem: ServerMemory | None = None) -> tuple[list[Sample] | None, dict[str, Any], float]:
        """Sample the server when its interval has passed: export every revision's sample; return the samples
        (None: not due), the status figures of the serving revision (:func:`decisions.status.figures_patch`;
        ``{}`` when nothing to write) and the sampling interval in seconds. ``spec``: the applied spec (port,
        model, API key); ``policy``: the object's ``spec.rollback`` (signal, interval, probe)."""
        meta = body["metadata"]
        ns, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
        if status.tuning_hold is not None:  # an InPlace tuning measures its trial: no probe beside its load
            return None, {}, float(self.sample_interval or policy.interval_seconds)
        try:
            roles = roles_for(parse_version(status.sglang_version or ""))
        except SGLangVersionError:
            return None, {}, float(self.sample_interval or policy.interval_seconds)
        params = sampling_params(policy, self.sample_interval)
        mem = mem or self.memory(body)
        if not self.sampler.due(mem.sampling, params.interval_seconds, now):
            return None, {}, params.interval_seconds
        api_key = None
        ref = spec.api_key_secret_ref
        if ref is not None and params.signal is Signal.PROBE:
            api_key = await kube.secret_value(ns, ref.name, ref.key)
        server = ServerRef(ns, name, roles, spec.port, spec.model.served_model_name or spec.model.path, mem.sampling)
        samples = await self.sampler.sample(  # multi-node: one target per group, its leader
            server, lambda: targets(groups.serving_pods(self.pods.pods_now(ns, name), spec)), params, api_key)
        self.series.export(ns, name, samples)
        for s in samples:
            log.debug("%s/%s revision %s: %s %s %s", ns, name, s.revision, s.kind.value, s.reason, s.figures)
        serving = next((s for s in samples if s.revision == status.revision and s.kind is SampleKind.MEASURED), None)
        if serving is None:
            return samples, {}, params.interval_seconds
        return samples, st.figures_patch(status, serving.figures, serving.end, now), params.interval_seconds

    async def tick(self) -> None:
        """Observe every tracked server once, spread over :data:`SPREAD` of the interval (at most
        :data:`CONCURRENCY` at a time), each at its own fixed point of it (:func:`offset_in_interval`), in its own
        worker (a server whose worker is busy is skipped this tick). One loop walks the servers in phase order and
        starts each observation when its point comes (not a sleeping task per server: docs/architecture.md,
        "Under load"). Returns when every observation ended or the interval is over, whichever is first: an
        observation still under way (a slow or hostile pod, up to its probe's timeout) goes on in its server's
        memory (:attr:`ServerMemory.observation`), and the next tick starts on time for every other server."""
        if self._slots is None:
            self._slots = asyncio.Semaphore(CONCURRENCY)
        sem = self._slots
        servers = [m.body for m in self.memories.values() if m.body is not None]
        telemetry.set_servers((m.status_of(m.body).phase for m in self.memories.values() if m.body is not None),
                              [p.value for p in Phase])
        spread = SPREAD * self.interval
        loop = asyncio.get_running_loop()
        started = loop.time()

        running: set[asyncio.Task[None]] = set()
        order = sorted((offset_in_interval(b["metadata"]) * spread, key_of(b)) for b in servers)
        try:
            for point, key in order:
                if (wait := started + point - loop.time()) > 0:
                    await asyncio.sleep(wait)
                task = loop.create_task(self._observe_one(key, sem))
                running.add(task)
                task.add_done_callback(running.discard)
            if running:
                await asyncio.wait(set(running), timeout=max(0.0, started + self.interval - loop.time()))
        except asyncio.CancelledError:  # the operator stops: so do the observations this tick started
            for task in list(running):
                task.cancel()
            raise

    async def _observe_one(self, key: Key, sem: asyncio.Semaphore) -> None:
        """Observe server ``key`` now in its worker, unless its worker is busy or its view was refused as stale."""
        mem = self.memories.get(key)  # the newest view at its point; gone if deleted meanwhile
        if mem is None or mem.body is None or mem.busy:
            return
        if mem.stale_rv is not None and mem.stale_rv == mem.body["metadata"].get("resourceVersion"):
            return
        mem.stale_rv = None
        mem.observation = asyncio.current_task()
        async with sem, mem.lock:
            if mem.body is None or self.memories.get(key) is not mem:
                return
            try:
                await self.observe(mem.body, dt.datetime.now(dt.UTC))
            except Exception:  # one server's failure must not stop the others
                log.exception("observing %s/%s failed", *key)

    def wake(self, key: Key) -> None:
        """Observe server ``key`` now, off the tick (a feature asked something of it: a tuning's hold, trial or
        release); nothing when it is unknown or its worker is busy (its next tick decides)."""
        mem = self.memories.get(key)
        if mem is None or mem.body is None or mem.busy:
            return
        if self._slots is None:
            self._slots = asyncio.Semaphore(CONCURRENCY)
        task = asyncio.get_running_loop().create_task(self._observe_one(key, self._slots),
                                                      name=f"observe {key[0]}/{key[1]}")
        self._woken.add(task)
        task.add_done_callback(self._woken.discard)

    def tuning_event(self, event_type: str | None, body: dict[str, Any]) -> None:
        """A watch event of an SGLangTuning: what it asks of its server recorded (:class:`TuningRequests`), and that
        server woken (:meth:`wake`)."""
        key = self.tunings.apply(event_type, body)
        if key is not None:
            self.wake(key)

    async def server_view(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The newest view of SGLangServer ``namespace/name``: the watched one, else one GET (not tracked yet)."""
        mem = self.memories.get((namespace, name))
        if mem is not None and mem.body is not None:
            return mem.body
        return await kube.get_sglangserver(namespace, name)

    async def instance_pods(self, namespace: str, instance: str) -> list[dict[str, Any]]:
        """The managed pods of ``app.kubernetes.io/instance: instance`` (a server or a Shadow trial), from the
        watched pod cache."""
        return await self.pods.pods(namespace, instance)

    async def resync(self) -> None:
        """A full LIST of SGLangServers (the watched namespaces, or clusterwide) and of the managed pods of every
        namespace the pod cache holds: a server or pod deleted while the watch was away (kopf re-lists after a
        410 Gone without DELETED events) is forgotten, its series leave ``/metrics``. Failures are logged; the
        next resync tries again."""
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


def _revision_of(pod: Mapping[str, Any]) -> str | None:
    """A pod's ``sglang-operator.io/revision`` label."""
    return ((pod.get("metadata") or {}).get("labels") or {}).get(builders.REVISION_LABEL)


def same_spec(applied: Any, spec: Any) -> bool:
    """Whether the spec ``applied`` (a ledger record's) is ``spec`` (the object's), ``replicas`` aside (scaling is
    the user's, not the revision's; a default probe prompt, empty or an older object's copy of the built-in text, is
    no difference)."""
    if not isinstance(applied, Mapping) or not isinstance(spec, Mapping):
        return False
    a, b = without_default_prompt(applied), without_default_prompt(spec)
    return {k: v for k, v in a.items() if k != "replicas"} == {k: v for k, v in b.items() if k != "replicas"}
