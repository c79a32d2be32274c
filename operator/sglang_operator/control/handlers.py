"""kopf handlers for SGLangServer: thin glue between kopf, the builders, the pure status decisions and
the clients.

- ``reconcile`` (create / spec update / resume): parse and validate, render, drain the old pods when a
  Recreate replaces them (``spec.strategy.drainSeconds``), server-side apply the Deployment and Service (owned
  by the SGLangServer), write the render's status, post an event (``Created``; ``Updated`` only when the revision
  changes: a scale or a policy-only change posts none, nor a second ``RevisionRejected`` while the spec's rejected
  revision is held back). An invalid spec applies nothing and is
  reported as ``SpecValid=False`` with a Warning event; so is a child the API server refuses for the spec's
  sake; any other failure to apply is ``Degraded=True`` (reason ``ApplyFailed``) with a Warning event, and kopf
  retries. Every event comes from one source, ``sglang-operator`` (:func:`sglang_operator.io.kube.post_event`;
  kopf posts none, :mod:`sglang_operator.entry.runner`).
- ``track`` (every watch event) feeds :class:`sglang_operator.control.observer.Observer`, built and started in
  kopf's startup (held in kopf's ``memo``: nothing is built at import time) and stopped with the operator, which
  observes pods and SGLang for every server each :attr:`Config.status_interval` seconds. No timer or daemon is
  used for SGLangServers nor SGLangTunings, so no finalizer is put on them: deleting one never waits for the
  operator (the admitted SGLangTunings run in one worker, :mod:`sglang_operator.control.tunings`, started with the
  observer).
- Every write for one server runs in its worker (:class:`sglang_operator.control.memory.ServerMemory`'s lock): the
  reconcile handler takes it, and first cancels a rollback's job still draining or applying (the spec's revision
  wins over a rollback in flight unless it is rejected, :func:`sglang_operator.decisions.rollback.what_should_run`).
- ``child_event`` (watch of the operator's Deployments and Services): one deleted behind the operator's
  back is re-applied at the same revision.
- ``pod_event`` (watch of the managed pods) keeps the observer's pod cache current: the observer and the
  sampler never LIST pods per tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import gc
import logging
from dataclasses import dataclass, field
from typing import Any

import kopf

from sglang_operator import builders
from sglang_operator.api import GROUP, PLURAL, VERSION
from sglang_operator.api.base import truncate
from sglang_operator.api.rollback import same_spec
from sglang_operator.api.server import SpecError
from sglang_operator.api.view import ServerView
from sglang_operator.builders.labels import MANAGED_BY
from sglang_operator.control import failures, restore, server_status, tunings  # tunings: registers the tuning watch
from sglang_operator.control.apply import ApplyOptions, apply_placement, placement
from sglang_operator.control.children import ChildApplyError, LeaderWorkerSetMissing, up_to_date
from sglang_operator.control.memory import ServerMemory
from sglang_operator.control.observer import RESYNC_SECONDS, Observer
from sglang_operator.decisions import groups
from sglang_operator.decisions import status as status_decisions
from sglang_operator.decisions.conditions import condition, merge
from sglang_operator.decisions.sampling.limits import ProbeLimits, ScrapeLimits
from sglang_operator.decisions.tuning import hold as holds
from sglang_operator.decisions.tuning.queue import DEFAULT_LIMIT as DEFAULT_RUNNING_TUNINGS
from sglang_operator.decisions.tuning.trialload import TRIAL_REQUEST_RATE
from sglang_operator.decisions.tuning.trials import DURATION_CAP_SECONDS
from sglang_operator.io import kube
from sglang_operator.io.discovery import POD_MONITORS
from sglang_operator.io.trialstreams import TRIAL_STREAMS
from sglang_operator.process import telemetry
from sglang_operator.process.readiness import READINESS
from sglang_operator.sglang import args as sglang_args

RESOURCE = (GROUP, VERSION, PLURAL)
Logger = logging.Logger | logging.LoggerAdapter[Any]


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


STALE_RETRY_SECONDS = 1.0
"""Seconds before kopf calls the reconcile handler again when its status patch was refused as stale (409)."""


async def _write_status(view: ServerView, values: dict[str, Any], observer: Observer) -> None:
    """The handler's ONE status patch: what of ``values`` differs from the stored status, as a merge patch with the
    view's resourceVersion as precondition, written before the handler returns (inside the server's worker), not by
    kopf's patch after it. Refused as stale (the object changed since kopf read it: the observer's patch, another
    update): raises ``kopf.TemporaryError``, and kopf calls the handler again with the newer object; the stale
    decision is never written. The answer becomes the server's newest view (:meth:`Observer.answered`)."""
    patched, delta = await server_status.write_changed(view, values)
    if not delta:
        return
    if patched is None:
        raise kopf.TemporaryError("the object changed while it was reconciled: reconciled again from the newer one",
                                  delay=STALE_RETRY_SECONDS)
    observer.answered(patched)


