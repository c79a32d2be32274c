"""Kubernetes access for the operator: server-side apply of children and reads of their state.

Uses lightkube's ``AsyncClient`` (server-side apply with field manager ``sglang-operator``;
configuration from ``KUBECONFIG`` or the in-cluster service account). Objects go in and come out as
plain dicts in the API's JSON shape. Errors: ``lightkube.ApiError`` (with the API server's status)
propagates to the caller; kopf turns it into a retry.
"""

from __future__ import annotations

import asyncio
import contextlib
import weakref
from collections.abc import Mapping, Sequence
from typing import Any

from lightkube import AsyncClient
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Pod

from sglang_operator.api.base import truncate
from sglang_operator.io.fence import FENCE, NotLeader

FIELD_MANAGER = "sglang-operator"

_client: AsyncClient | None = None


def client() -> AsyncClient:
    """The process-wide client, created on first use. HTTP/1.1 (httpx's pool: up to 100 connections, 20 kept
    alive): the slow kind, Service applies, is bounded apart (:data:`SERVICE_APPLIES`), so slow answers cannot hold
    every connection. Not HTTP/2: ``h2`` Huffman-encodes the never-indexed Authorization header on every request, which
    cost more CPU per request than the multiplexing saved (docs/architecture.md, "Under load")."""
    global _client
    if _client is None:
        _client = AsyncClient(field_manager=FIELD_MANAGER, http2=False)
    return _client


