"""Health of a multi-node SGLangServer's LeaderWorkerSet groups, derived purely from its Pod objects.

A group is the leader pod (label ``leaderworkerset.sigs.k8s.io/worker-index: "0"``, node rank 0, the only one
serving SGLang's API) and its workers (same ``leaderworkerset.sigs.k8s.io/group-index``). The group counts as one
replica: it is Ready when its leader is Ready and all ``size`` pods exist and are Ready; a leader that is not
Ready makes its group not Ready even while its workers answer (their health endpoint is a dummy: SGLang's
``launch_dummy_health_check_server`` answers 200 whatever the leader does). The group's revision is its
leader's ``sglang-operator.io/revision`` label, so counting per revision, ``/server_info``, ``/metrics``, the
rollback's samples and the readiness all come from leaders (:func:`leader_pods`, ``PodHealth.pod_ips``).

:func:`group_health` gives the same :class:`~sglang_operator.decisions.pods.PodHealth` as
:func:`~sglang_operator.decisions.pods.pod_health` does for single pods (counts are groups: ``status.replicas``
/ ``readyReplicas`` of the scale subresource); :func:`server_health` picks one by ``spec.parallelism.nodes``.

Without the LeaderWorkerSet API in the cluster nothing is applied: :func:`lws_missing` is the status saying so
(``Ready=False``, reason ``LeaderWorkerSetMissing``, how to install it) and :func:`waiting_for_lws` tells the
observer to re-check.
"""

from __future__ import annotations

import copy
import datetime as dt
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from sglang_operator.api.analysis import CanaryState
from sglang_operator.api.base import truncate
from sglang_operator.api.status import SGLangServerStatus
from sglang_operator.builders.labels import REVISION_LABEL
from sglang_operator.builders.leaderworkerset import (
    API_VERSION,
    GROUP_INDEX_LABEL,
    LEADER_INDEX,
    SET_NAME_LABEL,
    WORKER_INDEX_LABEL,
)
from sglang_operator.decisions.conditions import condition, merge_stored
from sglang_operator.decisions.pods import PodHealth, crash_text, is_ready, never_starts, pod_health, restart_count
from sglang_operator.decisions.sampling.model import PodView

LWS_MISSING = "LeaderWorkerSetMissing"
LWS_VERSION = "v0.7.0"
LWS_INSTALL = (
    f"kubectl apply --server-side -f https://github.com/kubernetes-sigs/lws/releases/download/{LWS_VERSION}/"
    "manifests.yaml"
)


@dataclass(frozen=True)
class Group:
    """One LeaderWorkerSet group: its index, leader pod (None while it is being recreated) and workers; ``set_name``:
    the LeaderWorkerSet it belongs to (``NAME``, or ``NAME-canary`` during a canary: both number their groups from
    0)."""

    index: str
    leader: dict[str, Any] | None
    workers: list[dict[str, Any]] = field(default_factory=list)
    set_name: str = ""

    @property
    def revision(self) -> str | None:
        """The leader's revision label (the group's revision)."""
        if self.leader is None:
            return None
        labels: dict[str, str] = self.leader.get("metadata", {}).get("labels", {})
        return labels.get(REVISION_LABEL)

    def ready(self, size: int) -> bool:
        """Leader Ready, and ``size`` pods in all, every one Ready."""
        pods = self.pods
        return self.leader is not None and is_ready(self.leader) and len(pods) >= size and all(map(is_ready, pods))

    @property
    def pods(self) -> list[dict[str, Any]]:
        return ([self.leader] if self.leader is not None else []) + self.workers


def _labels(pod: Mapping[str, Any]) -> Mapping[str, str]:
    labels: Mapping[str, str] = pod.get("metadata", {}).get("labels") or {}
    return labels


def groups(pods: list[dict[str, Any]]) -> list[Group]:
    """The groups of ``pods`` (the pods of one SGLangServer's LeaderWorkerSets: ``NAME``, and ``NAME-canary``
    during a canary), by LeaderWorkerSet name (label ``leaderworkerset.sigs.k8s.io/name``) then group index: the
    two sets both have a group 0. Pods being deleted and pods without LWS labels are left out."""
    by_index: dict[tuple[str, str], tuple[list[dict[str, Any]], list[dict[str, Any]]]] = {}
    for pod in pods:
        labels = _labels(pod)
        if pod.get("metadata", {}).get("deletionTimestamp") or WORKER_INDEX_LABEL not in labels:
            continue
        key = (labels.get(SET_NAME_LABEL, ""), labels.get(GROUP_INDEX_LABEL, ""))
        leaders, workers = by_index.setdefault(key, ([], []))
        (leaders if labels[WORKER_INDEX_LABEL] == LEADER_INDEX else workers).append(pod)
    out = []
    for set_name, index in sorted(by_index, key=lambda k: (k[0], len(k[1]), k[1])):
        leaders, workers = by_index[(set_name, index)]
        out.append(Group(index, leaders[0] if leaders else None, workers, set_name))
    return out