async def _event(view: ServerView, type_: str, reason: str, message: str) -> None:
    await server_status.event(view.ref, type_, reason, message)


@dataclass(frozen=True)
class Config:
    """The operator's settings the handlers need (``sglang-operator run``, passed in kopf's ``memo`` as ``config``):
    ``status_interval`` seconds between two observations of a server; ``sample_interval``: replaces every server's
    ``spec.rollback.intervalSeconds`` (None: each its own); ``resync_seconds`` between two resyncs (0: never);
    ``namespaces`` watched (empty: clusterwide); ``scrape_limits`` and ``probe_limits``: the bounds on what is read
    from a pod (:mod:`sglang_operator.decisions.sampling.limits`); ``max_running_tunings``: SGLangTunings running at
    once (:mod:`sglang_operator.decisions.tuning.queue`)."""

    status_interval: float = 5.0
    sample_interval: float | None = None
    resync_seconds: float = RESYNC_SECONDS
    namespaces: tuple[str, ...] = ()
    scrape_limits: ScrapeLimits = field(default_factory=ScrapeLimits)
    probe_limits: ProbeLimits = field(default_factory=ProbeLimits)
    trial_streams: int = TRIAL_STREAMS
    """Tuning trials' streamed requests in flight at most, all trials together (``--trial-streams``)."""
    trial_request_rate: float = TRIAL_REQUEST_RATE
    """Requests per second one tuning trial may start at most, all its streams together (``--trial-request-rate``)."""
    max_running_tunings: int = DEFAULT_RUNNING_TUNINGS
    """SGLangTunings running at once, at most one per server (``--max-running-tunings``)."""
    in_place_hold_max_seconds: float = holds.MAX_SECONDS
    """Seconds an InPlace SGLangTuning may hold its server (``--in-place-hold-max-seconds``)."""
    max_tuning_duration_seconds: float = DURATION_CAP_SECONDS
    """Seconds a SGLangTuning may run at most, from its first trial, whatever its ``budget.maxDurationSeconds``
    (``--max-tuning-duration-seconds``)."""


def observer_of(memo: Any) -> Observer:
    """The operator's observer (kopf's ``memo.observer``, built by :func:`start_observer`)."""
    observer = getattr(memo, "observer", None)
    if not isinstance(observer, Observer):
        raise kopf.TemporaryError("the operator is starting: no observer yet", delay=1)
    return observer


async def _apply_failed(view: ServerView, message: str, logger: Logger, memory: ServerMemory,
                        reason: str = "ApplyFailed") -> None:
    """Degraded=True (``reason``: ApplyFailed, or ChildConflict when another owner holds a child's name) written now
    (kopf retries the handler); a Warning event and a log line only when the failure is new for this server
    (``memory.apply_failure``, shown by the observer too)."""
    conds = merge([c.dump() for c in view.status.conditions],
                  [condition("Degraded", "True", reason, truncate(message), view.generation, _now())])
    # with the view's resourceVersion: a stale view writes nothing (kopf retries the handler anyway)
    await server_status.patch(view, {"conditions": conds})
    if failures.handler_failed(memory, message, reason):
        await _event(view, "Warning", reason, message)
        logger.warning("%s", message)


