"""The Prometheus Operator path for real (issue 19 item 3): the real Prometheus Operator v0.85.0 generates the scrape
configuration from the chart's ServiceMonitor (the operator's own /metrics, release in ``sglang-operator``) and the
operator's PodMonitor (an SGLangServer in ``ml``), and its PrometheusRule's rules; the locally built Prometheus 3
runs that configuration (``e2e/prometheus_operator.py`` says what is adapted to run outside a pod: the config
reloader's ``$(VAR)`` substitution, the rule files' mount, ``kubeconfig_file``). Services get no endpoints on the
local cluster, so the ServiceMonitor's job runs its own relabelling on the target endpoints discovery would give for
the chart's real pod behind the chart's real Service, at the address the operator (a host process) listens on.

After a promotion and a rollback of the published case (fast policy, ``e2e/policies.py``): every dashboard panel's
query and annotation returns data for the server in ``ml``, its variables list it, every alert expression's series
are there with the server's labels, the rollback alert fires for it, and no series anywhere carries
``exported_namespace`` (the label collision the ServiceMonitor's ``honorLabels`` prevents).
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from sglang_operator_tools.monitoring import dashboard, series

from e2e.conftest import K8sCluster, wait_for
from e2e.operator_proc import OperatorProcess
from e2e.policies import BAD, GOOD, sample
from e2e.prometheus import PrometheusProcess
from e2e.prometheus import install_crds as install
from e2e.prometheus_operator import (
    PrometheusOperatorProcess,
    endpoints_target,
    generated_config,
    reloader_env,
    runnable_config,
    with_static_targets,
    write_rule_files,
)
from e2e.tools import crd_file_name, helm_template, require_helm, require_prometheus, require_prometheus_operator

pytestmark = [pytest.mark.cluster, pytest.mark.local_cluster]
ROOT = Path(__file__).resolve().parents[2]
RULES = ROOT / "deploy" / "prometheus" / "sglang-operator-rules.yaml"
"""The shipped rules (the chart's PrometheusRule carries the same groups)."""
CHART = ROOT / "charts" / "sglang-operator"
DASHBOARD = ROOT / "deploy" / "grafana" / "sglang-operator.json"
RELEASE, OPERATOR_NS, ML = "rel", "sglang-operator", "ml"
FULLNAME = f"{RELEASE}-sglang-operator"
PROMETHEUS = "e2e"
NAME = "qwen36-27b"  # the samples' SGLangServer (0.5.10: no sglang:spec_num_steps gauge)
INTERVAL = "2s"
RATE = "10s"  # Grafana's $__rate_interval for a 2 s scrape interval: 4 × 2 s, rounded up
# the chart's thresholds with second-long windows (the PrometheusRule is rendered from these values)
THRESHOLDS = {"acceptLengthWindow": "2m", "forDuration": "4s", "rateWindow": "30s", "notReadyFor": "1m",
              "rollbackWindow": "5m"}
CRDS = ("prometheuses", "servicemonitors", "podmonitors", "probes", "prometheusrules")
"""The Prometheus Operator CRDs its Prometheus controller needs (the others' controllers stay off)."""


def prometheus_object() -> dict[str, Any]:
    """A Prometheus selecting every ServiceMonitor, PodMonitor and PrometheusRule in every namespace. No replicas:
    only its generated configuration is used (its pods cannot run on the fake kubelet)."""
    everything: dict[str, Any] = {}
    return {"apiVersion": "monitoring.coreos.com/v1", "kind": "Prometheus",
            "metadata": {"name": PROMETHEUS, "namespace": OPERATOR_NS},
            "spec": {"replicas": 0, "scrapeInterval": INTERVAL, "evaluationInterval": INTERVAL,
                     **{f"{kind}{part}": everything for kind in ("serviceMonitor", "podMonitor", "rule")
                        for part in ("Selector", "NamespaceSelector")}}}


def chart_objects() -> list[dict[str, Any]]:
    """The chart (one replica) with its ServiceMonitor and PrometheusRule, in ``sglang-operator``: the objects a
    Prometheus scrape depends on (ServiceAccount, metrics Service, Deployment, ServiceMonitor, PrometheusRule)."""
    objs = helm_template(require_helm(), CHART, RELEASE, OPERATOR_NS, {
        "replicaCount": 1, "serviceMonitor": {"enabled": True}, "prometheusRule": {"enabled": True,
                                                                                  "thresholds": THRESHOLDS}})
    kinds = ("ServiceAccount", "Service", "Deployment", "ServiceMonitor", "PrometheusRule")
    return [o for o in objs if o["kind"] in kinds]


def ready_pod(k8s: K8sCluster, ns: str, selector: dict[str, str]) -> dict[str, Any]:
    label = ",".join(f"{k}={v}" for k, v in selector.items())

    def get() -> dict[str, Any] | None:
        for p in k8s.get("pods", "-n", ns, "-l", label)["items"]:
            if any(c["type"] == "Ready" and c["status"] == "True" for c in p["status"].get("conditions", [])):
                out: dict[str, Any] = p
                return out
        return None
    return wait_for(f"a Ready pod {label} in {ns}", get, timeout=60)


def status(k8s: K8sCluster) -> dict[str, Any]:
    out: dict[str, Any] = k8s.get("sglangserver", NAME, "-n", ML).get("status") or {}
    return out


def wait_status(k8s: K8sCluster, what: str, pred: Any, timeout: float = 150) -> dict[str, Any]:
    try:
        return wait_for(what, lambda: (s := status(k8s)) and pred(s) and s, timeout=timeout, interval=1)
    except AssertionError:
        print(json.dumps(status(k8s), indent=1)[:4000])
        raise


def condition(st: dict[str, Any], type_: str) -> dict[str, Any]:
    return next((c for c in st.get("conditions") or [] if c["type"] == type_), {})


@pytest.fixture(scope="module")
def stack(k8s_cluster: K8sCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    """On the session's cluster: the namespaces ``ml`` and ``sglang-operator`` (deleted after), the Prometheus
    Operator's CRDs, the chart's monitoring objects, the Prometheus Operator, the operator (watching ``ml``) and a
    Prometheus 3 running the Prometheus Operator's configuration."""
    k8s = k8s_cluster
    prometheus_bin, promop = require_prometheus(), require_prometheus_operator()
    work = tmp_path_factory.mktemp("prometheus-operator")
    started = time.monotonic()
    install(k8s, [*(promop / "crds" / crd_file_name(c) for c in CRDS), ROOT / "crds" / "sglangservers.yaml"])
    for ns in (ML, OPERATOR_NS):
        k8s.create_namespace(ns)
    k8s.run("apply", "-n", OPERATOR_NS, "-f", "-",
            input=json.dumps({"apiVersion": "v1", "kind": "List", "items": chart_objects()}))
    k8s.apply(prometheus_object())
    promop_proc = PrometheusOperatorProcess(promop / "operator", k8s.kubeconfig, work / "prometheus-operator.log")
    promop_proc.start()
    op = OperatorProcess(k8s.kubeconfig, work / "operator.log", status_interval=1.0, sample_interval=None,
                         args=["--namespace", ML, "--pod-monitors", "always"])
    op.start()
    prom: PrometheusProcess | None = None
    try:
        k8s.apply(sample(GOOD), ML)
        sm_job, pm_job = f"serviceMonitor/{OPERATOR_NS}/{FULLNAME}/0", f"podMonitor/{ML}/{NAME}/0"
        config = generated_config(k8s, OPERATOR_NS, PROMETHEUS, lambda c: {sm_job, pm_job} <= {
            j["job_name"] for j in c.get("scrape_configs", [])} and c.get("rule_files"))
        rules_dir = work / "rules"
        assert write_rule_files(k8s, OPERATOR_NS, PROMETHEUS, rules_dir), "no rule ConfigMap generated"
        local = runnable_config(config, reloader_env(k8s, OPERATOR_NS, PROMETHEUS), k8s.kubeconfig, rules_dir)
        # the ServiceMonitor's job: the target endpoints discovery gives for the chart's pod behind its Service
        service = k8s.get("service", f"{FULLNAME}-metrics", "-n", OPERATOR_NS)
        pod = ready_pod(k8s, OPERATOR_NS, service["spec"]["selector"])
        target = endpoints_target(service, pod, "metrics", f"127.0.0.1:{op.metrics_port}")
        local["scrape_configs"] = [with_static_targets(j, [target]) if j["job_name"] == sm_job else j
                                   for j in local["scrape_configs"]]
        (work / "generated.yaml").write_text(yaml.safe_dump(config, sort_keys=False))
        prom = PrometheusProcess(prometheus_bin, work / "prom", local)
        prom.start()
        print(f"stack ready in {time.monotonic() - started:.0f} s")
        yield {"prometheus": prom, "operator": op, "config": config, "local": local, "pod": pod,
               "sm_job": sm_job, "pm_job": pm_job}
    finally:
        if prom is not None:
            prom.stop()
            print("--- prometheus log\n" + prom.log_tail(15))
        op.stop()
        # the Prometheus object goes while the Prometheus Operator runs (it may hold a finalizer), then the namespaces
        k8s.run("delete", "prometheus", PROMETHEUS, "-n", OPERATOR_NS, "--ignore-not-found", "--timeout=30s",
                check=False)
        promop_proc.stop()
        for ns in (ML, OPERATOR_NS):
            k8s.run("delete", "namespace", ns, "--wait=false", "--ignore-not-found", check=False)
        print("--- operator log\n" + op.log_tail(20))
        print("--- prometheus-operator log\n" + promop_proc.log_tail(10))


def panel_queries() -> list[tuple[str, str]]:
    doc = json.loads(DASHBOARD.read_text())
    return [(p["title"], t["expr"]) for p in dashboard.panels(doc) for t in p.get("targets", [])] + \
        [(f"annotation {a['name']}", a["expr"]) for a in doc["annotations"]["list"]]


def tuning_queries() -> set[str]:
    """The Tuning row's queries: no SGLangTuning runs in this test, so their series do not exist (they appear once
    a tuning finishes a trial; e2e/tests/test_tuning.py and tests/tools/test_dashboard_json.py cover them)."""
    doc = json.loads(DASHBOARD.read_text())
    return {t["expr"] for p in dashboard.row_panels(doc, dashboard.TUNING_ROW) for t in p["targets"]}


def fill(expr: str) -> str:
    for k, v in {"$namespace": ML, "$server": NAME, "$sglang_tuning": "none", "$__rate_interval": RATE,
                 "$__range": "5m"}.items():
        expr = expr.replace(k, v)
    return expr


def query_range(prom: PrometheusProcess, expr: str, start: float) -> list[dict[str, Any]]:
    """``expr`` over [start, now] at the scrape interval, as Grafana asks for a panel over the dashboard's range."""
    result: list[dict[str, Any]] = prom.api("query_range", query=expr, start=start, end=time.time(), step=2)["result"]
    return result


def selectors(prom: PrometheusProcess, expr: str) -> list[str]:
    """Every series selector of ``expr`` (Prometheus' own parser, ``/api/v1/parse_query``), as PromQL."""
    resp = httpx.post(f"{prom.url}/api/v1/parse_query", data={"query": expr}, timeout=10).json()
    assert resp["status"] == "success", resp
    out: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if "matchers" in node:
                m = ", ".join(f'{x["name"]}{x["type"]}{json.dumps(x["value"])}' for x in node["matchers"])
                out.append(f"{{{m}}}")
            for v in node.values():
                walk(v)
        elif isinstance(node, list):
            for v in node:
                walk(v)
    walk(resp["data"])
    return out


def operator_exports(op: OperatorProcess, name: str) -> bool:
    body = httpx.get(f"http://127.0.0.1:{op.metrics_port}/metrics", timeout=10).text
    return any(line.startswith(name) for line in body.splitlines())


def test_dashboard_and_alerts_through_the_prometheus_operator(k8s_cluster: K8sCluster,
                                                                 stack: dict[str, Any]) -> None:
    k8s = k8s_cluster
    prom: PrometheusProcess = stack["prometheus"]
    op: OperatorProcess = stack["operator"]
    begin = time.time() - 5
    started = time.monotonic()

    # the Prometheus Operator's jobs, as it wrote them: the ServiceMonitor's now keeps the scraped labels
    jobs = {j["job_name"]: j for j in stack["config"]["scrape_configs"]}
    assert jobs[stack["sm_job"]]["honor_labels"] is True
    assert jobs[stack["pm_job"]]["kubernetes_sd_configs"][0]["role"] == "pod"

    good = wait_status(k8s, "the known-good revision promoted", lambda s: s.get("stableRevision")
                       and s["stableRevision"] == s.get("revision") and (s.get("analysis") or {}).get("phase")
                       == "Stable")["revision"]
    print(f"promoted after {time.monotonic() - started:.0f} s")
    k8s.apply(sample(BAD), ML)
    wait_status(k8s, "the regressed revision rolled back", lambda s: s.get("revision") == good
                and condition(s, "Degraded").get("reason") == "RolledBack")
    print(f"rolled back after {time.monotonic() - started:.0f} s")

    # both jobs' targets are up, with the labels the Prometheus Operator's relabelling gives
    def up() -> list[dict[str, Any]] | None:
        active = [t for t in prom.targets() if t["health"] == "up"]
        pools = {t["scrapePool"] for t in active}
        return active if {stack["sm_job"], stack["pm_job"]} <= pools else None
    active = wait_for("both jobs' targets up", up, timeout=30)
    [operator_target] = [t["labels"] for t in active if t["scrapePool"] == stack["sm_job"]]
    assert operator_target == {"namespace": OPERATOR_NS, "service": f"{FULLNAME}-metrics", "endpoint": "metrics",
                               "job": f"{FULLNAME}-metrics", "pod": stack["pod"]["metadata"]["name"],
                               "container": "operator", "instance": f"127.0.0.1:{op.metrics_port}"}
    sglang_targets = [t["labels"] for t in active if t["scrapePool"] == stack["pm_job"]]
    assert sglang_targets and all(t["namespace"] == ML and t["sglang_server"] == NAME for t in sglang_targets)

    print(f"targets checked after {time.monotonic() - started:.0f} s")
    # the operator's series keep the server's namespace; nothing was renamed exported_namespace
    accept = wait_for("the operator's accept length of the server in ml", lambda: prom.query(
        f'{series.OP_ACCEPT_LENGTH}{{namespace="{ML}", sglang_server="{NAME}"}}'), timeout=30)
    assert {r["metric"]["job"] for r in accept} == {f"{FULLNAME}-metrics"}
    assert prom.query('{exported_namespace!=""}') == []
    health = prom.query(series.OP_SERVERS)  # series without a namespace of their own get the operator's
    assert health and {r["metric"]["namespace"] for r in health} == {OPERATOR_NS}

    # the dashboard's variables list the namespace and the server
    variables = {v["name"]: v["query"] for v in json.loads(DASHBOARD.read_text())["templating"]["list"]
                 if v["type"] == "query"}
    for var, want in (("namespace", ML), ("server", NAME)):
        metric, label = fill(variables[var]).removeprefix("label_values(").removesuffix(")").rsplit(", ", 1)
        assert want in prom.api(f"label/{label}/values", **{"match[]": metric}), (var, metric)

    print(f"labels checked after {time.monotonic() - started:.0f} s")
    # every panel query and annotation has data over the run for the server in ml, but the Tuning row's: no
    # SGLangTuning runs in this test, so those only have to evaluate (query_range raises on an error)
    no_tuning = tuning_queries()
    empty = [f"{title}: {expr}" for title, expr in panel_queries()
             if not query_range(prom, fill(expr), begin) and expr not in no_tuning]
    assert empty == [], f"dashboard queries without data: {empty}"

    print(f"dashboard checked after {time.monotonic() - started:.0f} s")
    # the rules came through the PrometheusRule and are healthy; every alert's series are there, the server's
    # with its labels; the rollback alert fires for the server in ml
    loaded = prom.rules()
    shipped = [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    assert len(loaded) == len(shipped) and all(r["health"] == "ok" for r in loaded), loaded
    missing = []
    for rule in (r for r in loaded if r.get("type") == "alerting"):
        for sel in selectors(prom, rule["query"]):
            got = query_range(prom, sel, begin)
            if not got and series.OP_SCRAPE_ERRORS in sel and not operator_exports(op, series.OP_SCRAPE_ERRORS):
                continue  # the operator counted no scrape error: the counter has no series yet
            server_series = [r["metric"] for r in got if "sglang_server" in r["metric"]]
            if not got or (server_series and not any(m["namespace"] == ML and m["sglang_server"] == NAME
                                                     for m in server_series)):
                missing.append(f"{rule['name']}: {sel}")
    assert missing == [], f"alert series without data for {ML}/{NAME}: {missing}"
    print(f"alert series checked after {time.monotonic() - started:.0f} s")
    fired = wait_for("SGLangRollbackHappened firing", lambda: [
        a["labels"] for a in prom.alerts() if a["labels"]["alertname"] == "SGLangRollbackHappened"
        and a["state"] == "firing"], timeout=30)
    assert [(a["namespace"], a["sglang_server"]) for a in fired] == [(ML, NAME)], fired
    print(f"test body {time.monotonic() - started:.0f} s")
