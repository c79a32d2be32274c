"""The one way the CLI writes an SGLangServer's spec (``undo`` and ``tune apply``): the plan of
:mod:`sglang_operator.plugin.undo` (a JSON patch under the ``resourceVersion`` read, the last-applied annotation
rewritten for client-side ``kubectl apply``, the right field manager), written with retries on 409, then the
server-side apply manager made the one owner of what was written (a second write, no value changed), so the
user's next ``kubectl apply`` of their own file, either way, replaces it field for field.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sglang_operator.plugin import undo as undo_plan

ATTEMPTS = 5
"""Writes tried when the object changed between its read and its write (409 each time)."""


@dataclass(frozen=True)
class Written:
    """What :func:`write_spec` did: ``plan`` (its patch empty when the spec was the target already), ``body`` (the
    object as read for the write), ``target`` (the spec asked for)."""

    plan: undo_plan.Plan
    body: dict[str, Any]
    target: dict[str, Any]


def write_spec(client: Any, namespace: str, name: str, read: Callable[[], dict[str, Any]],
               target_of: Callable[[dict[str, Any]], Mapping[str, Any]], schema: Mapping[str, Any], *,
               with_policy: bool, applier: str, refused: Callable[[str], Exception]) -> Written:
    """Write the spec ``target_of(body)`` returns for the object ``read()`` returns (called again after a 409) into
    SGLangServer ``namespace/name``: the revision keys of the spec (all but ``replicas``, and ``rollback`` /
    ``strategy`` unless ``with_policy``) are set as the target has them. ``refused(message)`` is raised when the API
    server refuses the write for another reason than a conflict (or conflicts :data:`ATTEMPTS` times).
    ``target_of`` may raise to refuse a target."""
    from lightkube import ApiError
    from lightkube.types import PatchType

    from sglang_operator.io.kube import sglangserver_resource

    for attempt in range(1, ATTEMPTS + 1):
        body = read()
        target = dict(target_of(body))
        plan = undo_plan.plan(body, target, schema, with_policy=with_policy, applier=applier)
        if not plan.patch:
            return Written(plan, body, target)
        try:
            client.patch(sglangserver_resource(), name, plan.patch, namespace=namespace, patch_type=PatchType.JSON,
                         field_manager=plan.field_manager)
        except ApiError as exc:
            if exc.status.code == 409 and attempt < ATTEMPTS:
                continue  # changed since it was read: read it again
            raise refused(str(exc.status.message)) from None
        return Written(plan, body, target)
    raise AssertionError("unreachable")  # pragma: no cover


def ownership(client: Any, namespace: str, name: str, read: Callable[[], dict[str, Any]], plan: undo_plan.Plan,
              schema: Mapping[str, Any], what: str = "undo") -> str:
    """Make ``plan.applier`` (server-side apply) the one owner of what was written (a second write, no value
    changes); returns the line saying how a later ``kubectl apply`` will treat it (``what``: the command's name)."""
    from lightkube import ApiError
    from lightkube.types import PatchType

    from sglang_operator.io.kube import sglangserver_resource

    said = []
    if plan.last_applied is not None:
        said.append(f"the {undo_plan.LAST_APPLIED} annotation holds it (kubectl apply)")
    if plan.applier is not None:
        applied = undo_plan.applied_spec(plan.spec, plan.revision_keys, schema)
        for attempt in range(1, ATTEMPTS + 1):
            body = read()
            fields = undo_plan.owned(body, plan.applier, plan.revision_keys, applied)
            if fields is None:
                break
            rv = body["metadata"]["resourceVersion"]
            patch = [{"op": "replace", "path": "/metadata/resourceVersion", "value": rv},
                     {"op": "replace", "path": "/metadata/managedFields", "value": fields}]
            try:
                client.patch(sglangserver_resource(), name, patch, namespace=namespace, patch_type=PatchType.JSON,
                             field_manager=undo_plan.UNDO_MANAGER)
                break
            except ApiError as exc:
                if exc.status.code == 409 and attempt < ATTEMPTS:
                    continue
                return (f"warning: the fields {what} wrote are not owned by field manager {plan.applier}: "
                        f"{exc.status.message}; a later kubectl apply --server-side may leave some of them")
        said.append(f"field manager {plan.applier} owns it (kubectl apply --server-side)")
    if not said:
        return (f"ownership: written with field manager {plan.field_manager}; neither kubectl apply nor a "
                f"server-side apply by {undo_plan.SERVER_SIDE_MANAGER!r} manages this object (--field-manager names "
                "another)")
    return f"ownership: what {what} wrote is replaced by your next apply: {'; '.join(said)}"
