"""The server's autoscaler in its tick (glue; the decisions are :mod:`sglang_operator.decisions.autoscaling`, the
writes :func:`sglang_operator.control.apply.apply_scaled_object` and
:func:`~sglang_operator.control.apply.delete_scaled_object`, the one apply path).

Two steps, in the server's worker (the tick holds its lock):

- :func:`follow`, after the tick decided the server's status (:func:`sglang_operator.decisions.observation.decide`)
  and before its one status patch: asks KEDA's discovery (:data:`sglang_operator.io.keda.SCALED_OBJECTS`, a read,
  only for a server with ``spec.autoscaling`` or one the operator had a ScaledObject for) and decides, purely
  (:func:`sglang_operator.decisions.autoscaling.decided`), ``status.autoscaling``, the ``Autoscaling`` condition and
  the ScaledObject to write (its pause annotations follow the decided status; written only when its rendering changed
  since the last write this process made, and once every :data:`~sglang_operator.decisions.autoscaling.
  VERIFY_SECONDS`: the first tick after a start and a verification compare with the live one, so a restart writes
  nothing that stands and an object edited or deleted by hand is applied again; deleted when ``spec.autoscaling`` is
  removed, switched to External or not allowed). Writes nothing.
- :func:`write`, called by the observer's ``persist`` after that status patch succeeded (never from a view whose
  patch was refused as stale): the write, through the apply path (nothing written over another controller owner's
  object, the owner's uid checked), and its outcome recorded in the server's memory (:attr:`ServerMemory.scaler
  <sglang_operator.control.memory.ServerMemory.scaler>`, written here only). A failed write is logged and reported
  in the next tick's condition, and tried again after :data:`~sglang_operator.decisions.autoscaling.RETRY_SECONDS`
  or when the rendering changes; the CRD answering 404 makes the discovery look again.
"""

from __future__ import annotations

import copy
import datetime as dt
import logging
import time

from sglang_operator.api.autoscaling import MeasuredCapacity
from sglang_operator.api.server import SGLangServer
from sglang_operator.api.view import ObjectRef, ServerView
from sglang_operator.control.apply import apply_scaled_object, delete_scaled_object
from sglang_operator.control.children import ChildApplyError
from sglang_operator.control.memory import ServerMemory
from sglang_operator.decisions import autoscaling as scaling
from sglang_operator.decisions.actions import WriteScaledObject
from sglang_operator.decisions.autoscaling import ABSENT, ScalerRecord
from sglang_operator.decisions.observation import ObservationDecision
from sglang_operator.io import keda as discovery
from sglang_operator.io.keda import ScaledObjects

log = logging.getLogger("sglang_operator.control.autoscaling")


async def follow(mem: ServerMemory, view: ServerView, server: SGLangServer, decision: ObservationDecision,
                 now: dt.datetime, keda: ScaledObjects | None = None,
                 measured: MeasuredCapacity | None = None) -> ObservationDecision:
    """``decision`` (decided from ``view``, the SGLangServer as stored, ``server`` its spec parsed) with
    ``status.autoscaling`` and the ``Autoscaling`` condition in its one status patch and the ScaledObject write for
    after it (:attr:`ObservationDecision.scaled_object`). ``keda``: KEDA's discovery (default
    :data:`sglang_operator.io.keda.SCALED_OBJECTS`, read here: whether the CRD is served, the operator's Prometheus
    address and what the admin allows); ``measured``: the serving revision's measured capacity
    (:func:`sglang_operator.decisions.capacity.capacity`, ``metric: measuredCapacity``). Writes nothing."""
    keda = keda or discovery.SCALED_OBJECTS
    stored = view.status.autoscaling  # as stored (what the job applied is not merged here)
    if scaling.idle(server, stored, decision, scaling.had_one(mem.scaler, stored)):
        return decision
    return scaling.decided(decision, server, stored, mem.scaler, keda=await keda.available(),
                           prometheus_address=keda.prometheus_address, tenancy=keda.tenancy, measured=measured,
                           generation=view.generation, now=now, clock=time.monotonic())


async def write(mem: ServerMemory, owner: ObjectRef, action: WriteScaledObject,
                keda: ScaledObjects | None = None) -> None:
    """Carry out ``action`` for SGLangServer ``owner`` through the apply path, after the tick's status patch, and
    record its outcome in ``mem.scaler``. Raises nothing the write raises (it is logged, and reported by the next
    tick)."""
    if action.manifest is None:
        await _delete(mem, owner)
        return
    keda = keda or discovery.SCALED_OBJECTS
    record = mem.scaler
    try:
        wrote = await apply_scaled_object(copy.deepcopy(action.manifest), owner)
    except ChildApplyError as err:
        failure = err.failure.describe()
        if err.__cause__ is not None and err.failure.code in (404, None):  # the CRD vanished, or no answer
            keda.forget()  # discover again
        if record is None or record.failure != failure:
            log.warning("%s/%s: ScaledObject not applied: %s", mem.namespace, mem.name, failure)
        mem.scaler = ScalerRecord(action.digest, failure, time.monotonic())
        return
    if wrote:
        pauses = dict((action.manifest.get("metadata") or {}).get("annotations") or {})
        log.info("%s/%s: ScaledObject applied (pause: %s)", mem.namespace, mem.name, pauses or "none")
    mem.scaler = ScalerRecord(action.digest, None, time.monotonic())


async def _delete(mem: ServerMemory, owner: ObjectRef) -> None:
    """Delete the operator's ScaledObject of ``owner`` (autoscaling removed, External or not allowed); a failure is
    logged and tried again after :data:`~sglang_operator.decisions.autoscaling.RETRY_SECONDS`; another owner's
    object of that name is left alone for good."""
    try:
        if await delete_scaled_object(owner):
            log.info("%s/%s: ScaledObject deleted (spec.autoscaling removed, External or not allowed)",
                     mem.namespace, mem.name)
    except ChildApplyError as err:
        log.warning("%s/%s: ScaledObject not deleted: %s", mem.namespace, mem.name, err.failure.describe())
        if err.__cause__ is None:  # another controller owner holds the name: never ours to delete
            mem.scaler = ScalerRecord(ABSENT)
        else:
            mem.scaler = ScalerRecord(scaling.DELETE, err.failure.describe(), time.monotonic())
        return
    mem.scaler = ScalerRecord(ABSENT)
