"""The revision ledger's objects: one ``apps/v1`` ControllerRevision per revision that ran (pure).

A ControllerRevision (``k8s.io/api/apps/v1`` ``ControllerRevision``) is what the StatefulSet and DaemonSet
controllers keep their history in: immutable ``data`` plus an ordinal ``revision``. Ours, named
``<server>-<revision hash>`` and owned by the SGLangServer, holds in ``data`` the full spec that produced the
revision, the rendered command line and the SGLang release; the image digest that actually ran (from the pods'
``imageID``) is learned later, so it lives in the annotation :data:`DIGEST_ANNOTATION` (``data`` is
immutable once created). Figures and verdicts stay in ``status.revisions`` (they change).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sglang_operator.api.base import GROUP
from sglang_operator.api.rollback import without_default_prompt
from sglang_operator.builders.labels import MANAGED_BY, MANAGED_BY_LABEL, REVISION_LABEL, selector_labels

DIGEST_ANNOTATION = f"{GROUP}/image-digest"
"""Annotation of a ControllerRevision: the image reference by digest its pods ran (``repo@sha256:…``)."""
KIND_LABEL = f"{GROUP}/ledger"
"""Label marking a ControllerRevision as an SGLangServer ledger entry (value ``"true"``)."""


def revision_name(server: str, revision: str) -> str:
    """``<server>-<revision>``: the ControllerRevision's name (at most 63 + 11 characters; a DNS subdomain)."""
    return f"{server}-{revision}"


def ledger_labels(server: str) -> dict[str, str]:
    """Labels selecting every ledger ControllerRevision of SGLangServer ``server``."""
    return {**selector_labels(server), MANAGED_BY_LABEL: MANAGED_BY, KIND_LABEL: "true"}


def controller_revision(
    server: str, namespace: str, revision: str, number: int, spec: Mapping[str, Any], command: str,
    sglang_version: str, image: str,
) -> dict[str, Any]:
    """The ControllerRevision dict (no ownerReferences: :func:`sglang_operator.builders.adopt` adds them).

    ``number``: the ordinal ``revision`` field (1, 2, … in the order revisions were first applied).
    ``spec``: the SGLangServer spec (camelCase dict) that rendered ``revision``, kept without a default probe prompt
    (``api.rollback.without_default_prompt``). Shape of ``data``:
    ``{spec, command, sglangVersion, image}``.
    """
    return {
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": {
            "name": revision_name(server, revision),
            "namespace": namespace,
            "labels": {**ledger_labels(server), REVISION_LABEL: revision},
        },
        "data": {"spec": without_default_prompt(spec), "command": command, "sglangVersion": sglang_version,
                 "image": image},
        "revision": number,
    }


def has_digest(image: str) -> bool:
    """Whether an image reference names its digest (``repo[:tag]@sha256:…``): pinned to exact bytes."""
    return "@sha256:" in image


def recorded_digest(cr: Mapping[str, Any] | None) -> str | None:
    """The ``repo@sha256:…`` reference a ledger ControllerRevision records (:data:`DIGEST_ANNOTATION`); None when
    ``cr`` is None or its pods never reported one."""
    value = (((cr or {}).get("metadata") or {}).get("annotations") or {}).get(DIGEST_ANNOTATION)
    return str(value) if value else None


def image_digest(pods: Sequence[Mapping[str, Any]], container: str = "sglang") -> str | None:
    """The ``repo@sha256:…`` reference that ``container`` of the Ready ``pods`` runs (their ``imageID``; a
    ``docker-pullable://`` or similar prefix is dropped), or None when no pod reports one or they disagree."""
    found: set[str] = set()
    for pod in pods:
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            ref = str(cs.get("imageID") or "")
            if cs.get("name") == container and has_digest(ref):
                found.add(ref.split("://", 1)[-1])
    return found.pop() if len(found) == 1 else None


def pinned_image(image: str, digest_ref: str | None) -> str:
    """``image`` pinned to the digest of ``digest_ref``: ``lmsysorg/sglang:v0.5.10-cu129@sha256:…`` (tag kept for
    humans and for the release parse; the runtime pulls by digest). ``image`` unchanged without a digest."""
    if not digest_ref or not has_digest(digest_ref):
        return image
    return f"{image.partition('@')[0]}@{digest_ref.partition('@')[2]}"
