"""The KEDA ScaledObject of ``spec.autoscaling`` (builders/autoscaling.py): its target is the SGLangServer's own
``/scale``, its trigger handles KEDA's traps (AverageValue, ignoreNullValues false, fallback never below the current
count) and names the server's namespace, its query reads the operator's own series of the server (never the pods',
which any labelled pod feeds) and is what Prometheus reads from those series, its HPA behaviour never removes more
than one replica per window; the pause annotations follow the verifying and trial flags."""

from __future__ import annotations

import copy
import math
import re
from typing import Any

import pytest

from e2e.tests.test_invalid_specs import valid_server
from sglang_operator.api import parse
from sglang_operator.api.server import SGLangServer
from sglang_operator.builders import autoscaling as so

PROM = "http://prometheus-operated.monitoring.svc:9090"


def server(autoscaling: dict[str, Any] | None, **spec: Any) -> SGLangServer:
    body = valid_server()
    body["metadata"]["namespace"] = "team-a"
    if autoscaling is not None:
        body["spec"]["autoscaling"] = autoscaling
    body["spec"].update(spec)
    return parse(body)


BASIC = {"minReplicas": 1, "maxReplicas": 3, "metric": "runningRequests", "target": 4}


def test_the_scaled_object_targets_the_servers_own_scale_subresource() -> None:
    out = so.scaled_object(server(BASIC), PROM)
    assert out is not None
    assert (out["apiVersion"], out["kind"]) == ("keda.sh/v1alpha1", "ScaledObject")
    assert out["metadata"]["name"] == "qwen36-27b" and out["metadata"]["namespace"] == "team-a"
    assert "ownerReferences" not in out["metadata"]  # the caller adopts it
    assert out["spec"]["scaleTargetRef"] == {"apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangServer",
                                             "name": "qwen36-27b"}
    assert (out["spec"]["minReplicaCount"], out["spec"]["maxReplicaCount"]) == (1, 3)


def test_the_trigger_handles_kedas_traps() -> None:
    out = so.scaled_object(server(BASIC), PROM)
    assert out is not None
    [trigger] = out["spec"]["triggers"]
    assert trigger["type"] == "prometheus" and trigger["metricType"] == "AverageValue"
    meta = trigger["metadata"]
    assert meta["ignoreNullValues"] == "false"  # KEDA's default true reads "no series" as zero load
    assert meta["serverAddress"] == PROM and meta["threshold"] == "4"
    assert all(isinstance(v, str) for v in meta.values())  # trigger metadata is map[string]string
    assert out["spec"]["fallback"] == {"failureThreshold": 3, "replicas": 1, "behavior": "currentReplicasIfHigher"}


SEL = 'namespace="team-a", sglang_server="qwen36-27b"'
RUNNING = f"max by (revision) (sglang_operator_server_running_requests{{{SEL}}})"


@pytest.mark.parametrize(("metric", "signal", "expected"), [
    ("runningRequests", "probe", f"sum(clamp_min({RUNNING} - 1, 0))"),
    ("measuredCapacity", "probe", f"sum(clamp_min({RUNNING} - 1, 0))"),
    ("runningRequests", "traffic", f"sum({RUNNING})"),
    ("queuedRequests", "probe", f"sum(max by (revision) (sglang_operator_server_queued_requests{{{SEL}}}))"),
    ("kvCacheUsage", "probe", f"sum(max by (revision) (sglang_operator_server_kv_cache_usage_summed{{{SEL}}}))"),
])
def test_built_in_metrics_read_the_operators_own_series(metric: str, signal: str, expected: str) -> None:
    """Issue 47: the operator's series of the server (written from the pods it owns), never the pods' own series,
    which a hand-made pod with the server's labels feeds; the running requests less the operator's probe (one per
    revision) when it probes (signal ``probe``)."""
    extra = {"slo": {"minTokensPerSecondPerRequest": 20}} if metric == "measuredCapacity" else {}
    target = {"target": 0.8} if metric == "kvCacheUsage" else {}
    got = so.query(server({**BASIC, "metric": metric, **extra, **target}, rollback={"signal": signal}))
    assert got == expected
    assert "sglang:" not in got


def test_the_operator_exports_every_series_the_queries_read() -> None:
    """Each gauge of :data:`OPERATOR_SERIES` is one of the operator's own (``process/telemetry.py``), labelled by
    server and revision."""
    from prometheus_client.metrics import MetricWrapperBase

    from sglang_operator.process import telemetry

    exported = {m._name: m._labelnames for m in vars(telemetry).values() if isinstance(m, MetricWrapperBase)}
    for name in set(so.OPERATOR_SERIES.values()):
        assert exported.get(name) == telemetry.SERVER_LABELS, name
    assert set(so.OPERATOR_SERIES_LABELS) < set(telemetry.SERVER_LABELS)


