"""PURE: what the server's loop says to its autoscaler after a tick (``spec.autoscaling``).

All without I/O, put together by :func:`decided`: :func:`want` says what to do with the server's KEDA ScaledObject
(apply this rendering, delete the operator's one, or nothing, and why not), from the object's spec, the status the
tick decided (the pause follows :func:`sglang_operator.decisions.observation.verifying`), whether KEDA's CRD is served
and the operator's default Prometheus address; :func:`write_of` says whether it is written this tick
(:class:`~sglang_operator.decisions.actions.WriteScaledObject`) from what the server's memory recorded of the last
write (:class:`ScalerRecord`); :func:`report` turns that into ``status.autoscaling`` and the ``Autoscaling``
condition, and :func:`with_autoscaling` puts both into the tick's
:class:`~sglang_operator.decisions.observation.ObservationDecision` (its one status patch). The write goes out after
that patch, through the apply path (:mod:`sglang_operator.control.autoscaling`, :func:`sglang_operator.control.apply.
apply_scaled_object`), and never when the patch was refused as stale; the status says what the write makes stand,
and a refused write is reported by the next tick's patch (as a job's apply is).

Pauses: an InPlace tuning's trial measured → ``paused-replicas`` at ``spec.replicas`` (the /scale count); else a
revision warming up or verifying, or a canary running → ``paused-scale-in: "true"`` (scale-up stays allowed); else
none (the annotations leave the rendering, and a server-side apply by the same manager removes them).
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from sglang_operator.api.autoscaling import (
    AutoscalingMode,
    AutoscalingPause,
    AutoscalingStatus,
    CapacityBracket,
    MeasuredCapacity,
    ScaleTarget,
)
from sglang_operator.api.server import SGLangServer
from sglang_operator.api.status import ConditionType, SGLangServerStatus
from sglang_operator.builders import autoscaling as scaled_objects
from sglang_operator.builders.autoscaling_tenancy import PrometheusTenancy
from sglang_operator.decisions import capacity as measured_capacity
from sglang_operator.decisions.actions import WriteScaledObject
from sglang_operator.decisions.conditions import Condition, condition, merge
from sglang_operator.decisions.observation import ObservationDecision, verifying

APPLIED = "ScaledObjectApplied"
"""Condition ``Autoscaling=True``: the operator's ScaledObject is applied (mode KEDA)."""
EXTERNAL = "External"
"""Condition ``Autoscaling=True``: the user's own scaler targets the server (mode External)."""
KEDA_NOT_INSTALLED = "KEDANotInstalled"
"""Condition ``Autoscaling=False``: the ``scaledobjects.keda.sh`` CRD is not served."""
NO_PROMETHEUS_ADDRESS = "NoPrometheusAddress"
"""Condition ``Autoscaling=False``: neither ``spec.autoscaling.prometheus.address`` nor ``--prometheus-address``."""
NOT_ALLOWED = "NotAllowed"
"""Condition ``Autoscaling=False``: ``spec.autoscaling`` names a Prometheus address, or a ``metric: query``, the admin
does not allow (:mod:`sglang_operator.builders.autoscaling_tenancy`); no ScaledObject (the operator's one is
deleted)."""
APPLY_FAILED = "ApplyFailed"
"""Condition ``Autoscaling=False``: the API server refused the ScaledObject, or another owner holds its name."""
SLO_NOT_MET = "SLONotMet"
"""Condition ``Autoscaling=True`` (the ScaledObject is applied, on the configured target): no level a tuning measured
for the serving settings met ``spec.autoscaling.slo`` (``measuredCapacity``); the message warns."""

ABSENT = "absent"
""":attr:`ScalerRecord.digest` of a server whose ScaledObject was deleted (or found absent, or held by another
owner: never the operator's to delete)."""
DELETE = "delete"
""":attr:`WriteScaledObject.digest` of a delete (and :attr:`ScalerRecord.digest` of a delete that failed)."""
RETRY_SECONDS = 30.0
"""Seconds before a failed ScaledObject write of an unchanged rendering (or a failed delete) is tried again."""
VERIFY_SECONDS = 300.0
"""Seconds after which a ScaledObject this process wrote is written again through the apply path (one GET; applied
only when someone edited or deleted it)."""


@dataclass(frozen=True)
class ScalerRecord:
    """What the server's loop last did with its KEDA ScaledObject (kept in the server's memory, written by
    :mod:`sglang_operator.control.autoscaling` only): ``digest`` of the rendering that stands (:data:`ABSENT`:
    deleted, none; :data:`DELETE`: a delete that failed); ``failure``: why the write failed; ``at``: when it was
    written, found standing or failed (monotonic seconds)."""

    digest: str
    failure: str | None = None
    at: float = 0.0


