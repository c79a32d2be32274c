"""A revision's measured capacity per replica (decisions/capacity.py, issue 30 item 4): the highest concurrency at
which each request still gets the SLO's tok/s, interpolated between the measured levels; the figures of the serving
revision's settings from the namespace's finished tunings; the target held while judged, the configured one until a
capacity is measured; and the ScaledObject's threshold following it."""

from __future__ import annotations

import copy
import datetime as dt
import sys
from pathlib import Path
from typing import Any

import pytest

from sglang_operator.api.analysis import Analysis, AnalysisPhase
from sglang_operator.api.autoscaling import AutoscalingStatus, CapacityBracket, MeasuredCapacity
from sglang_operator.api.server import parse
from sglang_operator.api.status import SGLangServerStatus
from sglang_operator.decisions import autoscaling as scaling
from sglang_operator.decisions import capacity as cap
from sglang_operator.decisions.tuning import known_best as kb

sys.path.insert(0, str(Path(__file__).resolve().parent / "tuning"))
from test_known_best import SERVER, chain, known, server, tuning

T0 = dt.datetime(2026, 12, 4, tzinfo=dt.UTC)
BRACKETED = CapacityBracket.BRACKETED
AUTO = {"minReplicas": 1, "maxReplicas": 4, "metric": "measuredCapacity", "target": 4,
        "slo": {"minTokensPerSecondPerRequest": 20}, "prometheus": {"address": "http://prometheus:9090"}}
PROM = "http://prometheus:9090"
"""The operator's --prometheus-address, which the spec names (allowed: issue 47)."""
PER_REQUEST = {1: {1: 32.7, 2: 29.1, 4: 23.8, 6: 20.2, 8: 17.5}, 3: {1: 43.5, 2: 37.3, 3: 24.9, 4: 18.7, 8: 9.3}}
"""tok/s per request of 1/1/2 and 3/1/4 on 2 × RTX A6000 by the simulator's noise-free model (32-token answers)."""


def level(concurrency: int, per_request: float) -> kb.MeanLevelFigures:
    return kb.MeanLevelFigures(concurrency=concurrency, decode_tokens_per_second=per_request * 1.1,
                           output_tokens_per_second=per_request * concurrency)


def levels(steps: int) -> list[kb.MeanLevelFigures]:
    return [level(c, v) for c, v in PER_REQUEST[steps].items()]


def measured_tuning(name: str = "capacity-tune") -> dict[str, Any]:
    trials = [{"name": f"t-trial-{steps}", "settings": chain(steps), "verdict": "Completed",
               "levels": [{"concurrency": f.concurrency, "decodeTokensPerSecond": f.decode_tokens_per_second,
                           "outputTokensPerSecond": f.output_tokens_per_second} for f in levels(steps)]}
              for steps in (1, 3)]
    return tuning(name, trials)


def autoscaled(steps: int = 1, autoscaling: dict[str, Any] | None = None) -> Any:
    body = copy.deepcopy(SERVER)
    body["spec"]["speculative"]["numSteps"] = steps
    body["spec"]["nodeSelector"] = {kb.GPU_PRODUCT_LABEL: "NVIDIA-RTX-A6000"}
    body["spec"]["autoscaling"] = autoscaling or AUTO
    return parse({**body, "metadata": {"name": "s", "namespace": "ns", "uid": "u"}})


def test_the_capacity_is_interpolated_between_the_levels_around_the_slo() -> None:
    got = cap.capacity_of(levels(1), 20)
    assert got is not None and got.met
    assert got.requests == pytest.approx(6 + (20.2 - 20) / (20.2 - 17.5) * 2)  # between 6 (20.2) and 8 (17.5)
    assert "at 6: 20.2 tok/s" in got.basis and "at 8: 17.5 tok/s" in got.basis
    faster = cap.capacity_of(levels(3), 20)
    assert faster is not None and faster.requests == pytest.approx(3 + 4.9 / 6.2)  # fewer: its batch is smaller
    exact = cap.capacity_of([level(2, 30), level(4, 20), level(8, 10)], 20)
    assert exact is not None and exact.requests == 4


