"""``spec.autoscaling``: how many replicas an SGLangServer runs, decided by an autoscaler on SGLang's load.

``mode: KEDA`` (the default): the operator renders a KEDA ``ScaledObject`` (``keda.sh/v1alpha1``,
``builders/autoscaling.py``) owned by the SGLangServer and targeting its ``/scale`` subresource; KEDA's HPA moves
the replica count between ``minReplicas`` and ``maxReplicas`` so that ``metric`` per serving replica stays near
``target``. ``mode: External``: the user owns the HPA or ScaledObject; the operator renders none, and the other
fields are refused (nothing would use them). ``docs/autoscaling.md`` has the queries and the traps handled.
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any

from pydantic import Field, StringConstraints

from sglang_operator.api.base import ApiModel, CelRule, StatusModel

QUERY_NAMESPACE = "$namespace"
"""Replaced in ``spec.autoscaling.query`` by the SGLangServer's namespace."""
QUERY_SERVER = "$server"
"""Replaced in ``spec.autoscaling.query`` by the SGLangServer's name (the ``sglang_server`` label of its series)."""


class AutoscalingMode(StrEnum):
    """Who scales the server."""

    KEDA = "KEDA"
    """The operator renders a KEDA ScaledObject (KEDA 2.18 or later installed in the cluster)."""
    EXTERNAL = "External"
    """The user's own HPA or ScaledObject targets the SGLangServer's ``/scale`` subresource; nothing is rendered."""


class AutoscalingMetric(StrEnum):
    """What the autoscaler keeps near ``target`` per serving replica (SGLang's gauges, summed over the server's
    pods; multi-node: over the leaders, the only ranks serving real ``/metrics``)."""

    RUNNING_REQUESTS = "runningRequests"
    """Requests running in the batch, ``sglang:num_running_reqs``, count per replica."""
    QUEUED_REQUESTS = "queuedRequests"
    """Requests waiting in the scheduler's queue, ``sglang:num_queue_reqs``, count per replica."""
    KV_CACHE_USAGE = "kvCacheUsage"
    """Used share of the KV-cache token pool, ``sglang:token_usage`` (0 … 1; the largest of a pod's data-parallel
    ranks), per replica."""
    QUERY = "query"
    """The PromQL expression in ``query``, whose value is the server's total (divided by ``target`` per replica);
    off unless the admin allows it (the chart's ``autoscaling.allowQueryMetric``), and then held to the server's own
    namespace."""
    MEASURED_CAPACITY = "measuredCapacity"
    """Requests running, as ``runningRequests``, against a target measured per serving revision: the highest
    concurrency at which the revision's settings keep ``slo.minTokensPerSecondPerRequest``, from the namespace's
    finished SGLangTunings (``docs/autoscaling.md``, "A target from measured speed"); ``target`` until measured."""


ADDRESS_BEYOND_HOST = r"^https?://[^/?#@]*[/?#@]"
"""What ``spec.autoscaling.prometheus.address`` may not match: anything after the host and port (a path, a query, a
fragment) or user info before it. KEDA GETs ``<address>/api/v1/query?…``: with a path and a ``#`` the spec would
choose the whole URL KEDA's pod requests (``docs/security.md``, "Autoscaling")."""
_ADDRESS_HOST_ONLY = ("name Prometheus by scheme, host and port only (no path, query, fragment or user info), e.g. "
                      "http://prometheus-operated.monitoring.svc:9090: KEDA adds the path /api/v1/query itself")


