"""Whether the operator applies a PodMonitor per SGLangServer (glue: reads the API server).

``--pod-monitors`` (:class:`PodMonitorMode`): ``always``, ``never``, or ``auto``: only when the Prometheus
Operator's ``monitoring.coreos.com/v1`` PodMonitor API exists, i.e. the CRD ``podmonitors.monitoring.coreos.com``
is Established and serves ``v1`` (read with the ``get customresourcedefinitions`` the operator has for kopf
anyway). Discovered once at start-up (:meth:`PodMonitors.discover`) and re-checked every
:data:`RECHECK_SECONDS` while absent, so CRDs installed later are picked up without a restart.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from enum import StrEnum

from sglang_operator.io.api import dispatched

log = logging.getLogger("sglang_operator.monitoring")
CRD_NAME = "podmonitors.monitoring.coreos.com"
API_VERSION = "v1"
RECHECK_SECONDS = 300.0


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
    from lightkube import ApiError
    from lightkube.resources.apiextensions_v1 import CustomResourceDefinition

    from sglang_operator.io import kube

    try:
        crd = await kube.client().get(CustomResourceDefinition, CRD_NAME)
    except ApiError as err:
        if err.status.code == 404:
            return False
        raise
    served = any(v.name == API_VERSION and v.served for v in crd.spec.versions)
    established = any(c.type == "Established" and c.status == "True"
                      for c in (crd.status.conditions if crd.status and crd.status.conditions else []))
    return served and established


class PodMonitors:
    """The PodMonitor policy of one operator process: ``mode``, ``labels`` for every PodMonitor, and (auto) the
    last discovery. ``probe`` and ``clock`` are injectable for tests."""

    def __init__(self, mode: PodMonitorMode = PodMonitorMode.AUTO, labels: dict[str, str] | None = None,
                 probe: Callable[[], Awaitable[bool]] = api_exists,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.mode = mode
        self.labels = dict(labels or {})
        self._probe = probe
        self._clock = clock
        self._present: bool | None = None
        self._checked_at = 0.0

    def configure(self, mode: PodMonitorMode, labels: dict[str, str]) -> None:
        """Set the mode and labels (from the command line) and forget any discovery."""
        self.mode, self.labels, self._present = mode, dict(labels), None

    async def discover(self) -> bool:
        """Read whether the API exists now (auto mode); errors count as absent and are logged."""
        try:
            present = await self._probe()
        except Exception as err:  # RBAC, network: retried at the next re-check
            log.warning("PodMonitors: could not read CRD %s (%s); retrying in %.0f s", CRD_NAME, err,
                        RECHECK_SECONDS)
            present = False
        if present != self._present:
            log.info("PodMonitors: %s/%s %s", CRD_NAME.split(".", 1)[1], API_VERSION,
                     "found: a PodMonitor per SGLangServer" if present else "not found: no PodMonitors")
        self._present, self._checked_at = present, self._clock()
        return present

    def forget(self) -> None:
        """The API vanished (a PodMonitor apply answered 404): discover again at the next call."""
        self._present = None

    @dispatched("pod_monitors_wanted")
    async def wanted(self) -> bool:
        """Whether to apply PodMonitors now: the mode, and in auto the discovery (re-read when never made, or
        when absent and :data:`RECHECK_SECONDS` passed)."""
        if self.mode is PodMonitorMode.NEVER:
            return False
        if self.mode is PodMonitorMode.ALWAYS:
            return True
        if self._present is None or (not self._present and self._clock() - self._checked_at >= RECHECK_SECONDS):
            return await self.discover()
        return self._present


POD_MONITORS = PodMonitors()
"""The process-wide policy; :func:`sglang_operator.entry.runner.run` configures it from the command line."""
