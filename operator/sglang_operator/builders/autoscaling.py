"""``spec.autoscaling`` → a KEDA ``ScaledObject`` (``keda.sh/v1alpha1``, KEDA 2.18+), pure.

One ScaledObject named like the SGLangServer, in its namespace (the caller adopts it), whose ``scaleTargetRef`` is
the SGLangServer itself (``apiVersion``/``kind``/``name``): KEDA's HPA reads and writes its ``/scale``
subresource (``spec.replicas``; ``status.selector``, multi-node the leaders), never the Deployment or the
LeaderWorkerSet under it. One Prometheus trigger, with the traps of KEDA's defaults handled:

- ``metricType: AverageValue``: the query gives the server's total, the HPA divides it by ``target`` per replica
  (replicas = ⌈total ÷ target⌉); the only metric type KEDA's fallback supports (``CheckFallbackValid``).
- ``ignoreNullValues: "false"``: KEDA's default (true) reads an empty result (no series: Prometheus lost the
  targets) as 0, i.e. no load, and scales down; false makes it an error, which counts toward the fallback.
- ``fallback.behavior: currentReplicasIfHigher`` (KEDA 2.17+): after ``failureThreshold`` failed queries the count
  is the higher of the current one and ``fallback.replicas``, never lower (a static fallback can drop replicas
  below what runs, kedacore/keda#6659).
- ``advanced.horizontalPodAutoscalerConfig.behavior``: scale-up at most ``replicas`` per ``periodSeconds``;
  scale-down 1 replica per stabilisation window, never faster.
- The built-in metrics read the series the operator itself exports per server and revision
  (:data:`OPERATOR_SERIES`, ``sglang_operator_server_*{namespace, sglang_server, revision}``), written from the
  samples of the pods it owns (:mod:`sglang_operator.io.pods`: a hand-made pod carrying the server's labels is never
  sampled), multi-node of the groups' leaders only; never the pods' own series, which any pod with the server's
  labels feeds through the PodMonitor. Prometheus must scrape the operator (the chart's ServiceMonitor, or
  ``sglang-operator prometheus-config``'s ``sglang-operator`` job; ``honor_labels`` keeps the server's namespace).
- The operator's own probe is no load: with ``spec.rollback.signal: probe`` the sampler sends at most one probe
  request per revision at a time (:mod:`sglang_operator.io.sampler`), which SGLang counts in
  ``sglang:num_running_reqs`` like any request (and the operator's running gauge with it). The running-requests
  queries subtract one per revision (:func:`query`), so ``target`` counts the users' requests only, and an idle
  server with ``target: 1`` scales in.
- The trigger's ``namespace`` is the server's: KEDA adds ``&namespace=<ns>`` to its query URL, which a
  tenancy-enforcing front (prom-label-proxy, Thanos Querier's tenancy port) turns into a ``namespace`` matcher on
  every selector; Prometheus itself ignores the parameter.

:func:`pause_annotations` says which of KEDA's pause annotations hold the scaler still: ``paused-scale-in`` while
a revision is verified (scale-up stays allowed), ``paused-replicas`` at the current count while an in-place trial
measures.
"""

from __future__ import annotations

from typing import Any

from sglang_operator.api.autoscaling import (
    QUERY_NAMESPACE,
    QUERY_SERVER,
    Autoscaling,
    AutoscalingMetric,
    AutoscalingMode,
)
from sglang_operator.api.rollback import Signal
from sglang_operator.api.server import SGLangServer
from sglang_operator.builders.labels import COMPONENT_LABEL, MANAGED_BY, MANAGED_BY_LABEL, selector_labels

