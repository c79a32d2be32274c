"""The managed pods, known from a kopf watch (``control.handlers.pod_event``) instead of a LIST per namespace and
tick, and the view of them the sampler needs (:class:`Target`).

:class:`PodCache` holds the pods (API JSON, ``managedFields`` dropped) by namespace and SGLangServer (label
``app.kubernetes.io/instance``). A namespace is primed by one LIST the first time it is asked for, since kopf gives
no signal that its initial listing is complete and an empty cache must not read as "no pods". Events and the LIST
can race; ``metadata.resourceVersion`` (an integer in every etcd-backed API server) orders them, and a deleted
pod leaves a tombstone so an older LIST cannot bring it back.

A pod's labels say which server it claims; :meth:`PodCache.owned` keeps only those whose controller chain reaches
that server's own workload (:mod:`sglang_operator.io.owners`): a hand-made pod with the labels is never a target.
A pod IP belongs to one live pod at a time (SGLang pods never use ``hostNetwork``, and such a pod is no target):
when a pod arrives with an IP a cached pod holds, the older of the two (by resourceVersion) is gone even if its
DELETED event was lost in a watch gap, and is dropped at once, so the sampler never sends one server's API key to the
IP of another's pod.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from sglang_operator.builders.labels import INSTANCE_LABEL, REVISION_LABEL
from sglang_operator.decisions.pods import is_ready, restart_count
from sglang_operator.io.owners import OWNERS, OwnerCache

TOMBSTONES = 4096
"""Deleted pods remembered per namespace (oldest forgotten first)."""

Pod = dict[str, Any]


@dataclass(frozen=True)
class Target:
    """A live pod of a server as the sampler sees it: name, revision label, pod IP (None before one is assigned),
    Ready condition, and the sum of its containers' restart counts."""

    name: str
    revision: str
    ip: str | None
    ready: bool
    restarts: int


def targets(pods: Iterable[Mapping[str, Any]]) -> list[Target]:
    """The live pods (not being deleted) of ``pods`` as :class:`Target`, sorted by name."""
    out = []
    for p in pods:
        meta, status = p.get("metadata") or {}, p.get("status") or {}
        if meta.get("deletionTimestamp"):
            continue
        out.append(Target(str(meta.get("name")), str((meta.get("labels") or {}).get(REVISION_LABEL, "")),
                          status.get("podIP") or None, is_ready(p), restart_count(p)))
    return sorted(out, key=lambda t: t.name)


def _rv(pod: Mapping[str, Any]) -> int | None:
    rv = str((pod.get("metadata") or {}).get("resourceVersion") or "")
    return int(rv) if rv.isdigit() else None


def _ip(pod: Mapping[str, Any]) -> str | None:
    return str((pod.get("status") or {}).get("podIP") or "") or None


def _newer(new: int | None, old: int | None) -> bool:
    return new is None or old is None or new >= old