def digest(manifest: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of a rendered ScaledObject (JSON, keys sorted)."""
    return hashlib.sha256(json.dumps(manifest, sort_keys=True).encode()).hexdigest()


def had_one(record: ScalerRecord | None, stored: AutoscalingStatus | None) -> bool:
    """Whether the operator may have a ScaledObject for the server: its memory's ``record`` says so (not
    :data:`ABSENT`), else, with no record since the process started, ``status.autoscaling.scaledObject`` as stored."""
    if record is not None:
        return record.digest != ABSENT
    return stored is not None and bool(stored.scaled_object)


def idle(server: SGLangServer, stored: AutoscalingStatus | None, decision: ObservationDecision, had: bool) -> bool:
    """Nothing to do (most servers, every tick): no ``spec.autoscaling``, no ScaledObject (``had``), no
    ``status.autoscaling`` as stored (``stored``) and no ``Autoscaling`` condition in the tick's ``decision``."""
    conditions = decision.status_json.get("conditions") or []
    return (server.spec.autoscaling is None and not had and stored is None
            and not any(c.get("type") == ConditionType.AUTOSCALING for c in conditions))


@dataclass(frozen=True)
class Pause:
    """A pause of the autoscaler: ``kind`` and, for ``Replicas``, the count held."""

    kind: AutoscalingPause
    replicas: int | None = None


def pause_of(status: SGLangServerStatus, replicas: int) -> Pause | None:
    """The pause ``status`` (the tick's decided status) asks for: ``Replicas`` at ``replicas`` (the server's
    ``spec.replicas``) while an InPlace trial is applied, ``ScaleIn`` while :func:`verifying` otherwise, else None."""
    hold = status.tuning_hold
    if hold is not None and hold.trial is not None:
        return Pause(AutoscalingPause.REPLICAS, replicas)
    if verifying(status):
        return Pause(AutoscalingPause.SCALE_IN)
    return None


VERIFYING_KEYS = ("analysis", "canary", "tuningHold")
"""The status keys :func:`pause_of` and :func:`verifying` read."""


def verifying_status(status_json: Mapping[str, Any]) -> SGLangServerStatus:
    """Only the :data:`VERIFYING_KEYS` of a tick's decided status (camelCase), parsed: what the pause follows, without
    parsing the whole status every tick. Raises ``pydantic.ValidationError`` (a decision that broke the schema)."""
    return SGLangServerStatus.model_validate({k: status_json[k] for k in VERIFYING_KEYS
                                              if status_json.get(k) is not None})


@dataclass(frozen=True)
class Want:
    """What the server's loop wants of its ScaledObject: ``scaled_object`` to apply (rendered, not adopted; None:
    none), ``delete`` the operator's one (autoscaling removed or External, or a spec the admin does not allow; only
    when ``had``), ``blocked``: why nothing can be applied (``(reason, message)``, an existing ScaledObject left as it
    is unless ``delete``), ``pause`` in force,
    ``target`` per replica in force and the ``capacity`` it comes from (``measuredCapacity``,
    :func:`sglang_operator.decisions.capacity.target`)."""

    scaled_object: dict[str, Any] | None = None
    delete: bool = False
    blocked: tuple[str, str] | None = None
    pause: Pause | None = None
    target: float | None = None
    capacity: MeasuredCapacity | None = None


