"""Multi-node rendering (issue 9 item 4): a LeaderWorkerSet with one group of ``nodes`` pods, the group's
parallel flags on every pod, one dist-init address, the worker's rank from LWS, a Service selecting leaders, and
refusals naming the fields."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from sglang_operator.api import parse
from sglang_operator.api.server import SpecError
from sglang_operator.builders import REVISION_LABEL, InvalidSpec, pod_templates, render, summary
from sglang_operator.builders.leaderworkerset import WORKER_INDEX_LABEL, leader_worker_set
from sglang_operator.sglang.args import resolve_server_args
from sglang_operator.sglang.versions import SUPPORTED, parse_version

DSV3: dict[str, Any] = {
    "apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangServer",
    "metadata": {"name": "dsv3", "namespace": "ml"},
    "spec": {
        "sglang": {"image": "lmsysorg/sglang:v0.5.23"},
        "model": {"path": "deepseek-ai/DeepSeek-V3", "trustRemoteCode": True},
        "parallelism": {"tensor": 16, "nodes": 2},
        "speculative": {"algorithm": "NEXTN", "numSteps": 3, "eagleTopk": 1},
        "memory": {"maxRunningRequests": 16},
    },
}


def body(**parallelism: int) -> dict[str, Any]:
    out = copy.deepcopy(DSV3)
    out["spec"]["parallelism"] = parallelism
    return out


def container(template: dict[str, Any]) -> dict[str, Any]:
    c: dict[str, Any] = template["spec"]["containers"][0]
    return c


def flag(args: list[str], name: str) -> str:
    assert args.count(name) == 1, f"{name} rendered {args.count(name)} times in {args}"
    return args[args.index(name) + 1]


def test_tensor_16_over_2_nodes_is_one_group_of_two_pods_with_8_gpus_each() -> None:
    out = render(parse(DSV3))
    lws = out.workload
    assert out.multinode and lws["apiVersion"] == "leaderworkerset.x-k8s.io/v1" and lws["kind"] == "LeaderWorkerSet"
    spec = lws["spec"]
    assert spec["replicas"] == 1  # groups
    assert spec["startupPolicy"] == "LeaderCreated"
    lwt = spec["leaderWorkerTemplate"]
    assert lwt["size"] == 2 and lwt["restartPolicy"] == "RecreateGroupOnPodRestart"
    for template in pod_templates(lws):
        res = container(template)["resources"]
        assert res["requests"]["nvidia.com/gpu"] == res["limits"]["nvidia.com/gpu"] == "8"


def test_every_pod_gets_the_group_flags_one_dist_init_address_and_its_rank() -> None:
    lwt = render(parse(DSV3)).workload["spec"]["leaderWorkerTemplate"]
    leader, worker = container(lwt["leaderTemplate"])["args"], container(lwt["workerTemplate"])["args"]
    for args in (leader, worker):
        assert flag(args, "--tp-size") == "16"
        assert flag(args, "--nnodes") == "2"
        assert "--pp-size" not in args  # pipeline 1: SGLang's default, not rendered
    assert flag(leader, "--dist-init-addr") == flag(worker, "--dist-init-addr") == "$(LWS_LEADER_ADDRESS):20000"
    assert flag(leader, "--node-rank") == "0"
    assert flag(worker, "--node-rank") == "$(LWS_WORKER_INDEX)"
    # apart from the rank the two command lines are the same
    assert [a for a in leader if a != "0"] == [a for a in worker if a != "$(LWS_WORKER_INDEX)"]


def test_worker_argv_with_its_index_parses_as_sglang_and_keeps_the_groups_settings() -> None:
    out = render(parse(DSV3))
    worker = container(out.workload["spec"]["leaderWorkerTemplate"]["workerTemplate"])["args"]
    argv = [a.replace("$(LWS_WORKER_INDEX)", "1").replace("$(LWS_LEADER_ADDRESS)", "dsv3-0.dsv3-0.ml")
            for a in worker]
    values = resolve_server_args(argv, parse_version("0.5.23"), {}).values
    assert (values["node_rank"], values["nnodes"], values["tp_size"]) == (1, 2, 16)
    assert values["dist_init_addr"] == "dsv3-0.dsv3-0.ml:20000"


def test_probes_leader_on_readiness_endpoint_workers_on_the_dummy_health() -> None:
    lwt = render(parse(DSV3)).workload["spec"]["leaderWorkerTemplate"]
    leader, worker = container(lwt["leaderTemplate"]), container(lwt["workerTemplate"])
    assert leader["readinessProbe"]["httpGet"]["path"] == leader["startupProbe"]["httpGet"]["path"] == "/ready"
    # non-zero ranks serve only /health, /health_generate, /ping (launch_dummy_health_check_server): no /ready
    assert worker["readinessProbe"]["httpGet"]["path"] == worker["startupProbe"]["httpGet"]["path"] == "/health"
    assert worker["livenessProbe"]["httpGet"]["path"] == "/health"


def test_service_selects_leaders_only_and_status_selector_counts_groups() -> None:
    out = render(parse(DSV3))
    assert out.service["metadata"]["name"] == "dsv3"
    assert out.service["spec"]["selector"][WORKER_INDEX_LABEL] == "0"
    assert "leaderworkerset.sigs.k8s.io/worker-index=0" in out.selector
    # LWS' own headless Services are per group (named like the leader pod), never the operator's Service's name
    assert out.workload["spec"]["networkConfig"] == {"subdomainPolicy": "UniquePerReplica"}


def test_revision_label_on_both_templates_and_a_speculative_change_rolls_the_group() -> None:
    out = render(parse(DSV3))
    labels = [t["metadata"]["labels"][REVISION_LABEL] for t in pod_templates(out.workload)]
    assert labels == [out.revision, out.revision]
    assert out.workload["metadata"]["labels"][REVISION_LABEL] == out.revision
    changed = copy.deepcopy(DSV3)
    changed["spec"]["speculative"]["numSteps"] = 1
    new = render(parse(changed))
    assert new.revision != out.revision
    assert all(t["metadata"]["labels"][REVISION_LABEL] == new.revision for t in pod_templates(new.workload))
    scaled = copy.deepcopy(DSV3)
    scaled["spec"]["replicas"] = 3
    again = render(parse(scaled))
    assert again.revision == out.revision and again.workload["spec"]["replicas"] == 3  # scaling never rolls


def test_group_size_is_part_of_the_revision() -> None:
    four = render(parse(body(tensor=16, nodes=4)))
    two = render(parse(body(tensor=16, nodes=2)))
    assert four.revision != two.revision
    assert four.workload["spec"]["leaderWorkerTemplate"]["size"] == 4
    assert container(pod_templates(four.workload)[0])["resources"]["limits"]["nvidia.com/gpu"] == "4"


def test_pipeline_renders_pp_size_and_counts_in_gpus_per_pod() -> None:
    out = render(parse(body(tensor=8, pipeline=2, nodes=2)))
    for template in pod_templates(out.workload):
        c = container(template)
        assert flag(c["args"], "--pp-size") == "2"
        assert c["resources"]["limits"]["nvidia.com/gpu"] == "8"
    assert summary(parse(body(tensor=8, pipeline=2, nodes=2)), out)["pp"] == "2"


def test_single_node_still_renders_a_deployment_without_multinode_flags() -> None:
    b = copy.deepcopy(DSV3)
    b["spec"]["parallelism"] = {"tensor": 8}
    out = render(parse(b))
    assert out.workload["kind"] == "Deployment" and not out.multinode
    args = container(out.workload["spec"]["template"])["args"]
    assert not {"--nnodes", "--node-rank", "--dist-init-addr"} & set(args)
    assert "worker-index" not in out.selector


@pytest.mark.parametrize(("parallelism", "fields"), [
    ({"tensor": 10, "nodes": 4}, ("spec.parallelism.nodes is 4", "parallelism.tensor × parallelism.pipeline is "
                                  "10 × 1 = 10")),
    ({"tensor": 4, "data": 2, "nodes": 4}, ("spec.parallelism.data is 2 with parallelism.nodes 4",)),
])
def test_refused_naming_the_fields(parallelism: dict[str, int], fields: tuple[str, ...]) -> None:
    with pytest.raises(SpecError) as err:
        parse(body(**parallelism))
    text = "; ".join(err.value.messages)
    for f in fields:
        assert f in text


def test_gpu_override_below_what_a_node_needs_is_refused() -> None:
    b = copy.deepcopy(DSV3)
    b["spec"]["resources"] = {"gpu": 4}
    with pytest.raises(SpecError) as err:
        parse(b)
    assert "spec.resources.gpu is 4" in "; ".join(err.value.messages)
    assert "16 × 1 × 1 ÷ 2 = 8" in "; ".join(err.value.messages)


def test_sglang_refuses_pipeline_with_speculative_decoding_on_0_5_10() -> None:
    b = body(tensor=4, pipeline=2, nodes=2)
    b["spec"]["sglang"] = {"image": "lmsysorg/sglang:v0.5.10"}
    with pytest.raises(InvalidSpec) as err:
        render(parse(b))
    text = "; ".join(err.value.errors)
    assert "Pipeline parallelism is not compatible" in text
    assert text.startswith("spec.speculative.algorithm=NEXTN, spec.parallelism.pipeline=2: ")


def test_extra_args_may_not_set_the_multinode_flags() -> None:
    for extra in (["--node-rank", "1"], ["--dist-init-addr", "x:1"], ["--pp-size", "2"], ["--nnodes=2"]):
        b = copy.deepcopy(DSV3)
        b["spec"]["extraArgs"] = extra
        with pytest.raises(SpecError) as err:
            parse(b)
        assert "spec.parallelism." in "; ".join(err.value.messages), extra


def test_builder_refuses_a_single_node_spec() -> None:
    b = copy.deepcopy(DSV3)
    b["spec"]["parallelism"] = {"tensor": 8}
    server = parse(b)
    from sglang_operator.builders.command import render_command

    with pytest.raises(ValueError, match="nodes > 1"):
        leader_worker_set("x", "ns", server.spec, render_command(server.spec))


@pytest.mark.parametrize("version", [str(v) for v in SUPPORTED])
def test_every_release_renders_tensor_over_nodes(version: str) -> None:
    """Every supported release has --nnodes, --node-rank and --dist-init-addr, and accepts the group's argv."""
    b = copy.deepcopy(DSV3)
    b["spec"]["sglang"] = {"image": f"lmsysorg/sglang:v{version}"}
    del b["spec"]["speculative"]
    out = render(parse(b))
    args = container(pod_templates(out.workload)[0])["args"]
    assert (flag(args, "--nnodes"), flag(args, "--node-rank")) == ("2", "0")
