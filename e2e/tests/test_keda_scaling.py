"""Real scaling: KEDA v2.21.0's operator and metrics API server registered with the local API server through
APIService aggregation (:mod:`e2e.cluster.keda`), the kube-controller-manager's HPA controller, Prometheus 3 scraping
the simulated SGLang pods and the operator (whose series the built-in queries read) through the ``sglang-operator
prometheus-config`` output, the operator running the server.

- ``autoscaling {minReplicas: 1, maxReplicas: 3, metric: runningRequests, target: 4}`` under 12 concurrent streams:
  KEDA's HPA scales the SGLangServer to 3 (``⌈12 ÷ 4⌉``) and, once the streams stop, back to 1, one replica per
  scale-down window (the behaviour shortened through ``spec.autoscaling.behavior``); the times are printed.
- Prometheus stopped (with the load, so real metrics would scale down): the trigger's errors turn KEDA's fallback on
  (``currentReplicasIfHigher``), the HPA keeps scaling on the fallback's value (ScalingActive, 3 desired) and the
  count stays at 3 for more than two scale-down windows; never the minimum. Without a fallback the HPA would only
  stop (ScalingActive False); the control: the same fallback patched to ``behavior: static`` (its ``replicas``:
  ``minReplicas``) drops the count to 1, the trap the rendering avoids.
- A labelled stranger (issue 47): beside the server (1 replica, 2 streams of load) runs a hand-made pod (no owner)
  with every label of the server's pod, scraped by Prometheus as one of the server's pods, exporting
  ``sglang:num_running_reqs 1e9`` and a fake ``sglang_operator_server_running_requests`` of the server at 1e9.
  Prometheus holds the first (the pods' own series would read 1e9), drops the second (the pod job drops names
  like the operator's); the built-in query reads the operator's series, written from the pods it owns only, so
  for 5 HPA syncs the HPA's value stays at the 2 streams' and the count at 1.

The ScaledObject is the one ``builders.autoscaling.scaled_object`` renders for the server (:func:`scaled_object_of`).
"""

from __future__ import annotations

import copy
import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from e2e.cluster.keda import KedaStack
from e2e.conftest import BackgroundPoll, K8sCluster, running_operator, wait_for
from e2e.load import STREAMS, Load  # Load: also test_keda_judging's (imported from here)
from e2e.operator_proc import OperatorProcess
from e2e.policies import FAST_POLICY
from e2e.prometheus import PrometheusProcess, with_host_operator
from e2e.tests.test_invalid_specs import valid_server
from e2e.tools import require_prometheus
from sglang_operator.api import parse
from sglang_operator.builders import autoscaling as so
from sglang_operator.builders.workload import PORT_NAME

pytestmark = [pytest.mark.cluster, pytest.mark.local_cluster]
NAME = "scaled"
SCRAPE = "2s"
SCALE_DOWN_WINDOW = 20  # seconds: spec.autoscaling.behavior.scaleDown (one replica per window)
AUTOSCALING: dict[str, Any] = {
    "minReplicas": 1, "maxReplicas": 3, "metric": "runningRequests", "target": 4,
    "behavior": {"scaleUp": {"stabilizationWindowSeconds": 0, "replicas": 3, "periodSeconds": 15},
                 "scaleDown": {"stabilizationWindowSeconds": SCALE_DOWN_WINDOW}},
}
SIM_ENV = [{"name": "SGLANG_SIM_LOAD_SECONDS", "value": "1"}]


@pytest.fixture(scope="module")
def keda(k8s_cluster: K8sCluster) -> Iterator[KedaStack]:
    if k8s_cluster.local is None:
        pytest.fail("needs the local control plane (its launcher registers KEDA's metrics API server)", pytrace=False)
    stack = KedaStack(k8s_cluster.local).start()
    print(f"KEDA registered in {stack.startup_seconds:.1f} s at {stack.address}")
    try:
        yield stack
    finally:
        print(stack.log_tail(20))
        stack.stop()


@pytest.fixture(scope="module")
def operator(k8s_cluster: K8sCluster, keda: KedaStack,
             tmp_path_factory: pytest.TempPathFactory) -> Iterator[OperatorProcess]:
    with running_operator(k8s_cluster, tmp_path_factory.mktemp("keda-scaling")) as op:
        yield op


