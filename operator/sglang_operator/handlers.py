"""kopf handlers for SGLangServer: thin glue between kopf, the builders, the pure status decisions and
the clients.

- ``reconcile`` (create / spec update / resume): parse and validate, render, server-side apply the
  Deployment and Service (owned by the SGLangServer), write the render's status, post an event. An
  invalid spec applies nothing and is reported as ``SpecValid=False`` with a Warning event.
- ``observe`` (timer, every ``SGLANG_OPERATOR_STATUS_INTERVAL`` seconds, default 5): pods → Ready /
  Progressing / Degraded; once Ready, SGLang's ``/server_info`` (once per revision) → ``status.effective``
  and ``SettingsDiffer``; ``/metrics`` → accept length, accept rate, tok/s. Scrape failures are counted
  (``sglang_operator_scrape_errors_total``) and logged, never raised.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from typing import Any

import kopf

from sglang_operator import builders
from sglang_operator.api import GROUP, PLURAL, VERSION
from sglang_operator.api.server import SpecError, parse
from sglang_operator.clients import kube
from sglang_operator.clients.sglang_http import ScrapeError, fetch_server_info, scrape_metrics
from sglang_operator.reconcile import effective as eff
from sglang_operator.reconcile import status as st
from sglang_operator.reconcile.pods import pod_health
from sglang_operator.sglang.versions import dialect, parse_version

STATUS_INTERVAL = float(os.environ.get("SGLANG_OPERATOR_STATUS_INTERVAL", "5"))
RESOURCE = (GROUP, VERSION, PLURAL)
Logger = logging.Logger | logging.LoggerAdapter[Any]


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _patch_status(patch: kopf.Patch, values: dict[str, Any]) -> None:
    for key, value in values.items():
        patch.status[key] = value


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


@kopf.on.resume(*RESOURCE)
@kopf.on.create(*RESOURCE)
@kopf.on.update(*RESOURCE, field="spec")
async def reconcile(
    body: kopf.Body, meta: kopf.Meta, status: kopf.Status, patch: kopf.Patch, reason: str,
    logger: Logger, **_: Any,
) -> None:
    """Render and apply the children of one SGLangServer; write status; post an event."""
    generation = int(meta.get("generation") or 0)
    now = _now()
    try:
        server = parse(body)
        rendered = builders.render(server)
    except (SpecError, builders.InvalidSpec) as err:
        errors = err.messages if isinstance(err, SpecError) else err.errors
        _patch_status(patch, st.changed(status, st.invalid(status, errors, generation, now)))
        kopf.warn(body, reason="InvalidSpec", message="; ".join(errors)[:1024])
        logger.warning("invalid spec, nothing applied: %s", "; ".join(errors))
        return
    await kube.apply(builders.adopt(rendered.deployment, body))
    await kube.apply(builders.adopt(rendered.service, body))
    entry = st.ledger_entry(rendered.revision, generation, rendered.command.command_line,
                            builders.summary(server, rendered), body.get("spec", {}), now)
    new = st.applied(status, rendered.status, rendered.warnings, entry, generation,
                     server.spec.rollback.history_limit, now)
    _patch_status(patch, st.changed(status, new))
    if reason == kopf.Reason.RESUME:
        return
    verb = "Created" if reason == kopf.Reason.CREATE else "Updated"
    kopf.info(body, reason=verb, message=f"revision {rendered.revision}: {rendered.command.command_line}"[:1024])
    for warning in rendered.warnings:
        kopf.warn(body, reason="SpecWarning", message=warning[:1024])


async def _read_sglang(
    base_url: str, version: str, status: kopf.Status, server_spec: Any, logger: Logger
) -> tuple[dict[str, Any] | None, list[str] | None, dict[str, float | None]]:
    """Effective settings (once per revision) and metrics of a Ready server; failures logged, not raised."""
    effective = diffs = None
    if not status.get("effective"):
        try:
            path = dialect(parse_version(version)).server_info_path
            effective = eff.effective_settings(await fetch_server_info(base_url, path))
            diffs = eff.differences(requested_settings(server_spec, status.get("numDraftTokens")), effective)
        except ScrapeError as err:
            logger.info("server info not read yet: %s", err)
    metrics: dict[str, float | None] = {}
    try:
        sample = await scrape_metrics(base_url)
        if sample.gen_throughput:  # an idle server reports 0 tok/s: keep the last measured figures
            metrics = {"acceptLength": sample.accept_length, "acceptRate": sample.accept_rate,
                       "tokensPerSecond": sample.gen_throughput}
    except ScrapeError as err:
        logger.info("metrics not scraped: %s", err)
    return effective, diffs, metrics


@kopf.timer(*RESOURCE, interval=STATUS_INTERVAL, initial_delay=1.0)
async def observe(
    body: kopf.Body, meta: kopf.Meta, status: kopf.Status, patch: kopf.Patch, name: str, namespace: str | None,
    logger: Logger, **_: Any,
) -> None:
    """Observe pods and SGLang; patch only what changed."""
    revision = status.get("revision")
    if not revision:
        return
    try:
        server = parse(body)
    except SpecError:
        return
    generation = int(meta.get("generation") or 0)
    now = _now()
    pods = await kube.list_pods(namespace or "default", builders.selector_labels(name))
    health = pod_health(pods, server.spec.replicas, revision, generation, now)
    effective = diffs = None
    metrics: dict[str, float | None] = {}
    if health.phase == "Ready" and health.pod_ips:
        base_url = f"http://{health.pod_ips[0]}:{server.spec.port}"
        effective, diffs, metrics = await _read_sglang(
            base_url, status.get("sglangVersion") or "", status, server.spec, logger)
    new = st.observed(status, health, generation, now, effective, diffs, metrics)
    delta = st.changed(status, new)
    old_degraded: dict[str, Any] = next((c for c in status.get("conditions") or [] if c.get("type") == "Degraded"), {})
    new_degraded: dict[str, Any] = next((c for c in new["conditions"] if c["type"] == "Degraded"), {})
    if new_degraded.get("status") == "True" and old_degraded.get("reason") != new_degraded.get("reason"):
        kopf.warn(body, reason=new_degraded["reason"], message=new_degraded.get("message", "")[:1024])
    if diffs:
        kopf.warn(body, reason="SettingsDiffer", message="; ".join(diffs)[:1024])
    _patch_status(patch, delta)
