"""Kubernetes' own schemas for the pod fields an SGLangServer passes through (``securityContext``, ``affinity``,
``tolerations``, ``env``, ``volumes``, ``volumeMounts``).

Source: the JSON schemas of Kubernetes v1.36.0 (``v1.36.0-local-strict/_definitions.json``) that the PyPI
package ``kubernetes-validate`` ships, generated from the Kubernetes OpenAPI. :func:`extract` keeps the
definitions these fields reach (their ``$ref`` closure) without descriptions or patch/list/union markers; the
result is committed as ``api/data/k8s-pod-types-v1.36.json`` (the operator does not need the 110 MB package at
run time) and ``tests/api/test_kube_types.py`` checks it against the installed package.

Two consumers: :func:`structural` inlines a definition as a structural OpenAPI v3 schema for the CRD (so the
API server refuses ``securityContext: {runAsUsr: 1000}`` with its own ``unknown field`` message), and
:func:`errors` validates a value in Python (``jsonschema``) so ``sglang-operator render`` refuses the same.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Mapping
from importlib import resources
from typing import Any

from jsonschema import Draft202012Validator

from sglang_operator.api.bounds import bounded_definitions, map_key_rule
from sglang_operator.api.names import did_you_mean

KUBERNETES_VERSION = "v1.36.0"
SOURCE = f"kubernetes-validate: kubernetes-json-schema/{KUBERNETES_VERSION}-local-strict/_definitions.json"
DATA_FILE = "k8s-pod-types-v1.36.json"
ROOTS: dict[str, str] = {
    "SecurityContext": "io.k8s.api.core.v1.SecurityContext",
    "Affinity": "io.k8s.api.core.v1.Affinity",
    "Toleration": "io.k8s.api.core.v1.Toleration",
    "EnvVar": "io.k8s.api.core.v1.EnvVar",
    "Volume": "io.k8s.api.core.v1.Volume",
    "VolumeMount": "io.k8s.api.core.v1.VolumeMount",
}
"""Kind → definition name of every type passed through."""
_DROP = {"description", "x-kubernetes-patch-strategy", "x-kubernetes-patch-merge-key", "x-kubernetes-list-type",
         "x-kubernetes-list-map-keys", "x-kubernetes-map-type", "x-kubernetes-unions", "discriminator",
         "fields-to-discriminateBy"}


def _ref_name(ref: str) -> str:
    return ref.rsplit("/", 1)[-1]


def _strip(node: Any) -> Any:
    if isinstance(node, dict):
        out: dict[str, Any] = {}
        for key, value in node.items():
            if key == "properties":
                out[key] = {name: _strip(sub) for name, sub in value.items()}
            elif key == "$ref":
                out[key] = f"#/$defs/{_ref_name(value)}"
            elif key not in _DROP:
                out[key] = _strip(value)
        return out
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def extract(definitions: Mapping[str, Any]) -> dict[str, Any]:
    """The committed data: ``{kubernetesVersion, source, $defs}`` with the closure of :data:`ROOTS` in
    ``definitions`` (the ``$defs`` of ``_definitions.json``), descriptions and merge markers dropped."""
    keep: dict[str, Any] = {}

    def visit(name: str) -> None:
        if name in keep:
            return
        keep[name] = _strip(definitions[name])
        walk(keep[name])

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "$ref" in node:
                visit(_ref_name(node["$ref"]))
            for key, value in node.items():
                if key == "properties":
                    for sub in value.values():
                        walk(sub)
                else:
                    walk(value)
        elif isinstance(node, list):
            for v in node:
                walk(v)

    for name in ROOTS.values():
        visit(name)
    return {"kubernetesVersion": KUBERNETES_VERSION, "source": SOURCE,
            "$defs": {k: keep[k] for k in sorted(keep)}}


def extract_installed() -> dict[str, Any]:
    """:func:`extract` of the installed ``kubernetes-validate`` package (a dev dependency).

    Raises ``ModuleNotFoundError`` when it is not installed."""
    path = (resources.files("kubernetes_validate") / "kubernetes-json-schema" / f"{KUBERNETES_VERSION}-local-strict"
            / "_definitions.json")
    return extract(json.loads(path.read_text(encoding="utf-8"))["$defs"])


def data_json(data: Mapping[str, Any]) -> str:
    """The committed file's text (stable key order, one definition per line)."""
    lines = [f"  {json.dumps(k)}: {json.dumps(v, sort_keys=True)}" for k, v in data["$defs"].items()]
    head = {k: v for k, v in data.items() if k != "$defs"}
    return (json.dumps(head, sort_keys=True)[:-1] + ', "$defs": {\n' + ",\n".join(lines) + "\n}}\n")