def test_the_trigger_names_the_servers_namespace_for_a_tenancy_enforcing_front() -> None:
    """KEDA adds ``&namespace=<ns>`` to the query URL (prom-label-proxy, Thanos Querier's tenancy port)."""
    for spec in (BASIC, {**BASIC, "metric": "query", "target": 5,
                         "query": 'sum(up{namespace="$namespace", sglang_server="$server"})'}):
        out = so.scaled_object(server(spec), PROM)
        assert out is not None and out["spec"]["triggers"][0]["metadata"]["namespace"] == "team-a"


def test_an_idle_server_with_target_one_scales_in_despite_the_probe() -> None:
    """Issue 41: each idle pod's gauge keeps the 1 its last probe wrote (SGLang writes it on prefill and every 40
    decode steps only), so the operator's sum over a revision's pods reads its pods' count, and a probe may be in
    flight on one pod per revision; ``target: 1`` must still let the HPA (⌈total ÷ target⌉) go down one replica per
    window to 1, and a loaded server count its users' requests."""
    q = so.query(server({**BASIC, "target": 1}))
    assert [math.ceil(evaluate(q, [exported("abc", n)]) / 1) for n in (3, 2, 1)] == [2, 1, 0]  # never held at n
    assert evaluate(q, [exported("abc", 5 + 1 + 3)]) == 8  # 5 + the probe on one pod, 3 on the other
    assert evaluate(so.query(server({**BASIC, "target": 1}, rollback={"signal": "traffic"})),
                    [exported("abc", 3)]) == 3


def test_every_revision_counts_less_its_own_probe() -> None:
    """A canary's revision beside the stable one: each less its probe, an idle one (its gauge refreshed to 0) never
    below 0, so it takes nothing from the other's users."""
    q = so.query(server(BASIC))
    assert evaluate(q, [exported("stable", 4 + 2 + 1), exported("canary", 1)]) == 6
    assert evaluate(q, [exported("stable", 5), exported("canary", 0)]) == 4
    assert evaluate(q, [exported("stable", 5), exported("stable", 5, namespace="team-b"),
                        exported("stable", 5, server_name="other")]) == 4  # another server's series: not read
    assert math.isnan(evaluate(q, []))  # no series: no value (an error to KEDA, which holds the count)


def test_multi_node_reads_the_same_series() -> None:
    """The operator samples each group's leader only (a worker rank's ``/metrics`` is a dummy server's), so a
    multi-node server's query is a single-node one's."""
    two_node = server(BASIC, parallelism={"tensor": 16, "nodes": 2}, resources={"gpu": 8})
    assert so.query(two_node) == so.query(server(BASIC))


def test_a_users_query_gets_namespace_and_server_filled_in() -> None:
    user = 'sum(rate(sglang:generation_tokens_total{namespace="$namespace", sglang_server="$server"}[1m]))'
    q = so.query(server({**BASIC, "metric": "query", "query": user, "target": 500}))
    assert q == 'sum(rate(sglang:generation_tokens_total{namespace="team-a", sglang_server="qwen36-27b"}[1m]))'


def evaluate(query: str, series: list[dict[str, str]]) -> float:
    """``sum(max by (revision) (G))`` or ``sum(clamp_min(max by (revision) (G) - 1, 0))`` over ``series`` (each a
    label set with ``__name__`` and ``value``), as Prometheus evaluates the built-in queries (equality matchers
    only); NaN for an empty result."""
    gauge = r"max by \(revision\) \(([a-z_:]+)\{([^}]*)\}\)"
    m = re.fullmatch(rf"sum\({gauge}\)", query)
    probed = re.fullmatch(rf"sum\(clamp_min\({gauge} - 1, 0\)\)", query)
    assert m is not None or probed is not None, query
    name, selector = (m or probed).group(1, 2)  # type: ignore[union-attr]
    matchers = dict(re.findall(r'(\w+)="([^"]*)"', selector))
    chosen = [s for s in series if s["__name__"] == name and all(s.get(k) == v for k, v in matchers.items())]
    if not chosen:
        return math.nan
    per_revision: dict[str, float] = {}
    for s in chosen:
        per_revision[s["revision"]] = max(per_revision.get(s["revision"], -math.inf), float(s["value"]))
    return sum(max(v - 1, 0.0) if probed is not None else v for v in per_revision.values())