class PrometheusServer(ApiModel):
    """The Prometheus KEDA queries: one of the addresses the cluster's admin allows (the chart's
    ``autoscaling.allowedPrometheusAddresses`` and ``autoscaling.prometheusAddress``; ``docs/security.md``)."""

    address: Annotated[str, StringConstraints(pattern=r"^https?://\S+$", max_length=512)]
    """Base URL of Prometheus' HTTP API, scheme, host and port only, e.g.
    ``http://prometheus-operated.monitoring.svc:9090`` (KEDA's ``serverAddress``)."""

    cel_rules = (
        CelRule(
            f"!self.address.matches('{ADDRESS_BEYOND_HOST}')",
            f"spec.autoscaling.prometheus.address: {_ADDRESS_HOST_ONLY}",
            lambda m: re.match(ADDRESS_BEYOND_HOST, m.address) is None,
            ".address",
            message_expression=f"'spec.autoscaling.prometheus.address is ' + self.address + ': {_ADDRESS_HOST_ONLY}'",
            explain=lambda m: f"spec.autoscaling.prometheus.address is {m.address}: {_ADDRESS_HOST_ONLY}",
            name="autoscaling-prometheus-address-host-only",
        ),
    )


class ServiceLevel(ApiModel):
    """What each request must get, for ``metric: measuredCapacity``."""

    min_tokens_per_second_per_request: Annotated[float, Field(gt=0, le=10000)]
    """Output tokens per second each of the concurrent requests receives at least, time in the queue and the first
    token included: a tuning level's output tok/s ÷ its concurrency. A replica's measured capacity is the highest
    concurrency at which its revision's settings were measured at or above it."""


class ScaleUp(ApiModel):
    """How fast replicas are added (the HPA's ``behavior.scaleUp``). A replica loads its model for minutes before it
    serves, so the defaults add at most 2 replicas per 5 minutes, after load has stayed high for a minute."""

    stabilization_window_seconds: Annotated[int, Field(ge=0, le=3600)] = 60
    """Seconds the HPA looks back before adding replicas: it adds only what every recommendation of that window
    asked for (a burst shorter than it adds nothing)."""
    replicas: Annotated[int, Field(ge=1, le=1000)] = 2
    """Replicas added at most per ``periodSeconds`` (an HPA policy of type ``Pods``; multi-node: groups)."""
    period_seconds: Annotated[int, Field(ge=1, le=1800)] = 300
    """Seconds of that policy (the HPA's ``periodSeconds``, at most 1800)."""


class ScaleDown(ApiModel):
    """How fast replicas are removed (the HPA's ``behavior.scaleDown``): never faster than one replica per
    ``stabilizationWindowSeconds``."""

    stabilization_window_seconds: Annotated[int, Field(ge=1, le=1800)] = 600
    """Seconds the HPA looks back before removing replicas (it keeps the highest recommendation of the window),
    and the period of its only policy: 1 replica per this many seconds."""


class ScalingBehavior(ApiModel):
    """Scale-up and scale-down rates (rendered as ``advanced.horizontalPodAutoscalerConfig.behavior``)."""

    scale_up: ScaleUp = Field(default_factory=ScaleUp, json_schema_extra={"default": {}})
    """Adding replicas: default at most 2 per 300 s after a 60 s window."""
    scale_down: ScaleDown = Field(default_factory=ScaleDown, json_schema_extra={"default": {}})
    """Removing replicas: default 1 per 600 s."""


class AutoscalingFallback(ApiModel):
    """What KEDA does when the query fails ``failureThreshold`` times in a row (Prometheus down, an empty result):
    the replica count becomes the higher of the current one and ``replicas`` (KEDA's ``fallback`` with ``behavior:
    currentReplicasIfHigher``, KEDA 2.17+): a lost metric never removes replicas."""

    failure_threshold: Annotated[int, Field(ge=1, le=100)] = 3
    """Failed queries in a row before the fallback applies, count (KEDA queries on every HPA sync, 15 s by default)."""
    replicas: Annotated[int | None, Field(ge=1, le=1000)] = None
    """Replicas at least while the fallback applies; default ``minReplicas`` (the current count is kept)."""


_KEDA_ONLY = ("minReplicas", "maxReplicas", "metric", "target", "query", "slo", "prometheus", "behavior", "fallback")
_FIRST_SET_CEL = "[" + ", ".join(f"has(self.{f}) ? '{f}' : ''" for f in _KEDA_ONLY) + "].filter(f, f != '')[0]"


def _first_keda_only(m: Autoscaling) -> str:
    return next(f for f in _KEDA_ONLY if m.model_fields_set & {_snake(f)})


