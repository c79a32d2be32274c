"""Labels, annotations and the revision hash of an SGLangServer's children.

Labels follow the Kubernetes recommended ``app.kubernetes.io/*`` set. The selector uses only the stable
name/instance pair (a Deployment's selector is immutable). The revision is a hash of the rendered pod
template, so only a change of what the pods run (not ``replicas``) gives a new revision and rolls the pods.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from sglang_operator.api.base import GROUP

APP_NAME = "sglang"
MANAGED_BY = "sglang-operator"
NAME_LABEL = "app.kubernetes.io/name"
INSTANCE_LABEL = "app.kubernetes.io/instance"
"""Pod (and child) label naming the SGLangServer."""
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"
COMPONENT_LABEL = "app.kubernetes.io/component"
REVISION_LABEL = f"{GROUP}/revision"
"""Label (pod template, Deployment) and annotation holding the revision hash."""
VERSION_ANNOTATION = f"{GROUP}/sglang-version"
"""Annotation holding the SGLang release the command line was rendered for."""
COMMAND_ANNOTATION = f"{GROUP}/command"
"""Annotation (Deployment) holding the rendered command line."""
FIELD_MANAGER = "sglang-operator"
"""Field manager name for server-side apply."""
REVISION_LENGTH = 10


def selector_labels(name: str) -> dict[str, str]:
    """Labels selecting the pods of SGLangServer ``name`` (Deployment selector, Service selector)."""
    return {
        NAME_LABEL: APP_NAME,
        INSTANCE_LABEL: name,
    }


def common_labels(name: str, sglang_version: str) -> dict[str, str]:
    """Labels put on every child object of SGLangServer ``name``."""
    return {
        **selector_labels(name),
        COMPONENT_LABEL: "server",
        MANAGED_BY_LABEL: MANAGED_BY,
        "app.kubernetes.io/version": sglang_version,
    }


def selector_string(labels: Mapping[str, str]) -> str:
    """A label selector as the string form ``status.selector`` needs (``k=v,k2=v2``, sorted)."""
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def revision_hash(pod_template: Mapping[str, Any]) -> str:
    """First 10 hex digits of the SHA-256 of the pod template's canonical JSON (sorted keys, no spaces).

    The template must not yet hold the revision label itself. Deterministic across processes and runs.
    """
    canonical = json.dumps(pod_template, sort_keys=True, separators=(",", ":"), ensure_ascii=True)
    return hashlib.sha256(canonical.encode()).hexdigest()[:REVISION_LENGTH]