def want(server: SGLangServer, status: SGLangServerStatus, *, keda: bool, prometheus_address: str | None,
         had: bool, measured: MeasuredCapacity | None = None, stored: AutoscalingStatus | None = None,
         tenancy: PrometheusTenancy | None = None) -> Want:
    """What to do with ``server``'s ScaledObject after a tick that decided ``status``. ``keda``: whether KEDA's CRD is
    served; ``prometheus_address``: the operator's ``--prometheus-address`` (None: none); ``had``: whether the
    operator may have applied one before (its memory, or ``status.autoscaling.scaledObject``); ``measured``: the
    serving revision's measured capacity (:func:`sglang_operator.decisions.capacity.capacity`); ``stored``:
    ``status.autoscaling`` as stored (the target held while verifying); ``tenancy``: what the admin allows the spec
    to make KEDA query (default: ``prometheus_address`` only, no ``metric: query``). A spec it refuses gets no
    ScaledObject, and the operator's one is deleted (KEDA stops querying)."""
    auto = server.spec.autoscaling
    pause = pause_of(status, server.spec.replicas) if auto is not None else None
    if auto is None or auto.mode is AutoscalingMode.EXTERNAL:
        return Want(delete=had and keda, pause=pause)
    target, capacity = measured_capacity.target(server, measured, stored.target if stored is not None else None,
                                  stored.capacity if stored is not None else None,
                                  verifying(status) or pause is not None)
    refused = (tenancy or PrometheusTenancy.of(prometheus_address)).refusal(auto)
    if refused is not None:
        return Want(delete=had and keda, blocked=(NOT_ALLOWED, f"{refused}; no ScaledObject: the server keeps "
                                                               f"spec.replicas ({server.spec.replicas}) and serves"),
                    pause=pause, target=target, capacity=capacity)
    if not keda:
        return Want(blocked=(KEDA_NOT_INSTALLED, (
            f"spec.autoscaling.mode KEDA needs KEDA 2.18 or later: the {scaled_objects.CRD_NAME} CRD is not served; "
            f"the server keeps spec.replicas ({server.spec.replicas}) and serves; installing KEDA needs no edit "
            "(looked for again every few minutes)")), pause=pause, target=target, capacity=capacity)
    try:
        rendered = scaled_objects.scaled_object(
            server, prometheus_address, verifying=pause is not None and pause.kind is AutoscalingPause.SCALE_IN,
            trial_replicas=pause.replicas if pause is not None and pause.kind is AutoscalingPause.REPLICAS else None,
            target=target)
    except scaled_objects.MissingPrometheusAddress as err:
        return Want(blocked=(NO_PROMETHEUS_ADDRESS, f"{err}; the server keeps spec.replicas "
                                                    f"({server.spec.replicas}) and serves"), pause=pause,
                    target=target, capacity=capacity)
    return Want(scaled_object=rendered, pause=pause, target=target, capacity=capacity)


def report(server: SGLangServer, status: SGLangServerStatus, wanted: Want, applied: bool, failure: str | None,
           generation: int, now: dt.datetime) -> tuple[dict[str, Any] | None, Condition | None]:
    """``status.autoscaling`` (camelCase dict) and the ``Autoscaling`` condition after ``wanted`` was carried out:
    ``applied`` whether the ScaledObject stands as rendered, ``failure`` why it could not be written. Both None
    without ``spec.autoscaling`` (the condition is removed then)."""
    auto = server.spec.autoscaling
    if auto is None:
        return None, None
    pause = wanted.pause
    out = AutoscalingStatus(
        mode=auto.mode, scale_target=ScaleTarget(api_version=server.api_version, kind=server.kind, name=server.name),
        scaled_object=server.name if applied and wanted.scaled_object is not None else None,
        judging=verifying(status), pause=pause.kind if pause is not None else None,
        paused_replicas=pause.replicas if pause is not None else None, target=wanted.target,
        capacity=wanted.capacity)
    if auto.mode is AutoscalingMode.EXTERNAL:
        cond = condition(ConditionType.AUTOSCALING, "True", EXTERNAL,
                         f"your own scaler targets {server.kind} {server.name}'s /scale; status.autoscaling says when "
                         "the server is judged (do not scale in then)", generation, now)
    elif wanted.blocked is not None:
        cond = condition(ConditionType.AUTOSCALING, "False", wanted.blocked[0], wanted.blocked[1], generation, now)
    elif failure is not None:
        cond = condition(ConditionType.AUTOSCALING, "False", APPLY_FAILED, failure, generation, now)
    else:
        never = wanted.capacity is not None and wanted.capacity.bracket is CapacityBracket.NOT_MET
        cond = condition(ConditionType.AUTOSCALING, "True", SLO_NOT_MET if never else APPLIED,
                         f"ScaledObject {server.name} scales the server between {auto.effective_min_replicas} and "
                         f"{auto.max_replicas} replicas on {_on(auto.effective_metric.value, wanted, slo_of(server))}",
                         generation, now)
    return out.model_dump(by_alias=True, exclude_none=True, mode="json"), cond


def slo_of(server: SGLangServer) -> float | None:
    """``spec.autoscaling.slo.minTokensPerSecondPerRequest`` (tok/s per request), None when unset."""
    auto = server.spec.autoscaling
    return auto.slo.min_tokens_per_second_per_request if auto is not None and auto.slo is not None else None


