"""The one apply path: every writer of an SGLangServer's children goes through :func:`apply_placement` — the
reconcile handler (create, update, resume), the analysis' ``Apply`` (a rollback, a retry, a lost update
converged), the late LeaderWorkerSet apply and child repair. It runs in the server's worker (the caller holds
:class:`~sglang_operator.control.memory.ServerMemory`'s lock).

A *placement* says which revision runs on how many replicas in which role. Today a server has one placement, the
``serving`` one; canary and tuning trials add roles (and workloads), not paths. One apply: the drain before a
Recreate (optional), the children (Deployment or LeaderWorkerSet, Service, PodMonitor), the ControllerRevision
ledger; returns the status keys the caller writes in its one status patch (:func:`sglang_operator.decisions.status.
applied`). Raises what :func:`~sglang_operator.control.children.apply_children` raises (nothing recorded then).
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from sglang_operator import builders
from sglang_operator.api.server import SGLangServer, SpecError, parse, parse_status
from sglang_operator.control import ledger
from sglang_operator.control.children import apply_children
from sglang_operator.control.drain import drain_old_pods
from sglang_operator.control.memory import ServerMemory
from sglang_operator.decisions import status as st
from sglang_operator.decisions.conditions import merge

Role = Literal["serving"]
"""What a placement is for: ``serving`` (the revision that serves the server's replicas). The canary and tuning
issues add roles."""


@dataclass(frozen=True)
class Placement:
    """``rendered`` (from the camelCase ``spec`` it was rendered from: the object's own or a ledger entry's) runs in
    ``role``; ``server``: that spec parsed (summary, drain strategy, history limit)."""

    rendered: builders.Rendered
    spec: Mapping[str, Any]
    server: SGLangServer
    role: Role = "serving"

    @property
    def revision(self) -> str:
        return self.rendered.revision


def placement(body: Mapping[str, Any], rendered: builders.Rendered, spec: Mapping[str, Any] | None = None,
              role: Role = "serving") -> Placement:
    """A placement of ``rendered`` for SGLangServer ``body``, from ``spec`` (default: the object's). Raises
    ``SpecError`` when ``spec`` does not parse."""
    spec = dict(body.get("spec") or {}) if spec is None else dict(spec)
    server = parse({**body, "spec": spec, "status": None})
    return Placement(rendered, spec, server, role)


async def apply_placement(
    body: Mapping[str, Any], placements: Sequence[Placement], now: dt.datetime, memory: ServerMemory | None = None,
    *, drain: bool = True, write_children: bool = True, warnings: Sequence[str] = (), keep_spec_valid: bool = False,
    history_limit: int | None = None,
) -> dict[str, Any]:
    """Apply ``placements`` (today exactly one, role ``serving``) for SGLangServer ``body`` (as stored: its status
    says what runs): drain the old pods first when ``drain`` and the strategy is Recreate, server-side apply the
    children unless ``write_children`` is False (a resume that found them up to date), record the ledger entry.

    Returns the status keys to write (``revision``, ``command``, the ledger, ``SpecValid`` from ``warnings``, phase
    Progressing); ``keep_spec_valid``: the stored ``SpecValid`` is kept instead (an analysis' apply speaks of a
    revision, not of the spec); ``history_limit``: the ledger's length (default: the placement's spec's).
    Raises :class:`~sglang_operator.control.children.ChildApplyError`,
    :class:`~sglang_operator.control.children.LeaderWorkerSetMissing`."""
    if len(placements) != 1 or placements[0].role != "serving":
        raise ValueError(f"one serving placement is applied today, not {[p.role for p in placements]}")
    p = placements[0]
    status = body.get("status") or {}
    generation = int((body.get("metadata") or {}).get("generation") or 0)
    if drain:
        await drain_old_pods(body, p.server.spec, p.revision, memory)
    if write_children:
        await apply_children(p.rendered, body)
    try:
        summary = builders.summary(p.server, p.rendered)
    except SpecError:
        summary = {}
    entry = st.ledger_entry(p.revision, generation, p.rendered.command.command_line, summary, p.spec, now)
    history = history_limit if history_limit is not None else p.server.spec.rollback.history_limit
    new = st.applied(status, p.rendered.status, list(warnings), entry, generation, history, now)
    if keep_spec_valid:
        keep = [c for c in new["conditions"] if c["type"] != st.SPEC_VALID]
        valid = parse_status(body).condition(st.SPEC_VALID)
        new["conditions"] = merge([valid.dump()] if valid is not None else [], keep)
    await ledger.record_applied(body, p.rendered, p.spec, history)
    return new