def exported(revision: str, value: float, namespace: str = "team-a",
             server_name: str = "qwen36-27b") -> dict[str, str]:
    """The operator's running-requests series of one revision, as its scrape (``honor_labels``) keeps it."""
    return {"__name__": "sglang_operator_server_running_requests", "namespace": namespace,
            "sglang_server": server_name, "revision": revision, "job": "sglang-operator", "value": str(value)}


def test_behaviour_defaults_respect_start_up_and_remove_one_replica_per_window() -> None:
    out = so.scaled_object(server(BASIC), PROM)
    assert out is not None
    behavior = out["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleUp"] == {"stabilizationWindowSeconds": 60, "selectPolicy": "Max",
                                   "policies": [{"type": "Pods", "value": 2, "periodSeconds": 300}]}
    assert behavior["scaleDown"] == {"stabilizationWindowSeconds": 600, "selectPolicy": "Max",
                                     "policies": [{"type": "Pods", "value": 1, "periodSeconds": 600}]}


def test_behaviour_and_fallback_follow_the_spec() -> None:
    spec = {**BASIC, "behavior": {"scaleUp": {"stabilizationWindowSeconds": 0, "replicas": 3, "periodSeconds": 15},
                                  "scaleDown": {"stabilizationWindowSeconds": 30}},
            "fallback": {"failureThreshold": 2, "replicas": 2}}
    out = so.scaled_object(server(spec), PROM)
    assert out is not None
    behavior = out["spec"]["advanced"]["horizontalPodAutoscalerConfig"]["behavior"]
    assert behavior["scaleUp"]["policies"] == [{"type": "Pods", "value": 3, "periodSeconds": 15}]
    assert behavior["scaleUp"]["stabilizationWindowSeconds"] == 0
    assert behavior["scaleDown"]["policies"] == [{"type": "Pods", "value": 1, "periodSeconds": 30}]
    assert out["spec"]["fallback"] == {"failureThreshold": 2, "replicas": 2, "behavior": "currentReplicasIfHigher"}


def test_the_specs_address_wins_over_the_operators_default() -> None:
    own = "https://prom.example:9091"
    out = so.scaled_object(server({**BASIC, "prometheus": {"address": own}}), PROM)
    assert out is not None and out["spec"]["triggers"][0]["metadata"]["serverAddress"] == own


def test_no_address_anywhere_is_an_error_naming_both_settings() -> None:
    with pytest.raises(so.MissingPrometheusAddress, match=r"spec\.autoscaling\.prometheus\.address.*"
                                                          r"--prometheus-address"):
        so.scaled_object(server(BASIC), None)


def test_nothing_is_rendered_without_autoscaling_or_in_external_mode() -> None:
    assert so.scaled_object(server(None), PROM) is None
    assert so.scaled_object(server({"mode": "External"}), PROM) is None


def test_pause_annotations() -> None:
    none = {so.PAUSED: None, so.PAUSED_REPLICAS: None, so.PAUSED_SCALE_IN: None}
    assert so.pause_annotations(verifying=False, trial_replicas=None) == none
    assert so.pause_annotations(verifying=True, trial_replicas=None) == {**none, so.PAUSED_SCALE_IN: "true"}
    assert so.pause_annotations(verifying=False, trial_replicas=2) == {**none, so.PAUSED_REPLICAS: "2"}
    # a trial freezes the count entirely: scale-in alone would still let it grow
    assert so.pause_annotations(verifying=True, trial_replicas=2) == {**none, so.PAUSED_REPLICAS: "2"}
    with pytest.raises(ValueError, match="-1"):
        so.pause_annotations(verifying=False, trial_replicas=-1)


def test_the_scaled_object_carries_the_pause_annotations_set() -> None:
    s = server(BASIC)
    plain = so.scaled_object(s, PROM)
    verified = so.scaled_object(s, PROM, verifying=True)
    trial = so.scaled_object(s, PROM, verifying=True, trial_replicas=3)
    assert plain is not None and verified is not None and trial is not None
    assert "annotations" not in plain["metadata"]
    assert verified["metadata"]["annotations"] == {"autoscaling.keda.sh/paused-scale-in": "true"}
    assert trial["metadata"]["annotations"] == {"autoscaling.keda.sh/paused-replicas": "3"}
    stripped = copy.deepcopy(verified)
    del stripped["metadata"]["annotations"]
    assert stripped == plain  # the pause changes nothing else
