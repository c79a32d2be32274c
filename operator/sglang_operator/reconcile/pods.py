"""Health of an SGLangServer's pods, derived purely from the Deployment and Pod objects.

Input shapes are the Kubernetes API's JSON (``apps/v1`` Deployment, ``v1`` Pod) as dicts; output is a
:class:`PodHealth` whose conditions use the ``metav1.Condition`` shape. Reasons surfaced come from the
scheduler (``PodScheduled=False, reason=Unschedulable`` with its message, e.g. ``0/2 nodes are
available: 2 Insufficient nvidia.com/gpu``) and the kubelet (``waiting.reason=CrashLoopBackOff`` with the
termination message that ``terminationMessagePolicy: FallbackToLogsOnError`` fills from the log tail).
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from typing import Any

from sglang_operator.reconcile.conditions import Condition, condition

#: Pod waiting reasons that mean the server cannot come up without a change.
BAD_WAITING = frozenset({
    "CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError",
    "InvalidImageName", "CreateContainerError", "RunContainerError",
})
MESSAGE_LIMIT = 1024


@dataclass(frozen=True)
class PodHealth:
    """What the pods say: counts, a phase and the Ready / Progressing / Degraded conditions."""

    replicas: int
    ready_replicas: int
    updated_replicas: int
    phase: str
    conditions: list[Condition] = field(default_factory=list)
    pod_ips: list[str] = field(default_factory=list)


def _is_ready(pod: dict[str, Any]) -> bool:
    conds = pod.get("status", {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conds)


def _trouble(pod: dict[str, Any]) -> tuple[str, str] | None:
    """(reason, message) of the first problem of ``pod``, or None."""
    status = pod.get("status", {})
    for c in status.get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return c.get("reason") or "Unschedulable", c.get("message") or ""
    for cs in status.get("containerStatuses") or []:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in BAD_WAITING:
            last = (cs.get("lastState") or {}).get("terminated") or {}
            msg = last.get("message") or waiting.get("message") or ""
            code = last.get("exitCode")
            prefix = f"container {cs.get('name')} exited with code {code}" if code is not None else ""
            text = f"{prefix}: {msg.strip()}" if prefix and msg else (prefix or msg.strip())
            return waiting["reason"], text
    if status.get("phase") == "Failed":
        return status.get("reason") or "PodFailed", status.get("message") or ""
    return None


def pod_health(
    pods: list[dict[str, Any]], desired: int, revision: str, generation: int, now: dt.datetime,
    revision_label: str = "sglang-operator.io/revision",
) -> PodHealth:
    """Summarise ``pods`` (all pods of one SGLangServer) against ``desired`` replicas at ``revision``.

    Pods being deleted are ignored; only pods labelled with the current ``revision`` count as updated.
    """
    live = [p for p in pods if not p.get("metadata", {}).get("deletionTimestamp")]
    current = [p for p in live if p.get("metadata", {}).get("labels", {}).get(revision_label) == revision]
    ready = [p for p in current if _is_ready(p)]
    ips = sorted(p["status"]["podIP"] for p in ready if p.get("status", {}).get("podIP"))
    trouble = next((t for t in map(_trouble, current) if t), None)

    def cond(t: str, s: Any, reason: str, msg: str) -> Condition:
        return condition(t, s, reason, msg[:MESSAGE_LIMIT], generation, now)

    counts = f"{len(ready)}/{desired} replicas ready at revision {revision}"
    if desired == 0:
        phase, conds = "Stopped", [
            cond("Ready", "False", "ScaledToZero", "spec.replicas is 0"),
            cond("Progressing", "False", "ScaledToZero", "no replicas requested"),
            cond("Degraded", "False", "ScaledToZero", "no replicas requested"),
        ]
    elif trouble is not None:
        reason, msg = trouble
        phase, conds = "Degraded", [
            cond("Ready", "True" if len(ready) >= desired else "False", reason, f"{counts}; {reason}: {msg}"),
            cond("Progressing", "True" if len(ready) < desired else "False", reason, counts),
            cond("Degraded", "True", reason, msg or reason),
        ]
    elif len(ready) >= desired and len(live) == len(current):
        phase, conds = "Ready", [
            cond("Ready", "True", "AllReplicasReady", counts),
            cond("Progressing", "False", "RolloutComplete", counts),
            cond("Degraded", "False", "AllReplicasReady", counts),
        ]
    else:
        waiting = "old pods terminating" if len(live) > len(current) else "waiting for SGLang to load"
        phase, conds = "Progressing", [
            cond("Ready", "False", "ReplicasNotReady", f"{counts}; {waiting}"),
            cond("Progressing", "True", "RollingOut", f"{counts}; {waiting}"),
            cond("Degraded", "False", "RollingOut", counts),
        ]
    return PodHealth(len(live), len(ready), len(current), phase, conds, ips)
