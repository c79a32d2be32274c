"""The pod cache fed by the pod watch: primed by one LIST per namespace, ordered by resourceVersion so a LIST racing
the watch neither overwrites newer events nor brings deleted pods back; and the sampler's view of pods."""

from __future__ import annotations

import asyncio
from typing import Any

from sglang_operator.io.pods import PodCache, Target, targets


def pod(name: str, rv: int, server: str = "qwen", ready: bool = True, ip: str | None = None,
        **extra: Any) -> dict[str, Any]:
    """A pod; its IP by default one of its own (127.1.0.x from its name): live pods never share one."""
    ip = ip or f"127.1.{sum(map(ord, name)) % 256}.{len(name)}"
    return {"metadata": {"name": name, "namespace": "ns", "resourceVersion": str(rv),
                         "labels": {"app.kubernetes.io/instance": server, "sglang-operator.io/revision": "r1"},
                         "managedFields": [{"manager": "kubelet"}], **extra},
            "status": {"podIP": ip, "conditions": [{"type": "Ready", "status": str(ready)}],
                       "containerStatuses": [{"restartCount": 2}, {"restartCount": 1}]}}


def names(pods: list[dict[str, Any]]) -> list[str]:
    return sorted(p["metadata"]["name"] for p in pods)


async def test_primed_once_then_kept_by_events() -> None:
    calls = []

    async def lister(ns: str) -> list[dict[str, Any]]:
        calls.append(ns)
        await asyncio.sleep(0.01)
        return [pod("a", 10), pod("b", 11, server="other")]

    cache = PodCache(lister)
    first, second = await asyncio.gather(cache.pods("ns", "qwen"), cache.pods("ns", "qwen"))
    assert calls == ["ns"] and names(first) == names(second) == ["a"]
    assert "managedFields" not in first[0]["metadata"]
    cache.apply("ADDED", pod("c", 12))
    cache.apply("MODIFIED", pod("a", 13, ready=False))
    assert names(await cache.pods("ns", "qwen")) == ["a", "c"] and calls == ["ns"]
    assert [t.ready for t in targets(cache.pods_now("ns", "qwen"))] == [False, True]
    cache.apply("DELETED", pod("a", 14))
    assert names(cache.pods_now("ns", "qwen")) == ["c"]


async def test_a_list_racing_the_watch_never_wins_over_newer_events() -> None:
    release = asyncio.Event()

    async def lister(ns: str) -> list[dict[str, Any]]:
        await release.wait()
        return [pod("a", 10, ready=False), pod("gone", 9), pod("b", 20)]  # taken before the events below

    cache = PodCache(lister)
    priming = asyncio.create_task(cache.pods("ns", "qwen"))
    await asyncio.sleep(0)
    cache.apply(None, pod("a", 15))  # kopf's initial listing, newer than the LIST
    cache.apply("DELETED", pod("gone", 12))
    cache.apply(None, pod("old", 5))  # not in the LIST, older than its newest item: deleted before it
    release.set()
    got = await priming
    assert names(got) == ["a", "b"]
    assert [t.ready for t in targets(got)] == [True, True]  # a at rv 15, not the LIST's rv 10
    cache.apply("MODIFIED", pod("gone", 11))  # a late, older event cannot resurrect it either
    assert names(cache.pods_now("ns", "qwen")) == ["a", "b"]


async def test_a_failed_list_is_retried_next_time() -> None:
    attempts = []

    async def lister(ns: str) -> list[dict[str, Any]]:
        attempts.append(ns)
        if len(attempts) == 1:
            raise RuntimeError("API server unavailable")
        return [pod("a", 1)]

    cache = PodCache(lister)
    try:
        await cache.pods("ns", "qwen")
        raise AssertionError("the LIST error must reach the caller")
    except RuntimeError:
        pass
    assert not cache.primed("ns")
    assert names(await cache.pods("ns", "qwen")) == ["a"] and cache.primed("ns")


def test_targets_are_live_pods_with_restarts_and_revision() -> None:
    deleting = pod("x", 3, deletionTimestamp="2026-12-01T00:00:00Z")
    no_ip = pod("y", 4)
    no_ip["status"].pop("podIP")
    assert targets([pod("b", 1, ip="127.1.0.3"), deleting, no_ip, pod("a", 2, ready=False, ip="127.1.0.2")]) == [
        Target("a", "r1", "127.1.0.2", False, 3), Target("b", "r1", "127.1.0.3", True, 3),
        Target("y", "r1", None, True, 3)]


async def test_a_pod_ip_taken_by_another_servers_pod_drops_the_ghost_holding_it() -> None:
    """Issue 16 item 6: server qwen's pod ``a`` was deleted during a watch gap (no DELETED event); its IP now belongs
    to a pod of another tenant's server. The moment that pod is seen, ``a`` leaves qwen's targets, so qwen's API key
    is never sent to it; an older LIST or event cannot bring ``a`` back."""
    async def lister(ns: str) -> list[dict[str, Any]]:
        return [pod("a", 10, ip="127.1.7.7")]

    cache = PodCache(lister)
    assert [t.ip for t in targets(await cache.pods("ns", "qwen"))] == ["127.1.7.7"]
    cache.apply("ADDED", pod("b", 30, server="tenant-b", ip="127.1.7.7"))  # the IP reused: a is gone
    assert cache.pods_now("ns", "qwen") == []
    assert [t.ip for t in targets(cache.pods_now("ns", "tenant-b"))] == ["127.1.7.7"]
    cache.apply(None, pod("a", 10, ip="127.1.7.7"))  # a stale listing of the ghost
    cache.apply("MODIFIED", pod("a", 12, ip="127.1.7.7"))  # a late event of it, older than b
    assert cache.pods_now("ns", "qwen") == [] and names(cache.pods_now("ns", "tenant-b")) == ["b"]
    await cache.resync("ns")  # a LIST from before b: the ghost stays gone (its tombstone), b is kept (newer)
    assert cache.pods_now("ns", "qwen") == [] and names(cache.pods_now("ns", "tenant-b")) == ["b"]
    cache.apply("DELETED", pod("b", 31, server="tenant-b", ip="127.1.7.7"))
    cache.apply("ADDED", pod("c", 40, ip="127.1.7.7"))  # qwen's new pod takes the address again
    assert [(t.name, t.ip) for t in targets(cache.pods_now("ns", "qwen"))] == [("c", "127.1.7.7")]
    cache.forget_server("ns", "qwen")
    cache.apply("ADDED", pod("d", 41, server="tenant-b", ip="127.1.7.7"))
    assert names(cache.pods_now("ns", "tenant-b")) == ["d"]
