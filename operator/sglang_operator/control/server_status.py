"""The one writer of an SGLangServer's ``status`` and of the Events about it.

Every status write of a server goes through :func:`patch`: the observation's one patch per tick
(:meth:`sglang_operator.control.observer.Observer.persist`), the reconcile handler's patch after an apply or a refused
spec (:mod:`sglang_operator.control.handlers`), and the late LeaderWorkerSet apply's. Each is a JSON merge patch
with the view's ``metadata.resourceVersion`` as precondition: a patch decided from a stale view is refused (409)
and decided again from the newer object, never written. Features (a tuning, a canary, an autoscaler) never write
here: they ask in their own objects and the server's loop decides (docs/architecture.md, "Who writes what"). Only
this module, the apply path and the ledger import :mod:`sglang_operator.io.kube_write` (an import-linter contract).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sglang_operator.api.base import truncate
from sglang_operator.api.view import ObjectRef, ServerView
from sglang_operator.decisions import status as status_decisions
from sglang_operator.io import kube_write


class NoPrecondition(ValueError):
    """A status patch without a resourceVersion: every write of a server's status is decided from one view."""


async def patch(view: ServerView, merge_patch: Mapping[str, Any]) -> dict[str, Any] | None:
    """Write ``merge_patch`` (a JSON merge patch of ``status``) into the SGLangServer of ``view`` with the view's
    resourceVersion as precondition. Returns the object as patched, or None when it changed since (409) or is gone
    (404). Raises :class:`NoPrecondition` when the view has no resourceVersion,
    :class:`~sglang_operator.io.fence.NotLeader` when this process may not write, ``lightkube.ApiError`` for other
    answers."""
    if not view.resource_version:
        raise NoPrecondition(f"SGLangServer {view.namespace}/{view.name}: a status patch needs the "
                             "resourceVersion of the view it was decided from")
    return await kube_write.patch_status(view.namespace, view.name, view.resource_version, dict(merge_patch))


async def write_changed(view: ServerView, values: Mapping[str, Any]) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """Write what of ``values`` (top-level status keys) differs from the view's stored status (:func:`patch`).
    Returns (the object as patched, or None when refused as stale or when nothing differed; the delta written)."""
    stored = view.status_data
    delta = status_decisions.changed(stored, values)
    if not delta:
        return None, delta
    return await patch(view, status_decisions.merge_patch(stored, delta)), delta


async def event(about: ObjectRef, type_: str, reason: str, message: str) -> None:
    """Post an Event about the object ``about`` (an SGLangServer; ``Normal`` or ``Warning``; the message cut to the
    API's bound). Never raises (an event is informative only)."""
    await kube_write.post_event(about.stub(), type_, reason, truncate(message))