def _as_dict(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = obj.to_dict()
    return out


_KINDS: dict[str, Any] = {}


def _resource(kind: str) -> Any:
    if not _KINDS:
        from lightkube.generic_resource import create_namespaced_resource
        from lightkube.resources.core_v1 import Service

        _KINDS.update({"Deployment": Deployment, "Service": Service,
                       "LeaderWorkerSet": create_namespaced_resource("leaderworkerset.x-k8s.io", "v1",
                                                                    "LeaderWorkerSet", "leaderworkersets"),
                       "PodMonitor": create_namespaced_resource("monitoring.coreos.com", "v1", "PodMonitor",
                                                                "podmonitors")})
    return _KINDS[kind]


async def get_object(kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    """A child as stored (``kind``: Deployment, LeaderWorkerSet, Service or PodMonitor), or None when it does not
    exist. Raises ``lightkube.ApiError`` for other answers."""
    from lightkube import ApiError

    try:
        obj = await client().get(_resource(kind), name, namespace=namespace)
    except ApiError as exc:
        if exc.status.code == 404:
            return None
        raise
    return _as_dict(obj)


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


async def delete_object(kind: str, namespace: str, name: str) -> bool:
    """Delete child ``kind`` ``namespace/name`` (a canary's Deployment, the old serving one after a promotion) with
    background propagation (its ReplicaSets and pods follow); False when it did not exist. Raises
    ``lightkube.ApiError`` for other answers."""
    from lightkube import ApiError
    from lightkube.types import CascadeType

    FENCE.check(f"delete {kind} {namespace}/{name}")
    try:
        await client().delete(_resource(kind), name, namespace=namespace, cascade=CascadeType.BACKGROUND)
    except ApiError as exc:
        if exc.status.code == 404:
            return False
        raise
    return True


async def patch_replicas(kind: str, namespace: str, name: str, replicas: int) -> None:
    """Set ``spec.replicas`` of workload ``kind`` ``namespace/name`` and nothing else (a JSON merge patch of that one
    field): a canary's stable share when the live workload runs the revision already, so no re-render of its pod
    template can roll its pods (:func:`sglang_operator.builders.canary.replicas_only`). Raises
    ``lightkube.ApiError`` (404 when it does not exist)."""
    from lightkube.types import PatchType

    FENCE.check(f"scale {kind} {namespace}/{name}")
    await client().patch(_resource(kind), name, {"spec": {"replicas": replicas}}, namespace=namespace,
                         patch_type=PatchType.MERGE, field_manager=FIELD_MANAGER)


async def apply(manifest: Mapping[str, Any], dry_run: bool = False) -> None:
    """Server-side apply ``manifest`` (a Deployment, LeaderWorkerSet, Service or PodMonitor dict, sent as is: no
    field is dropped by a client-side model) with ``force`` (the operator owns the fields it renders); at most
    :data:`SERVICE_APPLIES` Services at once. An unchanged manifest is a no-op for the API server (resourceVersion
    kept). Raises ``lightkube.ApiError`` (e.g. 422 Invalid)."""
    from lightkube.types import PatchType

    meta = manifest["metadata"]
    FENCE.check(f"apply {manifest['kind']} {meta.get('namespace')}/{meta['name']}")
    async with _slots(str(manifest["kind"])):
        await client().patch(_resource(manifest["kind"]), meta["name"], dict(manifest),
                             namespace=meta.get("namespace"), patch_type=PatchType.APPLY,
                             field_manager=FIELD_MANAGER, force=True, dry_run=dry_run)


async def crd_served(name: str, version: str) -> bool:
    """Whether CustomResourceDefinition ``name`` (e.g. ``leaderworkersets.leaderworkerset.x-k8s.io``) is
    Established and serves ``version``; False when it does not exist (404). Other errors raise ``ApiError``."""
    from lightkube import ApiError
    from lightkube.resources.apiextensions_v1 import CustomResourceDefinition

    try:
        crd = await client().get(CustomResourceDefinition, name)
    except ApiError as err:
        if err.status.code == 404:
            return False
        raise
    served = any(v.name == version and v.served for v in crd.spec.versions)
    conds = crd.status.conditions if crd.status and crd.status.conditions else []
    return served and any(c.type == "Established" and c.status == "True" for c in conds)


async def list_pods(namespace: str, labels: Mapping[str, str]) -> list[dict[str, Any]]:
    """Pods in ``namespace`` carrying all ``labels``."""
    return [_as_dict(p) async for p in client().list(Pod, namespace=namespace, labels=dict(labels))]


async def get_deployment(namespace: str, name: str) -> dict[str, Any] | None:
    """The Deployment, or None when it does not exist."""
    from lightkube import ApiError

    try:
        dep = await client().get(Deployment, name, namespace=namespace)
    except ApiError as exc:
        if exc.status.code == 404:
            return None
        raise
    return _as_dict(dep)


_RESOURCE: Any = None


def _sglangserver() -> Any:
    global _RESOURCE
    if _RESOURCE is None:
        from lightkube.generic_resource import create_namespaced_resource

        from sglang_operator.api import GROUP, KIND, PLURAL, VERSION

        _RESOURCE = create_namespaced_resource(GROUP, VERSION, KIND, PLURAL)
    return _RESOURCE


def sglangserver_resource() -> Any:
    """lightkube's generic resource class for SGLangServer (for sync and async clients alike)."""
    return _sglangserver()


_TUNING_RESOURCE: Any = None


def sglangtuning_resource() -> Any:
    """lightkube's generic resource class for SGLangTuning (for sync and async clients alike)."""
    global _TUNING_RESOURCE
    if _TUNING_RESOURCE is None:
        from lightkube.generic_resource import create_namespaced_resource

        from sglang_operator.api import GROUP, VERSION
        from sglang_operator.api import tuning as api_tuning

        _TUNING_RESOURCE = create_namespaced_resource(GROUP, VERSION, api_tuning.KIND, api_tuning.PLURAL)
    return _TUNING_RESOURCE


async def sglangserver_uids(namespaces: Sequence[str]) -> set[str]:
    """``metadata.uid`` of every SGLangServer in ``namespaces`` (one LIST each; empty: one LIST clusterwide).
    Raises ``lightkube.ApiError``."""
    from lightkube import ALL_NS

    scopes: Sequence[Any] = list(namespaces) or [ALL_NS]
    return {str(obj.metadata.uid) for ns in scopes async for obj in client().list(_sglangserver(), namespace=ns)}


async def sglangserver_keys(namespaces: Sequence[str]) -> dict[tuple[str, str], str]:
    """``(namespace, name)`` → uid of every SGLangServer in ``namespaces`` (one LIST each; empty: one LIST
    clusterwide): the observer's resync. Raises ``lightkube.ApiError``."""
    from lightkube import ALL_NS

    scopes: Sequence[Any] = list(namespaces) or [ALL_NS]
    return {(str(obj.metadata.namespace), str(obj.metadata.name)): str(obj.metadata.uid or "")
            for ns in scopes async for obj in client().list(_sglangserver(), namespace=ns)}


async def secret_value(namespace: str, name: str, key: str) -> str | None:
    """The decoded value of ``key`` in Secret ``namespace/name``; None (logged) when unreadable."""
    import base64
    import logging

    from lightkube import ApiError
    from lightkube.resources.core_v1 import Secret

    try:
        secret = await client().get(Secret, name, namespace=namespace)
    except ApiError as exc:
        logging.getLogger(__name__).warning("secret %s/%s not readable: %s", namespace, name, exc)
        return None
    data = (secret.data or {}).get(key)
    return base64.b64decode(data).decode() if data is not None else None


async def _get_stored(resource: Any, namespace: str, name: str) -> dict[str, Any] | None:
    """One object of the operator's own ``resource`` (a lightkube generic resource) as stored, or None on 404."""
    from lightkube import ApiError

    try:
        return _as_dict(await client().get(resource, name, namespace=namespace))
    except ApiError as exc:
        if exc.status.code == 404:
            return None
        raise


async def _patch_stored_status(resource: Any, what: str, namespace: str, name: str, resource_version: str | None,
                               status: Mapping[str, Any]) -> dict[str, Any] | None:
    """Merge-patch the ``status`` subresource of ``resource`` ``namespace/name`` (``what``: its kind in the fence's
    message), with ``resource_version`` as a precondition; None on 409 Conflict / 404."""
    from lightkube import ApiError
    from lightkube.types import PatchType

    FENCE.check(f"status of {what}{namespace}/{name}")
    body: dict[str, Any] = {"status": dict(status)}
    if resource_version:
        body["metadata"] = {"resourceVersion": resource_version}
    try:
        patched = await client().patch(resource.Status, name, body, namespace=namespace, patch_type=PatchType.MERGE)
    except ApiError as exc:
        if exc.status.code in (404, 409):
            return None
        raise
    return _as_dict(patched)


async def get_sglangserver(namespace: str, name: str) -> dict[str, Any] | None:
    """The SGLangServer as stored, or None when it does not exist."""
    return await _get_stored(_sglangserver(), namespace, name)


async def patch_status(namespace: str, name: str, resource_version: str | None,
                       status: Mapping[str, Any]) -> dict[str, Any] | None:
    """Merge-patch an SGLangServer's ``status`` subresource; with ``resource_version`` as a precondition.

    Returns the object as patched (the API server's answer), or None when the object changed since (409
    Conflict) or is gone (404); other errors raise, and :class:`~sglang_operator.io.fence.NotLeader` when this
    process may not write.
    """
    return await _patch_stored_status(_sglangserver(), "", namespace, name, resource_version, status)


async def get_sglangtuning(namespace: str, name: str) -> dict[str, Any] | None:
    """The SGLangTuning as stored, or None when it does not exist."""
    return await _get_stored(sglangtuning_resource(), namespace, name)


async def patch_tuning_status(namespace: str, name: str, resource_version: str | None,
                              status: Mapping[str, Any]) -> dict[str, Any] | None:
    """Merge-patch an SGLangTuning's ``status`` subresource with ``resource_version`` as a precondition (as
    :func:`patch_status`). Returns the object as patched, or None on 409 Conflict / 404; other errors raise."""
    return await _patch_stored_status(sglangtuning_resource(), "SGLangTuning ", namespace, name, resource_version,
                                      status)


async def post_event(obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
    """Post a ``v1`` Event about ``obj`` (the way kopf does: source component ``sglang-operator``).
    Failures are logged, not raised: an event is informative only (one refused by the fence is not posted)."""
    import datetime as dt
    import logging
    import uuid

    from lightkube import ApiError
    from lightkube.resources.core_v1 import Event

    meta = obj["metadata"]
    try:
        FENCE.check(f"event {reason} of {meta.get('namespace')}/{meta['name']}")
    except NotLeader:
        return
    now = dt.datetime.now(dt.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
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
        await client().create(ev)
    except ApiError as exc:
        logging.getLogger(__name__).warning("event %s not posted: %s", reason, exc)
