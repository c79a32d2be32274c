"""The observer's schedule (one loop per tick, each server at its own point of the interval) and its caches."""

from __future__ import annotations

import asyncio
import copy
import itertools
from pathlib import Path
from typing import Any

import pytest
import yaml

from sglang_operator import builders
from sglang_operator.api.server import parse
from sglang_operator.api.view import ServerView
from sglang_operator.control import observer
from sglang_operator.control.observer import SPREAD, Observer, offset_in_interval

SAMPLE: dict[str, Any] = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "samples" / "qwen3.6-27b-known-good.yaml").read_text())


def body(name: str, generation: int = 1, revision: str | None = "r1") -> dict[str, Any]:
    obj = copy.deepcopy(SAMPLE)
    obj["metadata"] = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "generation": generation,
                       "resourceVersion": "1"}
    obj["status"] = {"revision": revision} if revision else {}
    return obj


class Recording(Observer):
    """An observer whose observation only records when it started (the schedule is the real one)."""

    def __init__(self, interval: float, hold: asyncio.Event | None = None) -> None:
        super().__init__(interval)
        self.started: list[tuple[str, float]] = []
        self.hold = hold
        self.cancelled: list[str] = []

    async def observe(self, view: ServerView, now: Any) -> None:
        name = view.name
        self.started.append((name, asyncio.get_running_loop().time()))
        if self.hold is not None:
            try:
                await self.hold.wait()
            except asyncio.CancelledError:
                self.cancelled.append(name)
                raise


def test_a_tick_observes_every_server_once_at_its_own_point_of_the_interval() -> None:
    interval = 2.0
    obs = Recording(interval)
    bodies = [body(f"s{i}") for i in range(12)]
    for b in bodies:
        obs.track("ADDED", b)

    async def run() -> float:
        start = asyncio.get_running_loop().time()
        await obs.tick()
        return start

    start = asyncio.run(run())
    names = [n for n, _ in obs.started]
    assert sorted(names) == sorted(b["metadata"]["name"] for b in bodies)  # each once
    expected = sorted(bodies, key=lambda b: offset_in_interval(b["metadata"]))
    assert names == [b["metadata"]["name"] for b in expected]  # in phase order
    for (name, at), b in zip(obs.started, expected, strict=True):
        point = offset_in_interval(b["metadata"]) * SPREAD * interval
        assert point - 0.01 <= at - start <= point + 0.5, (name, at - start, point)  # never early


def test_a_server_deleted_before_its_point_is_not_observed() -> None:
    obs = Recording(2.0)
    late = max((body(f"s{i}") for i in range(6)), key=lambda b: offset_in_interval(b["metadata"]))
    for i in range(6):
        obs.track("ADDED", body(f"s{i}"))

    async def run() -> None:
        tick = asyncio.get_running_loop().create_task(obs.tick())
        await asyncio.sleep(0.01)
        obs.track("DELETED", late)
        await tick

    asyncio.run(run())
    assert late["metadata"]["name"] not in [n for n, _ in obs.started]
    assert len(obs.started) == 5


def test_cancelling_a_tick_cancels_the_observations_under_way() -> None:
    async def run() -> Recording:
        obs = Recording(1.0, hold=asyncio.Event())  # every observation waits forever
        for i in range(4):
            obs.track("ADDED", body(f"s{i}"))
        tick = asyncio.get_running_loop().create_task(obs.tick())
        await asyncio.sleep(SPREAD + 0.1)  # past every point, before the interval's end: all four under way
        tick.cancel()
        with pytest.raises(asyncio.CancelledError):
            await tick
        await asyncio.sleep(0)
        return obs

    obs = asyncio.run(run())
    assert len(obs.started) == 4
    assert sorted(obs.cancelled) == sorted(n for n, _ in obs.started)


class Slow(Recording):
    """``slow`` takes ``seconds`` to observe (a hostile pod up to its probe's timeout); the others are instant."""

    def __init__(self, interval: float, slow: str, seconds: float) -> None:
        super().__init__(interval)
        self.slow, self.seconds = slow, seconds

    async def observe(self, view: ServerView, now: Any) -> None:
        await super().observe(view, now)
        if view.name == self.slow:
            try:
                await asyncio.sleep(self.seconds)
            except asyncio.CancelledError:
                self.cancelled.append(self.slow)
                raise


def test_a_slow_observation_delays_no_other_server_and_is_not_started_twice() -> None:
    """A server whose observation takes 5 intervals holds no other: the loop's ticks stay one interval apart (a
    gap under 3 intervals allows for a loaded machine; waiting for the slow one made it 5), every other server is
    observed at each, and the slow one again only after its observation ended."""
    interval = 0.5

    async def run() -> Slow:
        obs = Slow(interval, "s0", 5 * interval)
        obs.resync_seconds = 0
        for i in range(4):
            obs.track("ADDED", body(f"s{i}"))
        obs.start()
        await asyncio.sleep(8 * interval)
        await obs.stop()
        return obs

    obs = asyncio.run(run())
    times = {n: [at for name, at in obs.started if name == n] for n in ("s0", "s1", "s2", "s3")}
    for name in ("s1", "s2", "s3"):
        assert len(times[name]) >= 6, (name, times)
        assert max(b - a for a, b in itertools.pairwise(times[name])) < 3 * interval, (name, times)
    assert len(times["s0"]) == 2 and times["s0"][1] - times["s0"][0] >= 5 * interval, times["s0"]
    assert obs.cancelled == ["s0"]  # its second observation, still under way, ended by stop()


def test_the_parse_is_reused_while_uid_generation_and_revision_stay() -> None:
    obs = Observer(5.0)

    def parsed(b: dict[str, Any]) -> Any:
        return obs._parsed(obs.memory(b), ServerView.of(b))

    first = parsed(body("a"))
    again = parsed({**body("a"), "status": {"revision": "r1", "phase": "Ready"}})  # a status change only
    assert again[0] is first[0] and again[1] is first[1]
    assert first[1] is first[0].spec  # the spec applied is the object's: held once
    updated = body("a", generation=2)
    updated["spec"]["replicas"] = 3
    server, spec = parsed(updated)
    assert server is not first[0] and server.spec.replicas == 3 and spec.replicas == 3
    assert parsed(body("a", generation=2, revision="r2"))[0] is not server  # another applied revision
    obs.track("DELETED", body("a"))
    assert parsed(body("a"))[0] is not first[0]  # forgotten with the server


def test_the_applied_spec_comes_from_the_ledger_record_of_the_running_revision() -> None:
    obs = Observer(5.0)
    b = body("a", generation=2)
    recorded = copy.deepcopy(b["spec"])
    recorded["replicas"] = 1
    b["spec"]["replicas"] = 4  # an update that was refused: replicas 1 still run
    b["status"]["revisions"] = [{"revision": "r1", "spec": recorded}]
    server, spec = obs._parsed(obs.memory(b), ServerView.of(b))
    assert (server.spec.replicas, spec.replicas) == (4, 1)


def test_the_handlers_render_spares_the_observer_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    obs = Observer(5.0)
    b = body("a")
    server = parse(b)
    obs.memory(b).spec_revision = (1, "abc123")
    real = builders.render

    def render(_: Any) -> Any:
        raise AssertionError("rendered again")

    monkeypatch.setattr(observer.builders, "render", render)
    assert obs._spec_revision(obs.memory(b), server, ServerView.of(b)) == "abc123"
    monkeypatch.setattr(observer.builders, "render", real)
    b2 = body("a", generation=2)
    # another generation: rendered
    assert obs._spec_revision(obs.memory(b2), server, ServerView.of(b2)) == real(server).revision
