"""The generated CRD: committed copies are fresh, the schema is structural, rules and columns are there."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from schema_walk import schema_nodes

from sglang_operator.api import API_VERSION
from sglang_operator.api.base import ApiModel
from sglang_operator.api.crd import CRD_FILES, crd, crd_yaml

ROOT = Path(__file__).resolve().parents[2]


def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]
    return schema


def test_committed_crd_is_fresh() -> None:
    committed = (ROOT / "crds" / "sglangservers.yaml").read_text()
    assert committed == crd_yaml(), "crds/ is stale: run `sglang-operator crd > crds/sglangservers.yaml`"


def test_helm_chart_crd_is_fresh() -> None:
    committed = (ROOT / "charts" / "sglang-operator" / "files" / "crds" / "sglangservers.yaml").read_text()
    assert committed == crd_yaml(), \
        "chart CRD is stale: cp crds/sglangservers.yaml charts/sglang-operator/files/crds/ (templates/crds.yaml)"


def test_schema_is_structural() -> None:
    for path, node in schema_nodes(_schema()):
        assert "$ref" not in node and "title" not in node and "nullable" not in node, path
        assert node.get("additionalProperties") is not False, path
        if "anyOf" in node:
            assert node.get("x-kubernetes-int-or-string") is True, path
            assert node["anyOf"] == [{"type": "integer"}, {"type": "string"}], path
        else:
            assert "type" in node, f"{path} has no type"
        if isinstance(node.get("exclusiveMinimum"), bool) or isinstance(node.get("exclusiveMaximum"), bool):
            assert "minimum" in node or "maximum" in node, path


PASS_THROUGH = (".securityContext", ".affinity", ".tolerations", ".env", ".volumes", ".volumeMounts")
"""Fields that carry Kubernetes' own schemas: described themselves, their sub-schemas without descriptions
(CRD size; ``kubectl explain pod.spec...`` documents them)."""


def test_spec_fields_are_described() -> None:
    spec = _schema()["properties"]["spec"]
    undocumented = [p for p, n in schema_nodes(spec) if p and "description" not in n and not p.endswith(("[]", "{}"))
                    and not any(p.startswith(f + ".") or p.startswith(f + "[]") for f in PASS_THROUGH)]
    assert undocumented == []
    for field in PASS_THROUGH:
        assert _schema()["properties"]["spec"]["properties"][field[1:]]["description"], field


def test_pass_through_fields_carry_kubernetes_schemas() -> None:
    spec = _schema()["properties"]["spec"]["properties"]
    assert "runAsUser" in spec["securityContext"]["properties"]
    assert "nodeAffinity" in spec["affinity"]["properties"]
    assert spec["tolerations"]["items"]["properties"]["tolerationSeconds"]["type"] == "integer"
    assert spec["env"]["items"]["required"] == ["name"]
    assert "secretKeyRef" in spec["env"]["items"]["properties"]["valueFrom"]["properties"]
    assert "persistentVolumeClaim" in spec["volumes"]["items"]["properties"]
    assert sorted(spec["volumeMounts"]["items"]["required"]) == ["mountPath", "name"]
    size = spec["volumes"]["items"]["properties"]["emptyDir"]["properties"]["sizeLimit"]
    assert size == {"anyOf": [{"type": "integer"}, {"type": "string"}], "x-kubernetes-int-or-string": True,
                    "maxLength": 64}
    assert not any(n.get("x-kubernetes-preserve-unknown-fields") for f in PASS_THROUGH for _, n in
                   schema_nodes(spec[f[1:]]) if "metadata" not in _)  # only FieldsV1 of an ephemeral volume's metadata


def test_crd_size_stays_far_below_the_etcd_object_limit() -> None:
    assert len(crd_yaml().encode()) < 256 * 1024  # etcd's limit: 1.5 MiB per object


def test_bounds_defaults_and_enums() -> None:
    spec = _schema()["properties"]["spec"]["properties"]
    mem = spec["memory"]["properties"]["memFractionStatic"]
    assert (mem["minimum"], mem["exclusiveMinimum"], mem["maximum"], mem["exclusiveMaximum"]) == (0, True, 1, True)
    spec_dec = spec["speculative"]["properties"]
    assert spec_dec["algorithm"]["enum"] == ["NEXTN", "EAGLE", "EAGLE3", "STANDALONE", "NGRAM"]
    assert spec_dec["numSteps"]["default"] == 3 and spec_dec["eagleTopk"]["default"] == 1
    assert "default" not in spec_dec["numDraftTokens"]
    assert spec["parallelism"]["default"] == {"tensor": 1, "pipeline": 1, "data": 1, "nodes": 1}  # not {}: see crd.py
    probe = spec["rollback"]["properties"]["probe"]["properties"]
    assert spec["rollback"]["default"]["probe"]["maxTokens"] == probe["maxTokens"]["default"]
    assert "default" not in spec["extraArgs"] and spec["extraArgs"]["maxItems"] == 64
    assert "x-kubernetes-preserve-unknown-fields" not in spec["affinity"]


def test_every_python_rule_is_in_the_crd() -> None:
    rules = [r for cls in _models(ApiModel) for r in cls.cel_rules]
    assert len(rules) >= 10
    found = {v["rule"] for text in CRD_FILES.values()
             for _, n in schema_nodes(yaml.safe_load(text())["spec"]["versions"][0]["schema"]["openAPIV3Schema"])
             for v in n.get("x-kubernetes-validations", [])}
    assert {r.rule for r in rules} <= found


def _models(base: type) -> list[type[ApiModel]]:
    out: list[type[ApiModel]] = []
    for sub in base.__subclasses__():
        out += [sub, *_models(sub)]
    return out


def test_names_subresources_and_columns() -> None:
    c = crd()
    assert c["metadata"]["name"] == "sglangservers.sglang-operator.io"
    assert c["spec"]["names"]["shortNames"] == ["sgls"]
    v = c["spec"]["versions"][0]
    assert v["name"] == "v1alpha1" and f"{c['spec']['group']}/{v['name']}" == API_VERSION
    assert v["subresources"]["scale"] == {"specReplicasPath": ".spec.replicas",
                                          "statusReplicasPath": ".status.replicas",
                                          "labelSelectorPath": ".status.selector"}
    assert "status" in v["subresources"]
    assert [col["name"] for col in v["additionalPrinterColumns"]] == [
        "Ready", "Available", "Replicas", "Desired", "SpecValid", "Model", "TP", "Algorithm", "Steps", "DraftTokens",
        "AcceptLen", "Tok/s", "Revision", "Analysis", "Reason", "Stable", "Canary", "Phase", "Capacity", "Age"]
    default = [col["name"] for col in v["additionalPrinterColumns"] if not col.get("priority")]  # the rest: -o wide
    assert default == ["Ready", "Replicas", "AcceptLen", "Tok/s", "Revision", "Analysis", "Reason", "Age"]
    status = v["schema"]["openAPIV3Schema"]["properties"]["status"]["properties"]
    for col in v["additionalPrinterColumns"]:  # every status path a column shows is declared, to its leaf
        parts = col["jsonPath"].split(".")
        if parts[1] == "status" and "[" not in col["jsonPath"]:
            node = {"properties": status}
            for part in parts[2:]:
                assert part in node.get("properties", {}), col
                node = node["properties"][part]


def test_model_api_version_literal_matches_constants() -> None:
    from sglang_operator.api import SGLangServer

    assert SGLangServer.model_fields["api_version"].default == API_VERSION
    assert SGLangServer.model_fields["kind"].default == "SGLangServer"