@functools.cache
def definitions() -> dict[str, Any]:
    """The committed definitions (``$defs``), loaded once, with the operator's size bounds
    (:func:`sglang_operator.api.bounds.bounded_definitions`): the CRD and the Python check hold the same ones."""
    text = (resources.files("sglang_operator.api") / "data" / DATA_FILE).read_text(encoding="utf-8")
    return bounded_definitions(json.loads(text)["$defs"])


def _type(value: Any) -> Any:
    if isinstance(value, list):
        kinds = [t for t in value if t != "null"]
        return kinds[0] if len(kinds) == 1 else kinds
    return value


def _structural(node: Mapping[str, Any], defs: Mapping[str, Any], seen: tuple[str, ...]) -> dict[str, Any]:
    if "$ref" in node:
        name = _ref_name(node["$ref"])
        if name in seen:
            raise ValueError(f"recursive Kubernetes type {name} cannot be inlined")
        return _structural(defs[name], defs, (*seen, name))
    if "oneOf" in node:  # Quantity (string | number) and IntOrString (string | integer)
        out_ios: dict[str, Any] = {"anyOf": [{"type": "integer"}, {"type": "string"}],
                                   "x-kubernetes-int-or-string": True}
        if "maxLength" in node:
            out_ios["maxLength"] = node["maxLength"]
        return out_ios
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key == "type":
            out[key] = _type(value)
        elif key == "properties":
            out[key] = {name: _structural(sub, defs, seen) for name, sub in value.items()}
        elif key == "items":
            out[key] = _structural(value, defs, seen)
        elif key == "additionalProperties":
            if isinstance(value, dict):  # a map (labels, volumeAttributes, ...); `false` is implied in CRDs
                out[key] = _structural(value, defs, seen)
        elif key == "propertyNames":  # a map's key bound: a CRD holds no propertyNames, CEL checks it
            out.setdefault("x-kubernetes-validations", []).append(map_key_rule(value["maxLength"]))
        else:
            out[key] = value
    if out.get("type") == "object" and "properties" not in out and "additionalProperties" not in out:
        out["x-kubernetes-preserve-unknown-fields"] = True  # FieldsV1: a free-form trie
    return out


@functools.cache
def _structural_cached(kind: str) -> str:
    return json.dumps(_structural({"$ref": f"#/$defs/{ROOTS[kind]}"}, definitions(), ()))


def structural(kind: str) -> dict[str, Any]:
    """Kubernetes ``kind`` (a key of :data:`ROOTS`) as a structural OpenAPI v3 schema, every ``$ref`` inlined:
    nullable types made plain (an unset field is absent), Quantity and IntOrString as
    ``x-kubernetes-int-or-string``, unknown fields left to the API server's pruning / strict field validation."""
    out: dict[str, Any] = json.loads(_structural_cached(kind))
    return out


@functools.cache
def _validator(kind: str) -> Draft202012Validator:
    return Draft202012Validator({"$defs": definitions(), "$ref": f"#/$defs/{ROOTS[kind]}"})


def errors(kind: str, value: Any) -> list[str]:
    """Problems of ``value`` as a Kubernetes ``kind`` (empty: valid), each ``path: message`` with the path
    relative to the value (``runAsUsr: unknown field``; ``capabilities.add: 'x' is not of type 'array'``)."""
    out = []
    for err in sorted(_validator(kind).iter_errors(value), key=lambda e: [str(p) for p in e.absolute_path]):
        path = ".".join(str(p) for p in err.absolute_path)
        if err.validator == "additionalProperties" and isinstance(err.instance, dict):
            known = set(err.schema.get("properties") or {})
            for name in sorted(set(err.instance) - known):
                out.append(f"{path + '.' if path else ''}{name}: unknown field (Kubernetes {KUBERNETES_VERSION} "
                           f"{kind} schema){did_you_mean(name, known)}")
        else:
            out.append(f"{path}: {err.message}" if path else err.message)
    return out
