"""The tuning queue shared across namespaces, on the fake API (issue 42 item 1): with ``--max-running-tunings 2``,
alice's two tunings run; bob's arrives and waits ``Queued`` (words naming no tenant) while alice's younger one is told
it is yielding; that runner stops at its next trial boundary (never with a trial running: its trial is measured and
recorded first), and the next decision runs bob's. The runners' trials are faked (:class:`Boundary`); the queue,
the worker and the runner's boundary rule are the operator's."""

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
from sglang_operator.decisions.tuning.queue import QUEUED

SAMPLE: dict[str, Any] = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "samples" / "qwen3.6-27b-known-good.yaml").read_text())


def server(ns: str, name: str) -> Obj:
    body = copy.deepcopy(SAMPLE)
    body["metadata"] = {"name": name, "namespace": ns}
    return body


def tuning(ns: str, name: str, server_name: str, second: int, status: dict[str, Any] | None = None) -> Obj:
    body: Obj = {"apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangTuning",
                 "metadata": {"name": name, "namespace": ns, "generation": 1, "uid": f"uid-{ns}-{name}",
                              "creationTimestamp": f"2026-01-01T00:00:{second:02d}Z"},
                 "spec": {"serverRef": {"name": server_name}, "parameters": {"numSteps": {"min": 1, "max": 3}},
                          "workload": {"secondsPerLevel": 5, "concurrency": [{"level": 1}]},
                          "budget": {"maxTrialCount": 4}}}
    if status is not None:
        body["status"] = status
    return body


class Boundary:
    """A runner's trials, faked: ``run`` goes on until the queue says it yields, then ends at a boundary."""

    def __init__(self) -> None:
        self.yielded: list[str] = []

    async def run(self, runner: ctl.TuningRunner) -> None:
        while not runner.yielding:
            runner._woken.clear()
            await runner._woken.wait()  # what a running trial does: goes on; wake() is how the queue tells it
        self.yielded.append(runner.name)


@pytest.fixture
async def world(monkeypatch: pytest.MonkeyPatch) -> AsyncIterator[tuple[FakeKube, Observer, TuningWorker, Boundary]]:
    fk = FakeKube().install()
    obs = Observer(1.0)
    boundary = Boundary()

    async def run(runner: ctl.TuningRunner) -> None:
        await boundary.run(runner)

    monkeypatch.setattr(ctl.TuningRunner, "run", run)
    worker = TuningWorker(obs, limit=2)
    yield fk, obs, worker, boundary
    await worker.stop()
    await obs.stop()


async def test_a_second_namespace_gets_a_slot_at_the_next_trial_boundary_of_the_first(
        world: tuple[FakeKube, Observer, TuningWorker, Boundary]) -> None:
    fk, obs, worker, boundary = world
    for ns, srv in (("alice", "s1"), ("alice", "s2"), ("bob", "s1")):
        obs.track("ADDED", fk.put(server(ns, srv)))
    begun = {"phase": "Running", "startedAt": "2026-01-01T00:01:00Z"}
    for body in (tuning("alice", "a1", "s1", 1, begun), tuning("alice", "a2", "s2", 2, begun)):
        obs.tuning_event("ADDED", fk.put(body))
    await worker.decide()
    assert set(worker.runners) == {("alice", "a1"), ("alice", "a2")}
    assert not any(r.yielding for r, _ in worker.runners.values())

    obs.tuning_event("ADDED", fk.put(tuning("bob", "b1", "s1", 30)))
    await worker.decide()
    assert set(worker.runners) == {("alice", "a1"), ("alice", "a2")}  # a2 keeps its slot to its boundary
    assert worker.runners[("alice", "a2")][0].yielding and not worker.runners[("alice", "a1")][0].yielding
    bob = fk.get("SGLangTuning", "bob", "b1")
    assert bob is not None
    cond = next(c for c in bob["status"]["conditions"] if c["type"] == "Running")
    assert (cond["status"], cond["reason"]) == ("False", QUEUED) and "alice" not in cond["message"]

    for _ in range(100):  # a2's runner reaches its boundary and stops
        if boundary.yielded:
            break
        await asyncio.sleep(0.01)
    assert boundary.yielded == ["a2"]
    await worker.decide()
    assert set(worker.runners) == {("alice", "a1"), ("bob", "b1")}
    a2 = fk.get("SGLangTuning", "alice", "a2")
    assert a2 is not None
    cond = next(c for c in a2["status"]["conditions"] if c["type"] == "Running")
    assert (cond["status"], cond["reason"]) == ("False", QUEUED) and "bob" not in cond["message"]
    assert a2["status"]["phase"] == "Running"  # begun: it resumes when a slot is free for alice


async def test_a_yielding_runner_stops_only_between_trials() -> None:
    """The runner's boundary rule: told to yield with a trial running, it steps on (measures and records the trial);
    with none running, its step ends the run without a write."""
    fk = FakeKube().install()
    obs = Observer(1.0)
    try:
        obs.track("ADDED", fk.put(server("alice", "s1")))
        status = {"phase": "Running", "startedAt": "2026-01-01T00:01:00Z", "trials": []}
        fk.put(tuning("alice", "a1", "s1", 1, status))
        runner = ctl.TuningRunner("alice", "a1", obs)
        runner.yielding = True
        writes = len(fk.writes)
        assert await runner.step() is False and len(fk.writes) == writes
        trial = {"name": "a1-trial-0", "settings": {"speculative": False}, "revision": "r0",
                 "startedAt": "2026-01-01T00:01:00Z"}
        fk.put(tuning("alice", "a1", "s1", 1, {**status, "trials": [trial]}))
        measured: list[str] = []

        async def resume(*args: Any) -> None:
            measured.append(args[-1].name)

        runner._resume = resume  # type: ignore[method-assign]
        assert await runner.step() is True and measured == ["a1-trial-0"]
    finally:
        await obs.stop()
