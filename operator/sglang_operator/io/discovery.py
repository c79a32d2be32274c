"""Whether the operator applies a PodMonitor per SGLangServer (glue: reads the API server).

``--pod-monitors`` (:class:`PodMonitorMode`): ``always``, ``never``, or ``auto``: only when the Prometheus
Operator's ``monitoring.coreos.com/v1`` PodMonitor API exists, i.e. the CRD ``podmonitors.monitoring.coreos.com``
is Established and serves ``v1`` (read with the ``get customresourcedefinitions`` the operator has for kopf
anyway). Discovered once at start-up (:meth:`PodMonitors.discover`) and re-checked every
resync (``--resync-seconds``) while absent, so CRDs installed later are picked up within one resync without a
restart (:mod:`sglang_operator.io.crd_presence`).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from enum import StrEnum

from sglang_operator.io.api import dispatched
from sglang_operator.io.crd_presence import RECHECK_SECONDS as RECHECK_SECONDS
from sglang_operator.io.crd_presence import CrdPresence

log = logging.getLogger("sglang_operator.monitoring")
CRD_NAME = "podmonitors.monitoring.coreos.com"
API_VERSION = "v1"


class PodMonitorMode(StrEnum):
    """``--pod-monitors``. Raises ``ValueError`` naming the choices for anything else."""

    AUTO = "auto"
    ALWAYS = "always"
    NEVER = "never"

    @classmethod
    def _missing_(cls, value: object) -> PodMonitorMode:
        raise ValueError(f"--pod-monitors must be one of auto, always, never (got {value!r})")


def parse_labels(items: Iterable[str]) -> dict[str, str]:
    """``["k=v", ...]`` → ``{"k": "v"}``. Raises ``ValueError`` naming an item without ``=`` or with an empty key."""
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--pod-monitor-label must be KEY=VALUE (got {item!r})")
        out[key.strip()] = value.strip()
    return out


async def api_exists() -> bool:
    """True when the PodMonitor CRD is Established and serves ``v1``; False when it is absent (404).

    Other API errors propagate (``lightkube.ApiError``)."""
    from sglang_operator.io import kube

    return await kube.crd_served(CRD_NAME, API_VERSION)


class PodMonitors(CrdPresence):
    """The PodMonitor policy of one operator process: ``mode``, ``labels`` for every PodMonitor, and (auto) the
    last discovery (:class:`~sglang_operator.io.crd_presence.CrdPresence`). ``probe`` and ``clock`` are injectable
    for tests."""

    def __init__(self, mode: PodMonitorMode = PodMonitorMode.AUTO, labels: dict[str, str] | None = None,
                 probe: Callable[[], Awaitable[bool]] = api_exists,
                 clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__("PodMonitors", CRD_NAME, API_VERSION, "found: a PodMonitor per SGLangServer",
                         "not found: no PodMonitors", log, probe, clock)
        self.mode = mode
        self.labels = dict(labels or {})

    def configure(self, mode: PodMonitorMode, labels: dict[str, str]) -> None:
        """Set the mode and labels (from the command line) and forget any discovery."""
        self.mode, self.labels = mode, dict(labels)
        self.forget()

    @dispatched("pod_monitors_wanted")
    async def wanted(self) -> bool:
        """Whether to apply PodMonitors now: the mode, and in auto the discovery (re-read when never made, or
        when absent and a resync period passed)."""
        if self.mode is PodMonitorMode.NEVER:
            return False
        if self.mode is PodMonitorMode.ALWAYS:
            return True
        return await self.served()


POD_MONITORS = PodMonitors()
"""The process-wide policy; :func:`sglang_operator.entry.runner.run` configures it from the command line."""