class PodCache:
    """Managed pods by (namespace, server); ``lister(namespace)`` LISTs the managed pods of a namespace."""

    def __init__(self, lister: Callable[[str], Awaitable[list[Pod]]], owners: OwnerCache | None = None) -> None:
        self._lister = lister
        self.owners = owners if owners is not None else OWNERS
        """Tells a server's own pods from strangers carrying its labels (:meth:`owned`)."""
        self._pods: dict[str, dict[str, Pod]] = {}
        self._by_server: dict[tuple[str, str], dict[str, Pod]] = {}
        self._tombstones: dict[str, dict[str, int | None]] = {}
        self._primed: set[str] = set()
        self._priming: dict[str, asyncio.Task[None]] = {}
        self._by_ip: dict[str, tuple[str, str]] = {}

    def apply(self, event_type: str | None, body: Mapping[str, Any]) -> None:
        """Apply one watch event (``ADDED``, ``MODIFIED``, ``DELETED``, or None for kopf's initial listing)."""
        meta = body.get("metadata") or {}
        ns, name = str(meta.get("namespace") or "default"), str(meta.get("name"))
        rv = _rv(body)
        known = self._pods.setdefault(ns, {}).get(name)
        if known is not None and not _newer(rv, _rv(known)):
            return
        tomb = self._tombstones.setdefault(ns, {})
        if event_type == "DELETED":
            self._bury(ns, name, rv)
            return
        if name in tomb:
            dead = tomb[name]
            if rv is not None and dead is not None and rv <= dead:
                return  # older than its deletion: a LIST or event from before it
            del tomb[name]
        pod = {k: v for k, v in body.items() if k != "metadata"}
        pod["metadata"] = {k: v for k, v in meta.items() if k != "managedFields"}
        ip = _ip(pod)
        holder = self._by_ip.get(ip) if ip else None
        if ip and holder is not None and holder != (ns, name):
            other = self._pods.get(holder[0], {}).get(holder[1])
            if other is not None and not _newer(rv, _rv(other)):
                self._bury(ns, name, rv)  # the newer pod holds the IP: this one is gone
                return
            self._bury(*holder, _rv(other) if other is not None else None)
        self._drop(ns, name)
        self._pods[ns][name] = pod
        server = str((meta.get("labels") or {}).get(INSTANCE_LABEL, ""))
        self._by_server.setdefault((ns, server), {})[name] = pod
        if ip:
            self._by_ip[ip] = (ns, name)

    def holds(self, body: Mapping[str, Any]) -> bool:
        """Whether the pod ``body`` (any version of it) is in the cache."""
        meta = body.get("metadata") or {}
        return str(meta.get("name")) in self._pods.get(str(meta.get("namespace") or "default"), {})

    def _bury(self, ns: str, name: str, rv: int | None) -> None:
        """Drop pod ``ns/name`` and remember it as deleted at ``rv``."""
        self._drop(ns, name)
        tomb = self._tombstones.setdefault(ns, {})
        tomb[name] = rv
        while len(tomb) > TOMBSTONES:
            del tomb[next(iter(tomb))]

    def _drop(self, ns: str, name: str) -> None:
        old = self._pods.get(ns, {}).pop(name, None)
        if old is not None:
            server = str((old["metadata"].get("labels") or {}).get(INSTANCE_LABEL, ""))
            self._by_server.get((ns, server), {}).pop(name, None)
            ip = _ip(old)
            if ip and self._by_ip.get(ip) == (ns, name):
                del self._by_ip[ip]

    async def prime(self, namespace: str) -> None:
        """LIST ``namespace`` once (concurrent callers share the LIST); raises what the lister raises (the next
        call tries again)."""
        if namespace in self._primed:
            return
        task = self._priming.get(namespace)
        if task is None:
            task = asyncio.get_running_loop().create_task(self._list(namespace))
            self._priming[namespace] = task
        try:
            await asyncio.shield(task)
        finally:
            if task.done():
                self._priming.pop(namespace, None)

    async def _list(self, namespace: str) -> None:
        listed = await self._lister(namespace)
        for pod in listed:
            self.apply(None, pod)
        names = {str(p["metadata"].get("name")) for p in listed}
        newest = max((rv for p in listed if (rv := _rv(p)) is not None), default=None)
        for name, pod in list(self._pods.get(namespace, {}).items()):
            rv = _rv(pod)
            if name in names:
                continue
            if not listed or newest is None or rv is None or rv <= newest:
                # deleted before the LIST, its DELETED event not seen (or never coming: a watch gap); a pod newer
                # than everything the LIST returned may have been created after it and is kept
                self._drop(namespace, name)
        self._primed.add(namespace)

    async def resync(self, namespace: str) -> None:
        """LIST ``namespace`` again and drop every cached pod the LIST no longer has (a pod deleted while the watch
        was away, whose DELETED event never comes): the sampler then no longer probes its IP."""
        await self._list(namespace)

    def namespaces(self) -> list[str]:
        """The namespaces listed once (those a resync lists again)."""
        return sorted(self._primed)

    def forget_server(self, namespace: str, server: str) -> None:
        """Drop the pods of a deleted SGLangServer (their own DELETED events may still come, and are harmless)."""
        for name in list(self._by_server.get((namespace, server), {})):
            self._drop(namespace, name)
        self._by_server.pop((namespace, server), None)

    async def pods(self, namespace: str, server: str) -> list[Pod]:
        """The pods of SGLangServer ``namespace/server`` (priming the namespace first if needed)."""
        await self.prime(namespace)
        return self.pods_now(namespace, server)

    def pods_now(self, namespace: str, server: str) -> list[Pod]:
        """The pods of ``namespace/server`` as the cache has them now (no I/O)."""
        return list(self._by_server.get((namespace, server), {}).values())

    async def owned(self, namespace: str, instance: str, roots: Collection[str]) -> list[Pod]:
        """The pods of ``namespace/instance`` (a server, or a Shadow trial's workload) that are its targets: their
        controller chain reaches an owner of uid in ``roots`` (the server's; the tuning's for a trial), never a
        ``hostNetwork`` pod (:func:`sglang_operator.decisions.owners.verdict`; the chain's objects read as needed,
        :class:`~sglang_operator.io.owners.OwnerCache`). Strangers are left out and counted."""
        return await self.owners.owned(namespace, await self.pods(namespace, instance), roots)

    def owned_now(self, namespace: str, instance: str, roots: Collection[str]) -> list[Pod]:
        """:meth:`owned` as the caches have them now (no I/O): a pod whose chain was never read is left out."""
        return self.owners.owned_now(namespace, self.pods_now(namespace, instance), roots)

    def primed(self, namespace: str) -> bool:
        """Whether ``namespace`` was listed once."""
        return namespace in self._primed
