"""The revision ledger as ControllerRevisions (glue shared by the reconcile handler and the observer).

Every revision the operator applies gets one ControllerRevision owned by its SGLangServer
(:func:`sglang_operator.builders.revision.controller_revision`): the full spec, the rendered command line and
the SGLang release, plus (once its pods ran) the image digest. :func:`render_revision` renders a ledger entry
again, the image pinned to that digest, so restoring the stable revision runs exactly the bytes that were
measured, even if the tag was moved since. The ledger keeps ``historyLimit`` entries; the stable revision is
never pruned.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from sglang_operator import builders
from sglang_operator.api.rollback import same_spec
from sglang_operator.api.server import SGLangServer
from sglang_operator.api.view import ObjectRef, ServerView
from sglang_operator.builders.labels import REVISION_LABEL
from sglang_operator.builders.revision import (
    controller_revision,
    image_digest,
    pinned_image,
    recorded_digest,
    revision_name,
)
from sglang_operator.io import revisions as api
from sglang_operator.io.kube import FIELD_MANAGER

log = logging.getLogger("sglang_operator.control.ledger")


def _hash(cr: Mapping[str, Any]) -> str:
    return str(((cr.get("metadata") or {}).get("labels") or {}).get(REVISION_LABEL, ""))


class ForeignRevision(ValueError):
    """A ledger entry whose ``data`` renders to another revision than the one it is named and labelled for (and
    that ``status.revisions`` does not hold with that spec): not applied."""


def owned(crs: Sequence[Mapping[str, Any]], owner_uid: str) -> list[dict[str, Any]]:
    """The ControllerRevisions of ``crs`` that count as ledger entries of the SGLangServer of uid ``owner_uid``: its
    controller owner reference names that uid and the operator created it (field manager ``sglang-operator`` in
    ``managedFields``, which the API server fills). One made by someone else with ``create controllerrevisions``
    and the ledger's labels is ignored."""
    out = []
    for cr in crs:
        meta = cr.get("metadata") or {}
        ref = next((r for r in meta.get("ownerReferences") or [] if r.get("controller")), None)
        managers = {str(m.get("manager")) for m in meta.get("managedFields") or []}
        if ref is not None and owner_uid and str(ref.get("uid")) == owner_uid and FIELD_MANAGER in managers:
            out.append(dict(cr))
    return out


async def record(owner: ObjectRef, rendered: builders.Rendered, spec: Mapping[str, Any],
                 history_limit: int, keep: set[str], fresh: bool = False) -> None:
    """Make sure ``rendered.revision`` has its ControllerRevision (a new one numbered after the newest; a return
    to an earlier one renumbers it as the newest) and prune the oldest entries beyond ``history_limit``, never
    those in ``keep`` (the stable revision, the one serving). ``fresh``: the server has no ledger yet (no
    ``status.revisions``: a new one), so its first entry is created without listing the ledger first (one LIST
    less per server created); when a ControllerRevision of that name exists all the same (an earlier server of
    that name not yet garbage-collected) the ledger is listed as usual. Raises ``lightkube.ApiError``."""
    ns, name = owner.namespace, owner.name
    if fresh:
        first = controller_revision(name, ns, rendered.revision, 1, spec, rendered.command.command_line,
                                    str(rendered.command.version), _image(rendered))
        if await api.create_revision(builders.adopt(first, owner.stub())):
            return
    existing = owned(await api.list_revisions(ns, name), owner.uid)
    newest = max((int(r.get("revision") or 0) for r in existing), default=0)
    mine = next((r for r in existing if _hash(r) == rendered.revision), None)
    if mine is None:
        manifest = controller_revision(name, ns, rendered.revision, newest + 1, spec, rendered.command.command_line,
                                       str(rendered.command.version), _image(rendered))
        await api.create_revision(builders.adopt(manifest, owner.stub()))
        existing.append(manifest)
    elif int(mine.get("revision") or 0) != newest:
        await api.set_number(ns, revision_name(name, rendered.revision), newest + 1)
        mine["revision"] = newest + 1
    existing.sort(key=lambda r: int(r.get("revision") or 0))
    keep = keep | {rendered.revision}
    extra = len(existing) - history_limit
    for cr in existing:
        if extra <= 0:
            break
        if _hash(cr) not in keep:
            await api.delete_revision(ns, cr["metadata"]["name"], cr["metadata"].get("uid"))
            extra -= 1


def _image(rendered: builders.Rendered) -> str:
    return str(builders.pod_templates(rendered.workload)[0]["spec"]["containers"][0]["image"])


