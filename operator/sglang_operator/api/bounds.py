"""Size bounds of the specs: every list, string and map of SGLangServer and SGLangTuning has one, so no spec can
be larger than :data:`SPEC_SIZE_LIMIT` and a tenant cannot make the operator hold, parse and render megabytes.

The typed fields carry their bounds in the pydantic models (``Field(max_length=...)``: ``maxLength``, ``maxItems``
or ``maxProperties`` in the CRD). The Kubernetes types passed through (``env``, ``volumes``, ``volumeMounts``,
``tolerations``, ``affinity``, ``securityContext``) get theirs here, from one table (:data:`KUBE_BOUNDS`) applied to
Kubernetes' own definitions (:func:`bounded_definitions`): the CRD inlines the bounded definitions and the Python
validator checks values against the same ones (:mod:`.kube_types`). A map's keys are bounded by
:data:`MAP_KEY_LIMIT` (pydantic's ``propertyNames``, which a CRD cannot hold, becomes the CEL rule
:func:`map_key_rule`).

:func:`worst_case_bytes` computes the largest JSON a schema admits (every string at ``maxLength``, every list at
``maxItems``, every map at ``maxProperties``, an object with ``maxProperties`` at its largest properties);
:func:`unbounded` lists the nodes without a bound. ``docs/security.md`` ("Bounds") gives the values and why.
"""

from __future__ import annotations

import copy
import json
import re
from collections.abc import Iterator, Mapping
from typing import Annotated, Any

from pydantic import Field

SPEC_SIZE_LIMIT = 256 * 1024
"""Bytes at most of the largest ``spec`` either CRD admits (JSON, one byte per character; etcd's object limit is
1.5 MiB, so even a spec of 6-byte escaped characters fits)."""
MAP_KEY_LIMIT = 317
"""Characters at most of a map key: a Kubernetes qualified name (253-character DNS prefix, ``/``, 63-character
name), the longest label or annotation key the API server accepts."""
LABEL_VALUE_LIMIT = 63
"""Characters at most of a label value (Kubernetes' own limit)."""
NAME_LIMIT = 253
"""Characters at most of an object name or any other short Kubernetes string (a DNS-1123 subdomain)."""
PATH_LIMIT = 256
"""Characters at most of a file path (mount paths, host paths)."""
ENV_VALUE_LIMIT = 1024
"""Characters at most of an env var's value."""
POD_ANNOTATION_LIMIT = 512
"""Characters at most of a pod annotation's value (JSON of a CNI network list fits)."""

MAX_EXTRA_ARGS = 64
"""Items at most of ``spec.extraArgs`` (512 characters each)."""
MAX_ENV = 32
"""Entries at most of ``spec.env``."""
MapKey = Annotated[str, Field(max_length=MAP_KEY_LIMIT)]
"""A map key of a spec (``podLabels``, ``podAnnotations``, ``nodeSelector``)."""
LabelValue = Annotated[str, Field(max_length=LABEL_VALUE_LIMIT)]
"""A label value of a spec."""
QUANTITY_LIMIT = 64
"""Characters at most of a quantity (``64Gi``) or a time stamp."""

_RULE = re.compile(r"^self\.all\(k, size\(k\) <= (\d+)\)$")

