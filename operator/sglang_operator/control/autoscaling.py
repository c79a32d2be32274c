"""The server's autoscaler, as one more step of its tick (glue; the decisions are
:mod:`sglang_operator.decisions.autoscaling`, the writes :func:`sglang_operator.control.apply.apply_scaled_object`
and :func:`~sglang_operator.control.apply.delete_scaled_object`).

After the tick decided the server's status (:func:`sglang_operator.decisions.observation.decide`) and before its one
status patch, :func:`follow`: asks KEDA's discovery (:data:`sglang_operator.io.keda.SCALED_OBJECTS`, only for a
server with ``spec.autoscaling`` or one the operator had a ScaledObject for), decides what the ScaledObject should be
(its pause annotations follow the decided status), writes it only when its rendering changed since the last write
this process made (the first tick after a start, and one every :data:`VERIFY_SECONDS`, compares with the live one:
a restart writes nothing that stands; an object edited or deleted by hand is applied again),
deletes the operator's one when ``spec.autoscaling`` is removed or switched to External, and adds
``status.autoscaling`` and the ``Autoscaling`` condition to the decision. In the server's worker (the tick holds its
lock). A failed write is logged and shown in the condition, and tried again after :data:`RETRY_SECONDS` or when
the rendering changes; the CRD answering 404 makes the discovery look again.
"""

from __future__ import annotations

import copy
import datetime as dt
import hashlib
import json
import logging
import time
from collections.abc import Mapping
from typing import Any

from sglang_operator.api.autoscaling import MeasuredCapacity
from sglang_operator.api.server import SGLangServer
from sglang_operator.api.status import ConditionType, SGLangServerStatus
from sglang_operator.api.view import ObjectRef, ServerView
from sglang_operator.control.apply import apply_scaled_object, delete_scaled_object
from sglang_operator.control.children import ChildApplyError
from sglang_operator.control.memory import ScalerRecord, ServerMemory
from sglang_operator.decisions import autoscaling as scaling
from sglang_operator.decisions.observation import ObservationDecision
from sglang_operator.io import keda as discovery
from sglang_operator.io.keda import ScaledObjects

log = logging.getLogger("sglang_operator.control.autoscaling")
ABSENT = "absent"
""":attr:`ScalerRecord.digest` of a server whose ScaledObject was deleted (or found absent)."""
RETRY_SECONDS = 30.0
"""Seconds before a failed ScaledObject write of an unchanged rendering is tried again."""
VERIFY_SECONDS = 300.0
"""Seconds after which a ScaledObject this process wrote is read again (one GET) and re-applied when someone edited
or deleted it."""


def digest(manifest: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of a rendered ScaledObject (keys sorted)."""
    return hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()


def _idle(server: SGLangServer, stored: SGLangServerStatus, decision: ObservationDecision, had: bool) -> bool:
    """No ``spec.autoscaling``, nothing of it in status or memory: nothing to do (most servers, every tick)."""
    conditions = decision.status_json.get("conditions") or []
    return (server.spec.autoscaling is None and not had and stored.autoscaling is None
            and not any(c.get("type") == ConditionType.AUTOSCALING for c in conditions))


async def follow(mem: ServerMemory, view: ServerView, server: SGLangServer, decision: ObservationDecision,
                 now: dt.datetime, keda: ScaledObjects | None = None,
                 measured: MeasuredCapacity | None = None) -> ObservationDecision:
    """Carry out what ``decision`` (decided from ``view``, the SGLangServer as stored, ``server`` its spec parsed)
    means for the server's ScaledObject and return the decision with ``status.autoscaling`` and
    the ``Autoscaling`` condition in its one status patch. ``keda``: KEDA's discovery (default
    :data:`sglang_operator.io.keda.SCALED_OBJECTS`); ``measured``: the serving revision's measured capacity
    (:func:`sglang_operator.decisions.capacity.capacity`, ``metric: measuredCapacity``). Raises nothing the write
    raises (it is reported)."""
    keda = keda or discovery.SCALED_OBJECTS
    stored = view.status  # as stored (what the job applied is not merged here)
    record = mem.scaler
    written = stored.autoscaling.scaled_object if stored.autoscaling is not None else None
    had = record.digest != ABSENT if record is not None else bool(written)
    if _idle(server, stored, decision, had):
        return decision
    available = await keda.available()
    decided = scaling.verifying_status(decision.status_json)
    wanted = scaling.want(server, decided, keda=available, prometheus_address=keda.prometheus_address,
                          had=had, measured=measured, stored=stored.autoscaling, tenancy=keda.tenancy)
    failure: str | None = None
    applied = False
    if wanted.scaled_object is not None:
        applied, failure = await _apply(mem, view.ref, wanted.scaled_object, keda)
    elif wanted.delete:
        await _delete(mem, view.ref)
    autoscaling, cond = scaling.report(server, decided, wanted, applied, failure, view.generation, now)
    return scaling.with_autoscaling(decision, autoscaling, cond)


async def _apply(mem: ServerMemory, owner: ObjectRef, manifest: dict[str, Any],
                 keda: ScaledObjects) -> tuple[bool, str | None]:
    """Write ``manifest`` unless it stands already (this process wrote it) or failed a moment ago. Returns (whether
    it stands, why not)."""
    key, record = digest(manifest), mem.scaler
    if record is not None and record.digest == key:
        age = time.monotonic() - record.at
        if record.failure is None and age < VERIFY_SECONDS:
            return True, None
        if record.failure is not None and age < RETRY_SECONDS:
            return False, record.failure
    try:
        wrote = await apply_scaled_object(copy.deepcopy(manifest), owner)
    except ChildApplyError as err:
        failure = err.failure.describe()
        if err.__cause__ is not None and err.failure.code in (404, None):  # the CRD vanished, or no answer
            keda.forget()  # discover again
        if record is None or record.failure != failure:
            log.warning("%s/%s: ScaledObject not applied: %s", mem.namespace, mem.name, failure)
        mem.scaler = ScalerRecord(key, failure, time.monotonic())
        return False, failure
    if wrote:
        pauses = {k: v for k, v in ((manifest.get("metadata") or {}).get("annotations") or {}).items()}
        log.info("%s/%s: ScaledObject applied (pause: %s)", mem.namespace, mem.name, pauses or "none")
    mem.scaler = ScalerRecord(key, None, time.monotonic())
    return True, None


async def _delete(mem: ServerMemory, owner: ObjectRef) -> None:
    """Delete the operator's ScaledObject of ``owner`` (autoscaling removed or External); a failure is logged and
    tried again after :data:`RETRY_SECONDS`; another owner's object of that name is left alone for good."""
    record = mem.scaler
    if record is not None and record.failure is not None and time.monotonic() - record.at < RETRY_SECONDS:
        return
    try:
        if await delete_scaled_object(owner):
            log.info("%s/%s: ScaledObject deleted (spec.autoscaling removed or External)", mem.namespace, mem.name)
    except ChildApplyError as err:
        log.warning("%s/%s: ScaledObject not deleted: %s", mem.namespace, mem.name, err.failure.describe())
        if err.__cause__ is None:  # another controller owner holds the name: never ours to delete
            mem.scaler = ScalerRecord(ABSENT)
        else:
            mem.scaler = ScalerRecord("delete", err.failure.describe(), time.monotonic())
        return
    mem.scaler = ScalerRecord(ABSENT)
