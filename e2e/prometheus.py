"""A real Prometheus 3 for tests: the binary from ``python -m e2e.tools prometheus``, started on a free loopback
port (or a given one: ``python -m e2e.cluster up --keda``'s 9090) with a configuration the test composes (the
``sglang-operator prometheus-config`` output or the Prometheus Operator's, :mod:`e2e.prometheus_operator`, plus
rule files), a throw-away TSDB, and its HTTP API as small helpers. :func:`with_host_operator` points the printed
configuration's ``sglang-operator`` job at an operator process on this host (autoscaling's built-in queries read its
series).

:class:`PrometheusProcess` ``start()`` waits for ``/-/ready``; ``stop()`` ends it (SIGTERM, then SIGKILL) and
leaves no process behind. Queries raise :class:`PrometheusError` with Prometheus' own error message.
"""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path
from typing import Any

import httpx
import yaml

from e2e import background
from e2e.cluster.procs import free_port
from e2e.conftest import K8sCluster
from e2e.prometheus_operator import pod_target, with_static_targets

OPERATOR_JOB = "sglang-operator"
"""The ``sglang-operator prometheus-config`` job scraping the operator (``honor_labels``)."""
HOST_OPERATOR_POD: dict[str, Any] = {
    "metadata": {"name": "sglang-operator-host", "namespace": "sglang-operator",
                 "labels": {"app.kubernetes.io/name": "sglang-operator"}},
    "spec": {"containers": [{"name": "operator", "ports": [{"name": "metrics", "containerPort": 9808}]}]},
}
"""The pod the job's discovery would find for the chart's operator (its name label, its container port
``metrics``), standing for the operator process on this host."""


def with_host_operator(config: dict[str, Any], address: str) -> dict[str, Any]:
    """``config`` (the ``prometheus-config`` output, with its operator job) whose operator job scrapes ``address``
    (``host:port``: an operator process's ``--metrics-port`` on this host) instead of discovering the chart's pods:
    the target labels discovery would give the chart's operator pod, the job's relabelling and ``honor_labels`` as
    printed (the operator's series keep their servers' namespace). Raises ``KeyError`` without the job."""
    jobs = config["scrape_configs"]
    if not any(j["job_name"] == OPERATOR_JOB for j in jobs):
        raise KeyError(f"no {OPERATOR_JOB} job in the configuration (printed with --no-operator-job?)")
    target = pod_target(HOST_OPERATOR_POD, "metrics", address)
    return config | {"scrape_configs": [with_static_targets(j, [target]) if j["job_name"] == OPERATOR_JOB else j
                                        for j in jobs]}


def install_crds(k8s: K8sCluster, paths: list[Path]) -> None:
    """Install the CRD files ``paths`` (e.g. the Prometheus Operator's) and wait until each is Established."""
    for path in paths:
        k8s.install_crd(path, name=yaml.safe_load(path.read_text())["metadata"]["name"])


class PrometheusError(RuntimeError):
    """Prometheus answered a query with ``status: error`` (``errorType: message``) or not at all."""


class PrometheusProcess:
    """One Prometheus: ``binary``, its directory ``workdir`` (config, TSDB, log), ``config`` (a dict written as
    ``prometheus.yml``), ``port`` on 127.0.0.1 (0: a free one)."""

    def __init__(self, binary: Path, workdir: Path, config: dict[str, Any], port: int = 0) -> None:
        self.binary = binary
        self.workdir = workdir
        self.config = config
        self.requested_port = port
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self.log_path = workdir / "prometheus.log"

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self, timeout: float = 60) -> None:
        self.workdir.mkdir(parents=True, exist_ok=True)
        config_file = self.workdir / "prometheus.yml"
        config_file.write_text(yaml.safe_dump(self.config, sort_keys=False))
        self.port = self.requested_port or free_port()
        argv = [str(self.binary), f"--config.file={config_file}", f"--storage.tsdb.path={self.workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}", "--log.level=info"]
        self.proc = background.spawn(argv, self.log_path)
        background.wait_serving(self.proc, lambda: background.answers_ok(f"{self.url}/-/ready"), "prometheus", "ready",
                                self.log_tail, timeout)

    def stop(self, timeout: float = 15) -> None:
        background.stop_group(self.proc, signal.SIGTERM, timeout)

    def log_tail(self, lines: int = 40) -> str:
        return background.log_tail(self.log_path, lines)

    def api(self, path: str, **params: Any) -> Any:
        """``GET /api/v1/<path>`` → its ``data``. Raises :class:`PrometheusError` on an error answer."""
        try:
            resp = httpx.get(f"{self.url}/api/v1/{path}", params=params, timeout=30)
            body = resp.json()
        except (httpx.HTTPError, ValueError) as err:
            raise PrometheusError(f"{path}: {err}") from err
        if body.get("status") != "success":
            raise PrometheusError(f"{path} {params}: {body.get('errorType')}: {body.get('error')}")
        return body["data"]

    def query(self, expr: str) -> list[dict[str, Any]]:
        """An instant query; the result vector (a scalar result becomes one unlabelled sample)."""
        data = self.api("query", query=expr)
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        result: list[dict[str, Any]] = data["result"]
        return result

    def targets(self) -> list[dict[str, Any]]:
        """The active targets (``labels``, ``health``, ``lastError``, ``scrapePool``)."""
        out: list[dict[str, Any]] = self.api("targets", state="active")["activeTargets"]
        return out

    def rules(self) -> list[dict[str, Any]]:
        """Every loaded rule (``name``, ``health``, ``lastError``, ``state``, ``alerts``)."""
        return [r for g in self.api("rules")["groups"] for r in g["rules"]]

    def alerts(self) -> list[dict[str, Any]]:
        """Active alerts (pending and firing) with their ``labels`` and ``state``."""
        out: list[dict[str, Any]] = self.api("alerts")["alerts"]
        return out

    def metric_names(self) -> set[str]:
        return set(self.api("label/__name__/values"))
