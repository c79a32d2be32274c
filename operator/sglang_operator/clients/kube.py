"""Kubernetes access for the operator: server-side apply of children and reads of their state.

Uses lightkube's ``AsyncClient`` (server-side apply with field manager ``sglang-operator``;
configuration from ``KUBECONFIG`` or the in-cluster service account). Objects go in and come out as
plain dicts in the API's JSON shape. Errors: ``lightkube.ApiError`` (with the API server's status)
propagates to the caller; kopf turns it into a retry.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightkube import AsyncClient, codecs
from lightkube.resources.apps_v1 import Deployment
from lightkube.resources.core_v1 import Pod

FIELD_MANAGER = "sglang-operator"

_client: AsyncClient | None = None


def client() -> AsyncClient:
    """The process-wide client, created on first use."""
    global _client
    if _client is None:
        _client = AsyncClient(field_manager=FIELD_MANAGER)
    return _client


def _as_dict(obj: Any) -> dict[str, Any]:
    out: dict[str, Any] = obj.to_dict()
    return out


async def apply(manifest: Mapping[str, Any]) -> dict[str, Any]:
    """Server-side apply ``manifest`` (force: the operator owns the fields it renders); return the
    object as stored. An unchanged manifest is a no-op for the API server (resourceVersion kept)."""
    obj = codecs.from_dict(dict(manifest))
    result = await client().apply(obj, field_manager=FIELD_MANAGER, force=True)
    return _as_dict(result)


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
