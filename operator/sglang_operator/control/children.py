"""Applying an SGLangServer's children (glue shared by the reconcile handler and the observer).

The Deployment goes first and the Service (then the PodMonitor, :mod:`sglang_operator.io.discovery`)
only after it was accepted, so an object the API server refuses
(e.g. a label value or env entry it finds invalid) leaves both children as they were. A multi-node server's
workload is a LeaderWorkerSet; when the cluster does not serve that API, :class:`LeaderWorkerSetMissing` is raised
and nothing is applied. A failed apply is a
:class:`ChildApplyError` whose :class:`ApplyFailure` says whether the spec is at fault (the caller reports
``SpecValid=False``) or not (``Degraded``, and a retry): never a silent retry loop.

The drain before a Recreate is :mod:`sglang_operator.control.drain`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from sglang_operator import builders
from sglang_operator.builders.leaderworkerset import CRD_NAME as LWS_CRD
from sglang_operator.builders.leaderworkerset import KIND as LWS_KIND
from sglang_operator.builders.leaderworkerset import VERSION as LWS_VERSION
from sglang_operator.builders.monitoring import pod_monitor
from sglang_operator.decisions.groups import lws_missing_message
from sglang_operator.io import kube, kube_write
from sglang_operator.io.discovery import POD_MONITORS, PodMonitorMode


async def apply_children(rendered: builders.Rendered, owner: Mapping[str, Any], workload: bool = True) -> None:
    """Server-side apply the Deployment (unless ``workload`` is False: a canary's stable share, scaled only), then
    the Service, then (per ``--pod-monitors``) the PodMonitor, each owned by ``owner`` (an SGLangServer dict).

    Raises :class:`ChildApplyError` (from the API server's ``lightkube.ApiError`` or a transport error); nothing
    after the failing child is applied. In
    ``auto`` mode a PodMonitor answered with 404 (its CRD just vanished) is skipped and discovered again later.
    """
    for child in (rendered.workload, rendered.service) if workload else (rendered.service,):
        try:
            await kube_write.apply(builders.adopt(child, owner))
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
        await kube_write.apply(builders.adopt(monitor, owner))
    except ApiError as err:
        if err.status.code != 404 or POD_MONITORS.mode is not PodMonitorMode.AUTO:
            raise
        POD_MONITORS.forget()


SCHEMA_REFUSALS = ("field not declared in schema", "failed to create typed patch object", "unknown field")
"""Texts of a server-side apply the API server cannot type against the object's schema: it answers HTTP 500
(``k8s.io/apiserver`` fieldmanager) though the request, not the server, is at fault."""
TOO_LARGE = ("request is too large", "Request entity too large")
"""Texts of an object too large to store (etcd's ``etcdserver: request is too large``, an HTTP 500; the API server's
own ``Request entity too large``, an HTTP 413): the spec made it so, and retrying renders and sends it again."""


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
        spec_fault = (code in (400, 413, 422) or (code == 500 and any(t in message for t in SCHEMA_REFUSALS))
                      or any(t.lower() in message.lower() for t in TOO_LARGE))
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


log = logging.getLogger("sglang_operator.control.children")
