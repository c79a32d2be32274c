"""An InPlace SGLangTuning on the fake API without a cluster: the tuning asks in its own status, the server's loop
acts. The hold is taken by the server's tick; the trial the tuning records is applied by the server's job through
the one apply path and recorded by the server's next tick in ONE status patch (with a resourceVersion); the tuning
never patches the server (the fake's write log says who wrote what); a scale during a trial cancels nothing and
moves no replica; a spec change ends the hold and cancels the tuning; the tuning's end or deletion applies the
stable revision again and then removes the hold; a tuning deleted and created again under the same name (another
uid) inherits nothing: the old hold is released at the server's next tick; a hold older than the operator's bound is
released with reason HoldExpired and its tuning cancelled."""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
from pathlib import Path
from typing import Any

import pytest
import yaml
from fakekube import FakeKube

from sglang_operator import builders
from sglang_operator.api.server import parse, parse_status
from sglang_operator.api.view import ServerView, TuningView
from sglang_operator.control import handlers
from sglang_operator.control import tuning as ctl
from sglang_operator.control.observer import Observer
from sglang_operator.decisions.tuning import queue

SAMPLE: dict[str, Any] = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "samples" / "qwen3.6-27b-known-good.yaml").read_text())
TUNING: dict[str, Any] = {
    "apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangTuning",
    "metadata": {"name": "tune", "namespace": "ns", "generation": 1, "creationTimestamp": "2026-01-01T00:00:00Z"},
    "spec": {"serverRef": {"name": "s"}, "mode": "InPlace", "disruption": "Allowed",
             "parameters": {"numSteps": {"list": [1, 3]}, "eagleTopk": {"list": [1]},
                            "numDraftTokens": {"list": [2, 4]}},
             "budget": {"maxTrialCount": 3}}}
MEMO = type("Memo", (), {})


def logger() -> Any:
    return handlers.logging.getLogger("test")


class World:
    """The fake API, the operator's observer (the server's loop) and the tuning's runner over the same caches."""

    def __init__(self, fk: FakeKube) -> None:
        self.fk, self.obs = fk, Observer(1.0)
        self.memo = MEMO()
        self.memo.observer = self.obs  # type: ignore[attr-defined]
        self.runner = ctl.TuningRunner("ns", "tune", self.obs)

    async def create_server(self, replicas: int = 2) -> str:
        obj = copy.deepcopy(SAMPLE)
        obj["metadata"] = {"name": "s", "namespace": "ns"}
        obj["spec"]["replicas"] = replicas
        body = self.fk.put(obj)
        await handlers.reconcile(body=body, meta=body["metadata"], status={}, patch={}, reason="create",
                                 logger=logger(), memo=self.memo)
        self.obs.track("MODIFIED", self.fk.server("s"))
        return str(self.fk.server("s")["status"]["revision"])

    def tuning(self) -> dict[str, Any]:
        got = self.fk.get("SGLangTuning", "ns", "tune")
        assert got is not None
        return got

    async def tuning_changed(self, event: str = "MODIFIED") -> None:
        """The tuning's watch event reaches the server and the tuning queue (which admits the tuning: one on a
        server that exists): it wakes the server's worker; wait for that observation."""
        self.obs.tuning_event(event, self.tuning() if event != "DELETED" else TUNING)
        servers = {m.key for m in self.obs.memories.values() if m.body is not None}
        self.obs.tunings.admit(queue.admit(self.obs.tunings.candidates(), servers, queue.DEFAULT_LIMIT).run)
        await asyncio.gather(*list(self.obs.ticker._woken))

    async def tick(self, later: dt.timedelta = dt.timedelta()) -> None:
        """One observation of the server from its newest view (``later`` than now), then its job (if one was started)
        to its end."""
        self.obs.track("MODIFIED", self.fk.server("s"))
        mem = self.obs.memory(self.fk.server("s"))
        async with mem.lock:
            assert mem.body is not None
            await self.obs.observe(mem.view(), dt.datetime.now(dt.UTC) + later)
        if mem.job is not None:
            await mem.job
            mem.job = None
        self.obs.track("MODIFIED", self.fk.server("s"))

    async def step(self) -> None:
        """One step of the tuning; its own status write reaches the server as a watch event."""
        assert await self.runner.step()
        await self.tuning_changed()


def deployment(fk: FakeKube) -> tuple[str, int]:
    dep = fk.get("Deployment", "ns", "s")
    assert dep is not None
    return dep["spec"]["template"]["metadata"]["labels"][builders.REVISION_LABEL], dep["spec"]["replicas"]


