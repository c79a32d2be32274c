"""The PodMonitor and the plain Prometheus scrape config come from one definition and label the same pods the
same way: both are evaluated here on the pods of a rendered SGLangServer with Prometheus' relabelling rules, and
the plain config passes the real ``promtool check config``; its job for the operator itself keeps the chart's
operator pods and their series' own labels."""

from __future__ import annotations

import copy
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from e2e.tools import helm_template, require_helm, require_promtool
from sglang_operator import builders
from sglang_operator.api.server import parse
from sglang_operator.builders import monitoring as mon

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "samples" / "qwen3.6-27b-known-good.yaml"


def relabel(labels: dict[str, str], configs: list[dict[str, Any]]) -> dict[str, str] | None:
    """Prometheus' target relabelling (``replace``, ``keep``, ``drop``; anchored regexes, ``$1``), then the
    ``__`` labels dropped as after relabelling. None when the target is dropped."""
    out = dict(labels)
    for c in configs:
        value = ";".join(out.get(name, "") for name in c["source_labels"])
        m = re.fullmatch(c.get("regex", "(.*)"), value)
        action = c.get("action", "replace").lower()
        if action == "keep" and not m:
            return None
        if action == "drop" and m:
            return None
        if action == "replace" and m:
            new = m.expand(c.get("replacement", "$1").replace("$1", r"\1"))
            if new:
                out[c["target_label"]] = new
            else:
                out.pop(c["target_label"], None)
    return {k: v for k, v in out.items() if not k.startswith("__")}


def snake(config: dict[str, Any]) -> dict[str, Any]:
    """A PodMonitor RelabelConfig with Prometheus' key names."""
    keys = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
    return {keys.get(k, k): v for k, v in config.items()}


def pod_monitor_target(monitor: dict[str, Any], meta: dict[str, str], pod_labels: dict[str, str],
                       port_name: str, phase: str) -> dict[str, str] | None:
    """What a Prometheus Operator makes of ``monitor`` for one discovered pod port: the selector, the endpoint's
    port and the running-pod filter select the target, then the endpoint's relabelings run."""
    selector = monitor["spec"]["selector"]["matchLabels"]
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    if not selector.items() <= pod_labels.items() or port_name != endpoint["port"] or phase in ("Succeeded",
                                                                                                 "Failed"):
        return None
    return relabel(meta, [snake(r) for r in endpoint["relabelings"]])


def discovered(pod_labels: dict[str, str], port_name: str, phase: str = "Running") -> dict[str, str]:
    """The meta labels Prometheus' Kubernetes pod discovery gives one container port."""
    meta = {"__address__": "10.1.2.3:30000", "__meta_kubernetes_namespace": "team-a",
            "__meta_kubernetes_pod_name": "qwen36-27b-6d4cf9-x2x7k", "__meta_kubernetes_pod_phase": phase,
            "__meta_kubernetes_pod_container_port_name": port_name, "instance": "10.1.2.3:30000"}
    meta |= {mon.meta_pod_label(k): v for k, v in pod_labels.items()}
    return meta


@pytest.fixture(scope="module")
def rendered() -> builders.Rendered:
    body = yaml.safe_load(SAMPLE.read_text())
    body["metadata"]["namespace"] = "team-a"
    return builders.render(parse(body))


def test_both_renderings_label_the_servers_pods_alike(rendered: builders.Rendered) -> None:
    pod_labels = rendered.deployment["spec"]["template"]["metadata"]["labels"]
    monitor = mon.pod_monitor("qwen36-27b", "team-a", str(rendered.command.version))
    plain = mon.scrape_config()["relabel_configs"]
    meta = discovered(pod_labels, mon.SCRAPE.port)
    expected = {"namespace": "team-a", "pod": "qwen36-27b-6d4cf9-x2x7k", "sglang_server": "qwen36-27b",
                "revision": rendered.revision, "instance": "10.1.2.3:30000"}
    assert relabel(meta, plain) == expected
    assert pod_monitor_target(monitor, meta, pod_labels, mon.SCRAPE.port, "Running") == expected
    assert set(mon.TARGET_LABELS) == {"namespace", "pod", "sglang_server", "revision"}


