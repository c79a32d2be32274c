"""Generate the SGLangServer CustomResourceDefinition from the pydantic models.

pydantic's JSON Schema (draft 2020-12, ``$defs``/``$ref``, ``anyOf`` with null for Optionals) is turned into
a Kubernetes *structural* OpenAPI v3 schema (``apiextensions.k8s.io/v1``): ``$ref`` inlined, null branches
dropped (an unset field is simply absent), titles dropped, numeric exclusive bounds in OpenAPI 3.0 form,
free-form objects marked ``x-kubernetes-preserve-unknown-fields``, attribute docstrings kept as descriptions
(``kubectl explain sglangserver.spec.speculative``), defaults and enums kept, and the models' CEL rules
(:class:`sglang_operator.api.base.CelRule`) emitted as ``x-kubernetes-validations``.

``sglang-operator crd > crds/sglangservers.yaml`` writes the committed copy; a test fails when it is stale.
"""

from __future__ import annotations

import re
from typing import Any

import yaml

from sglang_operator.api.base import GROUP, KIND, PLURAL, SHORT_NAMES, SINGULAR, VERSION
from sglang_operator.api.server import SGLangServer
from sglang_operator.api.spec import SGLangServerSpec
from sglang_operator.api.status import SGLangServerStatus

_DROP = {"title", "$defs"}


def _describe(text: str) -> str:
    """Docstring → one-paragraph-per-blank-line text, RST ````x```` → ```x```."""
    paragraphs = [" ".join(p.split()) for p in re.split(r"\n\s*\n", text.strip())]
    return "\n\n".join(paragraphs).replace("``", "`")


def _keep_default(node: dict[str, Any], value: Any) -> bool:
    """Keep a default unless it is null or an empty list/map; ``{}`` stays on blocks with properties so the
    API server fills their own defaults (``spec.rollback`` appears complete in ``kubectl get -o yaml``)."""
    if value is None or value == []:
        return False
    return value != {} or "properties" in node


def structural(node: dict[str, Any], defs: dict[str, Any]) -> dict[str, Any]:
    """One pydantic JSON-schema node as a structural OpenAPI v3 node (recursive, ``defs`` = ``$defs``)."""
    node = dict(node)
    if "$ref" in node:
        target = structural(defs[node.pop("$ref").rsplit("/", 1)[-1]], defs)
        node = {**target, **{k: v for k, v in node.items() if k != "description" or v}}
    if "anyOf" in node and not node.get("x-kubernetes-int-or-string"):
        branches = [b for b in node.pop("anyOf") if b != {"type": "null"}]
        if len(branches) != 1:
            raise ValueError(f"cannot make a structural schema of anyOf {branches}")
        inner = structural(branches[0], defs)
        outer = {k: v for k, v in node.items() if not (k == "default" and v is None)}
        node = {**inner, **outer}
    out: dict[str, Any] = {}
    for key, value in node.items():
        if key in _DROP or (key == "default" and not _keep_default(node, value)):
            continue
        if key == "description":
            out[key] = _describe(value)
        elif key == "properties":
            out[key] = {name: structural(sub, defs) for name, sub in value.items()}
        elif key == "items":
            out[key] = structural(value, defs)
        elif key == "additionalProperties":
            if value is True:
                out["x-kubernetes-preserve-unknown-fields"] = True
            elif isinstance(value, dict):
                out[key] = structural(value, defs)
        elif key in ("exclusiveMinimum", "exclusiveMaximum") and not isinstance(value, bool):
            out["minimum" if key == "exclusiveMinimum" else "maximum"] = value
            out[key] = True
        elif key == "const":
            out["enum"] = [value]
        else:
            out[key] = value
    if "enum" in out and "type" not in out:
        out["type"] = "string"
    if out.get("default") == {} and "properties" in out:
        # the API server checks a default against the block's CEL rules without applying the nested defaults
        # first: spell them out (``parallelism: {}`` → ``{tensor: 1, ...}``)
        out["default"] = {k: sub["default"] for k, sub in out["properties"].items() if "default" in sub}
    return out


def model_schema(model: type[Any]) -> dict[str, Any]:
    """Structural schema of a pydantic model (camelCase property names)."""
    raw = model.model_json_schema(by_alias=True, mode="validation")
    return structural(raw, raw.get("$defs", {}))


