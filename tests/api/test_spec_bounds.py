"""Spec sizes are bounded: every list, string and map of both CRDs' specs has a bound, the largest spec either
schema admits stays within 256 KiB, and the Python check refuses what the API server would (the same bounds)."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sglang_operator.api import bounds
from sglang_operator.api import crd as crds
from sglang_operator.api.server import SpecError, parse_spec
from sglang_operator.api.tuning import parse_tuning

SPEC = {"sglang": {"image": "lmsysorg/sglang:v0.5.10-cu129"}, "model": {"path": "Qwen/Qwen3-8B"}}


def _spec_schema(doc: dict[str, Any]) -> dict[str, Any]:
    schema: dict[str, Any] = doc["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema


def _walk_size(node: dict[str, Any]) -> int:
    """The worst case computed independently of :func:`bounds.worst_case_bytes`: build the largest value itself
    (every string at maxLength, every list at maxItems, every map at maxProperties with keys at their bound, an
    object's required properties then its largest others) and serialize it."""
    return len(json.dumps(_largest(node), separators=(",", ":")))


def _largest(node: dict[str, Any]) -> Any:
    if "enum" in node:
        return max(node["enum"], key=lambda v: len(json.dumps(v)))
    if node.get("x-kubernetes-int-or-string") or node.get("type") == "string":
        return "x" * node["maxLength"]
    if node.get("type") in ("integer", "number"):
        if "minimum" in node and "maximum" in node:
            return max(node["minimum"], node["maximum"], key=lambda v: len(json.dumps(v)))
        return -(2**63) if node.get("type") == "integer" else -1.2345678901234567e-300
    if node.get("type") == "boolean":
        return False
    if node.get("type") == "array":
        item = _largest(node["items"])
        return [item] * node["maxItems"]
    out: dict[str, Any] = {}
    props = {k: _largest(v) for k, v in (node.get("properties") or {}).items()}
    required = [k for k in node.get("required", ()) if k in props]
    others = sorted((k for k in props if k not in required), key=lambda k: -len(json.dumps({k: props[k]})))
    for k in [*required, *others][: node.get("maxProperties", len(props))]:
        out[k] = props[k]
    if isinstance(node.get("additionalProperties"), dict):
        value = _largest(node["additionalProperties"])
        key = bounds.key_limit(node)
        assert key is not None
        for i in range(node["maxProperties"]):
            out[f"{i:0{key}d}"] = value
    return out


@pytest.mark.parametrize("doc", [crds.crd(), crds.tuning_crd()], ids=["SGLangServer", "SGLangTuning"])
def test_worst_case_spec_is_at_most_256_kib(doc: dict[str, Any]) -> None:
    schema = _spec_schema(doc)
    worst = bounds.worst_case_bytes(schema)
    assert worst <= bounds.SPEC_SIZE_LIMIT == 256 * 1024
    # the walker over-estimates at most by the JSON digits of a number; a value built at the bounds is as large
    assert _walk_size(schema) <= worst
    assert _walk_size(schema) > worst * 0.95


@pytest.mark.parametrize("doc", [crds.crd(), crds.tuning_crd()], ids=["SGLangServer", "SGLangTuning"])
def test_every_list_string_and_map_of_the_spec_has_a_bound(doc: dict[str, Any]) -> None:
    assert list(bounds.unbounded(_spec_schema(doc), ".spec")) == []


def test_tuning_status_is_bounded_too() -> None:
    status = crds.tuning_crd()["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["status"]
    assert list(bounds.unbounded(status, ".status")) == []


def test_the_walker_names_an_unbounded_node() -> None:
    with pytest.raises(ValueError, match=r"\.a\[\]: a string without maxLength"):
        bounds.worst_case_bytes({"type": "object", "properties": {"a": {"type": "array", "maxItems": 2,
                                                                        "items": {"type": "string"}}}})
    assert list(bounds.unbounded({"type": "object", "additionalProperties": {"type": "string", "maxLength": 1}},
                                 ".m")) == [".m: a map without maxProperties or a key bound"]


def test_maps_carry_their_key_bound_as_cel() -> None:
    spec = _spec_schema(crds.crd())["properties"]
    for name in ("podLabels", "podAnnotations", "nodeSelector"):
        assert "propertyNames" not in spec[name]
        assert bounds.map_key_rule() in spec[name]["x-kubernetes-validations"]
    attrs = spec["volumes"]["items"]["properties"]["csi"]["properties"]["volumeAttributes"]
    assert bounds.map_key_rule() in attrs["x-kubernetes-validations"] and attrs["maxProperties"] == 4


def test_affinity_lists_are_bounded() -> None:
    aff = _spec_schema(crds.crd())["properties"]["affinity"]["properties"]
    terms = aff["nodeAffinity"]["properties"]["requiredDuringSchedulingIgnoredDuringExecution"]["properties"][
        "nodeSelectorTerms"]
    assert terms["maxItems"] == 2
    assert terms["items"]["properties"]["matchExpressions"]["items"]["properties"]["values"]["maxItems"] == 8
    assert bounds.worst_case_bytes(_spec_schema(crds.crd())["properties"]["affinity"]) < 64 * 1024


@pytest.mark.parametrize(("extra", "field"), [
    ({"env": [{"name": f"V{i}", "value": "1"} for i in range(10_000)]}, "spec.env"),
    ({"env": [{"name": "V", "value": "x" * 1025}]}, "spec.env.0"),
    ({"podAnnotations": {f"a{i}": "1" for i in range(17)}}, "spec.podAnnotations"),
    ({"podLabels": {"k" * 318: "v"}}, "spec.podLabels"),
    ({"nodeSelector": {"k": "v" * 64}}, "spec.nodeSelector.k"),
    ({"volumes": [{"name": f"v{i}", "emptyDir": {}} for i in range(9)]}, "spec.volumes"),
    ({"tolerations": [{"key": "k", "operator": "Exists"}] * 9}, "spec.tolerations"),
    ({"imagePullSecrets": [{"name": "s"}] * 9}, "spec.imagePullSecrets"),
    ({"extraArgs": ["--x"] * 65}, "spec.extraArgs"),
    ({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "k", "operator": "In", "values": ["a"]}]}] * 3}}}}, "spec.affinity"),
    ({"volumes": [{"name": "p", "projected": {"sources": [{"secret": {"name": "a"}}] * 3}}]}, "spec.volumes.0"),
    ({"volumes": [{"name": "b", "secret": {"secretName": "a"}, "emptyDir": {}}]}, "spec.volumes.0"),
    ({"model": {"path": "m" * 257}}, "spec.model.path"),
    ({"sglang": {"image": "i" * 513}}, "spec.sglang.image"),
])
def test_python_refuses_what_the_crd_bounds(extra: dict[str, Any], field: str) -> None:
    with pytest.raises(SpecError) as err:
        parse_spec({**SPEC, **extra})
    assert any(m.startswith(field) for m in err.value.messages), err.value.messages


def test_specs_at_the_limits_parse() -> None:
    spec = parse_spec({
        **SPEC,
        "env": [{"name": f"V{i}", "value": "x" * 1024} for i in range(32)],
        "podAnnotations": {f"a{i}": "x" * 512 for i in range(16)},
        "extraArgs": ["--x"] * 64,
        "volumes": [{"name": f"v{i}", "emptyDir": {}} for i in range(8)],
    })
    assert len(spec.env) == 32 and len(spec.volumes) == 8


def test_tuning_prompts_bounded() -> None:
    body = {"metadata": {"name": "t"}, "spec": {"serverRef": {"name": "s"},
                                                "workload": {"prompts": ["p"] * 17}}}
    with pytest.raises(SpecError, match=r"spec\.workload\.prompts"):
        parse_tuning(body)
