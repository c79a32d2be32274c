"""Multi-node glue for the observer: apply a server that waited for the LeaderWorkerSet API once it is served.

When the reconcile handler found the LeaderWorkerSet API missing (:class:`sglang_operator.control.children.
LeaderWorkerSetMissing`), it wrote ``Ready=False`` reason ``LeaderWorkerSetMissing``
(:func:`sglang_operator.decisions.groups.lws_missing`) and applied nothing. The observer calls
:func:`apply_when_served` for such a server every tick (:func:`sglang_operator.decisions.groups.waiting_for_lws`):
one GET of the CRD; once it is Established, the server is rendered and applied through the one apply path
(:func:`sglang_operator.control.apply.apply_placement`: its ControllerRevision recorded too) and the status keys
returned for the observer's one patch, so installing LWS later needs no edit of the SGLangServer.
"""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

from sglang_operator import builders
from sglang_operator.api.server import SpecError
from sglang_operator.api.view import ServerView
from sglang_operator.builders.leaderworkerset import CRD_NAME, VERSION
from sglang_operator.control.apply import ApplyOptions, apply_placement, placement
from sglang_operator.control.children import ChildApplyError, LeaderWorkerSetMissing
from sglang_operator.decisions.conditions import condition, merge
from sglang_operator.io import kube

log = logging.getLogger("sglang_operator.control.multinode")


async def apply_when_served(view: ServerView, now: dt.datetime) -> tuple[dict[str, Any], str, str] | None:
    """Apply the SGLangServer of ``view`` (waiting for the LeaderWorkerSet API) if the API is served now.

    Returns (the status keys to write — ``revision``, ledger entry, SpecValid, ``Ready=False`` reason ``RollingOut``:
    the next observation takes over —, the log message, the ``Created`` event's message) when the children were
    applied; None when the API is still missing, the spec no longer renders, or applying failed (logged; the next
    tick tries again). Never raises for those. The caller writes the status
    (:mod:`sglang_operator.control.server_status`)."""
    if view.deleting or not await kube.crd_served(CRD_NAME, VERSION):
        return None
    try:
        server = view.server
        rendered = builders.render(server)
    except (SpecError, builders.InvalidSpec):
        return None  # an update since: the reconcile handler reports it
    try:
        new = await apply_placement(view, [placement(view, rendered)], now,
                                    options=ApplyOptions(drain=False, warnings=rendered.warnings))
    except (ChildApplyError, LeaderWorkerSetMissing) as err:
        log.warning("%s/%s: the LeaderWorkerSet API is served, but applying failed: %s", server.namespace,
                    server.name, err)
        return None
    generation = view.generation
    message = f"the LeaderWorkerSet API is served now: applied revision {rendered.revision}; waiting for its groups"
    new["conditions"] = merge(new["conditions"], [condition("Ready", "False", "RollingOut", message, generation,
                                                            now)])
    return new, message, f"revision {rendered.revision}: {rendered.command.command_line}"
