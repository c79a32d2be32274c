"""The revision ledger in the API: ControllerRevisions owned by an SGLangServer (see
:mod:`sglang_operator.builders.revision` for their shape).

Objects go in and come out as plain dicts. The writes are marked ``dispatched(name, fence=...)``
(:mod:`sglang_operator.io.api`): the fence is checked in the wrapper, before this module's function or a bound
implementation runs; the client is the private one of :mod:`sglang_operator.io._client`. Errors:
``lightkube.ApiError`` propagates, except where a function says otherwise; a write refused by the fence raises
:class:`~sglang_operator.io.fence.NotLeader`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightkube import ApiError
from lightkube.resources.apps_v1 import ControllerRevision
from lightkube.types import PatchType

from sglang_operator.builders.revision import DIGEST_ANNOTATION, ledger_labels
from sglang_operator.io import _client
from sglang_operator.io._client import FIELD_MANAGER
from sglang_operator.io.api import dispatched


@dispatched("list_revisions")
async def list_revisions(namespace: str, server: str) -> list[dict[str, Any]]:
    """Every ledger ControllerRevision of SGLangServer ``namespace/server``, oldest ``revision`` number first."""
    labels: dict[str, Any] = dict(ledger_labels(server))
    items = [r.to_dict() async for r in _client.client().list(ControllerRevision, namespace=namespace, labels=labels)]
    return sorted(items, key=lambda r: int(r.get("revision") or 0))


@dispatched("create_revision", fence="create ControllerRevision")
async def create_revision(manifest: Mapping[str, Any]) -> bool:
    """Create the ControllerRevision ``manifest``; False when one of that name exists already (its ``data`` is
    immutable: the same revision hash means the same pod template, so the existing one stands)."""
    try:
        obj: Any = ControllerRevision.from_dict(dict(manifest))
        await _client.client().create(obj, field_manager=FIELD_MANAGER)
    except ApiError as exc:
        if exc.status.code == 409:
            return False
        raise
    return True


@dispatched("set_digest", fence="annotate the digest of ControllerRevision")
async def set_digest(namespace: str, name: str, digest_ref: str) -> None:
    """Record on ControllerRevision ``name`` the image reference by digest its pods ran."""
    patch = {"metadata": {"annotations": {DIGEST_ANNOTATION: digest_ref}}}
    await _client.client().patch(ControllerRevision, name, patch, namespace=namespace, patch_type=PatchType.MERGE)


@dispatched("set_number", fence="renumber ControllerRevision")
async def set_number(namespace: str, name: str, number: int) -> None:
    """Set the ordinal ``revision`` of ControllerRevision ``name`` (a return to an earlier revision makes it the
    newest, as ``kubectl rollout undo`` does for Deployments)."""
    await _client.client().patch(ControllerRevision, name, {"revision": number}, namespace=namespace,
                                 patch_type=PatchType.MERGE)


@dispatched("delete_revision", fence="delete ControllerRevision")
async def delete_revision(namespace: str, name: str, uid: str | None = None) -> None:
    """Delete ControllerRevision ``name`` (with ``uid``: only that very object, a uid precondition); a missing one is
    not an error."""
    try:
        await _client.delete_with_uid(ControllerRevision, namespace, name, uid)
    except ApiError as exc:
        if exc.status.code != 404:
            raise