def _snake(name: str) -> str:
    return "".join(f"_{c.lower()}" if c.isupper() else c for c in name)


def _number(value: float | None) -> str:
    """A number as CEL's ``string(double)`` writes it (``4``, ``0.75``)."""
    return f"{value:g}" if value is not None else ""


def _external_refusal(m: Autoscaling) -> str:
    return (f"spec.autoscaling.mode is External (your own HPA or ScaledObject scales the SGLangServer through its "
            f"/scale subresource) but spec.autoscaling.{_first_keda_only(m)} is set: the operator renders no scaler "
            "that would use it; remove it, or set mode: KEDA")


def _with_metric(field: str, metric: AutoscalingMetric, use: str, needed: str, name: str) -> CelRule:
    """The rule that ``spec.autoscaling.<field>`` is set exactly when ``metric`` is ``metric``: ``use`` says what
    the field serves (refusal of the field without the metric), ``needed`` what to set (the metric without it)."""
    value = metric.value

    def explain(m: Autoscaling) -> str:
        if getattr(m, field) is not None:
            return (f"spec.autoscaling.{field} is set but metric is {m.effective_metric.value}: {use}; set metric: "
                    f"{value} or remove {field}")
        return f"spec.autoscaling.metric is {value} but {field} is not set: {needed}"

    return CelRule(
        f"has(self.{field}) == (has(self.metric) && self.metric == '{value}')",
        f"spec.autoscaling.{field} is set exactly when metric is {value}",
        lambda m: (getattr(m, field) is not None) == (m.metric is metric),
        f".{field}",
        message_expression=f"has(self.{field}) ? 'spec.autoscaling.{field} is set but metric is %s: {use}; set "
        f"metric: {value} or remove {field}'.format([has(self.metric) ? self.metric : 'runningRequests']) : "
        f"'spec.autoscaling.metric is {value} but {field} is not set: {needed}'",
        explain=explain,
        name=name,
    )


def _min_cel(path: str = "self") -> str:
    return f"(has({path}.minReplicas) ? {path}.minReplicas : 1)"


