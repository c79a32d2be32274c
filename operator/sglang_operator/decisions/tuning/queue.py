"""PURE: which SGLangTunings may run now — the tuning queue of the whole operator.

Every tuning that is active (not ended, not being deleted) is a candidate (:class:`Candidate`: the server it names
and what it asks, :class:`~sglang_operator.decisions.tuning.inplace.TuningRequest`, from the watched index). Then:

- a tuning whose SGLangServer does not exist waits (reason :data:`SERVER_NOT_FOUND`) and costs nothing: no task, no
  request, one status write when it starts waiting;
- at most ONE tuning runs per server: a tuning that has begun (``status.startedAt`` set) first, then the oldest
  (``metadata.creationTimestamp``, then the name); the others wait, reason :data:`QUEUED`;
- at most ``limit`` tunings run in the whole operator (the operator's ``--max-running-tunings``): of the servers'
  first tunings, those that have begun first, then the oldest; the others wait, reason :data:`QUEUED`.

A waiting tuning's reason and message (:class:`Waiting`) depend only on why it waits, never on its place in the
queue, so the queue moving on rewrites no waiting tuning's status. Nothing here preempts: the decision is taken again
at every change, and a tuning that runs keeps its place while it stays active (it has begun).
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from dataclasses import dataclass, field

from sglang_operator.decisions.tuning.inplace import TuningRequest

Key = tuple[str, str]
"""``(namespace, name)``."""

QUEUED = "Queued"
"""Reason of ``Running=False`` while a tuning waits for its turn (its server's, or the operator's)."""
SERVER_NOT_FOUND = "ServerNotFound"
"""Reason of ``Running=False`` while the SGLangServer a tuning names does not exist."""
DEFAULT_LIMIT = 2
"""Tunings running at once in one operator by default (``--max-running-tunings``)."""


@dataclass(frozen=True)
class Candidate:
    """SGLangTuning ``namespace/request.name`` naming SGLangServer ``namespace/server``."""

    namespace: str
    server: str
    request: TuningRequest

    @property
    def key(self) -> Key:
        """``(namespace, name)`` of the tuning."""
        return self.namespace, self.request.name

    @property
    def server_key(self) -> Key:
        """``(namespace, name)`` of the server it names."""
        return self.namespace, self.server

    def order(self) -> tuple[bool, str, str, str]:
        """Queue order: begun first, then by ``creationTimestamp`` (RFC 3339 sorts as text), namespace, name."""
        return not self.request.started, self.request.created, self.namespace, self.request.name


@dataclass(frozen=True)
class Waiting:
    """Why a tuning does not run: ``reason`` and ``message`` of its ``Running=False`` condition."""

    reason: str
    message: str


@dataclass(frozen=True)
class Admission:
    """:func:`admit`'s answer: ``run``, the tunings that may run now; ``waiting``, the others and why, by key."""

    run: frozenset[Key] = frozenset()
    waiting: dict[Key, Waiting] = field(default_factory=dict)


def server_missing(candidate: Candidate) -> Waiting:
    """The :data:`SERVER_NOT_FOUND` wait of ``candidate``."""
    return Waiting(SERVER_NOT_FOUND, f"SGLangServer {candidate.namespace}/{candidate.server} does not exist "
                                     "(spec.serverRef.name); the tuning starts when it does")


def behind_server(candidate: Candidate) -> Waiting:
    """The :data:`QUEUED` wait of a tuning behind another one on its server."""
    return Waiting(QUEUED, f"another SGLangTuning runs on SGLangServer {candidate.server} (one at a time per "
                           "server); this one starts when it ends, oldest first")


def behind_operator(limit: int) -> Waiting:
    """The :data:`QUEUED` wait of a tuning beyond the operator's ``limit``."""
    return Waiting(QUEUED, f"the operator runs at most {limit} SGLangTunings at once (--max-running-tunings); "
                           "this one starts when one ends, oldest first")


def admit(candidates: Iterable[Candidate], servers: Container[Key], limit: int) -> Admission:
    """Which of ``candidates`` run (see the module docstring), given the ``(namespace, name)`` of every SGLangServer
    that exists (``servers``) and the operator's ``limit`` (≥ 1; a smaller value counts as 1). Inactive candidates
    (ended, being deleted) neither run nor wait. Pure; O(n log n) in the candidates."""
    waiting: dict[Key, Waiting] = {}
    firsts: dict[Key, Candidate] = {}
    for c in sorted((c for c in candidates if c.request.active), key=Candidate.order):
        if c.server_key not in servers:
            waiting[c.key] = server_missing(c)
        elif c.server_key in firsts:
            waiting[c.key] = behind_server(c)
        else:
            firsts[c.server_key] = c
    limit = max(1, limit)
    ordered = sorted(firsts.values(), key=Candidate.order)
    for c in ordered[limit:]:
        waiting[c.key] = behind_operator(limit)
    return Admission(frozenset(c.key for c in ordered[:limit]), waiting)
