"""Leader election (sglang_operator.process.leader) without a cluster: the pure takeover rule, the timing checks,
and two electors racing on one in-memory Lease store that enforces resourceVersion preconditions like the API server.
The real API server is exercised by e2e/tests/test_leader_election.py."""

from __future__ import annotations

import asyncio
import datetime as dt
from typing import Any

import httpx2
import pytest
from lightkube import ApiError
from pydantic import ValidationError

from sglang_operator.process import leader
from sglang_operator.process.leader import LeaderElectionConfig, LeaderElector, LeaseRecord, next_record

NOW = dt.datetime(2026, 12, 1, 9, 0, tzinfo=dt.UTC)


def test_timings_must_be_ordered() -> None:
    LeaderElectionConfig(namespace="ops", identity="a")  # 15 / 10 / 2
    with pytest.raises(ValidationError, match="greater than the renew deadline"):
        LeaderElectionConfig(namespace="ops", identity="a", lease_duration=10, renew_deadline=10)
    with pytest.raises(ValidationError, match=r"1.2 × the retry period"):
        LeaderElectionConfig(namespace="ops", identity="a", renew_deadline=2.4, retry_period=2)


def test_next_record_takes_a_missing_or_released_lease_and_waits_on_a_live_one() -> None:
    fresh = next_record(None, 0, "a", 15, NOW)
    assert fresh == LeaseRecord(holder="a", lease_duration_seconds=15, acquire_time=NOW, renew_time=NOW)
    held = LeaseRecord(holder="b", lease_duration_seconds=15, acquire_time=NOW, renew_time=NOW, transitions=3)
    assert next_record(held, 14.9, "a", 15, NOW) is None  # b's lease is valid by a's own clock
    later = NOW + dt.timedelta(seconds=15)
    taken = next_record(held, 15.0, "a", 15, later)
    assert taken is not None and (taken.holder, taken.acquire_time, taken.transitions) == ("a", later, 4)
    released = LeaseRecord(holder="", lease_duration_seconds=1, transitions=4)
    assert next_record(released, 0, "a", 15, later) == LeaseRecord(
        holder="a", lease_duration_seconds=15, acquire_time=later, renew_time=later, transitions=4)
    renewed = next_record(taken, 0, "a", 15, later + dt.timedelta(seconds=2))
    assert renewed is not None and renewed.acquire_time == later and renewed.transitions == 4
    assert renewed.renew_time == later + dt.timedelta(seconds=2)


def test_record_spec_round_trip() -> None:
    from lightkube.resources.coordination_v1 import Lease

    rec = LeaseRecord(holder="a_1", lease_duration_seconds=15, acquire_time=NOW, renew_time=NOW, transitions=2)
    spec = rec.to_spec()
    assert spec["renewTime"] == "2026-12-01T09:00:00.000000Z"
    lease: Any = Lease.from_dict({"metadata": {"name": "x"}, "spec": spec})
    assert LeaseRecord.from_spec(lease.spec) == rec


class FakeLeases:
    """One Lease in memory with the API server's optimistic concurrency: create fails with 409 when it exists,
    replace with 409 when ``resourceVersion`` is stale. ``fail`` makes every call raise 503."""

    def __init__(self) -> None:
        self.obj: dict[str, Any] | None = None
        self.rv = 0
        self.fail = False

    @staticmethod
    def _error(code: int) -> ApiError:
        request = httpx2.Request("GET", "https://k8s/x")
        response = httpx2.Response(code, json={"kind": "Status", "code": code, "message": str(code)}, request=request)
        return ApiError(request=request, response=response)

    def _store(self, obj: Any) -> Any:
        self.rv += 1
        d = obj.to_dict()
        d["metadata"]["resourceVersion"] = str(self.rv)
        self.obj = d
        return type(obj).from_dict(d)

    async def get(self, res: Any, name: str, namespace: str) -> Any:
        if self.fail:
            raise self._error(503)
        if self.obj is None:
            raise self._error(404)
        return res.from_dict(self.obj)

    async def create(self, obj: Any) -> Any:
        if self.fail:
            raise self._error(503)
        if self.obj is not None:
            raise self._error(409)
        return self._store(obj)

    async def replace(self, obj: Any) -> Any:
        if self.fail:
            raise self._error(503)
        if self.obj is None or obj.metadata.resourceVersion != self.obj["metadata"]["resourceVersion"]:
            raise self._error(409)
        return self._store(obj)


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def elector(identity: str, store: FakeLeases, clock: Clock) -> LeaderElector:
    cfg = LeaderElectionConfig(namespace="ops", identity=identity, lease_duration=15, renew_deadline=10,
                               retry_period=2)
    return LeaderElector(cfg, client=store, clock=clock)


