"""The canary's two workloads (builders/canary.py) and the canary policy's step counts (api/spec.py)."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sglang_operator.api import parse
from sglang_operator.api.spec import CanaryStep, CanaryStrategy, SGLangServerSpec, UpdateStrategy
from sglang_operator.builders import REVISION_LABEL, render, selector_labels
from sglang_operator.builders.canary import TRACK_LABEL, canary_name, other_name, placed, replicas_only, serving_name
from sglang_operator.builders.leaderworkerset import SET_NAME_LABEL, WORKER_INDEX_LABEL
from tests.builders.test_leaderworkerset import DSV3
from tests.builders.test_workload import KNOWN_GOOD


def matches(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def canary_body(**strategy: Any) -> dict[str, Any]:
    out = copy.deepcopy(KNOWN_GOOD)
    out["spec"].update(replicas=4, strategy={"type": "Canary", **strategy})
    return out


def test_the_canary_workload_selects_only_its_own_pods_and_keeps_the_revision() -> None:
    rendered = render(parse(canary_body()))
    name = KNOWN_GOOD["metadata"]["name"]
    stable = placed(rendered.deployment, name, name, 3)
    canary = placed(rendered.deployment, name, canary_name(name), 1)
    assert canary["metadata"]["name"] == f"{name}-canary" and canary["spec"]["replicas"] == 1
    assert stable["spec"] == {**rendered.deployment["spec"], "replicas": 3}  # NAME exactly as rendered
    c_sel, s_sel = canary["spec"]["selector"]["matchLabels"], stable["spec"]["selector"]["matchLabels"]
    c_pod, s_pod = canary["spec"]["template"]["metadata"]["labels"], stable["spec"]["template"]["metadata"]["labels"]
    assert s_sel == selector_labels(name) and c_sel == {**selector_labels(name), TRACK_LABEL: "canary"}
    assert matches(c_sel, c_pod) and not matches(c_sel, s_pod)
    # the Service selects both; NAME's label selector matches canary pods too, but its ReplicaSets add the
    # pod-template-hash of NAME's own template, which differs from the canary's: it adopts none of them
    assert matches(rendered.service["spec"]["selector"], c_pod) and matches(rendered.service["spec"]["selector"], s_pod)
    assert canary["spec"]["template"] != stable["spec"]["template"]
    assert c_pod[REVISION_LABEL] == s_pod[REVISION_LABEL] == rendered.revision
    assert rendered.deployment["metadata"]["name"] == name  # the input is not modified
    assert TRACK_LABEL not in rendered.deployment["spec"]["template"]["metadata"]["labels"]


def test_after_a_promotion_the_canary_workload_serves_and_the_next_canary_runs_in_name() -> None:
    assert serving_name("s", None) == "s" and other_name("s", None) == "s-canary"
    assert serving_name("s", "s-canary") == "s-canary" and other_name("s", "s-canary") == "s"
    rendered = render(parse(canary_body()))
    name = KNOWN_GOOD["metadata"]["name"]
    with pytest.raises(ValueError, match="neither"):
        placed(rendered.deployment, name, "other", 1)


def lws_canary_body() -> dict[str, Any]:
    out = copy.deepcopy(DSV3)
    out["spec"].update(replicas=2, strategy={"type": "Canary"})
    return out


def test_a_leaderworkerset_canary_is_a_second_set_whose_groups_carry_the_track_label() -> None:
    rendered = render(parse(lws_canary_body()))
    assert rendered.multinode
    name = DSV3["metadata"]["name"]
    stable = placed(rendered.workload, name, name, 1)
    canary = placed(rendered.workload, name, canary_name(name), 1)
    assert stable["kind"] == canary["kind"] == "LeaderWorkerSet"
    assert canary["metadata"]["name"] == "dsv3-canary" and canary["spec"]["replicas"] == stable["spec"]["replicas"] == 1
    assert stable["spec"] == {**rendered.workload["spec"], "replicas": 1}  # NAME exactly as rendered: no group rolls
    assert "selector" not in canary["spec"]  # a LeaderWorkerSet selects by its own name label, set by LWS
    assert canary["metadata"]["labels"][TRACK_LABEL] == "canary" and TRACK_LABEL not in stable["metadata"]["labels"]
    lwt, s_lwt = canary["spec"]["leaderWorkerTemplate"], stable["spec"]["leaderWorkerTemplate"]
    for key in ("leaderTemplate", "workerTemplate"):
        c_labels, s_labels = lwt[key]["metadata"]["labels"], s_lwt[key]["metadata"]["labels"]
        assert c_labels[TRACK_LABEL] == "canary" and TRACK_LABEL not in s_labels
        assert c_labels[REVISION_LABEL] == s_labels[REVISION_LABEL] == rendered.revision  # one revision in either
    assert lwt["size"] == s_lwt["size"] == 2
    # the leader Service selects the leaders of both sets (LWS adds the worker index and set name to every pod)
    for lws in (stable, canary):
        leader = {**lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["metadata"]["labels"],
                  WORKER_INDEX_LABEL: "0", SET_NAME_LABEL: lws["metadata"]["name"]}
        assert matches(rendered.service["spec"]["selector"], leader)
    assert TRACK_LABEL not in rendered.workload["metadata"]["labels"]  # the input is not modified


def test_a_stable_leaderworkerset_of_the_same_revision_is_only_scaled() -> None:
    rendered = render(parse(lws_canary_body()))
    name = DSV3["metadata"]["name"]
    want = placed(rendered.workload, name, name, 1)
    live = copy.deepcopy(placed(rendered.workload, name, name, 2))
    live["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["image"] = "re-rendered"
    assert replicas_only(live, want)
    other = copy.deepcopy(live)
    other["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["metadata"]["labels"][REVISION_LABEL] = "0ther"
    assert not replicas_only(other, want) and not replicas_only(None, want)
    assert not replicas_only({**live, "kind": "Deployment"}, want)
    with pytest.raises(ValueError, match="not Service"):
        placed(rendered.service, name, name)


def test_canary_strategy_renders_recreate_for_a_replacement() -> None:
    assert render(parse(canary_body())).deployment["spec"]["strategy"] == {"type": "Recreate"}


@pytest.mark.parametrize(("steps", "replicas", "expected"), [
    ([CanaryStep()], 4, [1]),
    ([CanaryStep(replicas="25%"), CanaryStep(replicas="50%")], 4, [1, 2]),
    ([CanaryStep(replicas="25%"), CanaryStep(replicas="50%")], 3, [1, 2]),  # rounded up
    ([CanaryStep(replicas="10%")], 2, [1]),  # at least 1
    ([CanaryStep(replicas="90%")], 4, [3]),  # at most replicas - 1: the promotion takes the rest
    ([CanaryStep(replicas=3), CanaryStep(replicas=1)], 8, [3, 3]),  # never fewer than the step before
    ([CanaryStep(replicas="50%")], 8, [4]),  # follows spec.replicas
])
def test_step_replicas(steps: list[CanaryStep], replicas: int, expected: list[int]) -> None:
    policy = CanaryStrategy(steps=steps)
    assert [policy.step_replicas(i, replicas) for i in range(len(steps))] == expected


def test_canary_policy_defaults() -> None:
    spec = SGLangServerSpec.model_validate({**KNOWN_GOOD["spec"], "replicas": 2, "strategy": {"type": "Canary"}})
    policy = spec.strategy.canary_policy
    assert policy is not None and policy.max_surge == 0 and policy.on_inconclusive.value == "Hold"
    assert [s.replicas for s in policy.steps] == [1]
    assert UpdateStrategy().canary_policy is None
