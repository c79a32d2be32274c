"""Applying an SGLangServer's children (glue shared by the reconcile handler and the observer).

The Deployment goes first and the Service (then the PodMonitor, :mod:`sglang_operator.io.discovery`)
only after it was accepted, so an object the API server refuses
(e.g. a label value or env entry it finds invalid) leaves both children as they were. A multi-node server's
workload is a LeaderWorkerSet; when the cluster does not serve that API, :class:`LeaderWorkerSetMissing` is raised
and nothing is applied. A failed apply is a
:class:`ChildApplyError` whose :class:`ApplyFailure` says whether the spec is at fault (the caller reports
``SpecValid=False``) or not (``Degraded``, and a retry): never a silent retry loop.

Before a Recreate replaces pods (an update or a rollback), :func:`drain` waits until the old pods run no
request or ``spec.strategy.drainSeconds`` are up; :data:`DRAINING` names the servers being drained so the
sampler sends them no probe meanwhile.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sglang_operator import builders
from sglang_operator.builders.leaderworkerset import CRD_NAME as LWS_CRD
from sglang_operator.builders.leaderworkerset import KIND as LWS_KIND
from sglang_operator.builders.leaderworkerset import VERSION as LWS_VERSION
from sglang_operator.builders.monitoring import pod_monitor
from sglang_operator.decisions.groups import lws_missing_message
from sglang_operator.io import kube
from sglang_operator.io.discovery import POD_MONITORS, PodMonitorMode


async def apply_children(rendered: builders.Rendered, owner: Mapping[str, Any]) -> None:
    """Server-side apply the Deployment, then the Service, then (per ``--pod-monitors``) the PodMonitor, each
    owned by ``owner`` (an SGLangServer dict).

    Raises :class:`ChildApplyError` (from the API server's ``lightkube.ApiError`` or a transport error); nothing
    after the failing child is applied. In
    ``auto`` mode a PodMonitor answered with 404 (its CRD just vanished) is skipped and discovered again later.
    """
    for child in (rendered.workload, rendered.service):
        try:
            await kube.apply(builders.adopt(child, owner))
        except Exception as err:
            if await lws_missing(child, err):
                raise LeaderWorkerSetMissing(lws_missing_message()) from err
            raise ChildApplyError(apply_failure(str(child.get("kind")), err)) from err
    try:
        await apply_pod_monitor(rendered, owner)
    except Exception as err:
        raise ChildApplyError(apply_failure("PodMonitor", err)) from err


def contains(live: Any, rendered: Any) -> bool:
    """Whether ``live`` (an object as the API server returns it) already holds every field of ``rendered`` with the
    same value: dicts by key (the server's defaults and other managers' fields are ignored), lists element by element
    (same length), scalars by equality (so a quantity the server rewrote, e.g. ``0.5`` → ``500m``, counts as a
    change and is applied: the safe side)."""
    if isinstance(rendered, Mapping):
        return isinstance(live, Mapping) and all(k in live and contains(live[k], v) for k, v in rendered.items())
    if isinstance(rendered, list):
        return isinstance(live, list) and len(live) == len(rendered) and all(
            contains(a, b) for a, b in zip(live, rendered, strict=True))
    return bool(live == rendered)


async def up_to_date(rendered: builders.Rendered, owner: Mapping[str, Any]) -> bool:
    """Whether every child of ``rendered`` exists with every field the operator renders (owner references
    included): then applying it would change nothing, and a resume writes nothing. Any read failure says False."""
    children = [rendered.workload, rendered.service]
    if await POD_MONITORS.wanted():
        meta = rendered.deployment["metadata"]
        children.append(pod_monitor(meta["name"], meta["namespace"], str(rendered.command.version),
                                    POD_MONITORS.labels))
    try:
        for child in children:
            want = builders.adopt(dict(child), owner)
            meta = want["metadata"]
            live = await kube.get_object(str(want["kind"]), str(meta["namespace"]), str(meta["name"]))
            if live is None or not contains(live, want):
                return False
    except Exception as exc:  # unreadable: apply, as before
        log.debug("children of %s not compared: %s", owner["metadata"].get("name"), exc)
        return False
    return True


async def apply_pod_monitor(rendered: builders.Rendered, owner: Mapping[str, Any]) -> None:
    """Server-side apply the PodMonitor of ``owner`` when :data:`POD_MONITORS` wants one."""
    from lightkube import ApiError

    if not await POD_MONITORS.wanted():
        return
    meta = rendered.deployment["metadata"]
    monitor = pod_monitor(meta["name"], meta["namespace"], str(rendered.command.version), POD_MONITORS.labels)
    try:
        await kube.apply(builders.adopt(monitor, owner))
    except ApiError as err:
        if err.status.code != 404 or POD_MONITORS.mode is not PodMonitorMode.AUTO:
            raise
        POD_MONITORS.forget()


SCHEMA_REFUSALS = ("field not declared in schema", "failed to create typed patch object", "unknown field")
"""Texts of a server-side apply the API server cannot type against the object's schema: it answers HTTP 500
(``k8s.io/apiserver`` fieldmanager) though the request, not the server, is at fault."""


@dataclass(frozen=True)
class ApplyFailure:
    """Why a child could not be applied.

    ``kind``: the child (Deployment, Service, PodMonitor); ``code``: the API server's HTTP status (None for a
    transport error); ``message``: the API server's own message; ``spec_fault``: the spec is at fault (400, 422,
    or a 500 naming a field the schema lacks) and retrying cannot help.
    """

    kind: str
    code: int | None
    message: str
    spec_fault: bool

    def describe(self) -> str:
        """One line for a condition and an event."""
        if self.spec_fault:
            return f"the API server refused the {self.kind} (HTTP {self.code}): {self.message}"
        status = f"HTTP {self.code}" if self.code is not None else "no answer"
        return f"applying the {self.kind} failed ({status}): {self.message}; retrying"


APPLY_FAILURES: dict[tuple[str, str], str] = {}
"""``(namespace, name)`` → the describe() of the last failed apply that was not the spec's fault, until an apply
succeeds: one Warning event per distinct failure, and what the observer may show as Degraded ApplyFailed
(its pod-health Degraded would otherwise replace it while the previous revision's pods serve)."""


class ChildApplyError(Exception):
    """A child could not be applied; ``failure`` says why."""

    def __init__(self, failure: ApplyFailure) -> None:
        super().__init__(failure.describe())
        self.failure = failure


def apply_failure(kind: str, err: Exception) -> ApplyFailure:
    """Classify ``err`` raised while applying child ``kind``."""
    from lightkube import ApiError

    if isinstance(err, ApiError):
        code = err.status.code
        message = err.status.message or str(err)
        spec_fault = code in (400, 422) or (code == 500 and any(t in message for t in SCHEMA_REFUSALS))
        return ApplyFailure(kind, code, message, spec_fault)
    return ApplyFailure(kind, None, f"{type(err).__name__}: {err}", False)


class LeaderWorkerSetMissing(Exception):
    """A multi-node server's LeaderWorkerSet could not be applied: the cluster does not serve that API. Nothing
    was applied; the caller writes :func:`sglang_operator.decisions.groups.lws_missing` and the observer applies
    once the API appears (:func:`sglang_operator.control.multinode.apply_when_served`)."""


async def lws_missing(child: Mapping[str, Any], err: Exception) -> bool:
    """Whether ``err`` (raised applying ``child``) means the LeaderWorkerSet API is not served: a 404 for a
    LeaderWorkerSet (the API server answers an unknown API path with a plain-text 404, which lightkube raises as the
    HTTP client's status error, not as ``ApiError``), confirmed by its CRD (a missing namespace is not that)."""
    from lightkube import ApiError

    if child.get("kind") != LWS_KIND:
        return False
    response = getattr(err, "response", None)
    code = err.status.code if isinstance(err, ApiError) else getattr(response, "status_code", None)
    return code == 404 and not await kube.crd_served(LWS_CRD, LWS_VERSION)


def refused_by_api_server(err: Exception) -> str | None:
    """The message of a refusal that is the spec's fault (a :class:`ChildApplyError` or an ``ApiError``), else
    None (kept for callers of the earlier API)."""
    failure = err.failure if isinstance(err, ChildApplyError) else apply_failure("child object", err)
    return failure.describe() if failure.spec_fault else None


# --- drain before a Recreate ----------------------------------------------------------------------------------

DRAINING: set[tuple[str, str]] = set()
"""``(namespace, name)`` of the servers whose old pods are being drained: probes must not be sent to them (the
sampler checks :func:`draining`)."""
RUNNING_METRIC = "sglang:num_running_reqs"
"""Requests a server is running (gauge; ``python/sglang/srt/metrics/collector.py`` 0.5.10,
``observability/metrics_collector.py`` 0.5.2x). The scheduler refreshes it at decode-log intervals only (and every
30 s when idle, ``scheduler.py`` ``check_memory``), so it reads 1 for up to 30 s after the last request ended."""
STARTED_METRIC = "sglang:time_to_first_token_seconds_count"
FINISHED_METRIC = "sglang:e2e_request_latency_seconds_count"
"""Requests that streamed their first token / that finished or were aborted: the tokenizer manager observes them
as it happens (``TokenizerMetricsCollector``), so their difference is the live count of requests in flight, which
:func:`running_requests` prefers to the refreshed-now-and-then gauge."""
log = logging.getLogger("sglang_operator.control.children")


def draining(namespace: str, name: str) -> bool:
    """Whether SGLangServer ``namespace/name`` is being drained (send it no probe)."""
    return (namespace, name) in DRAINING


@dataclass(frozen=True)
class DrainResult:
    """Outcome of :func:`drain`: ``idle`` when every pod reported 0 running requests (or could not be read: a
    pod that does not answer runs nothing worth waiting for), ``seconds`` waited, ``running`` the last count."""

    idle: bool
    seconds: float
    running: int


class _RunningRequests:
    """A /metrics body consumer (prometheus_client parser): requests in flight, :data:`STARTED_METRIC` minus
    :data:`FINISHED_METRIC` summed over their series, or the :data:`RUNNING_METRIC` gauge when those are absent."""

    def __init__(self) -> None:
        self.body = bytearray()

    def feed(self, chunk: bytes) -> None:
        self.body.extend(chunk)

    def finish(self) -> int:
        from prometheus_client.parser import text_string_to_metric_families

        totals: dict[str, float] = {}
        for family in text_string_to_metric_families(self.body.decode("utf-8", "replace")):
            for sample in family.samples:
                if sample.name in (RUNNING_METRIC, STARTED_METRIC, FINISHED_METRIC):
                    totals[sample.name] = totals.get(sample.name, 0.0) + sample.value
        if STARTED_METRIC in totals and FINISHED_METRIC in totals:
            return max(int(totals[STARTED_METRIC] - totals[FINISHED_METRIC]), 0)
        return int(totals.get(RUNNING_METRIC, 0.0))


async def running_requests(urls: Sequence[str], http: Any = None, timeout: float = 3.0) -> int:
    """The requests running on the servers at ``urls`` (``http://IP:port``) by their ``/metrics``; a server
    that cannot be read counts 0. ``http``: a :class:`sglang_operator.io.sglang_http.SGLangHTTP`."""
    from sglang_operator.io.sglang_http import ScrapeError, SGLangHTTP

    client = http or SGLangHTTP(concurrency=8)
    try:
        async def one(url: str) -> int:
            try:
                count: int = await client.get(f"{url}/metrics", _RunningRequests(), timeout=timeout)
                return count
            except ScrapeError as err:
                log.debug("drain: %s not read: %s", url, err)
                return 0
        return sum(await asyncio.gather(*(one(u) for u in urls)))
    finally:
        if http is None:
            await client.aclose()


async def drain(namespace: str, name: str, urls: Sequence[str], seconds: float, poll: float = 1.0,
                http: Any = None) -> DrainResult:
    """Wait until the old pods at ``urls`` run no request, or ``seconds`` are up; meanwhile
    ``(namespace, name)`` is in :data:`DRAINING` (no probes). The reconcile handler calls it before applying a
    new revision with strategy Recreate; the rollback path must call it too before it applies the earlier
    revision."""
    started = time.monotonic()
    DRAINING.add((namespace, name))
    try:
        running = 0
        while True:
            running = await running_requests(urls, http)
            waited = time.monotonic() - started
            if running == 0:
                return DrainResult(True, waited, 0)
            if waited >= seconds:
                return DrainResult(False, waited, running)
            await asyncio.sleep(min(poll, max(seconds - waited, 0.0)))
    finally:
        DRAINING.discard((namespace, name))


def _ready(pod: Mapping[str, Any]) -> bool:
    return any(c.get("type") == "Ready" and c.get("status") == "True"
               for c in (pod.get("status") or {}).get("conditions") or [])


async def drain_old_pods(body: Mapping[str, Any], spec: Any, new_revision: str) -> DrainResult | None:
    """Before a Recreate replaces the running revision's pods with ``new_revision``: :func:`drain` them (at most
    ``spec.strategy.drainSeconds``), then post ``Drained`` (Normal) or ``DrainTimedOut`` (Warning). None when there
    is nothing to drain (RollingUpdate, drainSeconds 0, no running revision, the same revision, no Ready pod).

    ``body``: the SGLangServer as stored (its ``status.revision`` and port are what runs); ``spec``: the parsed spec
    being applied. The reconcile handler calls it; the rollback path must call it too before it applies an earlier
    revision (``control.restore.apply_revision``)."""
    from sglang_operator.api.spec import StrategyType
    from sglang_operator.io.sglang_http import base_url

    strategy = spec.strategy
    old = (body.get("status") or {}).get("revision")
    if strategy.type is not StrategyType.RECREATE or strategy.drain_seconds <= 0 or not old or old == new_revision:
        return None
    meta = body.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
    port = spec.port
    for record in (body.get("status") or {}).get("revisions") or []:  # the running revision's own port
        if record.get("revision") == old and isinstance((record.get("spec") or {}).get("port"), int):
            port = record["spec"]["port"]
    pods = await kube.list_pods(namespace, builders.selector_labels(name))
    urls = [base_url(p["status"]["podIP"], port) for p in pods
            if _ready(p) and (p.get("status") or {}).get("podIP")
            and p.get("metadata", {}).get("labels", {}).get(builders.REVISION_LABEL) == old]
    if not urls:
        return None
    result = await drain(namespace, name, urls, strategy.drain_seconds)
    if result.idle:
        await kube.post_event(body, "Normal", "Drained", f"revision {old}: no running request after "
                              f"{result.seconds:.1f} s; replacing its pods with revision {new_revision}")
    else:
        await kube.post_event(body, "Warning", "DrainTimedOut",
                              f"revision {old}: {result.running} requests still running after "
                              f"spec.strategy.drainSeconds ({strategy.drain_seconds} s); replacing its pods with "
                              f"revision {new_revision} anyway")
    log.info("%s/%s: drained revision %s before replacing it: %s", namespace, name, old, result)
    return result