@pytest.fixture
def world(monkeypatch: pytest.MonkeyPatch) -> World:
    fk = FakeKube().install()
    fk.put(copy.deepcopy(TUNING))
    monkeypatch.setattr(ctl, "POLL_SECONDS", 0.01)
    monkeypatch.setattr(ctl, "WAIT_SECONDS", 0.0)
    return World(fk)


async def held_with_trial(world: World) -> tuple[str, str]:
    """The server served, held by the tuning, its first trial applied and recorded: (stable, trial revision)."""
    stable = await world.create_server()
    await world.tuning_changed("ADDED")  # the server's tick takes the hold for the tuning that has not begun
    hold = parse_status(world.fk.server("s")).tuning_hold
    assert hold is not None and (hold.name, hold.stable_revision) == ("tune", stable)
    await world.step()  # begins (startedAt, the stable revision from the hold)
    await world.step()  # records its first trial: the request
    trial = world.tuning()["status"]["trials"][-1]
    assert trial.get("verdict") is None and trial["revision"] != stable
    await world.tick()  # the server's tick and job apply it; the next tick's patch records it
    return stable, str(trial["revision"])


async def test_the_trial_is_applied_by_the_servers_job_and_recorded_in_one_patch(world: World) -> None:
    stable = await world.create_server()
    start = len(world.fk.writes)
    await world.tuning_changed("ADDED")
    await world.step()
    await world.step()
    trial = world.tuning()["status"]["trials"][-1]  # its watch event woke the server: the tick decided the trial
    mark = len(world.fk.writes)
    mem = world.obs.memory(world.fk.server("s"))
    assert mem.job is not None
    await mem.job  # the server's job applies the trial on every replica
    assert deployment(world.fk) == (trial["revision"], 2)
    assert parse_status(world.fk.server("s")).revision == stable  # not written yet: kept for the next tick
    job_writes = [w for w in world.fk.writes[mark:] if w[0] == "patch_status"]
    assert job_writes == []
    mem.job = None
    before = len(world.fk.writes)
    body = world.fk.server("s")
    world.obs.track("MODIFIED", body)
    async with mem.lock:
        await world.obs.observe(ServerView.of(body), dt.datetime.now(dt.UTC))
    patches = [w for w in world.fk.writes[before:] if w[0] == "patch_status"]
    assert patches == [("patch_status", "SGLangServer", "s", body["metadata"]["resourceVersion"])]  # one, with rv
    status = parse_status(world.fk.server("s"))
    assert status.revision == trial["revision"] and status.tuning_hold is not None
    assert (status.tuning_hold.trial, status.tuning_hold.trial_revision) == (trial["name"], trial["revision"])
    # who wrote what: the tuning wrote only its own status; every server status patch carried a resourceVersion
    writers = {(w[0], w[1]) for w in world.fk.writes[start:]}
    assert ("patch_tuning_status", "SGLangTuning") in writers
    assert all(w[3] is not None for w in world.fk.writes[start:] if w[0] in ("patch_status", "patch_tuning_status"))


async def test_the_tuning_never_writes_the_server_nor_its_children(world: World) -> None:
    await held_with_trial(world)
    mark = len(world.fk.writes)
    pods = []
    status = parse_status(world.fk.server("s"))
    for i in range(2):  # the trial's pods come Ready (the watched pod cache)
        pod = {"kind": "Pod", "metadata": {
            "name": f"s-{i}", "namespace": "ns", "resourceVersion": str(900 + i),
            "labels": {"app.kubernetes.io/instance": "s", "app.kubernetes.io/managed-by": "sglang-operator",
                       "app.kubernetes.io/name": "sglang", builders.REVISION_LABEL: str(status.revision)}},
            "status": {"podIP": f"127.9.0.{i + 1}", "conditions": [{"type": "Ready", "status": "True"}]}}
        world.fk.put(world.fk.owned(pod))  # a pod of the server's Deployment (through its ReplicaSet)
        pods.append(pod)
        world.obs.pod_event("ADDED", world.fk.get("Pod", "ns", f"s-{i}") or pod)
    api_trial = ctl.api.parse_tuning_status(world.tuning()).trials[-1]
    deadline = dt.datetime.now(dt.UTC) + dt.timedelta(seconds=5)
    ready, version = await world.runner._in_place_pods(TuningView.of(world.tuning()), parse(world.fk.server("s")),
                                                      api_trial, deadline)
    assert {p["metadata"]["name"] for p in ready} == {"s-0", "s-1"} and str(version)
    assert [w for w in world.fk.writes[mark:] if w[1] != "SGLangTuning"] == []


