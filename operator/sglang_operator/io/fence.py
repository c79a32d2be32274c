"""Fencing: every write the operator makes (server-side apply, status patch, event, ControllerRevision) first asks
whether this process may still write. With leader election on (``run --leader-elect``) it may while it holds the
Lease with at least ``renewDeadline`` of validity left (:func:`sglang_operator.process.leader.may_write`); a leader
that cannot be sure, e.g. one resumed after a SIGSTOP longer than that, writes nothing before a candidate could
have taken over, and its renewal loop ends the process. Without leader election the process is alone and always
may. The Lease's own writes are not fenced.

The check is made in :func:`sglang_operator.io.api.dispatched`'s wrapper of every write (``fence=``), before the
cluster's call or a bound implementation's (the offline tests' fake) runs.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger("sglang_operator.io.fence")


class NotLeader(Exception):
    """A write refused: this process does not hold the Lease with enough validity left."""


class Fence:
    """The process's one write gate (:data:`FENCE`); installed by the runner."""

    def __init__(self) -> None:
        self._may_write: Callable[[], bool] = lambda: True
        self._expired: Callable[[], bool] = lambda: False
        self._on_expired: Callable[[], None] = lambda: None
        self.refused = 0

    def install(self, may_write: Callable[[], bool], expired: Callable[[], bool] = lambda: False,
                on_expired: Callable[[], None] = lambda: None) -> None:
        """Gate every write on ``may_write()`` (the leader elector's); a write attempted once ``expired()`` (the
        Lease ran out by this process's own clock: a candidate may hold it already) calls ``on_expired()`` first
        (the runner's: end the process at once, as a lost Lease does, before kopf could write anything either)."""
        self._may_write, self._expired, self._on_expired = may_write, expired, on_expired

    def check(self, what: str | Callable[[], str]) -> None:
        """Raise :class:`NotLeader` unless this process may write now; ``what`` names the write (logged), or makes
        that name when called (only for a refused write)."""
        if not self._may_write():
            what = what if isinstance(what, str) else what()
            self.refused += 1
            log.warning("not leading with margin: %s not written", what)
            if self._expired():
                self._on_expired()
            raise NotLeader(f"{what}: this process does not hold the Lease with renewDeadline of validity left")


FENCE = Fence()