async def test_one_winner_takeover_after_the_lease_duration_and_release() -> None:
    store, clock = FakeLeases(), Clock()
    a, b = elector("a", store, clock), elector("b", store, clock)
    assert await a.try_acquire_or_renew() is True
    assert await b.try_acquire_or_renew() is False  # a's lease is fresh
    clock.t += 14
    assert await b.try_acquire_or_renew() is False  # b first saw this record 14 s ago
    clock.t += 1.5
    assert await b.try_acquire_or_renew() is True  # unchanged for longer than leaseDurationSeconds (15)
    assert store.obj is not None and store.obj["spec"]["holderIdentity"] == "b"
    assert store.obj["spec"]["leaseTransitions"] == 1
    assert await a.try_acquire_or_renew() is False and not a.leading
    await b.release()
    assert store.obj["spec"].get("holderIdentity") is None and store.obj["spec"]["leaseDurationSeconds"] == 1
    assert await a.try_acquire_or_renew() is True  # a released lease is free at once


async def test_renewing_leader_keeps_the_lease_against_a_candidate() -> None:
    store, clock = FakeLeases(), Clock()
    a, b = elector("a", store, clock), elector("b", store, clock)
    assert await a.try_acquire_or_renew()
    for _ in range(20):  # 40 s of renewals every 2 s
        clock.t += 2
        assert await a.try_acquire_or_renew()
        assert not await b.try_acquire_or_renew()


async def test_renew_gives_up_after_the_deadline(monkeypatch: pytest.MonkeyPatch) -> None:
    store = FakeLeases()
    cfg = LeaderElectionConfig(namespace="ops", identity="a", lease_duration=1.0, renew_deadline=0.5,
                               retry_period=0.1)
    a = LeaderElector(cfg, client=store)
    stop = asyncio.Event()
    assert await a.acquire(stop)
    assert leader._STATE.leader
    store.fail = True  # the API server stops answering
    lost: list[float] = []
    loop = asyncio.get_running_loop()
    started = loop.time()
    await asyncio.wait_for(a.renew(on_lost=lambda: lost.append(loop.time() - started)), 5)
    assert len(lost) == 1 and 0.5 <= lost[0] < 0.5 + 2 * 0.1 + 0.2, lost
    assert not leader._STATE.leader


async def test_the_write_fence_closes_renew_deadline_before_a_candidate_may_take_over(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A leader frozen (SIGSTOP) after a renewal: it may write for leaseDuration - renewDeadline (5 s), never once
    a candidate could hold the Lease (15 s by the candidate's clock); a write then raises NotLeader."""
    from sglang_operator.io.fence import Fence, NotLeader

    monkeypatch.setattr(leader._STATE, "enabled", True)
    store, clock = FakeLeases(), Clock()
    a, b = elector("a", store, clock), elector("b", store, clock)
    assert not leader.may_write()  # elected, not leading yet
    assert await a.acquire(asyncio.Event())
    fence, exits = Fence(), []
    fence.install(leader.may_write, leader.lease_expired, lambda: exits.append(clock.t))
    assert leader.may_write()
    fence.check("status")
    clock.t += 4.9
    assert leader.may_write()
    clock.t += 0.2  # 5.1 s since the renewal was sent: less than renewDeadline of validity left
    assert not leader.may_write()
    with pytest.raises(NotLeader):
        fence.check("status")
    assert exits == [] and not leader.lease_expired()  # refused, the Lease still a's: no exit yet
    assert await b.try_acquire_or_renew() is False  # b first sees the record now...
    clock.t += 15.1
    assert await b.try_acquire_or_renew() is True  # ...and takes it 15 s later: a wrote nothing since 5.1 s
    assert not leader.may_write() and leader.lease_expired()
    with pytest.raises(NotLeader):  # resumed after the takeover (SIGCONT): the first write attempt ends it
        fence.check("event")
    assert exits == [clock.t] and fence.refused == 2
    await a.release()
    monkeypatch.setattr(leader._STATE, "enabled", False)
    assert leader.may_write()  # no leader election: alone, always
