"""The objects between a labelled pod and its owner, read once and kept (a small cache keyed by kind, namespace
and name, checked by uid): what :func:`sglang_operator.decisions.owners.verdict` needs to tell the operator's own
pods from strangers carrying the same labels, without a GET per pod and tick.

One :data:`OWNERS` per process. A ReplicaSet, StatefulSet, Deployment or LeaderWorkerSet is read (one GET) the
first time a pod's chain goes through it, then again after :data:`REFRESH_SECONDS` (after
:data:`RECHECK_SECONDS` when a pod named it with a uid it does not have: a stranger's made-up reference); a leader
pod is looked up among the pods given. At most :data:`READS_PER_CALL` objects are read per call: a flood of
strangers costs a bounded number of reads per observation, its pods not targets meanwhile. A read that fails keeps
what was known. Each pod refused is counted once (``sglang_operator_ignored_pods_total{reason}``).
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from typing import Any

from prometheus_client import Counter

from sglang_operator.decisions.owners import UNKNOWN, Need, Ref, Refused, controller_ref, verdict

log = logging.getLogger("sglang_operator.io.owners")

IGNORED_PODS = Counter(
    "sglang_operator_ignored_pods", "Pods carrying a server's (or a trial's) labels that are not its targets, each "
    "counted once, by reason (hostNetwork, noController, foreignOwner).", ["reason"])
READS_PER_CALL = 16
"""Objects read at most per call of :meth:`OwnerCache.owned` (a multi-node server of 4 groups needs 6 the first
time: a StatefulSet per group, the leaders', the LeaderWorkerSet)."""
REFRESH_SECONDS = 600.0
"""How long an object read stays trusted before it is read again."""
RECHECK_SECONDS = 10.0
"""How long a reference whose uid is not the object's (or whose object is absent) is refused before the object is
read again: a server deleted and made again under its name gets a ReplicaSet of the same name and a new uid, whose
pods wait at most this long; a stranger's made-up references cost at most :data:`READS_PER_CALL` reads a call."""
SIZE = 4096
"""Objects (and refused pods remembered as counted) kept at most; the oldest go first."""

Pod = dict[str, Any]
Getter = Callable[[str, str, str], Awaitable[Mapping[str, Any] | None]]


class OwnerCache:
    """Objects by (kind, namespace, name) → (their uid or None when absent, their controller reference, when read).
    ``getter(kind, namespace, name)``: one GET (default :func:`sglang_operator.io.kube.get_object`); ``clock``:
    seconds, monotonic."""

    def __init__(self, getter: Getter | None = None, clock: Callable[[], float] = time.monotonic) -> None:
        self._getter = getter
        self._clock = clock
        self._objects: OrderedDict[tuple[str, str, str], tuple[str | None, Ref | None, float]] = OrderedDict()
        self._counted: OrderedDict[str, None] = OrderedDict()
        self.reads = 0
        """Objects read so far (for tests and figures)."""

    def _lookup(self, namespace: str, pods: Sequence[Mapping[str, Any]]) -> Callable[[Ref], Ref | None]:
        by_name = {str((p.get("metadata") or {}).get("name")): p for p in pods}
        now = self._clock()

        def owner_of(ref: Ref) -> Ref | None:
            if ref.kind == "Pod":  # a leader pod: among the same server's pods
                pod = by_name.get(ref.name)
                return controller_ref(pod) if pod is not None and _uid(pod) == ref.uid else None
            entry = self._objects.get((ref.kind, namespace, ref.name))
            if entry is None:
                return UNKNOWN
            uid, owner, at = entry
            if uid == ref.uid:
                return owner if now - at < REFRESH_SECONDS else UNKNOWN
            return None if now - at < RECHECK_SECONDS else UNKNOWN

        return owner_of

    async def owned(self, namespace: str, pods: Sequence[Mapping[str, Any]], roots: Collection[str]) -> list[Pod]:
        """The pods of ``pods`` (API JSON, one server's or trial's, in ``namespace``) whose controller chain reaches
        an owner of uid in ``roots``; the objects of their chains read as needed (at most :data:`READS_PER_CALL`),
        the refused counted. A pod whose chain could not be read yet is left out, uncounted."""
        owner_of, budget = self._lookup(namespace, pods), READS_PER_CALL
        out: list[Pod] = []
        for pod in pods:
            found = verdict(pod, roots, owner_of)
            while isinstance(found, Need) and budget > 0:
                budget -= 1
                await self._read(namespace, found.ref)
                owner_of = self._lookup(namespace, pods)
                found = verdict(pod, roots, owner_of)
            self._keep(pod, found, out)
        return out

    def owned_now(self, namespace: str, pods: Sequence[Mapping[str, Any]], roots: Collection[str]) -> list[Pod]:
        """:meth:`owned` from what is known already (no read): a pod whose chain is not known is left out."""
        owner_of = self._lookup(namespace, pods)
        out: list[Pod] = []
        for pod in pods:
            self._keep(pod, verdict(pod, roots, owner_of), out)
        return out

    def _keep(self, pod: Mapping[str, Any], found: Refused | Need | None, out: list[Pod]) -> None:
        if found is None:
            out.append(dict(pod))
        elif isinstance(found, Refused):
            key = _uid(pod) or str((pod.get("metadata") or {}).get("name"))
            if key not in self._counted:
                self._counted[key] = None
                IGNORED_PODS.labels(reason=found.value).inc()
                meta = pod.get("metadata") or {}
                log.info("pod %s/%s carries a server's labels but is not its own (%s): ignored",
                            meta.get("namespace"), meta.get("name"), found.value)
                while len(self._counted) > SIZE:
                    self._counted.popitem(last=False)

    async def _read(self, namespace: str, ref: Ref) -> None:
        """Read the object ``ref`` names (by kind and name) and keep its uid and controller reference; a failed read
        keeps what was known (for another :data:`RECHECK_SECONDS`)."""
        key = (ref.kind, namespace, ref.name)
        self.reads += 1
        obj: Mapping[str, Any] | None
        try:
            if self._getter is None:
                from sglang_operator.io import kube

                obj = await kube.get_object(ref.kind, namespace, ref.name)
            else:
                obj = await self._getter(ref.kind, namespace, ref.name)
        except Exception as exc:
            log.debug("%s %s/%s not read: %s", ref.kind, namespace, ref.name, exc)
            old = self._objects.get(key)
            if old is not None:  # trusted a while longer; else its pods wait, uncounted, for a read that works
                self._objects[key] = (old[0], old[1], self._clock() - REFRESH_SECONDS + RECHECK_SECONDS)
            return
        self._objects[key] = (_uid(obj) if obj is not None else None, controller_ref(obj), self._clock())
        self._objects.move_to_end(key)
        while len(self._objects) > SIZE:
            self._objects.popitem(last=False)

    def forget(self) -> None:
        """Drop everything read (tests)."""
        self._objects.clear()
        self._counted.clear()


def _uid(obj: Mapping[str, Any] | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("uid") or "")


OWNERS = OwnerCache()
"""The process's cache (the observer's, the drain's and the tunings' pods alike)."""
