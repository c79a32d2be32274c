"""Health of an SGLangServer's pods, derived purely from the Deployment and Pod objects.

Input shapes are the Kubernetes API's JSON (``apps/v1`` Deployment, ``v1`` Pod) as dicts; output is a
:class:`PodHealth` whose conditions use the ``metav1.Condition`` shape. Reasons surfaced come from the
scheduler (``PodScheduled=False, reason=Unschedulable`` with its message, e.g. ``0/2 nodes are
available: 2 Insufficient nvidia.com/gpu``) and the kubelet (``waiting.reason=CrashLoopBackOff``, or a
``terminated`` state with reason ``Error`` / ``OOMKilled``, with the termination message that
``terminationMessagePolicy: FallbackToLogsOnError`` fills from the log tail: the kubelet keeps the last 80 lines
or 2 048 bytes). A crash message keeps its *end* (the exception and the lines before it: SGLang prints its
whole ``server_args=ServerArgs(...)`` dump first, the cause last), cut to :data:`MESSAGE_LIMIT` characters so
the Degraded condition and its event (1 024 characters) carry the same text.

Conditions: ``Ready`` (every desired replica Ready at the current revision), ``Available`` (at least one
replica serves, old revision included: the Deployment convention), ``Progressing`` and ``Degraded``.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from sglang_operator.api.base import MESSAGE_LIMIT
from sglang_operator.builders.labels import REVISION_LABEL
from sglang_operator.decisions.conditions import Condition, condition

#: Pod waiting reasons that mean the server cannot come up without a change.
BAD_WAITING = frozenset({
    "CrashLoopBackOff", "ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError",
    "InvalidImageName", "CreateContainerError", "RunContainerError",
})
NEVER_STARTS = frozenset({
    "ImagePullBackOff", "ErrImagePull", "CreateContainerConfigError", "InvalidImageName", "CreateContainerError",
    "RunContainerError",
})
"""Waiting reasons of a container that has never run (no crash to count): the revision fails like a crash loop
(``decisions.starts``)."""
ELLIPSIS = "…"


@dataclass(frozen=True)
class PodHealth:
    """What the pods say: counts, a phase and the Ready / Progressing / Degraded conditions."""

    replicas: int
    ready_replicas: int
    updated_replicas: int
    phase: str
    conditions: list[Condition] = field(default_factory=list)
    pod_ips: list[str] = field(default_factory=list)


def ready_condition(pod: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """The condition ``Ready=True`` of ``pod`` (API JSON; its ``lastTransitionTime`` says since when), or None when
    the pod is not Ready; the one test of pod readiness."""
    conds = (pod.get("status") or {}).get("conditions") or []
    return next((c for c in conds if c.get("type") == "Ready" and c.get("status") == "True"), None)


def is_ready(pod: Mapping[str, Any]) -> bool:
    """Whether ``pod`` (API JSON) has the condition ``Ready=True`` (:func:`ready_condition`)."""
    return ready_condition(pod) is not None


def tail(text: str, limit: int = MESSAGE_LIMIT) -> str:
    """The end of ``text`` in at most ``limit`` characters, starting at a line boundary when the cut falls
    inside a line that is not the last, and marked with a leading ``…`` when anything was cut."""
    text = text.strip()
    if len(text) <= limit:
        return text
    kept = text[len(text) - (limit - len(ELLIPSIS)):]
    if "\n" in kept:
        kept = kept[kept.index("\n") + 1:]
    return ELLIPSIS + kept


def _crash_text(name: str, terminated: dict[str, Any], fallback: str = "", limit: int = MESSAGE_LIMIT) -> str:
    """``container NAME exited with code N (Reason): <end of the termination message>``, at most ``limit``
    characters (the message's end is kept)."""
    code = terminated.get("exitCode")
    reason = terminated.get("reason")
    head = f"container {name} exited with code {code}" if code is not None else f"container {name} failed"
    if reason and reason not in ("Error",):
        head += f" ({reason})"
    msg = (terminated.get("message") or fallback or "").strip()
    if not msg:
        return head
    return f"{head}: {tail(msg, max(len(ELLIPSIS) + 1, limit - len(head) - 2))}"


def restart_count(pod: Mapping[str, Any]) -> int:
    """Sum of the ``restartCount`` of ``pod``'s containers (API JSON)."""
    return sum(int(cs.get("restartCount") or 0) for cs in (pod.get("status") or {}).get("containerStatuses") or [])


CRASH_QUOTE_LIMIT = 600
"""Characters at most of a crash quoted in the rollback's reason (the revision, the restart count and the stable
revision's name fit beside it in the 1 024 of a condition or an event)."""


def crash_text(pod: Mapping[str, Any], limit: int = CRASH_QUOTE_LIMIT) -> str | None:
    """The last crash of ``pod`` (API JSON) in at most ``limit`` characters, or None: the first container whose
    ``lastState.terminated`` (a restarted container) or ``terminated`` state has a non-zero exit code, as
    ``container NAME exited with code N: <end of the termination message>`` (the message is what
    ``terminationMessagePolicy: FallbackToLogsOnError`` fills from the log tail, e.g. SGLang's ``RuntimeError: Not
    enough memory. ...``)."""
    for cs in (pod.get("status") or {}).get("containerStatuses") or []:
        for terminated in ((cs.get("state") or {}).get("terminated"), (cs.get("lastState") or {}).get("terminated")):
            if terminated and terminated.get("exitCode") not in (None, 0):
                return _crash_text(str(cs.get("name")), terminated, limit=limit)
    return None


def never_starts(pod: Mapping[str, Any], limit: int = CRASH_QUOTE_LIMIT) -> str | None:
    """``REASON: message`` of the first container (init containers first) of ``pod`` (API JSON) waiting with a
    reason of :data:`NEVER_STARTS`, in at most ``limit`` characters; None when none is."""
    status = pod.get("status") or {}
    for cs in [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]:
        waiting = (cs.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") in NEVER_STARTS:
            text = f"{waiting['reason']}: {waiting.get('message') or 'no message'}"
            return text if len(text) <= limit else text[:limit - 1] + ELLIPSIS
    return None


def _trouble(pod: dict[str, Any]) -> tuple[str, str] | None:
    """(reason, message) of the first problem of ``pod``, or None. Messages fit :data:`MESSAGE_LIMIT`."""
    status = pod.get("status", {})
    for c in status.get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return c.get("reason") or "Unschedulable", tail(c.get("message") or "")
    for cs in status.get("containerStatuses") or []:
        name = str(cs.get("name"))
        state = cs.get("state") or {}
        waiting = state.get("waiting") or {}
        if waiting.get("reason") in BAD_WAITING:
            last = (cs.get("lastState") or {}).get("terminated")
            if last:
                return waiting["reason"], _crash_text(name, last, waiting.get("message") or "")
            return waiting["reason"], tail(waiting.get("message") or "")
        terminated = state.get("terminated") or {}
        if terminated and terminated.get("exitCode") not in (None, 0):
            return terminated.get("reason") or "Error", _crash_text(name, terminated)
    if status.get("phase") == "Failed":
        return status.get("reason") or "PodFailed", tail(status.get("message") or "")
    return None


def trouble(pod: dict[str, Any]) -> str | None:
    """The first problem of ``pod`` (API JSON) as ``Reason: message`` (``Unschedulable: 0/3 nodes are available: 3
    Insufficient nvidia.com/gpu``, a crash loop's termination message), or None."""
    found = _trouble(pod)
    return None if found is None else f"{found[0]}: {found[1]}" if found[1] else found[0]


def pod_health(
    pods: list[dict[str, Any]], desired: int, revision: str, generation: int, now: dt.datetime,
    revision_label: str = REVISION_LABEL,
) -> PodHealth:
    """Summarise ``pods`` (all pods of one SGLangServer) against ``desired`` replicas at ``revision``.

    Pods being deleted are ignored; only pods labelled with the current ``revision`` count as updated and
    toward ``Ready``; ``Available`` counts every live Ready pod (a pod of the previous revision still serves).
    """
    live = [p for p in pods if not p.get("metadata", {}).get("deletionTimestamp")]
    current = [p for p in live if p.get("metadata", {}).get("labels", {}).get(revision_label) == revision]
    ready = [p for p in current if is_ready(p)]
    serving = [p for p in live if is_ready(p)]
    ips = sorted(p["status"]["podIP"] for p in ready_with_ip(ready))
    trouble = next((t for t in map(_trouble, current) if t), None)

    def cond(t: str, s: Any, reason: str, msg: str) -> Condition:
        return condition(t, s, reason, tail(msg), generation, now)

    counts = f"{len(ready)}/{desired} replicas ready at revision {revision}"
    if desired == 0:
        available = cond("Available", "False", "ScaledToZero", "spec.replicas is 0")
    elif serving:
        available = cond("Available", "True", "MinimumReplicasAvailable",
                         f"{len(serving)}/{desired} replicas serve")
    else:
        available = cond("Available", "False", "MinimumReplicasUnavailable", f"0/{desired} replicas serve")
    if desired == 0:
        phase, conds = "Stopped", [
            cond("Ready", "False", "ScaledToZero", "spec.replicas is 0"),
            cond("Progressing", "False", "ScaledToZero", "no replicas requested"),
            cond("Degraded", "False", "ScaledToZero", "no replicas requested"),
        ]
    elif trouble is not None:
        reason, msg = trouble
        head = f"{counts}; {reason}: "
        phase, conds = "Degraded", [
            cond("Ready", "True" if len(ready) >= desired else "False", reason,
                 head + tail(msg, MESSAGE_LIMIT - len(head))),
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
    return PodHealth(len(live), len(ready), len(current), phase, [*conds, available], ips)


def live(pods: Iterable[Mapping[str, Any]], revision: str | None = None) -> list[dict[str, Any]]:
    """The pods of ``pods`` not being deleted, and labelled ``revision`` when given."""
    return [dict(p) for p in pods if not (p.get("metadata") or {}).get("deletionTimestamp") and (
        revision is None or ((p.get("metadata") or {}).get("labels") or {}).get(REVISION_LABEL) == revision)]


def ready_with_ip(pods: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The pods of ``pods`` that are Ready and have a pod IP (the ones that can be measured)."""
    return [dict(p) for p in pods if is_ready(p) and (p.get("status") or {}).get("podIP")]


def first_crash(pods: Iterable[Mapping[str, Any]], limit: int = CRASH_QUOTE_LIMIT) -> str | None:
    """The first of ``pods``' crashes (:func:`crash_text`), or None."""
    return next((text for text in (crash_text(p, limit) for p in pods) if text), None)


def first_trouble(pods: Iterable[dict[str, Any]]) -> str | None:
    """The first of ``pods``' problems (:func:`trouble`), or None."""
    return next((text for text in map(trouble, pods) if text), None)
