"""The operator's readiness (``GET /readyz`` on the metrics port, :func:`sglang_operator.process.metrics_http.serve`):
has this process seen every SGLangServer once?

The servers that existed when the process started watching are *expected* (one LIST per watched namespace, or
one clusterwide, in kopf's startup handler ``control.handlers.start_observer``). A server is *seen* once the
``reconcile`` handler
(resume, create or update) has finished for it by any path: applied, invalid spec, refused, an apply failure kopf
retries. A deleted server (watch event ``DELETED``, or ``metadata.deletionTimestamp`` set) is no longer expected, and
neither is one a later LIST no longer finds (deleted before kopf's own listing, so no ``DELETED`` event comes).
Servers created after the startup LIST are not expected: once ready, the process stays ready.

Answers (:meth:`Readiness.report`), text/plain, one line:

- a standby (leader election on, Lease not held: :func:`sglang_operator.process.leader.is_leader`): 200
  ``standby: waiting for the Lease`` (ready to take over; the chart's PodDisruptionBudget counts it);
- leading, before the startup LIST succeeded: 503 ``starting``;
- leading, resuming: 503 ``resuming: 312 of 500 SGLangServers seen``;
- leading, every expected server seen or deleted: 200 ``ok: 500 SGLangServers seen once``.

The tracker is mutated on kopf's event loop and read from the HTTP server's threads: every access holds a lock.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
from collections.abc import Awaitable, Callable, Iterable, Sequence

from sglang_operator.process import leader

log = logging.getLogger(__name__)

Lister = Callable[[Sequence[str]], Awaitable[set[str]]]
"""An async function giving the uids of the SGLangServers in these namespaces (empty: clusterwide)."""


class Readiness:
    """Which SGLangServers this process expects to see once, and which it has seen (by ``metadata.uid``)."""

    def __init__(self, leading: Callable[[], bool] = leader.is_leader) -> None:
        """``leading``: whether this process leads (False: a standby waiting for the Lease)."""
        self._leading = leading
        self._lock = threading.Lock()
        self.namespaces: list[str] = []
        """The watched namespaces (empty: clusterwide), set by :func:`sglang_operator.entry.runner.run`."""
        self._expected: set[str] = set()
        self._seen: set[str] = set()
        self._started = False
        self._ready = False
        self._task: asyncio.Task[None] | None = None

    def expect(self, uids: Iterable[str]) -> None:
        """The servers that exist as this process starts watching (the startup LIST); ends ``starting``."""
        with self._lock:
            self._expected = set(uids)
            self._started = True
            self._settle()

    def seen(self, uid: str) -> None:
        """The reconcile handler finished for server ``uid`` (any outcome)."""
        with self._lock:
            self._seen.add(uid)
            self._settle()

    def forget(self, uid: str) -> None:
        """Server ``uid`` is deleted: it no longer holds readiness back."""
        with self._lock:
            self._expected.discard(uid)
            self._seen.discard(uid)
            self._settle()

    def retain(self, uids: Iterable[str]) -> None:
        """Only these servers still exist (a later LIST): the expected ones missing from it are forgotten."""
        alive = set(uids)
        with self._lock:
            self._expected &= alive
            self._settle()

    @property
    def ready(self) -> bool:
        """Whether every expected server was seen (then it stays True)."""
        with self._lock:
            return self._ready

    def report(self) -> tuple[bool, str]:
        """``(ready, one line of text)``: the answer of ``/readyz`` (the module docstring lists them)."""
        if not self._leading():
            return True, "standby: waiting for the Lease"
        with self._lock:
            if not self._started:
                return False, "starting"
            if self._ready:
                return True, f"ok: {len(self._expected)} SGLangServers seen once"
            return False, f"resuming: {len(self._expected & self._seen)} of {len(self._expected)} SGLangServers seen"

    def _settle(self) -> None:
        if self._started and not self._ready and self._expected <= self._seen:
            self._ready = True
            log.info("ready: %d SGLangServers seen once", len(self._expected))

    def start(self, list_uids: Lister, recheck_seconds: float = 30.0, retry_seconds: float = 1.0) -> None:
        """Start, in a task (:meth:`stop` ends it), the startup LIST (``list_uids(self.namespaces)``), tried again
        every ``retry_seconds`` while it fails, then, while not ready, one LIST every ``recheck_seconds`` to forget
        servers deleted unseen. Nothing here raises or waits: kopf's startup never waits for readiness (a CRD created
        a moment ago answers 429 "storage is (re)initializing"; a failing startup handler would hold kopf back
        60 s). Until the first LIST succeeds the answer is ``starting``."""
        self._task = asyncio.get_running_loop().create_task(
            self._run(list_uids, recheck_seconds, retry_seconds), name="readiness")

    async def stop(self) -> None:
        """Cancel the task of :meth:`start`, if any."""
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task

    async def _run(self, list_uids: Lister, recheck: float, retry: float) -> None:
        while True:
            try:
                uids = await list_uids(self.namespaces)
                break
            except Exception as exc:  # readiness only reports: never fatal, tried again
                log.info("listing SGLangServers for /readyz failed (%s); again in %g s", exc, retry)
                await asyncio.sleep(retry)
        self.expect(uids)
        while not self.ready:
            await asyncio.sleep(recheck)
            try:
                self.retain(await list_uids(self.namespaces))
            except Exception as exc:  # a re-check only helps readiness along: never fatal
                log.warning("readiness re-check failed: %s", exc)


READINESS = Readiness()
"""The process's tracker (handlers feed it, telemetry serves it)."""
