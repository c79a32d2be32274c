"""Whether KEDA's ScaledObject API exists, and the operator's default Prometheus address (glue: reads the API server).

``spec.autoscaling`` (mode KEDA) renders a ``keda.sh/v1alpha1`` ScaledObject
(:mod:`sglang_operator.builders.autoscaling`); it can be applied only when the CRD ``scaledobjects.keda.sh`` is
Established and serves ``v1alpha1`` (read with the ``get customresourcedefinitions`` the operator has for kopf
anyway). :class:`ScaledObjects` discovers it once and
re-checks at every resync (``--resync-seconds``) while absent, so KEDA installed later is picked up within one resync,
with no restart and no edit.
``prometheus_address`` is ``--prometheus-address`` (the chart's ``autoscaling.prometheusAddress``): the Prometheus a
ScaledObject queries when ``spec.autoscaling.prometheus`` is unset; ``tenancy`` what a server's spec may make KEDA
query (:class:`~sglang_operator.builders.autoscaling_tenancy.PrometheusTenancy`: ``--allowed-prometheus-address``
and that address, ``--allow-query-metric``).
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable, Sequence

from sglang_operator.builders.autoscaling import CRD_NAME, VERSION
from sglang_operator.builders.autoscaling_tenancy import PrometheusTenancy
from sglang_operator.io.crd_presence import RECHECK_SECONDS as RECHECK_SECONDS
from sglang_operator.io.crd_presence import CrdPresence

log = logging.getLogger("sglang_operator.autoscaling")


async def api_exists() -> bool:
    """True when the ScaledObject CRD is Established and serves ``v1alpha1``; False when it is absent (404).

    Other API errors propagate (``lightkube.ApiError``)."""
    from sglang_operator.io import kube

    return await kube.crd_served(CRD_NAME, VERSION)


class ScaledObjects(CrdPresence):
    """KEDA's presence as one operator process sees it (:class:`~sglang_operator.io.crd_presence.CrdPresence`),
    its default Prometheus address and what a spec may make KEDA query (``allowed_addresses`` besides the default,
    ``allow_query``). ``probe`` and ``clock`` are injectable for tests."""

    def __init__(self, prometheus_address: str | None = None, probe: Callable[[], Awaitable[bool]] = api_exists,
                 clock: Callable[[], float] = time.monotonic, *, allowed_addresses: Sequence[str] = (),
                 allow_query: bool = False) -> None:
        super().__init__("ScaledObjects", CRD_NAME, VERSION,
                         "found: spec.autoscaling (mode KEDA) renders a ScaledObject",
                         "not found: servers with spec.autoscaling (mode KEDA) report it and keep their replicas",
                         log, probe, clock)
        self.prometheus_address = prometheus_address or None
        self.tenancy = PrometheusTenancy.of(self.prometheus_address, allowed_addresses, allow_query)

    def configure(self, prometheus_address: str | None, allowed_addresses: Sequence[str] = (),
                  allow_query: bool = False) -> None:
        """Set the default Prometheus address (from the command line; empty: none), the addresses a spec may name
        besides it and whether ``metric: query`` is allowed, and forget any discovery."""
        self.prometheus_address = prometheus_address or None
        self.tenancy = PrometheusTenancy.of(self.prometheus_address, allowed_addresses, allow_query)
        self.forget()

    async def available(self) -> bool:
        """Whether the ScaledObject API exists now (re-read when never read, or when absent and
        a resync period passed); errors count as absent and are logged."""
        return await self.served()


SCALED_OBJECTS = ScaledObjects()
"""The process-wide view; :func:`sglang_operator.entry.runner.run` configures it from the command line."""
