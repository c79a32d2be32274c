"""Whether an optional API (a CustomResourceDefinition of another project) is served, as one operator process last
read it (glue: reads the API server through :func:`sglang_operator.io.kube.crd_served`).

:class:`CrdPresence` reads it once when first asked and again, while it is absent, once per resync period of the
operator (``--resync-seconds``, set by :meth:`CrdPresence.recheck_every`; :data:`RECHECK_SECONDS` when resyncs are
off), so an API installed later is picked up within one resync without a restart, at the cost of at most one GET of
the CRD per period; a present API is kept until :meth:`CrdPresence.forget` (an apply answered 404). The PodMonitor
policy (:mod:`sglang_operator.io.discovery`) and KEDA's ScaledObjects (:mod:`sglang_operator.io.keda`) are its two
users.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

RECHECK_SECONDS = 300.0
"""Seconds between two reads of an API found absent, unless :meth:`CrdPresence.recheck_every` set the resync
period (the operator's default ``--resync-seconds`` is the same 300 s)."""


class CrdPresence:
    """The last read of whether CRD ``crd_name`` serves ``version``: ``what`` (``PodMonitors``) starts the log lines,
    ``found`` / ``absent`` say what follows from either answer; ``log`` is the user's logger. ``probe`` (True:
    served; raises on an API error) and ``clock`` (seconds, monotonic) are injectable for tests."""

    def __init__(self, what: str, crd_name: str, version: str, found: str, absent: str, log: logging.Logger,
                 probe: Callable[[], Awaitable[bool]], clock: Callable[[], float] = time.monotonic) -> None:
        self._what, self._crd_name, self._version = what, crd_name, version
        self._found, self._absent, self._log = found, absent, log
        self._probe = probe
        self._clock = clock
        self._present: bool | None = None
        self._checked_at = 0.0
        self.recheck_seconds = RECHECK_SECONDS
        """Seconds between two reads while absent."""

    def recheck_every(self, seconds: float) -> None:
        """Read an absent API again every ``seconds`` (the operator's resync period); 0 or less (resyncs off):
        every :data:`RECHECK_SECONDS`."""
        self.recheck_seconds = seconds if seconds > 0 else RECHECK_SECONDS

    async def discover(self) -> bool:
        """Read whether the API is served now; errors count as absent and are logged."""
        try:
            present = await self._probe()
        except Exception as err:  # RBAC, network: retried at the next re-check
            self._log.warning("%s: could not read CRD %s (%s); retrying in %.0f s", self._what, self._crd_name, err,
                              self.recheck_seconds)
            present = False
        if present != self._present:
            absent = f"{self._absent} (read again every {self.recheck_seconds:.0f} s)"
            self._log.info("%s: %s/%s %s", self._what, self._crd_name.split(".", 1)[1], self._version,
                           self._found if present else absent)
        self._present, self._checked_at = present, self._clock()
        return present

    def forget(self) -> None:
        """The API vanished (an apply answered 404): discover again at the next call."""
        self._present = None

    async def served(self) -> bool:
        """Whether the API is served: the last read, read again when never made, or when absent and
        :attr:`recheck_seconds` passed since the last read."""
        if self._present is None or (not self._present and self._clock() - self._checked_at >= self.recheck_seconds):
            return await self.discover()
        return self._present
