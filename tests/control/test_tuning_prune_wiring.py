"""Pruning's wiring, on the fake API (issue 41 item 4): the tuning controller (control/tuning.py
``TuningRunner._resume``) hands io/trialbench.py ``measure_pods`` a callback that asks the rule
(decisions/tuning/trials.py ``prune_verdict``, decisions/tuning/prune.py) once the first level is measured, with the
running trial's settings and the tuning's trials; a trial the rule prunes stops after that level, is recorded
``Pruned`` (never ``Completed``) with the rule's reason, and its Shadow workload is deleted. Only the HTTP load is
faked (``measure_trial``: one figure per level, far below the incumbent at the first); the rest is the operator's."""

from __future__ import annotations

import copy
from typing import Any

import pytest
from fakekube import FakeKube
from test_tuning_trial_wait import SAMPLE, TUNING

from sglang_operator.api.server import parse
from sglang_operator.api.tuning_status import LevelFigures, Trial, TrialSettings
from sglang_operator.api.view import ServerView, TuningView
from sglang_operator.control import tuning as ctl
from sglang_operator.decisions.tuning import trials as plan
from sglang_operator.io import trialbench
from sglang_operator.io.sglang_http import SGLangHTTP

LEVELS = (1, 4)
GOOD = {1: 50.0, 4: 160.0}
"""Per level, what the finished speculative trials measured (decode tok/s at 1, output tok/s at 4)."""
RUNNING = Trial(name="t-trial-4", settings=TrialSettings(num_steps=1, eagle_topk=1, num_draft_tokens=2),
                revision="r-4", started_at="2026-12-07T00:00:00Z")


def figures(concurrency: int, value: float) -> dict[str, Any]:
    return {"concurrency": concurrency, "decodeTokensPerSecond": value if concurrency == 1 else value / concurrency,
            "outputTokensPerSecond": value, "requests": 10, "failedRequests": 0}


def done(n: int, settings: dict[str, Any], scale: float) -> dict[str, Any]:
    return {"name": f"t-trial-{n}", "settings": settings, "verdict": "Completed", "revision": f"r-{n}",
            "levels": [figures(c, GOOD[c] * scale) for c in LEVELS]}


STATUS: dict[str, Any] = {"phase": "Running", "startedAt": "2026-12-07T00:00:00Z", "trialsTotal": 8, "trials": [
    done(0, {"speculative": False}, 0.4), done(1, {"numSteps": 3, "eagleTopk": 1, "numDraftTokens": 4}, 1.0),
    done(2, {"numSteps": 2, "eagleTopk": 1, "numDraftTokens": 3}, 0.97),
    done(3, {"numSteps": 4, "eagleTopk": 1, "numDraftTokens": 5}, 0.95),
    RUNNING.model_dump(by_alias=True, exclude_none=True, mode="json")]}


class Views:
    """The watched caches: the trial's one Ready pod while its Deployment stands (deleted: none)."""

    def __init__(self, fk: FakeKube) -> None:
        self.fk, self.http = fk, SGLangHTTP()

    async def server_view(self, namespace: str, name: str) -> ServerView | None:
        body = self.fk.get("SGLangServer", namespace, name)
        return ServerView.of(body) if body is not None else None

    async def instance_pods(self, namespace: str, instance: str, owner_uid: str) -> list[dict[str, Any]]:
        if instance != RUNNING.name or self.fk.get("Deployment", namespace, instance) is None:
            return []
        return [{"metadata": {"name": f"{instance}-abc", "labels": {}},
                 "status": {"phase": "Running", "podIP": "10.0.0.9",
                            "conditions": [{"type": "Ready", "status": "True"}],
                            "containerStatuses": [{"name": "sglang", "ready": True, "restartCount": 0}]}}]


@pytest.fixture
def fk(monkeypatch: pytest.MonkeyPatch) -> FakeKube:
    fake = FakeKube().install()
    server = copy.deepcopy(SAMPLE)
    server["metadata"] = {"name": "s", "namespace": "ns"}
    fake.put(server)
    tuning = copy.deepcopy(TUNING)
    tuning["spec"] = {"serverRef": {"name": "s"}, "parameters": {"numSteps": {"min": 1, "max": 4}},
                      "workload": {"secondsPerLevel": 5, "concurrency": [{"level": c} for c in LEVELS]}}
    tuning["status"] = copy.deepcopy(STATUS)
    fake.put(tuning)
    monkeypatch.setattr(ctl, "POLL_SECONDS", 0.01)
    measured: list[int] = []

    async def load(http: Any, pods: Any, model: str, roles: Any, bench: Any, **_: Any) -> list[LevelFigures]:
        """The trial's load at ``bench.levels``: a tenth of the incumbent's figures (far below it)."""
        measured.extend(bench.levels)
        return [LevelFigures.model_validate(figures(c, GOOD[c] * 0.1)) for c in bench.levels]

    monkeypatch.setattr(trialbench, "measure_trial", load)
    fake.measured = measured  # type: ignore[attr-defined]
    return fake


async def resume(fk: FakeKube) -> dict[str, Any]:
    """Run the running trial to its verdict; the trial's record as stored."""
    views = Views(fk)
    body = fk.get("SGLangTuning", "ns", "t")
    assert body is not None
    tuning = TuningView.of(body)
    server_body = fk.server("s")
    try:
        await ctl.TuningRunner("ns", "t", views)._resume(
            tuning, tuning.status, tuning.tuning.spec, ServerView.of(server_body), parse(server_body), RUNNING)
    finally:
        await views.http.aclose()
    stored = fk.get("SGLangTuning", "ns", "t")
    assert stored is not None
    return next(t for t in stored["status"]["trials"] if t["name"] == RUNNING.name)


async def test_the_controller_asks_the_rule_once_the_first_level_is_measured(fk: FakeKube,
                                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[tuple[TrialSettings, list[int], list[str]]] = []
    rule = plan.prune_verdict

    def spy(spec: Any, trials: Any, settings: TrialSettings, levels: Any) -> str | None:
        asked.append((settings, [f.concurrency for f in levels], [t.name for t in trials]))
        return rule(spec, trials, settings, levels)

    monkeypatch.setattr(plan, "prune_verdict", spy)
    await resume(fk)
    assert len(asked) == 1, asked  # after the first level, once
    settings, levels, trials = asked[0]
    assert settings == RUNNING.settings and levels == [LEVELS[0]]
    assert trials[:4] == ["t-trial-0", "t-trial-1", "t-trial-2", "t-trial-3"]  # the tuning's own record
    assert fk.measured == [LEVELS[0]]  # type: ignore[attr-defined]  # the rule pruned: no second level


async def test_a_pruned_trial_is_recorded_pruned_and_its_shadow_workload_deleted(fk: FakeKube) -> None:
    record = await resume(fk)
    assert record["verdict"] == "Pruned", record
    assert record["reason"].startswith("pruned: ") and "below the incumbent 3/1/4" in record["reason"]
    assert [f["concurrency"] for f in record["levels"]] == [LEVELS[0]]
    assert fk.get("Deployment", "ns", RUNNING.name) is None  # the Shadow workload deleted
    assert ("delete", "Deployment", RUNNING.name) in [w[:3] for w in fk.writes]
