"""PURE: which SGLangTunings may run now — the tuning queue of the whole operator.

Every tuning that is active (not ended, not being deleted) is a candidate (:class:`Candidate`: the server it names
and what it asks, :class:`~sglang_operator.decisions.tuning.inplace.TuningRequest`, from the watched index). Then:

- a tuning whose SGLangServer does not exist waits (reason :data:`SERVER_NOT_FOUND`) and costs nothing: no task, no
  request, one status write when it starts waiting;
- at most ONE tuning runs per server: a tuning that has begun (``status.startedAt`` set) first, then the oldest
  (``metadata.creationTimestamp``, then the name); the others wait, reason :data:`QUEUED`;
- at most ``limit`` tunings run in the whole operator (the operator's ``--max-running-tunings``), shared across
  namespaces: of the servers' first tunings, each namespace gets at most ⌈``limit`` ÷ namespaces with a tuning that
  may run⌉ (:func:`share`), picked round robin among the namespaces (one each in turn, the namespace whose first
  tuning is oldest first; within a namespace: the running one, then those that have begun, then the oldest);
  the others wait, reason :data:`QUEUED`.

A tuning that runs keeps its slot while it stays within that fair pick. One that falls outside it (another namespace
came to want a slot) is ``yielding``: it goes on to its next trial boundary (its running trial is measured and
recorded, never cut), then stops and waits; its slot goes to the tuning the pick chose. So a tenant's long tunings
never hold another tenant's for longer than one trial. A waiting tuning's reason and message (:class:`Waiting`)
depend only on why it waits, never on its place in the queue nor on another namespace's tunings (never another
tenant's names), so the queue moving on rewrites no waiting tuning's status.
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
    """:func:`admit`'s answer: ``run``, the tunings that may run now (the ``yielding`` ones among them);
    ``waiting``, the others and why, by key; ``yielding``: running tunings outside the fair pick, to stop at their
    next trial boundary."""

    run: frozenset[Key] = frozenset()
    waiting: dict[Key, Waiting] = field(default_factory=dict)
    yielding: frozenset[Key] = frozenset()


def server_missing(candidate: Candidate) -> Waiting:
    """The :data:`SERVER_NOT_FOUND` wait of ``candidate``."""
    return Waiting(SERVER_NOT_FOUND, f"SGLangServer {candidate.namespace}/{candidate.server} does not exist "
                                     "(spec.serverRef.name); the tuning starts when it does")


def behind_server(candidate: Candidate) -> Waiting:
    """The :data:`QUEUED` wait of a tuning behind another one on its server."""
    return Waiting(QUEUED, f"another SGLangTuning runs on SGLangServer {candidate.server} (one at a time per "
                           "server); this one starts when it ends, oldest first")


def behind_operator(limit: int) -> Waiting:
    """The :data:`QUEUED` wait of a tuning beyond the operator's ``limit`` (or its namespace's share of it)."""
    return Waiting(QUEUED, f"the operator runs at most {limit} SGLangTunings at once (--max-running-tunings), "
                           "shared across namespaces; this one starts when a slot is free for its namespace (a "
                           "tuning ends, or one over its namespace's share stops at its next trial boundary)")


def share(limit: int, namespaces: int) -> int:
    """Slots one namespace may hold: ⌈``limit`` ÷ ``namespaces``⌉ (``namespaces`` with a tuning that may run; at
    least 1 each, ``limit`` at most)."""
    limit = max(1, limit)
    return min(limit, -(-limit // max(1, namespaces)))


def admit(candidates: Iterable[Candidate], servers: Container[Key], limit: int,
          running: Container[Key] = frozenset()) -> Admission:
    """Which of ``candidates`` run (see the module docstring), given the ``(namespace, name)`` of every SGLangServer
    that exists (``servers``), the operator's ``limit`` (≥ 1; a smaller value counts as 1) and the tunings whose
    runner runs now (``running``). Inactive candidates (ended, being deleted) neither run nor wait. Pure;
    O(n log n) in the candidates."""
    waiting: dict[Key, Waiting] = {}
    firsts: dict[Key, Candidate] = {}

    def order(c: Candidate) -> tuple[bool, bool, str, str, str]:
        return c.key not in running, *c.order()

    for c in sorted((c for c in candidates if c.request.active), key=order):
        if c.server_key not in servers:
            waiting[c.key] = server_missing(c)
        elif c.server_key in firsts:
            waiting[c.key] = behind_server(c)
        else:
            firsts[c.server_key] = c
    limit = max(1, limit)
    by_namespace: dict[str, list[Candidate]] = {}
    for c in sorted(firsts.values(), key=order):  # the namespace of the first in order comes first
        by_namespace.setdefault(c.namespace, []).append(c)
    cap = share(limit, len(by_namespace))
    fair: list[Candidate] = []
    for turn in range(cap):  # round robin: one of each namespace per turn
        fair.extend(queue[turn] for queue in by_namespace.values() if turn < len(queue))
    fair = fair[:limit]
    chosen = {c.key for c in fair}
    holding = [c for c in firsts.values() if c.key in running]
    yielding = frozenset(c.key for c in holding if c.key not in chosen)
    free = max(0, limit - len(holding))
    starting = [c for c in fair if c.key not in running][:free]
    run = frozenset(c.key for c in holding) | {c.key for c in starting}
    for c in firsts.values():
        if c.key not in run:
            waiting[c.key] = behind_operator(limit)
    return Admission(run, waiting, yielding)
