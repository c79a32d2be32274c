"""Invalid SGLangServer specs, each with its expected message, against the real API server (issue 3 §7).

``CASES`` is the table: a mutation of the valid known-good spec, the message the API server gives (schema or
CEL, checked with ``kubectl apply --dry-run=server``), and the message of the Python side (pydantic models +
:func:`sglang_operator.builders.check`, i.e. what the operator puts in the SpecValid=False condition). Cases
with ``server=None`` are beyond the schema (release-dependent): the API server must accept them and the
Python validator must refuse them. ``tests/api/test_invalid_specs_offline.py`` runs the Python half without a
cluster.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from e2e.conftest import K8sCluster, wait_for
from sglang_operator.api import SpecError, parse
from sglang_operator.builders import check

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "crds" / "sglangservers.yaml"


def valid_server() -> dict[str, Any]:
    """The published known-good configuration (samples/qwen3.6-27b-known-good.yaml) as a dict."""
    return {
        "apiVersion": "sglang-operator.io/v1alpha1",
        "kind": "SGLangServer",
        "metadata": {"name": "qwen36-27b"},
        "spec": {
            "sglang": {"image": "lmsysorg/sglang:v0.5.10-cu129"},
            "model": {"path": "Qwen/Qwen3.6-27B"},
            "parallelism": {"tensor": 2},
            "speculative": {"algorithm": "NEXTN", "numSteps": 3, "eagleTopk": 1, "numDraftTokens": 4,
                            "specV2": True},
            "memory": {"memFractionStatic": 0.88, "contextLength": 131072, "maxRunningRequests": 16,
                       "mambaFullMemoryRatio": 0.5, "mambaSchedulerStrategy": "extra_buffer"},
            "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-RTX-A6000"},
        },
    }


def setting(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """A mutation setting ``path`` (dotted, from the object root); ``value=DELETE`` removes the key."""
    def apply(obj: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = obj
        for key in parents:
            node = node.setdefault(key, {})
        if value is DELETE:
            node.pop(last, None)
        else:
            node[last] = value
    return apply


DELETE = object()


@dataclass(frozen=True)
class Case:
    id: str
    changes: tuple[Callable[[dict[str, Any]], None], ...]
    server: str | None  # substring of the API server's error; None = the schema accepts it
    python: str  # substring of the Python-side message (SpecError or SpecValid=False)

    def body(self) -> dict[str, Any]:
        obj = copy.deepcopy(valid_server())
        for change in self.changes:
            change(obj)
        return obj


def case(id_: str, server: str | None, python: str, *changes: Callable[[dict[str, Any]], None]) -> Case:
    return Case(id_, changes, server, python)


NDT_MSG = "spec.speculative.numDraftTokens must equal numSteps + 1 when eagleTopk is 1"
OWNED_MSG = "spec.extraArgs may not set a flag that a typed field owns"
S = "spec."
CASES: list[Case] = [
    # --- CEL rules (same message from the API server and from Python) ---
    case("ndt-4-steps-1", NDT_MSG, NDT_MSG, setting(S + "speculative.numSteps", 1)),
    case("ndt-3-steps-3", NDT_MSG, NDT_MSG, setting(S + "speculative.numDraftTokens", 3)),
    case("topk2-no-ndt", "numDraftTokens is required when eagleTopk > 1",
         "numDraftTokens is required when eagleTopk > 1",
         setting(S + "speculative.eagleTopk", 2), setting(S + "speculative.numDraftTokens", DELETE),
         setting(S + "speculative.specV2", False)),
    case("specv2-topk2", "specV2 needs eagleTopk 1", "specV2 needs eagleTopk 1",
         setting(S + "speculative.eagleTopk", 2)),
    case("served-name-colon", "servedModelName may not contain ':'", "servedModelName may not contain ':'",
         setting(S + "model.servedModelName", "qwen:27b")),
    case("multi-node", "not supported yet", "not supported yet", setting(S + "parallelism.nodes", 2)),
    case("extra-tp-abbrev", OWNED_MSG, OWNED_MSG, setting(S + "extraArgs", ["--tp", "2"])),
    case("extra-tp-alias", OWNED_MSG, OWNED_MSG, setting(S + "extraArgs", ["--tensor-parallel-size=2"])),
    case("extra-mem-abbrev", OWNED_MSG, OWNED_MSG, setting(S + "extraArgs", ["--mem-fraction", "0.9"])),
    case("extra-mamba-old", OWNED_MSG, OWNED_MSG,
         setting(S + "extraArgs", ["--mamba-scheduler-strategy", "no_buffer"])),
    case("extra-mamba-new", OWNED_MSG, OWNED_MSG,
         setting(S + "extraArgs", ["--mamba-radix-cache-strategy", "no_buffer"])),
    case("extra-port", OWNED_MSG, OWNED_MSG, setting(S + "extraArgs", ["--port", "8000"])),
    case("extra-spec-prefix", OWNED_MSG, OWNED_MSG, setting(S + "extraArgs", ["--speculative-num", "2"])),
    case("extra-model", OWNED_MSG, OWNED_MSG, setting(S + "extraArgs", ["--model", "other/model"])),
    case("cache-two-sources", "needs exactly one of pvc, hostPath, emptyDir",
         "needs exactly one of pvc, hostPath, emptyDir",
         setting(S + "model.cache", {"pvc": {"claimName": "hf"}, "hostPath": "/data/hf"})),
    case("cache-no-source", "needs exactly one of pvc, hostPath, emptyDir",
         "needs exactly one of pvc, hostPath, emptyDir", setting(S + "model.cache", {"mountPath": "/cache"})),
    case("chunked-prefill-0", "chunkedPrefillSize must be -1 (disabled) or a positive",
         "chunkedPrefillSize must be -1 (disabled) or a positive", setting(S + "memory.chunkedPrefillSize", 0)),
    case("gpu-below-tp", "resources.gpu must be at least", "resources.gpu must be at least",
         setting(S + "resources", {"gpu": 1})),
    case("rollback-window", "windowSeconds must cover at least two probe intervals",
         "windowSeconds must cover at least two probe intervals",
         setting(S + "rollback", {"windowSeconds": 30, "probe": {"intervalSeconds": 30}})),
    case("name-not-dns1035", "metadata.name must be a DNS-1035 label", "metadata.name must be a DNS-1035 label",
         setting("metadata.name", "qwen3.6-27b")),
    # --- schema: bounds, enums, required fields, types ---
    case("mem-fraction-1", "should be less than 1", "less than 1", setting(S + "memory.memFractionStatic", 1.0)),
    case("mem-fraction-0", "should be greater than 0", "greater than 0",
         setting(S + "memory.memFractionStatic", 0)),
    case("algorithm-unknown", 'Unsupported value: "MEDUSA"', "Input should be",
         setting(S + "speculative.algorithm", "MEDUSA")),
    case("algorithm-lowercase", 'Unsupported value: "nextn"', "Input should be",
         setting(S + "speculative.algorithm", "nextn")),
    case("tensor-0", "should be greater than or equal to 1", "greater than or equal to 1",
         setting(S + "parallelism.tensor", 0)),
    case("steps-0", "should be greater than or equal to 1", "greater than or equal to 1",
         setting(S + "speculative.numSteps", 0)),
    case("port-too-big", "should be less than or equal to 65535", "less than or equal to 65535",
         setting(S + "port", 70000)),
    case("no-model-path", "Required value", "Field required", setting(S + "model.path", DELETE)),
    case("no-image", "Required value", "Field required", setting(S + "sglang.image", DELETE)),
    case("no-algorithm", "Required value", "Field required", setting(S + "speculative.algorithm", DELETE)),
    case("mamba-strategy-unknown", 'Unsupported value: "fast"', "Input should be",
         setting(S + "memory.mambaSchedulerStrategy", "fast")),
    case("pull-policy-unknown", 'Unsupported value: "Sometimes"', "Input should be",
         setting(S + "sglang.imagePullPolicy", "Sometimes")),
    case("replicas-negative", "should be greater than or equal to 0", "greater than or equal to 0",
         setting(S + "replicas", -1)),
    case("shm-not-quantity", "should match", "should match pattern", setting(S + "resources.shmSize", "lots")),
    case("context-0", "should be greater than or equal to 1", "greater than or equal to 1",
         setting(S + "memory.contextLength", 0)),
    case("ndt-string", "must be of type integer", "valid integer", setting(S + "speculative.numDraftTokens", "four")),
    case("typo-field", 'unknown field "spec.speculative.numDraftToken"', "Extra inputs are not permitted",
         setting(S + "speculative.numDraftToken", 4)),
    # --- pass-through pod fields carry Kubernetes' own schemas (api/kube_types.py) ---
    case("security-context-typo", 'unknown field "spec.securityContext.runAsUsr"', "runAsUsr: unknown field",
         setting(S + "securityContext", {"runAsUsr": 1000})),
    case("affinity-typo", 'unknown field "spec.affinity.nodeAfinity"', "nodeAfinity: unknown field",
         setting(S + "affinity", {"nodeAfinity": {}})),
    case("toleration-type", "spec.tolerations[0].tolerationSeconds", "tolerationSeconds: 'soon' is not of type",
         setting(S + "tolerations", [{"key": "gpu", "tolerationSeconds": "soon"}])),
    case("env-no-name", "spec.env[0].name: Required value", "'name' is a required property",
         setting(S + "env", [{"value": "1"}])),
    case("volume-typo", 'unknown field "spec.volumes[0].persistentVolumeClaim.claim"',
         "persistentVolumeClaim.claim: unknown field",
         setting(S + "volumes", [{"name": "v", "persistentVolumeClaim": {"claim": "x"}}])),
    case("volume-mount-no-path", "spec.volumeMounts[0].mountPath: Required value", "'mountPath' is a required",
         setting(S + "volumeMounts", [{"name": "v"}])),
    # --- beyond the schema: the target SGLang release decides (SpecValid=False) ---
    case("image-latest", None, "holds no SGLang version", setting(S + "sglang.image", "lmsysorg/sglang:latest")),
    case("version-unsupported", None, "SGLang 0.5.16 is not supported",
         setting(S + "sglang", {"image": "registry.local/sglang:prod", "version": "0.5.16"})),
    case("version-vs-tag", None, "contradicts the image tag", setting(S + "sglang.version", "0.5.23")),
    case("strategy-not-in-release", None, "'extra_buffer_lazy' is not supported by SGLang 0.5.10",
         setting(S + "memory.mambaSchedulerStrategy", "extra_buffer_lazy")),
    case("extra-abbrev-unowned", None, "--page is not a launch flag of SGLang 0.5.10 (full flag names only)",
         setting(S + "extraArgs", ["--page", "64"])),
    case("extra-unknown", None, "--no-such-flag is not a launch flag of SGLang 0.5.10",
         setting(S + "extraArgs", ["--no-such-flag"])),
    case("extra-renamed-in-0.5.23", None, "--cuda-graph-max-bs is not a launch flag of SGLang 0.5.23",
         setting(S + "sglang.image", "lmsysorg/sglang:v0.5.23-cu130"), setting(S + "speculative.specV2", False),
         setting(S + "extraArgs", ["--cuda-graph-max-bs", "64"])),
    case("env-overrides-operator", None, "SGLANG_ENABLE_SPEC_V2 is set by the operator",
         setting(S + "env", [{"name": "SGLANG_ENABLE_SPEC_V2", "value": "0"}])),
]


def python_errors(body: dict[str, Any]) -> list[str]:
    """What the operator reports for ``body``: parse errors, else the release-dependent check's errors."""
    try:
        server = parse(body)
    except SpecError as err:
        return err.messages
    return check(server.spec).errors