GROUP = "keda.sh"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
KIND = "ScaledObject"
PLURAL = "scaledobjects"
CRD_NAME = f"{PLURAL}.{GROUP}"
TRIGGER_TYPE = "prometheus"
PAUSED_SCALE_IN = "autoscaling.keda.sh/paused-scale-in"
"""KEDA 2.18+: ``"true"`` blocks scale-in (the HPA's scale-down policy becomes ``Disabled``), scale-out stays."""
PAUSED_REPLICAS = "autoscaling.keda.sh/paused-replicas"
"""KEDA: ``"<N>"`` sets the target to N replicas and stops scaling until removed."""
PAUSED = "autoscaling.keda.sh/paused"
"""KEDA's full pause; never set by the operator (removing it has left HPAs stuck, keda discussion #6800), but
listed by :func:`pause_annotations` so that a merge patch clears it."""
FALLBACK_BEHAVIOR = "currentReplicasIfHigher"
OPERATOR_SERIES: dict[AutoscalingMetric, str] = {
    AutoscalingMetric.RUNNING_REQUESTS: "sglang_operator_server_running_requests",
    AutoscalingMetric.QUEUED_REQUESTS: "sglang_operator_server_queued_requests",
    AutoscalingMetric.KV_CACHE_USAGE: "sglang_operator_server_kv_cache_usage_summed",
    AutoscalingMetric.MEASURED_CAPACITY: "sglang_operator_server_running_requests",
}
"""The operator's own gauge each built-in metric reads (:mod:`sglang_operator.process.telemetry`, one series per
server and revision: ``sglang:num_running_reqs`` and ``sglang:num_queue_reqs`` summed over the revision's pods and
data-parallel ranks, ``sglang:token_usage`` summed over its pods, each pod with its fullest rank)."""
OPERATOR_SERIES_LABELS = ("namespace", "sglang_server")
"""The labels of the operator's series naming the server (the third, ``revision``, is summed over)."""
PROBED = frozenset({AutoscalingMetric.RUNNING_REQUESTS, AutoscalingMetric.MEASURED_CAPACITY})
"""The metrics whose gauge counts the operator's probe request (:func:`query` subtracts it)."""


class MissingPrometheusAddress(ValueError):
    """Neither ``spec.autoscaling.prometheus.address`` nor the operator's ``--prometheus-address`` is set."""


def series_selector(namespace: str, name: str) -> str:
    """The PromQL label matchers of SGLangServer ``name``'s series among the operator's own:
    ``namespace="ns", sglang_server="name"``."""
    return ", ".join(f'{label}="{value}"' for label, value in zip(OPERATOR_SERIES_LABELS, (namespace, name),
                                                                  strict=True))


def query(server: SGLangServer) -> str:
    """The PromQL whose value is the server's total of ``spec.autoscaling.metric`` (one sample; none, an error to
    KEDA with ``ignoreNullValues: "false"``, while the operator has no series of the server).

    Built-in metrics: the operator's gauge (:data:`OPERATOR_SERIES`) per revision (``max by (revision)``: one
    operator's figure, should two be scraped while the Lease changes hands), summed over the revisions. For running
    requests with ``spec.rollback.signal: probe``, each revision's figure less the operator's probe, never below 0
    (at most one probe per revision is in flight, and an idle pod's gauge keeps the 1 its last probe wrote: SGLang
    writes it on prefill and every 40 decode steps only). ``query``: the user's expression with ``$namespace`` and
    ``$server`` replaced. Raises ``ValueError`` when ``spec.autoscaling`` is unset."""
    auto = _autoscaling(server)
    metric = auto.effective_metric
    if metric is AutoscalingMetric.QUERY:
        return str(auto.query).replace(QUERY_NAMESPACE, server.namespace).replace(QUERY_SERVER, server.name)
    per_revision = f"max by (revision) ({OPERATOR_SERIES[metric]}{{{series_selector(server.namespace, server.name)}}})"
    if metric in PROBED and server.spec.rollback.signal is Signal.PROBE:
        return f"sum(clamp_min({per_revision} - 1, 0))"
    return f"sum({per_revision})"