@pytest.mark.parametrize("change", ["other port", "finished pod", "not managed", "not sglang", "tuning trial"])
def test_both_renderings_skip_the_same_targets(rendered: builders.Rendered, change: str) -> None:
    pod_labels = dict(rendered.deployment["spec"]["template"]["metadata"]["labels"])
    port, phase = mon.SCRAPE.port, "Running"
    if change == "other port":
        port = "debug"
    elif change == "finished pod":
        phase = "Succeeded"
    elif change == "not managed":
        pod_labels[mon.MANAGED_BY_LABEL] = "someone-else"
    elif change == "tuning trial":  # a Shadow trial's pod: never a server in the dashboards
        from sglang_operator.builders.tuning import TRIAL_COMPONENT, TUNING_LABEL

        pod_labels.update({"app.kubernetes.io/instance": "qwen36-27b-tune-trial-3",
                           mon.COMPONENT_LABEL: TRIAL_COMPONENT, TUNING_LABEL: "qwen36-27b-tune"})
    else:
        pod_labels[mon.NAME_LABEL] = "vllm"
    monitor = mon.pod_monitor("qwen36-27b", "team-a", str(rendered.command.version))
    meta = discovered(pod_labels, port, phase)
    assert relabel(meta, mon.scrape_config()["relabel_configs"]) is None
    assert pod_monitor_target(monitor, meta, pod_labels, port, phase) is None


def test_port_path_and_labels_come_from_the_one_definition() -> None:
    monitor = mon.pod_monitor("s", "ns", "0.5.10")
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    job = mon.scrape_config()
    assert (endpoint["port"], endpoint["path"], endpoint["scheme"]) == (builders.workload.PORT_NAME, "/metrics",
                                                                        "http")
    assert (job["metrics_path"], job["scheme"]) == (endpoint["path"], endpoint["scheme"])
    assert [snake(r) for r in endpoint["relabelings"]] == job["relabel_configs"][len(mon.discovery_filters()):]


def test_both_renderings_drop_a_pods_series_named_like_the_operators() -> None:
    """Autoscaling's built-in queries read the operator's ``sglang_operator_server_*`` series of a server; a pod
    scraped as an SGLang pod (a hand-made one carrying the server's labels too) never feeds them."""
    monitor = mon.pod_monitor("s", "ns", "0.5.10")
    (endpoint,) = monitor["spec"]["podMetricsEndpoints"]
    job = mon.scrape_config()
    assert [snake(r) for r in endpoint["metricRelabelings"]] == job["metric_relabel_configs"]
    for name, kept in (("sglang_operator_server_running_requests", False), ("sglang:num_running_reqs", True),
                       ("sglang_operator_anything", False), ("process_cpu_seconds_total", True)):
        dropped = any(c["action"] == "drop" and re.fullmatch(c["regex"], name) for c in job["metric_relabel_configs"])
        assert dropped is not kept, name