@pytest.fixture(scope="module")
def crd_installed(k8s_cluster: K8sCluster) -> K8sCluster:
    k8s_cluster.run("apply", "--server-side", "--force-conflicts", "-f", str(CRD))
    k8s_cluster.run("wait", "--for=condition=Established", "--timeout=60s",
                    "crd/sglangservers.sglang-operator.io")
    wait_for("SGLangServer API discovery",
             lambda: k8s_cluster.run("get", "sgls", "-A", check=False).returncode == 0, timeout=30)
    return k8s_cluster


def dry_run(cluster: K8sCluster, namespace: str, body: dict[str, Any]) -> tuple[int, str]:
    proc = cluster.run("apply", "--dry-run=server", "-n", namespace, "-f", "-", input=json.dumps(body),
                       check=False)
    return proc.returncode, proc.stderr


pytestmark = pytest.mark.cluster


def test_table_is_large_enough() -> None:
    assert len(CASES) >= 30
    assert len({c.id for c in CASES}) == len(CASES)


def test_valid_spec_is_accepted(crd_installed: K8sCluster, namespace: str) -> None:
    code, err = dry_run(crd_installed, namespace, valid_server())
    assert code == 0, err


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_invalid_spec(crd_installed: K8sCluster, namespace: str, c: Case) -> None:
    code, err = dry_run(crd_installed, namespace, c.body())
    if c.server is None:
        assert code == 0, f"the schema should leave this to the operator's SpecValid check: {err}"
    else:
        assert code != 0, "the API server accepted an invalid spec"
        assert c.server in err, err
    errors = python_errors(c.body())
    assert any(c.python in e for e in errors), errors
