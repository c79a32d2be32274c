"""A tuning's status patch and the Event that follows it are one act: the queue cancels the runner of a tuning it no
longer runs, and the patch that ends a tuning is what makes it so; a runner cancelled between its patch and the Event
still posts the Event (CI saw an e2e tuning end ``Succeeded`` with no ``TuningSucceeded`` Event)."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import Any

import pytest
from fakekube import FakeKube
from test_tuning_trial_spec import Shadow, server, shadow

from sglang_operator.control import tuning as ctl


class SlowEvents(FakeKube):
    """Posts an Event only once ``gate`` is set; ``entered`` is set as the first post begins."""

    def __init__(self) -> None:
        super().__init__()
        self.gate, self.entered = asyncio.Event(), asyncio.Event()

    async def post_event(self, obj: Mapping[str, Any], type_: str, reason: str, message: str) -> None:
        self.entered.set()
        await self.gate.wait()
        await super().post_event(obj, type_, reason, message)


async def test_a_runner_cancelled_between_its_ending_patch_and_its_event_still_posts_the_event(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ctl, "POLL_SECONDS", 0.01)
    fk = SlowEvents()
    fk.install()
    world = Shadow(fk)
    try:
        # a multi-node server: no Shadow trial of it runs, so the first step ends the tuning Failed
        world.put(server(replicas=2, parallelism={"tensor": 2, "nodes": 2}), shadow())
        task = asyncio.get_running_loop().create_task(world.runner.step())
        await asyncio.wait_for(fk.entered.wait(), 5)
        assert world.status()["phase"] == "Failed" and fk.events == []  # patched; its Event on the way
        task.cancel()  # as the queue does when the patch tells it the tuning is over
        with pytest.raises(asyncio.CancelledError):
            await task
        fk.gate.set()
        for _ in range(100):
            if fk.events:
                break
            await asyncio.sleep(0.01)
        assert [e[2] for e in fk.events] == ["TuningFailed"]
    finally:
        await world.obs.stop()
