"""Read the local API server's audit log (``Cluster.audit_log``: JSON lines, writes only, see
``e2e.cluster.launcher.AUDIT_POLICY``) to count who wrote what.

Each line is an ``audit.k8s.io/v1`` Event at Metadata level (stage ResponseComplete); fields used: ``verb``,
``user.username``, ``objectRef`` (resource, subresource, namespace, name), ``responseStatus.code``.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True)
class Write:
    """One write request the API server answered."""

    verb: str
    user: str
    resource: str  # "deployments", "sglangservers/status", ...
    namespace: str
    name: str
    code: int
    seconds: float = 0.0  # requestReceivedTimestamp → stageTimestamp: the API server's own time (a watch: to start)
    at: float = 0.0  # requestReceivedTimestamp, seconds since the epoch
    resource_version: str | None = None  # the request's metadata.resourceVersion (logged at Request level only)

    def __str__(self) -> str:
        return f"{self.user} {self.verb} {self.resource} {self.namespace}/{self.name} -> {self.code}"


WRITE_VERBS = frozenset({"create", "update", "patch", "delete", "deletecollection"})


def requests(audit_log: Path, user: str | None = None, offset: int = 0) -> list[Write]:
    """Every request logged after byte ``offset`` (see :func:`size`), once each (a watch is logged when it starts
    and again when it ends: counted once, by ``auditID``), optionally only those of ``user``. Reads are logged only
    for ServiceAccount users of a ``Cluster(audit_reads=True)``."""
    out = []
    seen: set[str] = set()
    with audit_log.open("rb") as f:
        f.seek(offset)
        for line in f:
            if not line.strip():
                continue
            ev = json.loads(line)
            if ev.get("stage") not in ("ResponseStarted", "ResponseComplete") or ev.get("auditID") in seen:
                continue
            seen.add(ev.get("auditID"))
            ref = ev.get("objectRef") or {}
            resource = ref.get("resource", "") + (f"/{ref['subresource']}" if ref.get("subresource") else "")
            request = ev.get("requestObject") if isinstance(ev.get("requestObject"), dict) else {}
            w = Write(ev["verb"], ev["user"]["username"], resource, ref.get("namespace", ""), ref.get("name", ""),
                      int((ev.get("responseStatus") or {}).get("code", 0)), _seconds(ev), _at(ev),
                      (request.get("metadata") or {}).get("resourceVersion"))
            if user is None or w.user == user:
                out.append(w)
    return out


def _at(ev: dict[str, Any]) -> float:
    try:
        return dt.datetime.fromisoformat(ev["requestReceivedTimestamp"]).timestamp()
    except (KeyError, ValueError):
        return 0.0


def _seconds(ev: dict[str, Any]) -> float:
    try:
        return (dt.datetime.fromisoformat(ev["stageTimestamp"])
                - dt.datetime.fromisoformat(ev["requestReceivedTimestamp"])).total_seconds()
    except (KeyError, ValueError):
        return 0.0


def writes(audit_log: Path, user: str | None = None, offset: int = 0) -> list[Write]:
    """The writes (:data:`WRITE_VERBS`) logged after byte ``offset`` (see :func:`size`), optionally only those of
    ``user``."""
    return [w for w in requests(audit_log, user, offset) if w.verb in WRITE_VERBS]


def size(audit_log: Path) -> int:
    """The log's current size in bytes: an offset for :func:`writes` that skips everything before now."""
    return audit_log.stat().st_size if audit_log.exists() else 0
