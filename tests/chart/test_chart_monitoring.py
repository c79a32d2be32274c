"""The chart's monitoring objects rendered by a real helm: the metrics Service and port, the operator's
``--pod-monitors`` and ``--metrics-port`` arguments, ServiceMonitor, PrometheusRule (equal to the plain rules file,
thresholds from values) and the dashboard ConfigMap (equal to the checked-in JSON)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import yaml

from e2e.tools import helm_template, require_helm

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "charts" / "sglang-operator"
ALL_ON = {"serviceMonitor": {"enabled": True, "interval": "30s", "labels": {"release": "kps"}},
          "prometheusRule": {"enabled": True, "labels": {"release": "kps"}},
          "grafanaDashboard": {"enabled": True, "namespace": "grafana", "annotations": {"grafana_folder": "SGLang"}}}


def render(**values: Any) -> list[dict[str, Any]]:
    return helm_template(require_helm(), CHART, "rel", "ops", values)


def one(objs: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    (found,) = [o for o in objs if o["kind"] == kind]
    return found


def container(objs: list[dict[str, Any]]) -> dict[str, Any]:
    c: dict[str, Any] = one(objs, "Deployment")["spec"]["template"]["spec"]["containers"][0]
    return c


def test_defaults_render_no_prometheus_operator_objects() -> None:
    kinds = {o["kind"] for o in render()}
    assert not kinds & {"ServiceMonitor", "PrometheusRule", "ConfigMap", "PodMonitor"}
    args = container(render())["args"]
    assert "--pod-monitors=auto" in args and "--metrics-port=9808" in args


def test_metrics_service_reaches_the_metrics_port() -> None:
    objs = render(metrics={"port": 9999})
    svc, c = one(objs, "Service"), container(objs)
    ports = {p["name"]: p["containerPort"] for p in c["ports"]}
    assert ports["metrics"] == 9999 and "--metrics-port=9999" in c["args"]
    assert svc["spec"]["ports"] == [{"name": "metrics", "port": 9999, "targetPort": "metrics", "protocol": "TCP"}]
    pod_labels = one(objs, "Deployment")["spec"]["template"]["metadata"]["labels"]
    assert svc["spec"]["selector"].items() <= pod_labels.items()


def test_pod_monitor_switch_sets_flag_labels_and_rbac() -> None:
    def podmonitor_rules(objs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [r for o in objs for r in o.get("rules", []) if "monitoring.coreos.com" in r["apiGroups"]]

    on = render(podMonitor={"enabled": True, "labels": {"release": "kps"}})
    assert "--pod-monitor-label=release=kps" in container(on)["args"]
    rules = [(r["resources"], r["verbs"]) for r in podmonitor_rules(on)]
    assert rules == [(["podmonitors"], ["get", "create", "patch"])]
    off = render(podMonitor={"enabled": False})
    assert "--pod-monitors=never" in container(off)["args"] and podmonitor_rules(off) == []


def test_service_monitor_selects_the_metrics_service() -> None:
    objs = render(**ALL_ON)
    sm, svc = one(objs, "ServiceMonitor"), one(objs, "Service")
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"] == {"matchNames": ["ops"]}
    # honorLabels: the operator's series keep their own namespace label (the SGLangServer's), e2e:
    # e2e/tests/test_prometheus_operator.py with the real Prometheus Operator's generated configuration
    assert sm["spec"]["endpoints"] == [{"port": "metrics", "path": "/metrics", "scheme": "http", "interval": "30s",
                                        "honorLabels": True}]
    assert sm["metadata"]["labels"]["release"] == "kps"


def test_prometheus_rule_equals_the_plain_rules_file() -> None:
    objs = render(**ALL_ON)
    rule = one(objs, "PrometheusRule")
    assert rule["spec"] == yaml.safe_load((ROOT / "deploy" / "prometheus" / "sglang-operator-rules.yaml").read_text())
    assert rule["metadata"]["labels"]["release"] == "kps"


def test_prometheus_rule_thresholds_come_from_values() -> None:
    objs = render(prometheusRule={"enabled": True, "thresholds": {"minDecodeTokensPerSecond": 33,
                                                                  "forDuration": "3m"}})
    got = {r.get("alert") or r["record"]: r for g in one(objs, "PrometheusRule")["spec"]["groups"]
           for r in g["rules"]}
    assert got["SGLangDecodeThroughputLow"]["expr"].endswith("< 33")
    assert got["SGLangDecodeThroughputLow"]["for"] == "3m"
    assert "33 tok/s" in got["SGLangDecodeThroughputLow"]["annotations"]["summary"]
    # Prometheus' own template actions survive Helm
    assert "{{ $labels.namespace }}" in got["SGLangDecodeThroughputLow"]["annotations"]["summary"]


def test_dashboard_config_map() -> None:
    cm = one(render(**ALL_ON), "ConfigMap")
    assert cm["metadata"]["namespace"] == "grafana"
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert cm["metadata"]["annotations"] == {"grafana_folder": "SGLang"}
    assert json.loads(cm["data"]["sglang-operator.json"]) == \
        json.loads((ROOT / "deploy" / "grafana" / "sglang-operator.json").read_text())


def test_lint_with_everything_on(tmp_path: Path) -> None:
    helm = require_helm()
    values = tmp_path / "all-on.yaml"
    values.write_text(yaml.safe_dump(ALL_ON))
    proc = subprocess.run([str(helm), "lint", "--strict", str(CHART), "--values", str(values)],
                          capture_output=True, text=True)
    assert proc.returncode == 0 and "[WARNING]" not in proc.stdout, proc.stdout + proc.stderr
