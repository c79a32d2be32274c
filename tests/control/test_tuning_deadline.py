"""The trial deadline in every state (issue 42 item 1): a running trial is cut at the tuning's deadline
(decisions/tuning/deadline.py ``trial_cutoff``: the tuning's end, by ``budget.maxDurationSeconds`` or the operator's
``--max-tuning-duration-seconds``, plus one trial's Ready deadline and planned measurement) whatever it waits for —
here a measurement whose pod never answers, then the same trial resumed after the cutoff (an operator restart) —
recorded ``Failed`` with the reason, its Shadow workload deleted; the tuning then ends at its next step. Only the
HTTP load is faked (``measure_trial`` never returns)."""

from __future__ import annotations

import asyncio
import copy
import datetime as dt
from typing import Any

import pytest
from fakekube import FakeKube
from test_tuning_prune_wiring import RUNNING, STATUS, Views
from test_tuning_trial_wait import SAMPLE, TUNING

from sglang_operator.api.server import parse
from sglang_operator.api.tuning_spec import SGLangTuningSpec
from sglang_operator.api.view import ServerView, TuningView
from sglang_operator.control import tuning as ctl
from sglang_operator.decisions.conditions import rfc3339
from sglang_operator.decisions.tuning import deadline
from sglang_operator.decisions.tuning import trials as plan
from sglang_operator.io import trialbench

SPEC: dict[str, Any] = {"serverRef": {"name": "s"}, "parameters": {"numSteps": {"min": 1, "max": 4}},
                        "workload": {"secondsPerLevel": 5, "warmupSeconds": 0, "repetitions": 1,
                                     "concurrency": [{"level": 1}]},
                        "budget": {"maxDurationSeconds": 3600, "trialDeadlineSeconds": 30}}
CAP = 600.0


def started(seconds_left: float) -> str:
    """``status.startedAt`` such that the trial cutoff (with the operator's cap :data:`CAP`) is ``seconds_left``
    from now."""
    spec = SGLangTuningSpec.model_validate(SPEC)
    span = deadline.trial_cutoff(spec, dt.datetime(2026, 1, 1, tzinfo=dt.UTC), CAP) - dt.datetime(
        2026, 1, 1, tzinfo=dt.UTC)
    return rfc3339(dt.datetime.now(dt.UTC) - span + dt.timedelta(seconds=seconds_left))


def world(monkeypatch: pytest.MonkeyPatch, seconds_left: float) -> FakeKube:
    fake = FakeKube().install()
    server = copy.deepcopy(SAMPLE)
    server["metadata"] = {"name": "s", "namespace": "ns"}
    fake.put(server)
    tuning = copy.deepcopy(TUNING)
    tuning["spec"] = copy.deepcopy(SPEC)
    tuning["status"] = {**copy.deepcopy(STATUS), "startedAt": started(seconds_left)}
    fake.put(tuning)
    monkeypatch.setattr(ctl, "POLL_SECONDS", 0.01)

    async def never(*_: Any, **__: Any) -> Any:  # a pod that never answers, a stream slot that never frees
        await asyncio.Event().wait()

    monkeypatch.setattr(trialbench, "measure_trial", never)
    return fake


async def resume(fk: FakeKube) -> dict[str, Any]:
    views = Views(fk)
    body = fk.get("SGLangTuning", "ns", "t")
    assert body is not None
    tuning = TuningView.of(body)
    server_body = fk.server("s")
    try:
        await asyncio.wait_for(ctl.TuningRunner("ns", "t", views, duration_cap=CAP)._resume(
            tuning, tuning.status, tuning.tuning.spec, ServerView.of(server_body), parse(server_body), RUNNING), 30)
    finally:
        await views.http.aclose()
    stored = fk.get("SGLangTuning", "ns", "t")
    assert stored is not None
    return next(t for t in stored["status"]["trials"] if t["name"] == RUNNING.name)


@pytest.mark.parametrize("seconds_left", [0.5, -5.0], ids=["while-measuring", "resumed-after-the-cutoff"])
async def test_a_trial_still_running_at_the_tunings_deadline_is_cut_and_recorded_failed(
        monkeypatch: pytest.MonkeyPatch, seconds_left: float) -> None:
    fk = world(monkeypatch, seconds_left)
    record = await resume(fk)
    assert record["verdict"] == "Failed", record
    assert "still running at the tuning's deadline" in record["reason"] and "cut" in record["reason"]
    assert fk.get("Deployment", "ns", RUNNING.name) is None  # the Shadow workload deleted
    # the next step finishes the tuning: the cap has passed
    stored = fk.get("SGLangTuning", "ns", "t")
    assert stored is not None
    view = TuningView.of(stored)
    elapsed = (dt.datetime.now(dt.UTC) - dt.datetime.fromisoformat(view.status.started_at or "")).total_seconds()
    step = plan.next_step(view.tuning.spec, view.status, [], elapsed, CAP)
    assert step.kind == "finish" and "--max-tuning-duration-seconds" in step.reason


def test_the_cutoff_is_the_tunings_end_plus_one_planned_trial_and_the_cap_only_shortens_it() -> None:
    spec = SGLangTuningSpec.model_validate(SPEC)
    t0 = dt.datetime(2026, 1, 1, tzinfo=dt.UTC)
    trial = 30 + (0 + 1 * (0 + 1 * 5)) + deadline.DEADLINE_GRACE_SECONDS  # Ready by, one level's window, grace
    assert deadline.nominal_measurement_seconds(spec.workload) == 5
    assert deadline.trial_cutoff(spec, t0, None) == t0 + dt.timedelta(seconds=3600 + trial)
    assert deadline.trial_cutoff(spec, t0, CAP) == t0 + dt.timedelta(seconds=CAP + trial)
    assert deadline.trial_cutoff(spec, t0, 7 * 86400) == deadline.trial_cutoff(spec, t0, None)
    default = SGLangTuningSpec.model_validate({"serverRef": {"name": "s"},
                                               "parameters": {"numSteps": {"min": 1, "max": 3}}})
    # the defaults: 10 s warm-up, then per level 10 s settling and 2 × 30 s windows
    levels = len(default.workload.concurrency)
    assert deadline.nominal_measurement_seconds(default.workload) == 10 + levels * (10 + 2 * 30)


def test_next_step_ends_a_tuning_at_the_operators_cap_before_its_own_budget() -> None:
    spec = SGLangTuningSpec.model_validate(SPEC)
    from sglang_operator.api.tuning_status import SGLangTuningStatus

    status = SGLangTuningStatus.model_validate({"phase": "Running", "startedAt": "2026-01-01T00:00:00Z"})
    capped = plan.next_step(spec, status, [], CAP, CAP)
    assert capped.kind == "finish" and "operator's cap" in capped.reason and "600 s" in capped.reason
    own = plan.next_step(spec, status, [], 3600, None)
    assert own.kind == "finish" and own.reason == "maxDurationSeconds 3600 reached"
    longer_cap = plan.next_step(spec, status, [], 3600, 7200)
    assert longer_cap.reason == "maxDurationSeconds 3600 reached"
