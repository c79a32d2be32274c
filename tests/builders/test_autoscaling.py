"""The KEDA ScaledObject of ``spec.autoscaling`` (builders/autoscaling.py): its target is the SGLangServer's own
``/scale``, its trigger handles KEDA's traps (AverageValue, ignoreNullValues false, fallback never below the current
count), its query selects the series the PodMonitor labels (leaders only multi-node) and is what Prometheus reads
from those series, its HPA behaviour never removes more than one replica per window; the pause annotations follow
the verifying and trial flags."""

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
from sglang_operator.builders import monitoring as mon
from sglang_operator.builders import render
from sglang_operator.builders.leaderworkerset import WORKER_INDEX_LABEL

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


RUNNING = 'sglang:num_running_reqs{namespace="team-a", sglang_server="qwen36-27b"}'


@pytest.mark.parametrize(("metric", "signal", "expected"), [
    ("runningRequests", "probe", f"clamp_min(sum({RUNNING}) - count(count by (revision) ({RUNNING})), 0)"),
    ("measuredCapacity", "probe", f"clamp_min(sum({RUNNING}) - count(count by (revision) ({RUNNING})), 0)"),
    ("runningRequests", "traffic", f"sum({RUNNING})"),
    ("queuedRequests", "probe", 'sum(sglang:num_queue_reqs{namespace="team-a", sglang_server="qwen36-27b"})'),
])
def test_built_in_metrics_sum_the_servers_gauge(metric: str, signal: str, expected: str) -> None:
    """The running requests less the operator's probe (one per revision) when it probes (signal ``probe``)."""
    extra = {"slo": {"minTokensPerSecondPerRequest": 20}} if metric == "measuredCapacity" else {}
    got = so.query(server({**BASIC, "metric": metric, **extra}, rollback={"signal": signal}))
    assert got == expected


def test_an_idle_server_with_target_one_scales_in_despite_the_probe() -> None:
    """Issue 41: each idle pod's gauge keeps the 1 its last probe wrote (SGLang writes it on prefill and every 40
    decode steps only), and a probe may be in flight on one pod per revision; ``target: 1`` must still let the HPA
    (⌈total ÷ target⌉) go down one replica per window to 1, and a loaded server count its users' requests."""
    one = server({**BASIC, "target": 1})
    labels = render(one).workload["spec"]["template"]["metadata"]["labels"]
    q = so.query(one)

    def idle(pods: int) -> list[dict[str, str]]:
        return [scraped(labels, f"qwen36-27b-abc-{i}", 1) for i in range(pods)]

    assert [math.ceil(evaluate(q, idle(n)) / 1) for n in (3, 2, 1)] == [2, 1, 0]  # never held at n
    busy = [scraped(labels, "qwen36-27b-abc-0", 5 + 1), scraped(labels, "qwen36-27b-abc-1", 3)]  # + the probe
    assert evaluate(q, busy) == 8
    assert evaluate(so.query(server({**BASIC, "target": 1}, rollback={"signal": "traffic"})), idle(3)) == 3


def test_kv_cache_usage_takes_each_pods_largest_rank() -> None:
    q = so.query(server({**BASIC, "metric": "kvCacheUsage", "target": 0.8}))
    assert q == 'sum(max by (pod) (sglang:token_usage{namespace="team-a", sglang_server="qwen36-27b"}))'


def test_a_users_query_gets_namespace_and_server_filled_in() -> None:
    user = 'sum(rate(sglang:generation_tokens_total{namespace="$namespace", sglang_server="$server"}[1m]))'
    q = so.query(server({**BASIC, "metric": "query", "query": user, "target": 500}))
    assert q == 'sum(rate(sglang:generation_tokens_total{namespace="team-a", sglang_server="qwen36-27b"}[1m]))'


def evaluate(query: str, series: list[dict[str, str]]) -> float:
    """``sum(GAUGE{matchers})``, or ``clamp_min(sum(G) - count(count by (revision) (G)), 0)``, over ``series`` (each
    a label set with ``__name__`` and ``value``), as Prometheus evaluates the built-in queries (equality matchers
    only)."""
    gauge = r"([a-z_:]+)\{([^}]*)\}"
    m = re.fullmatch(rf"sum\({gauge}\)", query)
    probed = re.fullmatch(rf"clamp_min\(sum\({gauge}\) - count\(count by \(revision\) \({gauge}\)\), 0\)", query)
    assert m is not None or probed is not None, query
    name, selector = (m or probed).group(1, 2)  # type: ignore[union-attr]
    if probed is not None:
        assert probed.group(3, 4) == (name, selector)
    matchers = dict(re.findall(r'(\w+)="([^"]*)"', selector))
    chosen = [s for s in series if s["__name__"] == name and all(s.get(k) == v for k, v in matchers.items())]
    total = sum(float(s["value"]) for s in chosen)
    if probed is None:
        return total
    return max(total - len({s.get("revision") for s in chosen}), 0.0)


def scraped(pod_labels: dict[str, str], pod: str, value: float) -> dict[str, str]:
    """One ``sglang:num_running_reqs`` series of a pod as the PodMonitor's relabelling labels it."""
    from tests.builders.test_scrape_definition import discovered, relabel

    meta = discovered(pod_labels, mon.SCRAPE.port) | {"__meta_kubernetes_pod_name": pod}
    labels = relabel(meta, [r.prometheus() for r in mon.SCRAPE.labels])
    assert labels is not None
    return {**labels, "__name__": "sglang:num_running_reqs", "value": str(value)}


def test_multi_node_counts_the_leaders_only() -> None:
    two_node = server(BASIC, parallelism={"tensor": 16, "nodes": 2}, resources={"gpu": 8})
    rendered = render(two_node)
    leader = rendered.workload["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["metadata"]["labels"]
    worker = rendered.workload["spec"]["leaderWorkerTemplate"]["workerTemplate"]["metadata"]["labels"]
    # LWS adds the worker index to every pod of a group; the workers' dummy /metrics may carry stale gauges
    series = [scraped({**leader, WORKER_INDEX_LABEL: "0"}, "qwen36-27b-0", 5),
              scraped({**worker, WORKER_INDEX_LABEL: "1"}, "qwen36-27b-0-1", 5),
              scraped({**leader, WORKER_INDEX_LABEL: "0"}, "qwen36-27b-1", 3),
              scraped({**worker, WORKER_INDEX_LABEL: "1"}, "qwen36-27b-1-1", 3)]
    q = so.query(two_node)
    assert 'worker_index="0"' in q
    assert evaluate(q, series) == 8 - 1  # less the probe of its one revision


def test_single_node_counts_every_pod_of_every_revision() -> None:
    one = server(BASIC)
    labels = render(one).workload["spec"]["template"]["metadata"]["labels"]
    series = [scraped(labels, "qwen36-27b-abc-1", 4), scraped(labels, "qwen36-27b-abc-2", 2),
              scraped({**labels, "sglang-operator.io/revision": "other"}, "qwen36-27b-canary-x", 1)]
    assert "worker_index" not in series[0]  # a Deployment's pod gets no worker_index label
    assert evaluate(so.query(one), series) == 7 - 2  # less one probe per revision


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
