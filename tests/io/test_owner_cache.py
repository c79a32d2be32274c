"""The objects between a pod and its owner are read once and kept (:mod:`sglang_operator.io.owners`): no GET per
pod and tick, a bounded number per call whatever a flood of strangers names, and each stranger counted once."""

from __future__ import annotations

from typing import Any

from sglang_operator.io.owners import IGNORED_PODS, READS_PER_CALL, RECHECK_SECONDS, OwnerCache


def _obj(kind: str, name: str, uid: str, owner: tuple[str, str, str] | None) -> dict[str, Any]:
    refs = [{"kind": owner[0], "name": owner[1], "uid": owner[2], "controller": True}] if owner else []
    return {"kind": kind, "metadata": {"name": name, "namespace": "ns", "uid": uid, "ownerReferences": refs,
                                       "labels": {"app.kubernetes.io/instance": "a"}}}


STORED = {("Deployment", "a"): _obj("Deployment", "a", "uid-dep", ("SGLangServer", "a", "uid-a")),
          ("ReplicaSet", "a-1"): _obj("ReplicaSet", "a-1", "uid-rs", ("Deployment", "a", "uid-dep"))}


class Clock:
    now = 0.0

    def __call__(self) -> float:
        return self.now


def _ignored(reason: str) -> float:
    return IGNORED_PODS.labels(reason=reason)._value.get()  # type: ignore[attr-defined,no-any-return]


async def test_own_pods_cost_two_reads_once_and_strangers_a_bounded_number() -> None:
    reads: list[tuple[str, str]] = []

    async def get(kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        reads.append((kind, name))
        return STORED.get((kind, name))

    clock = Clock()
    cache = OwnerCache(get, clock)
    own = [_obj("Pod", f"a-1-{i}", f"p{i}", ("ReplicaSet", "a-1", "uid-rs")) for i in range(8)]
    strangers = [_obj("Pod", f"s{i}", f"s{i}", ("ReplicaSet", f"fake-{i}", f"f{i}")) for i in range(100)]
    before = _ignored("foreignOwner"), _ignored("noController")
    hand_made = _obj("Pod", "hand", "hand", None)

    for tick in range(10):
        got = await cache.owned("ns", [*own, *strangers, hand_made], {"uid-a"})
        assert [p["metadata"]["name"] for p in got] == [p["metadata"]["name"] for p in own]
        if tick == 0:
            assert reads[:2] == [("ReplicaSet", "a-1"), ("Deployment", "a")]
        assert len(reads) <= READS_PER_CALL * (tick + 1)  # a bounded number per call, whatever they name
    assert reads.count(("ReplicaSet", "a-1")) == 1 and reads.count(("Deployment", "a")) == 1  # once, not per tick
    assert cache.owned_now("ns", [*own, hand_made], {"uid-a"}) == own  # no read at all
    assert _ignored("noController") - before[1] == 1  # counted once, not per tick
    assert 0 < _ignored("foreignOwner") - before[0] <= 100

    clock.now += RECHECK_SECONDS + 1  # a forged uid of a real ReplicaSet is refused, and read again only later
    forged = _obj("Pod", "forged", "forged", ("ReplicaSet", "a-1", "uid-not-the-rs"))
    n = len(reads)
    assert await cache.owned("ns", [forged], {"uid-a"}) == []
    assert await cache.owned("ns", [forged], {"uid-a"}) == []
    assert len(reads) == n + 1


async def test_a_failed_read_keeps_what_was_known() -> None:
    fail = False

    async def get(kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        if fail:
            raise ConnectionError("API server away")
        return STORED.get((kind, name))

    clock = Clock()
    cache = OwnerCache(get, clock)
    pod = _obj("Pod", "a-1-x", "p", ("ReplicaSet", "a-1", "uid-rs"))
    assert len(await cache.owned("ns", [pod], {"uid-a"})) == 1
    fail, clock.now = True, 10_000.0  # due for a refresh, and the API server does not answer: still a target
    assert len(await cache.owned("ns", [pod], {"uid-a"})) == 1


async def test_a_server_made_again_under_its_name_has_its_pods_back_within_the_recheck() -> None:
    """Deleted and created again with the same spec: a ReplicaSet of the same name and a new uid. Its pods wait at
    most :data:`RECHECK_SECONDS`, not the refresh period."""
    stored = dict(STORED)

    async def get(kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        return stored.get((kind, name))

    clock = Clock()
    cache = OwnerCache(get, clock)
    assert len(await cache.owned("ns", [_obj("Pod", "a-1-x", "p", ("ReplicaSet", "a-1", "uid-rs"))], {"uid-a"})) == 1
    stored[("Deployment", "a")] = _obj("Deployment", "a", "uid-dep2", ("SGLangServer", "a", "uid-a2"))
    stored[("ReplicaSet", "a-1")] = _obj("ReplicaSet", "a-1", "uid-rs2", ("Deployment", "a", "uid-dep2"))
    again = [_obj("Pod", "a-1-y", "q", ("ReplicaSet", "a-1", "uid-rs2"))]
    clock.now += 1
    assert await cache.owned("ns", again, {"uid-a2"}) == []  # the old ReplicaSet read a second ago
    clock.now += RECHECK_SECONDS
    assert len(await cache.owned("ns", again, {"uid-a2"})) == 1
