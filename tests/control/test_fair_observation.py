"""Fair observation: servers whose pods never answer keep no other server from being observed (the shared slots are
given back while an observation waits on its pods)."""

from __future__ import annotations

import asyncio
import copy
from pathlib import Path
from typing import Any

import yaml

from sglang_operator.api.view import ServerView
from sglang_operator.control.observer import CONCURRENCY, Observer
from sglang_operator.control.ticks import Slot, slot_released

SAMPLE: dict[str, Any] = yaml.safe_load(
    (Path(__file__).resolve().parents[2] / "samples" / "qwen3.6-27b-known-good.yaml").read_text())


def body(name: str) -> dict[str, Any]:
    obj = copy.deepcopy(SAMPLE)
    obj["metadata"] = {"name": name, "namespace": "ns", "uid": f"uid-{name}", "generation": 1, "resourceVersion": "1"}
    obj["status"] = {"revision": "r1"}
    return obj


class Silent(Observer):
    """An observer whose observation of a ``hostile-*`` server waits on its pods for ``wait`` seconds (``released``:
    as the gather does, without its slot; else holding it), and of any other server only records when it ran."""

    def __init__(self, interval: float, wait: float, released: bool) -> None:
        super().__init__(interval)
        self.wait, self.released = wait, released
        self.observed: list[str] = []

    async def observe(self, view: ServerView, now: Any) -> None:
        name = view.name
        if not name.startswith("hostile"):
            self.observed.append(name)
            return
        if self.released:
            async with slot_released():
                await asyncio.sleep(self.wait)
        else:
            await asyncio.sleep(self.wait)


def tick(released: bool) -> list[str]:
    obs = Silent(1.0, wait=30.0, released=released)
    hostile = [f"hostile-{i:02d}" for i in range(4 * CONCURRENCY)]
    for name in hostile + [f"healthy-{i}" for i in range(6)]:
        obs.track("ADDED", body(name))

    async def run() -> list[str]:
        for name in hostile:  # under way first (a tuning woke them, or an earlier tick started them)
            obs.wake(("ns", name))
        await asyncio.sleep(0.05)
        await obs.tick()
        observed = sorted(obs.observed)  # within the tick
        await obs.stop()
        return observed

    return asyncio.run(run())


def test_servers_waiting_on_their_pods_hold_no_slot() -> None:
    assert tick(released=True) == [f"healthy-{i}" for i in range(6)]  # every healthy server, within the tick


def test_holding_the_slot_while_waiting_would_starve_the_others() -> None:
    assert len(tick(released=False)) < 6  # the harness shows the difference


def test_a_slot_given_back_is_taken_again_and_released_once() -> None:
    async def run() -> int:
        sem = asyncio.Semaphore(1)
        async with Slot(sem) as slot:
            async with slot.released():
                assert not sem.locked()  # another observation may run meanwhile
            assert sem.locked() and slot.held

        async def observation(reads_done: asyncio.Event) -> None:
            async with Slot(sem) as slot, slot.released():
                await reads_done.wait()
                # cancelled while taking the slot back: the exit must not release what it does not hold

        done = asyncio.Event()
        task = asyncio.get_running_loop().create_task(observation(done))
        await asyncio.sleep(0)
        await sem.acquire()  # another observation takes the slot meanwhile
        done.set()
        await asyncio.sleep(0)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        sem.release()
        return sem._value

    assert asyncio.run(run()) == 1
