"""Deployment / Service builders: probes per release, GPUs, shm, revision hash semantics, owner reference."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import yaml

from sglang_operator.api import parse
from sglang_operator.builders import REVISION_LABEL, owner_reference, pod_templates, render, summary
from sglang_operator.builders.owner import adopt

ROOT = Path(__file__).resolve().parents[2]
KNOWN_GOOD: dict[str, Any] = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-known-good.yaml").read_text())
KNOWN_GOOD["metadata"]["namespace"] = "ml"


def body(**spec: Any) -> dict[str, Any]:
    out = copy.deepcopy(KNOWN_GOOD)
    out["spec"].update(spec)
    return out


def container(dep: dict[str, Any]) -> dict[str, Any]:
    c: dict[str, Any] = dep["spec"]["template"]["spec"]["containers"][0]
    return c


def test_deployment_shape() -> None:
    out = render(parse(KNOWN_GOOD))
    dep, c = out.deployment, container(out.deployment)
    assert dep["spec"]["strategy"] == {"type": "Recreate"}
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "2" == c["resources"]["requests"]["nvidia.com/gpu"]
    assert c["ports"] == [{"name": "http", "containerPort": 30000, "protocol": "TCP"}]
    assert c["terminationMessagePolicy"] == "FallbackToLogsOnError"
    assert c["startupProbe"]["httpGet"] == {"path": "/health_generate", "port": "http"}
    assert c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"] >= 1800
    assert c["readinessProbe"]["httpGet"]["path"] == "/health_generate"
    assert c["livenessProbe"]["httpGet"]["path"] == "/health"
    assert {"name": "dshm", "mountPath": "/dev/shm"} in c["volumeMounts"]
    shm = next(v for v in dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "16Gi"}
    pod = dep["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == {"nvidia.com/gpu.product": "NVIDIA-RTX-A6000"}
    labels = dep["spec"]["template"]["metadata"]["labels"]
    assert labels[REVISION_LABEL] == out.revision and labels["app.kubernetes.io/instance"] == "qwen36-27b"
    assert set(dep["spec"]["selector"]["matchLabels"].items()) <= set(labels.items())
    assert c["command"] + c["args"] == out.command.command_line.split(" ", 1)[1].split(" ")
    assert out.status["numDraftTokens"] == 4 and out.status["revision"] == out.revision
    assert out.selector == "app.kubernetes.io/instance=qwen36-27b,app.kubernetes.io/name=sglang"


def test_probe_timings_lose_little_per_replacement() -> None:
    """A pod that serves is Ready at its next start-up probe (the kubelet runs the readiness probe at once), so the
    start-up period is what each replacement loses: at most 2 s, within a 30 min start-up budget; readiness every
    5 s takes a pod out after 15 s of failures (was 10 s × 3 = 30 s); the multi-node leader and workers alike."""
    b = body()
    b["spec"]["sglang"]["image"] = "lmsysorg/sglang:v0.5.23-cu130"
    multi = {"apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangServer",
             "metadata": {"name": "dsv3", "namespace": "ml"},
             "spec": {"sglang": {"image": "lmsysorg/sglang:v0.5.23"}, "model": {"path": "deepseek-ai/DeepSeek-V3",
                      "trustRemoteCode": True}, "parallelism": {"tensor": 16, "nodes": 2}}}
    templates = [render(parse(KNOWN_GOOD)).deployment["spec"]["template"], render(parse(b)).deployment["spec"][
        "template"], *pod_templates(render(parse(multi)).workload)]
    assert len(templates) == 4
    for c in (t["spec"]["containers"][0] for t in templates):
        start, ready = c["startupProbe"], c["readinessProbe"]
        assert start["periodSeconds"] == 2 and start["periodSeconds"] * start["failureThreshold"] == 1800
        assert (ready["periodSeconds"], ready["failureThreshold"]) == (5, 3)
        assert ready.get("initialDelaySeconds", 0) == 0 == start.get("initialDelaySeconds", 0)
    assert render(parse(KNOWN_GOOD)).deployment["spec"]["progressDeadlineSeconds"] == 1800 + 600


def test_new_release_probes_ready() -> None:
    b = body()
    b["spec"]["sglang"]["image"] = "lmsysorg/sglang:v0.5.23-cu130"
    c = container(render(parse(b)).deployment)
    assert c["readinessProbe"]["httpGet"]["path"] == "/ready" == c["startupProbe"]["httpGet"]["path"]


def test_service_targets_named_port() -> None:
    svc = render(parse(KNOWN_GOOD)).service
    assert svc["spec"]["ports"] == [{"name": "http", "port": 30000, "targetPort": "http", "protocol": "TCP"}]
    assert svc["spec"]["selector"] == render(parse(KNOWN_GOOD)).deployment["spec"]["selector"]["matchLabels"]


def test_revision_ignores_replicas_but_follows_the_pod_template() -> None:
    base = render(parse(KNOWN_GOOD)).revision
    assert render(parse(body(replicas=3))).revision == base
    assert render(parse(KNOWN_GOOD)).revision == base  # deterministic
    steps = body()
    steps["spec"]["speculative"] = {**steps["spec"]["speculative"], "numSteps": 2, "numDraftTokens": 3}
    assert render(parse(steps)).revision != base
    assert render(parse(body(podAnnotations={"team": "a"}))).revision != base


def test_gpu_count_derivation_and_cache_volume() -> None:
    b = body(parallelism={"tensor": 2, "data": 2}, model={"path": "Qwen/Qwen3.6-27B",
             "cache": {"pvc": {"claimName": "hf-cache"}}})
    dep = render(parse(b)).deployment
    c = container(dep)
    assert c["resources"]["limits"]["nvidia.com/gpu"] == "4"
    assert {"name": "model-cache", "persistentVolumeClaim": {"claimName": "hf-cache", "readOnly": False}} in \
        dep["spec"]["template"]["spec"]["volumes"]
    assert {"name": "HF_HOME", "value": "/root/.cache/huggingface"} in c["env"]


def test_a_host_path_cache_is_read_only_of_type_directory_unless_asked() -> None:
    def cache(**extra: Any) -> tuple[dict[str, Any], dict[str, Any]]:
        b = body(model={"path": "Qwen/Qwen3.6-27B", "cache": {"hostPath": "/models/hf", **extra}})
        pod = render(parse(b)).deployment["spec"]["template"]["spec"]
        [volume] = [v for v in pod["volumes"] if v["name"] == "model-cache"]
        [mount] = [m for m in pod["containers"][0]["volumeMounts"] if m["name"] == "model-cache"]
        return volume, mount

    volume, mount = cache()
    assert volume["hostPath"] == {"path": "/models/hf", "type": "Directory"} and mount["readOnly"] is True
    volume, mount = cache(hostPathReadOnly=False)
    assert volume["hostPath"] == {"path": "/models/hf", "type": "DirectoryOrCreate"} and "readOnly" not in mount


def test_owner_reference_and_adopt() -> None:
    owner = {"apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangServer",
             "metadata": {"name": "qwen36-27b", "namespace": "ml", "uid": "u-1"}}
    ref = owner_reference(owner)
    assert ref == {"apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangServer", "name": "qwen36-27b",
                   "uid": "u-1", "controller": True, "blockOwnerDeletion": True}
    child = adopt(render(parse(KNOWN_GOOD)).service, owner)
    assert child["metadata"]["ownerReferences"] == [ref] and child["metadata"]["namespace"] == "ml"


def test_summary() -> None:
    server = parse(KNOWN_GOOD)
    s = summary(server, render(server))
    assert s["numSteps"] == "3" and s["numDraftTokens"] == "4" and s["tp"] == "2"
    assert s["memFractionStatic"] == "0.88"
