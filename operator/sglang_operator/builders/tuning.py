"""A Shadow trial's workload (``SGLangTuning`` ``spec.mode: Shadow``), pure: the server's spec with the trial's
settings rendered by the same builders as the server, under the trial's name.

The Deployment ``<tuning>-trial-<n>`` is rendered as if it were an SGLangServer of that name, so its selector and
its pods carry ``app.kubernetes.io/instance: <tuning>-trial-<n>``, never the server's Service-selector labels
(:func:`~sglang_operator.builders.labels.selector_labels` of the server): no user request reaches a trial. It carries
:data:`TUNING_LABEL` (the SGLangTuning's name) and component ``tuning-trial``, one replica, the image pinned to the
digest of the revision serving (by the caller), and the SGLangTuning as its controller owner (garbage-collected
with it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sglang_operator import builders
from sglang_operator.api.base import GROUP
from sglang_operator.api.server import SGLangServer
from sglang_operator.api.spec import SGLangServerSpec
from sglang_operator.builders.labels import COMPONENT_LABEL
from sglang_operator.builders.monitoring import TRIAL_COMPONENT as TRIAL_POD_COMPONENT
from sglang_operator.builders.owner import adopt
from sglang_operator.builders.revision import pinned_image

TUNING_LABEL = f"{GROUP}/tuning"
"""Label of a Shadow trial's Deployment and pods: the SGLangTuning's name."""
TRIAL_COMPONENT = TRIAL_POD_COMPONENT
"""``app.kubernetes.io/component`` of a Shadow trial (a server's pods have ``server``); the scrape configs drop its
pods (:func:`~sglang_operator.builders.monitoring.discovery_filters`)."""


SHADOW_MULTINODE = "a Shadow trial of a multi-node server (spec.parallelism.nodes > 1) is not supported"
"""Why no Shadow trial of a LeaderWorkerSet server runs (an InPlace one does: on the server's own groups)."""


def shadow_refusal(spec: SGLangServerSpec) -> str | None:
    """Why a Shadow trial of ``spec`` (the server's, as the trial runs it) cannot run (:data:`SHADOW_MULTINODE`),
    or None."""
    return SHADOW_MULTINODE if spec.parallelism.nodes > 1 else None


@dataclass(frozen=True)
class TrialWorkload:
    """A trial rendered: ``manifest`` (the Deployment, owned by the SGLangTuning), ``revision`` (the pod template's
    hash as the server itself would render the settings: what ``tune apply`` would run), ``rendered`` (as the
    trial), ``version`` (the SGLang release)."""

    manifest: dict[str, Any]
    revision: str
    rendered: builders.Rendered


def trial_workload(spec: SGLangServerSpec, server_name: str, namespace: str, trial: str,
                   tuning: dict[str, Any], digest: str | None = None) -> TrialWorkload:
    """Render ``spec`` (the server's, with the trial's settings) as Deployment ``trial``, owned by ``tuning`` (the
    SGLangTuning object: apiVersion, kind, metadata.name/uid), the SGLang container's image pinned to ``digest``
    (the one the server's serving pods run; None: the tag). Raises :class:`~sglang_operator.builders.InvalidSpec`
    (the release's rules refuse it) or ``ValueError`` for a multi-node spec (:func:`shadow_refusal`)."""
    if (refused := shadow_refusal(spec)) is not None:
        raise ValueError(refused)
    as_server = builders.render(SGLangServer(metadata={"name": server_name, "namespace": namespace}, spec=spec))
    rendered = builders.render(SGLangServer(metadata={"name": trial, "namespace": namespace}, spec=spec))
    dep = rendered.workload
    tuning_name = str(tuning["metadata"]["name"])
    for meta in (dep["metadata"], dep["spec"]["template"]["metadata"]):
        meta["labels"][COMPONENT_LABEL] = TRIAL_COMPONENT
        meta["labels"][TUNING_LABEL] = tuning_name
    dep["spec"]["replicas"] = 1
    for container in dep["spec"]["template"]["spec"]["containers"]:
        if container.get("name") == "sglang":
            container["image"] = pinned_image(container["image"], digest)
    adopt(dep, tuning)
    return TrialWorkload(dep, as_server.revision, rendered)
