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
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from sglang_operator import builders
from sglang_operator.api.spec import StrategyType
from sglang_operator.api.view import ServerView
from sglang_operator.control import server_status
from sglang_operator.control.memory import ServerMemory
from sglang_operator.decisions.pods import ready_with_ip
from sglang_operator.decisions.sampling.compute import requests_in_flight
from sglang_operator.decisions.sampling.parse import LineFilter
from sglang_operator.decisions.sampling.roles import DRAIN_ROLES, MetricRoles, roles_for
from sglang_operator.io import kube
from sglang_operator.io.owners import OWNERS
from sglang_operator.io.sglang_http import ScrapeError, SGLangHTTP, base_url
from sglang_operator.sglang.versions import SUPPORTED, SGLangVersionError, parse_version

log = logging.getLogger("sglang_operator.control.drain")


@dataclass(frozen=True)
class DrainResult:
    """Outcome of :func:`drain`: ``idle`` when every pod reported 0 running requests (or could not be read: a
    pod that does not answer runs nothing worth waiting for), ``seconds`` waited, ``running`` the last count."""

    idle: bool
    seconds: float
    running: int


async def running_requests(urls: Sequence[str], http: Any = None, timeout: float = 3.0,
                           roles: MetricRoles | None = None) -> int:
    """The requests running on the servers at ``urls`` (``http://IP:port``) by their ``/metrics``
    (:func:`sglang_operator.decisions.sampling.compute.requests_in_flight`, with the sampler's parser); a server
    that cannot be read counts 0. ``http``: a :class:`sglang_operator.io.sglang_http.SGLangHTTP`; ``roles``: the
    running release's :data:`~sglang_operator.decisions.sampling.roles.DRAIN_ROLES` (default: the newest release's
    table)."""
    client = http or SGLangHTTP(concurrency=8)
    wanted = roles or roles_for(max(SUPPORTED), DRAIN_ROLES)
    try:
        async def one(url: str) -> int:
            try:
                return requests_in_flight(await client.get(f"{url}/metrics", LineFilter(wanted), timeout=timeout))
            except ScrapeError as err:
                log.debug("drain: %s not read: %s", url, err)
                return 0
        return sum(await asyncio.gather(*(one(u) for u in urls)))
    finally:
        if http is None:
            await client.aclose()


async def drain(urls: Sequence[str], seconds: float, poll: float = 1.0, http: Any = None,
                memory: ServerMemory | None = None, roles: MetricRoles | None = None) -> DrainResult:
    """Wait until the old pods at ``urls`` run no request, or ``seconds`` are up; meanwhile ``memory`` (the server's)
    says it is draining, so the sampler sends it no probe. Runs in the server's own worker (the reconcile handler, or
    the rollback's job): it holds no other server."""
    started = time.monotonic()
    with memory.draining_pods() if memory is not None else contextlib.nullcontext():
        running = 0
        while True:
            running = await running_requests(urls, http, roles=roles)
            waited = time.monotonic() - started
            if running == 0:
                return DrainResult(True, waited, 0)
            if waited >= seconds:
                return DrainResult(False, waited, running)
            await asyncio.sleep(min(poll, max(seconds - waited, 0.0)))


async def drain_old_pods(view: ServerView, spec: Any, new_revision: str,
                         memory: ServerMemory | None = None) -> DrainResult | None:
    """Before a Recreate replaces the running revision's pods with ``new_revision``: :func:`drain` them (at most
    ``spec.strategy.drainSeconds``), then post ``Drained`` (Normal) or ``DrainTimedOut`` (Warning). None when there
    is nothing to drain (RollingUpdate, drainSeconds 0, no running revision, the same revision, no Ready pod).

    ``view``: the SGLangServer as stored (its ``status.revision`` and port are what runs); ``spec``: the parsed spec
    being applied. The reconcile handler calls it; the rollback path must call it too before it applies an earlier
    revision (``control.restore.apply_revision``)."""
    strategy = spec.strategy
    status = view.status
    old = status.revision
    if strategy.type is not StrategyType.RECREATE or strategy.drain_seconds <= 0 or not old or old == new_revision:
        return None
    namespace, name = view.namespace, view.name
    port = spec.port
    record = status.record(old)  # the running revision's own port
    if record is not None and isinstance((record.spec or {}).get("port"), int):
        port = int((record.spec or {})["port"])
    pods = await OWNERS.owned(namespace, await kube.list_pods(namespace, builders.selector_labels(name)),
                              (view.uid,))  # never a stranger carrying the server's labels
    urls = [base_url(p["status"]["podIP"], port) for p in ready_with_ip(pods)
            if p.get("metadata", {}).get("labels", {}).get(builders.REVISION_LABEL) == old]
    if not urls:
        return None
    try:
        roles = roles_for(parse_version(status.sglang_version or ""), DRAIN_ROLES)
    except SGLangVersionError:
        roles = None  # the newest release's names
    result = await drain(urls, strategy.drain_seconds, memory=memory, roles=roles)
    if result.idle:
        await server_status.event(view.ref, "Normal", "Drained", f"revision {old}: no running request after "
                                  f"{result.seconds:.1f} s; replacing its pods with revision {new_revision}")
    else:
        await server_status.event(view.ref, "Warning", "DrainTimedOut",
                                  f"revision {old}: {result.running} requests still running after "
                                  f"spec.strategy.drainSeconds ({strategy.drain_seconds} s); replacing its pods with "
                                  f"revision {new_revision} anyway")
    log.info("%s/%s: drained revision %s before replacing it: %s", namespace, name, old, result)
    return result
