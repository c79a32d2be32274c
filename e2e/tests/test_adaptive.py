"""SGLang's adaptive speculative decoding on a release that has it (issue 17 item 7): a 0.5.23 server with
``spec.speculative.adaptive`` renders ``--speculative-adaptive``, SGLang (the simulator) keeps it on, and once its own
acceptance is high (α 0.95) it switches from the start-up 3 steps to 7; the operator shows that in
``status.effective``: ``adaptive`` from ``/server_info``, the active tier from ``sglang:spec_num_steps``, while
``numSteps`` stays what SGLang started with."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from e2e.conftest import K8sCluster, running_operator, wait_for
from e2e.operator_proc import OperatorProcess
from e2e.policies import FAST_POLICY, SIM_ENV

pytestmark = [pytest.mark.cluster, pytest.mark.local_cluster]


@pytest.fixture(scope="module")
def operator(k8s_cluster: K8sCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    with running_operator(k8s_cluster, tmp_path_factory.mktemp("operator")) as op:
        yield op


def server() -> dict[str, Any]:
    return {
        "apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangServer", "metadata": {"name": "adaptive"},
        "spec": {
            "sglang": {"image": "lmsysorg/sglang:v0.5.23-cu130"},
            "model": {"path": "Qwen/Qwen3.6-27B"},
            "parallelism": {"tensor": 2},
            "speculative": {"algorithm": "NEXTN", "numSteps": 3, "eagleTopk": 1, "adaptive": {}},
            "memory": {"memFractionStatic": 0.88, "contextLength": 131072, "maxRunningRequests": 16,
                       "mambaFullMemoryRatio": 0.5, "mambaSchedulerStrategy": "extra_buffer"},
            "rollback": FAST_POLICY,
            "env": [*SIM_ENV, {"name": "SGLANG_SIM_FAULT_ACCEPT_ALPHA", "value": "0.95"}],
        },
    }


def test_the_active_tier_shows_in_status_effective(k8s_cluster: K8sCluster, namespace: str,
                                                   operator: OperatorProcess) -> None:
    k8s_cluster.apply(server(), namespace)

    def switched() -> dict[str, Any] | None:
        obj: dict[str, Any] = k8s_cluster.get("sglangserver", "adaptive", "-n", namespace)
        eff = obj.get("status", {}).get("effective") or {}
        return eff if eff.get("activeNumSteps") == 7 else None

    try:
        eff = wait_for("status.effective.activeNumSteps 7", switched, timeout=150, interval=2)
    except AssertionError:
        print(json.dumps(k8s_cluster.get("sglangserver", "adaptive", "-n", namespace).get("status"), indent=1))
        raise
    assert eff["adaptive"] is True and eff["activeNumDraftTokens"] == 8
    assert (eff["numSteps"], eff["numDraftTokens"]) == (3, 4)  # /server_info: what SGLang started with
    obj = k8s_cluster.get("sglangserver", "adaptive", "-n", namespace)
    assert "--speculative-adaptive" in obj["status"]["command"]
    assert not [c for c in obj["status"]["conditions"] if c["type"] == "SettingsDiffer" and c["status"] == "True"]