def test_a_load_spread_over_n_replicas_gives_the_capacity_of_one() -> None:
    """An InPlace tuning of 4 replicas spreads each level's c streams over the 4 (the trial's load generator): the
    same per-request figures at 4 × the concurrency are one replica's capacity 4 times over, never 4 × too high."""
    one = cap.capacity_of(levels(1), 20)
    four = cap.capacity_of([level(4 * f.concurrency, cap.per_request(f)) for f in levels(1)], 20,
                           replicas=4)
    assert one is not None and four is not None and four.met
    assert four.requests == pytest.approx(one.requests) and "over 4 replicas" in four.basis
    none = cap.capacity_of(levels(1), 50, replicas=4)
    assert none is not None and none.requests == 1  # the SLO never met: still one request per replica
    with pytest.raises(ValueError, match="replicas must be at least 1"):
        cap.capacity_of(levels(1), 20, replicas=0)


def test_an_inplace_trial_over_3_replicas_gives_a_third_of_its_concurrency() -> None:
    """Issue 41: the 3 replicas of an InPlace trial each ran a third of the c streams; per replica a third."""
    spread = cap.capacity_of([level(3 * f.concurrency, cap.per_request(f)) for f in levels(1)], 20, replicas=3)
    one = cap.capacity_of(levels(1), 20)
    assert spread is not None and one is not None
    assert spread.requests == pytest.approx(one.requests) and "over 3 replicas" in spread.basis
    alone = cap.capacity_of([level(3 * f.concurrency, cap.per_request(f)) for f in levels(1)], 20)
    assert alone is not None and alone.requests == pytest.approx(3 * one.requests)  # what a missing division gives


def test_the_capacity_is_capped_by_max_running_requests() -> None:
    """Issue 41: SGLang runs at most ``spec.memory.maxRunningRequests`` per replica and queues the rest; a figure
    above it is never a capacity, and the basis says why it is lower than the levels suggest."""
    capped = cap.capacity_of(levels(1), 20, max_running_requests=4)
    assert capped is not None and capped.met and capped.requests == 4
    assert "capped at maxRunningRequests 4" in capped.basis and "at 6: 20.2 tok/s" in capped.basis
    above = cap.capacity_of(levels(1), 20, max_running_requests=16)
    assert above is not None and above.requests == pytest.approx(6.15, abs=0.01) and "capped" not in above.basis
    spread = cap.capacity_of([level(2 * f.concurrency, cap.per_request(f)) for f in levels(1)], 20, replicas=2,
                             max_running_requests=5)
    assert spread is not None and spread.requests == 5  # per replica 6.15, then capped: the cap is per replica
    with pytest.raises(ValueError, match="max_running_requests must be at least 1"):
        cap.capacity_of(levels(1), 20, max_running_requests=0)
    table = known(tuning("mrr", [{"name": "t-trial-1", "settings": {**chain(1), "maxRunningRequests": 4},
                                  "verdict": "Completed",
                                  "levels": [{"concurrency": f.concurrency,
                                              "decodeTokensPerSecond": f.decode_tokens_per_second,
                                              "outputTokensPerSecond": f.output_tokens_per_second}
                                             for f in levels(1)]}]))
    srv = autoscaled(1)
    srv.spec.memory.max_running_requests = 4
    got = cap.capacity(table, srv, srv.spec, "r1")  # the serving revision's own spec.memory.maxRunningRequests
    assert got is not None and got.requests_per_replica == 4 and "capped at maxRunningRequests 4" in got.basis


def test_never_extrapolated_and_one_request_when_the_slo_is_never_met() -> None:
    every = cap.capacity_of(levels(1), 10)
    assert every is not None and every.met and every.requests == 8 and "highest level measured" in every.basis
    none = cap.capacity_of(levels(1), 50)
    assert none is not None and not none.met and none.requests == 1 and "below 50" in none.basis
    assert cap.capacity_of([], 20) is None
    with pytest.raises(ValueError, match="slo must be > 0"):
        cap.capacity_of(levels(1), 0)