def scaled_object(server: SGLangServer, prometheus_address: str | None = None, *, verifying: bool = False,
                  trial_replicas: int | None = None, target: float | None = None) -> dict[str, Any] | None:
    """The ScaledObject of ``server`` (no ownerReferences: the caller adopts it), or None when
    ``spec.autoscaling`` is unset or its mode is ``External`` (nothing to render).

    ``prometheus_address``: the operator's default (``--prometheus-address``), used when
    ``spec.autoscaling.prometheus`` is unset. ``verifying``, ``trial_replicas``: as :func:`pause_annotations` (the
    annotations set are rendered, the others left out). ``target``: the threshold per replica in force when it is
    not ``spec.autoscaling.target`` (``measuredCapacity``: the serving revision's measured capacity). Raises
    :class:`MissingPrometheusAddress` when neither address is set. Shape: ``keda.sh/v1alpha1`` ScaledObject with
    ``scaleTargetRef``, ``minReplicaCount``, ``maxReplicaCount``, one ``prometheus`` trigger, ``fallback`` and
    ``advanced``.
    """
    auto = server.spec.autoscaling
    if auto is None or auto.mode is AutoscalingMode.EXTERNAL:
        return None
    address = auto.prometheus.address if auto.prometheus is not None else prometheus_address
    if not address:
        raise MissingPrometheusAddress(
            "spec.autoscaling.prometheus.address is not set and the operator has no --prometheus-address (the "
            "chart's autoscaling.prometheusAddress): set one of them to Prometheus' URL, e.g. "
            "http://prometheus-operated.monitoring.svc:9090")
    annotations = {k: v for k, v in pause_annotations(verifying, trial_replicas).items() if v is not None}
    metadata: dict[str, Any] = {"name": server.name, "namespace": server.namespace,
                                "labels": {**selector_labels(server.name), COMPONENT_LABEL: "autoscaler",
                                           MANAGED_BY_LABEL: MANAGED_BY}}
    if annotations:
        metadata["annotations"] = annotations
    fallback = auto.effective_fallback
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": metadata,
        "spec": {
            "scaleTargetRef": {"apiVersion": server.api_version, "kind": server.kind, "name": server.name},
            "minReplicaCount": auto.effective_min_replicas,
            "maxReplicaCount": auto.max_replicas,
            "triggers": [{
                "type": TRIGGER_TYPE,
                "metricType": "AverageValue",
                "metadata": {
                    "serverAddress": address,
                    "query": query(server),
                    "threshold": threshold(target if target is not None else auto.target),
                    "ignoreNullValues": "false",
                    "namespace": server.namespace,
                },
            }],
            "fallback": {
                "failureThreshold": fallback.failure_threshold,
                "replicas": fallback.replicas if fallback.replicas is not None else auto.effective_min_replicas,
                "behavior": FALLBACK_BEHAVIOR,
            },
            "advanced": {"horizontalPodAutoscalerConfig": {"behavior": hpa_behavior(auto)}},
        },
    }


def hpa_behavior(auto: Autoscaling) -> dict[str, Any]:
    """The HPA ``behavior`` (``autoscaling/v2`` HorizontalPodAutoscalerBehavior) of ``auto.behavior``: scale-up
    ``replicas`` per ``periodSeconds`` after its window; scale-down 1 replica per window (its policy's period is the
    window, so no more than one replica goes per window)."""
    up, down = auto.effective_behavior.scale_up, auto.effective_behavior.scale_down
    return {
        "scaleUp": {"stabilizationWindowSeconds": up.stabilization_window_seconds, "selectPolicy": "Max",
                    "policies": [{"type": "Pods", "value": up.replicas, "periodSeconds": up.period_seconds}]},
        "scaleDown": {"stabilizationWindowSeconds": down.stabilization_window_seconds, "selectPolicy": "Max",
                      "policies": [{"type": "Pods", "value": 1, "periodSeconds": down.stabilization_window_seconds}]},
    }


def pause_annotations(verifying: bool, trial_replicas: int | None) -> dict[str, str | None]:
    """KEDA's pause annotations for the server's state, every one of them named (None: to be absent, as a JSON merge
    patch removes it).

    - ``trial_replicas`` (an in-place tuning trial measures on that many replicas): ``paused-replicas`` at that count
      (scaling stops entirely; KEDA keeps the target at it);
    - else ``verifying`` (a revision warms up or verifies, a canary runs): ``paused-scale-in: "true"`` (no replica
      is removed while verifying; scale-up stays allowed);
    - else none. ``paused`` is never set.

    Raises ``ValueError`` when ``trial_replicas`` is negative.
    """
    if trial_replicas is not None and trial_replicas < 0:
        raise ValueError(f"trial_replicas must be >= 0 (got {trial_replicas})")
    out: dict[str, str | None] = {PAUSED: None, PAUSED_REPLICAS: None, PAUSED_SCALE_IN: None}
    if trial_replicas is not None:
        out[PAUSED_REPLICAS] = str(trial_replicas)
    elif verifying:
        out[PAUSED_SCALE_IN] = "true"
    return out


def _autoscaling(server: SGLangServer) -> Autoscaling:
    if server.spec.autoscaling is None:
        raise ValueError(f"SGLangServer {server.name} has no spec.autoscaling")
    return server.spec.autoscaling


def threshold(value: float | None) -> str:
    """A threshold as KEDA reads it (a string parsed as float64): ``4``, ``0.75``."""
    return f"{value:g}" if value is not None else ""