async def test_a_scale_during_a_trial_cancels_nothing_and_moves_no_replica(world: World) -> None:
    _stable, trial = await held_with_trial(world)
    spec = copy.deepcopy(world.fk.server("s")["spec"])
    spec["replicas"] = 3
    updated = world.fk.update_spec("s", spec)
    mark = len(world.fk.writes)
    await handlers.reconcile(body=updated, meta=updated["metadata"], status=updated["status"], patch={},
                             reason="update", logger=logger(), memo=world.memo)
    assert [w for w in world.fk.writes[mark:] if w[0] != "patch_status"] == []  # no child written
    await world.tick()
    status = parse_status(world.fk.server("s"))
    assert status.tuning_hold is not None and status.tuning_hold.trial_revision == trial
    assert status.tuning_hold.generation == 2 and deployment(world.fk) == (trial, 2)
    api_trial = ctl.api.parse_tuning_status(world.tuning()).trials[-1]  # the tuning sees its trial run on
    assert ctl.lifecycle.trial_state(status, "tune", api_trial) == ("running", "")
    assert ctl.lifecycle.in_place(status, "tune", "s", True).kind == "held"


async def test_a_spec_change_ends_the_hold_and_cancels_the_tuning(world: World) -> None:
    stable, trial = await held_with_trial(world)
    spec = copy.deepcopy(world.fk.server("s")["spec"])
    spec["memory"]["maxRunningRequests"] = 8
    updated = world.fk.update_spec("s", spec)
    await handlers.reconcile(body=updated, meta=updated["metadata"], status=updated["status"], patch={},
                             reason="update", logger=logger(), memo=world.memo)
    await world.tick()
    status = parse_status(world.fk.server("s"))
    assert status.tuning_hold is None and status.revision not in (stable, trial)  # the spec's own revision
    held = status.condition("TuningHeld")
    assert held is not None and (held.status, held.reason) == ("False", "SpecChanged")
    assert not await world.runner.step()
    tuning = world.tuning()["status"]
    assert tuning["phase"] == "Cancelled"
    running = next(c for c in tuning["conditions"] if c["type"] == "Running")
    assert running["reason"] == "SpecChanged"


@pytest.mark.parametrize("end", ["Succeeded", "DELETED"])
async def test_the_end_applies_the_stable_revision_again_then_removes_the_hold(world: World, end: str) -> None:
    stable, _trial = await held_with_trial(world)
    if end == "DELETED":
        world.fk.delete("SGLangTuning", "ns", "tune")
        world.obs.tuning_event("DELETED", TUNING)
    else:
        tuning = world.tuning()
        await world.fk.patch_tuning_status("ns", "tune", None, {"phase": end})
        world.obs.tuning_event("MODIFIED", world.tuning())
        assert tuning
    await world.tick()  # the stable revision applied by the server's job, the hold still standing
    assert deployment(world.fk) == (stable, 2)
    assert parse_status(world.fk.server("s")).tuning_hold is not None
    await world.tick()  # recorded; the next tick removes the hold
    await world.tick()
    status = parse_status(world.fk.server("s"))
    assert status.revision == stable and status.tuning_hold is None


async def test_a_second_tuning_waits_while_the_first_holds_the_server(world: World) -> None:
    await held_with_trial(world)
    other = copy.deepcopy(TUNING)
    other["metadata"]["name"] = "other"
    world.fk.put(other)
    world.obs.tuning_event("ADDED", world.fk.get("SGLangTuning", "ns", "other") or other)
    runner = ctl.TuningRunner("ns", "other", world.obs)
    assert await runner.step()
    got = world.fk.get("SGLangTuning", "ns", "other")
    assert got is not None
    running = next(c for c in got["status"]["conditions"] if c["type"] == "Running")
    assert (running["status"], running["reason"]) == ("False", "HeldByTuning")
    writes = len(world.fk.writes)
    assert await runner.step()  # waiting still: the same condition is not written again
    assert world.fk.writes[writes:] == []


def created_again(world: World, missed_delete: bool) -> None:
    """SGLangTuning ``tune`` deleted and created again under its name (another uid), both watch events recorded (or
    only the new object's: the deletion missed during a watch gap) before the server's next tick; its queue admits
    it; the new object's runner replaces the old one's."""
    world.fk.delete("SGLangTuning", "ns", "tune")
    if not missed_delete:
        world.obs.tunings.apply("DELETED", TUNING)
    again = copy.deepcopy(TUNING)
    again["metadata"]["uid"] = "uid-tune-again"
    world.fk.put(again)
    world.obs.tunings.apply("ADDED", world.tuning())
    world.obs.tunings.admit(queue.admit(world.obs.tunings.candidates(), {("ns", "s")}, queue.DEFAULT_LIMIT).run)
    world.runner = ctl.TuningRunner("ns", "tune", world.obs)


