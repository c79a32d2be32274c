"""The process-wide cap on tuning trials' streams: a level takes its whole concurrency at once, in turn."""

from __future__ import annotations

import asyncio

import pytest

from sglang_operator.io.trialstreams import OverCap, TrialStreams


def test_levels_share_the_cap_whole_and_in_order() -> None:
    async def run() -> list[str]:
        streams = TrialStreams(256)
        order: list[str] = []
        release = {name: asyncio.Event() for name in ("a", "b", "c")}

        async def level(name: str, n: int) -> None:
            async with streams.hold(n):
                order.append(name)
                await release[name].wait()

        a = asyncio.create_task(level("a", 200))
        await asyncio.sleep(0)
        b = asyncio.create_task(level("b", 100))  # does not fit beside a: waits, holding nothing
        await asyncio.sleep(0)
        c = asyncio.create_task(level("c", 50))  # would fit, but b came first
        await asyncio.sleep(0.01)
        assert streams.in_use == 200 and order == ["a"]
        release["a"].set()
        await asyncio.sleep(0.01)
        assert order == ["a", "b", "c"] and streams.in_use == 150  # both fit once a is done, b first
        release["b"].set()
        release["c"].set()
        await asyncio.gather(a, b, c)
        assert streams.in_use == 0
        return order

    asyncio.run(run())


def test_a_level_over_the_cap_is_refused_and_a_cancelled_wait_takes_nothing() -> None:
    async def run() -> None:
        streams = TrialStreams(8)
        with pytest.raises(OverCap, match="over the operator's cap of 8"):
            async with streams.hold(9):
                pass
        hold = asyncio.Event()

        async def level(n: int) -> None:
            async with streams.hold(n):
                await hold.wait()

        first = asyncio.create_task(level(6))
        await asyncio.sleep(0)
        waiting = asyncio.create_task(level(4))
        behind = asyncio.create_task(level(2))  # fits, but waits behind the one before it
        await asyncio.sleep(0.01)
        assert streams.in_use == 6
        waiting.cancel()  # the trial was stopped while it waited
        await asyncio.gather(waiting, return_exceptions=True)
        await asyncio.sleep(0.01)
        assert streams.in_use == 8  # the one behind it runs now
        hold.set()
        await asyncio.gather(first, behind)
        assert streams.in_use == 0

    asyncio.run(run())


def test_a_trial_level_over_the_cap_sends_nothing() -> None:
    from sglang_operator.decisions.sampling.roles import roles_for
    from sglang_operator.io.sglang_http import SGLangHTTP
    from sglang_operator.io.trialbench import BenchPlan, TrialPod, measure_trial
    from sglang_operator.sglang.versions import parse_version

    async def run() -> None:
        http = SGLangHTTP(trial_streams=4)
        try:
            with pytest.raises(OverCap):  # the pod's port is closed: any request would have failed, none was sent
                await measure_trial(http, [TrialPod("p", "http://127.0.0.1:1")], "m",
                                    roles_for(parse_version("0.5.10")), BenchPlan(levels=(8,), warmup_seconds=0))
            assert http.trial_streams.in_use == 0
        finally:
            await http.aclose()

    asyncio.run(run())
