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
from sglang_operator.api.view import ObjectRef
from sglang_operator.builders.leaderworkerset import CRD_NAME as LWS_CRD
from sglang_operator.builders.leaderworkerset import KIND as LWS_KIND
from sglang_operator.builders.leaderworkerset import VERSION as LWS_VERSION
from sglang_operator.builders.monitoring import pod_monitor
from sglang_operator.decisions.groups import lws_missing_message
from sglang_operator.io import kube, kube_write
from sglang_operator.io.discovery import POD_MONITORS, PodMonitorMode


async def apply_children(rendered: builders.Rendered, owner: ObjectRef, workload: bool = True) -> None:
    """Server-side apply the Deployment (unless ``workload`` is False: a canary's stable share, scaled only), then
    the Service, then (per ``--pod-monitors``) the PodMonitor, each owned by ``owner`` (an SGLangServer).

    Raises :class:`ChildApplyError` (from the API server's ``lightkube.ApiError`` or a transport error); nothing
    after the failing child is applied. In
    ``auto`` mode a PodMonitor answered with 404 (its CRD just vanished) is skipped and discovered again later.
    """
    for child in (rendered.workload, rendered.service) if workload else (rendered.service,):
        try:
            await apply_owned(builders.adopt(child, owner.stub()), owner)
        except ChildApplyError:
            raise
        except Exception as err:
            if await lws_missing(child, err):
                raise LeaderWorkerSetMissing(lws_missing_message()) from err
            raise ChildApplyError(apply_failure(str(child.get("kind")), err)) from err
    try:
        await apply_pod_monitor(rendered, owner)
    except ChildApplyError:
        raise
    except Exception as err:
        raise ChildApplyError(apply_failure("PodMonitor", err)) from err


def controller_of(child: Mapping[str, Any] | None) -> Mapping[str, Any] | None:
    """The controller owner reference of ``child`` (API JSON; the one with ``controller: true``), or None."""
    refs = ((child or {}).get("metadata") or {}).get("ownerReferences") or []
    return next((r for r in refs if isinstance(r, Mapping) and r.get("controller")), None)


def not_owned(kind: str, live: Mapping[str, Any] | None, owner: ObjectRef) -> ChildConflict | None:
    """The refusal to write ``live`` (child ``kind`` as stored, read by name; None: it does not exist) for
    ``owner`` (an SGLangServer or SGLangTuning) unless ``owner``'s uid is its controller owner's: nothing is
    written without owning it (a server named like another's canary workload or a tuning's trial, an object the
    tenant made by hand). None when ``owner`` may write it."""
    if live is None:
        return None
    uid = owner.uid
    ref = controller_of(live)
    if ref is not None and uid and str(ref.get("uid") or "") == uid:
        return None
    meta = live.get("metadata") or {}
    holder = f"{ref.get('kind')} {ref.get('name')}" if ref is not None else None
    return ChildConflict(kind, f"{meta.get('namespace')}/{meta.get('name')}", holder)


async def apply_owned(manifest: dict[str, Any], owner: ObjectRef) -> None:
    """Server-side apply ``manifest`` (owned by ``owner``, :func:`sglang_operator.builders.adopt`) unless an object
    of that name is held by another controller owner, or by none (one GET first). Raises :class:`ChildConflict`,
    and what the GET or the apply raise (``lightkube.ApiError``, transport errors)."""
    meta = manifest["metadata"]
    live = await kube.get_object(str(manifest["kind"]), str(meta["namespace"]), str(meta["name"]))
    if (refused := not_owned(str(manifest["kind"]), live, owner)) is not None:
        raise refused
    await kube_write.apply(manifest)


async def delete_owned(kind: str, namespace: str, name: str, owner: ObjectRef) -> bool:
    """Delete child ``kind`` ``namespace/name`` only when ``owner`` is its controller owner: one GET, then a delete
    with the object's uid as precondition (an object deleted and made again by someone else meanwhile is not
    deleted). False when it does not exist. Raises :class:`ChildConflict` when another owner (or none) holds the
    name, ``lightkube.ApiError`` for other answers."""
    live = await kube.get_object(kind, namespace, name)
    if live is None:
        return False
    if (refused := not_owned(kind, live, owner)) is not None:
        raise refused
    uid = str((live.get("metadata") or {}).get("uid") or "")
    return await kube_write.delete_object(kind, namespace, name, uid=uid or None)


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


async def up_to_date(rendered: builders.Rendered, owner: ObjectRef) -> bool:
    """Whether every child of ``rendered`` exists with every field the operator renders (owner references
    included): then applying it would change nothing, and a resume writes nothing. Any read failure says False."""
    children = [rendered.workload, rendered.service]
    if await POD_MONITORS.wanted():
        meta = rendered.deployment["metadata"]
        children.append(pod_monitor(meta["name"], meta["namespace"], str(rendered.command.version),
                                    POD_MONITORS.labels))
    try:
        for child in children:
            want = builders.adopt(dict(child), owner.stub())
            meta = want["metadata"]
            live = await kube.get_object(str(want["kind"]), str(meta["namespace"]), str(meta["name"]))
            if live is None or not contains(live, want):
                return False
    except Exception as exc:  # unreadable: apply, as before
        log.debug("children of %s not compared: %s", owner.name, exc)
        return False
    return True


async def apply_pod_monitor(rendered: builders.Rendered, owner: ObjectRef) -> None:
    """Server-side apply the PodMonitor of ``owner`` when :data:`POD_MONITORS` wants one."""
    from lightkube import ApiError

    if not await POD_MONITORS.wanted():
        return
    meta = rendered.deployment["metadata"]
    monitor = pod_monitor(meta["name"], meta["namespace"], str(rendered.command.version), POD_MONITORS.labels)
    try:
        await apply_owned(builders.adopt(monitor, owner.stub()), owner)
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
    or a 500 naming a field the schema lacks) and retrying cannot help; ``reason``: the ``Degraded`` condition's
    (``ApplyFailed``, or :data:`CHILD_CONFLICT` when another owner holds the child's name).
    """

    kind: str
    code: int | None
    message: str
    spec_fault: bool
    reason: str = "ApplyFailed"

    def describe(self) -> str:
        """One line for a condition and an event."""
        if self.reason == CHILD_CONFLICT:
            return self.message
        if self.spec_fault:
            return f"the API server refused the {self.kind} (HTTP {self.code}): {self.message}"
        status = f"HTTP {self.code}" if self.code is not None else "no answer"
        return f"applying the {self.kind} failed ({status}): {self.message}; retrying"


class ChildApplyError(Exception):
    """A child could not be applied; ``failure`` says why."""

    def __init__(self, failure: ApplyFailure) -> None:
        super().__init__(failure.describe())
        self.failure = failure


CHILD_CONFLICT = "ChildConflict"
"""Reason of the ``Degraded`` condition (and the Warning event) when a child's name is held by another owner."""


class ChildConflict(ChildApplyError):
    """A child's name is taken by an object another controller owner holds (``holder``: ``Kind name``, None when
    it has no controller owner): not taken over, not deleted. ``kind``: the child's kind; ``where``:
    ``namespace/name``. Not the spec's fault (renaming or deleting the holder ends it); retried."""

    def __init__(self, kind: str, where: str, holder: str | None) -> None:
        self.kind, self.where, self.holder = kind, where, holder
        held = f"is owned by {holder}" if holder else "exists without a controller owner"
        super().__init__(ApplyFailure(kind, 409, f"{kind} {where} {held}: not taken over", False,
                                      CHILD_CONFLICT))


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
