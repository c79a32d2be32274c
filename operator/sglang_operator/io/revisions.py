"""The revision ledger in the API: ControllerRevisions owned by an SGLangServer (see
:mod:`sglang_operator.builders.revision` for their shape).

Objects go in and come out as plain dicts. Errors: ``lightkube.ApiError`` propagates, except where a function
says otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from lightkube import ApiError
from lightkube.resources.apps_v1 import ControllerRevision
from lightkube.types import PatchType

from sglang_operator.builders.revision import DIGEST_ANNOTATION, ledger_labels
from sglang_operator.io.api import dispatched
from sglang_operator.io.fence import FENCE
from sglang_operator.io.kube import FIELD_MANAGER, client


@dispatched("list_revisions")
async def list_revisions(namespace: str, server: str) -> list[dict[str, Any]]:
    """Every ledger ControllerRevision of SGLangServer ``namespace/server``, oldest ``revision`` number first."""
    labels: dict[str, Any] = dict(ledger_labels(server))
    items = [r.to_dict() async for r in client().list(ControllerRevision, namespace=namespace, labels=labels)]
    return sorted(items, key=lambda r: int(r.get("revision") or 0))


@dispatched("create_revision")
async def create_revision(manifest: Mapping[str, Any]) -> bool:
    """Create the ControllerRevision ``manifest``; False when one of that name exists already (its ``data`` is
    immutable: the same revision hash means the same pod template, so the existing one stands)."""
    FENCE.check(f"ControllerRevision {manifest['metadata']['name']}")
    try:
        obj: Any = ControllerRevision.from_dict(dict(manifest))
        await client().create(obj, field_manager=FIELD_MANAGER)
    except ApiError as exc:
        if exc.status.code == 409:
            return False
        raise
    return True


@dispatched("set_digest")
async def set_digest(namespace: str, name: str, digest_ref: str) -> None:
    """Record on ControllerRevision ``name`` the image reference by digest its pods ran."""
    FENCE.check(f"ControllerRevision {namespace}/{name}")
    patch = {"metadata": {"annotations": {DIGEST_ANNOTATION: digest_ref}}}
    await client().patch(ControllerRevision, name, patch, namespace=namespace, patch_type=PatchType.MERGE)


@dispatched("set_number")
async def set_number(namespace: str, name: str, number: int) -> None:
    """Set the ordinal ``revision`` of ControllerRevision ``name`` (a return to an earlier revision makes it the
    newest, as ``kubectl rollout undo`` does for Deployments)."""
    FENCE.check(f"ControllerRevision {namespace}/{name}")
    await client().patch(ControllerRevision, name, {"revision": number}, namespace=namespace,
                         patch_type=PatchType.MERGE)


@dispatched("delete_revision")
async def delete_revision(namespace: str, name: str, uid: str | None = None) -> None:
    """Delete ControllerRevision ``name`` (with ``uid``: only that very object, a uid precondition); a missing one is
    not an error."""
    from sglang_operator.io.kube_write import delete_with_uid

    FENCE.check(f"ControllerRevision {namespace}/{name}")
    try:
        await delete_with_uid(ControllerRevision, namespace, name, uid)
    except ApiError as exc:
        if exc.status.code != 404:
            raise
