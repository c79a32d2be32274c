"""The local cluster refuses what a real one would (issue 40 item 5): an ``lmsysorg/sglang`` tag no pinned release has
is not pulled (``ErrImagePull`` with containerd's "not found", then ``ImagePullBackOff``: the fake kubelet knows the
tags of the flag tables' releases, ``e2e/images.yaml``), and DeepSeek-V3 on 2 × RTX A6000 does not start: the
simulator sizes it from its config (671B parameters, FP8: 312 GiB per GPU) and dies with PyTorch's out-of-memory
error while the weights load, as SGLang does; the pod crash-loops and the operator's Degraded condition quotes it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from e2e.conftest import K8sCluster, running_operator, wait_for
from e2e.operator_proc import OperatorProcess
from e2e.tests.objects import pods, server_condition, wait_server_status

pytestmark = [pytest.mark.cluster, pytest.mark.local_cluster]
FAST_SIM = [{"name": "SGLANG_SIM_LOAD_SECONDS", "value": "1"}, {"name": "SGLANG_SIM_TIME_SCALE", "value": "20"}]
TYPO = "lmsysorg/sglang:v0.5.100-cu129"


@pytest.fixture(scope="module")
def operator(k8s_cluster: K8sCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    with running_operator(k8s_cluster, tmp_path_factory.mktemp("operator")) as op:
        yield op


def server(name: str, image: str, model: str) -> dict[str, Any]:
    return {
        "apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangServer", "metadata": {"name": name},
        "spec": {"sglang": {"image": image}, "model": {"path": model}, "parallelism": {"tensor": 2},
                 "memory": {"maxRunningRequests": 16, "contextLength": 32768}, "env": FAST_SIM},
    }


def _waiting(k8s: K8sCluster, ns: str, name: str, reason: str) -> dict[str, Any] | None:
    """The waiting state of the server's container when its reason is ``reason``."""
    for p in pods(k8s, ns, f"app.kubernetes.io/instance={name}"):
        for cs in (p.get("status") or {}).get("containerStatuses") or []:
            waiting = (cs.get("state") or {}).get("waiting") or {}
            if waiting.get("reason") == reason:
                return {**waiting, "phase": p["status"].get("phase"), "pod": p["metadata"]["name"]}
    return None


def test_a_typod_sglang_tag_is_not_pulled(k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess) -> None:
    k8s_cluster.apply(server("typo", TYPO, "Qwen/Qwen3-8B"), namespace)
    err = wait_for("ErrImagePull", lambda: _waiting(k8s_cluster, namespace, "typo", "ErrImagePull"), timeout=45)
    ref = "docker.io/" + TYPO
    assert err["message"] == (f'rpc error: code = NotFound desc = failed to pull and unpack image "{ref}": failed to '
                              f'resolve reference "{ref}": {ref}: not found')
    assert err["phase"] == "Pending"
    back_off = wait_for("ImagePullBackOff", lambda: _waiting(k8s_cluster, namespace, "typo", "ImagePullBackOff"),
                        timeout=20)
    assert back_off["message"] == f'Back-off pulling image "{TYPO}"'
    status = wait_server_status(k8s_cluster, namespace, "typo", "Degraded naming the image", lambda s: next(
        (c for c in s.get("conditions", []) if c["type"] == "Degraded" and c["status"] == "True"), None), timeout=30)
    degraded = server_condition({"status": status}, "Degraded")
    assert degraded["reason"] in ("ErrImagePull", "ImagePullBackOff") and TYPO in degraded["message"]


def test_deepseek_v3_on_two_a6000_fails_with_an_out_of_memory_error(
        k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess) -> None:
    k8s_cluster.apply(server("dsv3", "lmsysorg/sglang:v0.5.23", "deepseek-ai/DeepSeek-V3"), namespace)
    oom = "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate"
    status = wait_server_status(
        k8s_cluster, namespace, "dsv3", "Degraded quoting the out-of-memory error", lambda s: next(
            (c for c in s.get("conditions", []) if c["type"] == "Degraded" and c["status"] == "True"
             and oom in c.get("message", "")), None), timeout=45)
    degraded = server_condition({"status": status}, "Degraded")
    assert degraded["message"].startswith("container sglang exited with code 1: ")
    assert "GPU 0 has a total capacity of 47.99 GiB" in degraded["message"]
    [pod] = pods(k8s_cluster, namespace, "app.kubernetes.io/instance=dsv3")
    log = k8s_cluster.run("logs", pod["metadata"]["name"], "-n", namespace).stdout  # every run of the container
    assert " TP1] Load weight begin. avail mem=47.30 GB" in log and "Load weight end" not in log
    assert f" TP0] Scheduler hit an exception: Traceback (most recent call last):\n{oom}" in log