async def note_digest(namespace: str, server: str, revision: str, ready_pods: list[dict[str, Any]],
                      known: str | None) -> str | None:
    """Record the digest the Ready pods of ``revision`` run on its ControllerRevision (once; ``known`` is what
    the caller knows is recorded already). Returns the digest; failures are logged, not raised."""
    digest = image_digest(ready_pods)
    if digest is None or digest == known:
        return known
    try:
        await api.set_digest(namespace, revision_name(server, revision), digest)
    except Exception as exc:  # informative: the rollback then pins nothing, it still restores the spec
        log.warning("%s/%s: image digest of %s not recorded: %s", namespace, server, revision, exc)
        return known
    return digest


async def load(namespace: str, server: str, revision: str, owner_uid: str) -> dict[str, Any] | None:
    """The ControllerRevision of ``revision`` of SGLangServer ``namespace/server`` (uid ``owner_uid``), or None
    when its ledger has none (:func:`owned`: one it does not own, or the operator did not write, is none)."""
    crs = owned(await api.list_revisions(namespace, server), owner_uid)
    return next((r for r in crs if _hash(r) == revision), None)


def render_revision(view: ServerView, cr: Mapping[str, Any]) -> builders.Rendered:
    """Render ledger entry ``cr`` for the SGLangServer of ``view``: its spec (with the object's current ``replicas``:
    scaling is the user's, not the revision's), the image pinned to the recorded digest, the revision label kept
    (the hash is over the template as first applied). An entry that renders to another hash is applied under its
    recorded one only when ``status.revisions`` (written by the operator alone) holds that revision with the same
    spec (the operator's defaults changed with an upgrade); else it is refused. Raises ``SpecError`` /
    ``builders.InvalidSpec``, :class:`ForeignRevision`."""
    spec = dict(cr["data"]["spec"])
    if "replicas" in view.spec_data:
        spec["replicas"] = view.spec_data["replicas"]
    server: SGLangServer = view.parse_with(spec)
    rendered = builders.render(server)
    if rendered.revision != _hash(cr):
        record = view.status.record(_hash(cr))
        if record is None or not same_spec(record.spec, cr["data"]["spec"]):
            raise ForeignRevision(f"ControllerRevision {cr['metadata'].get('name')} renders as revision "
                                  f"{rendered.revision}, not {_hash(cr)}, and status.revisions does not hold that "
                                  f"spec: not applied")
        log.warning("%s: ledger entry %s renders as %s (operator upgrade?); applying it under its recorded hash",
                    server.name, _hash(cr), rendered.revision)
    return pinned(rendered, recorded_digest(cr), _hash(cr))


def workload_image(workload: Mapping[str, Any] | None) -> str | None:
    """The image of the ``sglang`` container of a workload's (first) pod template, as stored; None without one."""
    if not workload:
        return None
    try:
        return str(builders.pod_templates(dict(workload))[0]["spec"]["containers"][0]["image"])
    except (KeyError, IndexError, TypeError):
        return None


def pinned(rendered: builders.Rendered, digest_ref: str | None, revision: str | None = None) -> builders.Rendered:
    """``rendered`` with the image of every pod template (a Deployment's, a LeaderWorkerSet's leader and worker)
    pinned to the digest of ``digest_ref`` (:func:`pinned_image`; unchanged without a digest) and, when given,
    labelled ``revision`` (the hash over the template as first applied: a pinned image never changes a revision).
    A copy: ``rendered`` is left as it was."""
    dep = copy.deepcopy(rendered.workload)
    templates = builders.pod_templates(dep)  # one of a Deployment, leader and worker of a LeaderWorkerSet
    for template in templates:
        container = template["spec"]["containers"][0]
        container["image"] = pinned_image(container["image"], digest_ref)
    if revision is None:
        return replace(rendered, workload=dep)
    for m in (dep["metadata"], *(t["metadata"] for t in templates)):
        m["labels"][REVISION_LABEL] = revision
        m.setdefault("annotations", {})[REVISION_LABEL] = revision
    return replace(rendered, workload=dep, revision=revision)


async def record_applied(view: ServerView, rendered: builders.Rendered, spec: Mapping[str, Any],
                         history_limit: int) -> None:
    """Record ``rendered`` (applied from ``spec``) in the ControllerRevision ledger; failures are logged (the
    ledger in status still holds the spec), never raised."""
    status = view.status
    keep = {r for r in (status.stable_revision, status.revision) if r}
    try:
        await record(view.ref, rendered, spec, history_limit, keep, fresh=not status.revisions)
    except Exception as exc:
        log.warning("%s/%s: ControllerRevision of %s not recorded: %s", view.namespace, view.name,
                    rendered.revision, exc)
