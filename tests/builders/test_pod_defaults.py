"""SGLang pod defaults for a shared cluster (issue 16 item 4): no service account token, a container
securityContext without privilege escalation, capabilities or an unconfined seccomp profile, each merged per field
with ``spec.securityContext``, and CPU / memory requests so a GPU pod is never BestEffort; every template
(Deployment, LeaderWorkerSet leader and worker) passes the Pod Security Standards ``baseline`` level."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from sglang_operator.api import parse
from sglang_operator.builders import pod_templates, render
from sglang_operator.builders.workload import CPU_PER_GPU, MEMORY_GIB_PER_GPU, default_requests

ROOT = Path(__file__).resolve().parents[2]
SAMPLE: dict[str, Any] = yaml.safe_load((ROOT / "samples" / "qwen3.6-27b-known-good.yaml").read_text())
MULTINODE: dict[str, Any] = {
    "apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangServer", "metadata": {"name": "dsv3"},
    "spec": {"sglang": {"image": "lmsysorg/sglang:v0.5.23"},
             "model": {"path": "deepseek-ai/DeepSeek-V3", "trustRemoteCode": True},
             "parallelism": {"tensor": 16, "nodes": 2},
             "speculative": {"algorithm": "NEXTN", "numSteps": 3, "eagleTopk": 1},
             "memory": {"maxRunningRequests": 16}},
}

# --- Pod Security Standards, baseline (https://kubernetes.io/docs/concepts/security/pod-security-standards/) ----

BASELINE_CAPABILITIES = frozenset({"AUDIT_WRITE", "CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "MKNOD",
                                   "NET_BIND_SERVICE", "SETFCAP", "SETGID", "SETPCAP", "SETUID", "SYS_CHROOT"})
"""The capabilities ``baseline`` allows a container to add (the container runtime's default set)."""


def baseline_violations(pod_spec: dict[str, Any]) -> list[str]:
    """What in ``pod_spec`` (a PodSpec dict) breaks the ``baseline`` level: host namespaces, privileged
    containers, capabilities beyond :data:`BASELINE_CAPABILITIES`, hostPath volumes, host ports, an Unconfined
    seccomp profile, a non-default /proc mount. Empty: it passes."""
    out = [f"spec.{ns}" for ns in ("hostNetwork", "hostPID", "hostIPC") if pod_spec.get(ns)]
    out += [f"volume {v.get('name')}: hostPath" for v in pod_spec.get("volumes") or [] if "hostPath" in v]
    pod_sc = pod_spec.get("securityContext") or {}
    if (pod_sc.get("seccompProfile") or {}).get("type") == "Unconfined":
        out.append("pod seccompProfile Unconfined")
    for c in [*(pod_spec.get("initContainers") or []), *pod_spec["containers"]]:
        sc = c.get("securityContext") or {}
        name = c.get("name")
        if sc.get("privileged"):
            out.append(f"container {name}: privileged")
        extra = set((sc.get("capabilities") or {}).get("add") or []) - BASELINE_CAPABILITIES
        if extra:
            out.append(f"container {name}: capabilities {sorted(extra)}")
        if (sc.get("seccompProfile") or {}).get("type") == "Unconfined":
            out.append(f"container {name}: seccompProfile Unconfined")
        if sc.get("procMount", "Default") != "Default":
            out.append(f"container {name}: procMount {sc['procMount']}")
        out += [f"container {name}: hostPort {p['hostPort']}" for p in c.get("ports") or [] if p.get("hostPort")]
    return out


def test_the_baseline_check_finds_what_baseline_forbids() -> None:
    """The check itself: each rule it claims to check catches its violation."""
    bad = {"hostNetwork": True, "hostPID": True, "volumes": [{"name": "hf", "hostPath": {"path": "/data"}}],
           "containers": [{"name": "c", "ports": [{"containerPort": 80, "hostPort": 80}],
                           "securityContext": {"privileged": True, "capabilities": {"add": ["IPC_LOCK", "CHOWN"]},
                                               "seccompProfile": {"type": "Unconfined"}}}]}
    assert baseline_violations(bad) == [
        "spec.hostNetwork", "spec.hostPID", "volume hf: hostPath", "container c: privileged",
        "container c: capabilities ['IPC_LOCK']", "container c: seccompProfile Unconfined", "container c: hostPort 80"]


# --- helpers ---------------------------------------------------------------------------------------------------


def templates(body: dict[str, Any]) -> list[dict[str, Any]]:
    return pod_templates(render(parse(body)).workload)


def with_spec(base: dict[str, Any] = SAMPLE, **fields: Any) -> dict[str, Any]:
    out = copy.deepcopy(base)
    out["spec"].update(copy.deepcopy(fields))
    return out


def container(template: dict[str, Any]) -> dict[str, Any]:
    c: dict[str, Any] = template["spec"]["containers"][0]
    return c


DEFAULT_SC = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]},
              "seccompProfile": {"type": "RuntimeDefault"}}


# --- the defaults ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("body", [SAMPLE, MULTINODE], ids=["deployment", "leaderworkerset"])
def test_every_pod_template_has_the_defaults_and_passes_baseline(body: dict[str, Any]) -> None:
    found = templates(body)
    assert len(found) == (2 if body is MULTINODE else 1)
    gpus = parse(body).spec.gpus
    for t in found:
        assert t["spec"]["automountServiceAccountToken"] is False
        c = container(t)
        assert c["securityContext"] == DEFAULT_SC
        assert c["resources"]["requests"] == {"nvidia.com/gpu": str(gpus), "cpu": str(CPU_PER_GPU * gpus),
                                              "memory": f"{MEMORY_GIB_PER_GPU * gpus}Gi"}
        assert c["resources"]["limits"] == {"nvidia.com/gpu": str(gpus)}  # no CPU / memory limit by default
        assert baseline_violations(t["spec"]) == []