# (definition's short name, property) → the bounds of that property (for a list: of the list; of its items'
# strings under "items"; for a map: maxProperties, its values under "values").
KUBE_BOUNDS: dict[tuple[str, str], dict[str, Any]] = {
    # EnvVar: name and value, or name and valueFrom
    ("EnvVar", "name"): {"maxLength": 128},
    ("EnvVar", "value"): {"maxLength": ENV_VALUE_LIMIT},
    ("EnvVar", ""): {"maxProperties": 2},
    ("EnvVarSource", ""): {"maxProperties": 1},
    ("ObjectFieldSelector", "apiVersion"): {"maxLength": LABEL_VALUE_LIMIT},
    ("ResourceFieldSelector", "containerName"): {"maxLength": LABEL_VALUE_LIMIT},
    ("ResourceFieldSelector", "resource"): {"maxLength": LABEL_VALUE_LIMIT},
    # a volume: its name and one source; a projection: one source
    ("Volume", "name"): {"maxLength": LABEL_VALUE_LIMIT},
    ("Volume", ""): {"maxProperties": 2},
    ("VolumeProjection", ""): {"maxProperties": 1},
    ("ProjectedVolumeSource", "sources"): {"maxItems": 2},
    ("SecretVolumeSource", "items"): {"maxItems": 8},
    ("ConfigMapVolumeSource", "items"): {"maxItems": 8},
    ("SecretProjection", "items"): {"maxItems": 4},
    ("ConfigMapProjection", "items"): {"maxItems": 4},
    ("DownwardAPIVolumeSource", "items"): {"maxItems": 4},
    ("DownwardAPIProjection", "items"): {"maxItems": 4},
    ("CSIVolumeSource", "volumeAttributes"): {"maxProperties": 4, "values": {"maxLength": NAME_LIMIT}},
    ("FlexVolumeSource", "options"): {"maxProperties": 4, "values": {"maxLength": NAME_LIMIT}},
    ("HostPathVolumeSource", "path"): {"maxLength": PATH_LIMIT},
    ("NFSVolumeSource", "path"): {"maxLength": PATH_LIMIT},
    ("ObjectMeta", "labels"): {"maxProperties": 2, "values": {"maxLength": LABEL_VALUE_LIMIT}},
    ("ObjectMeta", "annotations"): {"maxProperties": 2, "values": {"maxLength": NAME_LIMIT}},
    ("PodCertificateProjection", "userAnnotations"): {"maxProperties": 2, "values": {"maxLength": NAME_LIMIT}},
    ("PersistentVolumeClaimSpec", "accessModes"): {"maxItems": 4, "items": {"maxLength": 32}},
    ("VolumeResourceRequirements", "limits"): {"maxProperties": 1},
    ("VolumeResourceRequirements", "requests"): {"maxProperties": 1},
    ("CephFSVolumeSource", "monitors"): {"maxItems": 8},
    ("RBDVolumeSource", "monitors"): {"maxItems": 8},
    ("ISCSIVolumeSource", "portals"): {"maxItems": 8},
    ("FCVolumeSource", "targetWWNs"): {"maxItems": 8},
    ("FCVolumeSource", "wwids"): {"maxItems": 8},
    ("VolumeMount", "mountPath"): {"maxLength": PATH_LIMIT},
    ("VolumeMount", "name"): {"maxLength": LABEL_VALUE_LIMIT},
    ("VolumeMount", "mountPropagation"): {"maxLength": 32},
    ("VolumeMount", "recursiveReadOnly"): {"maxLength": 32},
    ("Toleration", "key"): {"maxLength": MAP_KEY_LIMIT},
    ("Toleration", "value"): {"maxLength": LABEL_VALUE_LIMIT},
    ("Toleration", "operator"): {"maxLength": 16},
    ("Toleration", "effect"): {"maxLength": 16},
    ("Capabilities", "add"): {"maxItems": 32, "items": {"maxLength": 32}},
    ("Capabilities", "drop"): {"maxItems": 32, "items": {"maxLength": 32}},
    # affinity: a few terms of a few expressions, as a GPU placement needs (GPU product, zone, spreading)
    ("NodeSelector", "nodeSelectorTerms"): {"maxItems": 2},
    ("NodeSelectorTerm", "matchExpressions"): {"maxItems": 4},
    ("NodeSelectorTerm", "matchFields"): {"maxItems": 1},
    ("NodeSelectorRequirement", "values"): {"maxItems": 8, "items": {"maxLength": LABEL_VALUE_LIMIT}},
    ("NodeSelectorRequirement", "key"): {"maxLength": MAP_KEY_LIMIT},
    ("NodeSelectorRequirement", "operator"): {"maxLength": 16},
    ("NodeAffinity", "preferredDuringSchedulingIgnoredDuringExecution"): {"maxItems": 2},
    ("PodAffinity", "requiredDuringSchedulingIgnoredDuringExecution"): {"maxItems": 1},
    ("PodAffinity", "preferredDuringSchedulingIgnoredDuringExecution"): {"maxItems": 1},
    ("PodAntiAffinity", "requiredDuringSchedulingIgnoredDuringExecution"): {"maxItems": 1},
    ("PodAntiAffinity", "preferredDuringSchedulingIgnoredDuringExecution"): {"maxItems": 1},
    ("PodAffinityTerm", "namespaces"): {"maxItems": 4, "items": {"maxLength": LABEL_VALUE_LIMIT}},
    ("PodAffinityTerm", "matchLabelKeys"): {"maxItems": 2, "items": {"maxLength": MAP_KEY_LIMIT}},
    ("PodAffinityTerm", "mismatchLabelKeys"): {"maxItems": 2, "items": {"maxLength": MAP_KEY_LIMIT}},
    ("PodAffinityTerm", "topologyKey"): {"maxLength": MAP_KEY_LIMIT},
    ("LabelSelector", "matchLabels"): {"maxProperties": 4, "values": {"maxLength": LABEL_VALUE_LIMIT}},
    ("LabelSelector", "matchExpressions"): {"maxItems": 2},
    ("LabelSelectorRequirement", "values"): {"maxItems": 4, "items": {"maxLength": LABEL_VALUE_LIMIT}},
    ("LabelSelectorRequirement", "key"): {"maxLength": MAP_KEY_LIMIT},
    ("LabelSelectorRequirement", "operator"): {"maxLength": 16},
}
"""The bounds of the Kubernetes types passed through, by (definition, property); ``""`` is the object itself.
Every other string has :data:`DEFAULT_STRING`, every other list :data:`DEFAULT_ITEMS` items of
:data:`DEFAULT_STRING` strings, every other map :data:`DEFAULT_PROPERTIES` entries."""
DEFAULT_STRING = NAME_LIMIT
DEFAULT_ITEMS = 8
DEFAULT_PROPERTIES = 8
POD_META_KEEP = ("labels", "annotations")
"""The fields of an ``ObjectMeta`` a pod's type may hold (an ephemeral volume's claim template: Kubernetes refuses
every other field there), so no server-set field (``managedFields``: free-form) is unbounded."""