class Autoscaling(ApiModel):
    """``spec.autoscaling``: the replica count follows SGLang's load (``docs/autoscaling.md``). While it is set,
    ``spec.replicas`` is only the count the server starts with: the autoscaler's count is the server's."""

    mode: AutoscalingMode = AutoscalingMode.KEDA
    """``KEDA`` (default: the operator renders a ScaledObject) or ``External`` (your own scaler; set nothing
    else)."""
    min_replicas: Annotated[int | None, Field(ge=1, le=1000)] = None
    """Fewest replicas (KEDA's ``minReplicaCount``); default 1. Scaling to zero is not offered: a replica takes
    minutes to load its model."""
    max_replicas: Annotated[int | None, Field(ge=1, le=1000)] = None
    """Most replicas (``maxReplicaCount``); required with mode KEDA."""
    metric: AutoscalingMetric | None = None
    """``runningRequests`` (default), ``queuedRequests``, ``kvCacheUsage``, ``query`` or ``measuredCapacity``."""
    target: Annotated[float | None, Field(gt=0, le=1000000)] = None
    """The metric's value per serving replica that the replica count aims at (the HPA's ``AverageValue``: replicas
    = ⌈server total ÷ target⌉); required with mode KEDA; at most 1 for ``kvCacheUsage``; with
    ``measuredCapacity``, the running requests per replica until the serving revision's capacity is measured."""
    query: Annotated[str | None, Field(min_length=1, max_length=2048)] = None
    """With ``metric: query`` (where the admin allows it: the chart's ``autoscaling.allowQueryMetric``): a PromQL
    expression giving the server's total (one sample), in which ``$namespace`` and ``$server`` are replaced by the
    SGLangServer's namespace and name; every selector carries ``namespace="$namespace"`` and the word ``namespace``
    appears nowhere else (``docs/autoscaling.md``), e.g.
    ``sum(rate(sglang:generation_tokens_total{namespace="$namespace", sglang_server="$server"}[1m]))``."""
    slo: ServiceLevel | None = None
    """With ``metric: measuredCapacity`` (and only then): what each request must get."""
    prometheus: PrometheusServer | None = None
    """The Prometheus KEDA queries; default the operator's ``--prometheus-address`` (the chart's
    ``autoscaling.prometheusAddress``)."""
    behavior: ScalingBehavior | None = None
    """Scale-up and scale-down rates; default 2 replicas per 300 s up (after 60 s), 1 per 600 s down."""
    fallback: AutoscalingFallback | None = None
    """When the query fails: default after 3 failures, keep the current count (never fewer)."""

    cel_rules = (
        CelRule(
            f"self.mode != 'External' || !({' || '.join(f'has(self.{f})' for f in _KEDA_ONLY)})",
            "spec.autoscaling.mode External takes no other field (your own HPA or ScaledObject scales the server)",
            lambda m: m.mode is not AutoscalingMode.EXTERNAL or not m.model_fields_set & set(map(_snake, _KEDA_ONLY)),
            message_expression="'spec.autoscaling.mode is External (your own HPA or ScaledObject scales the "
            "SGLangServer through its /scale subresource) but spec.autoscaling.%s is set: the operator renders no "
            f"scaler that would use it; remove it, or set mode: KEDA'.format([{_FIRST_SET_CEL}])",
            explain=_external_refusal,
            name="autoscaling-external-alone",
        ),
        CelRule(
            "self.mode != 'KEDA' || (has(self.maxReplicas) && has(self.target))",
            "spec.autoscaling with mode KEDA needs maxReplicas and target",
            lambda m: m.mode is not AutoscalingMode.KEDA or (m.max_replicas is not None and m.target is not None),
            message_expression="'spec.autoscaling.mode is KEDA but %s is not set: the ScaledObject needs "
            "maxReplicas (its maxReplicaCount) and target (the metric per replica); set it'.format(["
            "!has(self.maxReplicas) ? 'maxReplicas' : 'target'])",
            explain=lambda m: "spec.autoscaling.mode is KEDA but "
            f"{'maxReplicas' if m.max_replicas is None else 'target'} is not set: the ScaledObject needs maxReplicas "
            "(its maxReplicaCount) and target (the metric per replica); set it",
            name="autoscaling-keda-needs-max-and-target",
        ),
        CelRule(
            f"!has(self.maxReplicas) || {_min_cel()} <= self.maxReplicas",
            "spec.autoscaling.minReplicas must not exceed maxReplicas",
            lambda m: m.max_replicas is None or m.effective_min_replicas <= m.max_replicas,
            ".maxReplicas",
            message_expression="'spec.autoscaling.maxReplicas is %d but minReplicas is %d; set maxReplicas to at "
            f"least %d'.format([self.maxReplicas, {_min_cel()}, {_min_cel()}])",
            explain=lambda m: f"spec.autoscaling.maxReplicas is {m.max_replicas} but minReplicas is "
            f"{m.effective_min_replicas}; set maxReplicas to at least {m.effective_min_replicas}",
            name="autoscaling-min-within-max",
        ),
        _with_metric("query", AutoscalingMetric.QUERY, "a query is used with metric: query only",
                     "set query to a PromQL expression", "autoscaling-query-with-metric-query"),
        _with_metric("slo", AutoscalingMetric.MEASURED_CAPACITY,
                     "the SLO sets the measured capacity of metric: measuredCapacity only",
                     "set slo.minTokensPerSecondPerRequest, e.g. 20", "autoscaling-slo-with-measured-capacity"),
        CelRule(
            "!has(self.target) || !has(self.metric) || self.metric != 'kvCacheUsage' || self.target <= 1.0",
            "spec.autoscaling.target of kvCacheUsage is a share of the KV cache, at most 1",
            lambda m: m.target is None or m.metric is not AutoscalingMetric.KV_CACHE_USAGE or m.target <= 1,
            ".target",
            message_expression="'spec.autoscaling.target is %s but metric kvCacheUsage is a share of the KV-cache "
            "pool (0 … 1); set target to at most 1, e.g. 0.8'.format([string(self.target)])",
            explain=lambda m: f"spec.autoscaling.target is {_number(m.target)} but metric kvCacheUsage is a share of "
            "the KV-cache pool (0 … 1); set target to at most 1, e.g. 0.8",
            name="autoscaling-kv-cache-usage-share",
        ),
        CelRule(
            "!has(self.fallback) || !has(self.fallback.replicas) || !has(self.maxReplicas) || "
            f"({_min_cel()} <= self.fallback.replicas && self.fallback.replicas <= self.maxReplicas)",
            "spec.autoscaling.fallback.replicas must be within minReplicas and maxReplicas",
            lambda m: m.fallback is None or m.fallback.replicas is None or m.max_replicas is None
            or m.effective_min_replicas <= m.fallback.replicas <= m.max_replicas,
            ".fallback.replicas",
            message_expression="'spec.autoscaling.fallback.replicas is %d but minReplicas … maxReplicas is %d … %d; "
            f"set it within them'.format([self.fallback.replicas, {_min_cel()}, self.maxReplicas])",
            explain=lambda m: f"spec.autoscaling.fallback.replicas is {m.fallback.replicas} but minReplicas … "
            f"maxReplicas is {m.effective_min_replicas} … {m.max_replicas}; set it within them",
            name="autoscaling-fallback-within-range",
        ),
    )

    @property
    def effective_min_replicas(self) -> int:
        """``minReplicas`` or its default 1."""
        return self.min_replicas if self.min_replicas is not None else 1

    @property
    def effective_metric(self) -> AutoscalingMetric:
        """``metric`` or its default ``runningRequests``."""
        return self.metric or AutoscalingMetric.RUNNING_REQUESTS

    @property
    def effective_behavior(self) -> ScalingBehavior:
        """``behavior`` or its defaults."""
        return self.behavior or ScalingBehavior()

    @property
    def effective_fallback(self) -> AutoscalingFallback:
        """``fallback`` or its defaults."""
        return self.fallback or AutoscalingFallback()