def leader_pods(pods: list[dict[str, Any]], revision: str | None = None, ready_only: bool = True,
                size: int = 1) -> list[dict[str, Any]]:
    """The leader pods (where SGLang serves) of the groups of ``pods``: of ``revision`` when given, and of
    Ready groups of ``size`` pods when ``ready_only``. What ``/server_info``, ``/metrics`` and the rollback's
    samples read."""
    out = []
    for g in groups(pods):
        if g.leader is None or (revision is not None and g.revision != revision):
            continue
        if ready_only and not g.ready(size):
            continue
        out.append(g.leader)
    return out


def _stand_in(g: Group, size: int) -> dict[str, Any]:
    """One pod standing for group ``g`` in :func:`pod_health`: the leader's metadata (revision), the status of
    the pod to report (the leader's, or the first troubled worker's when the leader is fine), and a Ready
    condition saying whether the whole group is Ready."""
    assert g.leader is not None
    reported = g.leader
    if is_ready(g.leader):
        reported = next((w for w in g.workers if not is_ready(w)), g.leader)
    out = {"metadata": copy.deepcopy(g.leader.get("metadata", {})),
           "status": copy.deepcopy(reported.get("status", {}))}
    status = out["status"]
    status["podIP"] = g.leader.get("status", {}).get("podIP")
    ready = "True" if g.ready(size) else "False"
    conds = [c for c in status.get("conditions") or [] if c.get("type") != "Ready"]
    status["conditions"] = [*conds, {"type": "Ready", "status": ready}]
    return out


def group_health(pods: list[dict[str, Any]], size: int, desired: int, revision: str, generation: int,
                 now: dt.datetime) -> PodHealth:
    """:func:`~sglang_operator.decisions.pods.pod_health` over groups of ``size`` pods: ``desired`` groups at
    ``revision``. Counts are groups; ``pod_ips`` are the Ready leaders' IPs; a troubled worker's reason shows
    as the group's (Unschedulable, CrashLoopBackOff, ...). A group without a leader pod (being recreated by
    ``RecreateGroupOnPodRestart``) counts as missing."""
    stand_ins = [_stand_in(g, size) for g in groups(pods) if g.leader is not None]
    return pod_health(stand_ins, desired, revision, generation, now, REVISION_LABEL)


def serving_pods(pods: list[dict[str, Any]], spec: Any) -> list[dict[str, Any]]:
    """The pods SGLang is read from for a server of ``spec``: ``pods`` as they are single-node; multi-node one
    stand-in per group: its leader (name, labels, IP), Ready only when the whole group is, with the status of a
    troubled worker when the leader is fine (restart counts included). For the sampler's targets and probes."""
    nodes = int(spec.parallelism.nodes)
    if nodes == 1:
        return pods
    return [_stand_in(g, nodes) for g in groups(pods) if g.leader is not None]


def pod_views(pods: list[dict[str, Any]], spec: Any, revision: str) -> tuple[PodView, ...]:
    """The live pods of ``revision`` among ``pods`` (an SGLangServer's Pod objects, API JSON) as the rollback decision
    sees them, sorted by name. Single-node: each pod (``deletionTimestamp`` set: left out), its readiness, restarts,
    uid and last crash. Multi-node (``spec.parallelism.nodes`` > 1): one per group of ``revision``, the
    :func:`serving_pods` stand-in (named by its leader, Ready when the whole group is, the restarts of the pod
    reported for it), with the leader's own uid, restarts (``leader_restarts``) and last crash: only the leader's
    count towards ``maxRestartsBeforeReady``."""
    nodes = int(spec.parallelism.nodes)
    out = []
    if nodes == 1:
        for pod in pods:
            meta = pod.get("metadata") or {}
            if meta.get("deletionTimestamp") or (meta.get("labels") or {}).get(REVISION_LABEL) != revision:
                continue
            out.append(PodView(str(meta.get("name")), is_ready(pod), restart_count(pod), uid=meta.get("uid"),
                               crash=crash_text(pod), waiting=never_starts(pod)))
    else:
        for g in groups(pods):
            if g.leader is None or g.revision != revision:
                continue
            meta = g.leader.get("metadata") or {}
            out.append(PodView(str(meta.get("name")), g.ready(nodes), restart_count(_stand_in(g, nodes)),
                               uid=meta.get("uid"), leader_restarts=restart_count(g.leader),
                               crash=crash_text(g.leader), waiting=never_starts(g.leader)))
    return tuple(sorted(out, key=lambda v: v.name))


