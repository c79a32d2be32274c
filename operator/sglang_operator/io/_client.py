"""The operator's process-wide Kubernetes client: private to the io modules that read and write through it
(:mod:`~sglang_operator.io.kube`: reads; :mod:`~sglang_operator.io.kube_write` and
:mod:`~sglang_operator.io.revisions`: writes). The import-linter contract ``client`` (``.importlinter``) forbids every
other module to import it, and ``tests/repo/test_client_writes.py`` fails on a write method (patch, apply, create,
delete, replace, ...) called on it, or on a lightkube client of its own, anywhere else in the operator: every write
goes through a function of :mod:`sglang_operator.io.api`'s ``dispatched(..., fence=...)``, whose wrapper checks the
fence (:data:`sglang_operator.io.fence.FENCE`) before the cluster's call and before a bound implementation's (the
offline tests' fake) alike (docs/architecture.md, "Who writes what").

lightkube's ``AsyncClient``: server-side apply with field manager ``sglang-operator``; configuration from
``KUBECONFIG`` or the in-cluster service account.
"""

from __future__ import annotations

from typing import Any

from lightkube import AsyncClient

FIELD_MANAGER = "sglang-operator"

_client: AsyncClient | None = None


def client() -> AsyncClient:
    """The process-wide client, created on first use. HTTP/1.1 (httpx's pool: up to 100 connections, 20 kept
    alive): the slow kind, Service applies, is bounded apart (:data:`sglang_operator.io.kube_write.SERVICE_APPLIES`),
    so slow answers cannot hold every connection. Not HTTP/2: ``h2`` Huffman-encodes the never-indexed Authorization
    header on every request, which cost more CPU per request than the multiplexing saved (docs/architecture.md, "Under
    load")."""
    global _client
    if _client is None:
        _client = AsyncClient(field_manager=FIELD_MANAGER, http2=False)
    return _client


def forget() -> None:
    """Forget the process-wide client without closing it (one made on an event loop that has ended): the next
    :func:`client` makes a new one."""
    global _client
    _client = None


async def close() -> None:
    """Close the process-wide client, if one was made, and forget it."""
    made = _client
    forget()
    if made is not None:
        await made.close()


async def delete_with_uid(resource: Any, namespace: str, name: str, uid: str | None) -> None:
    """DELETE ``namespace/name`` of lightkube ``resource`` with background propagation and, with ``uid``, that uid
    as ``DeleteOptions.preconditions.uid`` (the API server answers 409 Conflict when the object's uid is another).
    No fence check: called only by the fenced writes :func:`sglang_operator.io.kube_write.delete_object` and
    :func:`sglang_operator.io.revisions.delete_revision`. Raises ``lightkube.ApiError``."""
    options: dict[str, Any] = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Background"}
    if uid:
        options["preconditions"] = {"uid": uid}
    # lightkube's delete sends no body, and preconditions travel only in one: its request is built here
    generic: Any = client()._client
    request = generic.prepare_request("delete", resource, name=name, namespace=namespace)
    request.data = options
    generic.handle_response("delete", await generic.send(generic.build_adapter_request(request)), request)