def test_the_serving_revisions_settings_find_their_figures_from_the_finished_tunings() -> None:
    table = known(measured_tuning())
    slow, fast = autoscaled(1), autoscaled(3)
    one = cap.capacity(table, slow, slow.spec, "r1")
    three = cap.capacity(table, fast, fast.spec, "r2")
    assert one is not None and three is not None
    assert (one.settings, one.revision, one.tunings) == ("1/1/2", "r1", ["capacity-tune"])
    assert one.requests_per_replica == pytest.approx(6.15, abs=0.01)
    assert three.settings == "3/1/4" and three.requests_per_replica == pytest.approx(3.79, abs=0.01)
    assert cap.capacity(table, autoscaled(5), autoscaled(5).spec, "r3") is None  # never measured
    assert cap.capacity(known(), slow, slow.spec, "r1") is None  # no tuning
    plain = autoscaled(1, {**AUTO, "metric": "runningRequests", "slo": None})
    assert not cap.uses_measured_capacity(plain) and cap.capacity(table, plain, plain.spec, "r1") is None


def test_the_workload_measured_at_most_levels_is_the_one_used() -> None:
    short = tuning("short", [{"name": "t-trial-1", "settings": chain(1), "verdict": "Completed",
                              "levels": [{"concurrency": 1, "decodeTokensPerSecond": 40.0,
                                          "outputTokensPerSecond": 40.0}]}], prompts=["other prompt"])
    table = known(short, measured_tuning())
    got = cap.measured(table, server(1))
    assert got is not None and len(got[1]) == 5


def test_the_target_is_held_while_judged_and_is_the_configured_one_until_measured() -> None:
    srv = autoscaled(1)
    a = MeasuredCapacity(requests_per_replica=6.15, settings="1/1/2", revision="r1", basis="…", bracket=BRACKETED)
    b = MeasuredCapacity(requests_per_replica=3.79, settings="3/1/4", revision="r2", basis="…", bracket=BRACKETED)
    assert cap.target(srv, None, None, None, verifying=False) == (4, None)  # not measured yet: spec.autoscaling.target
    assert cap.target(srv, a, None, None, verifying=False) == (6.15, a)
    assert cap.target(srv, b, 6.15, a, verifying=True) == (6.15, a)  # verifying r2: r1's capacity holds
    assert cap.target(srv, b, 6.15, a, verifying=False) == (3.79, b)  # promoted: r2's
    plain = autoscaled(1, {**AUTO, "metric": "runningRequests", "slo": None})
    assert cap.target(plain, None, 6.15, a, verifying=False) == (4, None)


def test_the_scaled_object_threshold_and_status_follow_the_capacity() -> None:
    srv = autoscaled(1)
    measured = cap.capacity(known(measured_tuning()), srv, srv.spec, "r1")
    free = SGLangServerStatus(revision="r1")
    wanted = scaling.want(srv, free, keda=True, prometheus_address=PROM, had=False, measured=measured)
    assert wanted.scaled_object is not None
    trigger = wanted.scaled_object["spec"]["triggers"][0]["metadata"]
    assert trigger["threshold"] == "6.15" and "sglang_operator_server_running_requests" in trigger["query"]
    body, cond = scaling.report(srv, free, wanted, True, None, 1, T0)
    assert body is not None and cond is not None
    assert body["target"] == 6.15 and body["capacity"]["settings"] == "1/1/2"
    assert "measured capacity of 1/1/2" in cond["message"] and "capacity-tune" in cond["message"]
    stored = AutoscalingStatus.model_validate(body)
    verifying = SGLangServerStatus(revision="r2", analysis=Analysis(
        revision="r2", phase=AnalysisPhase.VERIFYING, since=T0, progress_started_at=T0))
    fast = autoscaled(3)
    other = cap.capacity(known(measured_tuning()), fast, fast.spec, "r2")
    held = scaling.want(fast, verifying, keda=True, prometheus_address=PROM, had=True, measured=other,
                        stored=stored)
    assert held.scaled_object is not None and held.target == 6.15
    assert held.scaled_object["spec"]["triggers"][0]["metadata"]["threshold"] == "6.15"
    unmeasured = scaling.want(srv, free, keda=True, prometheus_address=PROM, had=False)
    _, cond = scaling.report(srv, free, unmeasured, True, None, 1, T0)
    assert unmeasured.target == 4 and cond is not None and "configured target" in cond["message"]


