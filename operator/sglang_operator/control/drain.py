"""The drain before a Recreate replaces a server's pods (an update or a rollback): wait until the old pods run no
request, or ``spec.strategy.drainSeconds`` are up, reading their ``/metrics``; meanwhile the server's memory
(:class:`sglang_operator.control.memory.ServerMemory`) says it is draining, so the sampler sends it no probe.
It runs in that server's worker only (the reconcile handler, or the rollback's job), never in the observer's tick.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from sglang_operator import builders
from sglang_operator.api.server import parse_status
from sglang_operator.api.spec import StrategyType
from sglang_operator.control.memory import ServerMemory
from sglang_operator.decisions.pods import is_ready
from sglang_operator.io import kube
from sglang_operator.io.sglang_http import ScrapeError, SGLangHTTP, base_url

RUNNING_METRIC = "sglang:num_running_reqs"
"""Requests a server is running (gauge; ``python/sglang/srt/metrics/collector.py`` 0.5.10,
``observability/metrics_collector.py`` 0.5.2x). The scheduler refreshes it at decode-log intervals only (and every
30 s when idle, ``scheduler.py`` ``check_memory``), so it reads 1 for up to 30 s after the last request ended."""
STARTED_METRIC = "sglang:time_to_first_token_seconds_count"
FINISHED_METRIC = "sglang:e2e_request_latency_seconds_count"
"""Requests that streamed their first token / that finished or were aborted: the tokenizer manager observes them
as it happens (``TokenizerMetricsCollector``), so their difference is the live count of requests in flight, which
:func:`running_requests` prefers to the refreshed-now-and-then gauge."""
log = logging.getLogger("sglang_operator.control.drain")


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


async def drain(urls: Sequence[str], seconds: float, poll: float = 1.0, http: Any = None,
                memory: ServerMemory | None = None) -> DrainResult:
    """Wait until the old pods at ``urls`` run no request, or ``seconds`` are up; meanwhile ``memory`` (the server's)
    says it is draining, so the sampler sends it no probe. Runs in the server's own worker (the reconcile handler, or
    the rollback's job): it holds no other server."""
    started = time.monotonic()
    with memory.draining_pods() if memory is not None else contextlib.nullcontext():
        running = 0
        while True:
            running = await running_requests(urls, http)
            waited = time.monotonic() - started
            if running == 0:
                return DrainResult(True, waited, 0)
            if waited >= seconds:
                return DrainResult(False, waited, running)
            await asyncio.sleep(min(poll, max(seconds - waited, 0.0)))


async def drain_old_pods(body: Mapping[str, Any], spec: Any, new_revision: str,
                         memory: ServerMemory | None = None) -> DrainResult | None:
    """Before a Recreate replaces the running revision's pods with ``new_revision``: :func:`drain` them (at most
    ``spec.strategy.drainSeconds``), then post ``Drained`` (Normal) or ``DrainTimedOut`` (Warning). None when there
    is nothing to drain (RollingUpdate, drainSeconds 0, no running revision, the same revision, no Ready pod).

    ``body``: the SGLangServer as stored (its ``status.revision`` and port are what runs); ``spec``: the parsed spec
    being applied. The reconcile handler calls it; the rollback path must call it too before it applies an earlier
    revision (``control.restore.apply_revision``)."""
    strategy = spec.strategy
    status = parse_status(body)
    old = status.revision
    if strategy.type is not StrategyType.RECREATE or strategy.drain_seconds <= 0 or not old or old == new_revision:
        return None
    meta = body.get("metadata") or {}
    namespace, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
    port = spec.port
    record = status.record(old)  # the running revision's own port
    if record is not None and isinstance((record.spec or {}).get("port"), int):
        port = int((record.spec or {})["port"])
    pods = await kube.list_pods(namespace, builders.selector_labels(name))
    urls = [base_url(p["status"]["podIP"], port) for p in pods
            if is_ready(p) and (p.get("status") or {}).get("podIP")
            and p.get("metadata", {}).get("labels", {}).get(builders.REVISION_LABEL) == old]
    if not urls:
        return None
    result = await drain(urls, strategy.drain_seconds, memory=memory)
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
