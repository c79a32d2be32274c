"""A canary's two workloads (``spec.strategy.type: Canary``), pure: which Deployment is which, and the rendered
Deployment of a revision placed in either.

An SGLangServer ``NAME`` runs at most two Deployments, ``NAME`` and ``NAME-canary``, selected by the one Service
(its selector is :func:`~sglang_operator.builders.labels.selector_labels`, which both carry), so traffic splits by
ready pods. ``NAME`` keeps the selector it always had (a Deployment's selector is immutable, and an existing server's
``NAME`` must never be replaced for a canary); ``NAME-canary`` adds :data:`TRACK_LABEL` ``canary`` to its selector and
its pods, so it never selects a pod of ``NAME``. ``NAME``'s selector does match ``NAME-canary``'s pods by their
labels, yet it never adopts one: a Deployment owns pods only through its ReplicaSets, whose selectors add the
``pod-template-hash`` of their own template (the canary template differs by its track label, so its hash differs),
and a ReplicaSet adopts only pods without a controller reference (``k8s.io/kubernetes`` ``pkg/controller/
controller_ref_manager.go`` ``ClaimPods``: orphans only; ``pkg/controller/deployment/sync.go`` adds the hash to
the ReplicaSet's selector). docs/canary.md has the whole design.

Promotion restarts no pod: the canary workload takes every replica, the old one goes to 0 and is deleted, and the
canary workload becomes the serving one (``status.servingWorkload``); the next canary runs in the other name. The
revision hash is computed before the track label is added, so a revision is the same in either workload.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from sglang_operator.api.base import GROUP
from sglang_operator.builders.labels import REVISION_LABEL, selector_labels

TRACK_LABEL = f"{GROUP}/track"
"""Label of the pods (and selector) of the workload ``NAME-canary``: value :data:`CANARY_TRACK`."""
CANARY_TRACK = "canary"
CANARY_SUFFIX = "-canary"


def canary_name(name: str) -> str:
    """``NAME-canary``: the second workload of SGLangServer ``name``."""
    return f"{name}{CANARY_SUFFIX}"


def serving_name(name: str, serving_workload: str | None) -> str:
    """The Deployment serving SGLangServer ``name``: ``status.servingWorkload``, unset meaning ``name``."""
    return serving_workload or name


def other_name(name: str, serving_workload: str | None) -> str:
    """The Deployment a canary of SGLangServer ``name`` runs in: the one of ``name`` and ``name-canary`` that does not
    serve."""
    return canary_name(name) if serving_name(name, serving_workload) == name else name


def workload_selector(name: str, workload: str) -> dict[str, str]:
    """The ``matchLabels`` of Deployment ``workload`` of SGLangServer ``name``: :func:`selector_labels`, plus
    :data:`TRACK_LABEL` for ``NAME-canary``."""
    labels = selector_labels(name)
    if workload == canary_name(name):
        labels[TRACK_LABEL] = CANARY_TRACK
    return labels


def placed(deployment: dict[str, Any], name: str, workload: str, replicas: int | None = None) -> dict[str, Any]:
    """The rendered ``deployment`` of SGLangServer ``name`` (:func:`sglang_operator.builders.workload.deployment`)
    as Deployment ``workload`` (``name`` or ``name-canary``) with ``replicas`` (None: as rendered). A copy; the
    revision label stays (its hash excludes the track label). Raises ``ValueError`` for another kind (a
    LeaderWorkerSet canary is not supported yet) or another workload name."""
    if deployment.get("kind") != "Deployment":
        raise ValueError(f"a canary places Deployments, not {deployment.get('kind')}")
    if workload not in (name, canary_name(name)):
        raise ValueError(f"workload {workload} is neither {name} nor {canary_name(name)}")
    out = copy.deepcopy(deployment)
    out["metadata"]["name"] = workload
    if replicas is not None:
        out["spec"]["replicas"] = replicas
    if workload == canary_name(name):
        out["metadata"]["labels"][TRACK_LABEL] = CANARY_TRACK
        out["spec"]["template"]["metadata"]["labels"][TRACK_LABEL] = CANARY_TRACK
    out["spec"]["selector"] = {"matchLabels": workload_selector(name, workload)}
    return out


def _template_revision(workload: Mapping[str, Any]) -> str | None:
    labels = (((workload.get("spec") or {}).get("template") or {}).get("metadata") or {}).get("labels") or {}
    value = labels.get(REVISION_LABEL)
    return str(value) if value else None


def replicas_only(live: Mapping[str, Any] | None, want: Mapping[str, Any]) -> bool:
    """Whether writing Deployment ``want`` (as placed: :func:`placed`) over ``live`` (the object as the API server
    holds it; None: absent) must change ``spec.replicas`` only: ``live`` is the same Deployment and its pod template
    carries ``want``'s revision label, so its pods run that revision already. A re-render of the same revision can
    still differ (an upgraded operator renders the ledger entry under its recorded hash,
    :func:`sglang_operator.control.ledger.render_revision`), and writing that template would roll every pod of the
    stable share during a canary; with this, only the scale is written (docs/canary.md)."""
    if live is None or want.get("kind") != "Deployment" or live.get("kind", "Deployment") != "Deployment":
        return False
    if (live.get("metadata") or {}).get("name") != (want.get("metadata") or {}).get("name"):
        return False
    revision = _template_revision(want)
    return revision is not None and _template_revision(live) == revision