def _on(metric: str, wanted: Want, slo: float | None) -> str:
    """``runningRequests (target 4 per replica)``; with a measured capacity, where it comes from, or why the
    configured target holds (not bracketed, or the SLO never met)."""
    text = f"{metric} (target {scaled_objects.threshold(wanted.target)} per replica"
    got = wanted.capacity
    tunings = f"SGLangTuning {', '.join(got.tunings) or '?'}" if got is not None else ""
    if got is not None and measured_capacity.replaces_target(got):
        text += f": the measured capacity of {got.settings}, {got.basis}, {tunings}"
    elif got is not None and got.bracket is CapacityBracket.NOT_MET:
        text += (f", the configured target: warning, {got.settings} never gave {slo:g} tok/s per request at any "
                 f"level measured ({got.basis}; {tunings}): the SLO cannot be met on these settings, fewer requests "
                 "per replica or other settings are needed")
    elif got is not None:
        text += (f", the configured target: measured ≥ {got.requests_per_replica:g} requests per replica at "
                 f"{slo:g} tok/s per request for {got.settings}, not bracketed ({got.basis}; {tunings}): a "
                 "measured capacity replaces the target only when a level met the SLO and a higher one did not; "
                 "measure higher levels")
    elif metric == "measuredCapacity":
        text += ", the configured target: no finished SGLangTuning of this namespace measured the serving settings"
    return text + ")"


def with_autoscaling(decision: ObservationDecision, autoscaling: dict[str, Any] | None,
                     cond: Condition | None) -> ObservationDecision:
    """``decision`` with ``status.autoscaling`` and the ``Autoscaling`` condition (None: removed) in its status: still
    one status patch."""
    new = dict(decision.status_json)
    conditions = list(new.get("conditions") or [])
    if cond is None:
        conditions = [c for c in conditions if c.get("type") != ConditionType.AUTOSCALING]
    else:
        conditions = merge(conditions, [cond])
    new["conditions"] = conditions
    new["autoscaling"] = autoscaling
    return replace(decision, status_json=new)


def write_of(wanted: Want, record: ScalerRecord | None, clock: float) -> tuple[WriteScaledObject | None, bool,
                                                                                  str | None]:
    """(the write to carry out after this tick's status patch, whether the wanted rendering stands as the status
    reports it, why not) for ``wanted``, from ``record`` (the last write's outcome; None: none since the process
    started) at ``clock`` (monotonic seconds). A rendering written without failure stands (written again every
    :data:`VERIFY_SECONDS`: the apply path reads the live one and writes only when it was edited or deleted); one
    that failed is reported failed until a write succeeds, tried again after :data:`RETRY_SECONDS`; a new rendering
    (or none recorded) is written and reported standing (a refused write is reported by the next tick). A delete
    goes out every tick the operator may have one, but within :data:`RETRY_SECONDS` of a failed one."""
    age = clock - record.at if record is not None else 0.0
    if wanted.scaled_object is not None:
        key = digest(wanted.scaled_object)
        write = WriteScaledObject(wanted.scaled_object, key)
        if record is None or record.digest != key:
            return write, True, None
        if record.failure is None:
            return (write if age >= VERIFY_SECONDS else None), True, None
        return (write if age >= RETRY_SECONDS else None), False, record.failure
    if wanted.delete and not (record is not None and record.failure is not None and age < RETRY_SECONDS):
        return WriteScaledObject(None, DELETE), False, None
    return None, False, None


def decided(decision: ObservationDecision, server: SGLangServer, stored: AutoscalingStatus | None,
            record: ScalerRecord | None, *, keda: bool, prometheus_address: str | None,
            tenancy: PrometheusTenancy | None, measured: MeasuredCapacity | None, generation: int, now: dt.datetime,
            clock: float) -> ObservationDecision:
    """``decision`` (the tick's, decided for ``server``, whose ``status.autoscaling`` as stored is ``stored``) with
    what its autoscaler needs: ``status.autoscaling`` and the ``Autoscaling`` condition in its one status patch, and
    the ScaledObject to write after that patch (:attr:`~sglang_operator.decisions.observation.ObservationDecision.
    scaled_object`). ``record``: the memory's last write (:class:`ScalerRecord`); ``keda``, ``prometheus_address``,
    ``tenancy``, ``measured``: as :func:`want`; ``generation``: the object's, for the condition; ``now``: the
    condition's time; ``clock``: monotonic seconds (:func:`write_of`). Raises ``pydantic.ValidationError`` when the
    decided status broke the schema (:func:`verifying_status`)."""
    status = verifying_status(decision.status_json)
    wanted = want(server, status, keda=keda, prometheus_address=prometheus_address,
                  had=had_one(record, stored), measured=measured, stored=stored, tenancy=tenancy)
    write, applied, failure = write_of(wanted, record, clock)
    autoscaling, cond = report(server, status, wanted, applied, failure, generation, now)
    return replace(with_autoscaling(decision, autoscaling, cond), scaled_object=write)
