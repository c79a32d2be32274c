"""Kubernetes reads for the operator (the writes are :mod:`sglang_operator.io.kube_write`, which only the apply
path, the ledger and each kind's status writer may import: docs/architecture.md, "Who writes what").

Reads through the process-wide client of :mod:`sglang_operator.io._client`, private to this module, the writes'
(:mod:`~sglang_operator.io.kube_write`) and the ledger's (:mod:`~sglang_operator.io.revisions`): no other module
imports it (the import-linter contract ``client``), nor writes with a lightkube client
(``tests/repo/test_client_writes.py``). Objects go in and come out as plain dicts in the API's JSON shape. Errors:
``lightkube.ApiError`` (with the API server's status) propagates to the caller; kopf turns it into a retry.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Pod

from sglang_operator.io import _client
from sglang_operator.io._client import FIELD_MANAGER as FIELD_MANAGER
from sglang_operator.io.api import dispatched


def reset_client() -> None:
    """Forget the process-wide client without closing it (one made on an event loop that has ended: tests and
    benchmarks that run several); the next read or write makes a new one."""
    _client.forget()


async def close_client() -> None:
    """Close the process-wide client, if one was made, and forget it."""
    await _client.close()


def as_dict(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = obj.to_dict()
    return out


_KINDS: dict[str, Any] = {}


def child_resource(kind: str) -> Any:
    if not _KINDS:
        from lightkube.generic_resource import create_namespaced_resource
        from lightkube.resources.apps_v1 import ReplicaSet, StatefulSet
        from lightkube.resources.core_v1 import Service

        _KINDS.update({"Deployment": Deployment, "Service": Service, "ReplicaSet": ReplicaSet,
                       "StatefulSet": StatefulSet,
                       "LeaderWorkerSet": create_namespaced_resource("leaderworkerset.x-k8s.io", "v1",
                                                                    "LeaderWorkerSet", "leaderworkersets"),
                       "PodMonitor": create_namespaced_resource("monitoring.coreos.com", "v1", "PodMonitor",
                                                                "podmonitors"),
                       "ScaledObject": create_namespaced_resource("keda.sh", "v1alpha1", "ScaledObject",
                                                                  "scaledobjects")})
    return _KINDS[kind]


@dispatched("get_object")
async def get_object(kind: str, namespace: str, name: str) -> dict[str, Any] | None:
    """A child as stored (``kind``: Deployment, LeaderWorkerSet, Service, PodMonitor or ScaledObject; ReplicaSet and
    StatefulSet, read only, between a pod and its owner), or None when it does not exist. Raises ``lightkube.ApiError``
    for other answers."""
    from lightkube import ApiError

    try:
        obj = await _client.client().get(child_resource(kind), name, namespace=namespace)
    except ApiError as exc:
        if exc.status.code == 404:
            return None
        raise
    return as_dict(obj)


@dispatched("crd_served")
async def crd_served(name: str, version: str) -> bool:
    """Whether CustomResourceDefinition ``name`` (e.g. ``leaderworkersets.leaderworkerset.x-k8s.io``) is
    Established and serves ``version``; False when it does not exist (404). Other errors raise ``ApiError``."""
    from lightkube import ApiError
    from lightkube.resources.apiextensions_v1 import CustomResourceDefinition

    try:
        crd = await _client.client().get(CustomResourceDefinition, name)
    except ApiError as err:
        if err.status.code == 404:
            return False
        raise
    served = any(v.name == version and v.served for v in crd.spec.versions)
    conds = crd.status.conditions if crd.status and crd.status.conditions else []
    return served and any(c.type == "Established" and c.status == "True" for c in conds)


@dispatched("list_pods")
async def list_pods(namespace: str, labels: Mapping[str, str]) -> list[dict[str, Any]]:
    """Pods in ``namespace`` carrying all ``labels``."""
    return [as_dict(p) async for p in _client.client().list(Pod, namespace=namespace, labels=dict(labels))]


async def get_deployment(namespace: str, name: str) -> dict[str, Any] | None:
    """The Deployment, or None when it does not exist."""
    from lightkube import ApiError

    try:
        dep = await _client.client().get(Deployment, name, namespace=namespace)
    except ApiError as exc:
        if exc.status.code == 404:
            return None
        raise
    return as_dict(dep)


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
    return {str(obj.metadata.uid)
            for ns in scopes async for obj in _client.client().list(_sglangserver(), namespace=ns)}


@dispatched("sglangserver_keys")
async def sglangserver_keys(namespaces: Sequence[str]) -> dict[tuple[str, str], str]:
    """``(namespace, name)`` → uid of every SGLangServer in ``namespaces`` (one LIST each; empty: one LIST
    clusterwide): the observer's resync. Raises ``lightkube.ApiError``."""
    from lightkube import ALL_NS

    scopes: Sequence[Any] = list(namespaces) or [ALL_NS]
    return {(str(obj.metadata.namespace), str(obj.metadata.name)): str(obj.metadata.uid or "")
            for ns in scopes async for obj in _client.client().list(_sglangserver(), namespace=ns)}


@dispatched("sglangtunings")
async def sglangtunings(namespaces: Sequence[str]) -> list[dict[str, Any]]:
    """Every SGLangTuning in ``namespaces`` as stored (one LIST each; empty: one LIST clusterwide): the observer's
    resync of the tuning index. Raises ``lightkube.ApiError``."""
    from lightkube import ALL_NS

    scopes: Sequence[Any] = list(namespaces) or [ALL_NS]
    return [as_dict(obj) for ns in scopes async for obj in _client.client().list(sglangtuning_resource(), namespace=ns)]


@dispatched("secret_value")
async def secret_value(namespace: str, name: str, key: str) -> str | None:
    """The decoded value of ``key`` in Secret ``namespace/name``; None (logged) when unreadable."""
    import base64
    import logging

    from lightkube import ApiError
    from lightkube.resources.core_v1 import Secret

    try:
        secret = await _client.client().get(Secret, name, namespace=namespace)
    except ApiError as exc:
        logging.getLogger(__name__).warning("secret %s/%s not readable: %s", namespace, name, exc)
        return None
    data = (secret.data or {}).get(key)
    return base64.b64decode(data).decode() if data is not None else None


async def _get_stored(resource: Any, namespace: str, name: str) -> dict[str, Any] | None:
    """One object of the operator's own ``resource`` (a lightkube generic resource) as stored, or None on 404."""
    from lightkube import ApiError

    try:
        return as_dict(await _client.client().get(resource, name, namespace=namespace))
    except ApiError as exc:
        if exc.status.code == 404:
            return None
        raise


@dispatched("get_sglangserver")
async def get_sglangserver(namespace: str, name: str) -> dict[str, Any] | None:
    """The SGLangServer as stored, or None when it does not exist."""
    return await _get_stored(_sglangserver(), namespace, name)


@dispatched("get_sglangtuning")
async def get_sglangtuning(namespace: str, name: str) -> dict[str, Any] | None:
    """The SGLangTuning as stored, or None when it does not exist."""
    return await _get_stored(sglangtuning_resource(), namespace, name)


