"""Issue 42: the per-server parse CPU budget. A server over it is backed off (interval × 2ⁿ, at most 60 s, reset by a
sample within it) and told so in ``SamplingBackedOff``; the sampler neither samples it before the back-off ends nor any
server more often than its interval floor."""

from __future__ import annotations

import datetime as dt

from expo import exposition
from fakepods import serving, text

from sglang_operator.decisions.sampling import budget
from sglang_operator.decisions.sampling.budget import CostBackoff, after_sample, may_sample
from sglang_operator.decisions.sampling.limits import ScrapeLimits
from sglang_operator.decisions.sampling.model import Signal
from sglang_operator.decisions.sampling.roles import roles_for
from sglang_operator.io import scrape_metrics
from sglang_operator.io.sampler import Sampler, SamplingParams, ServerRef
from sglang_operator.io.sglang_http import SGLangHTTP
from sglang_operator.sglang.versions import parse_version

T0 = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
ROLES = roles_for(parse_version("0.5.23"))


def _at(seconds: float) -> dt.datetime:
    return T0 + dt.timedelta(seconds=seconds)


def test_a_server_over_its_budget_is_backed_off_doubling_up_to_a_minute_and_reset_within_it() -> None:
    state = CostBackoff()
    waits = []
    for _ in range(8):
        state = after_sample(state, T0, 1.0, cpu_seconds=0.6, pods=8, budget=0.25)
        waits.append(state.wait_seconds)
        assert state.until == _at(state.wait_seconds)
    assert waits == [2.0, 4.0, 8.0, 16.0, 32.0, 60.0, 60.0, 60.0]
    assert state.over == 8 and state.pods == 8 and state.cpu_seconds == 0.6
    assert not may_sample(state, _at(59.9)) and may_sample(state, _at(60.0))
    state = after_sample(state, _at(60), 1.0, cpu_seconds=0.01, pods=8, budget=0.25)
    assert state == CostBackoff(cpu_seconds=0.01, pods=8) and may_sample(state, _at(60))
    long = after_sample(CostBackoff(), T0, 120.0, cpu_seconds=1.0, pods=1, budget=0.25)
    assert long.wait_seconds == 120.0  # never less than one interval


def test_the_condition_says_backed_off_then_within_budget_and_nothing_for_a_server_never_over() -> None:
    over = after_sample(CostBackoff(), T0, 1.0, cpu_seconds=0.62, pods=8, budget=0.25)
    c = budget.condition(over, 0.25, 1.0, False, 3, T0)
    assert c is not None and (c["type"], c["status"], c["reason"]) == ("SamplingBackedOff", "True", budget.OVER)
    assert "0.62 s of CPU" in c["message"] and "--scrape-cpu-budget-seconds" in c["message"]
    assert "again in 2 s instead of 1 s" in c["message"] and c["observedGeneration"] == 3
    within = after_sample(over, T0, 1.0, cpu_seconds=0.01, pods=8, budget=0.25)
    back = budget.condition(within, 0.25, 1.0, True, 3, T0)
    assert back is not None and (back["status"], back["reason"]) == ("False", budget.WITHIN)
    assert budget.condition(within, 0.25, 1.0, False, 3, T0) is None


async def test_the_sampler_backs_off_a_server_over_its_budget_and_keeps_sampling_one_within_it() -> None:
    def body(n: int) -> str:
        return exposition(gen=1000.0 * n, verify=400 * n, running=2)

    now = [T0]
    http = SGLangHTTP()
    tight = Sampler(http, clock=lambda: now[0], limits=ScrapeLimits(cpu_budget_seconds=1e-9))
    roomy = Sampler(http, clock=lambda: now[0], limits=ScrapeLimits(cpu_budget_seconds=60.0))
    params = SamplingParams(interval_seconds=1, signal=Signal.TRAFFIC)
    breaches = scrape_metrics.CPU_BUDGET_BREACHES._value.get()
    try:
        async with serving({"p0": text(body), "p1": text(body)}) as pods:
            heavy = ServerRef("ns", "heavy", ROLES, pods.port, "m")
            light = ServerRef("ns", "light", ROLES, pods.port, "m")
            await tight.sample(heavy, pods.view(), params)
            await roomy.sample(light, pods.view(), params)
            assert heavy.state.cost.over == 1 and heavy.state.cost.pods == 2 and heavy.state.cost.cpu_seconds > 0
            assert scrape_metrics.CPU_BUDGET_BREACHES._value.get() == breaches + 1
            assert light.state.cost.over == 0
            now[0] = _at(1.0)  # one interval later: the light server is due, the heavy one waits 2 intervals
            assert roomy.due(light.state, 1.0) and not tight.due(heavy.state, 1.0)
            now[0] = _at(2.0)
            assert tight.due(heavy.state, 1.0)
            await tight.sample(heavy, pods.view(), params)
            assert heavy.state.cost.over == 2 and heavy.state.cost.until == _at(6.0)
    finally:
        await http.aclose()


