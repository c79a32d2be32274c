"""Kubernetes' own schemas for the pass-through pod fields: the committed extract matches the installed
kubernetes-validate package, and the Python side refuses what the API server refuses (typos, wrong types)."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from sglang_operator.api import SpecError, kube_types, parse_spec


def test_committed_extract_matches_kubernetes_validate() -> None:
    committed = (resources.files("sglang_operator.api") / "data" / kube_types.DATA_FILE).read_text()
    fresh = kube_types.data_json(kube_types.extract_installed())  # kubernetes-validate is a dev dependency
    assert committed == fresh, "regenerate: python scripts/extract_k8s_types.py"
    data = json.loads(committed)
    assert data["kubernetesVersion"] == "v1.36.0"
    assert set(kube_types.ROOTS.values()) <= set(data["$defs"])


@pytest.mark.parametrize(("kind", "value", "message"), [
    ("SecurityContext", {"runAsUsr": 1000}, "runAsUsr: unknown field"),
    ("Affinity", {"nodeAfinity": {}}, "nodeAfinity: unknown field"),
    ("Toleration", {"key": "gpu", "tolerationSeconds": "soon"}, "tolerationSeconds: 'soon' is not of type"),
    ("EnvVar", {"value": "1"}, "'name' is a required property"),
    ("EnvVar", {"name": "T", "valueFrom": {"secretKeyRef": {"name": "s", "kye": "t"}}},
     "valueFrom.secretKeyRef.kye: unknown field"),
    ("Volume", {"name": "v", "persistentVolumeClaim": {"claim": "x"}}, "persistentVolumeClaim.claim: unknown field"),
    ("VolumeMount", {"name": "v"}, "'mountPath' is a required property"),
])
def test_errors_name_the_field(kind: str, value: dict, message: str) -> None:
    assert any(message in e for e in kube_types.errors(kind, value)), kube_types.errors(kind, value)


def test_valid_values_pass() -> None:
    assert kube_types.errors("SecurityContext", {"runAsUser": 1000, "capabilities": {"drop": ["ALL"]}}) == []
    assert kube_types.errors("Volume", {"name": "v", "emptyDir": {"sizeLimit": "1Gi", "medium": "Memory"}}) == []
    assert kube_types.errors("Toleration", {"key": "nvidia.com/gpu", "operator": "Exists",
                                            "effect": "NoSchedule"}) == []


def test_spec_refuses_typos_in_pass_through_fields() -> None:
    base = {"sglang": {"image": "lmsysorg/sglang:v0.5.10-cu129"}, "model": {"path": "m"}}
    with pytest.raises(SpecError) as err:
        parse_spec({**base, "securityContext": {"runAsUsr": 1000}, "affinity": {"nodeAfinity": {}},
                    "env": [{"name": "A", "value": "1"}, {"name": "B", "valu": "2"}]})
    text = "; ".join(err.value.messages)
    assert "spec.securityContext: runAsUsr: unknown field" in text
    assert "spec.affinity: nodeAfinity: unknown field" in text
    assert "spec.env.1: valu: unknown field" in text
    assert parse_spec({**base, "securityContext": {"runAsUser": 1000}}).security_context == {"runAsUser": 1000}
