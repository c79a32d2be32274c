"""Every status key the operator writes is declared in the generated CRD schema.

The API server silently prunes undeclared fields of a structural schema (status included), so a key the schema
lacks is lost on write: the rollback counters would restart at 0 after an operator restart. This walks what the
operator's pure decisions produce — the rollback state through whole scenarios (promotion, rollback, retry, Paused,
stable regression), the ledger and status functions of ``decisions.status``, the derived conditions — and prunes
each like the API server does: nothing may be lost.
"""

from __future__ import annotations

import datetime as dt
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "reconcile"))

from rollback_driver import BAD, BAD_LEN, BAD_TPS, FAST, GOOD, T0, Run

from sglang_operator.api.crd import crd
from sglang_operator.api.rollback import RollbackAction
from sglang_operator.api.status import SGLangServerStatus
from sglang_operator.decisions import status as st
from sglang_operator.decisions.derive import derive, speculative_condition
from sglang_operator.decisions.pods import pod_health
from sglang_operator.decisions.sampling.model import SampleKind


def status_schema() -> dict[str, Any]:
    schema: dict[str, Any] = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    return schema


def undeclared(value: Any, schema: dict[str, Any], path: str = "status") -> list[str]:
    """Paths in ``value`` that the API server would prune under ``schema`` (a structural schema node)."""
    if schema.get("x-kubernetes-preserve-unknown-fields"):
        return []
    out: list[str] = []
    if isinstance(value, dict):
        props = schema.get("properties")
        extra = schema.get("additionalProperties")
        for key, sub in value.items():
            if props is not None and key in props:
                out += undeclared(sub, props[key], f"{path}.{key}")
            elif isinstance(extra, dict):
                out += undeclared(sub, extra, f"{path}.{key}")
            else:
                out.append(f"{path}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            out += undeclared(item, schema.get("items", {}), f"{path}[{i}]")
    return out


def test_the_walker_finds_an_undeclared_key() -> None:
    """The check can fail: a key the schema lacks, at any depth, is reported."""
    bad = {"analysis": {"revision": "r", "consecutiveFailures": 1, "counter": 3}, "stableRevisionX": "r"}
    assert undeclared(bad, status_schema()) == ["status.analysis.counter", "status.stableRevisionX"]
    assert undeclared({"analysis": {"podRestarts": {"any-pod-name": 2}}}, status_schema()) == []


def scenario_states() -> list[dict[str, Any]]:
    """The rollback state's status patches along: promotion, regression → rollback, retry, errors → Paused,
    a stable regression, an Alert policy."""
    patches: list[dict[str, Any]] = []

    def record(run: Run) -> None:
        patches.append(run.state.status_patch())

    run = Run()
    run.promote_good()
    record(run)
    run.apply_spec(BAD)
    run.tick(FAST.warmup_seconds)
    for _ in range(3):
        run.interval(tps=BAD_TPS, accept=BAD_LEN)
        record(run)
    run.token = "1"
    run.tick()
    run.tick(FAST.warmup_seconds)
    record(run)
    for _ in range(FAST.error_threshold):
        run.interval(SampleKind.ERROR, tps=None, accept=None, reason="HTTP 500")
    record(run)
    run.spec = GOOD
    run.revision = GOOD
    run.tick()
    run.tick(FAST.warmup_seconds)
    for _ in range(4):
        run.interval(accept=1.9)
        record(run)
    alert = Run(policy=FAST.model_copy(update={"action": RollbackAction.ALERT}))
    alert.promote_good()
    alert.apply_spec(BAD)
    alert.tick(FAST.warmup_seconds)
    for _ in range(3):
        alert.interval(tps=BAD_TPS, accept=BAD_LEN)
    record(alert)
    return patches


def test_every_rollback_state_key_is_declared() -> None:
    schema = status_schema()
    patches = scenario_states()
    assert any(p["analysis"] and p["analysis"].get("stableRegression") for p in patches)
    assert any(p["rollbacks"] for p in patches) and any(p["rejectedRevisions"] for p in patches)
    for patch in patches:
        assert undeclared(patch, schema) == []


@pytest.fixture
def ledger_status() -> dict[str, Any]:
    now = T0
    entry = st.ledger_entry(GOOD, 1, "python -m sglang.launch_server ...", {"image": "lmsysorg/sglang:v0.5.10"},
                            {"model": {"path": "Qwen/Qwen3.6-27B"}}, now)
    rendered = {"revision": GOOD, "command": "...", "sglangVersion": "0.5.10", "numDraftTokens": 4}
    status = st.applied(SGLangServerStatus(), rendered, ["a warning"], entry, 1, 10, now)
    status["revisions"] = st.judged(status["revisions"], GOOD, "Promoted", "promoted", now, 51.6, 2.725, 20)
    status["stableRevision"] = GOOD
    return status


def test_every_ledger_and_observed_key_is_declared(ledger_status: dict[str, Any]) -> None:
    schema = status_schema()
    now = T0 + dt.timedelta(seconds=30)
    pod = {"metadata": {"name": "p0", "labels": {"sglang-operator.io/revision": GOOD}},
           "status": {"podIP": "127.1.0.2", "conditions": [{"type": "Ready", "status": "True"}]}}
    health = pod_health([pod], 1, GOOD, 1, now)
    effective = {"algorithm": "EAGLE", "numSteps": 3, "eagleTopk": 1, "numDraftTokens": 4, "maxRunningRequests": 16,
                 "memFractionStatic": 0.88, "contextLength": 131072, "avgSpecAcceptLength": 2.7}
    stored = SGLangServerStatus.model_validate(ledger_status)
    observed = st.observed(stored, health, 1, now, effective, ["numSteps: spec 3, SGLang 1"],
                           {"acceptLength": 2.7, "acceptRate": 0.57, "tokensPerSecond": 51.6})
    refused = st.invalid(stored, ["spec.x: bad"], 2, now)
    for status in (ledger_status, observed, refused):
        assert undeclared(status, schema) == []


def test_every_derived_condition_is_declared() -> None:
    schema = status_schema()
    run = Run()
    run.promote_good()
    run.apply_spec(BAD)
    run.tick(FAST.warmup_seconds)
    for _ in range(3):
        run.interval(tps=BAD_TPS, accept=BAD_LEN)
    pod = {"metadata": {"name": "p0", "labels": {"sglang-operator.io/revision": GOOD}},
           "status": {"conditions": [{"type": "Ready", "status": "True"}]}}
    health = pod_health([pod], 1, GOOD, 1, run.now)
    spec = speculative_condition("NEXTN", {"algorithm": "EAGLE"}, True, True, 1, run.now)
    conditions = derive(health.conditions, run.state, RollbackAction.ROLLBACK, 1, run.now, spec)
    assert {c["type"] for c in conditions} >= {"Degraded", "StableRegressed", "SpeculativeDecodingActive"}
    assert undeclared({"conditions": conditions}, schema) == []
