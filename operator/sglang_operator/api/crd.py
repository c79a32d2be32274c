"""Generate the CustomResourceDefinitions (SGLangServer, SGLangTuning) from the pydantic models.

pydantic's JSON Schema (draft 2020-12, ``$defs``/``$ref``, ``anyOf`` with null for Optionals) is turned into
a Kubernetes *structural* OpenAPI v3 schema (``apiextensions.k8s.io/v1``): ``$ref`` inlined, null branches
dropped (an unset field is simply absent), titles dropped, numeric exclusive bounds in OpenAPI 3.0 form,
free-form objects marked ``x-kubernetes-preserve-unknown-fields``, attribute docstrings kept as descriptions
(``kubectl explain sglangserver.spec.speculative``), defaults and enums kept, and the models' CEL rules
(:class:`sglang_operator.api.base.CelRule`) emitted as ``x-kubernetes-validations``.

``sglang-operator crd --write crds/`` writes the committed copies (:data:`CRD_FILES`); a test fails when one is
stale.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import yaml

from sglang_operator.api import tuning
from sglang_operator.api.base import GROUP, KIND, PLURAL, SHORT_NAMES, SINGULAR, VERSION
from sglang_operator.api.bounds import map_key_rule
from sglang_operator.api.server import SGLangServer
from sglang_operator.api.spec import SGLangServerSpec
from sglang_operator.api.status import SGLangServerStatus
from sglang_operator.api.tuning_spec import SGLangTuningSpec
from sglang_operator.api.tuning_status import SGLangTuningStatus

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
        elif key == "propertyNames":  # a map's key bound: a CRD holds no propertyNames, CEL checks it
            out.setdefault("x-kubernetes-validations", []).append(map_key_rule(value["maxLength"]))
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


PRINTER_COLUMNS = [  # priority 0: the default `kubectl get sgls` (8 and NAME); 1: `-o wide` too
    _col("Ready", '.status.conditions[?(@.type=="Ready")].status', "string",
         "Ready condition: every desired replica is Ready at the current revision"),
    _col("Available", '.status.conditions[?(@.type=="Available")].status', "string",
         "Available condition: at least one replica serves", priority=1),
    _col("Replicas", ".status.summary.ready", "string",
         "Ready replicas (of Desired); during a canary stable+canary Ready pods, e.g. 3+1"),
    _col("Desired", ".spec.replicas", "integer", "Desired replicas", priority=1),
    _col("SpecValid", '.status.conditions[?(@.type=="SpecValid")].status', "string",
         "SpecValid condition: False when the latest spec was refused (the last valid revision keeps running)",
         priority=1),
    _col("Model", ".spec.model.path", "string", "Model path the spec asks for", priority=1),
    _col("TP", ".spec.parallelism.tensor", "integer", "Tensor parallel size the spec asks for", priority=1),
    _col("Algorithm", ".status.effective.algorithm", "string",
         "Speculative algorithm the serving revision runs, as SGLang reports it (NEXTN shows as EAGLE)", priority=1),
    _col("Steps", ".status.effective.numSteps", "integer", "Speculative num steps the serving revision runs",
         priority=1),
    _col("DraftTokens", ".status.effective.numDraftTokens", "integer",
         "Speculative num draft tokens the serving revision runs", priority=1),
    _col("AcceptLen", ".status.acceptLength", "number", "Acceptance length of the serving revision"),
    _col("Tok/s", ".status.tokensPerSecond", "number", "Decode speed of the serving revision, tok/s"),
    _col("Revision", ".status.revision", "string", "Serving revision (after a rollback: the stable one)"),
    _col("Analysis", ".status.summary.analysis", "string",
         "Rollback analysis of the serving revision: WarmingUp, Verifying, Stable, RollingBack, RolledBack, Paused; "
         "Canary while a canary runs"),
    _col("Reason", ".status.summary.reason", "string",
         "Why the analysis is in its phase: e.g. Paused for MaxRollbacksReached, NoStableRevision, NotRolledBack, "
         "MeasurementErrors, NotSGLang or SimulatedAcceptance (kubectl sglang retry resumes it), RollingBack for "
         "CrashLoop, Regressed, ProgressDeadlineExceeded, Stable for CanaryRegressed or CanaryAborted (the spec's "
         "revision was removed as a canary); during a canary its step: Stepping 1/2, Pending 1/2, Held 1/2, "
         "Promoting, Removing Regressed"),
    _col("Stable", ".status.stableRevision", "string", "Stable revision (what a rollback returns to)", priority=1),
    _col("Canary", ".status.canary.split", "string",
         "Pods wanted during a canary, stable+canary (e.g. 3+1); empty when no canary runs", priority=1),
    _col("Phase", ".status.phase", "string", "Phase of the pods", priority=1),
    _col("Capacity", ".status.autoscaling.capacity.requestsPerReplica", "number",
         "Running requests per replica the autoscaler aims at, the serving revision's measured capacity (metric "
         "measuredCapacity); empty until a finished SGLangTuning measured its settings", priority=1),
    _col("Age", ".metadata.creationTimestamp", "date", "Age"),
]


TUNING_PRINTER_COLUMNS = [
    _col("Server", ".spec.serverRef.name", "string", "SGLangServer being tuned"),
    _col("Mode", ".spec.mode", "string", "Shadow (trials on other GPUs) or InPlace (trials replace the server's pods)",
         priority=1),
    _col("Phase", ".status.phase", "string", "Pending, Running, Succeeded, Failed or Cancelled"),
    _col("Trials", ".status.progress", "string", "Trials done / trials planned"),
    _col("Best", ".status.best.summary", "string", "Best settings so far: steps/topk/draft tokens"),
    _col("Objective", ".status.best.objectiveSummary", "string",
         "Objective of the best trial with its unit: tok/s, or with several weighted workload levels the weighted "
         "ratio to the no-speculation control trial (1.43× control)"),
    _col("Speedup", ".status.best.speedup", "number",
         "Best trial's output tok/s ÷ the no-speculation control trial's (at the objective's level), two decimals"),
    _col("Age", ".metadata.creationTimestamp", "date", "Age"),
]


def _crd(kind: str, plural: str, singular: str, short_names: tuple[str, ...], description: str,
         spec: dict[str, Any], status: dict[str, Any], root_rules: list[dict[str, str]],
         subresources: dict[str, Any], columns: list[dict[str, Any]]) -> dict[str, Any]:
    """One namespaced ``apiextensions.k8s.io/v1`` CustomResourceDefinition of the project's group and version."""
    root = {
        "type": "object",
        "description": description,
        "required": ["spec"],
        "properties": {
            "apiVersion": {"type": "string"},
            "kind": {"type": "string"},
            "metadata": {"type": "object"},
            "spec": spec,
            "status": status,
        },
        "x-kubernetes-validations": root_rules,
    }
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {
            "name": f"{plural}.{GROUP}",
            "labels": {"app.kubernetes.io/name": "sglang-operator", "app.kubernetes.io/part-of": "sglang-operator"},
        },
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {
                "kind": kind,
                "listKind": f"{kind}List",
                "plural": plural,
                "singular": singular,
                "shortNames": list(short_names),
                "categories": ["sglang"],
            },
            "versions": [
                {
                    "name": VERSION,
                    "served": True,
                    "storage": True,
                    "schema": {"openAPIV3Schema": root},
                    "subresources": subresources,
                    "additionalPrinterColumns": columns,
                }
            ],
        },
    }


