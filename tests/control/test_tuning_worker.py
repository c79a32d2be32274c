"""The tuning queue's worker (control/tunings.py) on the fake API: tunings naming a missing server get one status write
each (Pending, ``Running=False`` reason ``ServerNotFound``) and then cost nothing — no write, no read, no task — while
nothing changes; when the server appears, one runs and the others wait ``Queued`` (one more write each, once); a
deleted tuning's runner stops and the next one runs; the observer's resync forgets a tuning deleted while the watch
was away and wakes its server."""

from __future__ import annotations

import asyncio
import copy
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakekube import FakeKube, Obj

from sglang_operator.control import tuning as ctl
from sglang_operator.control.observer import Observer
from sglang_operator.control.tunings import TuningWorker
from sglang_operator.decisions.tuning.queue import QUEUED, SERVER_NOT_FOUND

SAMPLE: dict[str, Any] = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "samples" / "qwen3.6-27b-known-good.yaml").read_text())
COUNT = 40


def tuning(i: int) -> Obj:
    return {"apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangTuning",
            "metadata": {"name": f"t{i:02d}", "namespace": "ns", "generation": 1,
                         "creationTimestamp": f"2026-01-01T00:{i // 60:02d}:{i % 60:02d}Z"},
            "spec": {"serverRef": {"name": "s"}, "parameters": {"numSteps": {"min": 1, "max": 3}},
                     "workload": {"secondsPerLevel": 5, "concurrency": [{"level": 1}]},
                     "budget": {"maxTrialCount": 4}}}


class CountingKube(FakeKube):
    """The fake API, counting the reads of SGLangTunings and SGLangServers."""

    reads: int = 0

    async def get_sglangtuning(self, namespace: str, name: str) -> Obj | None:
        self.reads += 1
        return await super().get_sglangtuning(namespace, name)

    async def get_sglangserver(self, namespace: str, name: str) -> Obj | None:
        self.reads += 1
        return await super().get_sglangserver(namespace, name)


class World:
    def __init__(self, fk: CountingKube) -> None:
        self.fk, self.obs = fk, Observer(1.0)
        self.worker = TuningWorker(self.obs, limit=2)

    def watch(self, name: str, event: str = "MODIFIED") -> None:
        """The watch event of tuning ``name`` as stored now (``DELETED``: as it was last seen)."""
        body = self.fk.get("SGLangTuning", "ns", name) if event != "DELETED" else tuning(int(name[1:]))
        assert body is not None
        self.obs.tuning_event(event, body)

    def watch_all(self) -> None:
        for (kind, _, name) in list(self.fk.objects):
            if kind == "SGLangTuning":
                self.watch(name)

    def tuning_writes(self, *, but: str = "") -> int:
        return sum(1 for verb, kind, name, _ in self.fk.writes if kind == "SGLangTuning" and name != but)

    def running(self, name: str) -> tuple[str | None, str | None, str | None]:
        obj = self.fk.get("SGLangTuning", "ns", name)
        assert obj is not None
        st = obj.get("status") or {}
        cond = next((c for c in st.get("conditions") or [] if c["type"] == "Running"), {})
        return st.get("phase"), cond.get("status"), cond.get("reason")


@pytest.fixture
async def world(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[World]:
    fk = CountingKube().install()
    monkeypatch.setattr(ctl, "POLL_SECONDS", 0.01)
    for i in range(COUNT):
        fk.put(tuning(i))
    w = World(fk)
    w.watch_all()
    yield w
    await w.worker.stop()
    await w.obs.stop()


async def test_a_waiting_tuning_writes_once_and_then_nothing_while_nothing_changes(world: World) -> None:
    await world.worker.decide()
    assert world.tuning_writes() == COUNT and world.worker.writes == COUNT
    assert {world.running(f"t{i:02d}") for i in range(COUNT)} == {("Pending", "False", SERVER_NOT_FOUND)}
    assert world.worker.runners == {}
    world.watch_all()  # the writes come back through the watch
    writes, reads, tasks = len(world.fk.writes), world.fk.reads, len(asyncio.all_tasks())
    for _ in range(5):
        await world.worker.decide()
        world.watch_all()  # an unrelated event of each (a label, an annotation): the same decision
    assert len(world.fk.writes) == writes
    assert world.fk.reads == reads  # no GET of a tuning nor of the server
    assert len(asyncio.all_tasks()) == tasks and world.worker.runners == {}


async def test_the_server_appears_one_runs_the_others_queue_once_then_a_deleted_one_makes_room(
        world: World) -> None:
    await world.worker.decide()
    world.watch_all()
    server = copy.deepcopy(SAMPLE)
    server["metadata"] = {"name": "s", "namespace": "ns"}
    world.obs.track("ADDED", world.fk.put(server))
    before = world.tuning_writes(but="t00")
    await world.worker.decide()
    assert set(world.worker.runners) == {("ns", "t00")}  # the oldest; one per server
    assert world.tuning_writes(but="t00") == before + COUNT - 1  # ServerNotFound -> Queued: once each
    assert {world.running(f"t{i:02d}") for i in range(1, COUNT)} == {("Pending", "False", QUEUED)}
    requests = {r.name: r for r in world.obs.tunings.of(("ns", "s"))}
    assert requests["t00"].admitted and not requests["t01"].admitted  # only t00 may be given a hold
    world.watch_all()
    before = world.tuning_writes(but="t00")
    await world.worker.decide()
    assert world.tuning_writes(but="t00") == before  # nothing changed: nothing written
    first = world.worker.runners[("ns", "t00")][1]
    world.fk.delete("SGLangTuning", "ns", "t00")
    world.watch("t00", "DELETED")
    await world.worker.decide()
    await asyncio.sleep(0)
    assert first.cancelled() or first.done()
    assert set(world.worker.runners) == {("ns", "t01")}  # the next oldest


async def test_the_resync_forgets_a_tuning_deleted_during_a_watch_gap(world: World) -> None:
    assert ("ns", "t05") in world.obs.tunings
    world.fk.delete("SGLangTuning", "ns", "t05")  # no DELETED event reaches the operator
    await world.obs.resync()
    assert ("ns", "t05") not in world.obs.tunings
    assert len(world.obs.tunings) == COUNT - 1
    assert "t05" not in {r.name for r in world.obs.tunings.of(("ns", "s"))}


async def test_a_waiting_runner_backs_off_writes_once_and_wakes_at_once(world: World,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ctl, "WAIT_SECONDS", 0.05)
    monkeypatch.setattr(ctl, "WAIT_MAX_SECONDS", 0.2)
    runner = ctl.TuningRunner("ns", "t00", world.obs)  # its server does not exist
    loop = asyncio.get_running_loop()
    start = loop.time()
    for _ in range(4):
        assert await runner.step()
    took = loop.time() - start
    assert took >= 0.05 + 0.1 + 0.2 + 0.2 - 0.02, took  # 0.05, 0.1, 0.2, 0.2: doubled up to the cap
    assert world.tuning_writes() == 1  # ServerNotFound, written once
    monkeypatch.setattr(ctl, "WAIT_MAX_SECONDS", 60.0)
    runner._backoff = 30.0
    loop.call_later(0.05, runner.wake)
    start = loop.time()
    assert await runner.step()
    assert loop.time() - start < 5  # woken: not the 30 s wait
