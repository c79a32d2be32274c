"""Autoscaling on the local control plane: KEDA (:class:`~e2e.cluster.keda.KedaStack`: its operator and metrics API
server, registered with the API server) and a Prometheus 3 scraping the SGLang pods and the operator, beside a
running local :class:`~e2e.cluster.launcher.Cluster`.

:func:`start` is the one way they are started: by ``python -m e2e.cluster up --keda``, ``python -m e2e.demo
--autoscale`` (``./demo --autoscale``) and ``e2e/tests/test_keda_local.py`` (which starts the operator first, so it
sees KEDA's CRDs appear). Prometheus listens on ``127.0.0.1:<prometheus_port>`` (default :data:`PROMETHEUS_PORT`,
the ``spec.autoscaling.prometheus.address`` of :data:`SAMPLE`), its configuration the ``sglang-operator
prometheus-config`` output for the cluster's kubeconfig (pod discovery through the API server, every
``scrape_interval``), its operator job pointed at the operator process on this host, ``127.0.0.1:<operator_port>``
(default :data:`OPERATOR_METRICS_PORT`, ``sglang-operator run``'s ``--metrics-port``; the built-in autoscaling queries
read the operator's series), its TSDB and log under the cluster's workdir. :meth:`Autoscaling.stop` stops KEDA (its
ScaledObjects deleted first, while its operator runs) and Prometheus; the cluster stays.
"""

from __future__ import annotations

import socket
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from e2e.cluster.keda import API_SERVICE, KedaStack
from e2e.cluster.launcher import Cluster, ClusterError
from e2e.prometheus import PrometheusProcess, with_host_operator

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "samples" / "local" / "qwen3.6-27b-autoscaling.yaml"
"""The README's autoscaling example: the known-good sample with ``spec.autoscaling`` for this Prometheus."""
PROMETHEUS_PORT = 9090
"""Prometheus' port on 127.0.0.1: the address :data:`SAMPLE` names."""
SCRAPE_INTERVAL = "5s"
OPERATOR_METRICS_PORT = 9808
"""The operator's ``/metrics`` port on 127.0.0.1 that Prometheus scrapes: ``sglang-operator run``'s default."""


def prometheus_url(port: int = PROMETHEUS_PORT) -> str:
    return f"http://127.0.0.1:{port}"


def port_free(port: int) -> bool:
    """Whether 127.0.0.1:``port`` can be bound now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def prometheus_config(cluster: Cluster, scrape_interval: str = SCRAPE_INTERVAL,
                      operator_port: int = OPERATOR_METRICS_PORT) -> dict[str, object]:
    """The ``sglang-operator prometheus-config`` output for ``cluster``, its operator job on the operator process at
    ``127.0.0.1:<operator_port>`` (:func:`e2e.prometheus.with_host_operator`), with the global intervals set to
    ``scrape_interval``."""
    printed = subprocess.run([sys.executable, "-m", "sglang_operator.entry.cli", "prometheus-config",
                              "--kubeconfig-file", str(cluster.kubeconfig), "--scrape-interval", scrape_interval],
                             capture_output=True, text=True, check=True, timeout=60).stdout
    config: dict[str, object] = with_host_operator(yaml.safe_load(printed), f"127.0.0.1:{operator_port}")
    return config | {"global": {"scrape_interval": scrape_interval, "evaluation_interval": scrape_interval}}


@dataclass
class Autoscaling:
    """KEDA and Prometheus as :func:`start` left them."""

    keda: KedaStack
    prometheus: PrometheusProcess
    scrape_interval: str
    operator_port: int = OPERATOR_METRICS_PORT

    @property
    def prometheus_url(self) -> str:
        return self.prometheus.url

    def describe(self) -> list[str]:
        """What runs, one line each (``# `` comments, as ``up`` prints them)."""
        keda_logs = self.keda.cluster.workdir / "logs" if self.keda.cluster.workdir else "?"
        return [f"# KEDA v2.21.0 started in {self.keda.startup_seconds:.1f} s: keda-operator and keda-adapter (the "
                f"metrics API server, APIService {API_SERVICE} at {self.keda.address}); logs in {keda_logs}",
                f"# Prometheus at {self.prometheus_url}, scraping the SGLang pods and the operator at "
                f"127.0.0.1:{self.operator_port} every {self.scrape_interval} (sglang-operator prometheus-config; "
                f"autoscaling reads the operator's series); config and log in {self.prometheus.workdir}",
                f"# spec.autoscaling.prometheus.address: {self.prometheus_url} (as in "
                f"{SAMPLE.relative_to(ROOT)})"]

    def alive(self) -> list[str]:
        """The names of the processes that have exited (empty: all run)."""
        dead = [c.name for c in (self.keda.operator, self.keda.adapter) if c is not None and not c.alive()]
        proc = self.prometheus.proc
        return dead + (["prometheus"] if proc is None or proc.poll() is not None else [])

    def stop(self) -> None:
        """KEDA first (its ScaledObjects and APIService go, its processes stop), then Prometheus. Idempotent."""
        try:
            self.keda.stop()
        finally:
            self.prometheus.stop()


def start(cluster: Cluster, *, keda_home: Path | None = None, prometheus_binary: Path | None = None,
          prometheus_port: int = PROMETHEUS_PORT, scrape_interval: str = SCRAPE_INTERVAL,
          operator_port: int = OPERATOR_METRICS_PORT, timeout: float = 120.0) -> Autoscaling:
    """Start Prometheus on ``prometheus_port`` (0: a free port; scraping the operator's ``--metrics-port``
    ``operator_port`` on 127.0.0.1 too), then KEDA (its CRDs installed and Established first), for the running
    ``cluster``. ``keda_home``: KEDA's build (default: the cached one, or ``pytest.fail``
    naming ``python -m e2e.build_keda``); ``prometheus_binary``: likewise (``python -m e2e.tools prometheus``).
    Raises :class:`ClusterError` (the port taken, KEDA not serving); nothing is left running then."""
    from e2e.tools import require_prometheus

    if prometheus_port and not port_free(prometheus_port):
        raise ClusterError(f"127.0.0.1:{prometheus_port} is taken: Prometheus cannot listen there (another "
                           "Prometheus, another `python -m e2e.cluster up --keda`?); choose --prometheus-port")
    assert cluster.workdir is not None
    prom = PrometheusProcess(prometheus_binary or require_prometheus(), cluster.workdir / "prometheus",
                             prometheus_config(cluster, scrape_interval, operator_port), port=prometheus_port)
    try:
        prom.start()
    except RuntimeError as exc:
        prom.stop()
        raise ClusterError(f"Prometheus did not start: {exc}") from exc
    try:
        keda = KedaStack(cluster, home=keda_home).start(timeout)
    except BaseException:
        prom.stop()
        raise
    return Autoscaling(keda, prom, scrape_interval, operator_port)
