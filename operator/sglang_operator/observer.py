"""The status observer: one loop that, every ``interval`` seconds, observes every SGLangServer's pods and,
once Ready, SGLang itself, and writes what changed into ``status``.

Per server and tick: pods → Ready / Progressing / Degraded (:func:`reconcile.pods.pod_health`); when Ready,
``/server_info`` once per revision → ``status.effective`` and ``SettingsDiffer``
(:mod:`reconcile.effective`); ``/metrics`` → ``acceptLength``, ``acceptRate``, ``tokensPerSecond`` (tok/s).
Status is patched with the object's ``resourceVersion`` as precondition, so a patch computed from a stale
view is refused (409) and retried next tick rather than overwriting the reconcile handler's conditions.
The reconcile handler's own status patch (kopf's merge patch) may still replace the conditions list; every
condition the observer owns, SettingsDiffer included, is recomputed each tick, so that heals within a tick.
Replicas, port and requested settings come from the spec last applied (the ledger), not a refused update.
Scrape failures are counted (``sglang_operator_scrape_errors_total``) and logged; one server's failure never
stops the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import logging
from typing import Any

from sglang_operator import builders
from sglang_operator.api.server import SpecError, parse, parse_spec
from sglang_operator.builders.labels import APP_NAME, MANAGED_BY
from sglang_operator.children import apply_children
from sglang_operator.clients import kube, sglang_http
from sglang_operator.clients.sglang_http import ScrapeError, fetch_server_info, scrape_metrics
from sglang_operator.reconcile import effective as eff
from sglang_operator.reconcile import status as st
from sglang_operator.reconcile.pods import pod_health
from sglang_operator.sglang.versions import dialect, parse_version

log = logging.getLogger("sglang_operator.observer")
CONCURRENCY = 8
SPREAD = 0.8
"""Fraction of the interval over which one tick's observations are spread."""
INSTANCE_LABEL = "app.kubernetes.io/instance"
MANAGED = {"app.kubernetes.io/name": APP_NAME, "app.kubernetes.io/managed-by": MANAGED_BY}


def requested_settings(server_spec: Any, num_draft_tokens: int | None) -> dict[str, Any]:
    """What the spec asks SGLang for, keyed as :data:`reconcile.effective.FIELDS` (unset keys left out)."""
    out: dict[str, Any] = {}
    spec_dec = server_spec.speculative
    if spec_dec is not None:
        out |= {"algorithm": spec_dec.algorithm.value, "numSteps": spec_dec.num_steps,
                "eagleTopk": spec_dec.eagle_topk, "numDraftTokens": num_draft_tokens}
    mem = server_spec.memory
    for key, value in (("maxRunningRequests", mem.max_running_requests),
                       ("memFractionStatic", mem.mem_fraction_static), ("contextLength", mem.context_length)):
        if value is not None:
            out[key] = value
    return out


async def read_sglang(
    base_url: str, version: str, status: dict[str, Any], server_spec: Any, namespace: str = "default"
) -> tuple[dict[str, Any] | None, list[str] | None, dict[str, float | None]]:
    """(new effective settings or None, differences or None, metrics) of a Ready server.

    ``/server_info`` is read once per revision; the differences are recomputed every call from the
    effective settings (new or already in status). Failures are logged and counted, never raised.
    """
    effective = None
    if not status.get("effective"):
        try:
            path = dialect(parse_version(version)).server_info_path
            ref = server_spec.api_key_secret_ref  # SGLang's --api-key guards /server_info (not /metrics)
            api_key = await kube.secret_value(namespace, ref.name, ref.key) if ref is not None else None
            effective = eff.effective_settings(await fetch_server_info(base_url, path, api_key=api_key))
        except ScrapeError as err:
            log.info("server info not read yet: %s", err)
    known = effective or status.get("effective")
    diffs = None
    if known:
        diffs = eff.differences(requested_settings(server_spec, status.get("numDraftTokens")), known)
    metrics: dict[str, float | None] = {}
    try:
        sample = await scrape_metrics(base_url)
        if sample.gen_throughput:  # an idle server reports 0 tok/s: keep the last measured figures
            metrics = {"acceptLength": _round(sample.accept_length, 3), "acceptRate": _round(sample.accept_rate, 3),
                       "tokensPerSecond": _round(sample.gen_throughput, 1)}
    except ScrapeError as err:
        log.info("metrics not scraped from %s: %s", base_url, err)
    return effective, diffs, metrics


def applied_spec(body: dict[str, Any]) -> Any:
    """The spec last applied (the ledger record of ``status.revision``), else the object's spec; parsed.

    After a refused update the object's spec is not what runs: replicas, port and requested settings must
    come from what was applied. Raises :class:`SpecError` when neither parses.
    """
    status = body.get("status") or {}
    record = next((r for r in status.get("revisions") or [] if r.get("revision") == status.get("revision")), None)
    if record and record.get("spec"):
        try:
            return parse_spec(record["spec"])
        except SpecError:
            pass
    return parse_spec(body.get("spec") or {})


def base_url(pod_ip: str, port: int) -> str:
    """``http://IP:port`` with IPv6 addresses in brackets."""
    return f"http://[{pod_ip}]:{port}" if ":" in pod_ip else f"http://{pod_ip}:{port}"


def _round(value: float | None, digits: int) -> float | None:
    return None if value is None else round(value, digits)


def _degraded(conditions: list[dict[str, Any]]) -> dict[str, Any]:
    return next((c for c in conditions if c.get("type") == "Degraded"), {})