def _canary_min(spec: Any) -> int:
    return int(spec.autoscaling.effective_min_replicas)


CANARY_RULE = CelRule(
    "!has(self.autoscaling) || !has(self.strategy) || self.strategy.type != 'Canary' || "
    f"self.autoscaling.mode != 'KEDA' || {_min_cel('self.autoscaling')} >= 2",
    "spec.autoscaling.minReplicas must be at least 2 with spec.strategy.type Canary (a stable replica serves beside "
    "the canary)",
    lambda s: s.autoscaling is None or s.strategy.type.value != "Canary"
    or s.autoscaling.mode is not AutoscalingMode.KEDA or _canary_min(s) >= 2,
    ".autoscaling.minReplicas",
    message_expression="'spec.autoscaling.minReplicas is %d but spec.strategy.type is Canary: a canary runs beside "
    f"stable replicas, so it needs at least 2; set minReplicas to 2 or more'.format([{_min_cel('self.autoscaling')}])",
    explain=lambda s: f"spec.autoscaling.minReplicas is {_canary_min(s)} but spec.strategy.type is Canary: a canary "
    "runs beside stable replicas, so it needs at least 2; set minReplicas to 2 or more",
    name="autoscaling-canary-min-replicas",
)
"""The rule of ``SGLangServerSpec`` tying ``spec.autoscaling`` to ``spec.strategy`` (declared here, listed there)."""


class AutoscalingPause(StrEnum):
    """How the server's loop holds its autoscaler still (``status.autoscaling.pause``)."""

    SCALE_IN = "ScaleIn"
    """A revision warms up or verifies, or a canary runs: no replica is removed, replicas may be added (KEDA's
    ``autoscaling.keda.sh/paused-scale-in: "true"``)."""
    REPLICAS = "Replicas"
    """An InPlace tuning's trial is measured: the count stays at ``pausedReplicas`` (KEDA's
    ``autoscaling.keda.sh/paused-replicas``)."""