def crd() -> dict[str, Any]:
    """The ``apiextensions.k8s.io/v1`` CustomResourceDefinition of SGLangServer as a dict."""
    return _crd(KIND, PLURAL, SINGULAR, SHORT_NAMES,
                "SGLangServer runs one SGLang inference server (Deployment + Service) with typed "
                "speculative-decoding settings rendered in the target SGLang release's dialect.",
                model_schema(SGLangServerSpec), model_schema(SGLangServerStatus),
                [r.to_schema() for r in SGLangServer.cel_rules],
                {
                    "status": {},
                    "scale": {
                        "specReplicasPath": ".spec.replicas",
                        "statusReplicasPath": ".status.replicas",
                        "labelSelectorPath": ".status.selector",
                    },
                },
                PRINTER_COLUMNS)


def tuning_crd() -> dict[str, Any]:
    """The CustomResourceDefinition of SGLangTuning (:mod:`sglang_operator.api.tuning`) as a dict."""
    return _crd(tuning.KIND, tuning.PLURAL, tuning.SINGULAR, tuning.SHORT_NAMES,
                "SGLangTuning searches the speculative-decoding settings of one SGLangServer on its own model, GPUs "
                "and workload, one trial per candidate point, and recommends the best (it never edits the server's "
                "spec).",
                model_schema(SGLangTuningSpec), model_schema(SGLangTuningStatus),
                [r.to_schema() for r in tuning.SGLangTuning.cel_rules], {"status": {}}, TUNING_PRINTER_COLUMNS)


_HEADER = "# Generated by `sglang-operator crd` from sglang_operator/api; do not edit.\n"


def _yaml(doc: dict[str, Any]) -> str:
    return _HEADER + yaml.safe_dump(doc, sort_keys=False, width=120, allow_unicode=True)


def crd_yaml() -> str:
    """The SGLangServer CRD as YAML text, as committed in ``crds/sglangservers.yaml``."""
    return _yaml(crd())


def tuning_crd_yaml() -> str:
    """The SGLangTuning CRD as YAML text, as committed in ``crds/sglangtunings.yaml``."""
    return _yaml(tuning_crd())


CRD_FILES: dict[str, Callable[[], str]] = {
    f"{PLURAL}.yaml": crd_yaml,
    f"{tuning.PLURAL}.yaml": tuning_crd_yaml,
}
"""File name in ``crds/`` (and the chart's ``files/crds/``) → its text; ``sglang-operator crd --write crds/``."""
KINDS: dict[str, Callable[[], str]] = {KIND: crd_yaml, tuning.KIND: tuning_crd_yaml}
"""Kind → its CRD's YAML text (``sglang-operator crd KIND``)."""


def all_crds_yaml() -> str:
    """Every CRD of the project, as one multi-document YAML stream (``sglang-operator crd``)."""
    return "---\n".join(text() for text in CRD_FILES.values())