def _col(name: str, path: str, type_: str, description: str, priority: int = 0) -> dict[str, Any]:
    col: dict[str, Any] = {"name": name, "type": type_, "jsonPath": path, "description": description}
    if priority:
        col["priority"] = priority
    return col


PRINTER_COLUMNS = [
    _col("Ready", '.status.conditions[?(@.type=="Ready")].status', "string",
         "Ready condition: every desired replica is Ready at the current revision"),
    _col("Available", '.status.conditions[?(@.type=="Available")].status', "string",
         "Available condition: at least one replica serves"),
    _col("Replicas", ".status.readyReplicas", "integer", "Ready replicas (of Desired)"),
    _col("Desired", ".spec.replicas", "integer", "Desired replicas"),
    _col("SpecValid", '.status.conditions[?(@.type=="SpecValid")].status', "string",
         "SpecValid condition: False when the latest spec was refused (the last valid revision keeps running)"),
    _col("Model", ".spec.model.path", "string", "Model path the spec asks for", priority=1),
    _col("TP", ".spec.parallelism.tensor", "integer", "Tensor parallel size the spec asks for", priority=1),
    _col("Algorithm", ".status.effective.algorithm", "string",
         "Speculative algorithm the serving revision runs, as SGLang reports it (NEXTN shows as EAGLE)"),
    _col("Steps", ".status.effective.numSteps", "integer", "Speculative num steps the serving revision runs"),
    _col("DraftTokens", ".status.effective.numDraftTokens", "integer",
         "Speculative num draft tokens the serving revision runs"),
    _col("AcceptLen", ".status.acceptLength", "number", "Acceptance length of the serving revision"),
    _col("Tok/s", ".status.tokensPerSecond", "number", "Decode speed of the serving revision, tok/s"),
    _col("Revision", ".status.revision", "string", "Serving revision (after a rollback: the stable one)"),
    _col("Analysis", ".status.analysis.phase", "string",
         "Rollback analysis of the serving revision: WarmingUp, Verifying, Stable, RollingBack, RolledBack, Paused"),
    _col("Reason", ".status.analysis.reason", "string",
         "Why the analysis is in its phase: e.g. Paused for MaxRollbacksReached, NoStableRevision, NotRolledBack or "
         "MeasurementErrors (kubectl sglang retry resumes it), RollingBack for CrashLoop, Regressed, "
         "ProgressDeadlineExceeded"),
    _col("Stable", ".status.stableRevision", "string", "Stable revision (what a rollback returns to)"),
    _col("Canary", ".status.canary.split", "string",
         "Pods wanted during a canary, stable+canary (e.g. 3+1); empty when no canary runs"),
    _col("Phase", ".status.phase", "string", "Phase of the pods"),
    _col("Age", ".metadata.creationTimestamp", "date", "Age"),
]


def crd() -> dict[str, Any]:
    """The ``apiextensions.k8s.io/v1`` CustomResourceDefinition of SGLangServer as a dict."""
    spec = model_schema(SGLangServerSpec)
    status = model_schema(SGLangServerStatus)
    root = {
        "type": "object",
        "description": "SGLangServer runs one SGLang inference server (Deployment + Service) with typed "
        "speculative-decoding settings rendered in the target SGLang release's dialect.",
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
        "x-kubernetes-validations": [r.to_schema() for r in SGLangServer.cel_rules],
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{PLURAL}.{GROUP}",
            "labels": {"app.kubernetes.io/name": "sglang-operator", "app.kubernetes.io/part-of": "sglang-operator"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": KIND,
                "listKind": f"{KIND}List",
                "plural": PLURAL,
                "singular": SINGULAR,
                "shortNames": list(SHORT_NAMES),
                "categories": ["sglang"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": root},
                    "subresources": {
                        "status": {},
                        "scale": {
                            "specReplicasPath": ".spec.replicas",
                            "statusReplicasPath": ".status.replicas",
                            "labelSelectorPath": ".status.selector",
                        },
                    },
                    "additionalPrinterColumns": PRINTER_COLUMNS,
                }
            ],
        },
    }


def crd_yaml() -> str:
    """The CRD as YAML text, as committed in ``crds/sglangservers.yaml``."""
    header = "# Generated by `sglang-operator crd` from sglang_operator/api; do not edit.\n"
    return header + yaml.safe_dump(crd(), sort_keys=False, width=120, allow_unicode=True)
