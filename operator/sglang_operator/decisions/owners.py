"""Whose pod is it: a pod counts as a server's target (scraped, probed, sent its API key, counted in its health)
only when its chain of controller owner references reaches that server's own workload by uid (pure).

The chains the operator's workloads make (``metadata.ownerReferences`` with ``controller: true``):

- a Deployment's pod: Pod → ReplicaSet → Deployment → SGLangServer (the serving workload, a canary's, the one a
  promotion retired) or → SGLangTuning (a Shadow trial's workload);
- a LeaderWorkerSet's leader: Pod → StatefulSet → LeaderWorkerSet → SGLangServer; a worker: Pod → StatefulSet (the
  group's, owned by its leader pod) → Pod → StatefulSet → LeaderWorkerSet → SGLangServer.

A pod carrying the server's labels by hand (no controller, or a controller outside such a chain) is not a target;
neither is a ``hostNetwork: true`` pod (its IP is a node's, shared with whatever else listens there). The objects
between a pod and its owner are read by the caller (:mod:`sglang_operator.io.owners`): :func:`verdict` asks for the
next one it needs (:class:`Need`) and is called again once it is known.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

MAX_DEPTH = 6
"""Owner references followed at most from a pod (the longest legitimate chain, a worker's, has five)."""
WORKLOAD_KINDS = frozenset({"Deployment", "LeaderWorkerSet"})
"""Kinds whose controller owner may be the root (the server or the tuning)."""
BETWEEN_KINDS = frozenset({"ReplicaSet", "StatefulSet", "Pod", *WORKLOAD_KINDS})
"""Kinds a legitimate chain passes through below the root."""


@dataclass(frozen=True)
class Ref:
    """A controller owner reference: the owner's ``kind``, ``name`` and ``uid``."""

    kind: str
    name: str
    uid: str


class Refused(StrEnum):
    """Why a labelled pod is not a target (the ``reason`` label of ``sglang_operator_ignored_pods_total``)."""

    HOST_NETWORK = "hostNetwork"
    NO_CONTROLLER = "noController"
    FOREIGN_OWNER = "foreignOwner"


@dataclass(frozen=True)
class Need:
    """The chain goes through ``ref``, not known yet: read that object (its uid must be ``ref.uid``) and ask again."""

    ref: Ref


UNKNOWN = Ref("", "", "")
"""What a lookup answers for an object it has not read yet (compared by identity)."""


def controller_ref(obj: Mapping[str, Any] | None) -> Ref | None:
    """The controller owner reference of ``obj`` (API JSON), or None when it has none."""
    refs = ((obj or {}).get("metadata") or {}).get("ownerReferences") or []
    ref = next((r for r in refs if isinstance(r, Mapping) and r.get("controller")), None)
    if ref is None:
        return None
    return Ref(str(ref.get("kind") or ""), str(ref.get("name") or ""), str(ref.get("uid") or ""))


def verdict(pod: Mapping[str, Any], roots: Collection[str],
            owner_of: Callable[[Ref], Ref | None]) -> Refused | Need | None:
    """Whether ``pod`` (API JSON) is a target of the owner whose uid is one of ``roots`` (a server's, or a tuning's
    for its trials' pods): None when it is; a :class:`Refused` reason when it is not; :class:`Need` when an object
    of its chain must be read first. ``owner_of(ref)``: the controller owner reference of the object ``ref`` names
    when its uid is ``ref.uid``; None when it has none, does not exist, or has another uid; :data:`UNKNOWN` when
    not read yet."""
    if (pod.get("spec") or {}).get("hostNetwork"):
        return Refused.HOST_NETWORK
    ref = controller_ref(pod)
    if ref is None:
        return Refused.NO_CONTROLLER
    below = "Pod"
    for _ in range(MAX_DEPTH):
        if ref.uid in roots:
            return None if below in WORKLOAD_KINDS else Refused.FOREIGN_OWNER
        if ref.kind not in BETWEEN_KINDS or not ref.uid:
            return Refused.FOREIGN_OWNER
        up = owner_of(ref)
        if up is UNKNOWN:
            return Need(ref)
        if up is None:
            return Refused.FOREIGN_OWNER
        below, ref = ref.kind, up
    return Refused.FOREIGN_OWNER