def test_default_requests_per_gpu_with_a_floor() -> None:
    assert default_requests(2) == {"cpu": "8", "memory": "32Gi"}
    assert default_requests(0) == default_requests(1) == {"cpu": "4", "memory": "16Gi"}


def test_a_gpu_pod_is_burstable_not_best_effort() -> None:
    """Kubernetes' QoS class: BestEffort when no container requests or limits CPU or memory."""
    c = container(templates(SAMPLE)[0])
    assert {"cpu", "memory"} <= set(c["resources"]["requests"])


# --- the spec wins, per field ----------------------------------------------------------------------------------


@pytest.mark.parametrize(("given", "expected"), [
    ({"allowPrivilegeEscalation": True}, {**DEFAULT_SC, "allowPrivilegeEscalation": True}),
    ({"seccompProfile": {"type": "Localhost", "localhostProfile": "sglang.json"}},
     {**DEFAULT_SC, "seccompProfile": {"type": "Localhost", "localhostProfile": "sglang.json"}}),
    ({"capabilities": {"add": ["IPC_LOCK"]}}, {**DEFAULT_SC, "capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK"]}}),
    ({"capabilities": {"drop": ["NET_RAW"]}}, {**DEFAULT_SC, "capabilities": {"drop": ["NET_RAW"]}}),
    ({"capabilities": {"add": ["SYS_NICE"], "drop": []}},
     {**DEFAULT_SC, "capabilities": {"drop": [], "add": ["SYS_NICE"]}}),
    ({"runAsUser": 1000, "runAsNonRoot": True}, {**DEFAULT_SC, "runAsUser": 1000, "runAsNonRoot": True}),
    ({"privileged": True, "allowPrivilegeEscalation": True},
     {**DEFAULT_SC, "privileged": True, "allowPrivilegeEscalation": True}),
    # the API server refuses allowPrivilegeEscalation false beside these: the default is left out, not imposed
    ({"privileged": True}, {k: v for k, v in {**DEFAULT_SC, "privileged": True}.items()
                            if k != "allowPrivilegeEscalation"}),
    ({"capabilities": {"add": ["SYS_ADMIN"]}}, {"capabilities": {"drop": ["ALL"], "add": ["SYS_ADMIN"]},
                                                "seccompProfile": DEFAULT_SC["seccompProfile"]}),
    ({"capabilities": {"add": ["CAP_SYS_ADMIN"]}, "allowPrivilegeEscalation": False},  # said so: kept, refused
     {**DEFAULT_SC, "capabilities": {"drop": ["ALL"], "add": ["CAP_SYS_ADMIN"]}}),
], ids=["escalation", "seccomp", "add-ipc-lock", "own-drop", "add-and-empty-drop", "non-root", "privileged",
        "privileged-alone", "sys-admin", "sys-admin-explicit-false"])
def test_the_spec_security_context_wins_per_field(given: dict[str, Any], expected: dict[str, Any]) -> None:
    for t in templates(with_spec(securityContext=given)) + templates(with_spec(MULTINODE, securityContext=given)):
        assert container(t)["securityContext"] == expected


def test_rdma_capabilities_leave_baseline_as_the_docstring_says() -> None:
    t = templates(with_spec(securityContext={"capabilities": {"add": ["IPC_LOCK"]}}))[0]
    assert baseline_violations(t["spec"]) == ["container sglang: capabilities ['IPC_LOCK']"]


def test_the_service_account_token_only_when_asked() -> None:
    assert all(t["spec"]["automountServiceAccountToken"] is True
               for t in templates(with_spec(MULTINODE, automountServiceAccountToken=True)))
    assert templates(with_spec(automountServiceAccountToken=False))[0]["spec"]["automountServiceAccountToken"] is False


@pytest.mark.parametrize(("resources", "requests", "limits"), [
    ({"cpu": "6", "memory": "48Gi"}, {"cpu": "6", "memory": "48Gi"}, {"cpu": "6", "memory": "48Gi"}),
    ({"cpu": "6"}, {"cpu": "6", "memory": "32Gi"}, {"cpu": "6"}),
    ({"memory": "100Gi"}, {"cpu": "8", "memory": "100Gi"}, {"memory": "100Gi"}),
    ({"gpu": 4}, {"cpu": "16", "memory": "64Gi"}, {}),  # per GPU of the pod
])
def test_requests_come_from_spec_resources(resources: dict[str, Any], requests: dict[str, str],
                                           limits: dict[str, str]) -> None:
    res = container(templates(with_spec(resources=resources))[0])["resources"]
    gpu = {"nvidia.com/gpu": str(resources.get("gpu", 2))}
    assert res["requests"] == {**gpu, **requests} and res["limits"] == {**gpu, **limits}


def test_a_hostpath_model_cache_is_what_breaks_baseline() -> None:
    """The operator's own defaults pass baseline; a hostPath model cache (the user's choice) does not."""
    t = templates(with_spec(model={**SAMPLE["spec"]["model"], "cache": {"hostPath": "/data/hf"}}))[0]
    assert baseline_violations(t["spec"]) == ["volume model-cache: hostPath"]