def server_health(pods: list[dict[str, Any]], spec: Any, revision: str, generation: int,
                  now: dt.datetime) -> PodHealth:
    """The health of an SGLangServer of ``spec`` (an ``SGLangServerSpec``): per group when
    ``spec.parallelism.nodes`` > 1, else per pod."""
    nodes = int(spec.parallelism.nodes)
    if nodes > 1:
        return group_health(pods, nodes, spec.replicas, revision, generation, now)
    return pod_health(pods, spec.replicas, revision, generation, now)


def serving_health(pods: list[dict[str, Any]], spec: Any, revision: str, canary: CanaryState | None,
                   generation: int, now: dt.datetime) -> PodHealth:
    """The health ``status`` reports for a server of ``spec`` serving ``revision`` (``status.revision``) while
    ``canary`` (``status.canary``, None: none) runs: without a canary, :func:`server_health` of every pod; during one,
    of the serving workload's pods (the canary revision's left out) against its share, ``canary.stableReplicas``;
    once the canary holds every replica (``stableReplicas`` 0 while ``spec.replicas`` > 0: promoting, until
    ``status.revision`` shows the canary's revision), of the canary's pods at its revision against ``spec.replicas``,
    so the server never reads Stopped (0 desired) while those pods serve; its ``pod_ips`` are then left empty
    (``/server_info`` is read from the serving revision's pods only)."""
    if canary is None:
        return server_health(pods, spec, revision, generation, now)
    if canary.stable_replicas == 0 and spec.replicas > 0:
        mine = [p for p in pods if ((p.get("metadata") or {}).get("labels") or {}).get(REVISION_LABEL)
                == canary.revision]
        return replace(server_health(mine, spec, canary.revision, generation, now), pod_ips=[])
    own = [p for p in pods if ((p.get("metadata") or {}).get("labels") or {}).get(REVISION_LABEL) != canary.revision]
    return server_health(own, spec.model_copy(update={"replicas": canary.stable_replicas}), revision, generation, now)


def lws_missing_message(api: str = API_VERSION) -> str:
    """The ``Ready`` message when the LeaderWorkerSet API is not served."""
    return (f"spec.parallelism.nodes > 1 needs the LeaderWorkerSet API ({api}), which this cluster does not serve: "
            f"install LeaderWorkerSet {LWS_VERSION} or newer ({LWS_INSTALL}; or its Helm chart). Nothing is "
            "applied until then; the operator checks again every status interval, no edit needed")


def lws_missing(status: SGLangServerStatus, warnings: list[str], generation: int, now: dt.datetime) -> dict[str, Any]:
    """Status while the LeaderWorkerSet API is missing: ``Ready=False`` reason ``LeaderWorkerSetMissing``
    (:func:`lws_missing_message`), ``Progressing=False`` with the same reason, ``SpecValid=True`` (the spec is
    valid: the cluster lacks a component; reason ``ValidWithWarnings`` listing ``warnings`` when any), phase
    ``Pending``. The last applied revision, if any, keeps running and keeps its ``status.revision``."""
    msg = lws_missing_message()
    if warnings:
        valid = condition("SpecValid", "True", "ValidWithWarnings", truncate("; ".join(warnings)), generation,
                          now)
    else:
        valid = condition("SpecValid", "True", "Valid", "spec is valid for its SGLang release", generation, now)
    conds = [valid, condition("Ready", "False", LWS_MISSING, msg, generation, now),
             condition("Progressing", "False", LWS_MISSING, msg, generation, now)]
    return {"phase": "Pending", "observedGeneration": generation,
            "conditions": merge_stored(status.conditions, conds)}


def waiting_for_lws(status: SGLangServerStatus) -> bool:
    """Whether ``status`` says the LeaderWorkerSet API was missing at the last reconcile (the observer then
    re-checks each tick)."""
    ready = status.condition("Ready")
    return ready is not None and ready.reason == LWS_MISSING