def test_pod_monitor_shape(rendered: builders.Rendered) -> None:
    owner = {"apiVersion": "sglang-operator.io/v1alpha1", "kind": "SGLangServer",
             "metadata": {"name": "qwen36-27b", "namespace": "team-a", "uid": "u-1"}}
    monitor = builders.adopt(mon.pod_monitor("qwen36-27b", "team-a", "0.5.10", {"release": "prom"}, "15s"),
                             owner)
    assert monitor["apiVersion"] == "monitoring.coreos.com/v1" and monitor["kind"] == "PodMonitor"
    assert monitor["metadata"]["ownerReferences"][0]["uid"] == "u-1"
    assert monitor["metadata"]["labels"]["release"] == "prom"
    assert monitor["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "sglang-operator"
    assert monitor["spec"]["podMetricsEndpoints"][0]["interval"] == "15s"
    # the PodMonitor selects exactly the server's pods (the Deployment's selector plus managed-by)
    pod_labels = rendered.deployment["spec"]["template"]["metadata"]["labels"]
    assert monitor["spec"]["selector"]["matchLabels"].items() <= pod_labels.items()
    assert rendered.deployment["spec"]["selector"]["matchLabels"].items() <= \
        monitor["spec"]["selector"]["matchLabels"].items()


def test_cli_prints_the_plain_config(tmp_path: Path) -> None:
    from sglang_operator.entry.cli import app

    result = CliRunner().invoke(app, ["prometheus-config", "--namespace", "team-a", "--kubeconfig-file",
                                      "/etc/kubeconfig", "--scrape-interval", "5s", "--operator-namespace", "ops"])
    assert result.exit_code == 0, result.output
    doc = yaml.safe_load(result.output)
    assert doc == mon.prometheus_config(namespaces=("team-a",), kubeconfig_file="/etc/kubeconfig", interval="5s",
                                        operator_namespaces=("ops",))
    job, operator = doc["scrape_configs"]
    assert job["kubernetes_sd_configs"][0]["namespaces"] == {"names": ["team-a"]}
    assert job["scrape_interval"] == "5s"
    assert operator["job_name"] == "sglang-operator" and operator["honor_labels"] is True
    assert operator["kubernetes_sd_configs"][0] | {"namespaces": {"names": ["ops"]},
                                                   "kubeconfig_file": "/etc/kubeconfig"} \
        == operator["kubernetes_sd_configs"][0]
    assert operator["scrape_interval"] == "5s"
    without = yaml.safe_load(CliRunner().invoke(app, ["prometheus-config", "--no-operator-job"]).output)
    assert [j["job_name"] for j in without["scrape_configs"]] == ["sglang"]


def chart_operator_pod() -> dict[str, Any]:
    """The chart's operator pod template (``helm template``, release ``rel`` in ``ops``)."""
    objs = helm_template(require_helm(), ROOT / "charts" / "sglang-operator", "rel", "ops")
    template: dict[str, Any] = next(o for o in objs if o["kind"] == "Deployment")["spec"]["template"]
    return template


def operator_discovered(pod: dict[str, Any], port_name: str, phase: str = "Running") -> dict[str, str]:
    meta = {"__address__": "10.1.2.9:9808", "__meta_kubernetes_namespace": "ops",
            "__meta_kubernetes_pod_name": "rel-sglang-operator-5f7c-abcde", "__meta_kubernetes_pod_phase": phase,
            "__meta_kubernetes_pod_container_port_name": port_name, "instance": "10.1.2.9:9808"}
    meta |= {mon.meta_pod_label(k): v for k, v in pod["metadata"]["labels"].items()}
    return meta


def test_the_operator_job_scrapes_the_charts_pods_and_keeps_their_labels() -> None:
    pod = chart_operator_pod()
    [container] = pod["spec"]["containers"]
    assert mon.OPERATOR_PORT_NAME in [p["name"] for p in container["ports"]]
    job = mon.operator_scrape_config()
    assert job["honor_labels"] is True  # the operator's own namespace label (the SGLangServer's) wins
    configs = job["relabel_configs"]
    assert relabel(operator_discovered(pod, mon.OPERATOR_PORT_NAME), configs) == {
        "namespace": "ops", "pod": "rel-sglang-operator-5f7c-abcde", "instance": "10.1.2.9:9808"}
    assert relabel(operator_discovered(pod, "healthz"), configs) is None
    assert relabel(operator_discovered(pod, mon.OPERATOR_PORT_NAME, "Failed"), configs) is None
    sglang_pod = {"metadata": {"labels": mon.managed_pod_labels("qwen")}}
    assert relabel(operator_discovered(sglang_pod, mon.OPERATOR_PORT_NAME), configs) is None
    assert relabel(discovered(mon.managed_pod_labels("qwen"), mon.SCRAPE.port), configs) is None
    secure = mon.operator_scrape_config(secure=True)
    assert secure["scheme"] == "https" and secure["authorization"]["credentials_file"] == mon.SERVICE_ACCOUNT_TOKEN


def test_promtool_accepts_the_plain_config(tmp_path: Path) -> None:
    promtool = require_promtool()
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Config", "current-context": "c",
        "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:6443"}}],
        "users": [{"name": "u", "user": {"token": "t"}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}]}))
    for kwargs in ({}, {"kubeconfig_file": str(kubeconfig), "namespaces": ("a", "b"), "interval": "2s",
                        "operator_namespaces": ("ops",), "operator_secure": True}):
        config = tmp_path / "prometheus.yml"
        config.write_text(yaml.safe_dump(mon.prometheus_config(**kwargs)))
        proc = subprocess.run([str(promtool), "check", "config", "--syntax-only", str(config)],
                              capture_output=True, text=True)
        assert proc.returncode == 0, proc.stdout + proc.stderr
    broken = copy.deepcopy(mon.prometheus_config())
    broken["scrape_configs"][0]["relabel_configs"][0]["action"] = "keeep"
    config.write_text(yaml.safe_dump(broken))
    proc = subprocess.run([str(promtool), "check", "config", "--syntax-only", str(config)],
                          capture_output=True, text=True)
    assert proc.returncode != 0 and "keeep" in proc.stdout + proc.stderr
