"""PURE: a revision's capacity per replica from the speed the namespace's tunings measured for its settings
(``spec.autoscaling.metric: measuredCapacity``).

**The figure per level.** A tuning level at concurrency c measured ``output tok/s`` over all c concurrent requests
(:class:`~sglang_operator.decisions.tuning.known_best.MeanLevelFigures`); each request received ``output tok/s ÷ c``
tokens per second, its time in the queue and its first token included. That is the figure compared with
``slo.minTokensPerSecondPerRequest``: a replica that runs more requests than its settings can batch (SGLang's
``--max-running-requests``, or what its memory allows) queues them, and the per-request decode speed of the requests
it runs would not show it.

**The capacity** (:func:`capacity_of`): the highest concurrency at which the figure stays at or above the SLO,
linearly interpolated between the last measured level that keeps it and the next one that does not; the highest
level measured when every level keeps it (never extrapolated); 1 when none does (the SLO cannot be met: a replica per
request is the most that can be done, and :attr:`Capacity.met` says so). Per replica: a tuning's load of c streams
is spread over every replica of its trial (InPlace: the server's ``spec.replicas``, multi-node one leader per group;
Shadow: 1; :attr:`~sglang_operator.decisions.tuning.known_best.WorkloadKey.replicas`), so the concurrency found is
divided by those replicas. Capped by the revision's ``spec.memory.maxRunningRequests`` when set: SGLang runs at most
that many requests per replica (``--max-running-requests``) and queues the others, so a replica never runs more
concurrent requests than that, whatever the levels measured (the basis says "capped at maxRunningRequests N").

**The measurement used** (:func:`measured`): the figures of the settings the serving revision runs, on its setup
(:func:`~sglang_operator.decisions.tuning.known_best.capacity`), from the workload measured at the most levels
(then the most measurements, then the longest answers), so that a figure comes from one load throughout.

**The target in force** (:func:`target`): while the server's loop verifies (a revision warms up or verifies, a canary
runs, an InPlace trial measures) the target stays what it was; otherwise the serving revision's capacity when the
levels **bracket** the SLO (a level met it and a higher one did not, or ``maxRunningRequests`` caps it:
:attr:`Capacity.bracketed`), else the configured ``target``: a capacity "at the highest level measured" is only a
floor (one level, or every level met the SLO), and a capacity of 1 when no level met it is no figure to scale on;
``status.autoscaling.capacity`` shows what was measured either way (its ``bracket`` says which) and the
``Autoscaling`` condition says why the configured target holds. A promotion or a rollback thus rewrites it at the
first tick after.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sglang_operator.api.autoscaling import AutoscalingMetric, CapacityBracket, MeasuredCapacity
from sglang_operator.api.server import SGLangServer
from sglang_operator.api.spec import SGLangServerSpec
from sglang_operator.decisions.tuning.known_best import KnownBest, MeanLevelFigures, WorkloadKey, server_settings
from sglang_operator.decisions.tuning.known_best import capacity as measured_figures


@dataclass(frozen=True)
class Capacity:
    """Concurrent requests per replica (``requests``) at the SLO, whether the SLO was met at some level (``met``),
    ``basis``: the levels it rests on, as text, and ``bracketed``: whether a level met the SLO and a higher one did
    not, or ``maxRunningRequests`` caps it (only then is ``requests`` where the replica stops meeting the SLO, rather
    than a floor or 1 for an SLO never met)."""

    requests: float
    met: bool
    basis: str
    bracketed: bool = False


def per_request(level: MeanLevelFigures) -> float:
    """Output tokens per second each request of ``level`` received: output tok/s ÷ concurrency."""
    return level.output_tokens_per_second / level.concurrency


def _at(level: MeanLevelFigures) -> str:
    return f"at {level.concurrency}: {per_request(level):.1f} tok/s"


def capacity_of(levels: Sequence[MeanLevelFigures], slo: float, replicas: int = 1,
                max_running_requests: int | None = None) -> Capacity | None:
    """The capacity per replica (module docstring) of one settings' ``levels`` for ``slo`` (tok/s per request, > 0),
    measured with each level's streams spread over ``replicas`` replicas (≥ 1), at most ``max_running_requests``
    (the revision's ``spec.memory.maxRunningRequests``, ≥ 1; None: no cap); None when no level was measured.
    Raises ``ValueError`` when ``slo`` is not positive, ``replicas`` or ``max_running_requests`` below 1."""
    if slo <= 0:
        raise ValueError(f"slo must be > 0 tok/s per request (got {slo})")
    if replicas < 1:
        raise ValueError(f"replicas must be at least 1 (got {replicas})")
    if max_running_requests is not None and max_running_requests < 1:
        raise ValueError(f"max_running_requests must be at least 1 (got {max_running_requests})")
    found = _capacity(levels, slo)
    if found is None or not found.met:
        return found
    if replicas > 1:
        found = Capacity(found.requests / replicas, True, f"{found.basis}, over {replicas} replicas", found.bracketed)
    if max_running_requests is not None and found.requests >= max_running_requests:
        found = Capacity(float(max_running_requests), True,  # exactly known: SGLang never runs more
                         f"{found.basis}, capped at maxRunningRequests {max_running_requests}", bracketed=True)
    return found


def _capacity(levels: Sequence[MeanLevelFigures], slo: float) -> Capacity | None:
    ordered = sorted(levels, key=lambda f: f.concurrency)
    if not ordered:
        return None
    kept = [f for f in ordered if per_request(f) >= slo]
    if not kept:
        first = ordered[0]
        return Capacity(1.0, False, f"{_at(first)} per request, below {slo:g} at every level measured")
    last = max(kept, key=lambda f: f.concurrency)
    after = next((f for f in ordered if f.concurrency > last.concurrency), None)
    if after is None:
        return Capacity(float(last.concurrency), True,
                        f"{_at(last)} per request (≥ {slo:g}) at the highest level measured")
    low, high = per_request(last), per_request(after)
    share = (low - slo) / (low - high) if low > high else 0.0
    requests = last.concurrency + share * (after.concurrency - last.concurrency)
    return Capacity(requests, True, f"{_at(last)}, {_at(after)} per request (SLO {slo:g})", bracketed=True)


def measured(known: KnownBest, spec: SGLangServerSpec) -> tuple[WorkloadKey, tuple[MeanLevelFigures, ...]] | None:
    """The figures per level the namespace's tunings measured for the settings ``spec`` (the serving revision's)
    runs, from one workload (module docstring); None when never measured."""
    got = measured_figures(known, spec)
    if not got:
        return None
    return max(got, key=lambda w: (len(w[1]), sum(f.measurements for f in w[1]), w[0].max_output_tokens))


def uses_measured_capacity(server: SGLangServer) -> bool:
    """Whether ``server``'s ``spec.autoscaling.metric`` is ``measuredCapacity``."""
    auto = server.spec.autoscaling
    return auto is not None and auto.metric is AutoscalingMetric.MEASURED_CAPACITY and auto.slo is not None