@kopf.on.resume(*RESOURCE)
@kopf.on.create(*RESOURCE)
@kopf.on.update(*RESOURCE, field="spec")
async def reconcile(
    body: kopf.Body, meta: kopf.Meta, status: kopf.Status, reason: str, logger: Logger, memo: Any = None, **_: Any,
) -> None:
    """Render and apply the children of one SGLangServer; write status; post an event; in the server's worker
    (a rollback's job in flight is cancelled first). However it ends, the server counts as seen for ``/readyz``
    (:mod:`sglang_operator.process.readiness`)."""
    try:
        observer = observer_of(memo)
        memory = observer.memory(body)
        job = memory.job
        if job is not None and not job.done():  # the spec wins over a rollback in flight: it decides anew
            logger.info("a spec change cancels the rollback's apply under way")
            job.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await job
        async with memory.lock:
            observer.superseded(memory)  # the handler decides from the object: what a cancelled job applied is moot
            await _reconcile(ServerView.of(body), reason, logger, observer, memory)  # the one typed view
    finally:
        READINESS.seen(str(meta.get("uid")))


async def _unchanged_since_applied(view: ServerView, rendered: builders.Rendered) -> bool:
    """On resume: whether the spec is the one ``status.revision`` was applied from (replicas aside) while it now
    renders otherwise (the operator's defaults changed with an upgrade) and the children still exist: then nothing
    is applied, so an operator upgrade restarts no running pod; the new render applies at the next spec change."""
    status = view.status
    record = status.applied_record
    if record is None or rendered.revision == status.revision or not same_spec(record.spec, view.spec_data):
        return False
    try:
        for child in (rendered.workload, rendered.service):
            meta = child["metadata"]
            if await kube.get_object(str(child["kind"]), str(meta["namespace"]), str(meta["name"])) is None:
                return False
    except Exception:
        return False
    return True