def map_key_rule(limit: int = MAP_KEY_LIMIT) -> dict[str, str]:
    """The CEL rule (an ``x-kubernetes-validations`` entry) bounding a map's keys to ``limit`` characters."""
    return {"rule": f"self.all(k, size(k) <= {limit})",
            "message": f"a key of this map is longer than {limit} characters (a qualified name at most)"}


def key_limit(node: Mapping[str, Any]) -> int | None:
    """The key bound of map schema ``node``: from :func:`map_key_rule` or ``propertyNames.maxLength``; None: none."""
    names = node.get("propertyNames")
    if isinstance(names, Mapping) and "maxLength" in names:
        return int(names["maxLength"])
    for rule in node.get("x-kubernetes-validations", ()):
        m = _RULE.match(rule.get("rule", ""))
        if m:
            return int(m.group(1))
    return None


def _short(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _types(node: Mapping[str, Any]) -> set[str]:
    kind = node.get("type")
    return set(kind) if isinstance(kind, list) else {kind} if isinstance(kind, str) else set()


def _bound_value(node: dict[str, Any], extra: Mapping[str, Any]) -> None:
    """Bound one property schema (a string, a list or a map; ``$ref`` nodes are bounded at their definition)."""
    kinds = _types(node)
    if "string" in kinds or "oneOf" in node:
        node.setdefault("maxLength", extra.get("maxLength", DEFAULT_STRING))
    if "array" in kinds:
        node.setdefault("maxItems", extra.get("maxItems", DEFAULT_ITEMS))
        items = node.get("items")
        if isinstance(items, dict) and "$ref" not in items:
            _bound_value(items, extra.get("items", {}))
    if "object" in kinds and isinstance(node.get("additionalProperties"), dict):
        node.setdefault("maxProperties", extra.get("maxProperties", DEFAULT_PROPERTIES))
        node.setdefault("propertyNames", {"maxLength": MAP_KEY_LIMIT})
        values = node["additionalProperties"]
        if "$ref" not in values:
            _bound_value(values, extra.get("values", {}))


def bounded_definitions(defs: Mapping[str, Any]) -> dict[str, Any]:
    """A copy of Kubernetes' definitions ``defs`` (``$defs`` by full name) with :data:`KUBE_BOUNDS` and the
    defaults applied to every string, list and map property, ``ObjectMeta`` cut to :data:`POD_META_KEEP`."""
    out: dict[str, Any] = copy.deepcopy(dict(defs))
    for name, node in out.items():
        short = _short(name)
        if "oneOf" in node or _types(node) == {"string"}:  # Quantity, Time
            node.setdefault("maxLength", QUANTITY_LIMIT)
        if short == "ObjectMeta":
            node["properties"] = {k: v for k, v in node["properties"].items() if k in POD_META_KEEP}
        if "maxProperties" in KUBE_BOUNDS.get((short, ""), {}):
            node["maxProperties"] = KUBE_BOUNDS[(short, "")]["maxProperties"]
        for prop, sub in (node.get("properties") or {}).items():
            if "$ref" not in sub:
                _bound_value(sub, KUBE_BOUNDS.get((short, prop), {}))
    return out


def _size_number(node: Mapping[str, Any]) -> int:
    if "maximum" in node and "minimum" in node:
        return max(len(json.dumps(node["maximum"])), len(json.dumps(node["minimum"])))
    return 24  # int64 or a double, as JSON


def worst_case_bytes(node: Mapping[str, Any], path: str = "") -> int:
    """Bytes of the largest compact JSON value structural schema ``node`` admits: every string at ``maxLength``
    (one byte per character), every list at ``maxItems``, every map at ``maxProperties`` entries with keys of
    :func:`key_limit`, an object with ``maxProperties`` at its required properties and its largest others. Raises
    ``ValueError`` naming the path of a node without a bound."""
    if "enum" in node:
        return max(len(json.dumps(v)) for v in node["enum"])
    kind = node.get("type")
    if node.get("x-kubernetes-int-or-string"):
        if "maxLength" not in node:
            raise ValueError(f"{path or '.'}: an int-or-string without maxLength")
        return max(int(node["maxLength"]) + 2, 20)
    if kind == "string":
        if "maxLength" not in node:
            raise ValueError(f"{path or '.'}: a string without maxLength")
        return int(node["maxLength"]) + 2
    if kind in ("integer", "number"):
        return _size_number(node)
    if kind == "boolean":
        return 5
    if kind == "array":
        if "maxItems" not in node:
            raise ValueError(f"{path or '.'}: a list without maxItems")
        n = int(node["maxItems"])
        return 2 + n * (worst_case_bytes(node["items"], path + "[]") + 1)
    if kind == "object":
        total = 2
        props = node.get("properties") or {}
        sizes = {k: len(k) + 3 + worst_case_bytes(v, f"{path}.{k}") + 1 for k, v in props.items()}
        required = [k for k in node.get("required", ()) if k in sizes]
        room = int(node.get("maxProperties", len(sizes))) - len(required)
        others = sorted((v for k, v in sizes.items() if k not in required), reverse=True)
        total += sum(sizes[k] for k in required) + sum(others[:max(room, 0)])
        if isinstance(node.get("additionalProperties"), Mapping):
            keys = key_limit(node)
            if "maxProperties" not in node or keys is None:
                raise ValueError(f"{path or '.'}: a map without maxProperties or a key bound")
            value = worst_case_bytes(node["additionalProperties"], path + "{}")
            total += int(node["maxProperties"]) * (keys + 3 + value + 1)
        elif not props and node.get("x-kubernetes-preserve-unknown-fields"):
            raise ValueError(f"{path or '.'}: a free-form object")
        return total
    raise ValueError(f"{path or '.'}: no type")


def unbounded(node: Mapping[str, Any], path: str = "") -> Iterator[str]:
    """The paths under structural schema ``node`` of every string without ``maxLength`` (nor ``enum``), list
    without ``maxItems``, map without ``maxProperties`` or a key bound, and free-form object."""
    kind = node.get("type")
    if (kind == "string" or node.get("x-kubernetes-int-or-string")) and "maxLength" not in node \
            and "enum" not in node:
        yield f"{path}: a string without maxLength"
    if kind == "array":
        if "maxItems" not in node:
            yield f"{path}: a list without maxItems"
        yield from unbounded(node["items"], path + "[]")
    if kind == "object":
        for key, sub in (node.get("properties") or {}).items():
            yield from unbounded(sub, f"{path}.{key}")
        if isinstance(node.get("additionalProperties"), Mapping):
            if "maxProperties" not in node or key_limit(node) is None:
                yield f"{path}: a map without maxProperties or a key bound"
            yield from unbounded(node["additionalProperties"], path + "{}")
        elif not node.get("properties") and node.get("x-kubernetes-preserve-unknown-fields"):
            yield f"{path}: a free-form object"
