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

Multi-node (``parallelism.nodes`` > 1) the two workloads are LeaderWorkerSets ``NAME`` and ``NAME-canary`` and a
replica is a group. A LeaderWorkerSet has no selector to set: it selects its pods by the labels it puts on them
itself, :data:`~sglang_operator.builders.leaderworkerset.SET_NAME_LABEL` (its name) plus the group and worker
indexes (sigs.k8s.io/lws ``pkg/controllers/leaderworkerset_controller.go``: the leader StatefulSet ``NAME`` selects
``leaderworkerset.sigs.k8s.io/name: NAME`` and ``worker-index: "0"``; each group's worker StatefulSet ``NAME-<g>``
adds ``group-index``), so neither set ever selects the other's pods. The track label is still put on both pod
templates, so the pods of each workload can be told apart by label as single-node ones are. Pod names cannot
collide: the canary's leaders are ``NAME-canary-<g>``, the stable's worker StatefulSets ``NAME-<g>`` (a number).
The one leader Service selects the leaders of both.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from sglang_operator.api.base import GROUP
from sglang_operator.builders.labels import REVISION_LABEL, selector_labels
from sglang_operator.builders.leaderworkerset import KIND as LWS_KIND
from sglang_operator.builders.leaderworkerset import pod_templates

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


def placed(workload: dict[str, Any], name: str, placed_as: str, replicas: int | None = None) -> dict[str, Any]:
    """The rendered ``workload`` of SGLangServer ``name`` (a Deployment, :func:`sglang_operator.builders.workload.
    deployment`, or a LeaderWorkerSet, :func:`sglang_operator.builders.leaderworkerset.leader_worker_set`) as the
    workload ``placed_as`` (``name`` or ``name-canary``) with ``replicas`` (pods, or groups of a LeaderWorkerSet;
    None: as rendered). A copy; the revision label stays (its hash excludes the track label). ``NAME-canary`` gets
    :data:`TRACK_LABEL` on its labels and pod templates (both of a LeaderWorkerSet); a Deployment gets the selector
    :func:`workload_selector` (a LeaderWorkerSet has none: it selects by its own name label). Raises ``ValueError``
    for another kind or another workload name."""
    kind = workload.get("kind")
    if kind not in ("Deployment", LWS_KIND):
        raise ValueError(f"a canary places Deployments and LeaderWorkerSets, not {kind}")
    if placed_as not in (name, canary_name(name)):
        raise ValueError(f"workload {placed_as} is neither {name} nor {canary_name(name)}")
    out = copy.deepcopy(workload)
    out["metadata"]["name"] = placed_as
    if replicas is not None:
        out["spec"]["replicas"] = replicas
    if placed_as == canary_name(name):
        out["metadata"]["labels"][TRACK_LABEL] = CANARY_TRACK
        for template in pod_templates(out):
            template["metadata"]["labels"][TRACK_LABEL] = CANARY_TRACK
    if kind == "Deployment":
        out["spec"]["selector"] = {"matchLabels": workload_selector(name, placed_as)}
    return out


def _template_revision(workload: Mapping[str, Any]) -> str | None:
    spec = workload.get("spec") or {}
    if workload.get("kind") == LWS_KIND:
        template = (spec.get("leaderWorkerTemplate") or {}).get("leaderTemplate") or {}
    else:
        template = spec.get("template") or {}
    value = ((template.get("metadata") or {}).get("labels") or {}).get(REVISION_LABEL)
    return str(value) if value else None


def replicas_only(live: Mapping[str, Any] | None, want: Mapping[str, Any]) -> bool:
    """Whether writing workload ``want`` (a Deployment or LeaderWorkerSet as placed: :func:`placed`) over ``live``
    (the object as the API server holds it; None: absent) must change ``spec.replicas`` only: ``live`` is the same
    workload and its pod template (a LeaderWorkerSet's leader template) carries ``want``'s revision label, so its
    pods run that revision already. A re-render of the same revision can still differ (an upgraded operator renders
    the ledger entry under its recorded hash, :func:`sglang_operator.control.ledger.render_revision`), and writing
    that template would roll every pod (every group) of the stable share during a canary; with this, only the scale
    is written (docs/canary.md)."""
    kind = want.get("kind")
    if live is None or kind not in ("Deployment", LWS_KIND) or live.get("kind", kind) != kind:
        return False
    if (live.get("metadata") or {}).get("name") != (want.get("metadata") or {}).get("name"):
        return False
    revision = _template_revision(want)
    return revision is not None and _template_revision(live) == revision