async def _reconcile(view: ServerView, reason: str, logger: Logger, observer: Observer,
                     memory: ServerMemory) -> None:
    generation = view.generation
    status = view.status
    now = _now()
    before = view.status.revision  # the revision applied before this call
    logger.debug("reconcile (%s) of generation %s", reason, generation)
    try:
        server = view.server
        rendered = builders.render(server)
    except (SpecError, builders.InvalidSpec) as err:
        errors = err.messages if isinstance(err, SpecError) else err.errors
        await _write_status(view, status_decisions.invalid(status, errors, generation, now), observer)
        await _event(view, "Warning", "InvalidSpec", "; ".join(errors))
        logger.warning("invalid spec, nothing applied: %s", "; ".join(errors))
        telemetry.count_reconcile("invalid")
        return
    hold = holds.active(view.status, generation, holds.spec_hash(view.spec_data))
    if hold is not None:  # the tuning's trial runs (a resume, a scale): its end applies the stable one, with the scale
        logger.info("held by SGLangTuning %s (InPlace, trial %s): nothing applied; revision %s is applied again at "
                    "its end", hold.name, hold.trial, hold.stable_revision)
        telemetry.count_reconcile("applied")
        return
    if reason == kopf.Reason.RESUME and await _unchanged_since_applied(view, rendered):
        logger.info("revision %s runs; the spec renders as %s with this operator's defaults: applied at the next "
                    "spec change", view.status.revision, rendered.revision)
        telemetry.count_reconcile("applied")
        return
    noted = memory.spec_revision  # the spec's revision as last rendered (this process), before this change
    observer.rendered(memory, generation, rendered.revision)  # the observer does not render this spec again
    same_spec_revision = noted is not None and noted[1] == rendered.revision
    try:  # the spec's revision, unless the rollback rejected it: then the stable one (the spec is not edited)
        choice = await restore.target(view, rendered)
    except restore.NotInLedger as err:
        await _event(view, "Warning", "ApplyFailed", f"the spec's revision {rendered.revision} was rejected and "
                                                      f"the stable one cannot be restored: {err}")
        telemetry.count_reconcile("error")
        return
    spec_dict, held_back, for_canary = choice.spec, choice.reason, choice.canary
    rendered = choice.rendered  # the spec's own (its image as that revision runs or ran), or the stable one's
    try:
        write = reason != kopf.Reason.RESUME or not await up_to_date(rendered, view.ref)  # a restart writes nothing
        new = await apply_placement(view, [placement(view, rendered, spec_dict)], now, memory,
                                    ApplyOptions(write_children=write, warnings=rendered.warnings))
    except LeaderWorkerSetMissing as err:  # nothing applied; the observer applies once the API is served
        await _write_status(view, groups.lws_missing(status, rendered.warnings, generation, now), observer)
        await _event(view, "Warning", groups.LWS_MISSING, str(err))
        logger.warning("%s", err)
        telemetry.count_reconcile("refused")
        return
    except ChildApplyError as err:
        failure = err.failure
        if not failure.spec_fault:
            telemetry.count_reconcile("error")
            await _apply_failed(view, failure.describe(), logger, memory, failure.reason)
            raise kopf.TemporaryError(failure.describe(), delay=30) from None
        refusal = failure.describe()
        await _write_status(view, status_decisions.invalid(status, [refusal], generation, now), observer)
        await _event(view, "Warning", "InvalidSpec", refusal)
        logger.warning("%s", refusal)
        telemetry.count_reconcile("refused")
        return
    failures.handler_succeeded(memory)
    observer.handled(memory, generation, rendered.revision)  # until a watch view shows it
    logger.debug("applied revision %s", rendered.revision)
    await _write_status(view, new, observer)
    if held_back:
        logger.info("%s", held_back)
        if reason != kopf.Reason.RESUME and not (same_spec_revision and rendered.revision == before):
            if for_canary:  # not again for a scale or a policy change
                await _event(view, "Normal", "Updated", held_back)
            else:
                await _event(view, "Warning", "RevisionRejected", held_back)
        telemetry.count_reconcile("applied")
        return
    telemetry.count_reconcile("applied")
    if reason == kopf.Reason.RESUME or (reason != kopf.Reason.CREATE and rendered.revision == before):
        return  # a scale or a policy-only change: the same revision runs, nothing to announce
    verb = "Created" if reason == kopf.Reason.CREATE else "Updated"
    message = f"revision {rendered.revision}: {rendered.command.command_line}"
    await _event(view, "Normal", verb, message)
    for warning in rendered.warnings:
        await _event(view, "Warning", "SpecWarning", warning)


@kopf.on.event(*RESOURCE)
async def track(event: kopf.RawEvent, body: kopf.Body, memo: Any = None, **_: Any) -> None:
    """Keep the observer's view of every SGLangServer current (no finalizer needed)."""
    kind = event.get("type")
    observer_of(memo).track(None if kind is None else str(kind), dict(body))
    if event.get("type") == "DELETED" or body.get("metadata", {}).get("deletionTimestamp"):
        READINESS.forget(str(body.get("metadata", {}).get("uid")))


MANAGED_LABELS = {"app.kubernetes.io/managed-by": MANAGED_BY}
"""The label every object the operator creates carries (:func:`sglang_operator.builders.labels.common_labels`)."""
MANAGED_SELECTOR = ",".join(f"{k}={v}" for k, v in MANAGED_LABELS.items())
""":data:`MANAGED_LABELS` as a Kubernetes label selector: ``app.kubernetes.io/managed-by=sglang-operator``."""
DEPLOYMENTS = ("apps", "v1", "deployments")
SERVICES = ("", "v1", "services")
PODS = ("", "v1", "pods")
MANAGED_WATCHES = (DEPLOYMENTS, SERVICES, PODS)
"""The (group, version, plural) of every kopf watch of objects the operator manages (not SGLangServers: all of
them are the operator's). No LeaderWorkerSet is watched: the observer reads them (control/multinode.py)."""


