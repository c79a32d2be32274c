"""One SGLang release per parser era becomes Ready on the simulator, spoken to in its own dialect (issue 9).

- 0.4.9.post6 (``@dataclass ServerArgs`` with hand-written ``add_argument`` calls): started with
  ``python3 -m sglang.launch_server``, probed on ``/health_generate``, read back from ``/get_server_info`` (it has
  no ``/server_info``);
- 0.5.17 (the alias era): ``sglang serve``, ``/health_generate``, ``/server_info``;
- 0.5.23 (msgspec field groups): ``sglang serve``, ``/ready``, ``/server_info``.

The fake kubelet runs ``sglang-sim`` with the pod's command and the release from the image tag; the simulator
refuses what that release would refuse, so Ready proves the operator rendered the release's own command line.
"""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from e2e.conftest import K8sCluster, running_operator, wait_for
from e2e.operator_proc import OperatorProcess

pytestmark = [pytest.mark.cluster, pytest.mark.local_cluster]
ROOT = Path(__file__).resolve().parents[2]
FAST_SIM = [{"name": "SGLANG_SIM_LOAD_SECONDS", "value": "1"}, {"name": "SGLANG_SIM_TIME_SCALE", "value": "20"}]
ERAS = [
    ("v0.4.9.post6-cu126", "0.4.9.post6", ["python3", "-m", "sglang.launch_server"], "/health_generate",
     "/get_server_info"),
    ("v0.5.17-cu129", "0.5.17", ["sglang", "serve"], "/health_generate", "/server_info"),
    ("v0.5.23-cu130", "0.5.23", ["sglang", "serve"], "/ready", "/server_info"),
]


@pytest.fixture(scope="module")
def operator(k8s_cluster: K8sCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    with running_operator(k8s_cluster, tmp_path_factory.mktemp("operator")) as op:
        yield op


def server(tag: str) -> dict[str, Any]:
    """Qwen3.6-27B with NEXTN 3/1/4 on two GPUs: settings every era has (no mamba flags before 0.5.7)."""
    return {
        "apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangServer", "metadata": {"name": "qwen"},
        "spec": {
            "sglang": {"image": f"lmsysorg/sglang:{tag}"},
            "model": {"path": "Qwen/Qwen3.6-27B"},
            "parallelism": {"tensor": 2},
            "speculative": {"algorithm": "NEXTN", "numSteps": 3, "eagleTopk": 1, "numDraftTokens": 4,
                            "specV2": False},
            "memory": {"memFractionStatic": 0.88, "contextLength": 131072, "maxRunningRequests": 16},
            "env": FAST_SIM,
        },
    }


def _cond(obj: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in obj.get("status", {}).get("conditions", []) if c["type"] == type_), {})


def _get(url: str) -> tuple[int, Any]:
    try:
        with urllib.request.urlopen(url, timeout=5) as r:
            return r.status, json.loads(r.read() or b"null")
    except urllib.error.HTTPError as err:
        return err.code, None


@pytest.mark.parametrize(("tag", "release", "entry", "readiness", "info_path"), ERAS, ids=[e[1] for e in ERAS])
def test_release_of_each_parser_era_becomes_ready_in_its_dialect(
    k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess, tag: str, release: str,
    entry: list[str], readiness: str, info_path: str,
) -> None:
    k8s_cluster.apply(server(tag), namespace)

    def ready() -> dict[str, Any] | None:
        obj: dict[str, Any] = k8s_cluster.get("sglangserver", "qwen", "-n", namespace)
        st = obj.get("status", {})
        ok = st.get("phase") == "Ready" and _cond(obj, "Ready").get("status") == "True" and st.get("effective")
        return obj if ok else None

    try:
        obj = wait_for(f"SGLang {release} Ready", ready, timeout=120)
    except AssertionError:
        print(json.dumps(k8s_cluster.get("sglangserver", "qwen", "-n", namespace).get("status"), indent=1))
        raise
    assert _cond(obj, "SpecValid")["status"] == "True"
    assert obj["status"]["effective"]["numDraftTokens"] == 4
    pods = k8s_cluster.get("pods", "-n", namespace, "-l", "app.kubernetes.io/instance=qwen")["items"]
    pod = next(p for p in pods if not p["metadata"].get("deletionTimestamp"))
    container = pod["spec"]["containers"][0]
    assert container["command"] == entry
    assert container["readinessProbe"]["httpGet"]["path"] == readiness
    base = f"http://{pod['status']['podIP']}:30000"
    status, info = _get(base + info_path)
    if status != 200 or info["version"] != release:
        print(json.dumps(container.get("env"), indent=1))
        print(k8s_cluster.run("logs", pod["metadata"]["name"], "-n", namespace, check=False).stdout[-3000:])
    assert status == 200 and info["version"] == release
    assert (info["speculative_algorithm"], info["speculative_num_draft_tokens"], info["tp_size"]) == ("EAGLE", 4, 2)
    if info_path == "/get_server_info":  # the release predates /server_info: the simulator has none either
        assert _get(base + "/server_info")[0] == 404
    assert _get(base + "/ready")[0] == (200 if readiness == "/ready" else 404)