def capacity(known: KnownBest, server: SGLangServer, spec: SGLangServerSpec,
             revision: str | None) -> MeasuredCapacity | None:
    """``status.autoscaling.capacity`` of ``server`` whose serving revision ``revision`` runs ``spec``: None unless
    its ``spec.autoscaling.metric`` is ``measuredCapacity`` and a finished tuning measured the settings."""
    auto = server.spec.autoscaling
    if auto is None or auto.slo is None or not uses_measured_capacity(server):
        return None
    got = measured(known, spec)
    settings = server_settings(spec)
    if got is None or settings is None:
        return None
    found = capacity_of(got[1], auto.slo.min_tokens_per_second_per_request, max(got[0].replicas, 1),
                        spec.memory.max_running_requests)
    if found is None:
        return None
    tunings = list(dict.fromkeys(n for f in got[1] for n in f.tunings))[-8:]
    bracket = (CapacityBracket.BRACKETED if found.bracketed else CapacityBracket.UNBRACKETED if found.met
               else CapacityBracket.NOT_MET)
    return MeasuredCapacity(requests_per_replica=round(found.requests, 2), settings=settings.summary(),
                            revision=revision, basis=found.basis, tunings=tunings, bracket=bracket)


def target(server: SGLangServer, measured_now: MeasuredCapacity | None, stored_target: float | None,
           stored_capacity: MeasuredCapacity | None, verifying: bool) -> tuple[float | None, MeasuredCapacity | None]:
    """The target in force and the capacity to show (module docstring): ``measured_now`` the serving revision's
    capacity (:func:`capacity`), ``stored_*`` what ``status.autoscaling`` holds, ``verifying`` whether the loop
    verifies. ``(None, None)`` without ``spec.autoscaling``; ``(spec.autoscaling.target, measured_now)`` when
    ``measured_now`` does not bracket the SLO (:func:`replaces_target`)."""
    auto = server.spec.autoscaling
    if auto is None:
        return None, None
    if auto.metric is not AutoscalingMetric.MEASURED_CAPACITY:
        return auto.target, None
    if verifying and stored_target is not None:
        return stored_target, stored_capacity
    if measured_now is not None and replaces_target(measured_now):
        return measured_now.requests_per_replica, measured_now
    return auto.target, measured_now


def replaces_target(measured_now: MeasuredCapacity) -> bool:
    """Whether a measured capacity replaces ``spec.autoscaling.target``: only when its levels bracket the SLO."""
    return measured_now.bracket is CapacityBracket.BRACKETED