class ScaleTarget(StatusModel):
    """The object whose ``/scale`` subresource an autoscaler moves: the SGLangServer itself (its ``spec.replicas``;
    multi-node it counts LeaderWorkerSet groups, ``status.selector`` selects the leaders)."""

    api_version: str
    """``sglang-operator.io/v1alpha1``."""
    kind: str
    """``SGLangServer``."""
    name: str
    """The SGLangServer's name."""


class CapacityBracket(StrEnum):
    """How the levels measured bound a capacity (``status.autoscaling.capacity.bracket``, ``decisions/capacity.py``)."""

    BRACKETED = "Bracketed"
    """A level met the SLO and a higher one did not (or the revision's ``maxRunningRequests`` caps it): the
    capacity is where the SLO stops being met, and it replaces ``spec.autoscaling.target``."""
    UNBRACKETED = "Unbracketed"
    """Every level met the SLO: the capacity is at least the highest level measured, a floor; the configured
    ``target`` holds."""
    NOT_MET = "NotMet"
    """No level met the SLO: the configured ``target`` holds and the ``Autoscaling`` condition warns."""


class MeasuredCapacity(StatusModel):
    """A revision's capacity per replica: the highest concurrency at which its speculative settings were measured to
    give each request at least ``slo.minTokensPerSecondPerRequest`` (``decisions/capacity.py``)."""

    requests_per_replica: Annotated[float, Field(gt=0)]
    """Concurrent requests per replica, interpolated linearly between the measured levels around the SLO; the
    highest level measured when every level keeps it; 1 when none does."""
    settings: str
    """The settings measured, ``steps/topk/draft tokens`` (e.g. ``3/1/4``)."""
    revision: str | None = None
    """The serving revision it belongs to (``status.revision`` when it was decided)."""
    basis: str
    """How it was found: the levels and their per-request figures around the SLO, e.g. ``at 4: 23.8 tok/s, at 6:
    20.2 tok/s per request (≥ 20)``."""
    tunings: list[str] = Field(default_factory=list, max_length=8)
    """The SGLangTunings whose trials measured it."""
    bracket: CapacityBracket | None = None
    """Whether the levels bracket the SLO (:class:`CapacityBracket`); only a ``Bracketed`` capacity becomes the
    target. Unset in a status written before it existed (read as not bracketed)."""



class AutoscalingStatus(StatusModel):
    """What the server's loop says to its autoscaler (``status.autoscaling``), for KEDA mode's ScaledObject and for
    the user's own scaler in External mode alike."""

    mode: AutoscalingMode
    """``KEDA`` (the operator applies the ScaledObject) or ``External`` (the user's HPA or ScaledObject)."""
    scale_target: ScaleTarget
    """The ``/scale`` subresource to target."""
    scaled_object: str | None = None
    """The name of the ScaledObject the operator applied (mode KEDA), unset while none is (KEDA not installed, no
    Prometheus address, refused: condition ``Autoscaling`` says why)."""
    judging: bool = False
    """Whether the server's loop judges now: a revision warming up or verifying, a canary running, an InPlace
    tuning's trial measured. A user's own scaler should not scale in while it is true."""
    pause: AutoscalingPause | None = None
    """The pause in force (KEDA mode: on the ScaledObject; External: what the user's scaler should hold), unset
    when scaling is free."""
    paused_replicas: Annotated[int | None, Field(ge=0)] = None
    """With pause ``Replicas``: the count held (``spec.replicas`` when the pause was decided)."""
    target: Annotated[float | None, Field(gt=0)] = None
    """The target per serving replica in force (KEDA mode): ``spec.autoscaling.target``, or with
    ``measuredCapacity`` the serving revision's measured capacity once the levels bracket the SLO (``capacity.bracket``
    ``Bracketed``)."""
    capacity: MeasuredCapacity | None = None
    """With ``measuredCapacity``: the serving revision's measured capacity (bracketed or not: what was measured),
    unset until a finished SGLangTuning of the namespace measured its settings on its setup."""
