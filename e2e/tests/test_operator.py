"""The operator's main path against the real API server (issue 3 "Done when"): apply an SGLangServer,
get a Deployment + Service and a Ready pod running the simulator with exactly the spec's settings; roll
on a spec change; no child changes on operator restart; invalid updates are never half-applied;
pod trouble shows in conditions; deletion keeps the model-cache PVC."""

from __future__ import annotations

import asyncio
import copy
import json
import statistics
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.conftest import K8sCluster, running_operator, wait_for
from e2e.operator_proc import OperatorProcess
from e2e.tests.objects import server_condition, wait_server_ready
from sglang_operator.io.loadgen import probe

# local_cluster: the SGLang image must map to the simulator (fake kubelet), and the operator runs on the test
# host and reaches pods by their 127.x IPs. On kind this needs the operator image in-cluster (not built here).
pytestmark = [pytest.mark.cluster, pytest.mark.local_cluster]
ROOT = Path(__file__).resolve().parents[2]
FAST_SIM = [{"name": "SGLANG_SIM_LOAD_SECONDS", "value": "1"}, {"name": "SGLANG_SIM_TIME_SCALE", "value": "20"}]


@pytest.fixture(scope="module")
def operator(k8s_cluster: K8sCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    with running_operator(k8s_cluster, tmp_path_factory.mktemp("operator")) as op:
        yield op


def sample(name: str = "qwen3.6-27b-known-good.yaml") -> dict[str, Any]:
    obj: dict[str, Any] = yaml.safe_load((ROOT / "samples" / name).read_text())
    obj["spec"].setdefault("env", []).extend(copy.deepcopy(FAST_SIM))
    return obj


def sgls(k8s: K8sCluster, ns: str, name: str) -> dict[str, Any]:
    out: dict[str, Any] = k8s.get("sglangserver", name, "-n", ns)
    return out


cond = server_condition


def wait_ready(k8s: K8sCluster, ns: str, name: str, revision: str | None = None, timeout: float = 90) -> dict[str, Any]:
    return wait_server_ready(k8s, ns, name, revision, timeout)


def sample_ready(k8s: K8sCluster, ns: str) -> dict[str, Any]:
    """Apply :func:`sample` (``qwen36-27b``) in ``ns`` and wait until it is Ready; the object."""
    k8s.apply(sample(), ns)
    return wait_ready(k8s, ns, "qwen36-27b")


def server_info(pod_ip: str, port: int = 30000) -> dict[str, Any]:
    with urllib.request.urlopen(f"http://{pod_ip}:{port}/server_info", timeout=5) as r:
        out: dict[str, Any] = json.loads(r.read())
        return out


def wait_event(k8s: K8sCluster, ns: str, reason: str, type_: str | None = None, timeout: float = 15) -> None:
    """Wait for an Event about qwen36-27b with ``reason`` (and ``type_``): events are posted asynchronously."""
    wait_for(f"a {type_ or ''} event {reason}", lambda: any(
        e["reason"] == reason and (type_ is None or e["type"] == type_) for e in k8s.get(
            "events", "-n", ns, "--field-selector", "involvedObject.name=qwen36-27b")["items"]), timeout=timeout)


def columns(header: str, row: str) -> dict[str, str]:
    """A ``kubectl get`` table row as {column: value}, cut at the header's column offsets (empty cells ok)."""
    starts = [i for i, ch in enumerate(header) if ch != " " and (i == 0 or header[i - 1] == " ")]
    bounds = [*starts[1:], len(row) + 1]
    return {header[a:b].strip(): row[a:b].strip() for a, b in zip(starts, bounds, strict=True)}


def ready_pods(k8s: K8sCluster, ns: str, name: str) -> list[dict[str, Any]]:
    pods = k8s.get("pods", "-n", ns, "-l", f"app.kubernetes.io/instance={name}")["items"]
    return [p for p in pods if any(c["type"] == "Ready" and c["status"] == "True"
                                   for c in p["status"].get("conditions", []))
            and not p["metadata"].get("deletionTimestamp")]


def test_known_good_sample_runs_with_exactly_its_settings(
    k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess
) -> None:
    obj = sample_ready(k8s_cluster, namespace)
    uid = obj["metadata"]["uid"]
    assert not obj["metadata"].get("finalizers")  # deletion never waits for the operator
    dep = k8s_cluster.get("deployment", "qwen36-27b", "-n", namespace)
    svc = k8s_cluster.get("service", "qwen36-27b", "-n", namespace)
    for child in (dep, svc):
        assert child["metadata"]["ownerReferences"][0]["uid"] == uid
    assert dep["spec"]["strategy"]["type"] == "Recreate"
    assert svc["spec"]["ports"][0]["name"] == "http"
    [pod] = ready_pods(k8s_cluster, namespace, "qwen36-27b")
    assert pod["status"]["podIP"].startswith("127.")
    info = server_info(pod["status"]["podIP"])
    assert info["tp_size"] == 2
    assert info["speculative_algorithm"] == "EAGLE"  # SGLang reports NEXTN as EAGLE
    assert (info["speculative_num_steps"], info["speculative_eagle_topk"], info["speculative_num_draft_tokens"]) \
        == (3, 1, 4)
    assert (info["mem_fraction_static"], info["context_length"], info["max_running_requests"]) == (0.88, 131072, 16)
    assert info["mamba_full_memory_ratio"] == 0.5
    st = obj["status"]
    assert st["effective"]["numDraftTokens"] == 4 and st["effective"]["maxRunningRequests"] == 16
    assert cond(obj, "SettingsDiffer")["status"] == "False"
    assert cond(obj, "SpecValid")["status"] == "True"
    assert st["observedGeneration"] == obj["metadata"]["generation"]
    assert "--speculative-num-draft-tokens 4" in st["command"]
    table = k8s_cluster.run("get", "sgls", "qwen36-27b", "-n", namespace, "-o", "wide").stdout.splitlines()
    cols = columns(table[0], table[1])
    # STEPS / DRAFTTOKENS / ALGORITHM show what runs (status.effective: SGLang reports NEXTN as EAGLE); TP the spec
    assert (cols["READY"], cols["TP"], cols["ALGORITHM"], cols["STEPS"], cols["DRAFTTOKENS"], cols["PHASE"]) == \
        ("True", "2", "EAGLE", "3", "4", "Ready")
    wait_event(k8s_cluster, namespace, "Created")
    # traffic makes SGLang report accept length and throughput; the operator copies them into status
    # (sglang:gen_throughput is the last decode-log window's figure; the first window after idle is diluted
    # by the idle gap, so send a few requests and wait for a steady window)
    result = asyncio.run(probe(f"http://{pod['status']['podIP']}:30000", max_tokens=512, runs=3))
    assert all(r.error is None and r.completion_tokens == 512 for r in result.results)
    st = wait_for("steady metrics in status", lambda: (s := sgls(k8s_cluster, namespace, "qwen36-27b")["status"])
                  .get("tokensPerSecond", 0) > 40 and s, timeout=30)
    assert 2.5 < st["acceptLength"] < 4.0, st
    # tokensPerSecond is the per-request decode speed of the operator's probe, on the wall clock like the client's
    # (the simulator runs SGLANG_SIM_TIME_SCALE times faster than the GPU it models)
    client = statistics.median(r.decode_tok_s for r in result.results)
    assert 0.65 * client < st["tokensPerSecond"] < 1.5 * client, (st, client)


def test_num_steps_change_rolls_to_a_new_revision_and_restart_changes_nothing(
    k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess
) -> None:
    first = sample_ready(k8s_cluster, namespace)
    rev1 = first["status"]["revision"]
    [pod1] = ready_pods(k8s_cluster, namespace, "qwen36-27b")
    k8s_cluster.run("patch", "sglangserver", "qwen36-27b", "-n", namespace, "--type=merge", "-p",
                    json.dumps({"spec": {"speculative": {"numSteps": 2, "numDraftTokens": None}}}))
    second = wait_for("a new revision", lambda: (o := sgls(k8s_cluster, namespace, "qwen36-27b"))
                      ["status"].get("revision") != rev1 and o, timeout=30)
    rev2 = second["status"]["revision"]
    second = wait_ready(k8s_cluster, namespace, "qwen36-27b", rev2)
    [pod2] = ready_pods(k8s_cluster, namespace, "qwen36-27b")
    assert pod2["metadata"]["uid"] != pod1["metadata"]["uid"]
    assert pod2["metadata"]["labels"]["sglang-operator.io/revision"] == rev2
    assert server_info(pod2["status"]["podIP"])["speculative_num_draft_tokens"] == 3  # derived steps + 1
    assert second["status"]["effective"]["numSteps"] == 2
    ledger = second["status"]["revisions"]
    assert [r["revision"] for r in ledger] == [rev1, rev2]

    # scaling alone never rolls pods: same revision
    k8s_cluster.run("scale", "sglangserver", "qwen36-27b", "-n", namespace, "--replicas=2")
    wait_for("2 ready replicas", lambda: sgls(k8s_cluster, namespace, "qwen36-27b")["status"]
             .get("readyReplicas") == 2, timeout=60)
    assert sgls(k8s_cluster, namespace, "qwen36-27b")["status"]["revision"] == rev2
    assert pod2["metadata"]["uid"] in {p["metadata"]["uid"] for p in ready_pods(k8s_cluster, namespace, "qwen36-27b")}

    def versions() -> dict[str, str]:
        return {k: k8s_cluster.get(k, "qwen36-27b", "-n", namespace)["metadata"]["resourceVersion"]
                for k in ("deployment", "service")}
    before = versions()
    resumed = operator.log_text().count("Resuming is processed")
    operator.stop()
    operator.start()
    wait_for("the resume handler to run", lambda: operator.log_text().count("Resuming is processed") > resumed,
             timeout=60)
    wait_ready(k8s_cluster, namespace, "qwen36-27b", rev2)
    assert versions() == before


def test_invalid_update_is_reported_and_not_half_applied(
    k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess
) -> None:
    ready = sample_ready(k8s_cluster, namespace)
    dep_before = k8s_cluster.get("deployment", "qwen36-27b", "-n", namespace)
    # valid for the schema, but not a flag of SGLang 0.5.10: only the operator's validator can refuse it
    k8s_cluster.run("patch", "sglangserver", "qwen36-27b", "-n", namespace, "--type=merge", "-p",
                    json.dumps({"spec": {"extraArgs": ["--no-such-flag", "1"], "replicas": 3}}))
    obj = wait_for("SpecValid=False", lambda: (o := sgls(k8s_cluster, namespace, "qwen36-27b"))
                   and cond(o, "SpecValid").get("status") == "False" and o, timeout=30)
    assert "--no-such-flag" in cond(obj, "SpecValid")["message"]
    table = k8s_cluster.run("get", "sgls", "qwen36-27b", "-n", namespace, "-o", "wide").stdout.splitlines()
    cols = columns(table[0], table[1])  # SPECVALID: -o wide
    assert (cols["READY"], cols["SPECVALID"]) == ("True", "False")  # old revision serves; new spec refused
    dep_after = k8s_cluster.get("deployment", "qwen36-27b", "-n", namespace)
    assert dep_after["metadata"]["resourceVersion"] == dep_before["metadata"]["resourceVersion"]
    assert dep_after["spec"]["replicas"] == 1  # the replicas change in the same patch was not applied either
    assert obj["status"]["revision"] == ready["status"]["revision"]
    wait_event(k8s_cluster, namespace, "InvalidSpec", "Warning")


def test_unschedulable_pod_shows_the_schedulers_reason(
    k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess
) -> None:
    obj = sample()
    obj["spec"]["resources"] = {"gpu": 16}
    k8s_cluster.apply(obj, namespace)
    found = wait_for("Degraded=Unschedulable", lambda: (o := sgls(k8s_cluster, namespace, "qwen36-27b"))
                     and cond(o, "Degraded").get("reason") == "Unschedulable" and o, timeout=60)
    assert "Insufficient nvidia.com/gpu" in cond(found, "Degraded")["message"]
    assert found["status"]["phase"] == "Degraded"
    wait_event(k8s_cluster, namespace, "Unschedulable", "Warning")


def test_crashing_server_shows_crashloop_with_the_termination_message(
    k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess
) -> None:
    obj = sample()
    obj["spec"]["env"].append({"name": "SGLANG_SIM_FAULT_CRASH_AFTER_S", "value": "0.5"})
    k8s_cluster.apply(obj, namespace)
    found = wait_for("Degraded=CrashLoopBackOff", lambda: (o := sgls(k8s_cluster, namespace, "qwen36-27b"))
                     and cond(o, "Degraded").get("reason") == "CrashLoopBackOff" and o, timeout=90)
    assert "exited with code" in cond(found, "Degraded")["message"]


def test_delete_removes_children_but_keeps_the_model_cache_pvc(
    k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess
) -> None:
    pvc = {"apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "hf-cache"},
           "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "100Gi"}}}}
    k8s_cluster.apply(pvc, namespace)
    obj = sample()
    obj["spec"]["model"]["cache"] = {"pvc": {"claimName": "hf-cache"}, "mountPath": "/root/.cache/huggingface"}
    k8s_cluster.apply(obj, namespace)
    wait_for("Deployment created", lambda: k8s_cluster.run("get", "deployment", "qwen36-27b", "-n", namespace,
                                                           check=False).returncode == 0, timeout=30)
    k8s_cluster.run("delete", "sglangserver", "qwen36-27b", "-n", namespace, "--wait=true", timeout=60)
    wait_for("children garbage-collected", lambda: all(
        k8s_cluster.run("get", kind, "qwen36-27b", "-n", namespace, check=False).returncode != 0
        for kind in ("deployment", "service")), timeout=60)
    assert k8s_cluster.get("pvc", "hf-cache", "-n", namespace)["metadata"]["name"] == "hf-cache"


def test_settings_sglang_resolved_otherwise_are_named_in_a_condition(
    k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess
) -> None:
    obj = sample()
    obj["spec"]["memory"]["maxRunningRequests"] = 64  # more than the KV cache / mamba pool can hold
    k8s_cluster.apply(obj, namespace)
    ready = wait_ready(k8s_cluster, namespace, "qwen36-27b")
    effective = ready["status"]["effective"]["maxRunningRequests"]
    assert effective < 64
    differ = cond(ready, "SettingsDiffer")
    assert differ["status"] == "True" and differ["reason"] == "SGLangResolvedOtherwise"
    assert f"maxRunningRequests: spec 64, SGLang {effective}" in differ["message"]
    assert "algorithm" not in differ["message"]  # NEXTN reported as EAGLE is not a difference


def test_a_deleted_child_is_re_applied(k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess) -> None:
    obj = sample()
    obj["spec"]["replicas"] = 0
    k8s_cluster.apply(obj, namespace)
    first = wait_for("Deployment and Service", lambda: all(
        k8s_cluster.run("get", kind, "qwen36-27b", "-n", namespace, check=False).returncode == 0
        for kind in ("deployment", "service")) and k8s_cluster.get("deployment", "qwen36-27b", "-n", namespace),
        timeout=30)
    k8s_cluster.run("delete", "deployment", "qwen36-27b", "-n", namespace, "--wait=true")
    again = wait_for("the Deployment back", lambda: (r := k8s_cluster.run(
        "get", "deployment", "qwen36-27b", "-n", namespace, "-o", "json", check=False)).returncode == 0
        and json.loads(r.stdout), timeout=30)
    assert again["metadata"]["uid"] != first["metadata"]["uid"]
    assert again["spec"]["template"]["metadata"]["labels"]["sglang-operator.io/revision"] == \
        first["spec"]["template"]["metadata"]["labels"]["sglang-operator.io/revision"]
    wait_event(k8s_cluster, namespace, "ChildRecreated")


def test_a_child_the_api_server_refuses_is_reported_and_nothing_is_applied(
    k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess
) -> None:
    obj = sample()
    obj["spec"]["replicas"] = 0
    k8s_cluster.apply(obj, namespace)
    wait_for("Deployment created", lambda: k8s_cluster.run("get", "deployment", "qwen36-27b", "-n", namespace,
                                                           check=False).returncode == 0, timeout=30)
    wait_for("status written", lambda: sgls(k8s_cluster, namespace, "qwen36-27b").get("status", {}).get("revision"))
    svc_before = k8s_cluster.get("service", "qwen36-27b", "-n", namespace)["metadata"]["resourceVersion"]
    dep_before = k8s_cluster.get("deployment", "qwen36-27b", "-n", namespace)["metadata"]["resourceVersion"]
    # valid for the CRD schema, but not a valid label value: only the API server can refuse the Deployment
    k8s_cluster.run("patch", "sglangserver", "qwen36-27b", "-n", namespace, "--type=merge", "-p",
                    json.dumps({"spec": {"podLabels": {"team": "not a valid label value!"}, "port": 31000}}))
    found = wait_for("SpecValid=False", lambda: (o := sgls(k8s_cluster, namespace, "qwen36-27b"))
                     and cond(o, "SpecValid").get("status") == "False" and o, timeout=30)
    assert "the API server refused" in cond(found, "SpecValid")["message"]
    assert k8s_cluster.get("deployment", "qwen36-27b", "-n", namespace)["metadata"]["resourceVersion"] == dep_before
    assert k8s_cluster.get("service", "qwen36-27b", "-n", namespace)["metadata"]["resourceVersion"] == svc_before


def test_server_info_behind_the_api_key_is_read_with_the_secret(
    k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess
) -> None:
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "sglang-key"},
              "stringData": {"api-key": "sk-e2e"}}
    k8s_cluster.apply(secret, namespace)
    obj = sample()
    obj["spec"]["apiKeySecretRef"] = {"name": "sglang-key"}
    k8s_cluster.apply(obj, namespace)
    ready = wait_ready(k8s_cluster, namespace, "qwen36-27b")  # needs status.effective from /server_info
    assert ready["status"]["effective"]["numSteps"] == 3
    [pod] = ready_pods(k8s_cluster, namespace, "qwen36-27b")
    with pytest.raises(urllib.error.HTTPError) as err:  # without the key SGLang refuses
        server_info(pod["status"]["podIP"])
    assert err.value.code == 401
