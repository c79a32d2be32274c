"""Kubernetes WRITES for the operator: server-side apply, deletes, replica patches, status patches of the
operator's own kinds, and Events. Split from the reads (:mod:`sglang_operator.io.kube`) so that an import-linter
contract (``.importlinter``, "writers") lets only the apply path (:mod:`sglang_operator.control.apply`, with
:mod:`~sglang_operator.control.children` and :mod:`~sglang_operator.control.drain`), the ledger
(:mod:`sglang_operator.control.ledger`) and the one status writer of each kind
(:mod:`sglang_operator.control.server_status`, :mod:`sglang_operator.control.tuning_status`) import it: the map is
docs/architecture.md, "Who writes what".

Every write is marked ``dispatched(name, fence=...)`` (:mod:`sglang_operator.io.api`): its wrapper checks the
leadership fence (:data:`sglang_operator.io.fence.FENCE`) first, before this function or a bound implementation (the
offline tests' fake) runs. The client is the private one of :mod:`sglang_operator.io._client`. Errors:
``lightkube.ApiError`` propagates unless a function says otherwise; a write refused by the fence raises
:class:`~sglang_operator.io.fence.NotLeader` (an Event is dropped).
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Mapping
from typing import Any

from sglang_operator.api.base import truncate
from sglang_operator.decisions.conditions import rfc3339
from sglang_operator.io import _client, kube
from sglang_operator.io._client import FIELD_MANAGER
from sglang_operator.io.api import dispatched

SERVICE_APPLIES = 16
"""Service applies in flight at once. The API server allocates ClusterIPs one at a time (``MetaAllocator``'s mutex
held across an IPAddress create, ``pkg/registry/core/service/ipallocator/cidrallocator.go``), so under load a
Service creation takes seconds and more of them in flight go no faster; unbounded, they held the client's
connections while every other request waited (docs/architecture.md, "Under load")."""

_service_slots: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, asyncio.Semaphore] = weakref.WeakKeyDictionary()


def _slots(kind: str) -> contextlib.AbstractAsyncContextManager[Any]:
    if kind != "Service":
        return contextlib.nullcontext()
    loop = asyncio.get_running_loop()
    return _service_slots.setdefault(loop, asyncio.Semaphore(SERVICE_APPLIES))


@dispatched("delete_object", fence="delete")
async def delete_object(kind: str, namespace: str, name: str, uid: str | None = None) -> bool:
    """Delete child ``kind`` ``namespace/name`` (a canary's Deployment, the old serving one after a promotion, a
    trial's) with background propagation (its ReplicaSets and pods follow); with ``uid``, only that very object
    (``DeleteOptions.preconditions.uid``: one deleted and made again under that name since it was read is left
    alone, and the API server answers 409 Conflict). False when it did not exist. Raises ``lightkube.ApiError`` for
    other answers (409 when ``uid`` is not the object's)."""
    from lightkube import ApiError

    try:
        await _client.delete_with_uid(kube.child_resource(kind), namespace, name, uid)
    except ApiError as exc:
        if exc.status.code == 404:
            return False
        raise
    return True


@dispatched("patch_replicas", fence="scale")
async def patch_replicas(kind: str, namespace: str, name: str, replicas: int) -> None:
    """Set ``spec.replicas`` of workload ``kind`` ``namespace/name`` and nothing else (a JSON merge patch of that one
    field): a canary's stable share when the live workload runs the revision already, so no re-render of its pod
    template can roll its pods (:func:`sglang_operator.builders.canary.replicas_only`). Raises
    ``lightkube.ApiError`` (404 when it does not exist)."""
    from lightkube.types import PatchType

    await _client.client().patch(kube.child_resource(kind), name, {"spec": {"replicas": replicas}},
                                 namespace=namespace, patch_type=PatchType.MERGE, field_manager=FIELD_MANAGER)


@dispatched("apply", fence="apply")
async def apply(manifest: Mapping[str, Any], dry_run: bool = False) -> None:
    """Server-side apply ``manifest`` (a Deployment, LeaderWorkerSet, Service or PodMonitor dict, sent as is: no
    field is dropped by a client-side model) with ``force`` (the operator owns the fields it renders); at most
    :data:`SERVICE_APPLIES` Services at once. An unchanged manifest is a no-op for the API server (resourceVersion
    kept). Raises ``lightkube.ApiError`` (e.g. 422 Invalid)."""
    from lightkube.types import PatchType

    meta = manifest["metadata"]
    async with _slots(str(manifest["kind"])):
        await _client.client().patch(kube.child_resource(manifest["kind"]), meta["name"], dict(manifest),
                                     namespace=meta.get("namespace"), patch_type=PatchType.APPLY,
                                     field_manager=FIELD_MANAGER, force=True, dry_run=dry_run)


async def _patch_stored_status(resource: Any, namespace: str, name: str, resource_version: str | None,
                               status: Mapping[str, Any]) -> dict[str, Any] | None:
    """Merge-patch the ``status`` subresource of ``resource`` ``namespace/name``, with ``resource_version`` as a
    precondition; None on 409 Conflict / 404. No fence check: called only by the fenced writes below."""
    from lightkube import ApiError
    from lightkube.types import PatchType

    body: dict[str, Any] = {"status": dict(status)}
    if resource_version:
        body["metadata"] = {"resourceVersion": resource_version}
    try:
        patched = await _client.client().patch(resource.Status, name, body, namespace=namespace,
                                               patch_type=PatchType.MERGE)
    except ApiError as exc:
        if exc.status.code in (404, 409):
            return None
        raise
    return kube.as_dict(patched)


@dispatched("patch_status", fence="status of SGLangServer")
async def patch_status(namespace: str, name: str, resource_version: str | None,
                       status: Mapping[str, Any]) -> dict[str, Any] | None:
    """Merge-patch an SGLangServer's ``status`` subresource; with ``resource_version`` as a precondition.

    Returns the object as patched (the API server's answer), or None when the object changed since (409
    Conflict) or is gone (404); other errors raise, and :class:`~sglang_operator.io.fence.NotLeader` when this
    process may not write.
    """
    return await _patch_stored_status(kube.sglangserver_resource(), namespace, name, resource_version, status)


@dispatched("patch_tuning_status", fence="status of SGLangTuning")
async def patch_tuning_status(namespace: str, name: str, resource_version: str | None,
                              status: Mapping[str, Any]) -> dict[str, Any] | None:
    """Merge-patch an SGLangTuning's ``status`` subresource with ``resource_version`` as a precondition (as
    :func:`patch_status`). Returns the object as patched, or None on 409 Conflict / 404; other errors raise."""
    return await _patch_stored_status(kube.sglangtuning_resource(), namespace, name, resource_version, status)


@dispatched("post_event", fence="event about", quiet=True)
async def post_event(obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
    """Post a ``v1`` Event about ``obj`` (the way kopf does: source component ``sglang-operator``).
    Failures are logged, not raised: an event is informative only (one refused by the fence is not posted)."""
    import datetime as dt
    import logging
    import uuid

    import httpx
    from lightkube import ApiError
    from lightkube.resources.core_v1 import Event

    meta = obj["metadata"]
    now = rfc3339(dt.datetime.now(dt.UTC))
    event = {
        "apiVersion": "v1", "kind": "Event",
        "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:12]}", "namespace": meta.get("namespace")},
        "involvedObject": {"apiVersion": obj.get("apiVersion"), "kind": obj.get("kind"), "name": meta["name"],
                           "namespace": meta.get("namespace"), "uid": meta.get("uid")},
        "type": type_, "reason": reason, "message": truncate(message),
        "source": {"component": FIELD_MANAGER}, "firstTimestamp": now, "lastTimestamp": now, "count": 1,
        "reportingComponent": FIELD_MANAGER, "reportingInstance": FIELD_MANAGER,
    }
    try:
        ev: Any = Event.from_dict(event)
        await _client.client().create(ev)
    except (ApiError, httpx.HTTPError) as exc:  # refused, or the API server not answering in time
        logging.getLogger(__name__).warning("event %s not posted: %s", reason, exc)
