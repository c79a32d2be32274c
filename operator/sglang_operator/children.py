"""Applying an SGLangServer's children (glue shared by the reconcile handler and the observer).

The Deployment goes first and the Service (then the PodMonitor, :mod:`sglang_operator.monitoring.discovery`)
only after it was accepted, so an object the API server refuses
(e.g. a label value or env entry it finds invalid) leaves both children as they were.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sglang_operator import builders
from sglang_operator.builders.monitoring import pod_monitor
from sglang_operator.clients import kube
from sglang_operator.monitoring.discovery import POD_MONITORS, PodMonitorMode


async def apply_children(rendered: builders.Rendered, owner: Mapping[str, Any]) -> None:
    """Server-side apply the Deployment, then the Service, then (per ``--pod-monitors``) the PodMonitor, each
    owned by ``owner`` (an SGLangServer dict).

    Raises ``lightkube.ApiError`` as the API server answered; nothing after the failing child is applied. In
    ``auto`` mode a PodMonitor answered with 404 (its CRD just vanished) is skipped and discovered again later.
    """
    await kube.apply(builders.adopt(rendered.deployment, owner))
    await kube.apply(builders.adopt(rendered.service, owner))
    await apply_pod_monitor(rendered, owner)


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


def refused_by_api_server(err: Exception) -> str | None:
    """The API server's message when ``err`` is a 400/422 refusal of a child (a spec problem, not a
    transient error), else None."""
    from lightkube import ApiError

    if isinstance(err, ApiError) and err.status.code in (400, 422):
        return f"the API server refused a child object: {err.status.message}"
    return None
