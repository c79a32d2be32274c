"""The health a server reports while a canary runs (decisions.groups.serving_health): at the end of a promotion,
when every replica runs on the canary and ``status.revision`` still names the stable revision, it reads Ready and
Available (not Stopped: 0 desired) while the canary's pods serve."""

from __future__ import annotations

import datetime as dt
from typing import Any

from sglang_operator.api.analysis import CanaryPhase, CanaryState
from sglang_operator.api.spec import SGLangServerSpec
from sglang_operator.decisions.groups import serving_health

NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
STABLE, CANARY = "1111111111", "2222222222"
SPEC = SGLangServerSpec.model_validate({"model": {"path": "Qwen/Qwen3.6-27B"}, "replicas": 4,
                                        "sglang": {"image": "lmsysorg/sglang:v0.5.10-cu129"}})


def pod(name: str, revision: str, ready: bool = True) -> dict[str, Any]:
    return {"metadata": {"name": name, "uid": name, "labels": {"sglang-operator.io/revision": revision}},
            "status": {"phase": "Running", "podIP": f"10.0.0.{len(name)}",
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
                       "containerStatuses": [{"name": "sglang", "ready": ready, "restartCount": 0,
                                              "state": {"running": {}}}]}}


def canary(stable_replicas: int, canary_replicas: int, phase: CanaryPhase) -> CanaryState:
    return CanaryState(revision=CANARY, stable_revision=STABLE, workload="qwen-canary", phase=phase,
                       stable_replicas=stable_replicas, canary_replicas=canary_replicas, started_at=NOW, moved_at=NOW)


def conds(health: Any) -> dict[str, str]:
    return {c["type"]: c["status"] for c in health.conditions}


def test_every_replica_on_the_canary_before_status_revision_moves_reads_ready_not_stopped() -> None:
    pods = [pod(f"c{i}", CANARY) for i in range(4)]
    health = serving_health(pods, SPEC, STABLE, canary(0, 4, CanaryPhase.PROMOTING), 1, NOW)
    assert health.phase == "Ready" and health.ready_replicas == 4
    assert conds(health)["Ready"] == "True" and conds(health)["Available"] == "True"
    assert health.pod_ips == []  # /server_info is read from the serving revision's pods only


def test_during_the_canary_the_serving_workload_is_judged_at_its_share() -> None:
    pods = [*(pod(f"s{i}", STABLE) for i in range(3)), pod("c0", CANARY, ready=False)]
    health = serving_health(pods, SPEC, STABLE, canary(3, 1, CanaryPhase.STEPPING), 1, NOW)
    assert health.phase == "Ready" and health.ready_replicas == 3 and len(health.pod_ips) == 3
    without = serving_health([pod(f"s{i}", STABLE) for i in range(4)], SPEC, STABLE, None, 1, NOW)
    assert without.phase == "Ready" and without.ready_replicas == 4
