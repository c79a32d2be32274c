"""Convert CustomResourceDefinitions to the JSON schemas kubeconform reads, offline.

    python scripts/crd_to_jsonschema.py OUT_DIR CRD.yaml [CRD.yaml ...]

writes ``OUT_DIR/<group>/<kind>_<version>.json`` (lower-case kind: kubeconform's
``-schema-location 'OUT_DIR/{{ .Group }}/{{ .ResourceKind }}_{{ .ResourceAPIVersion }}.json'``) for every served
version of every CRD in the files (multi-document YAML allowed).

The conversion is openapi2jsonschema's (kubeconform's ``scripts/openapi2jsonschema.py``), strict: an object schema
with ``properties`` and neither ``additionalProperties`` nor ``x-kubernetes-preserve-unknown-fields`` gets
``additionalProperties: false``; ``x-kubernetes-int-or-string`` becomes ``string`` or ``integer``; ``nullable``
adds ``null``; the Kubernetes-only keywords (``x-kubernetes-*``, CEL rules: the API server's own checks) are
dropped. ``apiVersion``, ``kind`` and ``metadata`` are allowed at the top when a CRD's schema omits them. No
``$schema``: OpenAPI v3.0 keeps draft 4's meaning of keywords (a boolean ``exclusiveMinimum``), kubeconform's default.

Exit status 1 with a message when a file holds no CRD or a CRD version has no ``openAPIV3Schema``.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

TOP_LEVEL = {"apiVersion": {"type": "string"}, "kind": {"type": "string"}, "metadata": {"type": "object"}}


MAPS_OF_SCHEMAS = ("properties", "patternProperties", "definitions")
LISTS_OF_SCHEMAS = ("allOf", "anyOf", "oneOf")
SCHEMAS = ("not", "additionalProperties", "items")


def convert(node: dict[str, Any]) -> dict[str, Any]:
    """The strict JSON-schema form of one OpenAPI v3 schema node (recursive into sub-schemas only; pure)."""
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key.startswith("x-kubernetes-") or key == "nullable":
            continue
        if key in MAPS_OF_SCHEMAS:
            out[key] = {name: convert(sub) for name, sub in value.items()}
        elif key in LISTS_OF_SCHEMAS or (key == "items" and isinstance(value, list)):
            out[key] = [convert(sub) for sub in value]
        elif key in SCHEMAS and isinstance(value, dict):
            out[key] = convert(value)
        else:
            out[key] = value  # enum, default, format, ...: values, not schemas
    if node.get("x-kubernetes-int-or-string"):
        out.pop("type", None)
        out["oneOf"] = [{"type": "string"}, {"type": "integer"}]
    if node.get("nullable") and "type" in out:
        out["type"] = [out["type"], "null"] if isinstance(out["type"], str) else [*out["type"], "null"]
    preserve = node.get("x-kubernetes-preserve-unknown-fields")
    if "properties" in node and "additionalProperties" not in node and not preserve:
        out["additionalProperties"] = False
    return out


def schemas(crd: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """``{"<group>/<kind>_<version>.json": schema}`` for each served version of ``crd``."""
    spec = crd["spec"]
    kind, group = spec["names"]["kind"].lower(), spec["group"]
    out = {}
    for version in spec["versions"]:
        if not version.get("served", True):
            continue
        raw = (version.get("schema") or {}).get("openAPIV3Schema")
        if raw is None:
            raise SystemExit(f"crd_to_jsonschema: {crd['metadata']['name']} {version['name']} has no openAPIV3Schema")
        schema = convert(raw)
        props = schema.setdefault("properties", {})
        for key, sub in TOP_LEVEL.items():
            props.setdefault(key, sub)
        out[f"{group}/{kind}_{version['name']}.json"] = schema
    return out


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.split("\n\n")[1], file=sys.stderr)
        return 2
    out_dir = Path(argv[0])
    for path in map(Path, argv[1:]):
        crds = [d for d in yaml.safe_load_all(path.read_text()) if d and d.get("kind") == "CustomResourceDefinition"]
        if not crds:
            print(f"crd_to_jsonschema: no CustomResourceDefinition in {path}", file=sys.stderr)
            return 1
        for crd in crds:
            for name, schema in schemas(crd).items():
                target = out_dir / name
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(json.dumps(schema, indent=1, sort_keys=True) + "\n")
                print(target)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
