"""Multi-node glue for the observer: apply a server that waited for the LeaderWorkerSet API once it is served.

When the reconcile handler found the LeaderWorkerSet API missing (:class:`sglang_operator.control.children.
LeaderWorkerSetMissing`), it wrote ``Ready=False`` reason ``LeaderWorkerSetMissing``
(:func:`sglang_operator.decisions.groups.lws_missing`) and applied nothing. The observer calls
:func:`apply_when_served` for such a server every tick (:func:`sglang_operator.decisions.groups.waiting_for_lws`):
one GET of the CRD; once it is Established, the server is rendered and applied, and its status written as the
reconcile handler writes it after an apply, through the one apply path (:func:`sglang_operator.control.apply.
apply_placement`: its ControllerRevision recorded too), so installing LWS later needs no edit of the SGLangServer.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from sglang_operator import builders
from sglang_operator.api.server import SpecError, parse
from sglang_operator.builders.leaderworkerset import CRD_NAME, VERSION
from sglang_operator.control.apply import apply_placement, placement
from sglang_operator.control.children import ChildApplyError, LeaderWorkerSetMissing
from sglang_operator.decisions import status as st
from sglang_operator.decisions.conditions import condition, merge
from sglang_operator.io import kube

log = logging.getLogger("sglang_operator.control.multinode")


async def apply_when_served(body: dict[str, Any], now: dt.datetime) -> bool:
    """Apply SGLangServer ``body`` (waiting for the LeaderWorkerSet API) if the API is served now.

    Returns True when the children were applied and the status written (``revision``, ledger entry, SpecValid,
    ``Ready=False`` reason ``RollingOut``: the next observation takes over), False when the API is still missing,
    the spec no longer renders, or applying failed (logged; the next tick tries again). Never raises for those.
    """
    meta, status = body.get("metadata", {}), dict(body.get("status") or {})
    if meta.get("deletionTimestamp") or not await kube.crd_served(CRD_NAME, VERSION):
        return False
    try:
        server = parse(body)
        rendered = builders.render(server)
    except (SpecError, builders.InvalidSpec):
        return False  # an update since: the reconcile handler reports it
    try:
        new = await apply_placement(body, [placement(body, rendered)], now, drain=False, warnings=rendered.warnings)
    except (ChildApplyError, LeaderWorkerSetMissing) as err:
        log.warning("%s/%s: the LeaderWorkerSet API is served, but applying failed: %s", server.namespace,
                    server.name, err)
        return False
    generation = int(meta.get("generation") or 0)
    message = f"the LeaderWorkerSet API is served now: applied revision {rendered.revision}; waiting for its groups"
    new["conditions"] = merge(new["conditions"], [condition("Ready", "False", "RollingOut", message, generation,
                                                            now)])
    if not await kube.patch_status(server.namespace, server.name, meta.get("resourceVersion"), st.changed(status, new)):
        return False  # changed meanwhile: the next tick sees the new object (applying again is a no-op)
    log.info("%s/%s: %s", server.namespace, server.name, message)
    await kube.post_event(body, "Normal", "Created", f"revision {rendered.revision}: {rendered.command.command_line}")
    return True