async def restore_children(namespace: str, name: str, owner_uid: str | None, missing: str) -> None:
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
    if rendered.revision != (body.get("status") or {}).get("revision"):
        return
    await apply_children(rendered, body)
    log.warning("%s/%s: %s deleted; re-applied revision %s", namespace, name, missing, rendered.revision)
    await kube.post_event(body, "Warning", "ChildRecreated", f"{missing} was deleted; re-applied revision "
                          f"{rendered.revision}")


async def observe(body: dict[str, Any], now: dt.datetime, pods: list[dict[str, Any]] | None = None) -> None:
    """Observe one SGLangServer ``body`` and patch its status (nothing when nothing changed).

    ``pods``: its pods when the caller listed them already (one LIST per namespace and tick), else listed here.
    """
    meta, status = body.get("metadata", {}), body.get("status") or {}
    revision = status.get("revision")
    if not revision or meta.get("deletionTimestamp"):
        return
    try:
        server = parse(body)
        spec = applied_spec(body)
    except SpecError:
        return
    generation = int(meta.get("generation") or 0)
    if pods is None:
        pods = await kube.list_pods(server.namespace, builders.selector_labels(server.name))
    health = pod_health(pods, spec.replicas, revision, generation, now)
    effective = diffs = None
    metrics: dict[str, float | None] = {}
    if health.phase == "Ready" and health.pod_ips:
        effective, diffs, metrics = await read_sglang(base_url(health.pod_ips[0], spec.port),
                                                      status.get("sglangVersion") or "", status, spec,
                                                      server.namespace)
    new = st.observed(status, health, generation, now, effective, diffs, metrics)
    delta = st.changed(status, new)
    if not delta:
        return
    if not await kube.patch_status(server.namespace, server.name, meta.get("resourceVersion"), delta):
        return  # stale view: the next tick sees the new object
    old_d, new_d = _degraded(status.get("conditions") or []), _degraded(new["conditions"])
    if new_d.get("status") == "True" and old_d.get("reason") != new_d.get("reason"):
        await kube.post_event(body, "Warning", new_d["reason"], new_d.get("message", ""))
    if diffs:
        await kube.post_event(body, "Warning", "SettingsDiffer", "; ".join(diffs))


class Observer:
    """Tracks SGLangServers (fed by a kopf event handler) and observes them all every ``interval`` s."""

    def __init__(self, interval: float) -> None:
        self.interval = interval
        self.servers: dict[tuple[str, str], dict[str, Any]] = {}
        self._task: asyncio.Task[None] | None = None

    def track(self, event_type: str, body: dict[str, Any]) -> None:
        """Record the latest ``body`` of a watch event (``DELETED`` forgets it)."""
        meta = body.get("metadata", {})
        key = (str(meta.get("namespace")), str(meta.get("name")))
        if event_type == "DELETED":
            self.servers.pop(key, None)
        else:
            self.servers[key] = body

    async def child_deleted(self, child: dict[str, Any]) -> None:
        """A managed Deployment or Service was deleted: re-apply it if its SGLangServer still wants it."""
        meta = child.get("metadata", {})
        owner = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
        ns = str(meta.get("namespace"))
        if owner is None or (ns, owner.get("name")) not in self.servers:
            return
        try:
            await restore_children(ns, str(owner["name"]), owner.get("uid"), str(child.get("kind")))
        except Exception:
            log.exception("re-applying the children of %s/%s failed", ns, owner.get("name"))

    def start(self) -> None:
        """Start the loop on the running event loop."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name="sglang-observer")

    async def stop(self) -> None:
        """Cancel the loop and wait for it; close the scrape client."""
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await sglang_http.close()

    async def tick(self) -> None:
        """Observe every tracked server once, spread over :data:`SPREAD` of the interval (at most
        :data:`CONCURRENCY` at a time)."""
        sem = asyncio.Semaphore(CONCURRENCY)
        servers = list(self.servers.values())
        by_ns: dict[str, dict[str, list[dict[str, Any]]]] = {}
        for ns in {b["metadata"].get("namespace") or "default" for b in servers}:
            try:
                pods = await kube.list_pods(ns, MANAGED)
            except Exception:
                log.exception("listing pods in %s failed", ns)
                continue
            grouped = by_ns.setdefault(ns, {})
            for pod in pods:
                grouped.setdefault(pod["metadata"].get("labels", {}).get(INSTANCE_LABEL, ""), []).append(pod)

        # spread the observations over most of the interval: no burst of status writes at the tick's start
        spread = SPREAD * self.interval / max(len(servers), 1)

        async def one(i: int, body: dict[str, Any]) -> None:
            meta = body["metadata"]
            grouped = by_ns.get(meta.get("namespace") or "default")
            if grouped is None:
                return
            await asyncio.sleep(i * spread)
            key = (str(meta.get("namespace")), str(meta.get("name")))
            latest = self.servers.get(key)  # the newest view after the wait; gone if deleted meanwhile
            if latest is None:
                return
            async with sem:
                try:
                    await observe(latest, dt.datetime.now(dt.UTC), grouped.get(meta.get("name"), []))
                except Exception:  # one server's failure must not stop the others
                    log.exception("observing %s/%s failed", body["metadata"].get("namespace"),
                                  body["metadata"].get("name"))

        await asyncio.gather(*(one(i, b) for i, b in enumerate(servers)))

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            started = loop.time()
            try:
                await self.tick()
            except Exception:  # never let the loop die silently: log and go on next tick
                log.exception("observer tick failed")
            await asyncio.sleep(max(0.05, self.interval - (loop.time() - started)))