@pytest.fixture
def prometheus(k8s_cluster: K8sCluster, operator: OperatorProcess, tmp_path: Path) -> Iterator[PrometheusProcess]:
    """Prometheus 3 with the ``prometheus-config`` output: the SGLang pods' job (pod discovery through the local API
    server) and the operator's job (``honor_labels``) on the operator process' metrics port (it runs on this host):
    the built-in queries read the operator's series."""
    printed = subprocess.run([sys.executable, "-m", "sglang_operator.entry.cli", "prometheus-config",
                              "--kubeconfig-file", str(k8s_cluster.kubeconfig), "--scrape-interval", SCRAPE],
                             capture_output=True, text=True, check=True).stdout
    config = with_host_operator(yaml.safe_load(printed), f"127.0.0.1:{operator.metrics_port}")
    config |= {"global": {"scrape_interval": SCRAPE, "evaluation_interval": SCRAPE}}
    prom = PrometheusProcess(require_prometheus(), tmp_path / "prom", config)
    prom.start()
    try:
        yield prom
    finally:
        prom.stop()
        print("--- prometheus log\n" + prom.log_tail(10))


def server(prometheus_url: str) -> dict[str, Any]:
    body = valid_server()
    body["metadata"]["name"] = NAME
    body["spec"] |= {"replicas": 1, "env": copy.deepcopy(SIM_ENV), "rollback": copy.deepcopy(FAST_POLICY),
                     "autoscaling": {**AUTOSCALING, "prometheus": {"address": prometheus_url}}}
    return body


def rendered(body: dict[str, Any], ns: str) -> dict[str, Any]:
    """What ``builders.autoscaling.scaled_object`` renders for the server ``body`` in ``ns``."""
    out = so.scaled_object(parse(copy.deepcopy(body) | {"metadata": {**body["metadata"], "namespace": ns}}))
    assert out is not None
    return out


def holds(live: Any, want: Any) -> bool:
    """Whether ``live`` (as stored) holds every field of ``want`` with its value (maps: a superset; the rest: equal,
    lists item by item)."""
    if isinstance(want, dict):
        return isinstance(live, dict) and all(k in live and holds(live[k], v) for k, v in want.items())
    if isinstance(want, list):
        return isinstance(live, list) and len(live) == len(want) and all(map(holds, live, want))
    return bool(live == want)


def scaled_object_of(k8s: K8sCluster, ns: str, body: dict[str, Any]) -> dict[str, Any]:
    """The server's ScaledObject once the API server has it: the operator applies it (owned by the server) and
    it is exactly the rendering of ``body``'s spec."""
    def made() -> dict[str, Any] | None:
        proc = k8s.run("get", "scaledobject", NAME, "-n", ns, "-o", "json", check=False)
        return json.loads(proc.stdout) if proc.returncode == 0 else None

    got: dict[str, Any] = wait_for("the server's ScaledObject", made, timeout=120)
    want = rendered(body, ns)["spec"]
    assert holds(got["spec"], want), (got["spec"], want)  # the API server may add defaults (scalingModifiers: {})
    assert [r["kind"] for r in got["metadata"]["ownerReferences"] if r.get("controller")] == ["SGLangServer"]
    return got


def hpa(k8s: K8sCluster, ns: str) -> dict[str, Any] | None:
    proc = k8s.run("get", "hpa", f"keda-hpa-{NAME}", "-n", ns, "-o", "json", check=False)
    return json.loads(proc.stdout) if proc.returncode == 0 else None


def condition(obj: dict[str, Any] | None, kind: str) -> dict[str, Any]:
    conds = ((obj or {}).get("status") or {}).get("conditions") or []
    return next((c for c in conds if c.get("type") == kind), {})