@pytest.mark.parametrize("missed_delete", [False, True])
async def test_a_tuning_created_again_under_its_name_releases_the_old_hold_within_one_tick(
        world: World, missed_delete: bool) -> None:
    stable = await world.create_server()
    await world.tuning_changed("ADDED")
    await world.step()  # begins: held between trials
    old = parse_status(world.fk.server("s")).tuning_hold
    assert old is not None and old.uid == "uid-tune" and old.since is not None
    created_again(world, missed_delete)
    await world.tick()  # one tick: the old hold is released (the stable revision serves: removed at once)
    status = parse_status(world.fk.server("s"))
    held = status.condition("TuningHeld")
    assert status.tuning_hold is None and held is not None and (held.status, held.reason) == ("False", "Released")
    await world.tick()  # the new tuning, not begun, takes a hold of its own
    hold = parse_status(world.fk.server("s")).tuning_hold
    assert hold is not None and (hold.uid, hold.stable_revision, hold.trial) == ("uid-tune-again", stable, None)
    assert hold.since is not None and hold.since > old.since
    await world.step()  # and begins under it
    assert world.tuning()["status"]["startedAt"]


async def test_a_tuning_created_again_during_a_trial_gets_nothing_of_the_old_hold(world: World) -> None:
    stable, trial = await held_with_trial(world)
    created_again(world, missed_delete=False)
    await world.tick()  # one tick: the old trial's pods go (the stable revision applied), no trial applied for it
    assert deployment(world.fk) == (stable, 2)
    status = parse_status(world.fk.server("s"))
    assert status.tuning_hold is not None and (status.tuning_hold.uid, status.tuning_hold.released) == (
        "uid-tune", "Released")
    assert await world.runner.step()  # the new tuning waits: the hold of its name is not its own
    running = next(c for c in world.tuning()["status"]["conditions"] if c["type"] == "Running")
    assert (running["status"], running["reason"]) == ("False", "HeldByTuning") and "earlier" in running["message"]
    assert "startedAt" not in world.tuning()["status"]
    await world.tick()  # the stable revision recorded: the old hold removed
    status = parse_status(world.fk.server("s"))
    assert status.revision == stable and status.tuning_hold is None and trial != stable
    await world.tick()
    hold = parse_status(world.fk.server("s")).tuning_hold
    assert hold is not None and (hold.uid, hold.stable_revision) == ("uid-tune-again", stable)


async def test_a_hold_past_the_bound_is_released_with_its_reason_and_the_tuning_cancelled(world: World) -> None:
    stable, trial = await held_with_trial(world)
    bound = world.obs.hold_max_seconds
    assert bound == handlers.Config().in_place_hold_max_seconds == 10800
    await world.tick(dt.timedelta(seconds=bound - 60))  # not yet
    status = parse_status(world.fk.server("s"))
    assert status.tuning_hold is not None and status.tuning_hold.released is None and status.revision == trial
    events = len(world.fk.events)
    await world.tick(dt.timedelta(seconds=bound + 1))  # past it: the stable revision applied, the hold standing
    assert deployment(world.fk) == (stable, 2)
    status = parse_status(world.fk.server("s"))
    assert status.tuning_hold is not None and status.tuning_hold.released == "HoldExpired"
    said = [e for e in world.fk.events[events:] if e[2] == "HoldExpired"]
    assert len(said) == 1 and said[0][:2] == ("s", "Warning") and "10800 s" in said[0][3]
    await world.tick(dt.timedelta(seconds=bound + 2))  # recorded: the hold removed
    status = parse_status(world.fk.server("s"))
    held = status.condition("TuningHeld")
    assert status.revision == stable and status.tuning_hold is None
    assert held is not None and (held.status, held.reason) == ("False", "HoldExpired")
    assert [e for e in world.fk.events[events:] if e[2] == "HoldExpired"] == said  # said once
    assert not await world.runner.step()  # the tuning sees it and ends
    tuning = world.tuning()["status"]
    running = next(c for c in tuning["conditions"] if c["type"] == "Running")
    assert tuning["phase"] == "Cancelled" and running["reason"] == "HoldExpired"
