"""A walk over an OpenAPI v3 schema as the CRDs declare it, shared by the CRD tests of ``tests/api``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any


def schema_nodes(node: Any, path: str = "") -> Iterator[tuple[str, dict[str, Any]]]:
    """Every schema node under ``node`` with its path: ``.spec.x`` a property, ``[]`` a list's items, ``{}`` a map's
    values (``additionalProperties``); the root's path is ``path`` (``""``)."""
    if isinstance(node, dict):
        yield path, node
        for key, sub in node.get("properties", {}).items():
            yield from schema_nodes(sub, f"{path}.{key}")
        if "items" in node:
            yield from schema_nodes(node["items"], f"{path}[]")
        if isinstance(node.get("additionalProperties"), dict):
            yield from schema_nodes(node["additionalProperties"], f"{path}{{}}")