def ready_urls(k8s: K8sCluster, ns: str) -> list[str]:
    pods = k8s.get("pods", "-n", ns, "-l", f"app.kubernetes.io/instance={NAME}")["items"]
    return sorted(f"http://{p['status']['podIP']}:30000" for p in pods if not p["metadata"].get("deletionTimestamp")
                  and any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions") or []))


class Replicas(BackgroundPoll):
    """Records the SGLangServer's ``spec.replicas`` (what KEDA's HPA writes through ``/scale``) every second:
    ``seen`` is a list of (monotonic seconds, replicas) at each change."""

    interval = 1.0
    join_timeout = 30.0

    def __init__(self, k8s: K8sCluster, ns: str) -> None:
        super().__init__()
        self.k8s, self.ns = k8s, ns
        self.seen: list[tuple[float, int]] = []

    def __enter__(self) -> Replicas:
        super().__enter__()
        wait_for("the first replica count", lambda: self.seen, timeout=30)
        return self

    def poll(self) -> None:
        proc = self.k8s.run("get", "sglangserver", NAME, "-n", self.ns, "-o", "jsonpath={.spec.replicas}",
                            check=False)
        if proc.returncode == 0 and proc.stdout.strip().isdigit():
            n = int(proc.stdout)
            if not self.seen or self.seen[-1][1] != n:
                self.seen.append((time.monotonic(), n))

    @property
    def now(self) -> int:
        return self.seen[-1][1]

    def wait_count(self, what: str, count: int, since: float, timeout: float) -> float:
        """Wait (``timeout`` seconds at most, polling every second) until the count is ``count``; the seconds from
        ``since`` (monotonic) to when it first was."""
        wait_for(what, lambda: self.now == count, timeout=timeout, interval=1)
        return (self.at(count, since=since) or time.monotonic()) - since

    def at(self, n: int, since: float = 0.0) -> float | None:
        """When the count first became ``n`` at or after ``since`` (monotonic seconds), or None."""
        return next((t for t, r in self.seen if r == n and t >= since), None)

    def minimum(self, since: float) -> int:
        """The lowest count from ``since`` on (the count in force at ``since`` included)."""
        before = [r for t, r in self.seen if t <= since][-1:]
        return min(before + [r for t, r in self.seen if t > since])


def scaled_server(k8s: K8sCluster, ns: str, prom: PrometheusProcess) -> str:
    """Apply the server and its ScaledObject; return its Ready pod's URL once KEDA's HPA reads the metric (its
    ScalingActive condition: Prometheus has the pod's series, the adapter answers through the API server)."""
    body = server(prom.url)
    k8s.apply(body, ns)
    url = wait_for("the server's Ready pod", lambda: ready_urls(k8s, ns), timeout=180)[0]
    made = scaled_object_of(k8s, ns, body)
    assert made["spec"]["fallback"]["behavior"] == "currentReplicasIfHigher"
    wait_for("the first revision judged (scale-in no longer paused)", lambda: (
        (k8s.get("sglangserver", NAME, "-n", ns).get("status") or {}).get("autoscaling") or {}).get("judging") is False
        and k8s.run("get", "scaledobject", NAME, "-n", ns, "-o", "json", check=False).returncode == 0
        and so.PAUSED_SCALE_IN not in (k8s.get("scaledobject", NAME, "-n", ns)["metadata"].get("annotations") or {}),
        timeout=180, interval=1)
    got = wait_for("KEDA's HPA reading the metric (ScalingActive)",
                   lambda: (h := hpa(k8s, ns)) and condition(h, "ScalingActive").get("status") == "True" and h,
                   timeout=180)
    assert got["spec"]["metrics"][0]["external"]["target"] == {"type": "AverageValue", "averageValue": "4"}
    return url


def scale_up(k8s: K8sCluster, ns: str, replicas: Replicas, start: float) -> tuple[float, float]:
    """Wait for 3 replicas in the spec and 3 Ready pods; the seconds from ``start`` to each."""
    wait_for("KEDA's HPA scaling the server to 3", lambda: replicas.now == 3, timeout=240, interval=1)
    spec_s = (replicas.at(3) or time.monotonic()) - start
    wait_for("3 Ready pods", lambda: len(ready_urls(k8s, ns)) == 3, timeout=240, interval=1)
    return spec_s, time.monotonic() - start


def test_12_streams_scale_to_3_and_back_to_1(k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess,
                                             prometheus: PrometheusProcess) -> None:
    k8s, ns = k8s_cluster, namespace
    url = scaled_server(k8s, ns, prometheus)
    with Replicas(k8s, ns) as replicas:
        assert replicas.now == 1
        with Load(url):
            t0 = time.monotonic()
            up_spec, up_ready = scale_up(k8s, ns, replicas, t0)
            running = prometheus.query(f'sum(sglang:num_running_reqs{{namespace="{ns}", sglang_server="{NAME}"}})')
            per_pod = {r["metric"].get("pod", "?"): r["value"][1] for r in prometheus.query(
                f'sum by (pod) (sglang:num_running_reqs{{namespace="{ns}", sglang_server="{NAME}"}})')}
        t1 = time.monotonic()
        wait_for("KEDA's HPA scaling the server back to 1", lambda: replicas.now == 1,
                 timeout=6 * SCALE_DOWN_WINDOW + 120, interval=1)
        wait_for("1 pod left", lambda: len(ready_urls(k8s, ns)) == 1, timeout=120, interval=1)
        down_2, down_1 = replicas.at(2, since=t1), replicas.at(1, since=t1)
        assert down_2 is not None and down_1 is not None, replicas.seen
    print(f"scale-up 1 → 3 under {STREAMS} streams: spec.replicas after {up_spec:.1f} s, 3 pods Ready after "
          f"{up_ready:.1f} s; scale-down 3 → 1 after the load stopped: 2 after {down_2 - t1:.1f} s, 1 after "
          f"{down_1 - t1:.1f} s (window {SCALE_DOWN_WINDOW} s, HPA sync 5 s, scrape {SCRAPE}); running requests "
          f"summed at 3 replicas: {running[0]['value'][1]} (by pod {per_pod}); "
          f"counts seen {[r for _, r in replicas.seen]}")
    assert max(r for _, r in replicas.seen) == 3  # never above maxReplicas
    # one replica per window: the second removal waits a full window after the first (the HPA counts its own scale
    # events of the last periodSeconds; the 1 s polling here can read the first change up to ~2 s late)
    assert down_1 - down_2 >= SCALE_DOWN_WINDOW - 2.5, replicas.seen
    assert float(running[0]["value"][1]) >= 9  # ⌈9 ÷ 4⌉ = 3: the load the HPA scaled on was there


def test_prometheus_down_keeps_the_replicas_through_the_fallback(k8s_cluster: K8sCluster, namespace: str,
                                                                 operator: OperatorProcess,
                                                                 prometheus: PrometheusProcess) -> None:
    k8s, ns = k8s_cluster, namespace
    url = scaled_server(k8s, ns, prometheus)
    with Replicas(k8s, ns) as replicas:
        with Load(url):
            scale_up(k8s, ns, replicas, time.monotonic())
            prometheus.stop()  # with the load: real metrics would now bring the count down to 1
        t0 = time.monotonic()

        def scaled_object() -> dict[str, Any]:
            out: dict[str, Any] = k8s.get("scaledobject", NAME, "-n", ns)
            return out

        fell_back = wait_for("KEDA's fallback active", lambda: condition(
            so_ := scaled_object(), "Fallback").get("status") == "True" and so_, timeout=120, interval=1)
        t_fallback = time.monotonic() - t0
        health = fell_back["status"]["health"]
        assert [h["status"] for h in health.values()] == ["Failing"], health
        # nothing may change: the wait is for a span of time, two scale-down windows and three HPA syncs more with the
        # fallback still active (the control below shows a scale-down does happen within that span)
        hold = 2 * SCALE_DOWN_WINDOW + 15
        wait_for(f"{hold} s of fallback", lambda: time.monotonic() - t0 >= t_fallback + hold
                 and condition(scaled_object(), "Fallback").get("status") == "True", timeout=hold + 60, interval=1)
        last = hpa(k8s, ns)
        assert last is not None
        assert last["status"]["desiredReplicas"] == 3, last["status"]
        assert condition(last, "ScalingActive").get("status") == "True", last["status"]  # the fallback's value
        assert replicas.minimum(since=t0) == 3, replicas.seen
        # the control: the trap the rendering avoids (kedacore/keda#6659), a static fallback, drops the count. The
        # operator owns its ScaledObject (a patch would be undone at its next tick): the server is handed to an
        # External scaler (the operator deletes its ScaledObject) and the same rendering with a static fallback is
        # applied by hand
        k8s.run("patch", "sglangserver", NAME, "-n", ns, "--type=json", "-p",
                json.dumps([{"op": "replace", "path": "/spec/autoscaling", "value": {"mode": "External"}}]))
        wait_for("the operator deleting its ScaledObject (mode External)", lambda: k8s.run(
            "get", "scaledobject", NAME, "-n", ns, check=False).returncode != 0, timeout=60, interval=1)
        static = rendered(server(prometheus.url), ns)
        static["spec"]["fallback"]["behavior"] = "static"
        k8s.apply(static, ns)
        wait_for("the static fallback active", lambda: condition(scaled_object(), "Fallback").get("status") == "True",
                 timeout=120, interval=1)
        t2 = time.monotonic()
        dropped = replicas.wait_count("a static fallback dropping the count to minReplicas", 1, t2,
                                      6 * SCALE_DOWN_WINDOW + 120)
    print(f"Prometheus stopped with the load at 3 replicas: fallback active after {t_fallback:.1f} s, replicas "
          f"held at 3 for {hold} s more; the same fallback made static dropped them to 1 in {dropped:.1f} s "
          f"(counts seen {[r for _, r in replicas.seen]})")
    assert dropped <= hold  # the span held at 3 was long enough for a scale-down to show


STRANGER = f"{NAME}-stranger"
EXPORTER = """
import http.server, os
e = os.environ
labels = 'namespace="%s",sglang_server="%s",revision="%s"' % (e["NS"], e["SERVER"], e["REVISION"])
BODY = ("# TYPE sglang:num_running_reqs gauge\\n"
        'sglang:num_running_reqs{model_name="m",engine_type="unified",tp_rank="0",pp_rank="0"} 1e9\\n'
        "# TYPE sglang_operator_server_running_requests gauge\\n"
        "sglang_operator_server_running_requests{" + labels + "} 1e9\\n").encode()
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(BODY)))
        self.end_headers()
        self.wfile.write(BODY)
    def log_message(self, *args):
        pass
http.server.ThreadingHTTPServer((os.environ["POD_IP"], int(os.environ["PORT"])), H).serve_forever()
"""
"""A hand-made exporter: SGLang's running-requests gauge at 1e9, and the operator's series of the server at 1e9."""
HPA_SYNCS = 5
"""HPA syncs (5 s each, ``--horizontal-pod-autoscaler-sync-period``) the count is watched for with the stranger."""


def quantity(text: str) -> float:
    """A Kubernetes quantity as the HPA writes metric values (``1500m``, ``2``, ``1k``, ``1G``)."""
    suffixes = {"m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18}
    return float(text[:-1]) * suffixes[text[-1]] if text[-1:] in suffixes else float(text)


def hpa_value(k8s: K8sCluster, ns: str) -> float | None:
    """The external metric's current average value on KEDA's HPA (the query's value ÷ 1), None while unread."""
    current = ((hpa(k8s, ns) or {}).get("status") or {}).get("currentMetrics") or []
    value = ((current[0].get("external") or {}).get("current") or {}).get("averageValue") if current else None
    return quantity(value) if value else None


def test_a_labelled_stranger_exporting_1e9_running_requests_does_not_move_the_replicas(
        k8s_cluster: K8sCluster, namespace: str, operator: OperatorProcess, prometheus: PrometheusProcess) -> None:
    k8s, ns = k8s_cluster, namespace
    url = scaled_server(k8s, ns, prometheus)
    own = next(p for p in k8s.get("pods", "-n", ns, "-l", f"app.kubernetes.io/instance={NAME}")["items"]
               if f"http://{p['status'].get('podIP')}:30000" == url)
    labels = {k: v for k, v in own["metadata"]["labels"].items() if k != "pod-template-hash"}
    env = {"NS": ns, "SERVER": NAME, "REVISION": labels["sglang-operator.io/revision"], "PORT": "30000"}
    k8s.apply({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": STRANGER, "labels": labels},
               "spec": {"containers": [{
                   "name": "sglang", "image": "example.com/python:3", "command": ["-c", EXPORTER],
                   "ports": [{"name": PORT_NAME, "containerPort": 30000}], "resources": {"requests": {"cpu": "10m"}},
                   "env": [*({"name": k, "value": v} for k, v in env.items()),
                           {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}]}]}}, ns)
    own_series = f'namespace="{ns}", sglang_server="{NAME}"'
    wait_for("Prometheus scraping the stranger as one of the server's pods", lambda: prometheus.query(
        f'sglang:num_running_reqs{{{own_series}, pod="{STRANGER}"}} == 1e9'), timeout=90, interval=1)
    assert [r["value"][1] for r in prometheus.query(f'up{{pod="{STRANGER}"}}')] == ["1"]
    raw = float(prometheus.query(f"sum(sglang:num_running_reqs{{{own_series}}})")[0]["value"][1])
    assert raw >= 1e9  # what a query of the pods' own series would scale on
    faked = prometheus.query(f"sglang_operator_server_running_requests{{{own_series}}} > 1000")
    assert faked == [], faked  # the pod job drops a pod's series named like the operator's
    with Replicas(k8s, ns) as replicas, Load(url, streams=2):
        value = wait_for("the HPA reading the 2 streams (the operator's series)",
                         lambda: (v := hpa_value(k8s, ns)) is not None and v >= 1 and v, timeout=60, interval=1)
        t0, values = time.monotonic(), [value]
        wait_for(f"{HPA_SYNCS} HPA syncs beside the stranger", lambda: (
            values.append(hpa_value(k8s, ns) or 0.0) or time.monotonic() - t0 >= HPA_SYNCS * 5),
            timeout=HPA_SYNCS * 5 + 30, interval=1)
        last = hpa(k8s, ns)
    print(f"a stranger exporting 1e9 running requests beside the server: the pods' series summed {raw:g}; the HPA's "
          f"value over {HPA_SYNCS} syncs {sorted(set(values))}; counts seen {[r for _, r in replicas.seen]}")
    assert [r for _, r in replicas.seen] == [1], replicas.seen
    assert max(values) <= 3, values  # the 2 streams (and at most a stale probe), never the stranger's 1e9
    assert last is not None and last["status"]["desiredReplicas"] == 1, last
    assert condition(last, "ScalingActive").get("status") == "True", last["status"]
