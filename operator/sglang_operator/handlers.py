"""kopf handlers for SGLangServer: thin glue between kopf, the builders, the pure status decisions and
the clients.

- ``reconcile`` (create / spec update / resume): parse and validate, render, server-side apply the
  Deployment and Service (owned by the SGLangServer), write the render's status, post an event. An
  invalid spec applies nothing and is reported as ``SpecValid=False`` with a Warning event.
- ``track`` (every watch event) feeds :class:`sglang_operator.observer.Observer`, started and stopped with
  the operator, which observes pods and SGLang for every server each ``SGLANG_OPERATOR_STATUS_INTERVAL``
  seconds. No timer or daemon is used, so no finalizer is put on SGLangServers: deleting one never waits
  for the operator.
- ``child_event`` (watch of the operator's Deployments and Services): one deleted behind the operator's
  back is re-applied at the same revision.
- ``pod_event`` (watch of the managed pods) keeps the observer's pod cache current: the observer and the
  sampler never LIST pods per tick.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
from typing import Any

import kopf

from sglang_operator import builders, telemetry
from sglang_operator.api import GROUP, PLURAL, VERSION
from sglang_operator.api.server import SpecError, parse
from sglang_operator.builders.labels import MANAGED_BY
from sglang_operator.children import apply_children, refused_by_api_server
from sglang_operator.monitoring.discovery import POD_MONITORS
from sglang_operator.observer import Observer
from sglang_operator.reconcile import status as st
from sglang_operator.sglang import args as sglang_args

STATUS_INTERVAL = float(os.environ.get("SGLANG_OPERATOR_STATUS_INTERVAL", "5"))
OBSERVER = Observer(STATUS_INTERVAL)
RESOURCE = (GROUP, VERSION, PLURAL)
Logger = logging.Logger | logging.LoggerAdapter[Any]


def _now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def _patch_status(patch: kopf.Patch, values: dict[str, Any]) -> None:
    for key, value in values.items():
        patch.status[key] = value


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
    logger.debug("reconcile (%s) of generation %s", reason, generation)
    try:
        server = parse(body)
        rendered = builders.render(server)
    except (SpecError, builders.InvalidSpec) as err:
        errors = err.messages if isinstance(err, SpecError) else err.errors
        _patch_status(patch, st.changed(status, st.invalid(status, errors, generation, now)))
        kopf.event(body, type="Warning", reason="InvalidSpec", message="; ".join(errors)[:1024])
        logger.warning("invalid spec, nothing applied: %s", "; ".join(errors))
        telemetry.count_reconcile("invalid")
        return
    try:
        await apply_children(rendered, body)
    except Exception as err:
        refusal = refused_by_api_server(err)
        if refusal is None:
            telemetry.count_reconcile("error")
            raise  # transient: kopf retries
        _patch_status(patch, st.changed(status, st.invalid(status, [refusal], generation, now)))
        kopf.event(body, type="Warning", reason="InvalidSpec", message=refusal[:1024])
        logger.warning("%s", refusal)
        telemetry.count_reconcile("refused")
        return
    logger.debug("applied revision %s", rendered.revision)
    entry = st.ledger_entry(rendered.revision, generation, rendered.command.command_line,
                            builders.summary(server, rendered), body.get("spec", {}), now)
    new = st.applied(status, rendered.status, rendered.warnings, entry, generation,
                     server.spec.rollback.history_limit, now)
    _patch_status(patch, st.changed(status, new))
    telemetry.count_reconcile("applied")
    if reason == kopf.Reason.RESUME:
        return
    verb = "Created" if reason == kopf.Reason.CREATE else "Updated"
    message = f"revision {rendered.revision}: {rendered.command.command_line}"
    kopf.event(body, type="Normal", reason=verb, message=message[:1024])
    for warning in rendered.warnings:
        kopf.event(body, type="Warning", reason="SpecWarning", message=warning[:1024])


@kopf.on.event(*RESOURCE)
async def track(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
    """Keep the observer's view of every SGLangServer current (no finalizer needed)."""
    OBSERVER.track(str(event.get("type")), dict(body))


@kopf.on.event("apps", "v1", "deployments", labels={"app.kubernetes.io/managed-by": MANAGED_BY})
@kopf.on.event("", "v1", "services", labels={"app.kubernetes.io/managed-by": MANAGED_BY})
async def child_event(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
    """A child deleted behind the operator's back is re-applied (same revision, Warning event)."""
    if event.get("type") == "DELETED":
        await OBSERVER.child_deleted(dict(body))


@kopf.on.event("", "v1", "pods", labels={"app.kubernetes.io/managed-by": MANAGED_BY})
async def pod_event(event: kopf.RawEvent, body: kopf.Body, **_: Any) -> None:
    """Keep the observer's pod cache current (initial listing: event type None)."""
    kind = event.get("type")
    OBSERVER.pod_event(None if kind is None else str(kind), dict(body))


@kopf.on.startup()
async def start_observer(**_: Any) -> None:
    """Build the SGLang parsers ahead of the first render, discover the PodMonitor API, and start the status
    observer loop."""
    sglang_args.warm_up()
    await POD_MONITORS.wanted()  # auto: discovered once here, re-checked while absent
    OBSERVER.start()


@kopf.on.cleanup()
async def stop_observer(**_: Any) -> None:
    """Stop the status observer loop."""
    await OBSERVER.stop()