def test_no_server_is_sampled_more_often_than_the_interval_floor() -> None:
    now = [T0]
    sampler = Sampler(SGLangHTTP.__new__(SGLangHTTP), clock=lambda: now[0],
                      limits=ScrapeLimits(min_interval_seconds=5.0))
    ref = ServerRef("ns", "s", ROLES, 1, "m")
    ref.state.last = T0
    now[0] = _at(2.0)
    assert not sampler.due(ref.state, 1.0)  # an interval of 1 s asked for: 5 s kept to
    now[0] = _at(4.5)
    assert sampler.due(ref.state, 1.0)  # the floor less half a second (a late tick)
    ref.state.last = T0
    now[0] = _at(0.49)
    assert not Sampler(sampler.http, clock=lambda: now[0]).due(ref.state, 1.0)  # at interval 1: half of it
    now[0] = _at(0.5)
    assert Sampler(sampler.http, clock=lambda: now[0]).due(ref.state, 1.0)
    now[0] = _at(28.4)
    assert not Sampler(sampler.http, clock=lambda: now[0]).due(ref.state, 30.0)  # at 30 s: 0.95 of it
    now[0] = _at(28.5)
    assert Sampler(sampler.http, clock=lambda: now[0]).due(ref.state, 30.0)


def test_the_condition_reaches_the_status_through_decide() -> None:
    from rollback_driver import FAST, GOOD, SETUP

    from sglang_operator.api.view import ServerView
    from sglang_operator.decisions.observation import Observed, decide
    from sglang_operator.decisions.pods import pod_health
    from sglang_operator.decisions.rollback_state import Observation
    from sglang_operator.decisions.sampling.model import PodView

    pod = {"metadata": {"name": "p0", "labels": {"sglang-operator.io/revision": GOOD}},
           "status": {"podIP": "10.0.0.1", "phase": "Running", "conditions": [{"type": "Ready", "status": "True"}],
                      "containerStatuses": [{"name": "sglang", "ready": True, "restartCount": 0,
                                             "state": {"running": {}}}]}}

    def status_after(stored: dict[str, object], cond: dict[str, object] | None) -> dict[str, object]:
        obs = Observation(revision=GOOD, desired_pods=1, setup=SETUP, pods=(PodView("p0", True, 0),),
                          spec_revision=GOOD)
        o = Observed(now=T0, generation=1, health=pod_health([pod], 1, GOOD, 1, T0), observation=obs, sampling=cond)
        view = ServerView.of({"metadata": {"name": "s", "namespace": "ns"}, "status": stored})
        return decide(view.status, o, FAST).status_json

    over = after_sample(CostBackoff(), T0, 1.0, cpu_seconds=0.6, pods=8, budget=0.25)
    first = status_after({"revision": GOOD}, budget.condition(over, 0.25, 1.0, False, 1, T0))
    (c,) = [c for c in first["conditions"] if c["type"] == "SamplingBackedOff"]
    assert (c["status"], c["reason"]) == ("True", budget.OVER)
    within = after_sample(over, T0, 1.0, cpu_seconds=0.01, pods=8, budget=0.25)
    later = status_after(first, budget.condition(within, 0.25, 1.0, True, 1, T0))
    (c,) = [c for c in later["conditions"] if c["type"] == "SamplingBackedOff"]
    assert (c["status"], c["reason"]) == ("False", budget.WITHIN)
    never = status_after({"revision": GOOD}, budget.condition(CostBackoff(), 0.25, 1.0, False, 1, T0))
    assert not [c for c in never["conditions"] if c["type"] == "SamplingBackedOff"]