def one_level_tuning(per_request: float) -> dict[str, Any]:
    """A finished tuning of 1/1/2 that measured one level, 4 concurrent requests at ``per_request`` tok/s each."""
    return tuning("one-level", [{"name": "t-trial-1", "settings": chain(1), "verdict": "Completed",
                                 "levels": [{"concurrency": 4, "decodeTokensPerSecond": per_request * 1.1,
                                             "outputTokensPerSecond": per_request * 4}]}])


def applied(srv: Any, table: kb.KnownBest) -> tuple[scaling.Want, dict[str, Any], dict[str, Any]]:
    measured = cap.capacity(table, srv, srv.spec, "r1")
    free = SGLangServerStatus(revision="r1")
    wanted = scaling.want(srv, free, keda=True, prometheus_address=PROM, had=False, measured=measured)
    body, cond = scaling.report(srv, free, wanted, True, None, 1, T0)
    assert body is not None and cond is not None and wanted.scaled_object is not None
    return wanted, body, dict(cond)


def test_a_one_level_tuning_keeps_the_configured_target_and_says_why() -> None:
    """Issue 41: every level met the SLO (one level here), so 4 is a floor, not where the SLO stops being met: the
    configured target (2, not the 4 measured) holds, the status shows what was measured and the condition says it
    is not bracketed."""
    srv = autoscaled(1, {**AUTO, "target": 2, "slo": {"minTokensPerSecondPerRequest": 22}})
    wanted, body, cond = applied(srv, known(one_level_tuning(25.0)))
    assert wanted.target == 2 and wanted.scaled_object is not None
    assert wanted.scaled_object["spec"]["triggers"][0]["metadata"]["threshold"] == "2"
    assert body["target"] == 2 and body["capacity"]["requestsPerReplica"] == 4
    assert body["capacity"]["bracket"] == "Unbracketed"
    assert cond["reason"] == "ScaledObjectApplied"
    assert "≥ 4 requests per replica at 22 tok/s per request for 1/1/2, not bracketed" in cond["message"]
    assert "the configured target" in cond["message"] and "one-level" in cond["message"]


def test_no_level_meeting_the_slo_keeps_the_configured_target_and_warns() -> None:
    srv = autoscaled(1, {**AUTO, "target": 2, "slo": {"minTokensPerSecondPerRequest": 22}})
    wanted, body, cond = applied(srv, known(one_level_tuning(15.0)))
    assert wanted.target == 2 and body["capacity"]["bracket"] == "NotMet"
    assert body["capacity"]["requestsPerReplica"] == 1
    assert cond["status"] == "True" and cond["reason"] == scaling.SLO_NOT_MET
    assert "warning, 1/1/2 never gave 22 tok/s per request" in cond["message"]


def test_a_bracketed_capacity_replaces_the_target_and_a_stored_one_of_before_is_no_bracket() -> None:
    srv = autoscaled(1)
    wanted, body, _ = applied(srv, known(measured_tuning()))
    assert wanted.target == pytest.approx(6.15, abs=0.01) and body["capacity"]["bracket"] == "Bracketed"
    old = MeasuredCapacity.model_validate({"requestsPerReplica": 6.15, "settings": "1/1/2", "basis": "…"})
    assert cap.target(srv, old, None, None, verifying=False) == (4, old)  # a status of before: not bracketed


@pytest.mark.parametrize(("autoscaling", "message"), [
    ({**AUTO, "slo": None}, "metric is measuredCapacity but slo is not set"),
    ({**AUTO, "metric": "runningRequests"}, "slo is set but metric is runningRequests"),
])
def test_the_slo_goes_with_measured_capacity_only(autoscaling: dict[str, Any], message: str) -> None:
    spec = {k: v for k, v in autoscaling.items() if v is not None}
    with pytest.raises(ValueError, match=message):
        autoscaled(1, spec)