def watch_only_managed(settings: kopf.OperatorSettings) -> None:
    """Make kopf's LIST and WATCH of :data:`MANAGED_WATCHES` select :data:`MANAGED_SELECTOR` server-side.

    The ``labels=`` filter of a kopf handler is evaluated client-side, after kopf has listed and watched every
    object of the resource in the cluster (or the watched namespaces) and kept per-object state for each. kopf's
    ``settings.watching.label_selectors`` (``kopf/_cogs/configs/configuration.py``, ``WatchingSettings``; read in
    kopf 1.45 by ``kopf/_cogs/clients/fetching.py`` ``fetch_objs`` and ``kopf/_cogs/clients/watching.py``
    ``watch_objs``, which both put the selectors matching a resource, joined by ``,``, into the ``labelSelector``
    query parameter) is sent to the API server, which then lists and streams only the managed objects. The
    handlers keep their ``labels=`` filter as well (it then always matches). Called by kopf's startup handler
    :func:`sglang_operator.entry.runner.configure`, before any watch starts."""
    for resource in MANAGED_WATCHES:
        settings.watching.label_selectors[resource] = MANAGED_SELECTOR


@kopf.on.event(*DEPLOYMENTS, labels=MANAGED_LABELS)
@kopf.on.event(*SERVICES, labels=MANAGED_LABELS)
async def child_event(event: kopf.RawEvent, body: kopf.Body, memo: Any = None, **_: Any) -> None:
    """A child deleted behind the operator's back is re-applied (same revision, Warning event)."""
    if event.get("type") == "DELETED":
        await observer_of(memo).child_deleted(dict(body))


@kopf.on.event(*PODS, labels=MANAGED_LABELS)
async def pod_event(event: kopf.RawEvent, body: kopf.Body, memo: Any = None, **_: Any) -> None:
    """Keep the observer's pod cache current (initial listing: event type None)."""
    kind = event.get("type")
    observer_of(memo).pod_event(None if kind is None else str(kind), dict(body))


def freeze_heap() -> None:
    """Move every object alive now (modules, the SGLang tables and parsers :func:`sglang_args.warm_up` built, kopf's
    registry) out of the garbage collector's reach (``gc.freeze``): they live as long as the process, and full
    collections scanning them paused the event loop (the figures: docs/architecture.md, "Under load")."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


GC_THRESHOLDS = (10_000, 10, 50)
"""``gc.set_threshold``: young collections every 10 000 allocations (CPython: 700) and a full one at most every 50
second-generation collections (10): full collections of the live heap are long and come rarely (docs/architecture.md,
"Under load")."""


@kopf.on.startup()
async def start_observer(memo: Any, **_: Any) -> None:
    """Build the SGLang parsers ahead of the first render, discover the PodMonitor API, build the observer from
    ``memo.config`` (:class:`Config`; defaults when absent) into ``memo.observer`` and start its loop; list the servers
    ``/readyz`` waits for
    (:meth:`sglang_operator.process.readiness.Readiness.start`)."""
    sglang_args.warm_up()
    await POD_MONITORS.wanted()  # auto: discovered once here, re-checked while absent
    config = getattr(memo, "config", None) or Config()
    memo.observer = Observer(config.status_interval, config.sample_interval, config.resync_seconds,
                             config.namespaces, scrape_limits=config.scrape_limits,
                             probe_limits=config.probe_limits, trial_streams=config.trial_streams,
                             trial_request_rate=getattr(config, "trial_request_rate", TRIAL_REQUEST_RATE),
                             hold_max_seconds=getattr(config, "in_place_hold_max_seconds", holds.MAX_SECONDS))
    freeze_heap()
    READINESS.start(kube.sglangserver_uids)
    memo.observer.start()
    tunings.start_tunings(memo, memo.observer)


@kopf.on.cleanup()
async def stop_observer(memo: Any, **_: Any) -> None:
    """Stop the tuning worker, the status observer loop and the servers' jobs (and the readiness re-check)."""
    await READINESS.stop()
    worker = tunings.worker_of(memo)
    if worker is not None:
        await worker.stop()
    observer = getattr(memo, "observer", None)
    if isinstance(observer, Observer):
        await observer.stop()


