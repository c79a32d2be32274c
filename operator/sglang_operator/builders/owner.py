"""Owner references: children are garbage-collected with their SGLangServer."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def owner_reference(obj: Mapping[str, Any]) -> dict[str, Any]:
    """The ``ownerReferences`` entry making ``obj`` (a Kubernetes object dict) the controller of a child.

    ``obj`` needs ``apiVersion``, ``kind``, ``metadata.name`` and ``metadata.uid``; raises KeyError otherwise.
    Shape: ``{apiVersion, kind, name, uid, controller: true, blockOwnerDeletion: true}`` as ``kopf.adopt`` sets.
    """
    meta = obj["metadata"]
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def adopt(child: dict[str, Any], owner: Mapping[str, Any]) -> dict[str, Any]:
    """``child`` with ``owner`` as its controller owner and in the owner's namespace (mutates and returns it)."""
    meta = child.setdefault("metadata", {})
    meta["namespace"] = owner["metadata"].get("namespace", meta.get("namespace"))
    meta["ownerReferences"] = [owner_reference(owner)]
    return child
